//! Shared receive queues on the soft provider: a receive ring in a memfd of its own, with the
//! layout and code of a queue pair's receive ring (`rq`), from which the peers of every queue
//! pair made with it claim.
//!
//! ```text
//! 0       SrqInfo  (read-mostly: magic, identifier, geometry)
//! 0x200   Head     (consumers' claim counter, and the armed limit on the same line)
//! 0x300   Tail     (the producer's position: receives posted so far)
//! 0x380   Event    (the limit was reached: set by a consumer, cleared by the owner)
//! 4096    receive ring: `size` slots, as a queue pair's
//! ```
//!
//! # Posting
//!
//! [`SoftSrq::post_recv_list`] takes `&self`: any thread of the owner's process may post.
//! Posters are serialized by a flag in the [`SoftSrq`] (not in shared memory: only the owner
//! posts), taken with one compare-and-swap when free. A poster that finds it taken spins
//! (`spin_loop`) for up to [`SPINS`] tries, then yields the processor between tries
//! (`sched_yield`, which never blocks), so that a holder descheduled in its critical section
//! gets to finish it. The critical section is one list's writes into the ring: no system
//! call, no allocation, no wait. The uncontended post is the flag's one locked instruction
//! and the ring writes.
//!
//! # Slot reuse
//!
//! A queue pair's own ring returns a slot to its owner through depth accounting: the owner
//! reuses a slot once it has polled as many receive completions, which works because one
//! consumer claims from the ring and pushes the completions into one queue in claim order.
//! A shared ring has many consumers (the peers of different queue pairs) whose completions
//! land on different queues, polled at different times; a polled count says nothing about
//! which slots are done with. So each slot hands itself back: the slot's sequence word is
//! `pos` while it is free for receive `pos`, `pos + 1` once that receive is posted, and the
//! consumer of receive `pos` stores `pos + size` (release) after its last read of the slot
//! (the message is placed, the completion built) and before it publishes the completion:
//! free for the receive one lap later. The producer writes receive `pos` only after reading
//! `pos` there (acquire), so it never overwrites a receive still being read, and a receive
//! whose completion has been polled has its slot free. Slots are reused in ring order,
//! though, and receives of different queue pairs complete out of it: a post whose slot still
//! holds a receive being consumed (claimed, its Send's copy under way) is refused with
//! [`PostError::QueueFull`], never waited for, even if fewer than `depth` receives are
//! outstanding; the poster retries. This is Vyukov's bounded queue with a single producer;
//! its sequence words need at least two slots, so a queue has at least two. The consumer's
//! store costs one write to the slot's line, which the producer takes back when it reuses the
//! slot: a receive's line travels producer, consumer, producer, where a queue pair's travels
//! once.
//!
//! # Limit
//!
//! [`SoftSrq::arm_limit`] stores the limit on the claim counter's line, so that a claim reads
//! it without fetching another line. A consumer that finds it armed after its claim computes
//! how many receives remain posted (the producer's position, which it publishes before each
//! receive, less the claim counter); fewer than the limit, it disarms the limit with a
//! compare-and-swap (so one claim fires it) and sets the event word, which
//! [`SoftSrq::take_limit_event`] reads and clears.
//!
//! # Peers
//!
//! A queue pair made with a shared receive queue records the queue's identifier in its shared
//! header (`QpInfo::srq_id`) and passes the queue's memfd with its own in the connection
//! handshake; the peer maps it once per connection, checks its geometry and identifier, and
//! claims from it instead of the queue pair's own ring, which is never posted to.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::rq::{Claimed, Ring};
use super::sys::{Atomics, Mapping};
use super::MAX_SGE;
use crate::fabric::{BadWr, FabricError, PostError, RecvWr, Sge, SharedReceiveQueue};

/// Largest shared receive queue (`DeviceAttr::max_srq_wr`).
pub(crate) const MAX_SRQ_WR: u32 = 1 << 16;

/// Tries a contended poster spins before it starts yielding between tries.
const SPINS: u32 = 1 << 10;

const MAGIC: u64 = 0x7270_6364_7372_7131; // "rpcdsrq1"
/// A word on a line of its own (the producer's position, the limit event).
#[repr(C, align(64))]
struct Counter {
    v: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for Counter {}

/// The producer's position, on a line of its own in the ring's first page.
const TAIL_OFF: usize = 0x300;
/// The limit event's word, on a line of its own.
const EVENT_OFF: usize = 0x380;

#[repr(C, align(64))]
struct SrqInfo {
    magic: AtomicU64,
    /// The identifier queue pairs made with the queue record in their header.
    id: AtomicU64,
    ring_size: AtomicU32,
    max_sge: AtomicU32,
    stride: AtomicU32,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for SrqInfo {}

/// A view of a shared receive queue's memory, the owner's or a peer's.
#[derive(Clone)]
pub(crate) struct SrqMem {
    ring: Ring,
    id: u64,
}

impl SrqMem {
    /// New shared memory for a queue of `size` slots (a power of two, at least 2).
    fn create(id: u64, size: u64, max_sge: u32) -> Result<SrqMem, FabricError> {
        let ring = Ring::create("rpcrdma-soft-srq", size, max_sge, true)?;
        let mem = SrqMem { ring, id };
        let info = mem.info();
        info.id.store(id, Ordering::Relaxed);
        info.ring_size.store(size as u32, Ordering::Relaxed);
        info.max_sge.store(max_sge, Ordering::Relaxed);
        info.stride.store(mem.ring.stride(), Ordering::Relaxed);
        info.magic.store(MAGIC, Ordering::Release);
        Ok(mem)
    }

    /// A view of a peer's shared receive queue, the one with identifier `id` (which the
    /// peer's queue pair named), after checking its geometry.
    pub(crate) fn open(map: Arc<Mapping>, id: u64) -> Result<SrqMem, FabricError> {
        let info: &SrqInfo = map.try_at(0).ok_or(FabricError::InvalidArgument(
            "peer shared receive queue is smaller than its header",
        ))?;
        if info.magic.load(Ordering::Acquire) != MAGIC {
            return Err(FabricError::InvalidArgument(
                "peer shared receive queue has a bad magic number",
            ));
        }
        if id == 0 || info.id.load(Ordering::Relaxed) != id {
            return Err(FabricError::InvalidArgument(
                "peer shared receive queue is not the queue pair's",
            ));
        }
        let size = u64::from(info.ring_size.load(Ordering::Relaxed));
        if size < 2 || size > u64::from(MAX_SRQ_WR) {
            return Err(FabricError::InvalidArgument(
                "peer shared receive queue geometry",
            ));
        }
        let max_sge = info.max_sge.load(Ordering::Relaxed);
        let stride = info.stride.load(Ordering::Relaxed);
        let ring = Ring::open(map, size, max_sge, stride, true)?;
        Ok(SrqMem { ring, id })
    }

    /// The queue's identifier.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The mapping, to pass to a peer.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        self.ring.mapping()
    }

    fn info(&self) -> &SrqInfo {
        // SAFETY: the header lies at the start of the first page, before the ring, which
        // `Ring::create`/`Ring::open` checked fits in the mapping; 64-byte aligned.
        unsafe { self.ring.at_unchecked(0) }
    }

    /// The producer's position.
    fn tail(&self) -> &Counter {
        // SAFETY: as for `info`: `TAIL_OFF` is 64-byte aligned, inside the first page, apart
        // from the header and the head line.
        unsafe { self.ring.at_unchecked(TAIL_OFF) }
    }

    /// The limit event.
    fn event(&self) -> &Counter {
        // SAFETY: as for `info`: `EVENT_OFF` is 64-byte aligned, inside the first page, apart
        // from the header, head and tail lines.
        unsafe { self.ring.at_unchecked(EVENT_OFF) }
    }

    /// Claims the oldest posted receive, if any (one locked instruction), and fires the
    /// limit if the claim left fewer receives posted than it says. Dropping the claim hands
    /// the slot back (see [`Claimed`]): the caller drops it after its last read of the
    /// receive, before it publishes the receive's completion.
    #[inline]
    pub(crate) fn claim(&self) -> Option<Claimed<'_>> {
        let c = self.ring.consume()?;
        // The line the claim just took: no extra fetch while no limit is armed.
        let limit = self.ring.head().limit.load(Ordering::Relaxed);
        if limit != 0 {
            self.check_limit(c.index(), limit);
        }
        Some(c)
    }

    /// After the claim of receive `pos` with `limit` armed: fewer receives left posted than
    /// the limit disarms it (one claim wins) and sets the event.
    #[cold]
    fn check_limit(&self, pos: u64, limit: u64) {
        // The producer publishes its position before each receive, so it is at least
        // `pos + 1` here; a peer's nonsense cannot make this wrap.
        let tail = self.tail().v.load(Ordering::Acquire);
        let head = self.ring.head().pos.load(Ordering::Relaxed).max(pos + 1);
        let left = tail.saturating_sub(head);
        if left < limit
            && self
                .ring
                .head()
                .limit
                .compare_exchange(limit, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.event().v.store(1, Ordering::Release);
        }
    }

    /// Starts fetching the cache line of the receive a consumer will claim next.
    #[inline]
    pub(crate) fn prefetch_head(&self) {
        self.ring.prefetch_head();
    }

    /// Writes receive `pos` (the producer's running count) if its slot has been handed
    /// back, publishing the producer's position first. Producer only (under the posting
    /// flag).
    #[inline]
    fn produce(&self, pos: u64, wr_id: u64, sges: &[Sge]) -> Result<(), PostError> {
        if sges.len() > self.ring.max_sge() as usize {
            return Err(PostError::TooManySge {
                given: sges.len(),
                max: self.ring.max_sge(),
            });
        }
        if !self.ring.is_free(pos) {
            return Err(PostError::QueueFull);
        }
        // Ordered before the receive's publication (a release store in `produce`): a
        // consumer that claims it sees a position past it.
        self.tail().v.store(pos + 1, Ordering::Relaxed);
        self.ring.produce(pos, wr_id, sges);
        Ok(())
    }
}

/// A soft shared receive queue: a ring of receives in its own shared memory, posted by the
/// owner from any thread and claimed by the peers of the queue pairs made with it (see the
/// module docs of `fabric::soft`).
pub struct SoftSrq {
    mem: SrqMem,
    /// The protection domain it was made in: only its queue pairs may use it.
    domain_id: u64,
    /// Position of the next receive to post; touched only under `posting`.
    next: AtomicU64,
    /// Held by the thread posting a list.
    posting: AtomicBool,
}

impl std::fmt::Debug for SoftSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftSrq")
            .field("id", &format_args!("{:#x}", self.mem.id()))
            .field("depth", &self.depth())
            .field("max_sge", &self.mem.ring.max_sge())
            .finish_non_exhaustive()
    }
}

/// The posting flag, held: released on drop.
struct Posting<'a>(&'a AtomicBool);

impl Drop for Posting<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl SoftSrq {
    /// A queue of at least `max_wr` receives (the next power of two, at least 2) of at most
    /// `max_sge` elements, for the queue pairs of the domain `domain_id`.
    pub(crate) fn create(
        domain_id: u64,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SoftSrq, FabricError> {
        if max_wr == 0 || max_wr > MAX_SRQ_WR {
            return Err(FabricError::InvalidArgument("shared receive queue depth"));
        }
        if max_sge as usize > MAX_SGE {
            return Err(FabricError::InvalidArgument("scatter-gather elements"));
        }
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = u64::from(std::process::id()) << 32 | NEXT.fetch_add(1, Ordering::Relaxed);
        let size = u64::from(max_wr).next_power_of_two().max(2);
        Ok(SoftSrq {
            mem: SrqMem::create(id, size, max_sge)?,
            domain_id,
            next: AtomicU64::new(0),
            posting: AtomicBool::new(false),
        })
    }

    /// The memory, for queue pairs made with the queue and their peers.
    pub(crate) fn mem(&self) -> &SrqMem {
        &self.mem
    }

    /// The protection domain the queue was made in.
    pub(crate) fn domain_id(&self) -> u64 {
        self.domain_id
    }

    /// Takes the posting flag (see the module docs): one compare-and-swap when free, then
    /// a bounded spin, then yields between tries.
    #[inline]
    fn hold(&self) -> Posting<'_> {
        let mut tries = 0u32;
        loop {
            if self
                .posting
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Posting(&self.posting);
            }
            while self.posting.load(Ordering::Relaxed) {
                if tries < SPINS {
                    tries += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl SharedReceiveQueue for SoftSrq {
    fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> Result<(), BadWr> {
        let _held = self.hold();
        let mut pos = self.next.load(Ordering::Relaxed);
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = self.mem.produce(pos, wr.wr_id, wr.sges) {
                result = Err(BadWr { index, error });
                break;
            }
            pos += 1;
        }
        self.next.store(pos, Ordering::Relaxed);
        result
    }

    fn depth(&self) -> u32 {
        self.mem.ring.size() as u32
    }

    fn arm_limit(&self, limit: u32) -> Result<(), FabricError> {
        if limit > self.depth() {
            return Err(FabricError::InvalidArgument(
                "limit beyond the shared receive queue's depth",
            ));
        }
        self.mem
            .ring
            .head()
            .limit
            .store(u64::from(limit), Ordering::Release);
        Ok(())
    }

    fn take_limit_event(&self) -> bool {
        self.mem.event().v.swap(0, Ordering::AcqRel) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(wr_id: u64) -> RecvWr<'static> {
        RecvWr::new(wr_id, &[])
    }

    #[test]
    fn slots_are_reused_only_when_handed_back() {
        let srq = SoftSrq::create(1, 3, 1).unwrap();
        assert_eq!(srq.depth(), 4);
        for i in 0..4 {
            srq.post_recv(&recv(i)).unwrap();
        }
        assert_eq!(srq.post_recv(&recv(4)), Err(PostError::QueueFull));
        // Claimed but not handed back: still refused.
        let c = srq.mem.claim().unwrap();
        assert_eq!(c.wr_id(), 0);
        assert_eq!(srq.post_recv(&recv(4)), Err(PostError::QueueFull));
        drop(c);
        srq.post_recv(&recv(4)).unwrap();
        // Claims come in posting order, across the wrap.
        for want in 1..5 {
            assert_eq!(srq.mem.claim().unwrap().wr_id(), want);
        }
        assert!(srq.mem.claim().is_none());
        // A list stops at the first refusal, the ones before it posted.
        let big = [Sge::new(0, 1, 1), Sge::new(0, 1, 1)];
        let wrs = [recv(5), RecvWr::new(6, &big), recv(7)];
        assert_eq!(
            srq.post_recv_list(&wrs),
            Err(BadWr {
                index: 1,
                error: PostError::TooManySge { given: 2, max: 1 }
            })
        );
        assert_eq!(srq.mem.claim().unwrap().wr_id(), 5);
        assert!(srq.mem.claim().is_none());
    }

    #[test]
    fn limit_fires_once_below_it() {
        let srq = SoftSrq::create(1, 8, 0).unwrap();
        for i in 0..6 {
            srq.post_recv(&recv(i)).unwrap();
        }
        assert!(srq.arm_limit(9).is_err());
        srq.arm_limit(3).unwrap();
        for _ in 0..3 {
            srq.mem.claim().unwrap();
            assert!(!srq.take_limit_event(), "3 or more left");
        }
        srq.mem.claim().unwrap();
        assert!(srq.take_limit_event(), "2 left");
        assert!(!srq.take_limit_event(), "reading clears");
        srq.mem.claim().unwrap();
        assert!(!srq.take_limit_event(), "fired once");
        srq.arm_limit(3).unwrap();
        srq.mem.claim().unwrap();
        assert!(srq.take_limit_event(), "armed again");
    }

    #[test]
    fn sizes_and_peer_views() {
        assert!(SoftSrq::create(1, 0, 1).is_err());
        assert!(SoftSrq::create(1, MAX_SRQ_WR + 1, 1).is_err());
        assert!(SoftSrq::create(1, 4, MAX_SGE as u32 + 1).is_err());
        assert_eq!(SoftSrq::create(1, 1, 1).unwrap().depth(), 2);
        let srq = SoftSrq::create(1, MAX_SRQ_WR, MAX_SGE as u32).unwrap();
        assert_eq!(srq.depth(), MAX_SRQ_WR);
        let map = srq.mem.mapping().clone();
        let id = srq.mem.id();
        assert!(SrqMem::open(map.clone(), id + 1).is_err());
        assert!(SrqMem::open(map.clone(), 0).is_err());
        let peer = SrqMem::open(map, id).unwrap();
        srq.post_recv(&RecvWr::new(9, &[Sge::new(1, 2, 3)]))
            .unwrap();
        let c = peer.claim().unwrap();
        assert_eq!(
            (c.wr_id(), c.num_sge(), c.sge(0)),
            (9, 1, Sge::new(1, 2, 3))
        );
    }

    #[test]
    fn concurrent_posters_and_claimers() {
        let srq = Arc::new(SoftSrq::create(1, 64, 0).unwrap());
        let total = 4 * 2000u64;
        let got = std::thread::scope(|s| {
            for t in 0..4u64 {
                let srq = &srq;
                s.spawn(move || {
                    let mut i = 0;
                    while i < 2000 {
                        match srq.post_recv(&recv(t << 32 | i)) {
                            Ok(()) => i += 1,
                            Err(PostError::QueueFull) => std::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
            let claimers: Vec<_> = (0..2)
                .map(|_| {
                    let srq = &srq;
                    s.spawn(move || {
                        let mut got = Vec::new();
                        let deadline =
                            std::time::Instant::now() + std::time::Duration::from_secs(20);
                        while std::time::Instant::now() < deadline {
                            match srq.mem.claim() {
                                Some(c) => got.push(c.wr_id()),
                                None if got.len() as u64 >= total => break,
                                None => std::thread::yield_now(),
                            }
                            if srq.mem.ring.head().pos.load(Ordering::Relaxed) >= total {
                                break;
                            }
                        }
                        got
                    })
                })
                .collect();
            let mut all = Vec::new();
            for h in claimers {
                let got = h.join().unwrap();
                // One claimer takes each poster's receives in their posting order.
                for t in 0..4u64 {
                    let mine: Vec<_> = got.iter().filter(|&&w| w >> 32 == t).collect();
                    assert!(mine.windows(2).all(|w| w[0] < w[1]), "poster {t}");
                }
                all.extend(got);
            }
            all
        });
        assert_eq!(got.len() as u64, total);
        // None claimed twice.
        let mut all = got.clone();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len() as u64, total);
    }
}
