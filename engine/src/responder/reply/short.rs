//! The Short-reply fast path in either version: a Short Call (`short`, `short_of`), or a
//! version 1 Call whose stream was pulled and which provided no Write list and no Reply
//! chunk (`short_pulled`), answered with a bare RDMA_MSG (RDMA2_MSG) written word by word at
//! fixed offsets, its DDP-eligible results placed inline (RFC 8166 §3.5.1, §4.3.2); the
//! bytes and counters are those [`build`](super::build) produces for the same Call.

use super::*;

/// Where the results of a Short Reply without chunks start: the 28-byte RDMA_MSG header of
/// three empty lists (RFC 8166 §4.7) and the accepted RPC Reply header.
const SHORT_RESULTS_AT: usize = MIN_HEADER_LEN + AUTH_NONE_ACCEPTED_LEN;

/// The Short-reply fast path: answers a Short RDMA_MSG Call without any chunk whose
/// procedure is registered (RPC version 2), when the largest reply it can make without its
/// DDP-eligible results fits the reply threshold (RFC 8166 §3.5.1, §4.3.3 — the form
/// [`build`] would choose). The transport header and the accepted RPC Reply header are
/// written word by word at fixed offsets, the handler writes its results after them, and
/// nothing is planned, matched or echoed. DDP-eligible results go inline after the results,
/// as a Call without a Write list asks (§4.3.2: no chunk to put them in); a reply they make
/// too large for the threshold is refused as [`build`] refuses it (ERR_CHUNK, or version
/// 2's RDMA2_ERR_REPLY_RESOURCE). The bytes and counters are those [`build`] produces for
/// the same Call (tested below).
///
/// `None` before anything was run or written: the Call is not one of these (or is
/// malformed), and the caller takes the general path, which gives every other answer and
/// every error verdict.
#[inline]
pub(in crate::responder) fn short<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    call: &[u8],
    at: &Answering<'_>,
    bulk: &mut Buf<P>,
    run: &mut HandlerContext<'_, '_>,
) -> Option<ReplyAction> {
    // Version 2: the same Call after RDMA2_MSG's 36-byte header (flags clear, no
    // inv_handle), answered with RPCRDMA2_F_RESPONSE ([V2] §3.2).
    let sc = match io.wire {
        Wire::V1 => verdict::short_call(call)?,
        Wire::V2 => rpcrdma_proto::v2::short_call(call)?,
    };
    short_of(io, ring, call, &sc, at, bulk, run)
}

/// [`short`] for the Call `call` already classified Short (`sc`, by
/// `rpcrdma_proto::shape::call_shape` in the connection's version).
#[inline(always)]
pub(in crate::responder) fn short_of<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    call: &[u8],
    sc: &verdict::ShortCall<'_>,
    at: &Answering<'_>,
    bulk: &mut Buf<P>,
    run: &mut HandlerContext<'_, '_>,
) -> Option<ReplyAction> {
    // Version 2: the same Call after RDMA2_MSG's 36-byte header (flags clear, no
    // inv_handle), answered with RPCRDMA2_F_RESPONSE ([V2] §3.2).
    let how = Short {
        call,
        extra: io.wire.extra(),
        pulled: false,
        inv: None,
    };
    answer_short(io, ring, sc, &how, at, bulk, run)
}

/// The Short-reply fast path for a version 1 Call whose Payload stream was pulled (a Call
/// with Read chunks, or a Long Call) and which provided no Write list and no Reply chunk:
/// the reply is the same bare RDMA_MSG as a Short Call's (RFC 8166 §4.3.2, §4.3.3: nothing
/// to echo), made from the reassembled stream in the pull buffer ([`PulledCall`]). The
/// bytes and counters are those [`build`] produces for it (tested below); `None` before
/// anything was run or written, as for [`short`].
#[inline]
pub(in crate::responder) fn short_pulled<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    pulled: PulledCall<'_>,
    at: &Answering<'_>,
    bulk: &mut Buf<P>,
    run: &mut HandlerContext<'_, '_>,
) -> Option<ReplyAction> {
    let PulledCall { call, stream, inv } = pulled;
    if io.wire != Wire::V1 || call.len() < MIN_HEADER_LEN {
        return None;
    }
    let (xid, credit) = (word_at(call, 0)?, word_at(call, 8)?);
    let sc = verdict::ShortCall::from_payload(xid, credit, stream)?;
    // The general path answers a stream whose RPC XID is another (ERR_CHUNK).
    if sc.call.xid != xid {
        return None;
    }
    let how = Short {
        call,
        extra: 0,
        pulled: true,
        inv,
    };
    answer_short(io, ring, &sc, &how, at, bulk, run)
}

/// A version 1 Call whose Payload stream was pulled, as [`short_pulled`] answers it.
#[derive(Clone, Copy)]
pub(in crate::responder) struct PulledCall<'c> {
    /// The Call's transport header (its XID and credit; its version, for a refusal).
    pub(in crate::responder) call: &'c [u8],
    /// The reassembled Payload stream in the pull buffer.
    pub(in crate::responder) stream: &'c [u8],
    /// The rkey the reply's Send invalidates: the Call's first Read handle when both ends
    /// set R (RFC 8797 §4.1).
    pub(in crate::responder) inv: Option<u32>,
}

/// How a Short reply is made, beside the Call it answers.
struct Short<'c> {
    /// The Call's transport header (its XID and version, for a refusal).
    call: &'c [u8],
    /// Bytes version 2's header has beyond version 1's.
    extra: usize,
    /// The Call's Payload stream was pulled: it is not a Short Call (not counted as one).
    pulled: bool,
    /// The rkey the reply's Send invalidates.
    inv: Option<u32>,
}

/// The answer of [`short`] and [`short_pulled`] to the accepted Call `sc`.
#[inline(always)]
fn answer_short<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    sc: &verdict::ShortCall<'_>,
    how: &Short<'_>,
    at: &Answering<'_>,
    bulk: &mut Buf<P>,
    run: &mut HandlerContext<'_, '_>,
) -> Option<ReplyAction> {
    let (call, extra) = (how.call, how.extra);
    let wire = if extra == 0 { Wire::V1 } else { Wire::V2 };
    let results_at = SHORT_RESULTS_AT + extra;
    let c = &sc.call;
    // RFC 5531 §9: another RPC version is answered RPC_MISMATCH by the general path.
    if !c.is_rpc_v2() {
        return None;
    }
    let Lookup::Found(entry) = at.dispatch.lookup(c.prog, c.vers, c.proc_num) else {
        return None;
    };
    let out = view::bytes_mut(ring);
    // As in `build`: the results slice and the room it checks (`hlen + 64`, hlen = 28, or
    // 36 in version 2).
    if out.len() < MIN_HEADER_LEN + extra + 64 {
        return None;
    }
    let max = (entry.spec.max_results as usize).min(out.len() - results_at) & !3;
    // The largest reply is Short: 28 (36) + 24 + results within the threshold (§3.5.1,
    // `plan::plan_reply`).
    if (results_at + max) as u64 > u64::from(at.threshold) {
        return None;
    }
    let req = Request::of(sc.xid, c, sc.args);
    let (out_head, results) = out.split_at_mut(results_at);
    let (outcome, len, items, n_items) =
        run_handler(entry, run, &req, results, view::bytes_mut(bulk));
    // A Short Call counts as one once answered; a pulled one does not.
    let counted = u64::from(!how.pulled);
    if overflowed(n_items) {
        // DDP-eligible results beyond the bulk buffer, which holds more than an inline
        // reply may carry: too long for a Call without chunks, refused as `build` refuses
        // a reply over the threshold.
        io.tally.short_calls += counted;
        let e = v2::RdmaError::ReplyResource {
            length_needed: (RPC_LEN + len) as u32,
        };
        return Some(refuse(io, ring, call, at.grant, e));
    }
    let (stat, len) = match outcome {
        // Counted when answered.
        Outcome::Deferred => return Some(ReplyAction::Deferred),
        Outcome::Success if n_items == 0 => (AcceptStat::Success, len),
        Outcome::Success => match place_inline(results, len, &items[..n_items], bulk) {
            Ok(end) if results_at + end <= at.threshold as usize => (AcceptStat::Success, end),
            placed => {
                // As `build` refuses: the reply would pass the threshold, with no Reply
                // chunk to carry it (its payload's length), or would not fit the buffer.
                let e = placed.map_or_else(
                    |e| e,
                    |end| v2::RdmaError::ReplyResource {
                        length_needed: (RPC_LEN + end) as u32,
                    },
                );
                io.tally.short_calls += counted;
                return Some(refuse(io, ring, call, at.grant, e));
            }
        },
        Outcome::GarbageArgs => {
            bump(&io.stats.garbage_args, 1);
            (AcceptStat::GarbageArgs, 0)
        }
        Outcome::SystemErr => {
            bump(&io.stats.system_err, 1);
            (AcceptStat::SystemErr, 0)
        }
        Outcome::AuthError(a) => {
            // MSG_DENIED replaces the accepted header: five words after the transport
            // header, no results.
            bump(&io.stats.auth_errors, 1);
            io.tally.short_calls += counted;
            let words = emit::short_denied_words(sc.xid, at.grant, a);
            emit::put_short_words(out_head, &words, wire, true);
            io.tally.short_replies += 1;
            return Some(sent(io, MIN_HEADER_LEN + extra + DENIED_REPLY_LEN, how.inv));
        }
    };
    io.tally.short_calls += counted;
    if extra == 0 {
        // Version 1: the words stored from registers (see `emit::put_word_array`).
        emit::put_word_array(out_head, emit::short_reply_words(sc.xid, at.grant, stat));
    } else {
        let words = emit::short_reply_words(sc.xid, at.grant, stat);
        emit::put_short_words(out_head, &words, wire, true);
    }
    io.tally.short_replies += 1;
    // A Short Call has no chunk, so no rkey to invalidate (RFC 8797 §4.1, [V2] §3.3); a
    // pulled one its Read chunk's.
    Some(sent(io, results_at + len, how.inv))
}

/// The accepted RPC Reply header's length with the AUTH_NONE verifier (RFC 5531 §9).
const RPC_LEN: usize = AUTH_NONE_ACCEPTED_LEN;

/// Places a Short Reply's DDP-eligible results `items` (offset and length in `bulk`) inline
/// after its `len` bytes of results in `results`, each an XDR opaque (RFC 8166 §4.3.2:
/// the Call provided no Write chunk); returns where the results end, or the refusal
/// `build` gives when they do not fit the buffer: no room for a length word, or the
/// payload (the RPC Reply header, the results and the opaques up to this one) too long.
fn place_inline<P: Provider>(
    results: &mut [u8],
    len: usize,
    items: &[(u32, u32)],
    bulk: &Buf<P>,
) -> Result<usize, v2::RdmaError> {
    let mut at = len;
    for &(off, n) in items {
        let (off, n) = (off as usize, n as usize);
        if at + 4 > results.len() {
            return Err(v2::RdmaError::System);
        }
        results[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
        at += 4;
        let padded = pad4(n);
        if at + padded > results.len() {
            return Err(v2::RdmaError::ReplyResource {
                length_needed: (RPC_LEN + at + padded) as u32,
            });
        }
        results[at..at + n].copy_from_slice(&view::bytes(bulk, off + n)[off..]);
        results[at + n..at + padded].fill(0);
        at += padded;
    }
    Ok(at)
}
