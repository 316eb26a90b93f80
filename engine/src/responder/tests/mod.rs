//! The responder's tests, by concern: `short_reply` (the Short-reply fast path against the
//! general path), `write_list` (the Write-list fast path), `pulled` (Calls whose stream was
//! pulled: resumed from their summary, answered bare, laid out aligned), `buffers` (the
//! pull buffer reuse, the large-buffer count, a refused post). The fast paths' tests give
//! the general path's bytes, length, invalidation and counters for every Call a fast path
//! takes, and no answer (nothing run, nothing written) for those it leaves to it.

mod buffers;
mod pulled;
mod short_reply;
mod write_list;

use super::*;
use crate::dispatch::ProcSpec;
use crate::fabric::soft::Soft;
use rpcrdma_proto::header::{Chunks, Header};
use rpcrdma_proto::rpc::{AuthStat, OpaqueAuth, AUTH_SYS};

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

/// A pair whose server holds its ring, pull and bulk buffers already (as after its first
/// Call), for tests that reach them before any Call.
fn dressed(
    (c, mut s): (crate::requester::Client<Soft>, ServerConn<Soft>),
) -> (crate::requester::Client<Soft>, ServerConn<Soft>) {
    assert!(s.dress(), "the share gives a connection its buffers");
    (c, s)
}

fn server() -> (crate::requester::Client<Soft>, ServerConn<Soft>) {
    let cfg = ConnConfig::default();
    dressed(crate::loopback::soft_pair(dispatch(), cfg, cfg).expect("soft pair"))
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
    let fields = rpcrdma_proto::v2::MessageFields {
        xid,
        credit,
        ..Default::default()
    };
    let n =
        rpcrdma_proto::v2::encode_message_header(wire, &mut m, fields, Chunks::default()).unwrap();
    assert_eq!(n, hlen);
    let r = rpc.encode(&mut m[hlen..]).unwrap();
    m[hlen + r..].copy_from_slice(args);
    m
}

type Observed = (Option<(u32, Option<u32>)>, Vec<u8>, Tally, Snapshot);

fn sent(built: &ReplyAction, ring: &Buf<Soft>) -> (Option<(u32, Option<u32>)>, Vec<u8>) {
    match *built {
        ReplyAction::Send { len, inv } => {
            (Some((len, inv)), view::bytes(ring, len as usize).to_vec())
        }
        ReplyAction::Nothing => (None, Vec::new()),
        ReplyAction::Fatal | ReplyAction::Deferred => panic!("fatal or deferred"),
    }
}

/// What `path` answers in ring slot `slot` (filled with a marker first): the Send, the
/// bytes, the tally and the counters it moved; `None` when it declines.
fn observe(
    s: &mut ServerConn<Soft>,
    slot: usize,
    path: impl FnOnce(&mut ServerConn<Soft>) -> Option<ReplyAction>,
) -> Option<Observed> {
    let before = s.io.stats.snapshot();
    s.io.tally = Tally::default();
    view::bytes_mut(&mut s.ring[slot]).fill(0xE0 ^ slot as u8);
    let built = path(s)?;
    let (b, bytes) = sent(&built, &s.ring[slot]);
    let tally = core::mem::take(&mut s.io.tally);
    Some((b, bytes, tally, diff(s.io.stats.snapshot(), before)))
}

/// The fast path's answer to `call` (in ring slot 0), `None` when it declines.
fn fast(s: &mut ServerConn<Soft>, call: &[u8], grant: u32) -> Option<Observed> {
    observe(s, 0, |s| {
        let at = Answering {
            grant,
            ..Answering::of(&s.credits, &s.negotiation, &s.dispatch)
        };
        reply::short(
            &mut s.io,
            &mut s.ring[0],
            call,
            &at,
            &mut s.bulk[0],
            &mut HandlerContext::handler(s.id),
        )
    })
}

/// The general path's answer to `call` (in ring slot 1).
fn general(s: &mut ServerConn<Soft>, call: &[u8], grant: u32) -> Observed {
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
) -> Observed {
    observe(s, 1, |s| {
        let g = General {
            at: Answering {
                grant,
                swi,
                ..Answering::of(&s.credits, &s.negotiation, &s.dispatch)
            },
            pull: stream_area(&s.pull[0], 0),
            recv_size: s.config.recv_size,
            judged,
            wire: s.io.wire,
        };
        Some(answer_general(
            &mut s.io,
            &mut s.ring[1],
            call,
            &mut s.bulk[0],
            &g,
            &mut s.echo,
            &mut HandlerContext::handler(s.id),
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
