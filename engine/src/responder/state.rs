//! What a connection's driver reads and sets, outside the completion loop: the negotiation,
//! the grant, counters and memory, liveness and the work in process, and the completion
//! queue's notifications for a worker about to wait.

use super::*;

impl<P: Provider> ServerConn<P> {
    /// What was negotiated with the client.
    pub fn negotiation(&self) -> &Negotiation {
        &self.negotiation
    }

    /// The largest reply posted inline ([`ConnConfig::inline_sends`] within what the device
    /// and the queue pair granted).
    pub fn inline_sends(&self) -> u32 {
        self.io.inline_max
    }

    /// Bytes of memory this connection registered for itself (its receive buffers at their
    /// stride, none on a shared receive queue, and version 2's reverse-direction buffers):
    /// what accepting one more connection costs. What it holds of the server's share is
    /// [`shared_bytes`](Self::shared_bytes).
    pub fn registered_bytes(&self) -> u64 {
        self.recv_pool.as_ref().map_or(0, BufferPool::bytes) + self.reverse.registered_bytes()
    }

    /// The share this connection takes its ring and bulk buffers from (its server's, or
    /// its own for a connection made by [`ServerConn::accept`]).
    pub fn share(&self) -> &Arc<Share<P>> {
        &self._share
    }

    /// Entries of the reply ring the connection holds now: none before its first Call and
    /// after a [`shed`](Self::shed); on a shared receive queue twice its grant (8 to 64),
    /// otherwise twice its credits.
    pub fn reply_ring_len(&self) -> usize {
        self.ring.len()
    }

    /// Bytes of the server's share this connection holds now: its reply ring and its own
    /// pull and bulk buffers once it has had a Call, and the shared buffers standing in for
    /// its Calls' chunks.
    pub fn shared_bytes(&self) -> u64 {
        let own: u64 = self
            .ring
            .iter()
            .chain(&self.pull)
            .chain(&self.bulk)
            .map(|b| b.size() as u64)
            .sum();
        own + self.large.held_bytes()
    }

    /// The grant advertised in every reply.
    pub fn grant(&self) -> u32 {
        self.credits.grant()
    }

    /// Changes the grant (clamped to `1..=credits`); returns the grant in force. Between
    /// polls every receive buffer is posted or in process (and within one, a reply leaves
    /// before its repost only while a spare receive stands in), so the new grant is backed
    /// by posted receives before the next reply carries it (RFC 8166 §3.3.1).
    ///
    /// With the server's shared receive queue ([`ConnConfig::srq`]) a raise takes the
    /// receives that back it from the queue first, and is clamped to what it could take.
    pub fn set_grant(&mut self, grant: u32) -> u32 {
        let Some(recvs) = self._share.recvs(self.srq_home) else {
            return self.credits.set_grant(grant);
        };
        let backed = self.srq_reserved - self.reverse_slots - SPARE_RECVS;
        let want = grant.clamp(1, self.config.credits);
        if want > backed && recvs.admit(self._share.pd(), want - backed).is_ok() {
            self.srq_reserved += want - backed;
        }
        let backed = self.srq_reserved - self.reverse_slots - SPARE_RECVS;
        self.credits.set_grant(want.min(backed))
    }

    /// What this connection costs in registered memory: its own registration and, with
    /// the server's shared receive queue, the receives it reserved there.
    pub fn memory(&self) -> ConnMemory {
        let stride = self._share.recvs(self.srq_home).map_or(0, |r| r.stride());
        ConnMemory {
            own_bytes: self.registered_bytes(),
            shared_receives: self.srq_reserved,
            shared_receive_bytes: u64::from(self.srq_reserved) * stride,
        }
    }

    /// Receives this connection reserved in its server's shared receive queue (0 when it
    /// has its own): its grant and spares, the registered memory it costs there.
    pub fn shared_receives(&self) -> u32 {
        self.srq_reserved
    }

    /// The worker this connection belongs with: the index of the server's shared receive
    /// queue it takes its receives from (one queue per worker, so that one thread alone
    /// posts to each), or `None` when it has receives of its own.
    pub fn home(&self) -> Option<usize> {
        (self.srq_reserved > 0).then_some(self.srq_home)
    }

    /// The counters, shared: readable from any thread.
    pub fn stats(&self) -> Arc<Counters> {
        Arc::clone(&self.io.stats)
    }

    /// A snapshot of the counters.
    pub fn snapshot(&self) -> Snapshot {
        self.io.stats.snapshot()
    }

    /// Starts fetching what the next [`poll`](Self::poll) of an idle connection reads (its
    /// completion queue's next entry): a worker polling many connections asks it of one a
    /// few places ahead, so that their cache misses overlap ([`Drive::prefetch`]).
    ///
    /// [`Drive::prefetch`]: crate::worker::Drive::prefetch
    #[inline]
    pub fn prefetch_poll(&self) {
        self.cq.prefetch_next();
    }

    /// A watch of the connection's completion queue, if its provider offers one
    /// ([`CompletionQueue::watch`]): with
    /// [`idle_at`](Self::idle_at), it lets a worker skip the connection while nothing has
    /// arrived for it.
    pub fn cq_watch(&self) -> Option<crate::fabric::CqWatch> {
        self.cq.watch()
    }

    /// Where the next completion will be, when only a completion can give the connection
    /// work (what the last [`poll`](Self::poll) left undone waits for nothing else: no
    /// Call waiting for a send slot or shared buffers, no Read to start, no receive to
    /// repost, no reply to post); `None` when it must be polled anyway. A worker that finds
    /// no completion at this position
    /// ([`WatchTable::quiet`](crate::fabric::WatchTable::quiet)) may skip the poll. It still
    /// polls every connection now and then (the checks an idle poll makes of a departed
    /// peer, of an overrun).
    #[inline]
    pub fn idle_at(&self) -> Option<u64> {
        let quiet =
            !self.io.dead && self.watched && self.ready.is_empty() && self.waits_on_nothing();
        quiet.then(|| self.cq.cursor())
    }

    /// Whether the connection was lost (the queue pair is in the error state). A dead
    /// connection does nothing more; drop it.
    pub fn is_dead(&self) -> bool {
        self.io.dead
    }

    /// Calls received and not yet answered.
    pub fn in_process(&self) -> u32 {
        self.in_process
    }

    /// Send-queue requests (replies, RDMA Reads) posted and not yet known complete. An
    /// unsignaled reply stays counted until a later signaled request completes.
    pub fn sends_outstanding(&self) -> u64 {
        self.io.sq.outstanding()
    }

    /// Makes the completion of every posted reply observable, for a graceful close: when
    /// no Call is in process and the last request posted was unsignaled, posts a signaled
    /// zero-length RDMA Write (it needs no valid key, IBTA C9-88, and the peer sees
    /// nothing), whose completion retires everything before it (a reliable connection
    /// completes in order). On a NIC, posting is not sending: a reply still in the send
    /// queue when the connection is torn down would be flushed, not delivered, so a close
    /// waits for [`sends_outstanding`](Self::sends_outstanding) to reach 0.
    pub fn settle(&mut self) {
        if self.io.dead
            || self.in_process > 0
            || self.io.sq.last_is_signaled()
            || self.io.sq.room() == 0
        {
            return;
        }
        let (seq, _) = self.io.sq.post(true);
        let fence =
            SendWr::write(wrid::pack(Kind::Write, 0, seq), &[], RemoteAddr::new(0, 0)).signaled();
        if self.io.qp.post_send(&fence).is_err() {
            self.refused();
        }
    }

    /// This connection's number, unique in the process: the one its tickets carry
    /// ([`Deferred::connection`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Calls whose handler deferred the answer and that wait for [`complete`](Self::complete)
    /// (counted in [`in_process`](Self::in_process) too).
    pub fn deferred(&self) -> u32 {
        self.deferred
    }

    /// Asks for a notification of the connection's next completion (its completion queue's
    /// [`arm`](crate::fabric::CompletionQueue::arm)) before a worker waits; `false` when it
    /// cannot be waited for now: the provider cannot notify, or a completion is on its way.
    /// A dead connection has nothing more to wait for and is armed trivially.
    pub fn arm_notify(&mut self) -> bool {
        if self.io.dead {
            return true;
        }
        self.cq.arm().unwrap_or(false)
    }

    /// The descriptor that turns readable when the armed connection has a completion.
    pub fn notify_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.cq.notify_fd()
    }

    /// Takes the notifications delivered (after a wait).
    pub fn take_notifications(&mut self) {
        self.cq.take_notifications();
    }
}
