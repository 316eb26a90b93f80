//! Hostile and broken requesters against a real responder: malformed transport headers
//! (RFC 8166 §4.5), a requester exceeding its credits (§3.3.1, §8.1.4), bogus rkeys and
//! out-of-bounds chunks (§4.5.3), a peer that goes away mid-RPC. A raw peer built directly
//! on the soft fabric sends hand-built messages; each case asserts what comes back (or
//! that nothing does), the responder's counters, and whether the connection survives.

mod common;
mod raw;

use std::time::{Duration, Instant};

use common::*;
use raw::*;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::{MemoryRegion, QueuePair, WcStatus};
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::stats::Snapshot;
use rpcrdma_proto::header::{Body, Chunks, Header, HeaderView, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::rpc::{AcceptStat, ReplyHeader};

/// A raw requester connected to a fresh connection of `srv`.
fn raw_connect(
    srv: &mut Server<Soft>,
    addr: &SoftAddr,
    nrecv: u32,
) -> (RawClient, ServerConn<Soft>) {
    let a = addr.clone();
    let t = std::thread::spawn(move || RawClient::connect(&a, nrecv));
    let conn = srv.accept(Duration::from_secs(5)).expect("accept");
    (t.join().expect("raw connect"), conn)
}

fn raw_pair(cfg: ConnConfig) -> (RawClient, ServerConn<Soft>, Server<Soft>, SoftAddr) {
    let (mut srv, addr) = soft_server(dispatch(), cfg).unwrap();
    let (c, s) = raw_connect(&mut srv, &addr, 64);
    (c, s, srv, addr)
}

/// Polls `s` until its connection is torn down; panics with `what` after 5 s.
fn wait_dead(s: &mut ServerConn<Soft>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.is_dead() {
        s.poll();
        assert!(Instant::now() < deadline, "{what}");
        std::thread::yield_now();
    }
}

/// A NULL call on the well-behaved connection succeeds.
fn good_null_ok(good: &mut Client<Soft>, gs: &mut ServerConn<Soft>) -> bool {
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    call(good, gs, &null, |x| x.result.unwrap().is_success())
}

/// The counter `e` must move by one, the others not at all.
fn check_counters(name: &str, before: &Snapshot, after: &Snapshot, e: Expect) {
    let d = |f: fn(&Snapshot) -> u64| f(after) - f(before);
    let want = |x: bool| u64::from(x);
    let got = [
        d(|s| s.discards),
        d(|s| s.err_vers),
        d(|s| s.err_chunk),
        d(|s| s.garbage_args),
        d(|s| s.prog_unavail),
        d(|s| s.prog_mismatch),
        d(|s| s.proc_unavail),
        d(|s| s.system_err),
    ];
    let expected = [
        want(e == Expect::Discard),
        want(e == Expect::ErrVers),
        want(e == Expect::ErrChunk),
        want(e == Expect::Accepted(AcceptStat::GarbageArgs)),
        want(e == Expect::Accepted(AcceptStat::ProgUnavail)),
        want(matches!(
            e,
            Expect::Accepted(AcceptStat::ProgMismatch { .. })
        )),
        want(e == Expect::Accepted(AcceptStat::ProcUnavail)),
        want(e == Expect::RpcMismatch),
    ];
    assert_eq!(
        got, expected,
        "{name}: [discards, err_vers, err_chunk, garbage_args, prog_unavail, prog_mismatch, \
         proc_unavail, system_err]"
    );
    assert_eq!(after.conn_lost, 0, "{name}: connection kept");
    assert_eq!(after.wc_errors, 0, "{name}: no work completion error");
}

/// Every malformed message gets its RFC 8166 §4.5 verdict, the counters move accordingly,
/// and the connection keeps serving: a NULL Call on it succeeds after each one.
#[test]
fn malformed_headers_get_their_verdict_and_the_connection_survives() {
    let (mut c, mut s, _srv, _addr) = raw_pair(config());
    let grant = s.grant();
    c.null_ok(&mut s, 1);
    let data = c.ends.data_at(0);
    let (h, off) = (data.rkey, data.addr);
    let seg = |len: u32| Segment::new(h, len, off);
    let mut cases: Vec<(&str, Vec<u8>, Expect)> = Vec::new();

    let null = null_call(0x100);
    cases.push(("empty Send", vec![], Expect::Discard));
    cases.push(("20 bytes", null[..20].to_vec(), Expect::Discard));
    cases.push(("27 bytes", null[..27].to_vec(), Expect::Discard));
    let mut v2 = null_call(0x101);
    set_word(&mut v2, 4, 2);
    cases.push(("rdma_vers 2", v2, Expect::ErrVers));
    let mut v0 = null_call(0x102);
    set_word(&mut v0, 4, 0);
    cases.push(("rdma_vers 0", v0, Expect::ErrVers));
    let mut badproc = null_call(0x103);
    set_word(&mut badproc, 12, 7);
    cases.push(("rdma_proc 7", badproc, Expect::ErrChunk));
    let mut payload = call_header(0x104, NULL);
    let msgp = Header {
        xid: 0x104,
        vers: 1,
        credit: 32,
        body: Body::Msgp {
            align: 4,
            thresh: 1024,
            chunks: Chunks::NONE,
        },
    };
    cases.push(("RDMA_MSGP", message(&msgp, &payload), Expect::ErrChunk));
    let done = Header {
        xid: 0x105,
        vers: 1,
        credit: 32,
        body: Body::Done,
    };
    cases.push(("RDMA_DONE", message(&done, &[0; 12]), Expect::Discard));
    let err = Header::error(0x106, 1, 32, RdmaError::Vers { low: 1, high: 1 });
    cases.push((
        "RDMA_ERROR at a responder",
        message(&err, &[]),
        Expect::Discard,
    ));
    let err = Header::error(0x107, 9, 32, RdmaError::Chunk);
    cases.push((
        "RDMA_ERROR of another version",
        message(&err, &[0; 8]),
        Expect::Discard,
    ));
    // Undecodable lists.
    let mut disc = null_call(0x108)[..16].to_vec();
    disc.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]);
    cases.push(("read-list discriminator 2", disc, Expect::ErrChunk));
    let mut absurd = null_call(0x109)[..16].to_vec();
    absurd.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    cases.push(("write chunk of 2^31 segments", absurd, Expect::ErrChunk));
    let mut trunc = null_call(0x10a)[..16].to_vec();
    trunc.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9]);
    cases.push(("read segment cut short", trunc, Expect::ErrChunk));
    let wrap = [Segment::new(h, 16, u64::MAX - 4)];
    cases.push((
        "write segment wrapping 2^64",
        msg_call(
            0x10b,
            Chunks {
                writes: &[&wrap],
                ..Chunks::NONE
            },
            NULL,
            &[],
        ),
        Expect::ErrChunk,
    ));
    // XID and payload problems (G-9).
    let mut xid = null_call(0x10c);
    set_word(&mut xid, 28, 0x999);
    cases.push(("rdma_xid ≠ RPC XID", xid, Expect::ErrChunk));
    cases.push((
        "RDMA_MSG without an RPC message",
        message(&Header::msg(0x10d, 32, Chunks::NONE), &[]),
        Expect::ErrChunk,
    ));
    let mut garbage = 0x10eu32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2]);
    cases.push((
        "valid header, truncated RPC Call",
        message(&Header::msg(0x10e, 32, Chunks::NONE), &garbage),
        Expect::Accepted(AcceptStat::GarbageArgs),
    ));
    let mut bad_auth = call_header(0x10f, NULL);
    set_word(&mut bad_auth, 28, 0xffff);
    cases.push((
        "RPC credential longer than the message",
        message(&Header::msg(0x10f, 32, Chunks::NONE), &bad_auth),
        Expect::Accepted(AcceptStat::GarbageArgs),
    ));
    // RDMA_NOMSG without its Payload stream.
    cases.push((
        "RDMA_NOMSG with no chunk",
        nomsg(0x110, Chunks::NONE),
        Expect::ErrChunk,
    ));
    let rc = [seg(4096)];
    cases.push((
        "RDMA_NOMSG with only a Reply chunk",
        nomsg(
            0x111,
            Chunks {
                reply: Some(&rc),
                ..Chunks::NONE
            },
        ),
        Expect::ErrChunk,
    ));
    let p8 = [ReadSegment::new(8, h, 64, off)];
    cases.push((
        "RDMA_NOMSG whose Read chunk is not at Position zero",
        nomsg(
            0x112,
            Chunks {
                reads: &p8,
                ..Chunks::NONE
            },
        ),
        Expect::ErrChunk,
    ));
    // Read-list positions (§3.4.5, G-7, G-8, G-14).
    let wargs = [7u32.to_be_bytes(), 16u32.to_be_bytes()].concat();
    let mis = [ReadSegment::new(41, h, 16, off)];
    cases.push((
        "misaligned read position",
        msg_call(
            0x113,
            Chunks {
                reads: &mis,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::ErrChunk,
    ));
    let p0 = [ReadSegment::new(0, h, 64, off)];
    cases.push((
        "RDMA_MSG with a Position-Zero chunk",
        msg_call(
            0x114,
            Chunks {
                reads: &p0,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::ErrChunk,
    ));
    let split = [
        ReadSegment::new(48, h, 8, off),
        ReadSegment::new(52, h, 8, off),
        ReadSegment::new(48, h, 8, off + 8),
    ];
    cases.push((
        "one position in two non-adjacent places",
        msg_call(
            0x115,
            Chunks {
                reads: &split,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::ErrChunk,
    ));
    let beyond = [ReadSegment::new(4096, h, 16, off)];
    cases.push((
        "read position beyond the Payload stream",
        msg_call(
            0x116,
            Chunks {
                reads: &beyond,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::Accepted(AcceptStat::GarbageArgs),
    ));
    let inside = [ReadSegment::new(8, h, 16, off)];
    cases.push((
        "Read chunk inside the RPC Call header",
        msg_call(
            0x117,
            Chunks {
                reads: &inside,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::Accepted(AcceptStat::GarbageArgs),
    ));
    // The RPC layer's answers.
    let rh = ReplyHeader::accepted_success(0x118);
    payload = vec![0; rh.encoded_len()];
    rh.encode(&mut payload).unwrap();
    cases.push((
        "an RPC Reply sent to a responder",
        message(&Header::msg(0x118, 32, Chunks::NONE), &payload),
        Expect::Discard,
    ));
    cases.push((
        "RPC version 3",
        message(
            &Header::msg(0x119, 32, Chunks::NONE),
            &call_header_of(0x119, 3, PROG, VERS, NULL),
        ),
        Expect::RpcMismatch,
    ));
    cases.push((
        "unknown program",
        message(
            &Header::msg(0x11a, 32, Chunks::NONE),
            &call_header_of(0x11a, 2, 99, 1, 0),
        ),
        Expect::Accepted(AcceptStat::ProgUnavail),
    ));
    cases.push((
        "unknown program version",
        message(
            &Header::msg(0x11b, 32, Chunks::NONE),
            &call_header_of(0x11b, 2, PROG, 9, 0),
        ),
        Expect::Accepted(AcceptStat::ProgMismatch {
            low: VERS,
            high: VERS_TIMED,
        }),
    ));
    cases.push((
        "unknown procedure",
        message(
            &Header::msg(0x11c, 32, Chunks::NONE),
            &call_header_of(0x11c, 2, PROG, VERS, 77),
        ),
        Expect::Accepted(AcceptStat::ProcUnavail),
    ));
    cases.push((
        "ECHO whose opaque runs past the arguments",
        msg_call(0x11d, Chunks::NONE, ECHO, &[0, 0, 1, 0, 1, 2, 3, 4]),
        Expect::Accepted(AcceptStat::GarbageArgs),
    ));

    for (i, (name, bytes, e)) in cases.iter().enumerate() {
        let before = s.snapshot();
        assert_eq!(c.send(bytes), WcStatus::Success, "{name}: sent");
        if *e == Expect::Discard {
            c.expect_nothing(&mut s);
        } else {
            let m = c.expect(&mut s);
            check_reply(name, &m, bytes, grant, *e);
        }
        let after = s.snapshot();
        check_counters(name, &before, &after, *e);
        assert!(!s.is_dead(), "{name}: connection kept");
        assert_eq!(s.in_process(), 0, "{name}: nothing left in process");
        // The connection survives: the next Call is served (RFC 8166 §4.5).
        c.null_ok(&mut s, 0x1000 + i as u32);
    }
    assert_eq!(s.snapshot().credit_overruns, 0);
}

/// A Send larger than the responder's receive buffers ends that connection (RFC 8166 §3.3:
/// "the RDMA connection can be terminated"), and only that one.
#[test]
fn oversized_send_ends_only_its_connection() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let (mut good, mut gs) = connect_to(&mut srv, &addr, config()).unwrap();
    let (mut c, mut s) = raw_connect(&mut srv, &addr, 8);
    c.null_ok(&mut s, 1);
    let mut big = null_call(2);
    big.resize(4097, 0);
    let st = c.send(&big);
    assert_ne!(st, WcStatus::Success, "the receiver could not take it");
    wait_dead(&mut s, "the connection was not torn down");
    let st = s.snapshot();
    assert_eq!((st.conn_lost, st.wc_errors), (1, 1));
    assert_eq!(s.poll(), 0, "a dead connection does nothing");
    assert!(good_null_ok(&mut good, &mut gs));
}

/// A requester that never posts a receive: the responder's reply meets RNR, its connection
/// is torn down cleanly; others are unaffected.
#[test]
fn requester_without_receives_loses_only_its_connection() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let (mut good, mut gs) = connect_to(&mut srv, &addr, config()).unwrap();
    let (mut c, mut s) = raw_connect(&mut srv, &addr, 0);
    assert_eq!(c.send(&null_call(1)), WcStatus::Success);
    wait_dead(&mut s, "the connection was not torn down");
    assert_eq!(s.snapshot().conn_lost, 1);
    assert!(good_null_ok(&mut good, &mut gs));
}

/// RFC 8166 §3.3.1, §8.1.4: Calls beyond the grant are counted and still served while
/// receives are posted; beyond the posted receives the requester's own Send fails (RNR),
/// and the responder tears that connection down without harm to the others.
#[test]
fn requester_exceeding_its_credits() {
    let cfg = ConnConfig {
        credits: 8,
        initial_grant: 2,
        ..config()
    };
    let (mut srv, addr) = soft_server(dispatch(), cfg).unwrap();
    let (mut good, mut gs) = connect_to(&mut srv, &addr, config()).unwrap();
    let (mut c, mut s) = raw_connect(&mut srv, &addr, 64);
    c.null_ok(&mut s, 1);
    assert_eq!(s.snapshot().credit_overruns, 0);
    // Six Calls at once against a grant of 2: all served, the four beyond it counted.
    for x in 0..6 {
        assert_eq!(c.send(&null_call(100 + x)), WcStatus::Success);
    }
    let mut xids: Vec<u32> = (0..6).map(|_| rpc_reply(&c.expect(&mut s)).xid).collect();
    xids.sort();
    assert_eq!(xids, (100..106).collect::<Vec<_>>());
    let st = s.snapshot();
    assert_eq!(
        st.credit_overruns, 4,
        "Calls beyond the grant of 2 are counted"
    );
    assert_eq!(st.conn_lost, 0);
    assert_eq!(s.grant(), 2);
    // Ten Calls at once against 9 posted receives (one per credit, and the spare one a reply
    // may leave before): the tenth Send finds none.
    let mut statuses = Vec::new();
    for x in 0..10 {
        statuses.push(c.send(&null_call(200 + x)));
    }
    assert!(statuses[..9].iter().all(|s| *s == WcStatus::Success));
    assert_eq!(statuses[9], WcStatus::RnrRetryExcErr, "RNR at the sender");
    wait_dead(&mut s, "the overrun connection stays up");
    let st = s.snapshot();
    assert_eq!(st.conn_lost, 1);
    assert!(st.credit_overruns >= 4 + 7);
    // The other connection keeps working.
    for _ in 0..10 {
        assert!(good_null_ok(&mut good, &mut gs));
    }
    assert_eq!(gs.snapshot().credit_overruns, 0);
}

/// The raw peer itself is sound: a WRITE through its Read chunk and a READ into its Write
/// chunk work, and a Long Call through a Position-Zero chunk is answered.
#[test]
fn raw_peer_chunks_work_when_valid() {
    let (mut c, mut s, _srv, _addr) = raw_pair(config());
    let data = pattern(9, 3000);
    c.ends.data.write_at(0, &data);
    let d = c.ends.data_at(0);
    let rd = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 3000, d.addr)];
    let m = msg_call(
        1,
        Chunks {
            reads: &rd,
            ..Chunks::NONE
        },
        WRITE,
        &words(9, 3000),
    );
    assert_eq!(c.send(&m), WcStatus::Success);
    let r = c.expect(&mut s);
    let h = HeaderView::parse(&r).unwrap();
    let rpc = rpc_reply(&r);
    assert!(rpc.is_success());
    let results = &h.payload()[24..];
    assert_eq!(
        &results[..8],
        &[0, 0, 0, 1, 0, 0, 0x0b, 0xb8],
        "ok = 1, n = 3000"
    );

    let wseg = [Segment::new(d.rkey, 5000, d.addr + 8192)];
    let m = msg_call(
        2,
        Chunks {
            writes: &[&wseg],
            ..Chunks::NONE
        },
        READ,
        &words(5000, 4),
    );
    assert_eq!(c.send(&m), WcStatus::Success);
    let r = c.expect(&mut s);
    let h = HeaderView::parse(&r).unwrap();
    assert!(rpc_reply(&r).is_success());
    let echoed: Vec<_> = h.write_list().iter().next().unwrap().iter().collect();
    assert_eq!(echoed, vec![Segment::new(d.rkey, 5000, d.addr + 8192)]);
    let mut got = vec![0; 5000];
    c.ends.data.read_at(8192, &mut got);
    assert_eq!(got, pattern(4, 5000));

    // Long Call: the whole RPC Call in a Position-Zero chunk.
    let mut call = call_header(3, ECHO);
    call.extend_from_slice(&opaque(&pattern(5, 100)));
    c.ends.data.write_at(65536, &call);
    let p0 = [ReadSegment::new(
        0,
        d.rkey,
        call.len() as u32,
        d.addr + 65536,
    )];
    assert_eq!(
        c.send(&nomsg(
            3,
            Chunks {
                reads: &p0,
                ..Chunks::NONE
            }
        )),
        WcStatus::Success
    );
    let r = c.expect(&mut s);
    assert_eq!(rpc_reply(&r).xid, 3);
    assert!(rpc_reply(&r).is_success());
    assert_eq!(s.snapshot().long_calls, 1);
}

/// What a Long Call's Position-Zero chunk holds is judged as an inline Call would be
/// (RFC 8166 §4, §4.5.2): an RPC Reply is discarded (the connection goes on), an RPC header
/// that does not decode is answered GARBAGE_ARGS.
#[test]
fn position_zero_chunks_are_judged_as_inline_payloads() {
    let (mut c, mut s, _srv, _addr) = raw_pair(config());
    let d = c.ends.data_at(0);
    let long_call = |c: &mut RawClient, xid: u32, content: &[u8]| {
        c.ends.data.write_at(65536, content);
        let p0 = [ReadSegment::new(
            0,
            d.rkey,
            content.len() as u32,
            d.addr + 65536,
        )];
        let m = nomsg(
            xid,
            Chunks {
                reads: &p0,
                ..Chunks::NONE
            },
        );
        assert_eq!(c.send(&m), WcStatus::Success);
    };
    // An RPC Reply (to nothing) where the Call should be.
    let rh = ReplyHeader::accepted_success(0x51);
    let mut reply = vec![0; rh.encoded_len()];
    rh.encode(&mut reply).unwrap();
    let before = s.snapshot();
    long_call(&mut c, 0x51, &reply);
    c.expect_nothing(&mut s);
    assert_eq!(s.snapshot().discards - before.discards, 1);
    // A Call header cut short.
    let call = call_header(0x52, ECHO);
    long_call(&mut c, 0x52, &call[..12]);
    let r = c.expect(&mut s);
    assert_eq!(rpc_reply(&r).xid, 0x52);
    assert_eq!(rpc_reply(&r).accept_stat(), Some(AcceptStat::GarbageArgs));
    // The connection goes on.
    c.null_ok(&mut s, 0x53);
}

/// Chunk problems visible before any RDMA operation are answered with ERR_CHUNK and the
/// connection survives: a Write chunk or Reply chunk too small for the result (§4.5.3:
/// "A Responder might detect this problem before attempting to write past the end"), no
/// Reply chunk for a reply over the threshold, a Read chunk too large to pull (§8.1.4).
#[test]
fn chunk_resources_too_small_or_too_large_get_err_chunk() {
    let (mut c, mut s, _srv, _addr) = raw_pair(config());
    let grant = s.grant();
    let d = c.ends.data_at(0);
    let small_w = [Segment::new(d.rkey, 100, d.addr)];
    let small_r = [Segment::new(d.rkey, 100, d.addr + 4096)];
    let huge = [ReadSegment::new(
        WRITE_DATA_POS,
        d.rkey,
        0x7fff_0000,
        d.addr,
    )];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "Write chunk smaller than the result",
            msg_call(
                1,
                Chunks {
                    writes: &[&small_w],
                    ..Chunks::NONE
                },
                READ,
                &words(5000, 1),
            ),
        ),
        (
            "Reply chunk smaller than the reply",
            msg_call(
                2,
                Chunks {
                    reply: Some(&small_r),
                    ..Chunks::NONE
                },
                READ,
                &words(5000, 1),
            ),
        ),
        (
            "reply over the threshold without a Reply chunk",
            msg_call(3, Chunks::NONE, READ, &words(5000, 1)),
        ),
        (
            "Read chunk larger than the responder pulls",
            msg_call(
                4,
                Chunks {
                    reads: &huge,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 0x7fff_0000),
            ),
        ),
    ];
    for (i, (name, m)) in cases.iter().enumerate() {
        let before = s.snapshot();
        assert_eq!(c.send(m), WcStatus::Success);
        let r = c.expect(&mut s);
        check_reply(name, &r, m, grant, Expect::ErrChunk);
        let after = s.snapshot();
        check_counters(name, &before, &after, Expect::ErrChunk);
        assert_eq!(
            after.bytes_read, before.bytes_read,
            "{name}: nothing pulled"
        );
        c.null_ok(&mut s, 100 + i as u32);
    }
}

/// What a raw requester sees of a torn-down connection: its receives flush.
fn wait_torn_down(c: &mut RawClient, s: Option<&mut ServerConn<Soft>>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = s;
    loop {
        if let Some(s) = s.as_deref_mut() {
            s.poll();
        }
        c.ends.poll();
        if !c.ends.recv_errors.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the raw peer's connection is still up"
        );
        std::thread::yield_now();
    }
    assert!(
        c.ends.received.is_empty(),
        "no reply on a torn-down connection"
    );
    assert!(c
        .ends
        .recv_errors
        .iter()
        .all(|s| *s == WcStatus::WrFlushErr));
}

/// Bogus rkeys and out-of-bounds segments can only be found by the RDMA operation itself
/// (RFC 8166 §4.5.3): it fails with a remote access error, which is fatal to that
/// connection; the responder tears it down without a reply, and other connections go on.
#[test]
fn bogus_rkeys_tear_down_only_their_connection() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let (mut good, mut gs) = connect_to(&mut srv, &addr, config()).unwrap();
    for case in 0..5 {
        let (mut c, mut s) = raw_connect(&mut srv, &addr, 16);
        c.null_ok(&mut s, 1);
        let d = c.ends.data_at(0);
        let m = match case {
            0 => {
                let rd = [ReadSegment::new(
                    WRITE_DATA_POS,
                    d.rkey ^ 0x5a00,
                    64,
                    d.addr,
                )];
                msg_call(
                    2,
                    Chunks {
                        reads: &rd,
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                )
            }
            1 => {
                let end = d.addr + DATA_LEN as u64 - 32;
                let rd = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 64, end)];
                msg_call(
                    2,
                    Chunks {
                        reads: &rd,
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                )
            }
            2 => {
                let ws = [Segment::new(0xdead_be00, 4096, d.addr)];
                msg_call(
                    2,
                    Chunks {
                        writes: &[&ws],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(4096, 1),
                )
            }
            3 => {
                let ws = [Segment::new(d.rkey, 4096, d.addr + DATA_LEN as u64 - 100)];
                msg_call(
                    2,
                    Chunks {
                        writes: &[&ws],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(4096, 1),
                )
            }
            _ => {
                // A Long Call whose Position-Zero chunk names a bad rkey.
                let p0 = [ReadSegment::new(0, d.rkey.wrapping_add(0x100), 64, d.addr)];
                nomsg(
                    2,
                    Chunks {
                        reads: &p0,
                        ..Chunks::NONE
                    },
                )
            }
        };
        assert_eq!(c.send(&m), WcStatus::Success);
        wait_torn_down(&mut c, Some(&mut s));
        wait_dead(&mut s, &format!("case {case}: the connection stays up"));
        let st = s.snapshot();
        assert_eq!((st.conn_lost, st.wc_errors), (1, 1), "case {case}");
        assert_eq!(s.poll(), 0);
        assert!(good_null_ok(&mut good, &mut gs));
    }
}

/// A requester that goes away mid-RPC: the responder's connection dies (no reply, no
/// panic, no hang) whether the peer destroys its queue pair, disconnects or drops the
/// connection, and whether the Call was Short, waiting for an RDMA Read or deferred.
#[test]
fn peer_gone_mid_rpc_kills_only_its_connection() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let (mut good, mut gs) = connect_to(&mut srv, &addr, config()).unwrap();
    for how in 0..3 {
        for what in 0..3 {
            let (mut c, mut s) = raw_connect(&mut srv, &addr, 16);
            c.null_ok(&mut s, 1);
            let d = c.ends.data_at(0);
            c.ends.data.write_at(0, &pattern(3, 4000));
            let rd = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 4000, d.addr)];
            let n = match what {
                0 => 1,
                1 => 1,
                _ => 12,
            };
            for x in 0..n {
                let m = if what == 1 {
                    msg_call(
                        10 + x,
                        Chunks {
                            reads: &rd,
                            ..Chunks::NONE
                        },
                        WRITE,
                        &words(3, 4000),
                    )
                } else {
                    null_call(10 + x)
                };
                assert_eq!(c.send(&m), WcStatus::Success);
            }
            match how {
                0 => drop(c),
                1 => c.ends.qp.disconnect(),
                _ => c.ends.qp.faults().drop_connection(),
            }
            wait_dead(&mut s, &format!("how {how} what {what}: not noticed"));
            assert_eq!(s.snapshot().conn_lost, 1);
            assert_eq!(s.poll(), 0);
            drop(s);
            assert!(good_null_ok(&mut good, &mut gs));
        }
    }
}

/// Mutated valid Calls of every form (words overwritten with boundary values, truncation,
/// trailing bytes): the responder never panics or hangs; every message is answered,
/// discarded or ends its connection, and a connection that survives serves the next Call
/// with nothing left in process.
#[test]
fn mutated_calls_never_break_the_responder() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let (mut c, mut s) = raw_connect(&mut srv, &addr, 64);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut torn_down = 0;
    let mut next_xid = 0x4000_0000u32;
    for iter in 0..600 {
        let d = c.ends.data_at(0);
        c.ends.data.write_at(0, &pattern(3, 256));
        let xid = iter as u32 + 1;
        let mut long = call_header(xid, ECHO);
        long.extend_from_slice(&opaque(&pattern(2, 64)));
        c.ends.data.write_at(4096, &long);
        let rd = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 64, d.addr)];
        let ws = [Segment::new(d.rkey, 256, d.addr + 8192)];
        let rc = [Segment::new(d.rkey, 8192, d.addr + 16384)];
        let p0 = [ReadSegment::new(
            0,
            d.rkey,
            long.len() as u32,
            d.addr + 4096,
        )];
        let mut m = match rng.below(5) {
            0 => null_call(xid),
            1 => msg_call(
                xid,
                Chunks {
                    reads: &rd,
                    ..Chunks::NONE
                },
                WRITE,
                &words(3, 64),
            ),
            2 => msg_call(
                xid,
                Chunks {
                    writes: &[&ws],
                    ..Chunks::NONE
                },
                READ,
                &words(256, 1),
            ),
            3 => nomsg(
                xid,
                Chunks {
                    reads: &p0,
                    reply: Some(&rc),
                    ..Chunks::NONE
                },
            ),
            _ => msg_call(
                xid,
                Chunks {
                    reply: Some(&rc),
                    ..Chunks::NONE
                },
                ECHO,
                &opaque(&[1; 9]),
            ),
        };
        for _ in 0..1 + rng.below(3) {
            match rng.below(8) {
                0 => {
                    let n = rng.below(m.len() as u64 + 1) as usize;
                    m.truncate(n);
                }
                1 => m.extend((0..1 + rng.below(64)).map(|_| rng.next() as u8)),
                _ if m.len() >= 4 => {
                    let at = 4 * rng.below(m.len().min(160) as u64 / 4) as usize;
                    let v = rng.word();
                    set_word(&mut m, at, v);
                }
                _ => {}
            }
        }
        assert_eq!(c.send(&m), WcStatus::Success, "iteration {iter}");
        for _ in 0..50 {
            s.poll();
        }
        c.ends.poll();
        c.ends.received.clear();
        if s.is_dead() || !c.ends.recv_errors.is_empty() {
            // Ended by a failed RDMA operation: both ends know, the next connection works.
            wait_dead(&mut s, &format!("iteration {iter}: half-dead connection"));
            assert_eq!(s.poll(), 0);
            torn_down += 1;
            let (c2, s2) = raw_connect(&mut srv, &addr, 64);
            c = c2;
            s = s2;
            continue;
        }
        // Survived: the next Call is served and nothing is left in process.
        next_xid += 1;
        assert_eq!(c.send(&null_call(next_xid)), WcStatus::Success);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = c.expect(&mut s);
            if w(&r, 0) == next_xid {
                assert!(rpc_reply(&r).is_success(), "iteration {iter}");
                break;
            }
            assert!(Instant::now() < deadline);
        }
        assert_eq!(s.in_process(), 0, "iteration {iter}: {m:02x?}");
    }
    assert!(
        torn_down < 300,
        "most mutations keep the connection: {torn_down}"
    );
}
