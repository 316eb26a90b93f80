//! Receive rings in shared memory ([`Ring`]), and a queue pair's shared memory ([`QpMem`]):
//! its header (number, state, fault settings) and its own receive ring.
//!
//! A ring has one producer (the owner posting receives) and lock-free consumers (the peer
//! executing Sends, and whoever flushes the queue). A queue pair's ring has one consuming
//! peer, which never writes the ring: a slot returns to the owner through its depth
//! accounting. A shared receive queue's ring (`srq`) has the consuming peers of every queue
//! pair made with it, and each hands the slot it claimed back through the slot's sequence
//! word (see [`Claimed`]). Both use this code and this layout of the first page:
//!
//! ```text
//! 0       QpInfo   (read-mostly: state, fault settings, then geometry; an SRQ's SrqInfo)
//! 0x200   Head     (consumers' claim counter; an SRQ's armed limit on the same line)
//! 0x300   (an SRQ's producer position and limit event, `srq.rs`; unused by a queue pair)
//! 4096    receive ring: `size` slots of `stride` bytes, WqeHead then SgeSlot[max_sge]
//! ```

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::arena::PAGE;
use super::cq::{CqRing, Cqe0};
use super::sys::{Atomics, MapRef, Mapping};
use crate::fabric::{FabricError, QpState, Sge, WcOpcode, WcStatus};

// "rpcdqpr3": version 2 added `QpInfo::srq_id`, version 3 put the hot fields on the first
// line and dropped the posted-sends counter.
const MAGIC: u64 = 0x7270_6364_7170_7233;
// Apart from the header's sets (see `arena::TABLE_OFF`).
const HEAD_OFF: usize = 0x200;
const WQE_HEAD: usize = 32;
/// Where the ring starts.
const RING_OFF: usize = PAGE;
/// Largest ring a peer's memory may declare.
const MAX_RING: u64 = 1 << 20;
/// Most scatter elements a peer's ring may declare.
const MAX_RING_SGE: u32 = 1024;

pub(crate) const S_INIT: u32 = 1;
pub(crate) const S_RTR: u32 = 2;
pub(crate) const S_RTS: u32 = 3;
pub(crate) const S_ERR: u32 = 6;

/// The state for its stored value.
pub(crate) fn state_of(v: u32) -> QpState {
    match v {
        S_INIT => QpState::Init,
        S_RTR => QpState::Rtr,
        S_RTS => QpState::Rts,
        S_ERR => QpState::Err,
        _ => QpState::Reset,
    }
}

/// A queue pair's header. Its first line holds what every post and every Send executed
/// against the queue pair reads (the state, the armed faults, where its receive completions
/// go); the second what is read when the memory is opened or a fault fires. With many
/// connections each such line is a cache miss per message: the receive fault and the
/// shared receive queue's identifier used to lie on the second line.
#[repr(C, align(64))]
pub(crate) struct QpInfo {
    pub qp_num: AtomicU32,
    pub state: AtomicU32,
    pub recv_cq_slot: AtomicU32,
    pub recv_cq_gen: AtomicU32,
    pub delay_polls: AtomicU32,
    _pad: AtomicU32,
    pub delay_ns: AtomicU64,
    /// The send request to fail: 0 none, [`FAIL_FROM_NEXT`] plus `n` the `n`th posted after
    /// the arming (made absolute by the next post, see `SoftQp::post_send_one`), otherwise
    /// the running count of the one to fail.
    pub send_fail_at: AtomicU64,
    pub recv_fail_at: AtomicU64,
    /// The shared receive queue the queue pair takes its receives from (its identifier, which
    /// its memory repeats), 0 for none: then a peer claims from the queue pair's own ring.
    pub srq_id: AtomicU64,
    // Second line.
    magic: AtomicU64,
    ring_size: AtomicU32,
    max_sge: AtomicU32,
    stride: AtomicU32,
    pub send_fail_status: AtomicU32,
    pub recv_fail_status: AtomicU32,
}

/// [`QpInfo::send_fail_at`]: the bit saying that the rest counts from the next post.
pub(crate) const FAIL_FROM_NEXT: u64 = 1 << 63;

// The first line's fields end within it.
const _: () = assert!(core::mem::offset_of!(QpInfo, srq_id) + 8 <= 64);

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for QpInfo {}

/// The consumers' claim counter, on its own line. A shared receive queue keeps its armed
/// limit there too, which a consumer reads right after its claim brought the line to it.
#[repr(C, align(64))]
pub(crate) struct Head {
    pub pos: AtomicU64,
    /// Shared receive queues: the armed limit (0: none). Unused by a queue pair's ring.
    pub limit: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for Head {}

#[repr(C)]
struct WqeHead {
    seq: AtomicU64,
    wr_id: AtomicU64,
    num_sge: AtomicU32,
    _pad: AtomicU32,
    _pad2: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for WqeHead {}

#[repr(C)]
struct SgeSlot {
    addr: AtomicU64,
    length: AtomicU32,
    lkey: AtomicU32,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for SgeSlot {}

/// A receive ring in shared memory (a queue pair's own, or a shared receive queue's), the
/// owner's view or a peer's, with its geometry checked against the mapping when built.
///
/// A slot's sequence word says what it holds: `pos` free for receive `pos` (a fresh ring
/// holds `i` in slot `i`), `pos + 1` receive `pos` posted. On a shared ring the consumer of
/// receive `pos` stores `pos + size` once done with the slot: free for the receive one lap
/// later (the scheme of Vyukov's bounded queue, hence at least two slots).
#[derive(Clone)]
pub(crate) struct Ring {
    map: MapRef,
    mask: u64,
    stride: usize,
    max_sge: u32,
    /// A shared receive queue's: consumers hand slots back (see [`Claimed`]).
    shared: bool,
}

/// A receive request claimed from a ring.
///
/// On a queue pair's own ring, consumers never write the ring: the slot goes back to the
/// producer through its depth accounting (a receive's completion is pushed after its consumer
/// is done with the slot, and the owner reuses a slot only after polling enough completions),
/// so a receive's cache line travels once, producer to consumer.
///
/// On a shared receive queue's ring that accounting cannot work (the completions of one ring
/// land on the completion queues of many queue pairs, polled at different times), so dropping
/// the claim hands the slot back: it stores the slot's sequence word (`pos + size`, with
/// release ordering, after every read of the request), which the producer checks before
/// writing the slot again. A consumer drops the claim after its last read of the request and
/// before it publishes the receive's completion, so that a receive whose completion has been
/// polled has its slot free.
pub(crate) struct Claimed<'a> {
    ring: &'a Ring,
    pos: u64,
}

impl Claimed<'_> {
    fn head(&self) -> &WqeHead {
        self.ring.wqe(self.pos)
    }

    /// The request's `wr_id`.
    pub(crate) fn wr_id(&self) -> u64 {
        self.head().wr_id.load(Ordering::Relaxed)
    }

    /// Its position in the ring: the number of receives claimed before it.
    pub(crate) fn index(&self) -> u64 {
        self.pos
    }

    /// Number of scatter elements (bounded by the ring's maximum).
    pub(crate) fn num_sge(&self) -> usize {
        (self
            .head()
            .num_sge
            .load(Ordering::Relaxed)
            .min(self.ring.max_sge)) as usize
    }

    /// Scatter element `i` (< `num_sge`).
    pub(crate) fn sge(&self, i: usize) -> Sge {
        let s = self.ring.sge_slot(self.pos, i);
        Sge {
            addr: s.addr.load(Ordering::Relaxed),
            length: s.length.load(Ordering::Relaxed),
            lkey: s.lkey.load(Ordering::Relaxed),
        }
    }

    /// Total scatter capacity in bytes.
    pub(crate) fn capacity(&self) -> u64 {
        (0..self.num_sge())
            .map(|i| u64::from(self.sge(i).length))
            .sum()
    }
}

impl Drop for Claimed<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.ring.shared {
            // Every read of the slot is done: free for the receive one lap later.
            self.head()
                .seq
                .store(self.pos.wrapping_add(self.ring.mask + 1), Ordering::Release);
        }
    }
}

impl Ring {
    /// The stride of a slot and the bytes of memory a ring of `size` slots needs.
    fn layout(size: u64, max_sge: u32) -> (usize, usize) {
        let stride = (WQE_HEAD + 16 * max_sge as usize).div_ceil(64) * 64;
        (stride, RING_OFF + stride * size as usize)
    }

    /// New shared memory named `name` for a ring of `size` slots (a power of two) with
    /// room for the header page; every slot free.
    pub(crate) fn create(
        name: &str,
        size: u64,
        max_sge: u32,
        shared: bool,
    ) -> Result<Ring, FabricError> {
        debug_assert!(size.is_power_of_two());
        let (stride, bytes) = Self::layout(size, max_sge);
        let ring = Ring {
            map: MapRef::new(Arc::new(Mapping::create(name, bytes)?)),
            mask: size - 1,
            stride,
            max_sge,
            shared,
        };
        for i in 0..size {
            ring.wqe(i).seq.store(i, Ordering::Relaxed);
        }
        Ok(ring)
    }

    /// A view of a ring in a peer's memory of the geometry its header declares, after
    /// checking that it fits the mapping.
    pub(crate) fn open(
        map: Arc<Mapping>,
        size: u64,
        max_sge: u32,
        stride: u32,
        shared: bool,
    ) -> Result<Ring, FabricError> {
        if !size.is_power_of_two() || size > MAX_RING || max_sge > MAX_RING_SGE {
            return Err(FabricError::InvalidArgument("peer receive ring geometry"));
        }
        let (want, bytes) = Self::layout(size, max_sge);
        if stride as usize != want || bytes > map.len() {
            return Err(FabricError::InvalidArgument(
                "peer receive ring does not fit",
            ));
        }
        Ok(Ring {
            map: MapRef::new(map),
            mask: size - 1,
            stride: want,
            max_sge,
            shared,
        })
    }

    /// The mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        self.map.mapping()
    }

    /// A structure beside the ring in its first page (a shared receive queue's header), through
    /// the view's copy of the mapping's address.
    ///
    /// # Safety
    ///
    /// As for `MapRef::at_unchecked`.
    pub(crate) unsafe fn at_unchecked<T: Atomics>(&self, offset: usize) -> &T {
        // SAFETY: the caller's contract.
        unsafe { self.map.at_unchecked(offset) }
    }

    /// Slots.
    pub(crate) fn size(&self) -> u64 {
        self.mask + 1
    }

    /// Scatter elements a slot holds.
    pub(crate) fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// The stride of a slot, for the header.
    pub(crate) fn stride(&self) -> u32 {
        self.stride as u32
    }

    /// The consumers' claim counter.
    #[inline]
    pub(crate) fn head(&self) -> &Head {
        // SAFETY: `HEAD_OFF` is 64-byte aligned and inside the first page, before the ring,
        // which `create`/`open` checked fits in the mapping.
        unsafe { self.map.at_unchecked(HEAD_OFF) }
    }

    #[inline]
    fn wqe(&self, pos: u64) -> &WqeHead {
        // SAFETY: `pos & mask < size`, and `RING_OFF + stride * size` was checked against the
        // mapping's length by `create`/`open`; `stride` is a multiple of 64.
        unsafe {
            self.map
                .at_unchecked(RING_OFF + (pos & self.mask) as usize * self.stride)
        }
    }

    #[inline]
    fn sge_slot(&self, pos: u64, i: usize) -> &SgeSlot {
        assert!(i < self.max_sge as usize, "scatter element index");
        // SAFETY: as for `wqe`; `i < max_sge` and the stride holds `WQE_HEAD + 16 * max_sge`
        // bytes.
        unsafe {
            self.map.at_unchecked(
                RING_OFF + (pos & self.mask) as usize * self.stride + WQE_HEAD + 16 * i,
            )
        }
    }

    /// Whether the slot of receive `pos` is free for it: on a shared ring, its consumer one
    /// lap earlier has handed it back (acquire: that consumer's reads of the slot come before
    /// the writes that follow).
    #[inline]
    pub(crate) fn is_free(&self, pos: u64) -> bool {
        self.wqe(pos).seq.load(Ordering::Acquire) == pos
    }

    /// Writes receive `pos` (the producer's running count) into the ring and publishes it.
    /// The caller knows the slot's previous receive is done with: on a queue pair's ring, its
    /// completion has been polled (see [`Claimed`]; reading the slot first would stall on a
    /// line the consumer last held); on a shared ring, [`is_free`](Self::is_free) said so.
    #[inline(always)]
    pub(crate) fn produce(&self, pos: u64, wr_id: u64, sges: &[Sge]) {
        let w = self.wqe(pos);
        w.wr_id.store(wr_id, Ordering::Relaxed);
        w.num_sge.store(sges.len() as u32, Ordering::Relaxed);
        for (i, s) in sges.iter().enumerate() {
            let slot = self.sge_slot(pos, i);
            slot.addr.store(s.addr, Ordering::Relaxed);
            slot.length.store(s.length, Ordering::Relaxed);
            slot.lkey.store(s.lkey, Ordering::Relaxed);
        }
        w.seq.store(pos + 1, Ordering::Release);
    }

    /// Starts taking, for writing, the cache lines of the slots of receives `pos .. pos + n`.
    #[inline]
    fn prefetch_produce(&self, pos: u64, n: u64) {
        for p in pos..pos + n.min(self.mask + 1) {
            super::sys::prefetch_write(self.wqe(p));
        }
    }

    /// Starts fetching the first two cache lines of the first scatter element of receive
    /// `pos`.
    #[inline]
    fn prefetch_landing(&self, pos: u64) {
        if self.wqe(pos).num_sge.load(Ordering::Relaxed) > 0 {
            let addr = self.sge_slot(pos, 0).addr.load(Ordering::Relaxed);
            super::sys::prefetch_addr(addr);
            super::sys::prefetch_addr(addr.wrapping_add(64));
        }
    }

    /// Starts fetching the cache line of the receive a consumer will claim next.
    #[inline]
    pub(crate) fn prefetch_head(&self) {
        super::sys::prefetch(self.wqe(self.head().pos.load(Ordering::Relaxed)));
    }

    /// Claims the oldest posted receive, if any (one locked instruction).
    #[inline]
    pub(crate) fn consume(&self) -> Option<Claimed<'_>> {
        let head = self.head();
        let mut pos = head.pos.load(Ordering::Relaxed);
        loop {
            let seq = self.wqe(pos).seq.load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos + 1) as i64;
            if dif == 0 {
                match head.pos.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(Claimed { ring: self, pos }),
                    Err(now) => pos = now,
                }
            } else if dif < 0 {
                return None;
            } else {
                pos = head.pos.load(Ordering::Relaxed);
            }
        }
    }

    /// Claims up to `max` of the oldest posted receives with one locked instruction: returns
    /// the first position and the count (0: none posted).
    #[inline]
    fn consume_n(&self, max: u64) -> (u64, u64) {
        let head = self.head();
        let mut pos = head.pos.load(Ordering::Relaxed);
        loop {
            let mut k = 0;
            while k < max && self.is_posted(pos + k) {
                k += 1;
            }
            if k == 0 {
                return (pos, 0);
            }
            match head
                .pos
                .compare_exchange_weak(pos, pos + k, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return (pos, k),
                Err(now) => pos = now,
            }
        }
    }

    /// Whether receive `pos` is posted (and not yet claimed, for a `pos` at or past the head).
    #[inline]
    fn is_posted(&self, pos: u64) -> bool {
        self.wqe(pos).seq.load(Ordering::Acquire) == pos + 1
    }
}

/// A view of a queue pair's shared memory, the owner's or a peer's.
#[derive(Clone)]
pub(crate) struct QpMem {
    ring: Ring,
}

impl QpMem {
    /// New shared memory for a queue pair with a receive ring of at least `min_size` slots,
    /// or, with a shared receive queue (`srq_id` not 0), the smallest ring, never posted to.
    pub(crate) fn create(
        qp_num: u32,
        min_size: u32,
        max_sge: u32,
        recv_cq_slot: u32,
        recv_cq_gen: u32,
        srq_id: u64,
    ) -> Result<QpMem, FabricError> {
        let size = u64::from(min_size.max(1)).next_power_of_two();
        let mem = QpMem {
            ring: Ring::create("rpcrdma-soft-qp", size, max_sge, false)?,
        };
        let info = mem.info();
        info.qp_num.store(qp_num, Ordering::Relaxed);
        info.state.store(S_INIT, Ordering::Relaxed);
        info.ring_size.store(size as u32, Ordering::Relaxed);
        info.max_sge.store(max_sge, Ordering::Relaxed);
        info.stride.store(mem.ring.stride(), Ordering::Relaxed);
        info.recv_cq_slot.store(recv_cq_slot, Ordering::Relaxed);
        info.recv_cq_gen.store(recv_cq_gen, Ordering::Relaxed);
        info.srq_id.store(srq_id, Ordering::Relaxed);
        info.magic.store(MAGIC, Ordering::Release);
        Ok(mem)
    }

    /// A view of a peer's queue pair memory, after checking its geometry.
    pub(crate) fn open(map: Arc<Mapping>) -> Result<QpMem, FabricError> {
        let info: &QpInfo = map.try_at(0).ok_or(FabricError::InvalidArgument(
            "peer queue pair is smaller than its header",
        ))?;
        if info.magic.load(Ordering::Acquire) != MAGIC {
            return Err(FabricError::InvalidArgument(
                "peer queue pair has a bad magic number",
            ));
        }
        let size = u64::from(info.ring_size.load(Ordering::Relaxed));
        let max_sge = info.max_sge.load(Ordering::Relaxed);
        let stride = info.stride.load(Ordering::Relaxed);
        let ring = Ring::open(map, size, max_sge, stride, false)?;
        Ok(QpMem { ring })
    }

    /// The mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        self.ring.mapping()
    }

    /// The header.
    #[inline]
    pub(crate) fn info(&self) -> &QpInfo {
        // SAFETY: the header lies in the first page, before the ring, which
        // `create`/`open` checked fits in the mapping.
        unsafe { self.ring.map.at_unchecked(0) }
    }

    /// The stored state.
    #[inline]
    pub(crate) fn state(&self) -> u32 {
        self.info().state.load(Ordering::Acquire)
    }

    /// The shared receive queue the queue pair takes its receives from, 0 for none.
    pub(crate) fn srq_id(&self) -> u64 {
        self.info().srq_id.load(Ordering::Relaxed)
    }

    /// The number of receives consumed so far: on a queue pair with a shared receive queue,
    /// those counted by [`count_srq_claim`](Self::count_srq_claim).
    pub(crate) fn consumed(&self) -> u64 {
        self.ring.head().pos.load(Ordering::Acquire)
    }

    /// Counts a receive of the shared receive queue consumed by this queue pair, returning
    /// the count before it: its position among this queue pair's receives, for a receive
    /// fault. Only while a receive fault is armed (that is what the fault counts from). The
    /// queue pair's own ring, never posted to, lends its claim counter: nothing is ever
    /// found posted at it.
    #[inline]
    pub(crate) fn count_srq_claim(&self) -> u64 {
        self.ring.head().pos.fetch_add(1, Ordering::AcqRel)
    }

    /// Writes receive `pos` (the owner's running count) into the ring and publishes it. The
    /// caller's depth accounting guarantees the slot's previous receive was consumed: its
    /// completion has been polled (see [`Claimed`]). The caller then checks the state: a
    /// receive posted to a queue pair already in error is flushed at once (see
    /// [`QpMem::must_flush_after_post`]).
    #[inline(always)]
    pub(crate) fn produce(&self, pos: u64, wr_id: u64, sges: &[Sge]) {
        self.ring.produce(pos, wr_id, sges);
    }

    /// Whether a receive just produced must be flushed by its producer: the queue pair is
    /// already in the error state. No fence: one would wait for the ring's lines to reach
    /// this core (they were last read by the consumer), on every post. A receive posted in
    /// the instant another thread sets the error may therefore stay unflushed, as every
    /// receive posted after an error does on rxe (the engine waits for neither).
    #[inline]
    pub(crate) fn must_flush_after_post(&self) -> bool {
        self.info().state.load(Ordering::Acquire) == S_ERR
    }

    /// Starts taking, for writing, the cache lines of the ring slots of receives `pos ..
    /// pos + n` (the owner's next posts): a consumer read them last, and a store to them
    /// would wait for its copy to be invalidated, as would the next locked instruction.
    #[inline]
    pub(crate) fn prefetch_produce(&self, pos: u64, n: u64) {
        self.ring.prefetch_produce(pos, n);
    }

    /// Starts fetching the first two cache lines of the first scatter element of receive
    /// `pos`, one this owner posted (its address is in the owner's address space): where the
    /// message that completes it will start. Done while waiting for that completion, the
    /// fetch that follows the sender's write overlaps the fetch of the completion itself.
    #[inline]
    pub(crate) fn prefetch_landing(&self, pos: u64) {
        self.ring.prefetch_landing(pos);
    }

    /// Starts fetching the cache line of the receive a consumer will claim next.
    #[inline]
    pub(crate) fn prefetch_head(&self) {
        self.ring.prefetch_head();
    }

    /// Claims the oldest posted receive, if any.
    #[inline]
    pub(crate) fn consume(&self) -> Option<Claimed<'_>> {
        self.ring.consume()
    }

    /// Claims up to `max` of the oldest posted receives with one locked instruction, for a
    /// batch of Sends: returns the first position and the count (0: none posted). Each is
    /// then taken with [`claimed_at`](Self::claimed_at), in order.
    #[inline]
    pub(crate) fn consume_n(&self, max: u64) -> (u64, u64) {
        self.ring.consume_n(max)
    }

    /// The receive at `pos`, claimed earlier by [`consume_n`](Self::consume_n).
    #[inline]
    pub(crate) fn claimed_at(&self, pos: u64) -> Claimed<'_> {
        Claimed {
            ring: &self.ring,
            pos,
        }
    }

    /// Gives back the receives claimed at `from..to` and not used, if nothing was claimed
    /// after them (only a flush can have: then the caller completes them itself).
    pub(crate) fn unclaim(&self, from: u64, to: u64) -> bool {
        self.ring
            .head()
            .pos
            .compare_exchange(to, from, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// The completion template for this queue pair's receives in its receive queue `cq`.
    #[inline]
    pub(crate) fn recv_cqe(&self, wr_id: u64, status: WcStatus) -> Cqe0 {
        let info = self.info();
        let delay_ns = info.delay_ns.load(Ordering::Relaxed);
        Cqe0 {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm: None,
            inv: None,
            qp_num: info.qp_num.load(Ordering::Relaxed),
            slot: info.recv_cq_slot.load(Ordering::Relaxed),
            slot_gen: info.recv_cq_gen.load(Ordering::Relaxed),
            retire: 1,
            delay_polls: info.delay_polls.load(Ordering::Relaxed),
            not_before_ns: if delay_ns == 0 {
                0
            } else {
                super::sys::monotonic_ns() + delay_ns
            },
            data: 0,
        }
    }

    /// Whether a posted receive waits at the head of the ring (a look, not a claim).
    fn has_posted(&self) -> bool {
        self.ring
            .is_posted(self.ring.head().pos.load(Ordering::Relaxed))
    }

    /// Completes every posted receive of the queue pair's own ring with a flush error into
    /// `cq` (a shared receive queue's stay for its other queue pairs: a queue pair made with
    /// one has nothing here). As a Send does, each takes its completion slot before its
    /// receive, so that completions of consumed receives stay in claim order (the owner's
    /// ring-slot reuse relies on it, see [`Claimed`]); a slot left without a receive (a
    /// racing Send took the last one) is published empty. Nothing is reserved when nothing
    /// is posted: a full queue with nothing to flush is no overrun.
    pub(crate) fn flush(&self, cq: &CqRing) {
        while self.has_posted() {
            // A full queue is reported as its overrun; the flush completions are lost then.
            let Ok(slot) = cq.reserve() else {
                return;
            };
            let Some(c) = self.consume() else {
                cq.skip(slot);
                return;
            };
            cq.commit(slot, &self.recv_cqe(c.wr_id(), WcStatus::WrFlushErr));
        }
    }

    /// Flushes the receive queue into `cq` if the queue pair is in the error state, after a
    /// fence: receives that went back to the ring while another thread set the error are
    /// flushed by one side or the other.
    pub(crate) fn flush_if_error(&self, cq: &CqRing) {
        fence(Ordering::SeqCst);
        if self.info().state.load(Ordering::Relaxed) == S_ERR {
            self.flush(cq);
        }
    }

    /// Moves the queue pair to the error state and flushes its receive queue into `cq`.
    pub(crate) fn enter_error(&self, cq: &CqRing) {
        self.info().state.store(S_ERR, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.flush(cq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_order_and_flush() {
        let mem = QpMem::create(5, 3, 2, 0, 0, 0).unwrap();
        let sges = [Sge::new(1, 2, 3), Sge::new(4, 5, 6)];
        for i in 0..4 {
            mem.produce(i, 100 + i, &sges[..(i as usize % 3).min(2)]);
        }
        let c = mem.consume().unwrap();
        assert_eq!((c.wr_id(), c.num_sge(), c.index()), (100, 0, 0));
        let c = mem.consume().unwrap();
        assert_eq!((c.wr_id(), c.num_sge(), c.capacity()), (101, 1, 2));
        assert_eq!(c.sge(0), sges[0]);
        mem.produce(4, 104, &[]);
        let cq = super::super::cq::SoftCq::create(8, 1).unwrap();
        mem.enter_error(cq.local().ring());
        assert!(mem.consume().is_none());
        assert_eq!(mem.consumed(), 5);
        assert_eq!(state_of(mem.state()), QpState::Err);
        assert!(mem.must_flush_after_post());
    }
}
