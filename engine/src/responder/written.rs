//! The Write-list fast path: answers a version 1 Call whose only chunks are Write chunks —
//! the shape of an NFS READ whose data does not fit inline (RFC 8267 §4.2) — without the
//! general path's verdict, planning and header encoder. The Call is accepted by
//! `verdict::write_call` (the full verdict's checks for this shape), each DDP-eligible
//! result goes by RDMA Write into its Write chunk (RFC 8166 §4.3.2.1, §3.4.6), and the
//! Reply header echoes the Write list with the lengths written (§4.3.2.2) by
//! [`chunks::echo_write_list`]. The bytes, RDMA Writes, invalidation and counters are those
//! [`reply::build`](super::reply::build) produces for the same Call (tested in
//! `responder/tests.rs`).

use rpcrdma_proto::chunks::{self, ChunkFill};
use rpcrdma_proto::header::WriteList;
use rpcrdma_proto::rpc::{AcceptStat, AUTH_NONE_ACCEPTED_LEN};
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::Wire;
use rpcrdma_proto::verdict::WriteCall;

use super::handler::{overflowed, run_handler, HandlerContext};
use super::reply::{self, ReplyAction, MAX_SEGMENTS, MAX_WRITE_CHUNKS};
use super::{Answering, FabricSide};
use crate::conn::view;
use crate::dispatch::{Lookup, Outcome, Request, MAX_BULK_RESULTS};
use crate::fabric::Provider;
use crate::pool::Buf;
use crate::stats::bump;
use rpcrdma_proto::emit::{self, DENIED_REPLY_LEN};

/// Where the echoed Write list starts in the Reply header: after `rdma_xid`, `rdma_vers`,
/// `rdma_credit`, `rdma_proc` and the empty Read list's zero.
const LIST_AT: usize = 20;

/// Answers the Call `call`, which `verdict::write_call` accepted as `wc` (a version 1
/// RDMA_MSG with an empty Read list, a Write list and no Reply chunk), when its Write list
/// has 1 to [`MAX_WRITE_CHUNKS`] chunks of 1 to [`MAX_SEGMENTS`] segments each and it calls
/// a registered procedure (RPC version 2) whose DDP-eligible results all
/// have a chunk and whose largest reply fits the reply threshold: the reply is then Short
/// whatever the handler answers (RFC 8166 §3.5.1, `plan::plan_reply`), and nothing but a
/// result longer than its chunk can refuse it (ERR_CHUNK, as `build` refuses it).
///
/// `None` before anything was run or written: the general path answers the Call.
#[inline]
pub(super) fn answer<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    call: &[u8],
    wc: &WriteCall<'_>,
    at: &Answering<'_>,
    bulk: &mut Buf<P>,
    run: &mut HandlerContext<'_, '_>,
) -> Option<ReplyAction> {
    if io.wire != Wire::V1 {
        return None;
    }
    let c = &wc.call;
    let n_chunks = wc.writes.len();
    if !c.is_rpc_v2()
        || n_chunks > MAX_WRITE_CHUNKS
        || wc.writes.iter().any(|ch| ch.len() > MAX_SEGMENTS)
    {
        return None;
    }
    let Lookup::Found(entry) = at.dispatch.lookup(c.prog, c.vers, c.proc_num) else {
        return None;
    };
    let ddp = entry.spec.ddp_results as usize;
    let hlen = wc.header_len;
    let results_at = hlen + AUTH_NONE_ACCEPTED_LEN;
    let out = view::bytes_mut(ring);
    // As in `build`: the room it checks (`hlen + 64`), and a length word for each result
    // after the results.
    if ddp > n_chunks || out.len() < hlen + 64 {
        return None;
    }
    let max = (entry.spec.max_results as usize).min(out.len() - results_at) & !3;
    let largest = results_at + max + 4 * ddp;
    if largest > out.len() || largest as u64 > u64::from(at.threshold) {
        return None;
    }
    let req = Request::of(wc.xid, c, wc.args);
    let (outcome, len, items, n_items) = run_handler(
        entry,
        run,
        &req,
        &mut out[results_at..],
        view::bytes_mut(bulk),
    );
    if overflowed(n_items) {
        // A result larger than the chunks and the bulk buffer that holds them (version 1:
        // ERR_CHUNK).
        let e = v2::RdmaError::ReplyResource {
            length_needed: (AUTH_NONE_ACCEPTED_LEN + len) as u32,
        };
        return Some(reply::refuse_short(io, ring, call, at.grant, e));
    }
    // The reply's RPC words after the transport header, its length, and the DDP-eligible
    // results it places (none but on SUCCESS).
    let (rpc, rpc_words, end, n_items) = match outcome {
        Outcome::Deferred => return Some(ReplyAction::Deferred),
        Outcome::Success => (
            accepted(wc.xid, AcceptStat::Success),
            6,
            results_at + len + 4 * n_items,
            n_items,
        ),
        Outcome::GarbageArgs => {
            bump(&io.stats.garbage_args, 1);
            (accepted(wc.xid, AcceptStat::GarbageArgs), 6, results_at, 0)
        }
        Outcome::SystemErr => {
            bump(&io.stats.system_err, 1);
            (accepted(wc.xid, AcceptStat::SystemErr), 6, results_at, 0)
        }
        Outcome::AuthError(a) => {
            bump(&io.stats.auth_errors, 1);
            // MSG_DENIED / AUTH_ERROR: five words, no results (RFC 5531 §9).
            let [.., x, r, d, e, st] = emit::short_denied_words(wc.xid, at.grant, a);
            ([x, r, d, e, st, 0], 5, hlen + DENIED_REPLY_LEN, 0)
        }
    };
    // Each DDP-eligible result into its chunk, in order (§4.3.2.1): its length word stays
    // inline after the results, its bytes leave the Payload stream (§3.4.6). Every chunk is
    // checked before any RDMA Write is posted.
    let mut written = [0u32; MAX_WRITE_CHUNKS];
    let mut fills: [Option<(ChunkFill<'_>, u32)>; MAX_WRITE_CHUNKS] =
        [const { None }; MAX_WRITE_CHUNKS];
    let placed = place_in_chunks(
        out,
        results_at + len,
        wc.writes,
        (&items, n_items),
        &mut written,
        &mut fills,
    );
    if let Err(e) = placed {
        return Some(reply::refuse_short(io, ring, call, at.grant, e));
    }
    for (fill, off) in fills.iter().flatten() {
        if !reply::post_fill(io, bulk, *off as usize, fill) {
            return Some(ReplyAction::Fatal);
        }
        bump(&io.stats.write_chunks, 1);
    }
    // The transport header: the Call's XID and version, the grant, RDMA_MSG, the empty Read
    // list, the Write list echoed, and the absent Reply chunk (§4.2, §4.3.2.2).
    let out = view::bytes_mut(ring);
    if !put_reply_header(out, wc, at.grant, &written[..n_chunks], &rpc[..rpc_words]) {
        return Some(ReplyAction::Fatal);
    }
    io.tally.short_calls += 1;
    io.tally.short_replies += 1;
    // RFC 8797 §4.1: the Call's first handle, its first Write chunk's first segment.
    let inv = at
        .swi
        .then(|| wc.writes.iter().next().and_then(|ch| ch.get(0)));
    let inv = inv.flatten().map(|s| s.handle);
    if inv.is_some() {
        bump(&io.stats.remote_invalidations, 1);
    }
    Some(ReplyAction::Send {
        len: end as u32,
        inv,
    })
}

/// The accepted RPC Reply header with the AUTH_NONE verifier and `stat` (RFC 5531 §9,
/// §10.1), as words: the end of a Short Reply's prefix.
fn accepted(xid: u32, stat: AcceptStat) -> [u32; 6] {
    let [.., x, r, m, flavor, len, st] = emit::short_reply_words(xid, 0, stat);
    [x, r, m, flavor, len, st]
}

/// Places the first `n_items` DDP-eligible results `items` (offset in the bulk buffer,
/// length) into the Write chunks `writes`, in order (RFC 8166 §4.3.2.1): each one's length
/// word written into `out` from `cursor` on (it stays inline after the results), its
/// chunk's fill and offset into `fills` and its length into `written`. The refusal of a
/// result longer than its chunk (\[V2\] §5.3.3's reason; version 1 says ERR_CHUNK), before
/// any RDMA Write is posted.
#[inline(always)]
fn place_in_chunks<'w>(
    out: &mut [u8],
    mut cursor: usize,
    writes: WriteList<'w>,
    (items, n_items): (&[(u32, u32); MAX_BULK_RESULTS], usize),
    written: &mut [u32; MAX_WRITE_CHUNKS],
    fills: &mut [Option<(ChunkFill<'w>, u32)>; MAX_WRITE_CHUNKS],
) -> Result<(), v2::RdmaError> {
    for (k, chunk) in writes.iter().take(n_items).enumerate() {
        let (off, n) = items[k];
        out[cursor..cursor + 4].copy_from_slice(&n.to_be_bytes());
        cursor += 4;
        match chunks::place_write(chunk, n) {
            Ok(fill) => {
                written[k] = n;
                fills[k] = Some((fill, off));
            }
            Err(_) => {
                return Err(v2::RdmaError::WriteResource {
                    chunk_index: k as u32 + 1,
                    length_needed: n,
                });
            }
        }
    }
    Ok(())
}

/// Writes at the start of `out` the Reply to `wc` with the grant `grant`: its transport
/// header (the Call's XID and version, RDMA_MSG, the empty Read list, the Write list
/// echoed with the lengths `written`, the absent Reply chunk) and then the RPC words
/// `rpc`. False when the echoed list does not take the length the Call's did.
#[inline(always)]
fn put_reply_header(
    out: &mut [u8],
    wc: &WriteCall<'_>,
    grant: u32,
    written: &[u32],
    rpc: &[u32],
) -> bool {
    let hlen = wc.header_len;
    let list_end = hlen - 8;
    emit::put_word_array(out, emit::msg_reply_head(wc.xid, grant));
    if chunks::echo_write_list(wc.writes, written, &mut out[LIST_AT..list_end])
        != Some(list_end - LIST_AT)
    {
        return false;
    }
    out[list_end..hlen].fill(0);
    emit::put_words(&mut out[hlen..], rpc);
    true
}
