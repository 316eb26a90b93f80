//! Completion queues: a bounded lock-free multi-producer ring in a memfd-backed shared
//! mapping, with one consumer.
//!
//! ```text
//! 0x400   CqInfo       (read-only after creation: geometry)
//! 0x480   Tail         (producers' claim counter)
//! 0x500   Head         (consumer's position, read by producers only when they seem full;
//!                       the overrun flag; the first queue pair's Retired counters)
//! 0x540   Retired[n-1] (per further queue pair, at the same place of a line of its own:
//!                       work requests retired by polling)
//! ...     Cqe[size]    (64 bytes each; `seq` = position + 1 once published)
//! ```
//!
//! What a productive poll writes and reads besides the entries is the consumer's own line,
//! the head: with many connections, each with a queue of its own polled a few times a
//! second, every further line a poll touches is a cache miss (the flag and the first queue
//! pair's counters had lines of their own, two misses per poll).
//!
//! Producers are the queue pairs of this process (their send completions and flushes) and
//! the peers connected to them (receive completions of Sends they execute), possibly in other
//! processes, so the ring lives in shared memory. A producer claims a position by advancing
//! the tail, writes the entry and publishes it by storing `seq`; the consumer reads entries in
//! order and publishes its position. The consumer never writes an entry's line, so the line
//! travels once per completion, producer to consumer. A full ring is an overrun: the
//! completion is lost, the flag is set and the producer puts the queue pair in the error
//! state, as a device does on a CQ overflow. Polling credits the queue pair's counters, which
//! is what frees queue slots (see the module docs of `fabric`).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::sys::{bell_drain, bell_pair, bell_ring, monotonic_ns, Atomics, MapRef, Mapping};
use crate::fabric::{CompletionQueue, CqError, CqWatch, FabricError, Wc, WcOpcode, WcStatus};

// "rpcdcqr2": version 2 put the overrun flag and the first queue pair's counters on the head
// line.
const MAGIC: u64 = 0x7270_6364_6371_7232;
// Offsets within the first page chosen apart from other structures' (see `arena::TABLE_OFF`).
const INFO_OFF: usize = 0x400;
const TAIL_OFF: usize = 0x480;
const HEAD_OFF: usize = 0x500;

const F_IMM: u32 = 1;
const F_INV: u32 = 2;
/// A slot claimed for a batch and not needed: `poll` passes over it.
const F_SKIP: u32 = 4;

#[repr(C, align(64))]
struct CqInfo {
    magic: AtomicU64,
    size: AtomicU64,
    slots: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for CqInfo {}

/// A position counter on its own cache line (the tail, the head). The tail's line also
/// holds the consumer's request to be woken (`armed`), which producers read right after
/// their claim has brought the line to them: asking costs the hot path no extra line.
#[repr(C, align(64))]
struct Tail {
    pos: AtomicU64,
    /// Tail only: non-zero while the consumer waits for a notification (see `arm`).
    armed: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for Tail {}

/// A queue pair's counters in the queue: its generation (the slot is reused by later queue
/// pairs) and the send and receive work requests polling has retired. Slot 0's lie in the
/// [`Head`] line, the others' each on a line of their own.
#[repr(C)]
struct Retired {
    gen: AtomicU32,
    _pad: AtomicU32,
    sq_retired: AtomicU64,
    rq_retired: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for Retired {}

/// The consumer's line: its position, the overrun flag (set by a producer that found the
/// ring full, read by the consumer at each productive poll) and the counters of the first
/// queue pair (slot 0), which the consumer credits at each completion.
#[repr(C, align(64))]
struct Head {
    pos: AtomicU64,
    overrun: AtomicU32,
    _pad: AtomicU32,
    first: Retired,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for Head {}

/// Where the counters of slot `slot` lie: slot 0's in the head line, the others' at the
/// same place of the lines that follow it, one each (one formula, no branch: it is on
/// every completion's path).
const fn counters_off(slot: u32) -> usize {
    HEAD_OFF + core::mem::offset_of!(Head, first) + slot as usize * 64
}

#[repr(C, align(64))]
struct Cqe {
    seq: AtomicU64,
    wr_id: AtomicU64,
    not_before_ns: AtomicU64,
    byte_len: AtomicU32,
    qp_num: AtomicU32,
    /// status | opcode << 8 | flags << 16
    meta: AtomicU32,
    ex: AtomicU32,
    slot: AtomicU32,
    slot_gen: AtomicU32,
    retire: AtomicU32,
    delay_polls: AtomicU32,
    /// Receives: where the message landed, in the consumer's address space (a prefetch hint;
    /// never dereferenced).
    data: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for Cqe {}

// Entries are 64 bytes apart: `SoftCq::entry` steps through them as an array.
const _: () = assert!(std::mem::size_of::<Cqe>() == 64);

/// A queue pair's counters in its completion queue, reached through a pointer its queue pair
/// copied once ([`CqRing::counters_ref`]) instead of through the queue's `Arc` and geometry
/// at every post: with many connections those were lines of their own, missed at each
/// post (the `retired` counts are what tells a post how many slots are free).
///
/// Valid while the mapping it points into is: its holder keeps the queue's `CqLocal`.
#[derive(Clone, Copy)]
pub(crate) struct CountersRef(NonNull<Retired>);

// SAFETY: a pointer to atomics in a shared mapping; any thread may read them, and the
// holder keeps the mapping alive (see the type's documentation).
unsafe impl Send for CountersRef {}
// SAFETY: as for `Send`; only atomic loads are made through `&CountersRef`.
unsafe impl Sync for CountersRef {}

impl CountersRef {
    /// Send work requests retired so far.
    #[inline(always)]
    pub(crate) fn sq_retired(&self) -> u64 {
        // SAFETY: the mapping is alive (the holder's contract); the counters are atomics.
        unsafe { self.0.as_ref() }
            .sq_retired
            .load(Ordering::Acquire)
    }

    /// Receives retired so far.
    #[inline(always)]
    pub(crate) fn rq_retired(&self) -> u64 {
        // SAFETY: as for `sq_retired`.
        unsafe { self.0.as_ref() }
            .rq_retired
            .load(Ordering::Acquire)
    }
}

/// A counter slot taken for a queue pair ([`CqLocal::alloc_slot`]).
#[derive(Clone, Copy)]
pub(crate) struct SlotGrant {
    /// The slot's index, which its completions name.
    pub slot: u32,
    /// Its generation (completions of an earlier owner name another).
    pub gen: u32,
    /// The send and receive work requests retired so far: the queue pair counts from there.
    pub sq: u64,
    pub rq: u64,
    /// The counters themselves, for the queue pair to keep.
    pub counters: CountersRef,
}

/// A completion to push.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cqe0 {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    pub imm: Option<u32>,
    pub inv: Option<u32>,
    pub qp_num: u32,
    /// The queue pair's counter slot in this queue, and its generation.
    pub slot: u32,
    pub slot_gen: u32,
    /// Send queue slots this completion retires (receive completions retire one receive).
    pub retire: u32,
    /// Completion-delay fault: invisible for this many polls, or until this time.
    pub delay_polls: u32,
    pub not_before_ns: u64,
    /// Receives: the address of the first byte written (0: none), so that polling can start
    /// moving the message's cache lines while the completion is being handed out.
    pub data: u64,
}

/// The ring overflowed; the completion was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overrun;

/// A view of a completion queue's shared memory, the owner's or a peer's.
pub(crate) struct CqRing {
    map: MapRef,
    mask: u64,
    size: u64,
    slots: u32,
    ring_off: usize,
    /// This producer's last reading of the consumer's position.
    head_seen: AtomicU64,
    /// The producers' end of the consumer's bell, rung when a completion arrives while the
    /// consumer is armed (the owner's, or the descriptor a peer sent with the mapping).
    bell: Arc<OwnedFd>,
}

impl Clone for CqRing {
    fn clone(&self) -> Self {
        CqRing {
            map: self.map.clone(),
            mask: self.mask,
            size: self.size,
            slots: self.slots,
            ring_off: self.ring_off,
            head_seen: AtomicU64::new(self.head_seen.load(Ordering::Relaxed)),
            bell: self.bell.clone(),
        }
    }
}

impl CqRing {
    fn layout(slots: u32) -> usize {
        HEAD_OFF + slots.max(1) as usize * 64
    }

    fn create(size: u64, slots: u32, bell_tx: OwnedFd) -> Result<CqRing, FabricError> {
        let ring_off = Self::layout(slots);
        let bytes = ring_off + size as usize * 64;
        let map = Arc::new(Mapping::create("rpcrdma-soft-cq", bytes)?);
        map.populate();
        // A fresh memfd is zero: every `seq` is 0, which no position's publication (pos + 1)
        // matches.
        let ring = CqRing {
            map: MapRef::new(map),
            mask: size - 1,
            size,
            slots,
            ring_off,
            head_seen: AtomicU64::new(0),
            bell: Arc::new(bell_tx),
        };
        let info = ring.info();
        info.size.store(size, Ordering::Relaxed);
        info.slots.store(u64::from(slots), Ordering::Relaxed);
        info.magic.store(MAGIC, Ordering::Release);
        Ok(ring)
    }

    /// A view of a peer's completion queue, after checking its geometry; `bell` is the
    /// producers' end of its consumer's bell (not trusted: ringing anything else fails).
    pub(crate) fn open(map: Arc<Mapping>, bell: OwnedFd) -> Result<CqRing, FabricError> {
        let info: &CqInfo = map.try_at(INFO_OFF).ok_or(FabricError::InvalidArgument(
            "peer completion queue is smaller than its header",
        ))?;
        if info.magic.load(Ordering::Acquire) != MAGIC {
            return Err(FabricError::InvalidArgument(
                "peer completion queue has a bad magic number",
            ));
        }
        let size = info.size.load(Ordering::Relaxed);
        let slots = info.slots.load(Ordering::Relaxed);
        if !size.is_power_of_two() || size > 1 << 24 || slots > 1 << 16 {
            return Err(FabricError::InvalidArgument(
                "peer completion queue geometry",
            ));
        }
        let ring_off = Self::layout(slots as u32);
        if ring_off as u64 + size * 64 > map.len() as u64 {
            return Err(FabricError::InvalidArgument(
                "peer completion queue does not fit",
            ));
        }
        Ok(CqRing {
            map: MapRef::new(map),
            mask: size - 1,
            size,
            slots: slots as u32,
            ring_off,
            head_seen: AtomicU64::new(0),
            bell: Arc::new(bell),
        })
    }

    /// The mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        self.map.mapping()
    }

    /// The producers' end of the consumer's bell, for a peer in another process.
    pub(crate) fn bell_fd(&self) -> std::os::fd::RawFd {
        self.bell.as_raw_fd()
    }

    /// Wakes the consumer if it asked to be woken: called after every publication.
    ///
    /// Why no wake-up is lost: a producer's claim (a sequentially consistent
    /// read-modify-write of the tail) comes before its load of `armed`; the consumer stores
    /// `armed` before it loads the tail (both sequentially consistent). Either the consumer's
    /// store comes first in their single total order, and this load sees it, or this load
    /// comes first, and then so does the claim: the consumer sees the tail past its head and
    /// does not wait.
    #[inline]
    fn notify(&self) {
        let t = self.tail();
        if t.armed.load(Ordering::SeqCst) != 0 && t.armed.swap(0, Ordering::SeqCst) != 0 {
            bell_ring(&self.bell);
        }
    }

    #[inline]
    fn info(&self) -> &CqInfo {
        // SAFETY: the header lies before the ring, which `create`/`open` checked fits.
        unsafe { self.map.at_unchecked(INFO_OFF) }
    }

    /// The producers' claim counter.
    #[inline]
    fn tail(&self) -> &Tail {
        // SAFETY: as for `info`.
        unsafe { self.map.at_unchecked(TAIL_OFF) }
    }

    /// The consumer's line.
    #[inline]
    fn head(&self) -> &Head {
        // SAFETY: as for `info`.
        unsafe { self.map.at_unchecked(HEAD_OFF) }
    }

    #[inline]
    fn cqe(&self, pos: u64) -> &Cqe {
        // SAFETY: `pos & mask < size`, and `ring_off + size * 64` was checked against the
        // mapping's length by `create`/`open`; entries are 64-byte aligned.
        unsafe {
            self.map
                .at_unchecked(self.ring_off + ((pos & self.mask) as usize) * 64)
        }
    }

    #[inline]
    fn counters(&self, slot: u32) -> Option<&Retired> {
        if slot < self.slots {
            // SAFETY: `slot < slots`: the counters lie in the head line or end at
            // `ring_off`, inside the mapping (`counters_off` is 8-byte aligned).
            Some(unsafe { self.map.at_unchecked(counters_off(slot)) })
        } else {
            None
        }
    }

    /// Send and receive work requests of the queue pair in `slot` retired so far (a queue
    /// pair reads its own through the `CountersRef` of its slot).
    #[cfg(test)]
    pub(crate) fn retired(&self, slot: u32) -> (u64, u64) {
        match self.counters(slot) {
            Some(c) => (
                c.sq_retired.load(Ordering::Acquire),
                c.rq_retired.load(Ordering::Acquire),
            ),
            None => (0, 0),
        }
    }

    /// Appends a completion. Lock-free; fails (and marks the queue overrun) if full.
    #[inline]
    pub(crate) fn push(&self, c: &Cqe0) -> Result<(), Overrun> {
        let pos = self.reserve()?;
        self.commit(pos, c);
        Ok(())
    }

    /// Claims the next slot, to be filled by [`commit`](Self::commit). Lets a producer
    /// take the slot before it writes a message's bytes, so that the claim (a locked
    /// instruction, which waits for earlier stores) does not wait for the copy. Until the
    /// slot is committed, the consumer sees nothing after it: commit promptly.
    #[inline]
    pub(crate) fn reserve(&self) -> Result<u64, Overrun> {
        match self.claim(1, true) {
            Some(pos) => Ok(pos),
            None => Err(Overrun),
        }
    }

    /// Claims `n` consecutive slots with one locked instruction, for a batch of Sends; each
    /// must then be committed, or filled with [`skip`](Self::skip). `None` (nothing claimed,
    /// no overrun recorded) if fewer than `n` are free: the batch falls back to one claim per
    /// Send.
    #[inline]
    pub(crate) fn reserve_n(&self, n: u64) -> Option<u64> {
        self.claim(n, false)
    }

    #[inline]
    fn claim(&self, n: u64, overrun_if_full: bool) -> Option<u64> {
        let tail = self.tail();
        let mut pos = tail.pos.load(Ordering::Relaxed);
        loop {
            if pos + n > self.head_seen.load(Ordering::Relaxed) + self.size {
                // Looks full: look at where the consumer really is.
                let head = self.head().pos.load(Ordering::Acquire);
                self.head_seen.fetch_max(head, Ordering::Relaxed);
                if pos + n > head + self.size {
                    if overrun_if_full {
                        self.head().overrun.store(1, Ordering::Release);
                    }
                    return None;
                }
            }
            match tail
                .pos
                // Sequentially consistent: ordered before `notify`'s load of `armed` (the
                // same locked instruction as a relaxed one on x86).
                .compare_exchange_weak(pos, pos + n, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return Some(pos),
                Err(now) => pos = now,
            }
        }
    }

    /// Publishes the slot claimed at `pos` as empty: the consumer passes over it.
    #[inline]
    pub(crate) fn skip(&self, pos: u64) {
        let e = self.cqe(pos);
        e.meta.store(F_SKIP << 16, Ordering::Relaxed);
        e.delay_polls.store(0, Ordering::Relaxed);
        e.not_before_ns.store(0, Ordering::Relaxed);
        e.data.store(0, Ordering::Relaxed);
        e.seq.store(pos + 1, Ordering::Release);
    }

    /// Fills and publishes the slot claimed at `pos`.
    #[inline]
    pub(crate) fn commit(&self, pos: u64, c: &Cqe0) {
        let e = self.cqe(pos);
        Self::fill(e, c);
        e.seq.store(pos + 1, Ordering::Release);
        self.notify();
    }

    /// Starts fetching the next free slot's cache line, so that its transfer from the
    /// consumer's cache overlaps other work.
    #[inline]
    pub(crate) fn prefetch(&self) {
        super::sys::prefetch(self.cqe(self.tail().pos.load(Ordering::Relaxed)));
    }

    #[inline]
    fn fill(e: &Cqe, c: &Cqe0) {
        let mut flags = 0;
        let mut ex = 0;
        if let Some(imm) = c.imm {
            flags |= F_IMM;
            ex = imm;
        }
        if let Some(inv) = c.inv {
            flags |= F_INV;
            ex = inv;
        }
        let meta = c.status as u32 | (c.opcode as u32) << 8 | flags << 16;
        e.wr_id.store(c.wr_id, Ordering::Relaxed);
        e.not_before_ns.store(c.not_before_ns, Ordering::Relaxed);
        e.byte_len.store(c.byte_len, Ordering::Relaxed);
        e.qp_num.store(c.qp_num, Ordering::Relaxed);
        e.meta.store(meta, Ordering::Relaxed);
        e.ex.store(ex, Ordering::Relaxed);
        e.slot.store(c.slot, Ordering::Relaxed);
        e.slot_gen.store(c.slot_gen, Ordering::Relaxed);
        e.retire.store(c.retire, Ordering::Relaxed);
        e.delay_polls.store(c.delay_polls, Ordering::Relaxed);
        e.data.store(c.data, Ordering::Relaxed);
    }
}

/// The owner's side of a completion queue: the ring and the allocator of counter slots.
pub(crate) struct CqLocal {
    ring: CqRing,
    /// The consumer's end of the bell.
    bell_rx: OwnedFd,
    free_slots: Mutex<Vec<u32>>,
}

impl CqLocal {
    /// The ring.
    pub(crate) fn ring(&self) -> &CqRing {
        &self.ring
    }

    /// Takes a counter slot for a queue pair.
    pub(crate) fn alloc_slot(&self) -> Result<SlotGrant, FabricError> {
        let slot = self
            .free_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .ok_or(FabricError::Exhausted(
                "queue pairs on one completion queue",
            ))?;
        let c = self.ring.counters(slot).expect("slot inside the queue");
        Ok(SlotGrant {
            slot,
            gen: c.gen.load(Ordering::Acquire),
            sq: c.sq_retired.load(Ordering::Acquire),
            rq: c.rq_retired.load(Ordering::Acquire),
            counters: CountersRef(NonNull::from(c)),
        })
    }

    /// Returns a counter slot; completions still queued for its old owner are ignored.
    pub(crate) fn free_slot(&self, slot: u32) {
        if let Some(c) = self.ring.counters(slot) {
            c.gen.fetch_add(1, Ordering::AcqRel);
            self.free_slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(slot);
        }
    }
}

/// A soft completion queue.
pub struct SoftCq {
    local: Arc<CqLocal>,
    head: u64,
    /// The ring's first entry, copied out of `local` so that an empty poll reads one line of
    /// shared memory and nothing else: a worker polling hundreds of queues finds every other
    /// line (the ring's header, the mapping's bookkeeping) out of its cache.
    entries: NonNull<Cqe>,
    /// `size - 1`, beside `entries`.
    mask: u64,
    /// The ring's overrun flag, copied out of `local` as `entries` is.
    overrun: NonNull<AtomicU32>,
    /// Empty polls so far, to look at the overrun flag every [`OVERRUN_CHECK_EVERY`]th.
    empty_polls: u32,
}

/// How often an empty poll looks at the overrun flag. A ring that overflowed is full, so its
/// next entry is published (and every poll that finds an entry looks at the flag first)
/// unless a producer is still writing it; then a later empty poll reports the overrun.
const OVERRUN_CHECK_EVERY: u32 = 64;

// SAFETY: `entries` and `overrun` point into the shared mapping that `local` keeps alive (not
// into `CqLocal` itself, which moves into its `Arc` after they are taken); the queue's one
// consumer is whoever holds the `SoftCq`, on whatever thread.
unsafe impl Send for SoftCq {}
// SAFETY: through `&SoftCq` the entries are only read, with atomic loads (the mapping is
// shared memory that other processes write anyway).
unsafe impl Sync for SoftCq {}

impl SoftCq {
    pub(crate) fn create(min_depth: u32, qp_slots: u32) -> Result<SoftCq, FabricError> {
        if min_depth == 0 || min_depth > 1 << 20 {
            return Err(FabricError::InvalidArgument("completion queue depth"));
        }
        let size = u64::from(min_depth).next_power_of_two();
        let (bell_rx, bell_tx) = bell_pair().map_err(|e| FabricError::Os {
            call: "socketpair (completion queue bell)",
            errno: e.raw_os_error().unwrap_or(0),
        })?;
        let ring = CqRing::create(size, qp_slots, bell_tx)?;
        let local = CqLocal {
            ring,
            bell_rx,
            free_slots: Mutex::new((0..qp_slots).rev().collect()),
        };
        let entries = NonNull::from(local.ring.cqe(0));
        let overrun = NonNull::from(&local.ring.head().overrun);
        Ok(SoftCq {
            mask: local.ring.mask,
            overrun,
            local: Arc::new(local),
            head: 0,
            entries,
            empty_polls: 0,
        })
    }

    /// Whether the ring overflowed, through the copied pointer (see `overrun`).
    #[inline(always)]
    fn overrun(&self) -> bool {
        // SAFETY: the flag lies in the mapping `local` keeps alive.
        unsafe { self.overrun.as_ref() }.load(Ordering::Relaxed) != 0
    }

    /// The entry at `pos`, through the copied pointer (see `entries`).
    #[inline(always)]
    fn entry(&self, pos: u64) -> &Cqe {
        // SAFETY: `pos & mask < size` entries of 64 bytes follow `entries` inside the mapping
        // `local` keeps alive (`CqRing::cqe` made the same check when `entries` was taken).
        unsafe { &*self.entries.as_ptr().add((pos & self.mask) as usize) }
    }

    pub(crate) fn local(&self) -> &Arc<CqLocal> {
        &self.local
    }
}

impl CompletionQueue for SoftCq {
    #[inline(always)]
    fn poll(&mut self, out: &mut [Wc]) -> Result<usize, CqError> {
        if self.entry(self.head).seq.load(Ordering::Acquire) != self.head + 1 {
            self.empty_polls = self.empty_polls.wrapping_add(1);
            if self.empty_polls.is_multiple_of(OVERRUN_CHECK_EVERY) && self.overrun() {
                return Err(CqError::Overrun);
            }
            return Ok(0);
        }
        if self.overrun() {
            return Err(CqError::Overrun);
        }
        let ring = &self.local.ring;
        let start = self.head;
        let mut n = 0;
        while n < out.len() {
            let e = self.entry(self.head);
            if e.seq.load(Ordering::Acquire) != self.head + 1 {
                break;
            }
            let delay = e.delay_polls.load(Ordering::Relaxed);
            if delay > 0 {
                e.delay_polls.store(delay - 1, Ordering::Relaxed);
                break;
            }
            let not_before = e.not_before_ns.load(Ordering::Relaxed);
            if not_before != 0 && monotonic_ns() < not_before {
                break;
            }
            let data = e.data.load(Ordering::Relaxed);
            if data != 0 {
                // A message's first two lines: a transport header and what follows it.
                super::sys::prefetch_addr(data);
                super::sys::prefetch_addr(data.wrapping_add(64));
            }
            let meta = e.meta.load(Ordering::Relaxed);
            let ex = e.ex.load(Ordering::Relaxed);
            let flags = meta >> 16;
            if flags & F_SKIP != 0 {
                self.head += 1;
                continue;
            }
            let opcode = WcOpcode::from_raw((meta >> 8) & 0xff).unwrap_or(WcOpcode::Send);
            let wc = Wc {
                wr_id: e.wr_id.load(Ordering::Relaxed),
                status: WcStatus::from_raw(meta & 0xff).unwrap_or(WcStatus::GeneralErr),
                opcode,
                byte_len: e.byte_len.load(Ordering::Relaxed),
                imm: (flags & F_IMM != 0).then_some(ex),
                invalidated_rkey: (flags & F_INV != 0).then_some(ex),
                qp_num: e.qp_num.load(Ordering::Relaxed),
                vendor_err: 0,
            };
            let slot = e.slot.load(Ordering::Relaxed);
            let slot_gen = e.slot_gen.load(Ordering::Relaxed);
            let retire = u64::from(e.retire.load(Ordering::Relaxed));
            if let Some(c) = ring.counters(slot) {
                if c.gen.load(Ordering::Acquire) == slot_gen {
                    // Single consumer: plain read-modify-write is enough.
                    if opcode.is_recv() {
                        let v = c.rq_retired.load(Ordering::Relaxed);
                        c.rq_retired.store(v + 1, Ordering::Release);
                    } else {
                        let v = c.sq_retired.load(Ordering::Relaxed);
                        c.sq_retired.store(v + retire, Ordering::Release);
                    }
                }
            }
            self.head += 1;
            out[n] = wc;
            n += 1;
        }
        if self.head != start {
            // Every field was read above: producers may reuse the entries.
            ring.head().pos.store(self.head, Ordering::Release);
        }
        Ok(n)
    }

    fn depth(&self) -> u32 {
        self.local.ring.size as u32
    }

    #[inline]
    fn prefetch_next(&self) {
        super::sys::prefetch(self.entry(self.head));
    }

    fn watch(&self) -> Option<CqWatch> {
        let keep: Arc<dyn Send + Sync> = self.local.clone();
        // SAFETY: entry `i` lies at `entries + i` for every `i <= mask` inside the mapping
        // that `local` (kept by the watch) holds, and its first field is the sequence word:
        // the words are `size_of::<Cqe>() / 8` words apart. The ring's size is a power of two.
        Some(unsafe {
            CqWatch::new(
                NonNull::from(&self.entries.as_ref().seq),
                size_of::<Cqe>() / size_of::<AtomicU64>(),
                self.mask,
                keep,
            )
        })
    }

    #[inline(always)]
    fn cursor(&self) -> u64 {
        self.head
    }

    fn arm(&mut self) -> Result<bool, CqError> {
        let ring = &self.local.ring;
        let t = ring.tail();
        t.armed.store(1, Ordering::SeqCst);
        // A claim not yet consumed (published or about to be, or delayed by a fault) is a
        // completion on its way: poll rather than wait (see `CqRing::notify`).
        Ok(t.pos.load(Ordering::SeqCst) == self.head)
    }

    fn notify_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.local.bell_rx.as_fd())
    }

    fn take_notifications(&mut self) -> u32 {
        // Disarmed first: a consumer that polls on needs no ring, and a producer that finds
        // the flag clear rings nothing (no system call on its path).
        self.local.ring.tail().armed.store(0, Ordering::Relaxed);
        bell_drain(&self.local.bell_rx)
    }
}

impl std::fmt::Debug for SoftCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftCq")
            .field("depth", &self.depth())
            .field("head", &self.head)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cqe(wr_id: u64) -> Cqe0 {
        Cqe0 {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 5,
            imm: Some(7),
            inv: None,
            qp_num: 3,
            slot: 0,
            slot_gen: 0,
            retire: 1,
            delay_polls: 0,
            not_before_ns: 0,
            data: 0,
        }
    }

    #[test]
    fn fifo_overrun_and_counters() {
        let mut cq = SoftCq::create(3, 4).unwrap();
        assert_eq!(cq.depth(), 4);
        let SlotGrant {
            slot,
            gen,
            sq: sq0,
            rq: rq0,
            ..
        } = cq.local().alloc_slot().unwrap();
        assert_eq!((sq0, rq0), (0, 0));
        let ring = cq.local().ring().clone();
        for i in 0..4 {
            ring.push(&Cqe0 {
                slot,
                slot_gen: gen,
                ..cqe(i)
            })
            .unwrap();
        }
        let mut wc = [Wc::default(); 8];
        assert_eq!(cq.poll(&mut wc[..2]).unwrap(), 2);
        assert_eq!(wc[0].wr_id, 0);
        assert_eq!(wc[1].imm, Some(7));
        assert_eq!(ring.retired(slot), (0, 2));
        ring.push(&cqe(4)).unwrap();
        ring.push(&cqe(5)).unwrap();
        assert_eq!(ring.push(&cqe(6)), Err(Overrun));
        assert_eq!(cq.poll(&mut wc), Err(CqError::Overrun));
    }

    #[test]
    fn delayed_completion_holds_the_queue() {
        let mut cq = SoftCq::create(4, 1).unwrap();
        let ring = cq.local().ring().clone();
        ring.push(&Cqe0 {
            delay_polls: 2,
            ..cqe(1)
        })
        .unwrap();
        ring.push(&cqe(2)).unwrap();
        let mut wc = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc).unwrap(), 0);
        assert_eq!(cq.poll(&mut wc).unwrap(), 0);
        assert_eq!(cq.poll(&mut wc).unwrap(), 2);
        assert_eq!((wc[0].wr_id, wc[1].wr_id), (1, 2));
    }
}
