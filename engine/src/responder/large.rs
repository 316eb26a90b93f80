//! Shared large bulk buffers: each receive owns a pull and a bulk buffer of
//! [`ConnConfig::slot_bulk_size`] and each reply ring entry a buffer for an inline reply;
//! a Call whose chunks need more (a Read chunk larger than its pull buffer, Write chunks
//! larger than its bulk buffer, a Reply chunk larger than a ring entry) takes the
//! connection's large buffers of [`ConnConfig::bulk_size`] for its lifetime.
//!
//! The large buffers are registered as they are needed: [`FIRST_LARGE`] at accept (what one
//! Call may need at once, so that every Call can proceed), then one more each time a Call
//! finds none free, up to [`ConnConfig::large_bufs`]; they stay registered for the
//! connection's life. A connection that never moves large chunks costs their memory (and
//! the accept their registration: ~4 ms per MiB on soft-RoCE in the emulated guest) only
//! for the first ones; a busy one reaches its steady state, with no registration, after its
//! first burst.
//!
//! A Call takes everything it needs at once, when its pull starts (or, without Read
//! chunks, when it is answered), or waits without holding anything: so a Call holding
//! large buffers never waits for another, and every holder finishes (a pulled Call is
//! answered, a deferred one completed, a reply retires), which rules out deadlock.
//!
//! Where a large buffer stands in:
//! - the pull and bulk buffers of the slot (its own ones parked beside, swapped back when
//!   the Call is answered);
//! - a Long reply: reserved for the slot, put into the ring entry the reply is built in at
//!   answer time (the entry's own buffer parked), taken back if the handler defers;
//! - after the answer, the bulk buffer (whose RDMA Writes leave before the reply's Send)
//!   and the Long reply's buffer belong to the ring entry until its Send is retired, as
//!   the entry's own buffer does. They go back to the pool when the entry is next used, or
//!   sooner when a Call waits for one ([`ServerConn::reclaim_large`]).

use super::*;
use crate::pool::PoolConfig;
use rpcrdma_proto::header::{Segments, WriteList};
use std::cell::Cell;

/// Bytes a ring entry needs beyond a reply's results: transport and RPC headers.
const REPLY_SLACK: u64 = 1024;
/// Bytes of padding a bulk result may take beyond its data (alignment, per result).
const BULK_SLACK: u64 = 64;

/// Large buffers registered at accept: a pull buffer, a bulk buffer and a Long reply's, the
/// most one Call takes.
pub(super) const FIRST_LARGE: u32 = 3;

/// The large buffers of one connection and who holds them.
pub(super) struct Large<P: Provider> {
    /// Per slot: its own pull (0) and bulk (1) buffers while large ones stand in.
    parked: Box<[[Option<Buf<P>>; 2]]>,
    /// Per slot: a large buffer reserved for a Long reply.
    reply: Box<[Option<Buf<P>>]>,
    /// Per ring entry: its own buffer while a large one holds a Long reply.
    ring_parked: Box<[Option<Buf<P>>]>,
    /// Per ring entry: a large bulk buffer whose RDMA Writes leave with that entry's reply.
    ring_held: Box<[Option<Buf<P>>]>,
    /// Per ring entry: whether it is listed in `holders`.
    listed: Box<[bool]>,
    /// Ring entries that took large buffers since they were last reclaimed (some may have
    /// given them back since, when they were used again).
    holders: Vec<u32>,
    /// Slots whose Calls wait for large buffers before pulling, in arrival order.
    pub(super) waiting: VecDeque<u32>,
    /// Bytes of a ring entry's own buffer.
    ring_own: usize,
    /// Bytes of a slot's own pull and bulk buffers.
    own: usize,
    /// Bytes of one large buffer.
    size: usize,
    /// The most large buffers there may be (0: none, every buffer is large enough).
    max: u32,
    /// Large buffers out of the pools now (standing in, reserved or held by ring entries):
    /// while none is, the per-Call bookkeeping above has nothing to look at.
    out: Cell<u32>,
    /// The pools: the one made at accept, then one per buffer added (room reserved for all,
    /// so that adding one does not reallocate). Declared last: dropped after the buffers
    /// above went back to them.
    pools: Vec<BufferPool<P>>,
}

impl<P: Provider> Large<P> {
    /// The large buffers `config` asks for ([`ConnConfig::large_count`] of `bulk_size`, for
    /// local writes: RDMA Read sinks, bulk results, Long replies), for `slots` receives and
    /// `ring` reply ring entries of `ring_own` bytes each.
    pub(super) fn new(
        pd: &P::Pd,
        config: &ConnConfig,
        slots: usize,
        ring: usize,
        ring_own: usize,
    ) -> Result<Large<P>, ConnError> {
        let (size, max) = (config.bulk_size as usize, config.large_count());
        let mut pools = Vec::with_capacity((max.saturating_sub(FIRST_LARGE) + 1) as usize);
        if max > 0 {
            pools.push(BufferPool::new(
                pd,
                PoolConfig::new(size, max.min(FIRST_LARGE), Access::LOCAL_WRITE),
            )?);
        }
        Ok(Large {
            parked: (0..slots).map(|_| [None, None]).collect(),
            reply: (0..slots).map(|_| None).collect(),
            ring_parked: (0..ring).map(|_| None).collect(),
            ring_held: (0..ring).map(|_| None).collect(),
            listed: vec![false; ring].into_boxed_slice(),
            holders: Vec::with_capacity(ring),
            waiting: VecDeque::with_capacity(slots),
            ring_own,
            own: config.slot_bulk() as usize,
            size,
            max,
            out: Cell::new(0),
            pools,
        })
    }

    /// The registered bytes of the large buffers made so far.
    pub(super) fn bytes(&self) -> u64 {
        self.pools.iter().map(BufferPool::bytes).sum()
    }

    /// What keeps the first pool's regions alive (for loans), if there is one.
    pub(super) fn keepalive(&self) -> Option<Arc<dyn Send + Sync>> {
        self.pools.first().map(BufferPool::keepalive)
    }

    /// Whether the connection has large buffers at all.
    fn exists(&self) -> bool {
        !self.pools.is_empty()
    }

    /// Large buffers free now (after taking back those other threads sent back).
    fn available(&self) -> u32 {
        self.pools
            .iter()
            .map(|p| {
                p.reclaim();
                p.available()
            })
            .sum()
    }

    /// Large buffers registered so far.
    fn registered(&self) -> u32 {
        self.pools.iter().map(BufferPool::capacity).sum()
    }

    /// Takes a free large buffer (from a pool that has one: an allocation from an empty
    /// pool would count as its exhaustion).
    fn take(&self) -> Option<Buf<P>> {
        let big = self
            .pools
            .iter()
            .find(|p| p.available() > 0)
            .and_then(|p| p.alloc().ok());
        if big.is_some() {
            self.out.set(self.out.get() + 1);
        }
        big
    }

    /// Whether no large buffer is out of the pools: no slot, reply or ring entry holds one.
    #[inline]
    fn none_out(&self) -> bool {
        self.out.get() == 0
    }

    /// [`ServerConn::large_into_ring`] on the connection's reply `ring` (a borrow of the
    /// two fields alone, beside a verdict that borrows a receive buffer).
    #[inline]
    pub(super) fn enter_ring(&mut self, ring: &mut [Buf<P>], i: usize, r: usize) {
        if self.none_out() {
            return;
        }
        self.release(ring, r);
        if let Some(big) = self.reply[i].take() {
            self.ring_parked[r] = Some(core::mem::replace(&mut ring[r], big));
            self.hold(r);
        }
    }

    /// What ring entry `r` held goes back: its own buffer in place, large ones to the pool.
    fn release(&mut self, ring: &mut [Buf<P>], r: usize) {
        if let Some(own) = self.ring_parked[r].take() {
            let big = core::mem::replace(&mut ring[r], own);
            self.give_back(big);
        }
        if let Some(big) = self.ring_held[r].take() {
            self.give_back(big);
        }
    }

    fn give_back(&self, big: Buf<P>) {
        // Every buffer given back was taken (`take`); were the count ever wrong, it would
        // wrap to a huge value, which only turns the shortcut of `none_out` off.
        self.out.set(self.out.get().wrapping_sub(1));
        match self.pools.iter().find(|p| p.owns(&big)) {
            Some(pool) => pool.free(big),
            None => drop(big),
        }
    }

    /// Lists ring entry `r` among the holders (once).
    fn hold(&mut self, r: usize) {
        if !self.listed[r] {
            self.listed[r] = true;
            self.holders.push(r as u32);
        }
    }

    /// Large buffers out of the pools, as counted.
    #[cfg(test)]
    pub(super) fn out(&self) -> u32 {
        self.out.get()
    }

    /// Large buffers held anywhere (standing in, reserved for a Long reply, in a ring
    /// entry), counted one by one.
    #[cfg(test)]
    pub(super) fn held(&self) -> u32 {
        let n = self.parked.iter().flatten().flatten().count()
            + self.reply.iter().flatten().count()
            + self.ring_parked.iter().flatten().count()
            + self.ring_held.iter().flatten().count();
        n as u32
    }

    /// Whether a large buffer stands in for slot `i`'s own pull buffer now.
    pub(super) fn stands_in(&self, i: usize) -> bool {
        !self.none_out() && self.parked[i][0].is_some()
    }

    /// Whether ring entry `r` holds a large buffer now.
    #[inline]
    fn holds(&self, r: usize) -> bool {
        !self.none_out() && (self.ring_parked[r].is_some() || self.ring_held[r].is_some())
    }
}

/// The large buffers a Call needs: beyond what its slot's buffers (and the ring entry)
/// hold, within `bulk_size`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Needs {
    pull: bool,
    bulk: bool,
    reply: bool,
}

impl Needs {
    pub(super) fn count(self) -> u32 {
        u32::from(self.pull) + u32::from(self.bulk) + u32::from(self.reply)
    }
}

impl<P: Provider> ServerConn<P> {
    /// What the Call of slot `i` (header `h`, `pull_total` bytes to pull) needs beyond the
    /// buffers it has: a pull buffer (not for a stream beyond `bulk_size`, which is
    /// refused), a bulk buffer when its Write chunks (with 64 bytes of alignment each) are
    /// larger than the slot's, a buffer for a Long reply when its Reply chunk and the
    /// headers are larger than a ring entry; nothing without a large pool. A large buffer
    /// holds `bulk_size` bytes whatever the chunks ask.
    pub(super) fn large_needs(&self, i: usize, h: &HeaderView<'_>, pull_total: u64) -> Needs {
        let max = u64::from(self.config.bulk_size);
        let own = self.large.own as u64;
        Needs {
            // A stream larger than any buffer is refused (ERR_CHUNK) without one.
            pull: self.large.exists()
                && self.large.parked[i][0].is_none()
                && pull_total > own
                && pull_total <= max,
            ..self.lists_need_large(i, h.write_list(), h.reply_chunk())
        }
    }

    /// [`large_needs`](Self::large_needs) of a Call with nothing to pull, from its Write
    /// list and Reply chunk.
    pub(super) fn lists_need_large(
        &self,
        i: usize,
        wl: WriteList<'_>,
        rc: Option<Segments<'_>>,
    ) -> Needs {
        if !self.large.exists() {
            return Needs::default();
        }
        let writes: u64 = wl.iter().map(|c| c.total_len() + BULK_SLACK).sum();
        let reply = rc.map_or(0, |c| c.total_len());
        Needs {
            pull: false,
            // Write chunks larger than the slot's bulk buffer: results up to `bulk_size`.
            bulk: self.large.parked[i][1].is_none() && writes > self.large.own as u64,
            reply: self.large.reply[i].is_none()
                && reply > 0
                && reply + REPLY_SLACK > self.large.ring_own as u64,
        }
    }

    /// Takes every large buffer `needs` names for slot `i`, or none: false when they cannot
    /// all be had now (after taking back what retired replies held, and registering more
    /// up to `large_bufs`).
    pub(super) fn reserve_large(&mut self, i: usize, needs: Needs) -> bool {
        let k = needs.count();
        if k == 0 || !self.large.exists() {
            return true;
        }
        if self.large.available() < k {
            self.reclaim_large();
        }
        let free = self.large.available();
        if free < k {
            self.grow_large(k - free);
        }
        if self.large.available() < k {
            bump(&self.io.stats.large_bulk_waits, 1);
            return false;
        }
        let large = &self.large;
        let mut take = || large.take();
        let (pull, bulk, reply) = (
            needs.pull.then(&mut take).flatten(),
            needs.bulk.then(&mut take).flatten(),
            needs.reply.then(&mut take).flatten(),
        );
        if let Some(big) = pull {
            self.large.parked[i][0] = Some(core::mem::replace(&mut self.pull[i], big));
        }
        if let Some(big) = bulk {
            self.large.parked[i][1] = Some(core::mem::replace(&mut self.bulk[i], big));
        }
        if reply.is_some() {
            self.large.reply[i] = reply;
        }
        bump(&self.io.stats.large_bulk, 1);
        true
    }

    /// Before the Call of slot `i` is answered in ring entry `r` (whose last reply is
    /// retired): what the entry held goes back, and the slot's reserved Long-reply buffer,
    /// if any, stands in for the entry's own.
    pub(super) fn large_into_ring(&mut self, i: usize, r: usize) {
        self.large.enter_ring(&mut self.ring, i, r);
    }

    /// The Call of slot `i` deferred after all: its Long-reply buffer leaves ring entry `r`
    /// with it (the entry serves the next Call).
    pub(super) fn large_out_of_ring(&mut self, i: usize, r: usize) {
        if let Some(own) = self.large.ring_parked[r].take() {
            self.large.reply[i] = Some(core::mem::replace(&mut self.ring[r], own));
        }
    }

    /// The Call of slot `i` is answered: its own buffers are put back; the large pull
    /// buffer returns to the pool, the large bulk buffer stays with ring entry `r` until
    /// its reply is retired when the reply was sent from there (`sent`), else returns too.
    #[inline]
    pub(super) fn large_after_answer(&mut self, i: usize, r: usize, sent: bool) {
        if self.large.none_out() {
            // Nothing stood in, was reserved or is held (the entry's own buffer is in place).
            return;
        }
        if let Some(own) = self.large.parked[i][0].take() {
            let big = core::mem::replace(&mut self.pull[i], own);
            self.large.give_back(big);
        }
        if let Some(own) = self.large.parked[i][1].take() {
            let big = core::mem::replace(&mut self.bulk[i], own);
            if sent {
                if let Some(old) = self.large.ring_held[r].replace(big) {
                    self.large.give_back(old);
                }
                self.large.hold(r);
            } else {
                self.large.give_back(big);
            }
        }
        if let Some(big) = self.large.reply[i].take() {
            self.large.give_back(big);
        }
        if !sent {
            // Nothing leaves from the entry: its own buffer back at once.
            self.release_ring(r);
        }
    }

    /// Whether ring entry `r` holds a large buffer (its reply is then signaled, so that the
    /// buffer comes back as soon as the reply is sent rather than after the next signaled
    /// one).
    pub(super) fn ring_holds_large(&self, r: usize) -> bool {
        self.large.holds(r)
    }

    /// Whether the Call in `bytes` may need large buffers: it has a write list or a Reply
    /// chunk (a Call without Read chunks; three words of its header say).
    pub(super) fn may_need_large(&self, bytes: &[u8]) -> bool {
        // The three list discriminators, after version 2's flags and inv_handle in version 2.
        let at = 16 + self.io.wire.extra();
        self.large.exists()
            && !(bytes.len() >= at + 12 && bytes[at..at + 12].iter().all(|&b| b == 0))
    }

    /// Registers up to `n` more large buffers, within `large_bufs` (a failed registration
    /// leaves the Call to wait for one of those there are).
    fn grow_large(&mut self, n: u32) {
        for _ in 0..n {
            if self.large.registered() >= self.large.max {
                return;
            }
            match BufferPool::new(
                &self._pd,
                PoolConfig::new(self.large.size, 1, Access::LOCAL_WRITE),
            ) {
                Ok(pool) => {
                    self.loans.keep(pool.keepalive());
                    self.large.pools.push(pool);
                    bump(&self.io.stats.large_registered, 1);
                }
                Err(_) => return,
            }
        }
    }

    /// Ring entry `r`'s large buffers back to the pool, its own buffer in place.
    fn release_ring(&mut self, r: usize) {
        self.large.release(&mut self.ring, r);
    }

    /// Takes back the large buffers of ring entries whose replies are retired (not those
    /// with a reply still to post in this poll), and unlists the entries that hold none.
    pub(super) fn reclaim_large(&mut self) {
        let mut k = 0;
        while k < self.large.holders.len() {
            let r = self.large.holders[k] as usize;
            let pending = self.sends.iter().any(|s| s.ring as usize == r);
            if !self.large.holds(r) || (!pending && self.io.sq.is_retired(self.ring_seq[r])) {
                self.release_ring(r);
                self.large.listed[r] = false;
                self.large.holders.swap_remove(k);
            } else {
                k += 1;
            }
        }
    }

    /// Starts again the pulls that waited for large buffers, in arrival order, while they
    /// can have them.
    pub(super) fn retry_large_waits(&mut self) {
        for _ in 0..self.large.waiting.len() {
            let Some(idx) = self.large.waiting.pop_front() else {
                return;
            };
            let before = self.large.waiting.len();
            self.start_pull(idx);
            if self.large.waiting.len() > before {
                // It waits again (at the back): keep the order by putting it first.
                if let Some(back) = self.large.waiting.pop_back() {
                    self.large.waiting.push_front(back);
                }
                return;
            }
        }
    }
}
