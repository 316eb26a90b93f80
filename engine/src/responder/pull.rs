//! Read chunks: a chunked or Long Call's RDMA Reads planned into its pull buffer (RFC 8166
//! §3.4.5; a Long Call's Position-Zero chunk first), posted within the outstanding-read budget
//! (ORD, §3.3.1) in arrival order, and the Call answered when they have all landed.

use super::*;
use crate::responder::large::Needs;

impl<P: Provider> ServerConn<P> {
    /// Starts again the pull of the Call in slot `idx` (one that waited for shared
    /// buffers): classified again, as it arrived ([`on_call_in`](Self::on_call_in)).
    pub(super) fn start_pull(&mut self, idx: u32) {
        self.on_call_in(idx, self.io.wire)
    }
}

/// What follows the start of a pull (`ServerConn::on_call_in`).
pub(super) enum Begun {
    /// The Call needs these shared buffers first.
    NeedsLarge(Needs),
    /// Its stream is larger than its pull buffer: answered with ERR_CHUNK (RFC 8166
    /// §8.1.4).
    TooLarge,
    /// Its reads are planned: queue them.
    Planned,
}

/// Plans the RDMA Reads of the accepted Call `call` (chunked or Long) in `slot` into its
/// pull buffer `pull` (RFC 8166 §3.4.5), its verdict's summary kept for the answer, which
/// resumes from it. Inline pieces of a chunked Call are copied now; a Long Call first
/// fetches its Position-Zero chunk to the tail of the buffer (phase 0). The Reads go to
/// slot `i`'s list in `lists`, started afresh.
pub(super) fn plan_reads<P: Provider>(
    slot: &mut RecvSlot,
    i: usize,
    pull: &mut Buf<P>,
    lists: &mut ReadLists,
    stats: &Counters,
    wire: Wire,
    call: &AcceptedCall<'_>,
) -> Begun {
    let plan = &call.plan;
    let total = plan.total_len() as usize;
    slot.judged = Some(call.summary());
    let h = &call.header;
    slot.bare = (wire == Wire::V1 && h.write_list().is_empty() && h.reply_chunk().is_none())
        .then(|| {
            h.read_list()
                .iter()
                .next()
                .map(|r| (total as u32, r.segment.handle))
        })
        .flatten();
    slot.next_read = 0;
    slot.pending_reads = 0;
    let mut out = lists.start(i, &mut slot.n_reads);
    let size = pull.size();
    slot.shift = align_shift(plan)
        .filter(|s| total + *s as usize <= size)
        .unwrap_or(0);
    let shift = slot.shift as usize;
    if total > size {
        slot.state = RecvState::Ready;
        return Begun::TooLarge;
    }
    let reads = plan.read_list();
    if let Some(p0) = plan.position_zero() {
        let base = (total - p0.len as usize) as u32;
        out.push_segments(&reads, p0.segment_range(), base);
        slot.state = RecvState::Pulling { phase: 0 };
    } else {
        let inline = call.header.payload();
        let pull = &mut view::bytes_mut(pull)[shift..];
        lay_out(plan, pull, &mut out, |pull, src, dst| {
            pull[dst..dst + src.len()].copy_from_slice(&inline[src])
        });
        slot.state = RecvState::Pulling { phase: 1 };
    }
    bump(
        if plan.is_long_call() {
            &stats.long_calls
        } else {
            &stats.chunked_calls
        },
        1,
    );
    Begun::Planned
}

impl<P: Provider> ServerConn<P> {
    pub(super) fn queue_reads(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        if slot.n_reads == 0 {
            return self.pull_phase_done(idx);
        }
        if !slot.queued {
            slot.queued = true;
            self.read_wait.push_back(idx);
        }
    }

    /// Posts queued RDMA Reads while the outstanding-read budget and the send queue allow,
    /// in arrival order.
    pub(super) fn start_reads(&mut self) {
        while let Some(&idx) = self.read_wait.front() {
            let i = idx as usize;
            loop {
                let slot = &mut self.slots[i];
                if slot.next_read == slot.n_reads as usize {
                    break;
                }
                if self.reads_in_flight >= self.config.max_reads || self.io.sq.room() <= REPLY_WRS {
                    return;
                }
                let op = self.read_lists.get(i, slot.next_read);
                let (seq, _) = self.io.sq.post(true);
                let sge = [self.pull[i].sge_span((slot.shift + op.dst) as usize, op.len)];
                let wr = SendWr::read(wrid::pack(Kind::Read, idx, seq), &sge, op.remote).signaled();
                if self.io.qp.post_send(&wr).is_err() {
                    self.refused();
                    return;
                }
                bump(&self.io.stats.bytes_read, u64::from(op.len));
                let slot = &mut self.slots[i];
                slot.next_read += 1;
                slot.pending_reads += 1;
                self.reads_in_flight += 1;
            }
            self.read_wait.pop_front();
            self.slots[i].queued = false;
        }
    }

    /// All reads of the current phase landed.
    pub(super) fn pull_phase_done(&mut self, idx: u32) {
        let i = idx as usize;
        match self.slots[i].state {
            RecvState::Pulling { phase: 0 } => {
                // Long Call: move the Position-Zero content into place and fetch the other
                // chunks into the gaps (chunks::ReadPlan::reassemble's in-place order).
                let bytes = view::bytes(&self.recv[i], self.slots[i].byte_len as usize);
                let Ok(call) = version::judged(bytes, self.slots[i].judged.as_ref(), self.io.wire)
                else {
                    return self.answer_or_defer(idx);
                };
                let plan = call.plan;
                let total = plan.total_len() as usize;
                let p0_len = plan.position_zero().map_or(0, |p| p.len as usize);
                let base = total - p0_len;
                let slot = &mut self.slots[i];
                let pull = &mut view::bytes_mut(&mut self.pull[i])[slot.shift as usize..];
                slot.next_read = 0;
                let mut out = self.read_lists.start(i, &mut slot.n_reads);
                lay_out(&plan, pull, &mut out, |pull, src, dst| {
                    pull.copy_within(base + src.start..base + src.end, dst)
                });
                slot.state = RecvState::Pulling { phase: 1 };
                self.queue_reads(idx);
            }
            _ => {
                self.slots[i].state = RecvState::Ready;
                self.answer_or_defer(idx);
            }
        }
    }
}

/// Where to start the reassembled stream of `plan` in its pull buffer so that its largest
/// RDMA Read lands at the same offset within a cache line as its source (a Long Call's
/// Position-Zero chunk, at the tail of the stream; else the largest other chunk's first
/// segment): a copy whose source and destination differ in alignment costs a fifth more
/// on the soft fabric (measured: 64 KiB between cores, 920-960 ns against 800 ns), and a
/// NIC's DMA prefers it too. A multiple of 4, so that the stream keeps its XDR alignment
/// (what an inline Call's has in its receive buffer); `None` without a chunk to read.
pub(super) fn align_shift(plan: &ReadPlan<'_>) -> Option<u32> {
    // One pass over the read list (one segment, most often): a chunk is a run of segments
    // with one position, its place in the stream with its chunk in it (RFC 8166 §3.5.4);
    // the Position-Zero chunk's content lands at the tail of the stream instead.
    let total = u64::from(plan.total_len());
    // (length, first segment's source, destination) of the largest chunk so far, and of
    // the chunk being read.
    let mut best: Option<(u64, u64, u64)> = None;
    let mut cur: Option<(u32, u64, u64)> = None;
    let close = |c: Option<(u32, u64, u64)>, best: &mut Option<(u64, u64, u64)>| {
        if let Some((position, offset, len)) = c {
            let dst = if position == 0 {
                total.saturating_sub(len)
            } else {
                u64::from(position)
            };
            if best.is_none_or(|(l, _, _)| len > l) {
                *best = Some((len, offset, dst));
            }
        }
    };
    for rs in plan.read_list().iter() {
        match &mut cur {
            Some((position, _, len)) if *position == rs.position => {
                *len += u64::from(rs.segment.length);
            }
            _ => {
                close(cur, &mut best);
                cur = Some((rs.position, rs.segment.offset, u64::from(rs.segment.length)));
            }
        }
    }
    close(cur, &mut best);
    let (_, offset, dst) = best?;
    Some((offset.wrapping_sub(dst) & 0x3c) as u32)
}

/// Lays the unreduced stream of `plan` out in `pull`: queues into `out` the RDMA Reads of
/// every chunk but Position Zero, zeroes each chunk's XDR pad (never read, RFC 8166
/// §3.4.5.2), and has `inline` place each inline piece (its range in the reduced stream,
/// its offset in `pull`).
pub(super) fn lay_out(
    plan: &ReadPlan<'_>,
    pull: &mut [u8],
    out: &mut SlotReads<'_>,
    mut inline: impl FnMut(&mut [u8], Range<usize>, usize),
) {
    let reads = plan.read_list();
    for piece in plan.pieces() {
        match piece {
            Piece::Inline { src, dst } => inline(pull, src, dst as usize),
            Piece::Chunk {
                first_segment,
                segments,
                len,
                dst,
                pad,
            } => {
                out.push_segments(&reads, first_segment..first_segment + segments, dst);
                let end = (dst + len) as usize;
                pull[end..end + pad as usize].fill(0);
            }
        }
    }
}

/// One slot's list of RDMA Reads as it is planned: its part of the connection's
/// [`ReadLists`] and the slot's count of them ([`ReadLists::start`]).
pub(super) struct SlotReads<'a> {
    ops: &'a mut [ReadEntry],
    n: &'a mut u32,
}

impl SlotReads<'_> {
    /// Queues the RDMA Reads of the segments `range` of `reads`, laid end to end in the
    /// pull buffer from `dst` (none for an empty segment). The list has room for as many
    /// as the receive can list ([`ReadLists`]).
    pub(super) fn push_segments(&mut self, reads: &ReadList<'_>, range: Range<usize>, dst: u32) {
        let mut at = dst;
        for s in range {
            let Some(rs) = reads.get(s) else { continue };
            let seg = rs.segment;
            if seg.length > 0 {
                let a = seg.offset;
                self.ops[*self.n as usize] =
                    [a as u32, (a >> 32) as u32, seg.handle, seg.length, at];
                *self.n += 1;
            }
            at += seg.length;
        }
    }
}

/// A [`ReadOp`] as words: the remote address (low, high), its rkey, the length and the
/// offset in the pull buffer ([`ReadLists`]).
pub(super) type ReadEntry = [u32; 5];

/// Every receive slot's list of RDMA Reads, in one allocation per connection: `stride`
/// entries a slot, as many as a received message can list Read segments (each takes at
/// least 20 of its bytes). The entries are words (`SlotReads::push_segments`), so that the allocation is
/// zero-filled by the allocator, which maps fresh zero pages for it and writes none, instead
/// of written: accepting a connection touches none of it. Made as one list per slot, each
/// list put its allocator header in a fresh heap page, a page fault apiece (some 80 on a
/// fresh nfs3d's accept in the soft-RoCE guest).
pub(super) struct ReadLists {
    words: Box<[ReadEntry]>,
    stride: usize,
}

impl ReadLists {
    /// The lists of `nrecv` slots of a connection whose receives are `recv_size` bytes.
    pub(super) fn new(nrecv: u32, recv_size: u32) -> ReadLists {
        let stride = recv_size as usize / 20 + 1;
        ReadLists {
            words: vec![[0u32; 5]; nrecv as usize * stride].into_boxed_slice(),
            stride,
        }
    }

    /// Slot `slot`'s list, started afresh (its count `n`, the slot's, set to 0).
    pub(super) fn start<'a>(&'a mut self, slot: usize, n: &'a mut u32) -> SlotReads<'a> {
        *n = 0;
        SlotReads {
            ops: &mut self.words[slot * self.stride..(slot + 1) * self.stride],
            n,
        }
    }

    /// The `k`th Read of slot `slot`'s list.
    pub(super) fn get(&self, slot: usize, k: usize) -> ReadOp {
        let w = self.words[slot * self.stride + k];
        ReadOp {
            remote: RemoteAddr::new(u64::from(w[0]) | u64::from(w[1]) << 32, w[2]),
            len: w[3],
            dst: w[4],
        }
    }
}

/// Gives slot `i` the pull buffer that took the last Call answered, in exchange for its
/// own: receives are consumed in ring order, so without this a run of chunked Calls
/// writes a different buffer each time (as many as there are credits, more than a
/// core's cache holds), each of its lines taken from farther away. Only own buffers of
/// idle slots are exchanged (every one is the same size, in the same registration).
pub(super) fn take_hot_pull<P: Provider>(
    hot: &mut Option<u32>,
    pull: &mut [Buf<P>],
    slots: &[RecvSlot],
    large: &large::Large<P>,
    i: usize,
) {
    let Some(j) = hot.take() else {
        return;
    };
    let j = j as usize;
    if j != i && slots[j].state == RecvState::Posted && !large.stands_in(i) && !large.stands_in(j) {
        pull.swap(i, j);
    }
}
