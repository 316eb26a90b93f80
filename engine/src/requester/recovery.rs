//! Giving up and starting over: cancel, timeouts (RPCs keep their credits as zombies until a
//! late reply or a new connection, RFC 8166 §3.3.1), connection loss, reconnection and
//! retransmission with the original XIDs (§3.3.3, RFC 5531 §9).

use super::*;

impl<P: Provider> Client<P> {
    /// Cancels the RPC `xid` (as [`submit`](Self::submit) returned it): it completes at
    /// the next [`poll_completions`](Self::poll_completions) — once and only once, like
    /// every RPC — with [`RpcError::Cancelled`], after the memory its Call exposed is
    /// unreachable: the windows still bound are invalidated with Local Invalidates first
    /// (RFC 8166 §4.4.1, §8.1.3), so a result buffer is never reused while the responder
    /// can still write it. The Call may already have reached the responder, which may still
    /// execute it: as for a timeout, the RPC keeps its credit until the late reply returns
    /// it (§3.3.1) or the connection is replaced, and the reply is then dropped. An RPC
    /// waiting to be sent again after a loss (retransmission on) exposes nothing and is not
    /// sent again. A Call still held back by [`cork`](Self::cork) is posted first (its
    /// credit is taken, so the responder's reply must find its slot).
    pub fn cancel(&mut self, xid: u32) -> Result<(), CancelError> {
        let i = (xid & self.slot_mask) as usize;
        if !self.slots.get(i).is_some_and(|s| s.cancellable(xid)) {
            return Err(CancelError::NotPending);
        }
        self.post_queued();
        bump(&self.stats.cancels, 1);
        let s = &mut self.slots[i];
        s.outcome = CallOutcome::Error(RpcError::Cancelled);
        if s.state == CallState::Resend {
            self.cancelled.push(i as u32);
            return Ok(());
        }
        match self.post_invalidates(i as u32) {
            // Completed by the signaled Local Invalidate's completion (`on_completion`).
            Ok(true) => {}
            Ok(false) => self.cancelled.push(i as u32),
            // The connection is ended; the next poll completes the RPC with the loss.
            Err(()) => {
                if let Some(qp) = self.qp.as_mut() {
                    qp.disconnect();
                }
            }
        }
        Ok(())
    }

    /// Completes the RPCs [`cancel`](Self::cancel) left to the next poll: those that had
    /// no window to invalidate, and those waiting to be sent again.
    #[inline(never)]
    pub(super) fn finish_cancelled<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        for k in 0..self.cancelled.len() {
            let idx = self.cancelled[k];
            let s = &mut self.slots[idx as usize];
            if s.outcome != CallOutcome::Error(RpcError::Cancelled) {
                continue;
            }
            match s.state {
                CallState::Invalidating => self.finish(idx, f),
                CallState::Resend => {
                    f(Completion {
                        tag: s.tag,
                        xid: s.xid,
                        result: Err(RpcError::Cancelled),
                    });
                    s.state = CallState::Free;
                    self.free.put(idx, s);
                    self.resend_n -= 1;
                }
                _ => {}
            }
        }
        self.cancelled.clear();
    }

    pub(super) fn check_timeouts<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        if self.credits.in_flight() == 0 && self.resend_n == 0 {
            return;
        }
        let now = Instant::now();
        let stuck_after = invalidate_limit(self.config.ack_timeout);
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if s.state == CallState::Resend {
                // Waiting for a credit on the new connection: no memory exposed.
                if s.deadline.is_some_and(|d| d <= now) {
                    self.expire_resend(i, f);
                }
                continue;
            }
            if s.state == CallState::Invalidating {
                // Its Local Invalidates wait behind the Sends before them, which a reliable
                // connection retires or fails within its retries. One still waiting past
                // that bound means the send queue is stuck without an error (a peer that
                // neither acknowledges nor fails): the connection is ended, which makes
                // the memory unreachable (windows deallocated) and delivers the RPC.
                let since = *s.invalidating_since.get_or_insert(now);
                if now.saturating_duration_since(since) > stuck_after {
                    bump(&self.stats.stalls, 1);
                    self.lose(f);
                    return;
                }
                continue;
            }
            if s.state != CallState::Sent {
                continue;
            }
            let deadline = *s.deadline.get_or_insert_with(|| now + s.timeout);
            if let (Some(policy), false) = (self.config.retransmit, self.closing) {
                // A timeout too large for the clock never acts before the deadline.
                let due = *s.reply_due.get_or_insert_with(|| {
                    now.checked_add(policy.reply_timeout).unwrap_or(deadline)
                });
                if due <= now && now < deadline {
                    // No reply on this connection for `reply_timeout`: it is taken as
                    // silent and replaced, and the pending Calls are sent again.
                    bump(&self.stats.stalls, 1);
                    self.lose(f);
                    return;
                }
            }
            if deadline <= now {
                bump(&self.stats.timeouts, 1);
                s.outcome = CallOutcome::Error(RpcError::Timeout);
                s.recv_idx = None;
                self.invalidate(i as u32, f);
                if self.dead {
                    return;
                }
            }
        }
    }

    /// Whether every credit is held by an RPC already reported as timed out (a zombie,
    /// which keeps its credit until a late reply: the responder may still be working on
    /// it, RFC 8166 §3.3.1), so that no Call can be sent until one of them is answered.
    pub(super) fn zombies_hold_every_credit(&self) -> bool {
        let held = self.credits.in_flight();
        held > 0
            && self.credits.available() == 0
            && self
                .slots
                .iter()
                .filter(|s| s.state == CallState::Zombie)
                .count()
                == held as usize
    }

    /// A `Resend` RPC whose deadline passed: nothing of it is exposed (no window bound on
    /// the new connection, the old ones deallocated), so `Timeout` is reported at once and
    /// the slot is free again.
    pub(super) fn expire_resend<F: FnMut(Completion<'_>)>(&mut self, i: usize, f: &mut F) {
        let s = &mut self.slots[i];
        bump(&self.stats.timeouts, 1);
        f(Completion {
            tag: s.tag,
            xid: s.xid,
            result: Err(RpcError::Timeout),
        });
        s.state = CallState::Free;
        self.free.put(i as u32, s);
        self.resend_n -= 1;
    }

    /// Completes every `Resend` RPC with `err` (reconnection failed for good).
    pub(super) fn abandon_resends<F: FnMut(Completion<'_>)>(&mut self, err: RpcError, f: &mut F) {
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if s.state == CallState::Resend {
                f(Completion {
                    tag: s.tag,
                    xid: s.xid,
                    result: Err(err),
                });
                s.state = CallState::Free;
                self.free.put(i as u32, s);
            }
        }
        self.resend_n = 0;
    }

    /// A poll while the connection is lost: with retransmission on, expires the pending
    /// RPCs whose deadline passed, then — unless in the backoff after a failed attempt —
    /// makes one connection attempt, bounded by the policy's `attempt_timeout` and the
    /// earliest pending deadline. On success the pending Calls are sent again (as credits
    /// allow); after `max_attempts` failures they complete with `ConnectionLost`.
    pub(super) fn recover<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> usize {
        let (Some(rec), Some(policy)) = (self.recovery, self.config.retransmit) else {
            return 0;
        };
        let now = Instant::now();
        let mut earliest: Option<Instant> = None;
        let mut done = 0;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.state != CallState::Resend {
                continue;
            }
            match s.deadline {
                Some(d) if d > now => earliest = Some(earliest.map_or(d, |e| e.min(d))),
                _ => {
                    self.expire_resend(i, f);
                    done += 1;
                }
            }
        }
        if now < rec.next_at {
            return done;
        }
        let mut timeout = policy.attempt_timeout;
        if let Some(e) = earliest {
            timeout = timeout.min(e - now);
        }
        match self.reconnect_within(timeout.max(Duration::from_millis(1))) {
            Ok(()) => self.resend(f),
            Err(_) => {
                let attempts = rec.attempts + 1;
                if attempts >= policy.max_attempts {
                    self.recovery = None;
                    done += self.resend_n as usize;
                    self.abandon_resends(RpcError::ConnectionLost, f);
                } else {
                    self.recovery = Some(Recovery {
                        attempts,
                        next_at: Instant::now() + policy.backoff,
                    });
                }
            }
        }
        done
    }

    /// Sends `Resend` RPCs again on the new connection, earliest deadline first, while
    /// credits (from one on a new connection, RFC 8166 §3.3.3) and the send queue allow.
    pub(super) fn resend<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        while self.resend_n > 0 && !self.dead && self.credits.available() > 0 && self.sq.room() >= 8
        {
            let mut next: Option<(usize, Option<Instant>)> = None;
            for (i, s) in self.slots.iter().enumerate() {
                if s.state != CallState::Resend {
                    continue;
                }
                let earlier = match next {
                    None => true,
                    Some((_, d)) => s.deadline < d,
                };
                if earlier {
                    next = Some((i, s.deadline));
                }
            }
            let Some((i, _)) = next else {
                self.resend_n = 0;
                return;
            };
            match self.retransmit(i as u32) {
                Ok(()) => {}
                Err(Retransmit::Post) => return self.lose(f),
                Err(Retransmit::Corrupt) => {
                    // The Call as first sent no longer decodes: never expected; report it
                    // rather than send something else under its XID.
                    let s = &mut self.slots[i];
                    f(Completion {
                        tag: s.tag,
                        xid: s.xid,
                        result: Err(RpcError::ConnectionLost),
                    });
                    s.state = CallState::Free;
                    s.bound = [None; 2];
                    self.free.put(i as u32, s);
                    self.resend_n -= 1;
                }
            }
        }
    }

    /// Sends slot `idx`'s Call again: the same XID and payload (still in the send and
    /// argument buffers), windows bound afresh over the same spans, and the transport
    /// header re-encoded in place with the new rkeys and the current credit request (its
    /// length does not depend on either).
    pub(super) fn retransmit(&mut self, idx: u32) -> Result<(), Retransmit> {
        let i = idx as usize;
        let slot = &mut self.slots[i];
        let mut send_len = slot.send_len as usize;
        // The read list as first sent, and the spans of the buffers it exposed.
        let reads = &mut *self.reads;
        let first = first_sent(slot, send_len, reads)?;
        let (nr, old_hlen) = (first.reads, first.hlen);
        // The new connection may speak the other version ([V2] §7): its header is 8 bytes
        // longer or shorter, and the inline payload moves with it.
        let hlen = old_hlen + self.wire.extra() - first.wire.extra();
        if hlen != old_hlen {
            send_len = move_payload(slot, send_len, old_hlen, hlen)?;
        }
        let res_end = result_end(slot);
        let qp = self.qp.as_mut().ok_or(Retransmit::Post)?;
        let ends = [first.arg_end, res_end];
        let rkeys = bind_again(qp, &mut self.sq, &self.stats, slot, idx, ends)?;
        // The chunk lists with the new rkeys; the segments kept for checking the reply
        // (G-4, G-17) carry them too.
        rekey(&mut reads[..nr], slot, rkeys);
        let credit = self.credits.requested();
        let inv = if self.wire == Wire::V2 && self.negotiation.remote_invalidation() {
            slot.bound[1].or(slot.bound[0]).unwrap_or(0)
        } else {
            0
        };
        // Same shape, new rkeys: the header keeps its length (in one version), so the payload
        // stays in place.
        let head = (self.wire, slot.xid, credit, inv);
        if !encode_call_header(slot, &reads[..nr], head, first.nomsg, hlen) {
            return Err(Retransmit::Corrupt);
        }
        let sge = slot.send.sge_span(0, send_len as u32);
        let payload = send_payload(&slot.send, &sge, self.inline_max);
        let wr = call_send(idx, self.sq.post(false), payload);
        qp.post_send(&wr).map_err(|_| Retransmit::Post)?;
        self.credits.take();
        // Its XID, tag and deadline are kept.
        slot.await_reply();
        self.resend_n -= 1;
        bump(&self.stats.retransmits, 1);
        bump(&self.stats.bytes_sent, send_len as u64);
        Ok(())
    }

    /// The connection is gone: windows are deallocated (so no peer can reach the memory),
    /// then every pending RPC completes with [`RpcError::ConnectionLost`] — or, with
    /// retransmission on, stays pending (`Resend`, its deadline kept) while the requester
    /// reconnects; an RPC whose reply was in hand (Local Invalidates outstanding) is
    /// delivered then, its memory being unreachable. Timed-out RPCs report `Timeout`.
    pub(super) fn lose<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        if self.dead {
            return;
        }
        self.dead = true;
        bump(&self.stats.conn_lost, 1);
        if let Some(qp) = self.qp.as_mut() {
            qp.disconnect();
        }
        self.reposts.clear();
        let retransmit = self.config.retransmit.is_some() && !self.closing;
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            s.mw_arg = None;
            s.mw_res = None;
            s.bound = [None; 2];
            match s.state {
                CallState::Sent if retransmit => {
                    s.deadline.get_or_insert(now + s.timeout);
                    s.state = CallState::Resend;
                    self.resend_n += 1;
                    continue;
                }
                CallState::Resend if retransmit && s.given_up().is_none() => continue,
                CallState::Invalidating if retransmit => {
                    // The reply (or error, timeout or cancel) is in hand: deliver it.
                    self.finish(i as u32, f);
                }
                CallState::Sent | CallState::Invalidating | CallState::Resend => {
                    f(Completion {
                        tag: s.tag,
                        xid: s.xid,
                        result: Err(s.given_up().unwrap_or(RpcError::ConnectionLost)),
                    });
                    if s.state == CallState::Resend {
                        self.resend_n -= 1;
                    }
                }
                CallState::Zombie | CallState::Free => {}
            }
            let s = &mut self.slots[i];
            if s.state != CallState::Free {
                s.state = CallState::Free;
                self.free.put(i as u32, s);
            }
        }
        self.credits.reset();
        self.reposts.clear();
        // Every cancelled RPC was completed above.
        self.cancelled.clear();
        self.recovery = retransmit.then_some(Recovery {
            attempts: 0,
            next_at: now,
        });
    }
}

/// How long a slot's Local Invalidates may wait before its send queue is taken as stuck:
/// one and a half times what a reliable connection takes to exhaust its 7 retries at
/// `ack_timeout` (8 × 4.096 µs × 2^`ack_timeout`), at least a second; 20 s when the
/// connection manager chose the timeout (rdma_cm's RoCE default exhausts in 17 s).
pub(super) fn invalidate_limit(ack_timeout: u8) -> Duration {
    if ack_timeout == 0 {
        return Duration::from_secs(20);
    }
    let retries = Duration::from_nanos((8 * 4096) << ack_timeout.min(crate::conn::MAX_ACK_TIMEOUT));
    (retries * 3 / 2).max(Duration::from_secs(1))
}

/// What a retransmitted Call's header said when first sent ([`first_sent`]).
struct FirstSent {
    /// Read segments copied out of it.
    reads: usize,
    /// Where the argument buffer's exposed span ends (0: nothing exposed).
    arg_end: u64,
    /// An RDMA_NOMSG (a Long Call).
    nomsg: bool,
    /// The header's length.
    hlen: usize,
    /// Its version.
    wire: Wire,
}

/// Reads the header of slot `slot`'s Call as first sent (`send_len` bytes): its read list
/// into `reads`, the end of the argument span it exposed, its type, length and version.
/// `Corrupt` when it no longer decodes or holds more Read segments than `reads`.
fn first_sent<P: Provider>(
    slot: &CallSlot<P>,
    send_len: usize,
    reads: &mut [ReadSegment],
) -> Result<FirstSent, Retransmit> {
    let arg_addr = slot.arg.addr();
    let mut nr = 0;
    let mut arg_end = 0u64;
    let bytes = view::bytes(&slot.send, send_len);
    let h = rpcrdma_proto::header::HeaderView::parse_any(bytes).map_err(|_| Retransmit::Corrupt)?;
    for r in h.read_list().iter() {
        if nr == MAX_READ_SEGMENTS {
            return Err(Retransmit::Corrupt);
        }
        let end = r.segment.offset + u64::from(r.segment.length);
        arg_end = arg_end.max(end.saturating_sub(arg_addr));
        reads[nr] = r;
        nr += 1;
    }
    let nomsg = h.proc() == rpcrdma_proto::header::Proc::NoMsg;
    let wire = if h.vers() == Wire::V2.vers() {
        Wire::V2
    } else {
        Wire::V1
    };
    Ok(FirstSent {
        reads: nr,
        arg_end,
        nomsg,
        hlen: send_len - h.payload().len(),
        wire,
    })
}

/// Moves the inline payload of slot `slot`'s Call (`send_len` bytes with a header of
/// `old_hlen`) to follow a header of `hlen` bytes; the new length of the Send.
fn move_payload<P: Provider>(
    slot: &mut CallSlot<P>,
    send_len: usize,
    old_hlen: usize,
    hlen: usize,
) -> Result<usize, Retransmit> {
    let new_len = send_len + hlen - old_hlen;
    let buf = view::bytes_mut(&mut slot.send);
    if new_len > buf.len() {
        return Err(Retransmit::Corrupt);
    }
    buf.copy_within(old_hlen..send_len, hlen);
    slot.send_len = new_len as u32;
    Ok(new_len)
}

/// Where the result buffer's span exposed by slot `slot`'s Write chunks and Reply chunk
/// ends (0: nothing exposed).
fn result_end<P: Provider>(slot: &CallSlot<P>) -> u64 {
    let res_addr = slot.res.addr();
    let mut res_end = 0u64;
    for c in 0..slot.n_writes {
        for sg in &slot.writes[c][..slot.write_n[c]] {
            let end = sg.offset + u64::from(sg.length);
            res_end = res_end.max(end.saturating_sub(res_addr));
        }
    }
    if slot.has_reply_chunk {
        for sg in &slot.reply[..slot.reply_n] {
            let end = sg.offset + u64::from(sg.length);
            res_end = res_end.max(end.saturating_sub(res_addr));
        }
    }
    res_end
}

/// Exposes again the argument and result spans of slot `idx` up to `ends` (0: none):
/// windows bound afresh, or the regions' own keys; their rkeys (0 where nothing is exposed).
/// `Post` when the queue pair refused a bind.
fn bind_again<P: Provider>(
    qp: &mut P::Qp,
    sq: &mut SendQueue,
    stats: &Counters,
    slot: &mut CallSlot<P>,
    idx: u32,
    [arg_end, res_end]: [u64; 2],
) -> Result<[u32; 2], Retransmit> {
    slot.bound = [None; 2];
    let mut rkeys = [0u32; 2];
    for k in 0..2 {
        let (end, buf, mw, access) = if k == 0 {
            (
                arg_end,
                &slot.arg,
                slot.mw_arg.as_ref(),
                Access::REMOTE_READ,
            )
        } else {
            (
                res_end,
                &slot.res,
                slot.mw_res.as_ref(),
                Access::REMOTE_WRITE,
            )
        };
        if end == 0 {
            continue;
        }
        let Some(mw) = mw else {
            rkeys[k] = buf.region().rkey();
            continue;
        };
        let rkey =
            bind_window::<P>(qp, sq, mw, buf, end, access, idx).map_err(|_| Retransmit::Post)?;
        slot.bound[k] = Some(rkey);
        rkeys[k] = rkey;
        bump(&stats.registrations, 1);
    }
    Ok(rkeys)
}

/// Puts the new rkeys (argument, result) into the Read segments `reads` and slot `slot`'s
/// Write chunks and Reply chunk.
fn rekey<P: Provider>(reads: &mut [ReadSegment], slot: &mut CallSlot<P>, rkeys: [u32; 2]) {
    for r in reads {
        r.segment.handle = rkeys[0];
    }
    for c in 0..slot.n_writes {
        for sg in &mut slot.writes[c][..slot.write_n[c]] {
            sg.handle = rkeys[1];
        }
    }
    for sg in &mut slot.reply[..slot.reply_n] {
        sg.handle = rkeys[1];
    }
}
