//! A Call's chunks (RFC 8166 §3.4), phases six and seven of [`Client::submit_planned`]: its
//! memory exposed to the responder (the regions' keys, or windows bound for the RPC), its
//! spans cut into the segments of its chunk lists, the rkey a version 2 Call offers for
//! invalidation, and the segment length a Call's chunks are cut at.

use super::*;

/// Phase six of [`Client::submit_planned`]: the memory of the Call in slot `idx` exposed
/// to the responder, and the rkeys of its argument and result spans (0 where nothing is
/// exposed): the regions' own keys (`persistent`), or windows bound for this RPC, the
/// argument span for reading and the result span for writing. `None` when the queue pair
/// refused a bind: the connection is ended.
#[inline(always)]
pub(super) fn expose<P: Provider>(
    qp: &mut P::Qp,
    sq: &mut SendQueue,
    stats: &Counters,
    slot: &mut CallSlot<P>,
    idx: u32,
    persistent: bool,
    spans: &Spans,
) -> Option<[u32; 2]> {
    slot.bound = [None; 2];
    if persistent {
        return Some([slot.arg.region().rkey(), slot.res.region().rkey()]);
    }
    let spans = [
        (
            spans.arg_used,
            slot.mw_arg.as_ref(),
            &slot.arg,
            Access::REMOTE_READ,
        ),
        (
            spans.res_used,
            slot.mw_res.as_ref(),
            &slot.res,
            Access::REMOTE_WRITE,
        ),
    ];
    let mut bound = [None; 2];
    let mut refused = false;
    for (k, (used, mw, buf, access)) in spans.into_iter().enumerate() {
        let Some(mw) = mw.filter(|_| used > 0) else {
            continue;
        };
        match bind_window::<P>(qp, sq, mw, buf, used as u64, access, idx) {
            Ok(rkey) => {
                bound[k] = Some(rkey);
                bump(&stats.registrations, 1);
            }
            Err(_) => {
                // A refused post leaves the connection unusable.
                end_refused::<P>(stats, qp);
                refused = true;
                break;
            }
        }
    }
    slot.bound = bound;
    if refused {
        return None;
    }
    Some([bound[0].unwrap_or(0), bound[1].unwrap_or(0)])
}

/// Phase seven of [`Client::submit_planned`]: the chunk lists (RFC 8166 §3.4) of the Call
/// in `slot`, its spans cut into segments of the planned length under `rkeys` (argument,
/// result): the Read segments into `reads` (their number returned), the Write chunks and
/// the Reply chunk into the slot, where the reply is checked against them.
#[inline(always)]
pub(super) fn make_chunk_lists<P: Provider>(
    slot: &mut CallSlot<P>,
    reads: &mut [ReadSegment],
    call: &CallArgs<'_>,
    planned: &Planned,
    spans: &Spans,
    bulk_len: Option<usize>,
    [arg_rkey, res_rkey]: [u32; 2],
) -> usize {
    let (form, max_seg) = (planned.plan.form, planned.max_seg);
    let mut nr = 0;
    let arg_addr = slot.arg.addr();
    let split = |pos: u32, base: u64, len: usize, out: &mut [ReadSegment], n: &mut usize| {
        let mut done = 0usize;
        while done < len {
            let l = (len - done).min(max_seg as usize);
            out[*n] = ReadSegment::new(pos, arg_rkey, l as u32, base + done as u64);
            *n += 1;
            done += l;
        }
    };
    if form == CallForm::Long {
        split(0, arg_addr, spans.p0_len, reads, &mut nr);
    }
    if let (Some(n), Some(it), CallForm::Chunked | CallForm::Long) = (bulk_len, planned.item, form)
    {
        split(
            it.offset,
            arg_addr + spans.item_at as u64,
            n,
            reads,
            &mut nr,
        );
    }
    let res_addr = slot.res.addr();
    slot.n_writes = call.bulk_results.len();
    for (c, &r) in call.bulk_results.iter().enumerate() {
        let mut n = 0;
        let mut done = 0usize;
        while done < r as usize {
            let l = (r as usize - done).min(max_seg as usize);
            slot.writes[c][n] = Segment::new(
                res_rkey,
                l as u32,
                res_addr + (spans.write_off[c] as usize + done) as u64,
            );
            n += 1;
            done += l;
        }
        slot.write_n[c] = n;
        slot.write_off[c] = spans.write_off[c];
    }
    slot.has_reply_chunk = planned.plan.reply_chunk;
    slot.reply_n = 0;
    slot.reply_off = spans.reply_off as u32;
    if planned.plan.reply_chunk {
        let (max_reply, reply_off) = (planned.max_reply as usize, spans.reply_off);
        let mut done = 0usize;
        while done < max_reply {
            let l = (max_reply - done).min(max_seg as usize);
            slot.reply[slot.reply_n] =
                Segment::new(res_rkey, l as u32, res_addr + (reply_off + done) as u64);
            slot.reply_n += 1;
            done += l;
        }
    }
    nr
}

/// The rkey a version 2 Call offers the responder to invalidate with its reply (\[V2\]
/// §3.3): the result window of the Call in `slot` (its reply's own chunks), or else its
/// argument window; regions are never offered. 0 for none, and always in version 1.
#[inline(always)]
pub(super) fn offered_invalidation<P: Provider>(
    wire: Wire,
    negotiation: &Negotiation,
    slot: &CallSlot<P>,
) -> u32 {
    if wire == Wire::V2 && negotiation.remote_invalidation() {
        slot.bound[1].or(slot.bound[0]).unwrap_or(0)
    } else {
        0
    }
}

pub(in crate::requester) fn segs_needed(len: u32, max: u32) -> u32 {
    len.div_ceil(max).max(1)
}

/// The segment length of a Call whose longest chunk is `largest` bytes: `max_segment`, or
/// the least whole number of KiB that splits `largest` into at most [`MAX_SEGMENTS`]
/// segments (a Long Call's read list then holds its position-zero chunk and its item within
/// [`MAX_READ_SEGMENTS`]).
pub(in crate::requester) fn segment_len(max_segment: u32, largest: u32) -> u32 {
    let need = largest.div_ceil(MAX_SEGMENTS as u32).next_multiple_of(1024);
    max_segment.max(need)
}
