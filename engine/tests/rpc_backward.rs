//! The backward direction of RPC-over-RDMA version 1 (RFC 8167) on the soft fabric: a
//! server calling its client on the client's connection, as NFSv4.1 callbacks do.
//!
//! - Engine to engine: backward Calls interleaved with forward Calls under load, neither
//!   direction overrunning its credits.
//! - The requester against a raw server: a backward Call served with the client's grant;
//!   Calls with chunks refused with ERR_CHUNK, an undecodable one with GARBAGE_ARGS; a
//!   client that serves nothing drops them and goes on.
//! - The responder against a raw client: the Call's form, a Reply's grant, an RDMA_ERROR,
//!   a Reply with a forged XID dropped; a Call the client drops given up after
//!   `reverse_timeout`.

mod common;
mod raw;

use std::time::{Duration, Instant};

use common::*;
use raw::*;
use rpcrdma_engine::conn::{ConnConfig, Version, Wire};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::{Provider, WcStatus};
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::responder::{ReverseError, ServerConn};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, Proc, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::rpc::{CallHeader, ReplyHeader, RpcMessage};

/// Reverse credits of the engine's ends in these tests.
const REV: u32 = 4;

#[test]
fn backward_calls_interleave_with_forward_calls_without_credit_overrun() {
    common::reverse::under_load(Version::V1, Version::V1, Wire::V1);
}

#[test]
fn an_open_server_calls_back_a_version_1_client() {
    common::reverse::under_load(Version::Auto, Version::V1, Wire::V1);
}

/// A version 1 client connected to a raw server; it serves backward Calls from the
/// built-in program when `serving`.
fn client_of_raw(serving: bool) -> (Client<Soft>, Ends, RawServer) {
    let mut rs = RawServer::listen();
    let addr = rs.addr.clone();
    let cfg = ConnConfig {
        reverse_credits: REV,
        ..config()
    };
    let t = std::thread::spawn(move || {
        let device = Soft::open_device(None).unwrap();
        if serving {
            Client::<Soft>::connect_serving(&device, &addr, cfg, dispatch()).unwrap()
        } else {
            Client::<Soft>::connect(&device, &addr, cfg).unwrap()
        }
    });
    let (ends, _) = rs.accept(false);
    (t.join().unwrap(), ends, rs)
}

/// Polls the client (panicking on any completion) until the raw server receives a
/// message; `None` after `wait`.
fn answer_of(c: &mut Client<Soft>, e: &mut Ends, wait: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        c.poll_completions(|x| panic!("unexpected completion {:?}", x.result.map(|_| ())));
        e.poll();
        if let Some(m) = e.received.pop_front() {
            return Some(m);
        }
    }
    None
}

/// A NULL from the client, answered by the raw server: forward traffic still flows.
fn forward_null(c: &mut Client<Soft>, e: &mut Ends) {
    c.submit(&CallArgs::new(PROG, VERS, NULL, &[], 0), 1)
        .unwrap();
    let m = answer_of(c, e, Duration::from_secs(5)).expect("the forward Call");
    let xid = HeaderView::parse(&m).unwrap().xid();
    let mut reply = vec![0; 64];
    let n = ReplyHeader::accepted_success(xid)
        .encode(&mut reply)
        .unwrap();
    reply.truncate(n);
    assert_eq!(
        e.send(&message(&Header::msg(xid, 32, Chunks::NONE), &reply)),
        WcStatus::Success
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut done = false;
    while !done {
        c.poll_completions(|x| {
            assert!(x.result.unwrap().is_success());
            done = true;
        });
        assert!(Instant::now() < deadline, "no reply to the forward NULL");
    }
}

#[test]
fn a_backward_call_is_answered_inline_with_the_clients_grant() {
    let (mut c, mut e, _rs) = client_of_raw(true);
    forward_null(&mut c, &mut e);
    // NULL, then an ECHO, each RDMA_MSG with empty lists (RFC 8167 §5.1).
    let payload = opaque(&pattern(5, 300));
    for (xid, proc_num, args) in [(0x100, NULL, &[][..]), (0x101, ECHO, &payload[..])] {
        let mut m = call_header(xid, proc_num);
        m.extend_from_slice(args);
        let call = message(&Header::msg(xid, 8, Chunks::NONE), &m);
        assert_eq!(e.send(&call), WcStatus::Success);
        let got = answer_of(&mut c, &mut e, Duration::from_secs(5)).expect("a backward Reply");
        let h = HeaderView::parse(&got).unwrap();
        assert_eq!((h.xid(), h.proc()), (xid, Proc::Msg));
        assert_eq!(w(&got, 4), 1, "version 1");
        // The Reply's credit is the client's backward grant (RFC 8167 §4.1).
        assert_eq!(h.credit(), REV);
        assert!(h.read_list().is_empty() && h.write_list().is_empty());
        assert!(h.reply_chunk().is_none());
        let (rpc, len) = ReplyHeader::parse(h.payload()).unwrap();
        assert_eq!(rpc.xid, xid);
        assert!(rpc.is_success(), "{rpc:?}");
        assert_eq!(&h.payload()[len..], args);
    }
    let s = c.snapshot();
    assert_eq!((s.reverse_calls, s.reverse_replies), (2, 2));
    assert_eq!(s.discards, 0);
    forward_null(&mut c, &mut e);
}

#[test]
fn backward_calls_that_need_chunks_are_refused() {
    let (mut c, mut e, _rs) = client_of_raw(true);
    let seg = [Segment {
        handle: 9,
        length: 4096,
        offset: 0x1000,
    }];
    let writes = [&seg[..]];
    let read = [ReadSegment {
        position: 0,
        segment: seg[0],
    }];
    let with_write = msg_call(
        0x200,
        Chunks {
            writes: &writes,
            ..Chunks::NONE
        },
        NULL,
        &[],
    );
    let long = nomsg(
        0x201,
        Chunks {
            reads: &read,
            ..Chunks::NONE
        },
    );
    let with_reply_chunk = msg_call(
        0x202,
        Chunks {
            reply: Some(&seg),
            ..Chunks::NONE
        },
        NULL,
        &[],
    );
    for (xid, call) in [
        (0x200, with_write),
        (0x201, long),
        (0x202, with_reply_chunk),
    ] {
        assert_eq!(e.send(&call), WcStatus::Success);
        let got = answer_of(&mut c, &mut e, Duration::from_secs(5)).expect("an RDMA_ERROR");
        let h = HeaderView::parse(&got).unwrap();
        assert_eq!(h.xid(), xid);
        assert_eq!(h.error(), Some(RdmaError::Chunk), "{xid:#x}");
    }
    // An RPC CALL whose header stops short: GARBAGE_ARGS (RFC 8166 §4.5.2).
    let mut short = call_header(0x203, NULL);
    short.truncate(12);
    assert_eq!(
        e.send(&message(&Header::msg(0x203, 8, Chunks::NONE), &short)),
        WcStatus::Success
    );
    let got = answer_of(&mut c, &mut e, Duration::from_secs(5)).expect("GARBAGE_ARGS");
    let rpc = rpc_reply(&got);
    assert_eq!(rpc.xid, 0x203);
    assert_eq!(rpc, ReplyHeader::garbage_args(0x203));
    // The connection goes on in both directions.
    forward_null(&mut c, &mut e);
    let call = message(
        &Header::msg(0x204, 8, Chunks::NONE),
        &call_header(0x204, NULL),
    );
    assert_eq!(e.send(&call), WcStatus::Success);
    let got = answer_of(&mut c, &mut e, Duration::from_secs(5)).expect("a backward Reply");
    assert!(rpc_reply(&got).is_success());
    assert_eq!(c.snapshot().credit_overruns, 0);
}

#[test]
fn a_client_that_serves_nothing_drops_backward_calls() {
    let (mut c, mut e, _rs) = client_of_raw(false);
    let call = message(
        &Header::msg(0x300, 8, Chunks::NONE),
        &call_header(0x300, NULL),
    );
    assert_eq!(e.send(&call), WcStatus::Success);
    assert_eq!(
        answer_of(&mut c, &mut e, Duration::from_millis(200)),
        None,
        "nothing answers a backward Call at a client without a table"
    );
    assert_eq!(c.snapshot().discards, 1);
    forward_null(&mut c, &mut e);
}

/// A version 1 server with `REV` reverse credits and the given reverse timeout.
fn backward_server_cfg(timeout: Duration) -> ConnConfig {
    ConnConfig {
        reverse_credits: REV,
        reverse_timeout: timeout,
        ..config()
    }
}

#[test]
fn a_backward_call_the_client_drops_is_given_up_after_the_timeout() {
    let (mut srv, addr) =
        soft_server(dispatch(), backward_server_cfg(Duration::from_millis(50))).unwrap();
    // A client that serves no backward Calls: it drops them (RFC 8167 §6).
    let (mut c, mut s) = connect_to(&mut srv, &addr, config()).unwrap();
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    assert!(call(&mut c, &mut s, &null, |x| x
        .result
        .unwrap()
        .is_success()));
    let xid = s.call_reverse(PROG, VERS, NULL, &[], 77).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut outcome = None;
    while outcome.is_none() {
        s.poll();
        c.poll_completions(|_| {});
        s.housekeep(Instant::now());
        s.take_reverse(|r| outcome = Some((r.tag, r.xid, r.result.map(<[u8]>::to_vec))));
        assert!(Instant::now() < deadline, "the reverse Call never finished");
    }
    assert_eq!(outcome, Some((77, xid, Err(ReverseError::Timeout))));
    assert_eq!(s.snapshot().reverse_timeouts, 1);
    assert_eq!(s.reverse_in_flight(), 0);
    assert_eq!(c.snapshot().discards, 1);
    // The client's receive went back: forward Calls go on.
    for _ in 0..100 {
        assert!(call(&mut c, &mut s, &null, |x| x
            .result
            .unwrap()
            .is_success()));
    }
    assert_eq!(s.snapshot().credit_overruns, 0);
}

/// Calls the raw client back (NULL, tagged `tag`) and returns the Call it received.
fn backward_null(s: &mut ServerConn<Soft>, rc: &mut RawClient, tag: u64) -> (u32, Vec<u8>) {
    let xid = s.call_reverse(PROG, VERS, NULL, &[], tag).unwrap();
    (xid, rc.expect(s))
}

/// Polls the server until a reverse Call finishes; returns its tag and result.
fn finished(s: &mut ServerConn<Soft>) -> (u64, Result<Vec<u8>, ReverseError>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        s.poll();
        let mut out = None;
        s.take_reverse(|r| out = Some((r.tag, r.result.map(<[u8]>::to_vec))));
        if let Some(o) = out {
            return o;
        }
        assert!(Instant::now() < deadline, "no reverse Call finished");
    }
}

/// An RDMA_MSG Reply to `xid`: accepted SUCCESS, granting `grant`.
fn backward_success(xid: u32, grant: u32) -> Vec<u8> {
    let mut rpc = vec![0; 64];
    let n = ReplyHeader::accepted_success(xid).encode(&mut rpc).unwrap();
    rpc.truncate(n);
    message(&Header::msg(xid, grant, Chunks::NONE), &rpc)
}

#[test]
fn the_responder_takes_replies_errors_and_drops_forgeries() {
    let (mut srv, addr) =
        soft_server(dispatch(), backward_server_cfg(Duration::from_secs(30))).unwrap();
    let t = std::thread::spawn(move || RawClient::connect(&addr, 16));
    let mut s = srv.accept(Duration::from_secs(5)).unwrap();
    let mut rc = t.join().unwrap();
    rc.null_ok(&mut s, 1);
    assert_eq!(
        s.reverse_granted(),
        1,
        "one reverse credit until the client grants more"
    );

    // The Call: RDMA_MSG, version 1, asking for REV credits, empty lists, an RPC CALL.
    let (xid, m) = backward_null(&mut s, &mut rc, 10);
    let h = HeaderView::parse(&m).unwrap();
    assert_eq!((h.xid(), h.proc(), h.credit()), (xid, Proc::Msg, REV));
    assert_eq!(w(&m, 4), 1);
    assert!(h.read_list().is_empty() && h.write_list().is_empty());
    assert!(h.reply_chunk().is_none());
    let RpcMessage::Call(call) = RpcMessage::parse(h.payload()).unwrap().0 else {
        panic!("not an RPC Call")
    };
    assert_eq!(
        call,
        CallHeader::new(
            xid,
            PROG,
            VERS,
            NULL,
            rpcrdma_proto::rpc::OpaqueAuth::NONE,
            rpcrdma_proto::rpc::OpaqueAuth::NONE
        )
    );
    // A Reply granting 3 credits.
    assert_eq!(rc.send(&backward_success(xid, 3)), WcStatus::Success);
    assert_eq!(finished(&mut s), (10, Ok(Vec::new())));
    assert_eq!(s.reverse_granted(), 3);

    // RDMA_ERROR / ERR_CHUNK about the next one.
    let (xid, _) = backward_null(&mut s, &mut rc, 11);
    let err = message(&Header::error(xid, 1, 0, RdmaError::Chunk), &[]);
    assert_eq!(rc.send(&err), WcStatus::Success);
    assert_eq!(
        finished(&mut s),
        (11, Err(ReverseError::TransportV1(RdmaError::Chunk)))
    );
    assert_eq!(
        s.reverse_granted(),
        3,
        "an error's credit field is no grant"
    );

    // A Reply with an XID of no Call of ours is dropped; the right one completes it.
    let (xid, _) = backward_null(&mut s, &mut rc, 12);
    let before = s.snapshot().discards;
    assert_eq!(rc.send(&backward_success(xid ^ 0x40, 3)), WcStatus::Success);
    for _ in 0..200 {
        s.poll();
    }
    assert_eq!(s.snapshot().discards, before + 1);
    assert_eq!(s.reverse_in_flight(), 1);
    assert_eq!(rc.send(&backward_success(xid, 3)), WcStatus::Success);
    assert_eq!(finished(&mut s), (12, Ok(Vec::new())));

    // Forward Calls go on; no Reply counted as an overrun.
    rc.null_ok(&mut s, 2);
    let st = s.snapshot();
    assert_eq!(st.credit_overruns, 0);
    assert_eq!((st.reverse_calls, st.reverse_replies), (3, 3));
}
