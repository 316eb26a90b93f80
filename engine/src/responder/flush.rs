//! Posting a turn's work: the replies built and the receives consumed, each kind in one
//! post, in the order RFC 8166 §3.3.1 allows (see [`SPARE_RECVS`]).

use super::*;

impl<P: Provider> ServerConn<P> {
    /// Posts the replies and reposts the consumed receives, each kind in one post. The
    /// receives go back first (every Call the grant allows must find one, RFC 8166 §3.3.1)
    /// unless the spare receives cover them: then the replies leave first, and the reposts
    /// are off the round trip.
    pub(super) fn flush(&mut self) -> usize {
        if self.io.dead {
            return 0;
        }
        if self.reposts.len() <= SPARE_RECVS as usize {
            let done = self.post_replies();
            if !self.io.dead {
                self.post_reposts();
            }
            done
        } else if self.post_reposts() {
            self.post_replies()
        } else {
            0
        }
    }

    /// Reposts the consumed receives in one post; false if the post was refused (the
    /// connection is then lost).
    #[inline(always)]
    fn post_reposts(&mut self) -> bool {
        if self._share.recvs(self.srq_home).is_some() {
            return self.post_srq_reposts();
        }
        if !self.reposts.is_empty() {
            if conn::repost_recvs::<P>(&mut self.io.qp, &self.recv, &self.reposts).is_err() {
                self.refused();
                return false;
            }
            self.reposts.clear();
        }
        true
    }

    /// [`post_reposts`](Self::post_reposts) on a shared receive queue.
    #[inline(never)]
    fn post_srq_reposts(&mut self) -> bool {
        let Some(recvs) = self._share.recvs(self.srq_home) else {
            return true;
        };
        // Each slot's buffer goes back to the queue, its placeholder back in place, the
        // slot free for the next Call.
        let (recv, parked, free) = (&mut self.recv, &mut self.srq_parked, &mut self.srq_free);
        if let [k] = self.reposts[..] {
            // One receive (the usual case when many connections each have one RPC in
            // flight): posted alone, without a batch.
            let Some(own) = parked[k as usize].take() else {
                self.reposts.clear();
                return true;
            };
            free.push(k);
            let buf = core::mem::replace(&mut recv[k as usize], own);
            self.reposts.clear();
            if recvs.repost_one(buf).is_err() {
                self.refused();
                return false;
            }
            return true;
        }
        let bufs = self.reposts.iter().filter_map(|&k| {
            let own = parked[k as usize].take()?;
            free.push(k);
            Some(core::mem::replace(&mut recv[k as usize], own))
        });
        let posted = recvs.repost(bufs);
        self.reposts.clear();
        if posted.is_err() {
            self.refused();
            return false;
        }
        true
    }

    /// Posts the pending replies, in lists of at most [`POLL_BATCH`]; returns how many were
    /// posted. One reply is posted inline in the caller, more a call apart
    /// ([`post_reply_lists`](Self::post_reply_lists), with its arrays on the stack).
    #[inline(always)]
    fn post_replies(&mut self) -> usize {
        if let [s] = self.sends[..] {
            // One reply: one work request, without the batch arrays.
            let buf = &self.ring[s.ring as usize];
            let sge = buf.sge_span(0, s.len);
            let payload = send_payload(buf, &sge, self.io.inline_max);
            let wr = reply_wr(&mut self.io, &mut self.ring_seq, s, payload);
            if self.io.qp.post_send(&wr).is_err() {
                self.refused();
                return 0;
            }
            self.io.tally.rpcs += 1;
            self.sends.clear();
            return 1;
        }
        self.post_reply_lists()
    }

    /// [`post_replies`](Self::post_replies) of none or more than one reply.
    #[inline(never)]
    fn post_reply_lists(&mut self) -> usize {
        let mut done = 0;
        let mut k = 0;
        while k < self.sends.len() {
            let n = (self.sends.len() - k).min(POLL_BATCH);
            let mut sges = [Sge::default(); POLL_BATCH];
            for j in 0..n {
                let s = self.sends[k + j];
                sges[j] = self.ring[s.ring as usize].sge_span(0, s.len);
            }
            let mut wrs = [SendWr::<P>::send(0, &[]); POLL_BATCH];
            for j in 0..n {
                let s = self.sends[k + j];
                let buf = &self.ring[s.ring as usize];
                let payload = send_payload(buf, &sges[j], self.io.inline_max);
                wrs[j] = reply_wr(&mut self.io, &mut self.ring_seq, s, payload);
            }
            if self.io.qp.post_send_list(&wrs[..n]).is_err() {
                self.refused();
                return done;
            }
            done += n;
            k += n;
        }
        if !self.sends.is_empty() {
            self.io.tally.rpcs += self.sends.len() as u64;
            self.sends.clear();
        }
        done
    }
}

/// The Send (with Invalidate when the reply names an rkey) of reply `s` with `payload`,
/// taking its send-queue slot (noted in `ring_seq` for its ring buffer) and counting its
/// bytes.
#[inline]
fn reply_wr<'a, P: Provider>(
    io: &mut FabricSide<P>,
    ring_seq: &mut [u64],
    s: PendingSend,
    payload: Payload<'a>,
) -> SendWr<'a, P> {
    let (seq, signaled) = io.sq.post(s.signal);
    ring_seq[s.ring as usize] = seq;
    let id = wrid::pack(Kind::Send, s.ring, if signaled { seq } else { 0 });
    let op = match s.inv {
        Some(rkey) => SendOp::SendWithInv { rkey },
        None => SendOp::Send,
    };
    let wr = SendWr::new(id, op, payload);
    io.tally.bytes_sent += u64::from(s.len);
    if signaled {
        wr.signaled()
    } else {
        wr
    }
}
