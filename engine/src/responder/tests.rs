//! The Short-reply fast path against the general path: the same bytes, length,
//! invalidation and counters for every Call it takes, and no answer (nothing run, nothing
//! written) for those it leaves to the general path.

use super::*;
use crate::dispatch::ProcSpec;
use crate::fabric::soft::Soft;
use rpcrdma_proto::header::{Chunks, Header};
use rpcrdma_proto::rpc::{AcceptStat, AuthStat, OpaqueAuth, AUTH_SYS};

const PROG: u32 = 0x2000_0042;
/// Results as the arguments ask: word 0 the outcome (0 SUCCESS, 1 GARBAGE_ARGS,
/// 2 SYSTEM_ERR, 3 AUTH_ERROR / AUTH_BADCRED, 4 AUTH_ERROR / AUTH_TOOWEAK), word 1 the
/// results length (a multiple of 4).
const ECHOISH: u32 = 1;
/// Results too large for the inline threshold.
const HUGE: u32 = 2;
/// One DDP-eligible result.
const BULKY: u32 = 3;
/// Two DDP-eligible results, of the lengths words 2 and 3 of the arguments give.
const TWO_BULKY: u32 = 4;

fn dispatch() -> Arc<Dispatch> {
    let mut d = Dispatch::new();
    let body = |req: &Request<'_>, resp: &mut Response<'_>| {
        let w = |k: usize| u32::from_be_bytes(req.args[4 * k..4 * k + 4].try_into().unwrap());
        let n = w(1) as usize;
        for (k, b) in resp.results()[..n].iter_mut().enumerate() {
            *b = (k as u8) ^ (req.xid as u8);
        }
        resp.set_results_len(n);
        match w(0) {
            0 => Outcome::Success,
            1 => Outcome::GarbageArgs,
            3 => Outcome::AuthError(AuthStat::AUTH_BADCRED),
            4 => Outcome::AuthError(AuthStat::AUTH_TOOWEAK),
            _ => Outcome::SystemErr,
        }
    };
    d.register(PROG, 1, ECHOISH, ProcSpec::plain(1024), body);
    d.register(PROG, 1, HUGE, ProcSpec::plain(8192), body);
    let bulky = ProcSpec {
        max_results: 64,
        ddp_arg: false,
        ddp_results: 1,
    };
    // BULKY: word 2 the length of its DDP-eligible result (a SYSTEM_ERR when the bulk
    // buffer cannot hold it).
    d.register(PROG, 1, BULKY, bulky, move |req, resp| {
        let outcome = body(req, resp);
        let n = u32::from_be_bytes(req.args[8..12].try_into().unwrap()) as usize;
        match resp.push_bulk(n) {
            Some(b) => {
                for (k, x) in b.iter_mut().enumerate() {
                    *x = (k as u8).wrapping_mul(7) ^ (req.xid as u8);
                }
                outcome
            }
            None => Outcome::SystemErr,
        }
    });
    let two = ProcSpec {
        max_results: 64,
        ddp_arg: false,
        ddp_results: 2,
    };
    d.register(PROG, 1, TWO_BULKY, two, move |req, resp| {
        let outcome = body(req, resp);
        for k in 0..2 {
            let at = 8 + 4 * k;
            let n = u32::from_be_bytes(req.args[at..at + 4].try_into().unwrap()) as usize;
            match resp.push_bulk(n) {
                Some(b) => b.fill(0x30 + k as u8),
                None => return Outcome::SystemErr,
            }
        }
        outcome
    });
    Arc::new(d)
}

fn server() -> (crate::requester::Client<Soft>, ServerConn<Soft>) {
    let cfg = ConnConfig::default();
    crate::loopback::soft_pair(dispatch(), cfg, cfg).expect("soft pair")
}

/// A Short RDMA_MSG Call without chunks (built by the protocol crate's encoders).
fn call_bytes(xid: u32, credit: u32, rpc: CallHeader<'_>, args: &[u8]) -> Vec<u8> {
    call_bytes_in(Wire::V1, xid, credit, rpc, args)
}

/// [`call_bytes`] in version `wire`: version 2's RDMA2_MSG header (no flags, no
/// inv_handle) is 8 bytes longer.
fn call_bytes_in(wire: Wire, xid: u32, credit: u32, rpc: CallHeader<'_>, args: &[u8]) -> Vec<u8> {
    let hlen = 28 + wire.extra();
    let mut m = vec![0u8; hlen + rpc.encoded_len() + args.len()];
    let n = rpcrdma_proto::v2::encode_message_header(
        wire,
        &mut m,
        xid,
        credit,
        false,
        0,
        Chunks::default(),
        false,
    )
    .unwrap();
    assert_eq!(n, hlen);
    let r = rpc.encode(&mut m[hlen..]).unwrap();
    m[hlen + r..].copy_from_slice(args);
    m
}

type Answer = (Option<(u32, Option<u32>)>, Vec<u8>, Tally, Snapshot);

fn sent(built: &Built, ring: &Buf<Soft>) -> (Option<(u32, Option<u32>)>, Vec<u8>) {
    match *built {
        Built::Send { len, inv } => (Some((len, inv)), view::bytes(ring, len as usize).to_vec()),
        Built::Nothing => (None, Vec::new()),
        Built::Fatal | Built::Deferred => panic!("fatal or deferred"),
    }
}

/// What `path` answers in ring slot `slot` (filled with a marker first): the Send, the
/// bytes, the tally and the counters it moved; `None` when it declines.
fn observe(
    s: &mut ServerConn<Soft>,
    slot: usize,
    path: impl FnOnce(&mut ServerConn<Soft>) -> Option<Built>,
) -> Option<Answer> {
    let before = s.io.stats.snapshot();
    s.io.tally = Tally::default();
    view::bytes_mut(&mut s.ring[slot]).fill(0xE0 ^ slot as u8);
    let built = path(s)?;
    let (b, bytes) = sent(&built, &s.ring[slot]);
    let tally = core::mem::take(&mut s.io.tally);
    Some((b, bytes, tally, diff(s.io.stats.snapshot(), before)))
}

/// The fast path's answer to `call` (in ring slot 0), `None` when it declines.
fn fast(s: &mut ServerConn<Soft>, call: &[u8], grant: u32) -> Option<Answer> {
    let threshold = s.negotiation.reply_threshold();
    observe(s, 0, |s| {
        reply::short(
            &mut s.io,
            &mut s.ring[0],
            call,
            grant,
            threshold,
            &s.dispatch,
            &mut s.bulk[0],
            &mut Run::handler(s.id),
        )
    })
}

/// The general path's answer to `call` (in ring slot 1).
fn general(s: &mut ServerConn<Soft>, call: &[u8], grant: u32) -> Answer {
    let swi = s.negotiation.remote_invalidation();
    general_as(s, call, grant, swi, None)
}

/// [`general`] with Send With Invalidate allowed or not (`swi`), and the verdict summary
/// a pulled Call left (`judged`; its stream in pull buffer 0).
fn general_as(
    s: &mut ServerConn<Soft>,
    call: &[u8],
    grant: u32,
    swi: bool,
    judged: Option<CallSummary>,
) -> Answer {
    observe(s, 1, |s| {
        let g = General {
            grant,
            reply_threshold: s.negotiation.reply_threshold(),
            recv_size: s.config.recv_size,
            swi,
            dispatch: &s.dispatch,
            judged,
        };
        Some(answer_general(
            &mut s.io,
            &mut s.ring[1],
            call,
            stream_area(&s.pull[0], 0),
            &mut s.bulk[0],
            &g,
            &mut s.echo,
            &mut Run::handler(s.id),
        ))
    })
    .expect("the general path answers")
}

fn diff(after: Snapshot, before: Snapshot) -> Snapshot {
    Snapshot {
        garbage_args: after.garbage_args - before.garbage_args,
        system_err: after.system_err - before.system_err,
        auth_errors: after.auth_errors - before.auth_errors,
        prog_unavail: after.prog_unavail - before.prog_unavail,
        err_chunk: after.err_chunk - before.err_chunk,
        discards: after.discards - before.discards,
        write_chunks: after.write_chunks - before.write_chunks,
        bytes_written: after.bytes_written - before.bytes_written,
        remote_invalidations: after.remote_invalidations - before.remote_invalidations,
        ..Snapshot::default()
    }
}

#[test]
fn short_reply_prefix_is_what_the_encoders_write() {
    for (xid, grant) in [(1, 1), (0xffff_ffff, 32), (0x1234_5678, 0)] {
        for stat in [
            AcceptStat::Success,
            AcceptStat::GarbageArgs,
            AcceptStat::SystemErr,
        ] {
            let mut want = [0u8; reply::SHORT_RESULTS_AT];
            let h = Header::msg(xid, grant, Chunks::default());
            assert_eq!(h.encode(&mut want), Ok(28));
            let rpc = ReplyHeader::accepted(xid, OpaqueAuth::NONE, stat);
            assert_eq!(rpc.encode(&mut want[28..]), Ok(24));
            let mut got = [0u8; reply::SHORT_RESULTS_AT];
            for (k, w) in reply::short_reply_prefix(xid, grant, stat)
                .iter()
                .enumerate()
            {
                got[4 * k..4 * k + 4].copy_from_slice(&w.to_be_bytes());
            }
            assert_eq!(got, want, "xid {xid:#x} grant {grant} {stat:?}");
        }
    }
}

#[test]
fn short_denied_prefix_is_what_the_encoders_write() {
    for (xid, grant) in [(1, 1), (0xffff_ffff, 32)] {
        for stat in [AuthStat::AUTH_BADCRED, AuthStat::AUTH_TOOWEAK] {
            let mut want = [0u8; 48];
            let h = Header::msg(xid, grant, Chunks::default());
            assert_eq!(h.encode(&mut want), Ok(28));
            let rpc = ReplyHeader::auth_error(xid, stat);
            assert_eq!(rpc.encode(&mut want[28..]), Ok(20));
            let mut got = [0u8; 48];
            for (k, w) in reply::short_denied_prefix(xid, grant, stat)
                .iter()
                .enumerate()
            {
                got[4 * k..4 * k + 4].copy_from_slice(&w.to_be_bytes());
            }
            assert_eq!(got, want, "xid {xid:#x} grant {grant} {stat:?}");
        }
    }
}

#[test]
fn fast_path_answers_byte_for_byte_as_the_general_path() {
    let (_client, mut s) = server();
    let sys_body = [0u8, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let creds = [OpaqueAuth::NONE, OpaqueAuth::new(AUTH_SYS, &sys_body)];
    let mut taken = 0;
    for (xid, credit, grant) in [(1, 1, 1), (0xdead_beef, 32, 17), (0x8000_0000, 0, 32)] {
        for cred in creds {
            for outcome in 0u32..5 {
                for len in [0u32, 4, 12, 100, 1024] {
                    let rpc = CallHeader::new(xid, PROG, 1, ECHOISH, cred, OpaqueAuth::NONE);
                    let args: Vec<u8> = [outcome, len]
                        .iter()
                        .flat_map(|w| w.to_be_bytes())
                        .collect();
                    let call = call_bytes(xid, credit, rpc, &args);
                    let f = fast(&mut s, &call, grant).expect("taken by the fast path");
                    let g = general(&mut s, &call, grant);
                    assert_eq!(f, g, "xid {xid:#x} outcome {outcome} len {len}");
                    // Results after the accepted header; an AUTH_ERROR header is 20 bytes.
                    let want = match outcome {
                        0 => 52 + len,
                        1 | 2 => 52,
                        _ => 48,
                    };
                    assert_eq!(f.0, Some((want, None)));
                    taken += 1;
                }
            }
        }
    }
    assert_eq!(taken, 150);
}

/// A procedure with a DDP-eligible result, called without a Write list: the result goes
/// inline after the results, or the reply is refused when that passes the threshold or
/// the buffer, as the general path does.
#[test]
fn fast_path_places_ddp_results_inline_as_the_general_path() {
    let (_client, mut s) = server();
    let threshold = s.negotiation.reply_threshold();
    let ring = s.ring[0].size() as u32;
    let mut refused = 0;
    for (wire, outcome) in [Wire::V1, Wire::V2]
        .into_iter()
        .flat_map(|w| [0u32, 1, 2, 3].map(|o| (w, o)))
    {
        // Version 2's header is 8 bytes longer, its refusals RDMA2_ERROR.
        s.io.wire = wire;
        let extra = wire.extra() as u32;
        for len in [0u32, 4, 64] {
            for n in [
                0,
                1,
                5,
                100,
                threshold - 120,
                threshold - 52,
                threshold,
                ring,
                70_000,
            ] {
                let xid = 0x51 + n;
                let rpc = CallHeader::new(xid, PROG, 1, BULKY, OpaqueAuth::NONE, OpaqueAuth::NONE);
                let args: Vec<u8> = [outcome, len, n]
                    .iter()
                    .flat_map(|w| w.to_be_bytes())
                    .collect();
                let call = call_bytes_in(wire, xid, 8, rpc, &args);
                let f = fast(&mut s, &call, 8).expect("taken by the fast path");
                let g = general(&mut s, &call, 8);
                assert_eq!(f, g, "{wire:?} outcome {outcome} results {len} bulk {n}");
                if outcome == 0 && n == 5 {
                    // The results, then the opaque: its length word and 5 bytes padded to 8.
                    assert_eq!(f.0, Some((52 + extra + len + 4 + 8, None)));
                    let at = (52 + extra + len) as usize;
                    assert_eq!(f.1[at..at + 4], 5u32.to_be_bytes());
                    assert_eq!(f.1[at + 9..at + 12], [0, 0, 0]);
                }
                // A refusal: RDMA_ERROR (ERR_CHUNK) or RDMA2_ERROR, proc 4 either way.
                if outcome == 0 && f.1.get(12..16) == Some(&4u32.to_be_bytes()[..]) {
                    refused += 1;
                }
            }
        }
    }
    // The larger results passed the threshold (or the buffer) and were refused.
    assert!(refused >= 18, "{refused} refused");
    s.io.wire = Wire::V1;
}

#[test]
fn fast_path_declines_what_it_does_not_answer() {
    let (_client, mut s) = server();
    let args: Vec<u8> = [0u32, 8].iter().flat_map(|w| w.to_be_bytes()).collect();
    let good = CallHeader::new(9, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut cases = vec![
        // Unknown program, version, procedure; RPC version 3.
        call_bytes(9, 1, CallHeader { prog: 5, ..good }, &args),
        call_bytes(9, 1, CallHeader { vers: 2, ..good }, &args),
        call_bytes(
            9,
            1,
            CallHeader {
                proc_num: 77,
                ..good
            },
            &args,
        ),
        call_bytes(9, 1, CallHeader { rpcvers: 3, ..good }, &args),
        // Results that may not fit inline.
        call_bytes(
            9,
            1,
            CallHeader {
                proc_num: HUGE,
                ..good
            },
            &args,
        ),
    ];
    let ok = call_bytes(9, 1, good, &args);
    // XID mismatch, version 2, RDMA_NOMSG, a Write list, a truncated RPC header, a
    // credential over 400 bytes, a Reply instead of a Call.
    let mut m = ok.clone();
    m[31] = 8;
    cases.push(m);
    let mut m = ok.clone();
    m[7] = 2;
    cases.push(m);
    let mut m = ok.clone();
    m[15] = 1;
    cases.push(m);
    let mut m = ok.clone();
    m[23] = 1;
    cases.push(m);
    cases.push(ok[..60].to_vec());
    let mut m = ok.clone();
    m[28 + 28..28 + 32].copy_from_slice(&401u32.to_be_bytes());
    cases.push(m);
    let mut m = ok.clone();
    m[28 + 7] = 1;
    cases.push(m);
    for (k, m) in cases.iter().enumerate() {
        assert!(fast(&mut s, m, 4).is_none(), "case {k}");
        // The general path still answers them (or discards), as before.
        let _ = general(&mut s, m, 4);
    }
    assert!(fast(&mut s, &ok, 4).is_some());
}

/// A chunked or Long Call answered from the summary its pull left (`Slot::judged`) gets
/// the answer it gets when judged again.
#[test]
fn resumed_chunked_calls_are_answered_as_judged_ones() {
    use rpcrdma_proto::header::{ReadSegment, Segment};
    let (_client, mut s) = server();
    let xid = 0x77;
    let rpc = CallHeader::new(xid, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut head = vec![0u8; 40];
    rpc.encode(&mut head).unwrap();
    // Arguments: SUCCESS, 16 bytes of results, then a 100-byte opaque in a Read chunk.
    for w in [0u32, 16, 100] {
        head.extend_from_slice(&w.to_be_bytes());
    }
    let mut stream = head.clone();
    stream.extend_from_slice(&[0xab; 100]);
    stream.extend_from_slice(&[0; 4]);
    let chunk = [ReadSegment::new(52, 0x1234, 100, 0x1000)];
    let p0 = [ReadSegment::new(0, 0x1234, stream.len() as u32, 0x1000)];
    let reply = [Segment::new(0x99, 4096, 0x8000)];
    let chunked = |reply: Option<&[Segment]>| {
        let chunks = Chunks {
            reads: &chunk,
            writes: &[],
            reply,
        };
        let h = Header::msg(xid, 3, chunks);
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        m.extend_from_slice(&head);
        m
    };
    let long = {
        let chunks = Chunks {
            reads: &p0,
            writes: &[],
            reply: Some(&reply),
        };
        let h = Header::nomsg(xid, 3, chunks);
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        m
    };
    // The rkey to invalidate: the Reply chunk's, else the Read list's (RFC 8797 §4.1).
    for (call, rkey) in [
        (chunked(None), 0x1234),
        (chunked(Some(&reply)), 0x99),
        (long, 0x99),
    ] {
        let summary = verdict::judge_call(&call).expect("accepted").summary();
        view::bytes_mut(&mut s.pull[0])[..stream.len()].copy_from_slice(&stream);
        let mut answers = Vec::new();
        for judged in [None, Some(summary)] {
            s.io.tally = Tally::default();
            let g = General {
                grant: 5,
                reply_threshold: s.negotiation.reply_threshold(),
                recv_size: 4096,
                swi: true,
                dispatch: &s.dispatch,
                judged,
            };
            let built = answer_general(
                &mut s.io,
                &mut s.ring[2],
                &call,
                stream_area(&s.pull[0], 0),
                &mut s.bulk[0],
                &g,
                &mut s.echo,
                &mut Run::handler(s.id),
            );
            let (b, bytes) = sent(&built, &s.ring[2]);
            answers.push((b, bytes, core::mem::take(&mut s.io.tally)));
        }
        assert_eq!(answers[0], answers[1]);
        // A reply carrying the 16 bytes of results, invalidating the Call's rkey.
        let (len, inv) = answers[0].0.expect("a reply");
        assert!(len >= 28 + 24 + 16);
        assert_eq!(inv, Some(rkey));
    }
}

/// The Write-list fast path's answer to `call` (in ring slot 0), `None` when it declines.
fn fast_written(s: &mut ServerConn<Soft>, call: &[u8], grant: u32) -> Option<Answer> {
    let threshold = s.negotiation.reply_threshold();
    let swi = s.negotiation.remote_invalidation();
    let wc = verdict::write_call(call)?;
    observe(s, 0, |s| {
        written::answer(
            &mut s.io,
            &mut s.ring[0],
            call,
            &wc,
            grant,
            threshold,
            swi,
            &s.dispatch,
            &mut s.bulk[0],
            &mut Run::handler(s.id),
        )
    })
}

/// The Short-reply fast path's answer (in ring slot 0) to the pulled Call `call`, whose
/// stream is the first `len` bytes of pull buffer 0, invalidating `inv`; `None` when it
/// declines.
fn fast_pulled(
    s: &mut ServerConn<Soft>,
    call: &[u8],
    len: usize,
    inv: Option<u32>,
) -> Option<Answer> {
    let threshold = s.negotiation.reply_threshold();
    observe(s, 0, |s| {
        reply::short_pulled(
            &mut s.io,
            &mut s.ring[0],
            call,
            view::bytes(&s.pull[0], len),
            inv,
            5,
            threshold,
            &s.dispatch,
            &mut s.bulk[0],
            &mut Run::handler(s.id),
        )
    })
}

/// An RDMA_MSG Call with `chunks`, then the RPC Call header and `args`.
fn chunked_call(xid: u32, chunks: Chunks<'_>, rpc: CallHeader<'_>, args: &[u8]) -> Vec<u8> {
    let h = Header::msg(xid, 8, chunks);
    let mut m = vec![0u8; h.encoded_len() + rpc.encoded_len()];
    let n = h.encode(&mut m).unwrap();
    rpc.encode(&mut m[n..]).unwrap();
    m.extend_from_slice(args);
    m
}

/// Calls whose only chunks are Write chunks (one or two, one to three segments, long
/// enough or not for their results), every outcome, results of several lengths: the fast
/// path takes each and gives the general path's bytes, length, invalidation, counters and
/// RDMA Writes (the data the client's memory receives).
#[test]
fn write_list_path_answers_as_the_general_path() {
    use crate::fabric::{MemoryRegion, ProtectionDomain};
    use rpcrdma_proto::header::Segment;
    let (client, mut s) = server();
    const MEM: usize = 1 << 16;
    let access = crate::fabric::Access::LOCAL_WRITE | crate::fabric::Access::REMOTE_WRITE;
    let mem = client.pd().alloc_region(MEM, access).expect("region");
    let (base, rkey) = (mem.addr(), mem.rkey());
    let seg = |off: u64, len: u32| Segment::new(rkey, len, base + off);
    // Chunk shapes: one segment; three (5, 100 and 4,000 bytes); one of 10 bytes, shorter
    // than most results.
    let one = [seg(0, 8192)];
    let three = [seg(8192, 5), seg(9000, 100), seg(12000, 4000)];
    let short = [seg(20000, 10)];
    let second = [seg(30000, 2000)];
    let lists: [&[&[Segment]]; 4] = [&[&one], &[&three], &[&short], &[&one, &second]];
    let (mut taken, mut refused, mut data_seen) = (0, 0, false);
    for (l, writes) in lists.iter().enumerate() {
        for proc_num in [BULKY, TWO_BULKY] {
            for outcome in 0u32..5 {
                for (len, n, n2) in [
                    (0u32, 0u32, 0u32),
                    (4, 1, 3),
                    (12, 9, 0),
                    (64, 4106, 1500),
                    (8, 0, 2001),
                ] {
                    let xid = 0x900 + taken;
                    let rpc =
                        CallHeader::new(xid, PROG, 1, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE);
                    let args: Vec<u8> = [outcome, len, n, n2]
                        .iter()
                        .flat_map(|w| w.to_be_bytes())
                        .collect();
                    let chunks = Chunks {
                        reads: &[],
                        writes,
                        reply: None,
                    };
                    let call = chunked_call(xid, chunks, rpc, &args);
                    mem.write_at(0, &[0u8; MEM]);
                    let f = fast_written(&mut s, &call, 8);
                    let mut fast_mem = vec![0u8; MEM];
                    mem.read_at(0, &mut fast_mem);
                    mem.write_at(0, &[0u8; MEM]);
                    let g = general(&mut s, &call, 8);
                    let mut general_mem = vec![0u8; MEM];
                    mem.read_at(0, &mut general_mem);
                    // Retire the RDMA Writes' send-queue slots.
                    s.poll();
                    let what = format!("list {l} proc {proc_num} outcome {outcome} {len}/{n}/{n2}");
                    // Two results with one chunk: the second would go inline.
                    if proc_num == TWO_BULKY && writes.len() == 1 {
                        assert!(f.is_none(), "{what}: declined");
                        continue;
                    }
                    let f = f.unwrap_or_else(|| panic!("{what}: taken by the fast path"));
                    assert_eq!(f, g, "{what}");
                    assert!(fast_mem == general_mem, "{what}: the same RDMA Writes");
                    taken += 1;
                    data_seen |= fast_mem.iter().any(|&b| b != 0);
                    // A refusal: RDMA_ERROR, proc 4.
                    if f.1.get(12..16) == Some(&4u32.to_be_bytes()[..]) {
                        refused += 1;
                    }
                }
            }
        }
    }
    // 4 shapes × 5 outcomes × 5 sizes for BULKY, the two-chunk shape for TWO_BULKY.
    assert_eq!(taken, 125);
    // A result one byte longer than its chunk is refused (ERR_CHUNK), on SUCCESS only: the
    // 4,106 bytes in the 10-byte and the 4,105-byte chunks, the second result's 2,001
    // bytes in the 2,000-byte second chunk. The 9 bytes fit the 10-byte chunk.
    assert_eq!(refused, 3);
    assert!(data_seen, "results reached the client's memory");
}

/// What the Write-list fast path leaves to the general path: version 2, a Read list, a
/// Reply chunk, an empty or over-long chunk, too many chunks, results that may pass the
/// reply threshold, a procedure not registered, an XID that does not match.
#[test]
fn write_list_path_declines_what_it_does_not_answer() {
    use rpcrdma_proto::header::{ReadSegment, Segment};
    let (_client, mut s) = server();
    let seg = Segment::new(0x77, 4096, 0x10_0000);
    let args: Vec<u8> = [0u32, 8, 16, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    let rpc = |proc_num| CallHeader::new(5, PROG, 1, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let with = |writes: &[&[Segment]], reply: Option<&[Segment]>, reads: &[ReadSegment], p| {
        chunked_call(
            5,
            Chunks {
                reads,
                writes,
                reply,
            },
            rpc(p),
            &args,
        )
    };
    let many: Vec<Segment> = vec![seg; reply::MAX_SEGMENTS + 1];
    let single = [seg];
    let nine: Vec<&[Segment]> = vec![&single[..]; reply::MAX_WRITE_CHUNKS + 1];
    let read = [ReadSegment::new(100, 0x55, 16, 0x2000)];
    let ok = with(&[&[seg]], None, &[], BULKY);
    let mut wrong_xid = ok.clone();
    let at = ok.len() - args.len() - 40;
    wrong_xid[at + 3] ^= 1;
    let cases = [
        with(&[&[seg]], Some(&[seg]), &[], BULKY),
        with(&[&[seg]], None, &read, BULKY),
        with(&[&[]], None, &[], BULKY),
        with(&[&many], None, &[], BULKY),
        with(&nine, None, &[], BULKY),
        with(&[&[seg]], None, &[], HUGE),
        with(&[&[seg]], None, &[], 99),
        with(&[], None, &[], BULKY),
        wrong_xid,
    ];
    for (k, m) in cases.iter().enumerate() {
        assert!(fast_written(&mut s, m, 4).is_none(), "case {k}");
    }
    s.io.wire = Wire::V2;
    assert!(fast_written(&mut s, &ok, 4).is_none(), "version 2");
    s.io.wire = Wire::V1;
    // The same Call in version 1 is taken (its Write goes to an rkey the client never
    // registered: the connection fails, after the answer was built).
    assert!(fast_written(&mut s, &ok, 4).is_some());
}

/// A pulled Call (a Read chunk, or a Long Call's Position-Zero chunk) without Write list
/// or Reply chunk: the Short-reply fast path answers it from the pull buffer with the
/// general path's bytes, length, invalidation (its first Read handle, when both ends set
/// R) and counters, for every outcome, results and inline DDP results up to past the
/// threshold; it declines a stream whose RPC XID is another.
#[test]
fn pulled_calls_without_write_or_reply_chunks_answer_as_the_general_path() {
    use rpcrdma_proto::header::ReadSegment;
    let (_client, mut s) = server();
    let threshold = s.negotiation.reply_threshold();
    let mut taken = 0;
    let mut refused = 0;
    for swi in [false, true] {
        for long in [false, true] {
            for (proc_num, outcome, len, n) in [ECHOISH, BULKY]
                .into_iter()
                .flat_map(|p| (0u32..5).map(move |o| (p, o)))
                .flat_map(|(p, o)| {
                    [(0u32, 0u32), (12, 5), (64, threshold - 100), (4, 70_000)]
                        .map(|(l, n)| (p, o, l, n))
                })
            {
                let xid = 0x3300 + taken;
                let rpc =
                    CallHeader::new(xid, PROG, 1, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE);
                let mut stream = vec![0u8; rpc.encoded_len()];
                rpc.encode(&mut stream).unwrap();
                for w in [outcome, len, n, 100] {
                    stream.extend_from_slice(&w.to_be_bytes());
                }
                let at = stream.len() as u32;
                stream.extend_from_slice(&[0xab; 100]);
                let (header, chunk) = if long {
                    let p0 = [ReadSegment::new(0, 0x4321, stream.len() as u32, 0x1000)];
                    let h = Header::nomsg(
                        xid,
                        3,
                        Chunks {
                            reads: &p0,
                            writes: &[],
                            reply: None,
                        },
                    );
                    let mut m = vec![0u8; h.encoded_len()];
                    h.encode(&mut m).unwrap();
                    (m, 0x4321)
                } else {
                    let rs = [ReadSegment::new(at, 0x1234, 100, 0x1000)];
                    let h = Header::msg(
                        xid,
                        3,
                        Chunks {
                            reads: &rs,
                            writes: &[],
                            reply: None,
                        },
                    );
                    let mut m = vec![0u8; h.encoded_len()];
                    h.encode(&mut m).unwrap();
                    m.extend_from_slice(&stream[..at as usize]);
                    (m, 0x1234)
                };
                let summary = verdict::judge_call(&header).expect("accepted").summary();
                view::bytes_mut(&mut s.pull[0])[..stream.len()].copy_from_slice(&stream);
                // The fast path in ring slot 0; the general path, resumed from the
                // summary, in ring slot 1.
                let inv = swi.then_some(chunk);
                let f = fast_pulled(&mut s, &header, stream.len(), inv)
                    .expect("taken by the fast path");
                let g = general_as(&mut s, &header, 5, swi, Some(summary));
                let what =
                    format!("swi {swi} long {long} proc {proc_num} outcome {outcome} {len}/{n}");
                assert_eq!(f, g, "{what}");
                if f.1.get(12..16) == Some(&4u32.to_be_bytes()[..]) {
                    refused += 1;
                } else {
                    assert_eq!(f.0.map(|(_, inv)| inv), Some(inv), "{what}");
                }
                taken += 1;
            }
        }
    }
    assert_eq!(taken, 160);
    // BULKY's DDP result inline past the threshold (64 bytes of results, then the
    // threshold less 100), on SUCCESS, in each of the four configurations; its 70,000
    // bytes do not fit the bulk buffer (SYSTEM_ERR).
    assert_eq!(refused, 4);
    // Another XID inside the pulled stream: left to the general path (ERR_CHUNK).
    let rpc = CallHeader::new(9, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut stream = vec![0u8; rpc.encoded_len()];
    rpc.encode(&mut stream).unwrap();
    stream.extend_from_slice(&[0; 8]);
    let p0 = [ReadSegment::new(0, 0x4321, stream.len() as u32, 0x1000)];
    let h = Header::nomsg(
        10,
        3,
        Chunks {
            reads: &p0,
            writes: &[],
            reply: None,
        },
    );
    let mut header = vec![0u8; h.encoded_len()];
    h.encode(&mut header).unwrap();
    view::bytes_mut(&mut s.pull[0])[..stream.len()].copy_from_slice(&stream);
    let declined = fast_pulled(&mut s, &header, stream.len(), None);
    assert!(declined.is_none());
}

/// Submits `call`, drives both ends in this thread until it completes (at most 10 s) and
/// says whether it succeeded with results `judge` accepts.
fn drive_call(
    c: &mut crate::requester::Client<Soft>,
    s: &mut ServerConn<Soft>,
    call: &crate::requester::CallArgs<'_>,
    judge: impl Fn(&[u8]) -> bool,
) -> bool {
    c.submit(call, 1).expect("submit");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut out = None;
    while out.is_none() {
        s.poll();
        c.poll_completions(|x| out = Some(x.result.map(|r| judge(r.results)).unwrap_or(false)));
        assert!(
            std::time::Instant::now() < deadline,
            "no completion in 10 s"
        );
    }
    out.unwrap_or(false)
}

/// Submits a WRITE of 3000 pattern bytes (seed `seed`) forced into a Read chunk, drives
/// both ends until it completes and says whether the server found the data intact.
fn pulled_write(
    c: &mut crate::requester::Client<Soft>,
    s: &mut ServerConn<Soft>,
    seed: u32,
) -> bool {
    use crate::program::{fill_pattern, word, VERS, WRITE};
    use rpcrdma_proto::plan::{CallForm, Forced};
    let mut data = vec![0; 3000];
    fill_pattern(seed, &mut data);
    let head = seed.to_be_bytes();
    let mut w = crate::requester::CallArgs::new(crate::program::PROG, VERS, WRITE, &head, 8);
    w.bulk_arg = Some(&data);
    w.forced = Forced {
        min_form: Some(CallForm::Chunked),
        reply_chunk: false,
    };
    drive_call(c, s, &w, |r| word(r, 0) == Some(1))
}

#[test]
fn a_pulled_call_takes_the_pull_buffer_the_last_one_used() {
    let cfg = ConnConfig::default();
    let (mut c, mut s) =
        crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("soft pair");
    let n = s.pull.len();
    assert!(n >= 4, "a ring of several receives");
    let addrs = |s: &ServerConn<Soft>| s.pull.iter().map(Buf::addr).collect::<Vec<_>>();
    let mut own: Vec<u64> = addrs(&s);
    own.sort_unstable();
    // Call 0 lands in receive 0 and pulls into its own buffer; every later one lands in
    // the next receive and takes that same buffer, so one buffer takes every pull.
    assert!(pulled_write(&mut c, &mut s, 1));
    let first = s.pull[0].addr();
    assert_eq!(s.hot_pull, Some(0));
    for k in 1..2 * n as u32 + 3 {
        assert!(
            pulled_write(&mut c, &mut s, 1 + k),
            "Call {k}'s data intact"
        );
        let r = (k as usize) % n;
        assert_eq!(s.hot_pull, Some(r as u32));
        assert_eq!(
            s.pull[r].addr(),
            first,
            "Call {k} pulled into the hot buffer"
        );
    }
    // The exchanges only moved buffers between receives: each is still held once.
    let mut now = addrs(&s);
    now.sort_unstable();
    assert_eq!(now, own);
    // A Short Call uses no pull buffer and leaves the hot one as it is.
    let null =
        crate::requester::CallArgs::new(crate::program::PROG, crate::program::VERS, 0, &[], 0);
    assert!(drive_call(&mut c, &mut s, &null, |_| true));
    let hot = s.hot_pull;
    assert!(pulled_write(&mut c, &mut s, 77));
    let r = s.hot_pull.expect("set") as usize;
    assert_ne!(Some(r as u32), hot, "the WRITE landed in a later receive");
    assert_eq!(s.pull[r].addr(), first);
}

#[test]
fn a_busy_slot_keeps_its_pull_buffer() {
    let (_c, mut s) = server();
    let before: Vec<u64> = s.pull.iter().map(Buf::addr).collect();
    // Slot 1 answered last but is pulling again: slot 2 may not take its buffer.
    s.hot_pull = Some(1);
    s.slots[1].state = State::Pulling { phase: 1 };
    super::pull::take_hot_pull(&mut s.hot_pull, &mut s.pull, &s.slots, &s.large, 2);
    assert_eq!(s.hot_pull, None, "the hint is used once");
    let after: Vec<u64> = s.pull.iter().map(Buf::addr).collect();
    assert_eq!(before, after);
    // Idle, it may.
    s.slots[1].state = State::Posted;
    s.hot_pull = Some(1);
    super::pull::take_hot_pull(&mut s.hot_pull, &mut s.pull, &s.slots, &s.large, 2);
    assert_eq!((s.pull[2].addr(), s.pull[1].addr()), (before[1], before[2]));
}

#[test]
fn a_refused_post_is_counted_and_ends_the_connection() {
    let (mut c, mut s) = server();
    let null = crate::requester::CallArgs::new(PROG, 1, 0, &[], 0);
    c.submit(&null, 1).expect("submit");
    // Fill the send queue behind the engine's back with unsignaled zero-length RDMA
    // Writes (what the fence of `state.rs` is), so that the reply's post is refused.
    let mut filled = 0;
    loop {
        let wr = SendWr::write(wrid::pack(Kind::Write, 0, 0), &[], RemoteAddr::new(0, 0));
        match s.io.qp.post_send(&wr) {
            Ok(()) => filled += 1,
            Err(crate::fabric::PostError::QueueFull) => break,
            Err(e) => panic!("unexpected refusal {e:?}"),
        }
        assert!(filled < 1 << 16, "the send queue never filled");
    }
    let before = s.snapshot();
    assert_eq!((before.post_refused, before.conn_lost), (0, 0));
    s.poll();
    let after = s.snapshot();
    assert_eq!((after.post_refused, after.conn_lost), (1, 1));
    assert!(s.is_dead(), "the connection is ended");
    // The client learns of it: its RPC completes with the loss.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut lost = None;
    while lost.is_none() {
        c.poll_completions(|x| lost = Some(x.result.err()));
        assert!(
            std::time::Instant::now() < deadline,
            "no completion in 10 s"
        );
    }
    assert_eq!(lost, Some(Some(crate::requester::RpcError::ConnectionLost)));
    assert_eq!(c.snapshot().post_refused, 0, "the client refused nothing");
}

#[test]
fn the_count_of_large_buffers_out_is_what_is_held() {
    use crate::program::{encode_words, fill_pattern, word, PROG, READ, VERS, WRITE};
    let cfg = ConnConfig {
        bulk_size: 1 << 20,
        ..ConnConfig::default()
    };
    let (mut c, mut s) =
        crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("pair");
    let mut data = vec![0; 300_000];
    fill_pattern(5, &mut data);
    let seed = 5u32.to_be_bytes();
    let mut write = crate::requester::CallArgs::new(PROG, VERS, WRITE, &seed, 12);
    write.bulk_arg = Some(&data);
    let args = encode_words(300_000, 5);
    let mut read = crate::requester::CallArgs::new(PROG, VERS, READ, &args, 8);
    let results = [300_000];
    read.bulk_results = &results;
    let null = crate::requester::CallArgs::new(PROG, VERS, 0, &[], 0);
    // A Long Call and a Long reply (through a Reply chunk): a large buffer reserved for it.
    let mut arg = vec![0; crate::program::opaque_len(100_000)];
    crate::program::encode_opaque(&mut arg, 100_000, |d| fill_pattern(9, d)).expect("sized");
    let echo =
        crate::requester::CallArgs::new(PROG, VERS, crate::program::ECHO, &arg, arg.len() as u32);
    let mut seen_out = 0;
    for k in 0..4 * s.ring.len() {
        let a = match k % 4 {
            0 => &write,
            1 => &read,
            2 => &echo,
            _ => &null,
        };
        let ok = drive_call(&mut c, &mut s, a, |r| word(r, 0) != Some(0));
        assert!(ok, "RPC {k} succeeded");
        assert_eq!(s.large.out(), s.large.held(), "after RPC {k}");
        seen_out = seen_out.max(s.large.out());
    }
    assert!(seen_out > 0, "large buffers were used");
    assert!(s.snapshot().large_bulk > 0);
}

#[test]
fn a_pulled_chunk_lands_where_its_source_is_in_a_cache_line() {
    let cfg = ConnConfig::default();
    let (mut c, mut s) =
        crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("soft pair");
    let mut shifted = 0;
    for seed in 1..6 {
        assert!(
            pulled_write(&mut c, &mut s, seed),
            "Call {seed}'s data intact"
        );
        let r = s.hot_pull.expect("a pulled Call was answered") as usize;
        let slot = &s.slots[r];
        let op = slot.reads[0];
        let dst = s.pull[r].addr() + u64::from(slot.shift + op.dst);
        assert_eq!(
            dst % 64,
            op.remote.addr % 64,
            "Call {seed}: same offset in a line"
        );
        shifted += u32::from(slot.shift != 0);
    }
    // The chunk's XDR position is not a multiple of 64 (it follows the Call's header): the
    // stream had to move for it.
    assert!(shifted > 0);
}

#[test]
fn the_shift_follows_the_largest_chunk_and_keeps_xdr_alignment() {
    use rpcrdma_proto::header::ReadSegment;
    let xid = 0x78;
    let rpc = CallHeader::new(xid, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut head = vec![0u8; 40];
    rpc.encode(&mut head).unwrap();
    head.extend_from_slice(&[0; 12]);
    let shift_of = |reads: &[ReadSegment], long: bool| {
        let chunks = Chunks {
            reads,
            writes: &[],
            reply: None,
        };
        let h = if long {
            Header::nomsg(xid, 3, chunks)
        } else {
            Header::msg(xid, 3, chunks)
        };
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        if !long {
            m.extend_from_slice(&head);
        }
        let Ok(call) = version::judged(&m, None, Wire::V1) else {
            panic!("refused: {reads:?} long {long}")
        };
        super::pull::align_shift(&call.plan)
    };
    // One chunk at XDR position 52 read from an address 20 past a line: the stream starts
    // 32 bytes in, so that the chunk lands at 32 + 52 = 84 = 64 + 20.
    assert_eq!(
        shift_of(&[ReadSegment::new(52, 1, 3000, 0x2000 + 20)], false),
        Some(32)
    );
    // Two chunks: the larger (the second) decides, whatever the first's source.
    let two = [
        ReadSegment::new(44, 1, 100, 0x1000 + 8),
        ReadSegment::new(44 + 100 + 8, 1, 3000, 0x2000),
    ];
    // Positions are in the stream with the chunks in place: the second chunk lands after
    // the first's 100 bytes (no pad) and the 8 inline bytes that follow it.
    let at = 44 + 100 + 8;
    assert_eq!(shift_of(&two, false), Some((64 - at % 64) % 64));
    // A source address not a multiple of 4 is met to within 4 bytes: the shift stays a
    // multiple of 4.
    let odd = shift_of(&[ReadSegment::new(52, 1, 3000, 0x2000 + 23)], false).unwrap();
    assert_eq!(odd % 4, 0);
    assert_eq!((odd + 52) % 64, 20);
    // A Long Call: its Position-Zero chunk lands at the tail of the stream (here the whole
    // of it), so the stream's start is met to the source's offset in its line.
    assert_eq!(
        shift_of(&[ReadSegment::new(0, 1, 200, 0x3000 + 36)], true),
        Some(36)
    );
    // Nothing to read: no shift.
    assert_eq!(shift_of(&[], false), None);
}
