//! Hostile peers against the `rpcrdma serve` PROCESS on the soft fabric. Each test starts the
//! real binary (killed by its guard whatever happens), connects raw peers built in this
//! process directly on the engine's public fabric API, and sends what no well-behaved
//! requester sends: truncated and garbage transport headers, unsupported versions, chunk lists
//! with hostile counts, chunks naming bogus or too-short memory, more Calls than credits,
//! Calls followed by an abrupt disconnect, broken soft handshakes (including shared memory a
//! peer could still shrink), silent connections, and connection churn. After each case it
//! asserts the exact reply where RFC 8166 defines one (checked against the protocol crate's
//! verdict), that a torn-down connection gets no reply, and that the server process is alive
//! and still serves; at the end, that `rpcrdma call` NULL and ECHO succeed, that the server's
//! thread and descriptor counts are back to their baseline, and that SIGTERM stops it cleanly
//! with counters that match what was sent.
//!
//! Every wait is bounded; the tests take a lock so that one server runs at a time (each one
//! busy-polls a core).

use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::fabric::soft::SoftAddr;
use rpcrdma_engine::fabric::{ConnectError, MemoryRegion, QueuePair, WcStatus};
use rpcrdma_engine::program::{ECHO, MULTI, NULL, PROG, READ, VERS, VERS_TIMED, WRITE};
use rpcrdma_proto::header::{Body, Chunks, Header, HeaderView, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::private_data;
use rpcrdma_proto::rpc::{AcceptStat, ReplyHeader};
use rpcrdma_proto::verdict::{judge_call, Action};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use serde_json::Value;

mod serve_common;
use serve_common::msg::*;
use serve_common::{connect_retrying, serial, unix_connect, ConnOpts, RawConn, ServerProc};

/// How long any single expected event may take.
const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// The server process.

/// A running `rpcrdma serve` (the shared [`ServerProc`] guard, which it derefs to), warmed up
/// with its baseline taken.
struct Server(ServerProc);

impl Deref for Server {
    type Target = ServerProc;
    fn deref(&self) -> &ServerProc {
        &self.0
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut ServerProc {
        &mut self.0
    }
}

impl Server {
    /// Starts `rpcrdma serve` with `extra` arguments; returns once a raw connection is served
    /// (within 15 s) and `rpcrdma call` succeeds, with the baseline taken.
    fn start(tag: &str, extra: &[&str]) -> Server {
        let name = format!("rpcrdma-serve-hostile.{}.{tag}", std::process::id());
        let mut s = ServerProc::spawn(&name, 300, extra, Vec::new());
        // Ready when a raw connection is accepted.
        s.wait_ready(Duration::from_secs(15), |addr| {
            raw_try_connect(addr, 8)?.null_ok(1, "ready");
            Ok(())
        });
        // Warm up (first-use allocations and lazily started threads), then the baseline.
        s.good_calls("warm-up");
        s.baseline = s.steady();
        Server(s)
    }

    /// Everything a test ends with: alive, serving, back to the baseline (within 15 s); then
    /// SIGTERM stops it gracefully (exit status 0) and its final counters are returned.
    fn finish(mut self, what: &str) -> Value {
        self.good_calls(what);
        self.assert_back_to_baseline(what, Duration::from_secs(15));
        self.good_calls(what);
        let v = self.terminate(what);
        v["workers"][0]["counters"].clone()
    }
}

// ---------------------------------------------------------------------------------------
// A raw requester on the soft fabric: the shared `RawConn` with this file's settings.

/// Size of each receive buffer and send slot.
const SLOT: usize = 8192;
/// Bytes of the region advertised in chunks (remote read and write).
const DATA_LEN: usize = 1 << 20;

/// Connection settings of this file's raw requesters with `nrecv` receives.
fn raw_opts(nrecv: u32) -> ConnOpts {
    ConnOpts {
        device: "hostile",
        arena_bytes: 8 << 20,
        slot: SLOT,
        send_slots: 8,
        nrecv,
        recv_len: SLOT as u32,
        cq_depth: 1024,
        max_send_wr: 512,
        data_len: DATA_LEN,
        wait: WAIT,
        cq_overrun_ends: false,
    }
}

/// Connects a raw requester with `nrecv` receives of [`SLOT`] bytes and RFC 8797 private
/// data (8 KiB inline sizes, no remote invalidation: its chunks name a plain region).
fn raw_try_connect(addr: &SoftAddr, nrecv: u32) -> Result<RawConn, ConnectError> {
    let pdata = private_data::PrivateData::new(SLOT as u32, SLOT as u32, false).encode();
    RawConn::try_connect(addr, &raw_opts(nrecv), &pdata, |_| Ok(())).map(|(c, ())| c)
}

/// As [`raw_try_connect`], one attempt (at most [`WAIT`]): failing fails the test.
fn raw_connect(addr: &SoftAddr, nrecv: u32) -> RawConn {
    connect_retrying(Duration::ZERO, || raw_try_connect(addr, nrecv))
}

// ---------------------------------------------------------------------------------------
// Messages: the builders and reply checks shared with the engine's in-process hostile-peer
// tests (`msg`), and one exchange over a raw connection.

/// Sends `bytes`, checks the answer is exactly `e` (for a discard: the next message is the
/// reply to a NULL sent after it), and that the connection still serves a NULL.
fn exchange(c: &mut RawConn, name: &str, bytes: &[u8], grant: u32, e: Expect, probe: u32) {
    assert_eq!(c.send(bytes, name), WcStatus::Success, "{name}: sent");
    if e != Expect::Discard {
        let m = c.expect(name);
        check_reply(name, &m, bytes, grant, e);
    }
    c.null_ok(probe, name);
}

// ---------------------------------------------------------------------------------------
// Tests.

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

/// Chunks naming memory the server cannot use. Found before any RDMA operation (a Write or
/// Reply chunk too small, no Reply chunk for a long reply, a Read chunk larger than the
/// server pulls): ERR_CHUNK, and the connection keeps serving (§4.5.3, §8.1.4). Found only
/// by the RDMA operation (a bogus rkey, a segment past the end of the region): that
/// connection is torn down without a reply, other connections go on. Too-short and
/// too-long Read chunks for the argument they carry: GARBAGE_ARGS.
#[test]
fn chunks_naming_bogus_or_short_memory() {
    let _serial = serial();
    let mut srv = Server::start("chunks", &[]);
    let addr = srv.soft_addr();
    let mut good = raw_connect(&addr, 8);
    let mut c = raw_connect(&addr, 32);
    let grant = HeaderView::parse(&c.null_ok(1, "chunks")).unwrap().credit();
    let d = c.data_at(0);
    c.data.write_at(0, &[0x5a; 4096]);
    let small_w = [Segment::new(d.rkey, 100, d.addr)];
    let small_r = [Segment::new(d.rkey, 100, d.addr + 4096)];
    let huge = [ReadSegment::new(
        WRITE_DATA_POS,
        d.rkey,
        0x7fff_0000,
        d.addr,
    )];
    let short = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 16, d.addr)];
    let zero = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 0, d.addr)];
    let long = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 256, d.addr)];
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        (
            "Write chunk smaller than the result",
            msg_call(
                10,
                Chunks {
                    writes: &[&small_w],
                    ..Chunks::NONE
                },
                READ,
                &words(5000, 1),
            ),
            Expect::ErrChunk,
        ),
        (
            "Reply chunk smaller than the reply",
            msg_call(
                11,
                Chunks {
                    reply: Some(&small_r),
                    ..Chunks::NONE
                },
                READ,
                &words(5000, 1),
            ),
            Expect::ErrChunk,
        ),
        (
            "reply over the threshold without a Reply chunk",
            msg_call(12, Chunks::NONE, READ, &words(5000, 1)),
            Expect::ErrChunk,
        ),
        (
            "Read chunk larger than the server pulls",
            msg_call(
                13,
                Chunks {
                    reads: &huge,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 0x7fff_0000),
            ),
            Expect::ErrChunk,
        ),
        (
            "Read chunk shorter than its opaque (16 of 64 bytes)",
            msg_call(
                14,
                Chunks {
                    reads: &short,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 64),
            ),
            Expect::Accepted(AcceptStat::GarbageArgs),
        ),
        (
            "empty Read segment for a 64-byte opaque",
            msg_call(
                15,
                Chunks {
                    reads: &zero,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 64),
            ),
            Expect::Accepted(AcceptStat::GarbageArgs),
        ),
        (
            "READ of 2^32-1 bytes (more than the server's bulk buffer)",
            msg_call(16, Chunks::NONE, READ, &words(u32::MAX, 1)),
            Expect::Accepted(AcceptStat::SystemErr),
        ),
        (
            "MULTI of 2^32-1 results",
            msg_call(18, Chunks::NONE, MULTI, &words(u32::MAX, 0)),
            Expect::Accepted(AcceptStat::SystemErr),
        ),
    ];
    for (i, (name, m, e)) in cases.iter().enumerate() {
        exchange(&mut c, name, m, grant, *e, 100 + i as u32);
        srv.assert_alive(name);
    }
    // A Read chunk longer than its opaque: the opaque is what counts (extra bytes are the
    // chunk's business, §3.4.5.2 allows at most the XDR pad, and more is garbage or served).
    assert_eq!(
        c.send(
            &msg_call(
                17,
                Chunks {
                    reads: &long,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 64)
            ),
            "Read chunk longer than its opaque"
        ),
        WcStatus::Success
    );
    let r = c.expect("Read chunk longer than its opaque");
    assert_eq!(w(&r, 0), 17);
    c.null_ok(200, "chunks");

    // Found only by the RDMA operation: one fresh connection per case.
    for case in 0..7 {
        let mut c = raw_connect(&addr, 16);
        c.null_ok(1, "chunks: fresh connection");
        let d = c.data_at(0);
        let end = d.addr + DATA_LEN as u64;
        let bogus = d.rkey ^ 0x5a00;
        let rd = |rkey: u32, at: u64| [ReadSegment::new(WRITE_DATA_POS, rkey, 64, at)];
        let wr = |rkey: u32, at: u64| [Segment::new(rkey, 4096, at)];
        let (name, m) = match case {
            0 => (
                "Read chunk naming a bogus rkey",
                msg_call(
                    2,
                    Chunks {
                        reads: &rd(bogus, d.addr),
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                ),
            ),
            1 => (
                "Read segment past the end of the region",
                msg_call(
                    2,
                    Chunks {
                        reads: &rd(d.rkey, end - 32),
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                ),
            ),
            2 => (
                "Write chunk naming a bogus rkey",
                msg_call(
                    2,
                    Chunks {
                        writes: &[&wr(0xdead_be00, d.addr)],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(4096, 1),
                ),
            ),
            3 => (
                "Write segment past the end of the region",
                msg_call(
                    2,
                    Chunks {
                        writes: &[&wr(d.rkey, end - 100)],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(4096, 1),
                ),
            ),
            4 => (
                "Reply chunk naming a bogus rkey",
                msg_call(
                    2,
                    Chunks {
                        reply: Some(&[Segment::new(bogus, 16384, d.addr)]),
                        ..Chunks::NONE
                    },
                    READ,
                    &words(5000, 1),
                ),
            ),
            5 => (
                "Long Call whose Position-Zero chunk names a bogus rkey",
                nomsg(
                    2,
                    Chunks {
                        reads: &[ReadSegment::new(0, bogus, 64, d.addr)],
                        ..Chunks::NONE
                    },
                ),
            ),
            _ => (
                "Read segment at address 2^63, valid rkey",
                msg_call(
                    2,
                    Chunks {
                        reads: &rd(d.rkey, 1 << 63),
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                ),
            ),
        };
        assert_eq!(c.send(&m, name), WcStatus::Success, "{name}");
        c.expect_torn_down(name);
        srv.assert_alive(name);
        good.null_ok(1000 + case, name);
    }
    drop(c);
    drop(good);
    let counters = srv.finish("chunks");
    assert!(
        counters["errors"]["conn_lost"].as_u64().unwrap() >= 7,
        "{counters}"
    );
}

/// More Calls than credits granted: served while the server's receives last, and beyond
/// them the requester's own Send fails (RNR) and only that connection ends. Requesters that
/// vanish mid-RPC (dropped, disconnected, connection cut) with Short Calls, Calls waiting
/// for RDMA Reads or Writes, or many Calls in flight: no reply, no harm.
#[test]
fn credit_overruns_and_peers_gone_mid_rpc() {
    let _serial = serial();
    let mut srv = Server::start("credits", &[]);
    let addr = srv.soft_addr();
    let mut good = raw_connect(&addr, 8);

    for round in 0..3u32 {
        let mut c = raw_connect(&addr, 512);
        let grant = HeaderView::parse(&c.null_ok(1, "credit overrun"))
            .unwrap()
            .credit();
        let n = 300u32;
        let mut statuses = Vec::new();
        for x in 0..n {
            let id = c.post(&null_call(1000 + x));
            statuses.push(match id {
                Ok(id) => c.wait_send(id, "credit overrun"),
                Err(_) => WcStatus::WrFlushErr,
            });
        }
        let first_bad = statuses.iter().position(|s| *s != WcStatus::Success);
        let mut replies = Vec::new();
        match first_bad {
            None => {
                // The server kept up: every Call beyond the grant was still served.
                for x in 0..n {
                    let m = c.expect(&format!("round {round}: reply {x}"));
                    let r = rpc_reply(&m);
                    assert!(r.is_success());
                    replies.push(r.xid);
                }
                replies.sort();
                assert_eq!(replies, (1000..1000 + n).collect::<Vec<_>>());
                c.null_ok(5000, "credit overrun");
            }
            Some(i) => {
                assert!(
                    i as u32 >= grant,
                    "round {round}: a Send within the grant failed"
                );
                assert_eq!(statuses[i], WcStatus::RnrRetryExcErr, "round {round}: RNR");
                // Whatever was answered before the end is a successful NULL it sent.
                let deadline = Instant::now() + WAIT;
                while c.recv_errors.is_empty() {
                    c.poll();
                    assert!(Instant::now() < deadline, "round {round}: still up");
                    thread::yield_now();
                }
                for m in c.received.drain(..) {
                    let r = rpc_reply(&m);
                    assert!(r.is_success() && (1000..1000 + n).contains(&r.xid));
                }
            }
        }
        srv.assert_alive("credit overrun");
        good.null_ok(100 + round, "credit overrun");
    }

    // Gone mid-RPC.
    for how in 0..3 {
        for what in 0..5 {
            let mut c = raw_connect(&addr, 16);
            c.null_ok(1, "gone mid-RPC");
            let d = c.data_at(0);
            c.data.write_at(0, &[7; 4096]);
            let rd = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 4000, d.addr)];
            let big = [ReadSegment::new(
                WRITE_DATA_POS,
                d.rkey,
                DATA_LEN as u32,
                d.addr,
            )];
            let ws = [Segment::new(d.rkey, 65536, d.addr)];
            let calls: Vec<Vec<u8>> = match what {
                0 => vec![null_call(10)],
                1 => vec![msg_call(
                    10,
                    Chunks {
                        reads: &rd,
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(3, 4000),
                )],
                2 => (0..12).map(|x| null_call(10 + x)).collect(),
                3 => vec![msg_call(
                    10,
                    Chunks {
                        writes: &[&ws],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(65536, 2),
                )],
                _ => vec![msg_call(
                    10,
                    Chunks {
                        reads: &big,
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(3, DATA_LEN as u32),
                )],
            };
            for m in &calls {
                assert_eq!(c.send(m, "gone mid-RPC"), WcStatus::Success);
            }
            match how {
                0 => drop(c),
                1 => c.qp.disconnect(),
                _ => c.qp.faults().drop_connection(),
            }
            srv.assert_alive(&format!("gone mid-RPC: how {how} what {what}"));
            good.null_ok(200 + 10 * how + what, "gone mid-RPC");
        }
    }
    drop(good);
    let counters = srv.finish("credits");
    assert!(
        counters["errors"]["conn_lost"].as_u64().unwrap() >= 15,
        "{counters}"
    );
}

// The soft provider's handshake, as the server reads it (engine/src/fabric/soft/conn.rs):
// one 208-byte message "SRD1", kind, private data length, two bytes of padding, the private
// data; HELLO carries three memfds (arena, queue pair, completion queue) and the completion
// queue's bell (a datagram socket; any descriptor is taken, ringing it only ever fails) with
// SCM_RIGHTS, the server answers ACCEPT (kind 2) with its own four, the client confirms with
// READY.
const MSG_LEN: usize = 208;
const HELLO: u8 = 1;
const ACCEPT: u8 = 2;
const READY: u8 = 4;
/// How long the server gives a connected socket to deliver its HELLO (conn.rs), plus slack.
const HELLO_WAIT: Duration = Duration::from_secs(10);

fn handshake(kind: u8, pd: &[u8]) -> [u8; MSG_LEN] {
    let mut m = [0u8; MSG_LEN];
    m[..4].copy_from_slice(b"SRD1");
    m[4] = kind;
    m[5] = pd.len() as u8;
    m[8..8 + pd.len()].copy_from_slice(pd);
    m
}

fn send_with_fds(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(5))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    }
    let n = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .expect("sendmsg");
    assert_eq!(n, bytes.len());
}

/// What the server sends back before closing: `None` when it closes (or resets) without a
/// word within `limit`, else the bytes.
fn answer(sock: &mut UnixStream, limit: Duration) -> Option<Vec<u8>> {
    sock.set_read_timeout(Some(limit)).unwrap();
    let mut buf = vec![0; MSG_LEN];
    match sock.read(&mut buf) {
        Ok(0) => None,
        Ok(n) => Some(buf[..n].to_vec()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
        Err(e) => panic!("the server neither answered nor closed: {e}"),
    }
}

/// A copy of one of this process's soft memfds (`kind`: "pd", "qp" or "cq": any live one
/// has a valid header and geometry), as a new memfd sealed against shrinking or not.
fn copy_memfd(kind: &str, seal: bool) -> OwnedFd {
    let want = format!("/memfd:rpcrdma-soft-{kind} (deleted)");
    let src = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want))
        .unwrap_or_else(|| panic!("no {want} in this process"));
    let mut f = File::open(src.path()).unwrap();
    let len = f.metadata().unwrap().len();
    // Headers, key table and rings sit at the start; the rest (region bytes) may stay zero.
    let mut head = vec![0; len.min(4 << 20) as usize];
    f.read_exact(&mut head).unwrap();
    let flags = if seal {
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING
    } else {
        MemfdFlags::CLOEXEC
    };
    let fd = rustix::fs::memfd_create(format!("hostile-copy-{kind}"), flags).unwrap();
    let mut copy = File::from(fd);
    copy.set_len(len).unwrap();
    copy.write_all(&head).unwrap();
    if seal {
        rustix::fs::fcntl_add_seals(&copy, SealFlags::SHRINK).unwrap();
    }
    OwnedFd::from(copy)
}

/// Copies of a live connection's arena, queue pair and completion queue, and a bell.
fn copies(seal: bool) -> [OwnedFd; 4] {
    let (bell, _) = std::os::unix::net::UnixDatagram::pair().unwrap();
    [
        copy_memfd("pd", seal),
        copy_memfd("qp", seal),
        copy_memfd("cq", seal),
        OwnedFd::from(bell),
    ]
}

fn hello_with(s: &UnixStream, fds: &[OwnedFd]) {
    let pdata = private_data::PrivateData::new(4096, 4096, false).encode();
    let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    send_with_fds(s, &handshake(HELLO, &pdata), &b);
}

/// A complete hand-made handshake with copies of valid memfds: ACCEPT comes back, READY
/// goes out, then the socket closes (the server's connection dies with it).
fn handshake_then_close(srv: &Server) {
    let mut s = unix_connect(&srv.addr);
    hello_with(&s, &copies(true));
    let got = answer(&mut s, WAIT).expect("ACCEPT");
    assert_eq!(&got[..5], &[b'S', b'R', b'D', b'1', ACCEPT], "ACCEPT");
    s.write_all(&handshake(READY, &[])).unwrap();
}

/// A server whose connections are light (64 KiB bulk buffers instead of 1 MiB: each one
/// touches about 8 MiB instead of 128), for the tests that open many.
fn light_server(tag: &str) -> Server {
    Server::start(tag, &["--bulk-size", "65536"])
}

/// Broken soft handshakes: the server closes each bad attempt without accepting it (in
/// particular shared memory the client could still shrink under the server's mapping,
/// which would crash it with SIGBUS on the next access) and keeps serving; the memfds it
/// hands out cannot be shrunk either. A HELLO delivered in pieces, slower than the server's
/// accept timeout, is still accepted.
#[test]
fn broken_handshakes_are_refused() {
    let _serial = serial();
    let mut srv = light_server("handshakes");
    let addr = srv.soft_addr();
    let pdata = private_data::PrivateData::new(4096, 4096, false).encode();

    // The server's memfds, which this process holds while connected (and ours, which the
    // server holds), are sealed: ftruncate to a smaller size fails with EPERM.
    let mut live = raw_connect(&addr, 8);
    live.null_ok(1, "handshakes: live connection");
    let mut sealed = 0;
    for e in std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
    {
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !link.to_string_lossy().starts_with("/memfd:rpcrdma-soft-") {
            continue;
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(e.path())
            .unwrap();
        let len = f.metadata().unwrap().len();
        let err = f
            .set_len(len / 2)
            .expect_err("a soft memfd could be shrunk");
        assert_eq!(err.raw_os_error(), Some(1), "EPERM (sealed): {link:?}");
        sealed += 1;
    }
    assert!(sealed >= 6, "ours and the server's: {sealed}");
    live.null_ok(2, "handshakes: live connection");

    type Attempt = (&'static str, Box<dyn Fn(&mut UnixStream)>);
    let attempts: Vec<Attempt> = vec![
        (
            "connect and close at once",
            Box::new(|_s: &mut UnixStream| {}),
        ),
        (
            "bad magic",
            Box::new(|s: &mut UnixStream| {
                let mut m = handshake(HELLO, &[]);
                m[..4].copy_from_slice(b"SRD9");
                s.write_all(&m).unwrap()
            }),
        ),
        (
            "private data length 255",
            Box::new(|s: &mut UnixStream| {
                let mut m = handshake(HELLO, &[]);
                m[5] = 255;
                s.write_all(&m).unwrap()
            }),
        ),
        (
            "READY instead of HELLO",
            Box::new(|s: &mut UnixStream| s.write_all(&handshake(READY, &[])).unwrap()),
        ),
        (
            "HELLO without descriptors",
            Box::new(move |s: &mut UnixStream| s.write_all(&handshake(HELLO, &pdata)).unwrap()),
        ),
        (
            "HELLO with unsealed copies of valid memfds",
            Box::new(|s: &mut UnixStream| hello_with(s, &copies(false))),
        ),
        (
            "HELLO with sealed memfds of garbage",
            Box::new(|s: &mut UnixStream| {
                let mk = || {
                    let fd = rustix::fs::memfd_create("junk", MemfdFlags::ALLOW_SEALING).unwrap();
                    let mut f = File::from(fd);
                    f.write_all(&[0xa5; 8192]).unwrap();
                    rustix::fs::fcntl_add_seals(&f, SealFlags::SHRINK).unwrap();
                    OwnedFd::from(f)
                };
                hello_with(s, &[mk(), mk(), mk(), mk()]);
            }),
        ),
        (
            "HELLO with empty sealed memfds",
            Box::new(|s: &mut UnixStream| {
                let mk = || {
                    let fd = rustix::fs::memfd_create("empty", MemfdFlags::ALLOW_SEALING).unwrap();
                    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
                    fd
                };
                hello_with(s, &[mk(), mk(), mk(), mk()]);
            }),
        ),
        (
            "HELLO with regular files",
            Box::new(|s: &mut UnixStream| {
                let exe = std::env::current_exe().unwrap();
                let fds: Vec<OwnedFd> = (0..4)
                    .map(|_| OwnedFd::from(File::open(&exe).unwrap()))
                    .collect();
                hello_with(s, &fds);
            }),
        ),
        (
            "HELLO with three descriptors",
            Box::new(|s: &mut UnixStream| {
                let [a, b, c, _] = copies(true);
                hello_with(s, &[a, b, c]);
            }),
        ),
        (
            "HELLO with five descriptors",
            Box::new(|s: &mut UnixStream| {
                let [a, b, c, d] = copies(true);
                hello_with(s, &[a, b, c, d, copy_memfd("cq", true)]);
            }),
        ),
    ];
    for (name, attempt) in &attempts {
        let mut s = unix_connect(&srv.addr);
        attempt(&mut s);
        // Longer than the server keeps an incomplete HELLO (5 s): what it does not take as a
        // request it may close only then.
        let got = answer(&mut s, HELLO_WAIT);
        assert_eq!(got, None, "{name}: the server answered instead of closing");
        srv.assert_alive(name);
        live.null_ok(3, name);
    }

    // The control for the unsealed case: the same copies, sealed, are accepted (so the
    // refusal above is the seal check).
    handshake_then_close(&srv);
    srv.assert_alive("hand-made handshake");

    // A HELLO in two pieces, the second after longer than the server's accept timeout
    // (200 ms): still a request, accepted (the server keeps the half-received HELLO).
    let mut s = unix_connect(&srv.addr);
    let m = handshake(HELLO, &pdata);
    s.write_all(&m[..100]).unwrap();
    thread::sleep(Duration::from_millis(700));
    let fds = copies(true);
    let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    send_with_fds(&s, &m[100..], &b);
    let got = answer(&mut s, WAIT).expect("a slow HELLO is accepted");
    assert_eq!(got[4], ACCEPT);
    s.write_all(&handshake(READY, &[])).unwrap();
    drop(s);

    live.null_ok(4, "handshakes: live connection");
    drop(live);
    srv.finish("handshakes");
}

/// Silent, half-open and churning connections: silent sockets and sockets that sent part of
/// a HELLO hold nobody up (a good client is served at once meanwhile) and are closed by the
/// server on its own; an established connection that sends nothing costs nothing; 120
/// connect/disconnect cycles and a burst of more connections than the worker takes (64)
/// leave the server serving with its threads and descriptors back to the baseline.
#[test]
fn silent_and_churning_connections() {
    let _serial = serial();
    let mut srv = light_server("connections");
    let addr = srv.soft_addr();
    let mut live = raw_connect(&addr, 8);
    live.null_ok(1, "connections: live connection");

    // 40 silent sockets and 40 with half a HELLO, then a good client: it is served within
    // its own connect timeout (`raw_connect` gives up after WAIT; 80 × the server's accept
    // timeout would be 16 s).
    let mut idle: Vec<UnixStream> = (0..80).map(|_| unix_connect(&srv.addr)).collect();
    for s in idle.iter_mut().skip(40) {
        s.write_all(&handshake(HELLO, &[])[..100]).unwrap();
    }
    let established = raw_connect(&addr, 8);
    let mut c = raw_connect(&addr, 8);
    c.null_ok(2, "while silent connections are open");
    srv.good_calls("while silent connections are open");
    live.null_ok(3, "connections: live connection");
    for (i, s) in idle.iter_mut().enumerate() {
        assert_eq!(
            answer(s, HELLO_WAIT),
            None,
            "silent socket {i}: closed by the server, not kept"
        );
    }
    drop(idle);
    drop(established);
    drop(c);
    srv.assert_alive("silent connections");

    // Churn: connect, maybe call, leave in one of three ways.
    for i in 0..120u32 {
        let mut c = raw_connect(&addr, 4);
        if i % 2 == 0 {
            c.null_ok(i, "churn");
        }
        match i % 3 {
            0 => drop(c),
            1 => c.qp.disconnect(),
            _ => c.qp.faults().drop_connection(),
        }
    }
    srv.assert_alive("churn");
    live.null_ok(6, "connections: live connection");

    // A burst of more connections than the worker takes: the extra ones are closed by the
    // server after the handshake, the others are served; then all of them go.
    let mut burst: Vec<RawConn> = (0..72).map(|_| raw_connect(&addr, 4)).collect();
    let (mut served, mut refused) = (0, 0);
    for (i, c) in burst.iter_mut().enumerate() {
        if c.send(&null_call(i as u32), &format!("burst {i}")) != WcStatus::Success {
            refused += 1;
            continue;
        }
        match c.next_message(&format!("burst {i}")) {
            Some(m) => {
                assert!(rpc_reply(&m).is_success());
                served += 1;
            }
            None => {
                assert!(!c.recv_errors.is_empty(), "burst {i}: no reply, still up");
                refused += 1;
            }
        }
    }
    assert_eq!(served + refused, 72);
    assert!(served >= 56, "most of the burst is served: {served}");
    drop(burst);
    srv.assert_alive("burst");
    live.null_ok(7, "connections: live connection");
    drop(live);
    srv.finish("connections");
}

/// A soft handshake that fails after the server has sent ACCEPT (the client closes before
/// READY, or READY comes after the accept timeout, 200 ms in `rpcrdma serve`) must leave
/// nothing behind: `ServerConn::accept` drops the buffers it took before their pools (a
/// pool dropped with buffers out deliberately leaks its memory), so the connection's arena
/// memfd and the pages its pools touched go away.
#[test]
fn abandoned_handshakes_leak_nothing() {
    let _serial = serial();
    let srv = light_server("abandoned");
    let mut live = raw_connect(&srv.soft_addr(), 8);
    live.null_ok(1, "abandoned: live connection");
    for i in 0..3 {
        // Closed right after ACCEPT.
        let mut s = unix_connect(&srv.addr);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT).expect("ACCEPT")[4], ACCEPT);
        drop(s);
        // READY later than the server waits.
        let mut s = unix_connect(&srv.addr);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT).expect("ACCEPT")[4], ACCEPT);
        thread::sleep(Duration::from_millis(500));
        let _ = s.write_all(&handshake(READY, &[]));
        drop(s);
        // HELLO again instead of READY.
        let mut s = unix_connect(&srv.addr);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT).expect("ACCEPT")[4], ACCEPT);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT), None);
        live.null_ok(2 + i, "abandoned: live connection");
    }
    drop(live);
    srv.finish("abandoned");
}
