//! Malformed messages: truncated, garbage and wrong-version transport headers, chunk lists
//! with hostile counts, random and mutated messages, each with its RFC 8166 verdict from the
//! process; an oversized Send.

use std::time::Instant;

use rpcrdma_engine::fabric::WcStatus;
use rpcrdma_engine::program::{ECHO, NULL, PROG, READ, VERS, VERS_TIMED, WRITE};
use rpcrdma_proto::header::{Body, Chunks, Header, HeaderView, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::rpc::{AcceptStat, ReplyHeader};
use rpcrdma_proto::verdict::{judge_call, Action};

use crate::serve_common::msg::*;
use crate::serve_common::serial;

use super::{exchange, raw_connect, Server, WAIT};

/// Truncated, garbage and wrong-version transport headers and chunk lists with hostile
/// counts each get their RFC 8166 §4.5 verdict from the server process, on one connection
/// that keeps serving; then 400 random and mutated messages are judged against the
/// protocol crate's verdict; an oversized Send ends only its connection.
#[test]
fn malformed_messages_get_their_verdict_from_the_process() {
    let _serial = serial();
    let mut srv = Server::start("verdicts", &[]);
    let mut c = raw_connect(&srv.soft_addr(), 32);
    let grant = HeaderView::parse(&c.null_ok(1, "verdicts"))
        .unwrap()
        .credit();
    assert!(grant >= 1);
    let d = c.data_at(0);
    let (h, off) = (d.rkey, d.addr);
    let seg = |len: u32| Segment::new(h, len, off);
    let mut cases: Vec<(String, Vec<u8>, Expect)> = Vec::new();
    let mut case = |name: &str, bytes: Vec<u8>, e: Expect| cases.push((name.into(), bytes, e));

    // Too short for a header (§4.5: discard before parsing).
    let null = null_call(0x100);
    case("empty Send", vec![], Expect::Discard);
    case("4 bytes", null[..4].to_vec(), Expect::Discard);
    case("20 bytes", null[..20].to_vec(), Expect::Discard);
    case("27 bytes", null[..27].to_vec(), Expect::Discard);
    // Versions (§4.5.1): ERR_VERS with the range 1..1, the version echoed.
    for (i, v) in [0u32, 2, 7, 0x8000_0000, u32::MAX].into_iter().enumerate() {
        let mut m = null_call(0x110 + i as u32);
        set_word(&mut m, 4, v);
        case(&format!("rdma_vers {v:#x}"), m, Expect::ErrVers);
    }
    case("28 bytes of 0xff", vec![0xff; 28], Expect::ErrVers);
    let mut ones = vec![0xff; 28];
    set_word(&mut ones, 12, 4);
    case("28 bytes of 0xff as an RDMA_ERROR", ones, Expect::Discard);
    let mut junk = vec![0xa5; 64];
    set_word(&mut junk, 4, 1);
    case("version 1 then 0xa5 junk", junk, Expect::ErrChunk);
    // Procedures.
    let mut badproc = null_call(0x120);
    set_word(&mut badproc, 12, 7);
    case("rdma_proc 7", badproc, Expect::ErrChunk);
    let msgp = Header {
        xid: 0x121,
        vers: 1,
        credit: 32,
        body: Body::Msgp {
            align: 4,
            thresh: 1024,
            chunks: Chunks::NONE,
        },
    };
    case(
        "RDMA_MSGP",
        message(&msgp, &call_header(0x121, NULL)),
        Expect::ErrChunk,
    );
    let done = Header {
        xid: 0x122,
        vers: 1,
        credit: 32,
        body: Body::Done,
    };
    case("RDMA_DONE", message(&done, &[0; 12]), Expect::Discard);
    let err = Header::error(0x123, 1, 32, RdmaError::Vers { low: 1, high: 1 });
    case(
        "RDMA_ERROR at a responder",
        message(&err, &[]),
        Expect::Discard,
    );
    let err = Header::error(0x124, 9, 32, RdmaError::Chunk);
    case(
        "RDMA_ERROR of version 9",
        message(&err, &[0; 8]),
        Expect::Discard,
    );
    // Chunk lists with hostile counts and discriminators (§4.5.2: XDR errors → ERR_CHUNK).
    let fixed = |xid: u32| null_call(xid)[..16].to_vec();
    let with = |xid: u32, tail: &[u32]| {
        let mut v = fixed(xid);
        for x in tail {
            v.extend_from_slice(&x.to_be_bytes());
        }
        v
    };
    case(
        "read-list discriminator 2",
        with(0x130, &[2, 0, 0]),
        Expect::ErrChunk,
    );
    case(
        "read-list discriminator 2^32-1",
        with(0x131, &[u32::MAX, 0, 0]),
        Expect::ErrChunk,
    );
    case(
        "write chunk of 2^31-1 segments",
        with(0x132, &[0, 1, 0x7fff_ffff, 0]),
        Expect::ErrChunk,
    );
    case(
        "write chunk of 2^32-1 segments",
        with(0x133, &[0, 1, u32::MAX, 0]),
        Expect::ErrChunk,
    );
    case(
        "reply chunk of 2^32-1 segments",
        with(0x134, &[0, 0, 1, u32::MAX]),
        Expect::ErrChunk,
    );
    case(
        "read segment cut short",
        with(0x135, &[1, 0, 0, 9]),
        Expect::ErrChunk,
    );
    case(
        "read list without its end",
        with(0x137, &[1, 48, h, 16, 0, 0]),
        Expect::ErrChunk,
    );
    // 500 empty write chunks and no end of the list, in a short message.
    let mut endless = vec![0u32];
    endless.extend(std::iter::repeat_n([1u32, 0], 500).flatten());
    case(
        "500 empty write chunks, list never ends",
        with(0x138, &endless),
        Expect::ErrChunk,
    );
    let wrap = [Segment::new(h, 16, u64::MAX - 4)];
    case(
        "write segment wrapping 2^64",
        msg_call(
            0x139,
            Chunks {
                writes: &[&wrap],
                ..Chunks::NONE
            },
            NULL,
            &[],
        ),
        Expect::ErrChunk,
    );
    // Too many distinct Read positions in one Call (more than the protocol crate plans).
    let many: Vec<ReadSegment> = (0..100)
        .map(|i| ReadSegment::new(48 + 4 * i, h, 4, off + 4 * u64::from(i)))
        .collect();
    let wargs = words(7, 16);
    case(
        "100 distinct Read positions",
        msg_call(
            0x13a,
            Chunks {
                reads: &many,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::ErrChunk,
    );
    // XID and payload (G-9, §4.5.2).
    let mut xid = null_call(0x140);
    set_word(&mut xid, 28, 0x999);
    case("rdma_xid ≠ RPC XID", xid, Expect::ErrChunk);
    case(
        "RDMA_MSG without an RPC message",
        message(&Header::msg(0x141, 32, Chunks::NONE), &[]),
        Expect::ErrChunk,
    );
    let mut garbage = 0x142u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2]);
    case(
        "valid header, truncated RPC Call",
        message(&Header::msg(0x142, 32, Chunks::NONE), &garbage),
        Expect::Accepted(AcceptStat::GarbageArgs),
    );
    let mut bad_auth = call_header(0x143, NULL);
    set_word(&mut bad_auth, 28, 0xffff);
    case(
        "RPC credential longer than the message",
        message(&Header::msg(0x143, 32, Chunks::NONE), &bad_auth),
        Expect::Accepted(AcceptStat::GarbageArgs),
    );
    case(
        "RDMA_NOMSG with no chunk",
        nomsg(0x144, Chunks::NONE),
        Expect::ErrChunk,
    );
    let rc = [seg(4096)];
    case(
        "RDMA_NOMSG with only a Reply chunk",
        nomsg(
            0x145,
            Chunks {
                reply: Some(&rc),
                ..Chunks::NONE
            },
        ),
        Expect::ErrChunk,
    );
    // Read-list positions (§3.4.5, G-7, G-8, G-14).
    let mis = [ReadSegment::new(41, h, 16, off)];
    case(
        "misaligned read position",
        msg_call(
            0x150,
            Chunks {
                reads: &mis,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::ErrChunk,
    );
    let p0 = [ReadSegment::new(0, h, 64, off)];
    case(
        "RDMA_MSG with a Position-Zero chunk",
        msg_call(
            0x151,
            Chunks {
                reads: &p0,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::ErrChunk,
    );
    let beyond = [ReadSegment::new(4096, h, 16, off)];
    case(
        "read position beyond the Payload stream",
        msg_call(
            0x152,
            Chunks {
                reads: &beyond,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::Accepted(AcceptStat::GarbageArgs),
    );
    let inside = [ReadSegment::new(8, h, 16, off)];
    case(
        "Read chunk inside the RPC Call header",
        msg_call(
            0x153,
            Chunks {
                reads: &inside,
                ..Chunks::NONE
            },
            WRITE,
            &wargs,
        ),
        Expect::Accepted(AcceptStat::GarbageArgs),
    );
    // The RPC layer.
    let rh = ReplyHeader::accepted_success(0x160);
    let mut payload = vec![0; rh.encoded_len()];
    rh.encode(&mut payload).unwrap();
    case(
        "an RPC Reply sent to a responder",
        message(&Header::msg(0x160, 32, Chunks::NONE), &payload),
        Expect::Discard,
    );
    case(
        "RPC version 3",
        message(
            &Header::msg(0x161, 32, Chunks::NONE),
            &call_header_of(0x161, 3, PROG, VERS, NULL),
        ),
        Expect::RpcMismatch,
    );
    case(
        "unknown program",
        message(
            &Header::msg(0x162, 32, Chunks::NONE),
            &call_header_of(0x162, 2, 99, 1, 0),
        ),
        Expect::Accepted(AcceptStat::ProgUnavail),
    );
    case(
        "unknown program version",
        message(
            &Header::msg(0x163, 32, Chunks::NONE),
            &call_header_of(0x163, 2, PROG, 9, 0),
        ),
        Expect::Accepted(AcceptStat::ProgMismatch {
            low: VERS,
            high: VERS_TIMED,
        }),
    );
    case(
        "unknown procedure",
        message(
            &Header::msg(0x164, 32, Chunks::NONE),
            &call_header_of(0x164, 2, PROG, VERS, 77),
        ),
        Expect::Accepted(AcceptStat::ProcUnavail),
    );
    case(
        "ECHO whose opaque runs past the arguments",
        msg_call(0x165, Chunks::NONE, ECHO, &[0, 0, 1, 0, 1, 2, 3, 4]),
        Expect::Accepted(AcceptStat::GarbageArgs),
    );
    case(
        "ECHO of 2^32-1 bytes",
        msg_call(0x166, Chunks::NONE, ECHO, &[0xff; 4]),
        Expect::Accepted(AcceptStat::GarbageArgs),
    );

    let mut want_err_vers = 0;
    for (i, (name, bytes, e)) in cases.iter().enumerate() {
        // The expectation is the protocol crate's verdict wherever the transport decides.
        // (GARBAGE_ARGS also comes from the procedure's own argument decoding, after the
        // transport passed the Call on.)
        if let Some(action) = e.action() {
            let v = judge_call(bytes).err().map(|v| v.action);
            let by_procedure = v.is_none() && action == Action::GarbageArgs;
            assert!(
                v == Some(action) || by_procedure,
                "{name}: the verdict module says {v:?}"
            );
        }
        want_err_vers += u64::from(*e == Expect::ErrVers);
        exchange(&mut c, name, bytes, grant, *e, 0x1000 + i as u32);
        srv.assert_alive(name);
    }

    // Random and mutated messages, each judged by the protocol crate: a transport verdict
    // must be answered exactly; a message it passes on may be answered anyhow or end the
    // connection (its chunks may name anything), never hurt the server.
    let mut rng = Rng(0x5eed_0fba_5eba_1100);
    let mut torn_down = 0;
    for iter in 0..400u32 {
        let xid = 0x2000_0000 + iter;
        let d = c.data_at(0);
        let rd = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 64, d.addr)];
        let ws = [Segment::new(d.rkey, 256, d.addr + 8192)];
        let mut m = match rng.below(6) {
            0 => (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
            1 => {
                let mut v = words(xid, 1);
                v.extend_from_slice(&words(32, rng.below(6) as u32));
                for _ in 0..rng.below(40) {
                    v.extend_from_slice(&rng.word().to_be_bytes());
                }
                v
            }
            2 => null_call(xid),
            3 => msg_call(
                xid,
                Chunks {
                    reads: &rd,
                    ..Chunks::NONE
                },
                WRITE,
                &words(3, 64),
            ),
            4 => msg_call(
                xid,
                Chunks {
                    writes: &[&ws],
                    ..Chunks::NONE
                },
                READ,
                &words(256, 1),
            ),
            _ => msg_call(
                xid,
                Chunks::NONE,
                ECHO,
                &[0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0],
            ),
        };
        for _ in 0..1 + rng.below(3) {
            match rng.below(6) {
                0 => {
                    let n = rng.below(m.len() as u64 + 1) as usize;
                    m.truncate(n);
                }
                1 => m.extend((0..1 + rng.below(64)).map(|_| rng.next() as u8)),
                _ if m.len() >= 4 => {
                    let at = 4 * rng.below(m.len().min(120) as u64 / 4) as usize;
                    let v = rng.word();
                    set_word(&mut m, at, v);
                }
                _ => {}
            }
        }
        let name = format!("fuzz {iter}: {m:02x?}");
        let verdict = judge_call(&m).err().map(|v| v.action);
        match verdict.and_then(Expect::from_action) {
            Some(e) => {
                want_err_vers += u64::from(e == Expect::ErrVers);
                exchange(&mut c, &name, &m, grant, e, 0x3000_0000 + iter);
            }
            None => {
                // Passed on to the RPC layer: any reply (or none; perhaps after the probe's),
                // or a torn-down connection.
                assert_eq!(c.send(&m, &name), WcStatus::Success, "{name}: sent");
                let probe = 0x3000_0000 + iter;
                if c.post(&null_call(probe)).is_err() {
                    c.poll();
                }
                let deadline = Instant::now() + WAIT;
                let mut answered = false;
                let survived = loop {
                    match c.next_message(&name) {
                        Some(r) if w(&r, 0) == probe => {
                            assert!(rpc_reply(&r).is_success(), "{name}: probe");
                            break true;
                        }
                        Some(r) if w(&r, 0) == w(&m, 0) && !answered => answered = true,
                        Some(r) => panic!("{name}: unexpected {r:02x?}"),
                        None if !c.recv_errors.is_empty() => break false,
                        None => panic!("{name}: neither a reply nor a teardown"),
                    }
                    assert!(Instant::now() < deadline, "{name}: no probe reply");
                };
                if !survived {
                    torn_down += 1;
                    c = raw_connect(&srv.soft_addr(), 32);
                } else if !answered {
                    // Not answered yet: perhaps later.
                    c.late.push(w(&m, 0));
                }
            }
        }
        srv.assert_alive(&name);
    }
    assert!(
        torn_down < 100,
        "most mutations keep the connection: {torn_down}"
    );

    // A Send larger than the server's receive buffers (4096, negotiated) ends only that
    // connection (§3.3); the next connection is served.
    let mut big = null_call(0x500);
    big.resize(4097, 0);
    assert_ne!(
        c.send(&big, "oversized Send"),
        WcStatus::Success,
        "the server could not take it"
    );
    c.expect_torn_down("oversized Send");
    drop(c);
    raw_connect(&srv.soft_addr(), 8).null_ok(0x501, "after the oversized Send");

    let counters = srv.finish("verdicts");
    assert_eq!(counters["errors"]["err_vers"], want_err_vers, "{counters}");
    assert!(
        counters["errors"]["system_err"].as_u64().unwrap() >= 1,
        "RPC version 3: {counters}"
    );
}
