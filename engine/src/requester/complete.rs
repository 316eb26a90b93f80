//! Completion: the completion queue polled, replies judged (RFC 8166 §4.5) and matched to
//! their Calls, results delivered to the caller as borrowed [`Completion`]s, receives
//! reposted; the blocking [`Client::call`].

use super::*;
use rpcrdma_proto::shape::{self, Refusal, ReplyShape};

/// The client's completion state as [`Books`], borrowed field by field, so that it can be
/// held beside a reply read from the client's receive buffers.
macro_rules! books {
    ($c:expr) => {
        Books {
            slots: &mut $c.slots,
            reposts: &mut $c.reposts,
            credits: &mut $c.credits,
            free: &mut $c.free,
            batch: &mut $c.batch,
            stats: &$c.stats,
            slot_mask: $c.slot_mask,
        }
    };
}

impl<P: Provider> Client<P> {
    /// Starts fetching what the next [`poll_completions`](Self::poll_completions) of an
    /// idle client reads (its completion queue's next entry): a thread driving many clients
    /// asks it of one a few places ahead of the one it polls, so that their cache misses
    /// overlap instead of following one another.
    #[inline]
    pub fn prefetch_poll(&self) {
        self.cq.prefetch_next();
    }

    /// A watch of the client's completion queue, if its provider offers one
    /// ([`CompletionQueue::watch`]): with
    /// [`idle_at`](Self::idle_at), it lets a thread driving many clients skip those for
    /// which nothing has arrived.
    pub fn cq_watch(&self) -> Option<crate::fabric::CqWatch> {
        self.cq.watch()
    }

    /// Where the next completion will be, when only a completion can give
    /// [`poll_completions`](Self::poll_completions) work (nothing queued to post, no
    /// receive to repost, no cancelled or early reply to hand over, no Call to resend or
    /// reverse Call waiting, the connection up); `None` when it must be polled anyway. A
    /// caller that finds no completion at this position
    /// ([`WatchTable::quiet`](crate::fabric::WatchTable::quiet)) may skip the poll, as long
    /// as it still polls now and then: timeouts and the connection's state are checked by
    /// polls.
    #[inline]
    pub fn idle_at(&self) -> Option<u64> {
        let quiet = !self.dead
            && self.watched
            && self.qp.is_some()
            && self.n_queued == 0
            && self.reposts.is_empty()
            && self.cancelled.is_empty()
            && self.early.is_empty()
            && self.resend_n == 0
            && !self.reverse_waiting();
        quiet.then(|| self.cq.cursor())
    }

    /// Makes progress — polls a batch of completions, matches replies to pending RPCs,
    /// invalidates their memory, checks timeouts — and hands every finished RPC to `f`.
    /// Returns the number of completions processed; 0 means idle. Never blocks, except
    /// while reconnecting after a loss with [`ConnConfig::retransmit`]: a poll then makes
    /// at most one connection attempt, bounded by the policy's `attempt_timeout` and the
    /// earliest pending deadline (polls during the backoff return at once), and re-sends
    /// the pending Calls the new connection's credits allow.
    pub fn poll_completions<F>(&mut self, mut f: F) -> usize
    where
        F: FnMut(Completion<'_>),
    {
        self.post_queued();
        // The receives the last poll left to go back after the caller's next Call.
        if !self.reposts.is_empty() {
            self.repost();
        }
        if !self.cancelled.is_empty() {
            self.finish_cancelled(&mut f);
        }
        if !self.early.is_empty() {
            self.handle_early(&mut f);
        }
        if self.dead {
            return self.recover(&mut f);
        }
        let n = match self.cq.poll(&mut self.wc) {
            Ok(n) => n,
            Err(_) => {
                self.lose(&mut f);
                return 0;
            }
        };
        if let Some(qp) = &self.qp {
            if n > 0 {
                // Most of them are replies whose receives go back at the end of this poll.
                qp.expect_recv_posts(n);
                self.watched = false;
            } else if !self.watched {
                // Waiting for a reply: its message is read as soon as it completes. Once per
                // wait: a thread polling many connections would otherwise fetch every idle
                // one's landing on every turn.
                qp.watch_next_recv();
                self.watched = true;
            }
        }
        for k in 0..n {
            let wc = self.wc[k];
            self.on_completion(&wc, &mut f);
            if self.dead {
                self.publish_batch();
                return k + 1;
            }
        }
        self.publish_batch();
        // Timeouts and the queue pair's state are looked at every 256th idle poll and every
        // 64th busy one: a clock reading or a device query (and a scan of the pending
        // table) per poll would slow the spin that notices replies; 256 idle polls take a
        // few microseconds, far below any timeout.
        let due = if n == 0 {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            self.idle_polls & 255 == 0
        } else {
            self.polls = self.polls.wrapping_add(1);
            self.polls & 63 == 0
        };
        if due {
            self.check_timeouts(&mut f);
            if self.zombies_hold_every_credit() {
                // Only late replies could free a credit, and none has come within the RPCs'
                // timeouts: this connection carries nothing more. A new one starts the
                // credit accounting over (RFC 8166 §3.3.3), as an ONC RPC transport
                // replaces its connection when RPCs time out.
                self.lose(&mut f);
                return n;
            }
            // A loss shows as flushed receives; the queue pair's state is looked at on the
            // same cadence as the clock (it is a query to the device: `ibv_query_qp`).
            if self
                .qp
                .as_ref()
                .is_some_and(|q| q.state() == crate::fabric::QpState::Err)
            {
                self.lose(&mut f);
                return n;
            }
        }
        if self.resend_n > 0 {
            self.resend(&mut f);
        }
        if self.reverse_waiting() {
            self.retry_reverse();
        }
        self.repost_unless_spared();
        n
    }

    /// The receive completions the version 2 opening polled after its answer.
    #[cold]
    fn handle_early<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        let early = core::mem::take(&mut self.early);
        for wc in &early {
            self.on_completion(wc, f);
        }
        self.publish_batch();
        self.repost();
        if self.early.is_empty() {
            self.early = early;
            self.early.clear();
        }
    }

    /// Adds the counts of the batch just handled to the shared counters: one load and store
    /// per counter per poll instead of one per reply (readers see them at most one batch
    /// late; nothing in the requester reads them back).
    #[inline]
    pub(super) fn publish_batch(&mut self) {
        let [received, rpcs] = core::mem::take(&mut self.batch);
        if received != 0 {
            bump(&self.stats.bytes_received, received);
        }
        if rpcs != 0 {
            bump(&self.stats.rpcs, rpcs);
        }
    }

    #[inline(always)]
    pub(super) fn on_completion<F: FnMut(Completion<'_>)>(&mut self, wc: &Wc, f: &mut F) {
        let Some(kind) = wrid::kind(wc.wr_id) else {
            return;
        };
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushErr {
                bump(&self.stats.wc_errors, 1);
            }
            return self.lose(f);
        }
        let seq = wrid::seq(wc.wr_id);
        if seq != 0 {
            self.sq.retire(seq);
        }
        let idx = wrid::index(wc.wr_id);
        match kind {
            Kind::Recv => self.on_reply(idx, wc.byte_len, wc.invalidated_rkey, f),
            Kind::LocalInv => {
                let slot = &mut self.slots[idx as usize];
                if slot.state == CallState::Invalidating {
                    self.finish(idx, f);
                }
            }
            _ => {}
        }
    }

    /// The answer in receive buffer `ridx` (`len` bytes; its Send invalidated `inv`):
    /// classified once ([`shape::reply_shape`], Short first). A Short or Write-list Reply
    /// whose RPC waits in the state its fast path needs completes there; any other answer
    /// (and such a Reply found in another state, judged in full) takes the general path:
    /// matched, its chunks checked against what the Call provided, its windows
    /// invalidated before completing.
    pub(super) fn on_reply<F: FnMut(Completion<'_>)>(
        &mut self,
        ridx: u32,
        len: u32,
        inv: Option<u32>,
        f: &mut F,
    ) {
        self.batch[0] += u64::from(len);
        let bytes = view::bytes(&self.recv[ridx as usize], len as usize);
        let reverse = self.serving.is_some();
        let shape = shape::reply_shape(bytes, self.wire, reverse);
        let mut books = books!(self);
        let answer = match shape {
            ReplyShape::Short(short) => {
                if books.complete_short(&short, ridx, inv, f) {
                    return;
                }
                judge_answer(self.wire, reverse, bytes, books.stats)
            }
            ReplyShape::Written(w) => {
                if self.wire == Wire::V1 && books.complete_written(&w, ridx, inv, f) {
                    return;
                }
                judge_answer(self.wire, reverse, bytes, books.stats)
            }
            ReplyShape::General(acc) => Some(Answer::Reply(acc)),
            ReplyShape::Refused(r) => answer_of_refusal(r, reverse, bytes, books.stats),
        };
        match books.complete_general(ridx, len, inv, answer, f) {
            Then::Done => {}
            Then::ServeReverse => self.serve_reverse(ridx, len),
            Then::Invalidate(i) => self.invalidate(i, f),
        }
    }

    /// [`on_reply`](Self::on_reply)'s general path alone, for any answer: judged in full.
    #[cfg(test)]
    pub(super) fn on_reply_general<F: FnMut(Completion<'_>)>(
        &mut self,
        ridx: u32,
        len: u32,
        inv: Option<u32>,
        f: &mut F,
    ) {
        let bytes = view::bytes(&self.recv[ridx as usize], len as usize);
        let answer = judge_answer(self.wire, self.serving.is_some(), bytes, &self.stats);
        let mut books = books!(self);
        match books.complete_general(ridx, len, inv, answer, f) {
            Then::Done => {}
            Then::ServeReverse => self.serve_reverse(ridx, len),
            Then::Invalidate(i) => self.invalidate(i, f),
        }
    }

    /// Hands the finished RPC to `f`, then frees its receive buffer, slot and credit.
    pub(super) fn finish<F: FnMut(Completion<'_>)>(&mut self, idx: u32, f: &mut F) {
        let i = idx as usize;
        let slot = &self.slots[i];
        let stats = &self.stats;
        match (slot.outcome, slot.recv_idx) {
            (CallOutcome::Error(e @ (RpcError::Timeout | RpcError::Cancelled)), _) => {
                f(Completion {
                    tag: slot.tag,
                    xid: slot.xid,
                    result: Err(e),
                });
                if !slot.answered {
                    // The reply may still come: the slot keeps its credit until then.
                    self.slots[i].state = CallState::Zombie;
                    return;
                }
            }
            (CallOutcome::Error(e), ridx) => {
                f(Completion {
                    tag: slot.tag,
                    xid: slot.xid,
                    result: Err(e),
                });
                if let Some(r) = ridx {
                    self.reposts.push(r);
                }
            }
            (CallOutcome::Reply, Some(ridx)) => {
                let bytes = view::bytes(&self.recv[ridx as usize], slot.recv_len as usize);
                let result = match judge_answer(self.wire, false, bytes, stats) {
                    Some(Answer::Reply(acc)) => deliver(slot, &acc, stats),
                    _ => Err(RpcError::BadReply),
                };
                bump(&stats.rpcs, 1);
                f(Completion {
                    tag: slot.tag,
                    xid: slot.xid,
                    result,
                });
                self.reposts.push(ridx);
            }
            (CallOutcome::Reply, None) => {}
        }
        let grant = self.slots[i].grant;
        self.credits.on_reply(grant);
        self.slots[i].state = CallState::Free;
        self.slots[i].recv_idx = None;
        self.free.put(idx, &mut self.slots[i]);
    }

    /// [`repost`](Self::repost), unless nothing else is in flight and the spare receives
    /// cover what waits: then the caller's next Call is what the connection waits for, and
    /// the reposts wait for the start of the next poll, after it ([`SPARE_RECVS`]). With
    /// other Calls in flight they go back now: deferring them there was measured slower
    /// (32 in flight: 12.7–13.0 against 11.8–12.3 M null RPCs/s).
    #[inline(always)]
    fn repost_unless_spared(&mut self) {
        if self.reposts.len() > SPARE_RECVS as usize || self.credits.in_flight() > 0 {
            self.repost();
        }
    }

    /// Reposts the consumed receives that wait, in one post.
    #[inline(always)]
    pub(super) fn repost(&mut self) {
        if self.reposts.is_empty() {
            return;
        }
        let Some(qp) = self.qp.as_mut() else { return };
        // A refused post means a lost connection, noticed by the next poll.
        if conn::repost_recvs::<P>(qp, &self.recv, &self.reposts).is_err() {
            bump(&self.stats.post_refused, 1);
        }
        self.reposts.clear();
    }

    /// Sends one RPC and waits for its reply, at most `call.timeout` (plus the time to get a
    /// credit, bounded by the same timeout); hands the reply to `f` and returns what it
    /// returns. Must not be mixed with RPCs submitted with [`submit`](Self::submit) and not
    /// yet completed (their completions would be dropped). A Call that cannot be sent at
    /// all (too large, invalid) is [`RpcError::NotSent`].
    pub fn call<R, F>(&mut self, call: &CallArgs<'_>, f: F) -> Result<R, RpcError>
    where
        F: FnOnce(Result<Reply<'_>, RpcError>) -> R,
    {
        self.call_with(call, |c, tag| c.submit(call, tag), f)
    }

    /// [`call`](Self::call) of a Call whose DDP-eligible argument, `len` bytes, `fill`
    /// writes where it is sent from ([`submit_in_place`](Self::submit_in_place): zero copy).
    pub fn call_in_place<R, F>(
        &mut self,
        call: &CallArgs<'_>,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        f: F,
    ) -> Result<R, RpcError>
    where
        F: FnOnce(Result<Reply<'_>, RpcError>) -> R,
    {
        // Called only by the submission that sends the Call; one refused for want of a
        // credit leaves it for the next.
        let mut fill = Some(fill);
        self.call_with(
            call,
            |c, tag| {
                c.submit_in_place(call, tag, len, |d| {
                    if let Some(fill) = fill.take() {
                        fill(d);
                    }
                })
            },
            f,
        )
    }

    /// [`call`](Self::call) with the submission `submit` makes (tagged with the tag it is
    /// given), retried while it would block.
    fn call_with<R, F>(
        &mut self,
        call: &CallArgs<'_>,
        mut submit: impl FnMut(&mut Self, u64) -> Result<u32, SubmitError>,
        f: F,
    ) -> Result<R, RpcError>
    where
        F: FnOnce(Result<Reply<'_>, RpcError>) -> R,
    {
        const TAG: u64 = u64::MAX;
        let start = Instant::now();
        let hard = start + call.timeout + Duration::from_secs(1);
        let xid = loop {
            match submit(self, TAG) {
                Ok(xid) => break xid,
                Err(SubmitError::WouldBlock) => {
                    if Instant::now() > start + call.timeout {
                        return Err(RpcError::Timeout);
                    }
                    self.poll_completions(|_| {});
                }
                Err(SubmitError::Disconnected) => return Err(RpcError::ConnectionLost),
                Err(e) => return Err(RpcError::NotSent(e)),
            }
        };
        let mut f = Some(f);
        let mut out = None;
        loop {
            let n = self.poll_completions(|c| {
                // The XID too: an earlier `call` that gave up may still have its RPC pending.
                if c.tag == TAG && c.xid == xid {
                    if let Some(f) = f.take() {
                        out = Some(f(c.result));
                    }
                }
            });
            if let Some(r) = out.take() {
                return Ok(r);
            }
            if self.dead && self.recovery.is_none() {
                return Err(RpcError::ConnectionLost);
            }
            if n == 0 {
                if Instant::now() > hard {
                    return Err(RpcError::Timeout);
                }
                std::hint::spin_loop();
            }
        }
    }
}

/// What completing an RPC from its reply takes of the requester, beside the receive
/// buffer the reply is read from (which the classification borrows).
pub(super) struct Books<'c, P: Provider> {
    pub(super) slots: &'c mut [CallSlot<P>],
    pub(super) reposts: &'c mut Vec<u32>,
    pub(super) credits: &'c mut RequesterCredits,
    pub(super) free: &'c mut FreeSlots<P>,
    pub(super) batch: &'c mut [u64; 2],
    pub(super) stats: &'c Counters,
    pub(super) slot_mask: u32,
}

/// What the general path leaves to the connection.
pub(super) enum Then {
    /// Nothing more.
    Done,
    /// A reverse-direction Call arrived: serve it.
    ServeReverse,
    /// The RPC in this slot completes once its windows are invalidated.
    Invalidate(u32),
}

impl<P: Provider> Books<'_, P> {
    /// The Short-reply fast path (see `CallSlot::takes_short_reply`): what the general path
    /// does for this reply, without judging it again, checking empty lists against empty
    /// provisions, or re-deriving the results. False, with nothing done, when the RPC is
    /// not in the state it needs.
    #[inline]
    fn complete_short<F: FnMut(Completion<'_>)>(
        &mut self,
        short: &verdict::ShortReply<'_>,
        ridx: u32,
        inv: Option<u32>,
        f: &mut F,
    ) -> bool {
        let i = (short.xid & self.slot_mask) as usize;
        let Some(slot) = self
            .slots
            .get_mut(i)
            .filter(|s| s.takes_short_reply(short.xid, inv))
        else {
            return false;
        };
        for b in slot.bound.iter_mut().filter(|b| b.is_some()) {
            *b = None;
            bump(&self.stats.remote_invalidations, 1);
        }
        slot.grant = Some(short.credit);
        slot.outcome = CallOutcome::Reply;
        bump(&self.stats.short_replies, 1);
        self.batch[1] += 1;
        f(Completion {
            tag: slot.tag,
            xid: slot.xid,
            result: Ok(Reply {
                rpc: short.reply,
                results: short.results,
                bulk: [&[]; MAX_WRITE_CHUNKS],
                n_bulk: 0,
            }),
        });
        self.reposts.push(ridx);
        self.credits.on_reply(Some(short.credit));
        slot.state = CallState::Free;
        slot.recv_idx = None;
        self.free.put(i as u32, slot);
        true
    }

    /// The general path for the answer in receive buffer `ridx` (`answer`, or `None` for
    /// one dropped): matched to its RPC, a late one's credit taken back, its chunks checked
    /// against what the Call provided (CHECKLIST G-4, G-17), completed when nothing is left
    /// to invalidate.
    fn complete_general<F: FnMut(Completion<'_>)>(
        &mut self,
        ridx: u32,
        len: u32,
        inv: Option<u32>,
        answer: Option<Answer<'_>>,
        f: &mut F,
    ) -> Then {
        let Some(answer) = answer else {
            bump(&self.stats.discards, 1);
            self.reposts.push(ridx);
            return Then::Done;
        };
        let Some((xid, acc, err)) = answer.unpack() else {
            return Then::ServeReverse;
        };
        // A grant only from a reply: an error's credit field is not one (CHECKLIST G-15,
        // [V2] §5.3.3).
        let grant = match (&acc, err) {
            (Some(a), None) => Some(a.header.credit()),
            _ => None,
        };
        let i = (xid & self.slot_mask) as usize;
        let matches = i < self.slots.len()
            && self.slots[i].xid == xid
            && match self.slots[i].state {
                CallState::Sent | CallState::Zombie => true,
                CallState::Invalidating => self.slots[i].given_up().is_some(),
                _ => false,
            };
        if !matches {
            bump(&self.stats.discards, 1);
            self.reposts.push(ridx);
            return Then::Done;
        }
        let slot = &mut self.slots[i];
        if slot.state != CallState::Sent {
            // A late reply to an RPC given up: its credit comes back now if it was reported
            // as timed out (`Zombie`), when its windows are invalidated otherwise (`finish`).
            if slot.state == CallState::Zombie {
                self.credits.on_reply(grant);
                slot.state = CallState::Free;
                self.free.put(i as u32, slot);
            } else {
                slot.grant = grant;
                slot.answered = true;
            }
            self.reposts.push(ridx);
            return Then::Done;
        }
        let outcome = match (err, &acc) {
            (Some(e), _) => {
                bump(
                    match e {
                        RpcError::ErrVers { .. } => &self.stats.err_vers,
                        RpcError::ErrChunk => &self.stats.err_chunk,
                        _ => &self.stats.rdma2_errors,
                    },
                    1,
                );
                CallOutcome::Error(e)
            }
            (None, Some(acc)) => {
                let h = acc.header;
                // Check what came back against what was provided (CHECKLIST G-4, G-17).
                let prov = slot.provided();
                let wl_ok =
                    chunks::check_returned_write_list(&prov[..slot.n_writes], h.write_list())
                        .is_ok();
                let rc_ok = chunks::check_returned_reply(
                    slot.has_reply_chunk.then(|| &slot.reply[..slot.reply_n]),
                    h.reply_chunk(),
                )
                .is_ok();
                if !(wl_ok && rc_ok) {
                    bump(&self.stats.discards, 1);
                    self.reposts.push(ridx);
                    return Then::Done;
                }
                CallOutcome::Reply
            }
            (None, None) => {
                self.reposts.push(ridx);
                return Then::Done;
            }
        };
        slot.grant = grant;
        slot.recv_idx = Some(ridx);
        slot.recv_len = len;
        slot.outcome = outcome;
        if let Some(k) = inv {
            for b in slot.bound.iter_mut() {
                if *b == Some(k) {
                    *b = None;
                    bump(&self.stats.remote_invalidations, 1);
                }
            }
        }
        if slot.bound.iter().any(Option::is_some) {
            return Then::Invalidate(i as u32);
        }
        // Nothing left to invalidate: complete now, from the parse in hand (what `finish`
        // does, without judging the reply a second time).
        let result = match (outcome, &acc) {
            (CallOutcome::Reply, Some(acc)) => {
                let r = deliver(slot, acc, self.stats);
                self.batch[1] += 1;
                r
            }
            (CallOutcome::Error(e), _) => Err(e),
            (CallOutcome::Reply, None) => Err(RpcError::BadReply),
        };
        f(Completion {
            tag: slot.tag,
            xid: slot.xid,
            result,
        });
        self.reposts.push(ridx);
        self.credits.on_reply(slot.grant);
        slot.state = CallState::Free;
        slot.recv_idx = None;
        self.free.put(i as u32, slot);
        Then::Done
    }
}

impl<'a> Answer<'a> {
    /// The answered Call's xid, the reply (if it is one) and the error it reports (if any);
    /// `None` for a reverse-direction Call, which answers nothing.
    #[inline]
    fn unpack(self) -> Option<(u32, Option<verdict::AcceptedReply<'a>>, Option<RpcError>)> {
        match self {
            Answer::Reply(acc) => {
                let err = acc.header.error().map(|e| match e {
                    RdmaError::Vers { low, high } => RpcError::ErrVers { low, high },
                    RdmaError::Chunk => RpcError::ErrChunk,
                });
                Some((acc.header.xid(), Some(acc), err))
            }
            Answer::Error { xid, err } => Some((xid, None, Some(err))),
            Answer::ReverseCall => None,
        }
    }
}

/// What a received message answers: a Reply (or version 1 RDMA_ERROR) accepted by the
/// verdict, or an error the peer reported about the Call `xid`.
pub(super) enum Answer<'a> {
    Reply(verdict::AcceptedReply<'a>),
    Error {
        xid: u32,
        err: RpcError,
    },
    /// A reverse-direction Call to serve (RFC 8167 §5; \[V2\] §3.2).
    ReverseCall,
}

/// Judges a message received on a connection speaking `wire` as a requester (RFC 8166
/// §4.5; \[V2\] §3.2, §5.3.3): `None` drops it. Version 2: RDMA2_ERROR (other than ERR_VERS
/// with version 2 in its range) completes its RPC with the error; RDMA2_CONNPROP after the
/// opening changes nothing (\[V2\] §4.2: properties do not change); a Call is not served.
pub(super) fn judge_answer<'a>(
    wire: Wire,
    reverse: bool,
    bytes: &'a [u8],
    stats: &Counters,
) -> Option<Answer<'a>> {
    match shape::judge_reply_in(bytes, wire, reverse) {
        Ok(acc) => Some(Answer::Reply(acc)),
        Err(r) => answer_of_refusal(r, reverse, bytes, stats),
    }
}

/// What a message the requester's verdict refused (`r`) is to it: in version 1, a
/// backward Call when this end serves them (RFC 8167), dropped otherwise; in version 2,
/// RDMA2_ERROR (other than ERR_VERS with version 2 in its range) completes its RPC with
/// the error, RDMA2_CONNPROP after the opening changes nothing (\[V2\] §4.2), a Call is
/// served when this end serves (and a malformed one refused by the reverse path).
pub(super) fn answer_of_refusal<'a>(
    r: Refusal,
    reverse: bool,
    bytes: &[u8],
    stats: &Counters,
) -> Option<Answer<'a>> {
    use rpcrdma_proto::v2;
    let v = match r {
        // Version 1 has no direction flag: a refused message is a backward Call when its
        // RPC message is a CALL (RFC 8167 §5), served (or refused) by the reverse path.
        Refusal::V1(_) if reverse && verdict::backward_call(bytes).is_some() => {
            return Some(Answer::ReverseCall)
        }
        Refusal::V1(_) => return None,
        Refusal::V2(v) => v,
    };
    let xid = rpcrdma_proto::xdr::word_at(bytes, 0)?;
    match v.action {
        v2::Action::PeerError(e) => Some(Answer::Error {
            xid,
            err: RpcError::Rdma2(e),
        }),
        v2::Action::FallBack { low, high } => Some(Answer::Error {
            xid,
            err: RpcError::ErrVers { low, high },
        }),
        v2::Action::Properties => {
            bump(&stats.connprops_received, 1);
            None
        }
        v2::Action::Call => Some(Answer::ReverseCall),
        // A malformed reverse Call is refused by the reverse path.
        v2::Action::Error(_) | v2::Action::GarbageArgs if reverse => Some(Answer::ReverseCall),
        _ => None,
    }
}

/// The reply of a finished RPC, borrowed from the receive buffer and the result buffer
/// (whose window was invalidated before this runs).
pub(super) fn deliver<'a, P: Provider>(
    slot: &'a CallSlot<P>,
    acc: &verdict::AcceptedReply<'a>,
    stats: &Counters,
) -> Result<Reply<'a>, RpcError> {
    let h = acc.header;
    let (rpc, results) = match acc.reply {
        Some((rpc, len)) => {
            bump(&stats.short_replies, 1);
            (rpc, &h.payload()[len..])
        }
        None => {
            bump(&stats.long_replies, 1);
            let total = h.reply_chunk().map_or(0, |c| c.total_len()) as usize;
            let res = view::bytes(&slot.res, slot.reply_off as usize + total);
            let stream = &res[slot.reply_off as usize..];
            let (rpc, len) = ReplyHeader::parse(stream).map_err(|_| RpcError::BadReply)?;
            bump(&stats.bytes_written, total as u64);
            (rpc, &stream[len..])
        }
    };
    let prov = slot.provided();
    let mut list = [chunks::ReturnedChunk::ABSENT; MAX_WRITE_CHUNKS];
    let bulk = match chunks::check_returned_write_list_into(
        &prov[..slot.n_writes],
        h.write_list(),
        &mut list,
    ) {
        Ok(()) => filled(slot, &list, stats),
        Err(_) => [&[][..]; MAX_WRITE_CHUNKS],
    };
    Ok(Reply {
        rpc,
        results,
        bulk,
        n_bulk: slot.n_writes,
    })
}

/// The bytes of each Write chunk the Reply returned filled (`list`: each provided chunk's
/// form and length, checked against what the Call provided), in the slot's result buffer,
/// counted.
pub(super) fn filled<'a, P: Provider>(
    slot: &'a CallSlot<P>,
    list: &[chunks::ReturnedChunk; MAX_WRITE_CHUNKS],
    stats: &Counters,
) -> [&'a [u8]; MAX_WRITE_CHUNKS] {
    let mut bulk: [&[u8]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for (c, b) in bulk.iter_mut().enumerate().take(slot.n_writes) {
        if let Some(r) = list.get(c).filter(|r| r.form == ReturnedForm::Filled) {
            let off = slot.write_off[c] as usize;
            *b = &view::bytes(&slot.res, off + r.total as usize)[off..];
            bump(&stats.bytes_written, r.total);
            bump(&stats.write_chunks, 1);
        }
    }
    bulk
}
