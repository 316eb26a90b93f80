//! A received Call: counted and its slot made ready (the share's buffers taken for a slot
//! used for the first time; a receive of the shared receive queue parked in a free slot,
//! the grant raised when the Calls in process fill it, a requester past its grant ended),
//! then classified once and sent down the path of its shape: Short and Write-list Calls
//! answered at once on their fast paths, chunked and Long ones pulled first, every other
//! one to the answer path.

use super::*;

impl<P: Provider> ServerConn<P> {
    #[inline(always)]
    pub(super) fn on_call(&mut self, idx: u32, byte_len: u32) {
        if idx as usize >= self.pull.len() && !self.dress_for(idx) {
            bump(&self.io.stats.post_refused, 1);
            return self.lose();
        }
        self.io.tally.calls += 1;
        self.io.tally.bytes_received += u64::from(byte_len);
        self.in_process += 1;
        let slot = &mut self.slots[idx as usize];
        slot.byte_len = byte_len;
        slot.judged = None;
        slot.bare = None;
        slot.open_v2 = false;
        slot.form = CallForm::Refused;
        if self.mode != Mode::V1 {
            return self.on_message_versioned(idx);
        }
        self.note_overrun();
        self.on_call_v1(idx)
    }

    /// Takes the buffers the Call in slot `idx` needs from the share: the ring and the
    /// slots' own buffers at the first Call, a later slot's as one lands there.
    #[cold]
    fn dress_for(&mut self, idx: u32) -> bool {
        (!self.ring.is_empty() || self.dress()) && self.dress_to(idx as usize + 1)
    }

    /// A receive of the shared receive queue completed on this connection: its buffer
    /// stands in a free slot's `recv` and the Call is handled as any other. A connection
    /// with more Calls in process than its grant (and the reverse Replies and spares
    /// beyond it) takes receives the other connections' grants need (RFC 8166 §3.3.1: a
    /// requester never exceeds its grant): its receive goes back and the connection ends.
    pub(super) fn on_srq_recv(&mut self, wr_id: u64, byte_len: u32) {
        let Some(recvs) = self._share.recvs(self.srq_home) else {
            return;
        };
        let Some(buf) = recvs.take(wr_id) else {
            // Not a receive the queue holds: nothing to answer.
            bump(&self.io.stats.discards, 1);
            return;
        };
        let held = self.in_process + self.reposts.len() as u32;
        // Against the grant the client may know: one raised in this poll reaches it with
        // the replies at the poll's end.
        let limit = self.known_grant + self.reverse_slots + SPARE_RECVS;
        let slot = if held < limit {
            self.srq_free.pop()
        } else {
            None
        };
        let Some(k) = slot else {
            bump(&self.io.stats.credit_overruns, 1);
            let _ = recvs.repost([buf]);
            return self.lose();
        };
        self.srq_parked[k as usize] = Some(core::mem::replace(&mut self.recv[k as usize], buf));
        if held + 1 >= self.credits.grant() {
            self.raise_grant();
        }
        self.on_call(k, byte_len)
    }

    /// The Calls in process fill the grant: with the shared receive queue, the grant
    /// doubles (up to `credits`) if the queue can back it; the receives are posted before
    /// any reply carries it.
    #[cold]
    fn raise_grant(&mut self) {
        let g = self.credits.grant();
        let add = g.min(self.config.credits.saturating_sub(g));
        if add == 0 {
            return;
        }
        if let Some(recvs) = self._share.recvs(self.srq_home) {
            if recvs.admit(self._share.pd(), add).is_ok() {
                self.srq_reserved += add;
                self.credits.set_grant(g + add);
                bump(&self.io.stats.grants_raised, 1);
                // The ring follows the grant (a failure leaves it as it is: replies wait
                // for its entries, as they would for send-queue room).
                if !self.ring.is_empty() {
                    let _ = self.grow_ring();
                }
            }
        }
    }

    /// RFC 8166 §3.3.1, §8.1.4: the requester's outstanding Calls are those in process and
    /// those answered whose replies leave at the end of this poll; beyond the largest grant
    /// advertised it sent more than it was granted. Counted, still served (every receive
    /// is posted or in process, so nothing is at risk here). Not for a version 2 response
    /// to a reverse Call, which takes one of the receives beyond the grant.
    #[inline]
    pub(super) fn note_overrun(&mut self) {
        // On version 1 the Replies to this end's reverse Calls arrive as Calls do, each in
        // a receive beyond the grant (RFC 8167 §4.2.2): the limit allows for them.
        let limit = self.credits.overrun_limit() + self.reverse.in_flight;
        if self.in_process + self.sends.len() as u32 > limit {
            bump(&self.io.stats.credit_overruns, 1);
        }
    }

    /// A message received on a version 1 connection: Short Calls answered now, others
    /// pulled first.
    #[inline]
    pub(super) fn on_call_v1(&mut self, idx: u32) {
        self.on_call_in(idx, Wire::V1)
    }

    /// The Call in slot `idx`, on a connection speaking `wire`: classified once
    /// ([`shape::call_shape`], Short first) and answered on the path of its shape. A Short
    /// Call is answered here when a reply can be built now (no Call waits before it and a
    /// ring entry and send-queue room are free); a chunked or Long one is pulled first;
    /// every other shape (and a Short Call that must wait) goes to the answer path, which
    /// takes the one path its form names.
    pub(super) fn on_call_in(&mut self, idx: u32, wire: Wire) {
        let i = idx as usize;
        let bytes = view::bytes(&self.recv[i], self.slots[i].byte_len as usize);
        let shape = shape::call_shape(bytes, wire);
        self.slots[i].form = shape.form();
        let now = self.ready.is_empty() && self.can_reply();
        match &shape {
            CallShape::Short(_) if now => {}
            // Version 1's Write-list path, with shared bulk buffers taken first when the
            // slot's own cannot hold its chunks (without them, the answer path waits).
            CallShape::Written(wc) if now && wire == Wire::V1 => {
                let needs = self.lists_need_large(i, wc.writes, None, true);
                if needs.count() != 0 {
                    return if self.reserve_large(i, needs) {
                        // Again with the buffers in hand (the shape borrowed the receive).
                        self.on_call_in(idx, wire)
                    } else {
                        // It waits for them, holding its receive; tried again as they
                        // free up (`retry_large_waits`).
                        self.await_share(idx)
                    };
                }
            }
            CallShape::Pulled(call) | CallShape::Long(call) => {
                // Every large buffer the Call needs is taken before anything else
                // (`large.rs`); without them, it waits holding its receive (RFC 8166 §3.3).
                pull::take_hot_pull(
                    &mut self.hot_pull,
                    &mut self.pull,
                    &self.slots,
                    &self.large,
                    i,
                );
                let total = call.plan.total_len();
                let needs = self.large_needs(i, &call.header, u64::from(total), true);
                let begun = if needs != Default::default() {
                    pull::Begun::NeedsLarge(needs)
                } else {
                    let (slot, buf) = (&mut self.slots[i], &mut self.pull[i]);
                    let lists = &mut self.read_lists;
                    pull::plan_reads(slot, i, buf, lists, &self.io.stats, wire, call)
                };
                return match begun {
                    pull::Begun::Planned => self.queue_reads(idx),
                    pull::Begun::TooLarge => self.answer_or_defer(idx),
                    pull::Begun::NeedsLarge(needs) => {
                        if self.reserve_large(i, needs) {
                            // Again with the buffers in hand (the verdict borrowed the
                            // receive).
                            self.on_call_in(idx, wire)
                        } else {
                            self.slots[i].state = RecvState::AwaitLarge;
                            self.large.waiting.push_back(idx);
                        }
                    }
                };
            }
            // Version 1 has no direction flag: a message the Call verdicts refuse may be the
            // answer to one of this end's reverse Calls (RFC 8167 §5).
            CallShape::Refused(_)
                if wire == Wire::V1
                    && self.reverse.in_flight > 0
                    && verdict::backward_reply(bytes).is_some() =>
            {
                return self.on_reverse_reply(idx, Wire::V1);
            }
            _ => return self.answer_or_defer(idx),
        }
        // Answered now, on the fast path of its shape.
        let r = self.ring_next as usize;
        let gen = self.slots[i].gen.wrapping_add(1);
        self.large.enter_ring(&mut self.ring, i, r);
        let mut run = HandlerContext {
            ticket: Deferred {
                conn: self.id,
                slot: idx,
                gen,
            },
            answerer: None,
            loans: Some(&self.loans),
            max_bulk: self.large.max_bulk(),
        };
        let at = Answering::of(&self.credits, &self.negotiation, &self.dispatch);
        let (io, ring, bulk) = (&mut self.io, &mut self.ring[r], &mut self.bulk[i]);
        let built = match &shape {
            CallShape::Short(sc) => reply::short_of(io, ring, bytes, sc, &at, bulk, &mut run),
            CallShape::Written(wc) => written::answer(io, ring, bytes, wc, &at, bulk, &mut run),
            _ => None,
        };
        match built {
            Some(built) => self.answered(idx, r, gen, built, None, false),
            // Not one the fast path answers (another RPC version, an unknown procedure, a
            // reply too large for it): the general path does.
            None => {
                self.slots[i].form = CallForm::General;
                self.answer_or_defer(idx)
            }
        }
    }
}
