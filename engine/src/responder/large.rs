//! Bulk buffers from the server's [`Share`]: a connection owns no bulk memory. At its
//! first Call it takes its reply ring and, per receive, a pull and a bulk buffer of the
//! share's reply class (an inline reply's size: enough for a Short Call's DDP-eligible
//! results, which go inline, and for small chunks); a Call whose chunks need more (a Read
//! chunk larger than its pull buffer, Write chunks larger than its bulk buffer, a Reply
//! chunk larger than a ring entry) takes shared bulk buffers of the smallest class that
//! holds them for its lifetime.
//!
//! A Call takes everything it needs at once, when its pull starts (or, without Read
//! chunks, when it is answered), or waits its turn without holding anything
//! ([`Share::reserve`]): so a Call holding shared buffers never waits for another, and every
//! holder finishes (a pulled Call is answered, a deferred one completed, a reply retires),
//! which rules out deadlock; waiting Calls are served in the order they began to wait,
//! whatever their connections.
//!
//! Where a shared buffer stands in:
//! - the pull and bulk buffers of the slot (its own ones parked beside, swapped back when
//!   the Call is answered);
//! - a Long reply: reserved for the slot, put into the ring entry the reply is built in at
//!   answer time (the entry's own buffer parked), taken back if the handler defers;
//! - after the answer, the bulk buffer (whose RDMA Writes leave before the reply's Send)
//!   and the Long reply's buffer belong to the ring entry until its Send is retired, as
//!   the entry's own buffer does. They go back to the share as soon as the poll that sees
//!   the reply's (signaled) completion ends ([`ServerConn::reclaim_large`]), so that other
//!   connections' Calls may have them.

use super::*;
use crate::pool::share::{Class, Share, Turn, Wait};
use rpcrdma_proto::header::{Segments, WriteList};
use std::cell::Cell;
use std::time::Instant;

/// How long a connection has had no Call before its reply ring and its own pull and bulk
/// buffers go back to the share ([`ServerConn::shed`]).
pub const SHED_AFTER: Duration = Duration::from_secs(2);

/// Bytes a ring entry needs beyond a reply's results: transport and RPC headers.
const REPLY_SLACK: u64 = 1024;
/// Bytes of padding a bulk result may take beyond its data (alignment, per result).
const BULK_SLACK: u64 = 64;

/// The shared buffers one connection holds beyond its own, and its place in the share.
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
    /// Slots whose Calls wait for shared buffers before pulling, in arrival order.
    pub(super) waiting: VecDeque<u32>,
    /// Per slot: its Call's place in the share's line while it waits.
    turns: Box<[Turn]>,
    /// Bytes of a ring entry's own buffer, and of a slot's own pull and bulk buffers (all
    /// of the share's reply class).
    own: usize,
    /// Bytes of the largest shared buffer.
    size: usize,
    /// Shared buffers out now (standing in, reserved or held by ring entries): while none
    /// is, the per-Call bookkeeping above has nothing to look at.
    out: Cell<u32>,
    /// When the connection's worker first found its Calls counted at this number: the
    /// start of its quiet spell, after which its own buffers go back ([`ServerConn::shed`]).
    quiet: Option<(Instant, u64)>,
    /// The share. Declared last: the buffers above go back to it before it may go.
    pub(super) share: Arc<Share<P>>,
}

impl<P: Provider> Large<P> {
    /// The shared buffers of a connection with `slots` receives and `ring` reply ring
    /// entries, none held yet.
    pub(super) fn new(share: Arc<Share<P>>, slots: usize, ring: usize) -> Large<P> {
        let config = *share.config();
        Large {
            parked: (0..slots).map(|_| [None, None]).collect(),
            reply: (0..slots).map(|_| None).collect(),
            ring_parked: (0..ring).map(|_| None).collect(),
            ring_held: (0..ring).map(|_| None).collect(),
            listed: vec![false; ring].into_boxed_slice(),
            holders: Vec::with_capacity(ring),
            waiting: VecDeque::with_capacity(slots),
            turns: vec![Turn::default(); slots].into_boxed_slice(),
            own: config.reply_size,
            size: config.large_size,
            out: Cell::new(0),
            quiet: None,
            share,
        }
    }

    /// Whether ring entries hold shared buffers that may go back once their replies retire.
    #[inline]
    pub(super) fn has_holders(&self) -> bool {
        !self.holders.is_empty()
    }

    /// Whether no large buffer is out of the pools: no slot, reply or ring entry holds one.
    #[inline]
    pub(super) fn none_out(&self) -> bool {
        self.out.get() == 0
    }

    /// [`ServerConn::large_into_ring`] on the connection's reply `ring` (a borrow of the
    /// two fields alone, beside a verdict that borrows a receive buffer).
    #[inline(always)]
    pub(super) fn enter_ring(&mut self, ring: &mut [Buf<P>], i: usize, r: usize) {
        if self.none_out() {
            return;
        }
        self.enter_ring_out(ring, i, r);
    }

    /// [`Large::enter_ring`] when large buffers are out.
    #[inline(never)]
    fn enter_ring_out(&mut self, ring: &mut [Buf<P>], i: usize, r: usize) {
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
        // Every buffer given back was taken (`reserve_large`); were the count ever wrong,
        // it would wrap to a huge value, which only turns the shortcut of `none_out` off.
        self.out.set(self.out.get().wrapping_sub(1));
        // Back on its chunk's free stack.
        drop(big);
    }

    /// Bytes of the largest shared buffer.
    pub(super) fn max_bulk(&self) -> usize {
        self.size
    }

    /// Bytes of the shared buffers held here now beside those in the connection's ring,
    /// pull and bulk vectors: own buffers parked while others stand in, Long-reply buffers
    /// reserved, bulk buffers held by ring entries.
    pub(super) fn held_bytes(&self) -> u64 {
        if self.none_out() {
            return 0;
        }
        self.parked
            .iter()
            .flatten()
            .chain(self.reply.iter())
            .chain(self.ring_parked.iter())
            .chain(self.ring_held.iter())
            .flatten()
            .map(|b| b.size() as u64)
            .sum()
    }

    /// Gives up every waiting Call's place in the share's line (the connection is going).
    pub(super) fn leave_line(&mut self) {
        for turn in self.turns.iter_mut() {
            self.share.leave(turn);
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
    #[inline(always)]
    fn holds(&self, r: usize) -> bool {
        !self.none_out() && (self.ring_parked[r].is_some() || self.ring_held[r].is_some())
    }
}

/// The shared buffers a Call needs beyond what its slot's buffers (and the ring entry)
/// hold: the bytes of each, 0 for none, at most the largest shared buffer's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Needs {
    pull: u64,
    bulk: u64,
    reply: u64,
}

impl Needs {
    pub(super) fn count(self) -> u32 {
        u32::from(self.pull > 0) + u32::from(self.bulk > 0) + u32::from(self.reply > 0)
    }
}

impl<P: Provider> ServerConn<P> {
    /// What the Call of slot `i` (header `h`, `pull_total` bytes to pull) needs beyond the
    /// buffers it has: a pull buffer (not for a stream beyond the largest shared buffer,
    /// which is refused), a bulk buffer when its Write chunks (with 64 bytes of alignment
    /// each) are larger than the slot's, a buffer for a Long reply when its Reply chunk and
    /// the headers are larger than a ring entry. Each of the smallest shared class that
    /// holds what the chunks ask, within the largest.
    pub(super) fn large_needs(
        &self,
        i: usize,
        h: &HeaderView<'_>,
        pull_total: u64,
        ddp: bool,
    ) -> Needs {
        let max = self.large.size as u64;
        // Room for the shift that aligns the stream (`RecvSlot::shift`, below 64).
        let want = pull_total + 64;
        Needs {
            // A stream larger than any buffer is refused (ERR_CHUNK) without one.
            pull: if self.large.parked[i][0].is_none()
                && want > self.large.own as u64
                && pull_total <= max
            {
                want.min(max)
            } else {
                0
            },
            ..self.lists_need_large(i, h.write_list(), h.reply_chunk(), ddp)
        }
    }

    /// [`large_needs`](Self::large_needs) of a Call with nothing to pull, from its Write
    /// list and Reply chunk.
    ///
    /// `ddp`: whether the procedure may have DDP-eligible results (unknown: true). Without a
    /// Write list they go through the Reply chunk when there is one, so the bulk buffer
    /// that holds them before they are placed must be as large as it.
    pub(super) fn lists_need_large(
        &self,
        i: usize,
        wl: WriteList<'_>,
        rc: Option<Segments<'_>>,
        ddp: bool,
    ) -> Needs {
        let max = self.large.size as u64;
        let own = self.large.own as u64;
        let reply = rc.map_or(0, |c| c.total_len());
        let mut writes: u64 = wl.iter().map(|c| c.total_len() + BULK_SLACK).sum();
        if writes == 0 && ddp {
            writes = reply + BULK_SLACK;
        }
        Needs {
            pull: 0,
            // Write chunks larger than the slot's bulk buffer: results up to the largest.
            bulk: if self.large.parked[i][1].is_none() && writes > own {
                writes.min(max)
            } else {
                0
            },
            reply: if self.large.reply[i].is_none() && reply > 0 && reply + REPLY_SLACK > own {
                (reply + REPLY_SLACK).min(max)
            } else {
                0
            },
        }
    }

    /// Takes every shared buffer `needs` names for slot `i`, or none: false when they
    /// cannot all be had now (after giving back what retired replies held), and the Call
    /// keeps its place in the share's line.
    pub(super) fn reserve_large(&mut self, i: usize, needs: Needs) -> bool {
        if needs.count() == 0 {
            return true;
        }
        self.reclaim_large();
        let sizes = [needs.reply, needs.pull, needs.bulk];
        let [reply, pull, bulk] = match self.large.share.reserve(sizes, &mut self.large.turns[i]) {
            Ok(got) => got,
            Err(Wait::Later | Wait::TooLarge) => {
                // (Never too large: every need is within the largest class.)
                bump(&self.io.stats.large_bulk_waits, 1);
                return false;
            }
        };
        let taken = [&reply, &pull, &bulk]
            .iter()
            .filter(|b| b.is_some())
            .count() as u32;
        self.large.out.set(self.large.out.get() + taken);
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

    /// Takes the connection's own buffers from the share at its first Call: the reply
    /// ring and a pull and a bulk buffer per receive slot, of the reply class — with the
    /// shared receive queue, for the slots its grant and spares use (slots are reused
    /// lowest first: `on_srq_recv`), more as a Call lands in a slot without them
    /// ([`dress_to`](Self::dress_to)). False when the share cannot register them (the
    /// connection is then lost).
    #[cold]
    pub(super) fn dress(&mut self) -> bool {
        let slots = if self.srq_reserved > 0 {
            self.srq_reserved as usize
        } else {
            self.slots.len()
        };
        if self.ring.is_empty() {
            self.ring.reserve_exact(self.ring_seq.len());
            if !self.grow_ring() {
                return false;
            }
            // Room for every slot's, so that dressing more slots later never allocates.
            self.pull.reserve_exact(self.slots.len());
            self.bulk.reserve_exact(self.slots.len());
        }
        self.dress_to(slots.min(self.slots.len()))
    }

    /// Takes reply ring entries from the share up to what the grant needs: on the shared
    /// receive queue, twice the grant (at least 8, at most the ring's length), so that a
    /// connection whose client keeps one or two Calls in flight holds 16 entries, not 64;
    /// otherwise the whole ring. Replies signal every half of the entries held, since an
    /// entry is used again only once a signaled completion has retired its last reply.
    /// False when the share has none to give (the ring keeps what it has).
    #[cold]
    pub(super) fn grow_ring(&mut self) -> bool {
        let full = self.ring_seq.len();
        let want = if self.srq_reserved > 0 {
            (2 * self.credits.grant() as usize).clamp(8, full)
        } else {
            full
        };
        while self.ring.len() < want {
            match self.large.share.take(Class::Reply) {
                Some(b) => self.ring.push(b),
                None => return false,
            }
        }
        self.io.sq.set_signal_every(self.ring.len() as u32 / 2);
        true
    }

    /// Gives the share back the buffers the connection took at its first Call (its reply
    /// ring, its slots' pull and bulk buffers) once it has had no Call for [`SHED_AFTER`]
    /// and has nothing in process: an idle connection then holds only its receives (its
    /// own and those it reserved in a shared receive queue), as it did when accepted. The
    /// next Call takes them again (as at its first), from buffers the share keeps
    /// registered. `now` is the caller's clock (a worker reads it once per housekeeping).
    /// Returns whether the buffers went back.
    ///
    /// A reply posted unsignaled is known sent only when a later signaled request
    /// completes: while one is outstanding the connection posts a signaled empty RDMA Write
    /// ([`settle`](Self::settle)) and gives its buffers back at a later call.
    pub fn shed(&mut self, now: Instant) -> bool {
        if self.ring.is_empty() {
            self.large.quiet = None;
            return false;
        }
        let calls = self.io.stats.calls.load(Ordering::Relaxed);
        match self.large.quiet {
            Some((since, seen)) if seen == calls => {
                if now.saturating_duration_since(since) < SHED_AFTER {
                    return false;
                }
            }
            _ => {
                self.large.quiet = Some((now, calls));
                return false;
            }
        }
        if !self.at_rest() {
            self.settle();
            return false;
        }
        self.ring.clear();
        // Every reply retired (at rest): the next ring starts afresh, whatever its length.
        self.ring_next = 0;
        self.pull.clear();
        self.bulk.clear();
        self.hot_pull = None;
        self.large.quiet = None;
        true
    }

    /// Whether nothing of the connection refers to its ring or its slots' buffers: no Call
    /// in process or waiting, no request outstanding, no large buffer standing in, no loan
    /// out.
    fn at_rest(&self) -> bool {
        !self.io.dead
            && self.in_process == 0
            && self.io.sq.outstanding() == 0
            && self.reads_in_flight == 0
            && self.ready.is_empty()
            && self.read_wait.is_empty()
            && self.reposts.is_empty()
            && self.sends.is_empty()
            && self.large.waiting.is_empty()
            && !self.large.has_holders()
            && self.large.none_out()
            && (0..self.slots.len()).all(|k| self.loans.outstanding(k as u32) == 0)
    }

    /// Gives slots `0..n` their own pull and bulk buffers from the share.
    #[cold]
    pub(super) fn dress_to(&mut self, n: usize) -> bool {
        while self.pull.len() < n {
            let share = &self.large.share;
            match (share.take(Class::Reply), share.take(Class::Reply)) {
                (Some(p), Some(b)) => {
                    self.pull.push(p);
                    self.bulk.push(b);
                }
                _ => return false,
            }
        }
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
    #[inline(always)]
    pub(super) fn large_after_answer(&mut self, i: usize, r: usize, sent: bool) {
        if self.large.none_out() {
            // Nothing stood in, was reserved or is held (the entry's own buffer is in place).
            return;
        }
        self.large_out_after_answer(i, r, sent);
    }

    /// [`large_after_answer`](Self::large_after_answer) with large buffers out.
    #[inline(never)]
    fn large_out_after_answer(&mut self, i: usize, r: usize, sent: bool) {
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
    #[inline(always)]
    pub(super) fn ring_holds_large(&self, r: usize) -> bool {
        self.large.holds(r)
    }

    /// Whether the procedure the Call `h` (without Read chunks: its RPC header is inline)
    /// names has DDP-eligible results; true when the header does not say (the answer will
    /// refuse it anyway).
    pub(super) fn may_have_ddp_results(&self, h: &HeaderView<'_>) -> bool {
        match rpcrdma_proto::rpc::CallHeader::parse(h.payload()) {
            Ok((c, _)) => match self.dispatch.lookup(c.prog, c.vers, c.proc_num) {
                Lookup::Found(e) => e.spec.ddp_results > 0,
                _ => false,
            },
            Err(_) => true,
        }
    }

    /// Whether the Call in `bytes` may need large buffers: it has a write list or a Reply
    /// chunk (a Call without Read chunks; three words of its header say).
    pub(super) fn may_need_large(&self, bytes: &[u8]) -> bool {
        // The three list discriminators, after version 2's flags and inv_handle in version 2.
        let at = 16 + self.io.wire.extra();
        !(bytes.len() >= at + 12 && bytes[at..at + 12].iter().all(|&b| b == 0))
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
