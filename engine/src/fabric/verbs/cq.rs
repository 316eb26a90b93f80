//! Completion queues, and the bookkeeping that turns device completions back into the
//! caller's work requests.
//!
//! # Work request ids on the wire
//!
//! The provider posts every work request under its own `wr_id`: 16 bits naming the work
//! queue (a slot of the completion queue's table), 8 bits of that slot's generation and the
//! low 40 bits of the request's sequence number on its queue. The caller's `wr_id` (and, for
//! send requests, the operation) wait in a ring of the work queue, indexed by sequence
//! number. Polling reads them back, so that:
//!
//! - completions carry the caller's `wr_id`, and failed send completions the operation that
//!   was posted (`ibv_wc.opcode` is undefined for them);
//! - a completion retires its request and every earlier one of the same queue: queue depth
//!   is counted from post to poll as the fabric's contract requires, also on devices that
//!   free slots before the poll (rxe does), so code that respects the depth runs anywhere.
//!
//! Completions of a queue pair that has been destroyed and whose slot was since given to a
//! new queue pair are discarded (their caller's ids are gone).
//!
//! # Receives of a shared receive queue
//!
//! A receive posted on a shared receive queue may complete on the receive completion queue
//! of any queue pair made with it, and those completion queues may be polled by different
//! threads in any order, so the queue is not retired in order: each receive holds an entry
//! of the queue's own table ([`SrqTrack`]) from its post until its completion is polled,
//! and is posted under the `wr_id` [`srq_wr_id`] (slot [`SRQ_SLOT`], which no work queue is
//! given, the queue's process-wide id and the entry). Polling finds the table through the
//! completion queue, with which every queue pair made with the shared queue registers it
//! ([`CqInner::register_srq`]), and frees the entry. A completion queue destroyed with such
//! completions unpolled frees their entries first. An entry whose receive never completes
//! (rxe drops a shared receive that a queue pair was in the middle of filling when it went
//! to the error state, and a completion lost to a completion queue overrun) stays taken:
//! the queue holds one receive fewer for the rest of its life.

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use rdma_sys::*;

use super::context::{Context, PollCqFn};
use super::monitor::monitor;
use super::sys::{errno, set_nonblocking};
use crate::fabric::{CompletionQueue, CqError, FabricError, Wc, WcOpcode, WcStatus};

/// Bits of the provider's `wr_id` that hold the sequence number.
const SEQ_BITS: u32 = 40;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const GEN_SHIFT: u32 = SEQ_BITS;
const SLOT_SHIFT: u32 = 48;
/// Work queues a completion queue can serve at once (slot `0xffff` is [`SRQ_SLOT`]).
const MAX_SLOTS: usize = (1 << 16) - 1;
/// The slot field of the provider's `wr_id` of every shared receive queue's receive.
pub(super) const SRQ_SLOT: usize = (1 << 16) - 1;
/// Bits of a shared receive queue's `wr_id` that hold the entry of its table; the 24 above
/// them (up to the slot) hold the queue's id.
const SRQ_ENTRY_BITS: u32 = 24;
const SRQ_ENTRY_MASK: u64 = (1 << SRQ_ENTRY_BITS) - 1;
/// Receives a shared receive queue may hold: its table's entries are numbered in 24 bits.
pub(super) const SRQ_MAX_ENTRIES: u32 = 1 << SRQ_ENTRY_BITS;
/// Completions fetched from the device per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;

/// The caller-side record of one work queue (the send or receive queue of a queue pair).
pub(super) struct WqTrack {
    mask: u64,
    /// The caller's wr_id of each request in flight, by sequence number.
    wr_ids: Box<[AtomicU64]>,
    /// The `WcOpcode` of each send request in flight (empty for a receive queue).
    ops: Box<[AtomicU8]>,
    /// Sequence number of the oldest request not yet retired by a polled completion.
    retired: AtomicU64,
}

impl WqTrack {
    /// A record for a queue of `depth` requests.
    pub(super) fn new(depth: u32, send: bool) -> WqTrack {
        let n = (depth.max(1) as usize).next_power_of_two();
        WqTrack {
            mask: n as u64 - 1,
            wr_ids: (0..n).map(|_| AtomicU64::new(0)).collect(),
            ops: if send {
                (0..n).map(|_| AtomicU8::new(0)).collect()
            } else {
                Box::new([])
            },
            retired: AtomicU64::new(0),
        }
    }

    /// How many of the requests posted so far (`posted` in all) still hold a slot.
    pub(super) fn outstanding(&self, posted: u64) -> u64 {
        posted.wrapping_sub(self.retired.load(Ordering::Acquire))
    }

    /// Records the caller's id (and operation) of the request with sequence number `seq`.
    pub(super) fn record(&self, seq: u64, wr_id: u64, op: WcOpcode) {
        let i = (seq & self.mask) as usize;
        self.wr_ids[i].store(wr_id, Ordering::Relaxed);
        if let Some(o) = self.ops.get(i) {
            o.store(op.to_raw() as u8, Ordering::Relaxed);
        }
        // Orders the stores above before the post that follows (the device's completion is
        // observed by the poller only after the post).
        std::sync::atomic::fence(Ordering::Release);
    }

    fn is_send(&self) -> bool {
        !self.ops.is_empty()
    }
}

/// Where a work queue's requests are announced: its slot in the completion queue's table.
#[derive(Clone, Copy, Debug)]
pub(super) struct WqSlot {
    index: u16,
    gen: u8,
}

impl WqSlot {
    /// The provider's wr_id for the request with sequence number `seq`.
    pub(super) fn wr_id(self, seq: u64) -> u64 {
        (u64::from(self.index) << SLOT_SHIFT)
            | (u64::from(self.gen) << GEN_SHIFT)
            | (seq & SEQ_MASK)
    }
}

/// The provider's `wr_id` of a receive posted on shared receive queue `id` into entry
/// `entry` of its table.
pub(super) fn srq_wr_id(id: u32, entry: u32) -> u64 {
    ((SRQ_SLOT as u64) << SLOT_SHIFT)
        | ((u64::from(id) & SRQ_ENTRY_MASK) << SRQ_ENTRY_BITS)
        | (u64::from(entry) & SRQ_ENTRY_MASK)
}

/// The shared receive queue's id and entry that a provider `wr_id` names, if it is the
/// `wr_id` of a shared receive.
fn srq_entry_of(wr_id: u64) -> Option<(u32, usize)> {
    if (wr_id >> SLOT_SHIFT) as usize != SRQ_SLOT {
        return None;
    }
    let id = ((wr_id >> SRQ_ENTRY_BITS) & SRQ_ENTRY_MASK) as u32;
    Some((id, (wr_id & SRQ_ENTRY_MASK) as usize))
}

/// The caller-side record of a shared receive queue: the caller's `wr_id` of each receive
/// from its post until its completion is polled, in a table of `depth` entries, and how
/// many entries are taken. Posting (serialised by the queue's owner) takes free entries;
/// any completion queue's poller frees the entry of the receive it polls.
pub(super) struct SrqTrack {
    /// The queue's process-wide id (24 bits), carried in its receives' `wr_id`s.
    id: u32,
    /// The caller's `wr_id` of each entry's receive.
    wr_ids: Box<[AtomicU64]>,
    /// Whether each entry holds a receive posted and not yet polled.
    taken: Box<[AtomicBool]>,
    /// How many entries are taken.
    outstanding: AtomicU32,
    /// False once the queue is destroyed: with no entry taken, no completion can name it
    /// any more and completion queues forget it.
    live: AtomicBool,
}

impl SrqTrack {
    /// A record of `depth` entries (at most [`SRQ_MAX_ENTRIES`]) for a queue with a fresh id.
    pub(super) fn new(depth: u32) -> SrqTrack {
        static NEXT_ID: AtomicU32 = AtomicU32::new(0);
        let n = depth.clamp(1, SRQ_MAX_ENTRIES) as usize;
        SrqTrack {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed) & SRQ_ENTRY_MASK as u32,
            wr_ids: (0..n).map(|_| AtomicU64::new(0)).collect(),
            taken: (0..n).map(|_| AtomicBool::new(false)).collect(),
            outstanding: AtomicU32::new(0),
            live: AtomicBool::new(true),
        }
    }

    /// The queue's id.
    pub(super) fn id(&self) -> u32 {
        self.id
    }

    /// How many receives are posted and not yet polled.
    pub(super) fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Takes a free entry for a receive with the caller's `wr_id`, searching from `*cursor`
    /// (which moves past it); None if every entry is taken. Only one thread at a time may
    /// take entries (the queue's post lock); any may free them.
    pub(super) fn take(&self, cursor: &mut usize, wr_id: u64) -> Option<u32> {
        let n = self.taken.len();
        for k in 0..n {
            let i = (*cursor + k) % n;
            if !self.taken[i].load(Ordering::Acquire) {
                self.wr_ids[i].store(wr_id, Ordering::Relaxed);
                self.taken[i].store(true, Ordering::Relaxed);
                self.outstanding.fetch_add(1, Ordering::Relaxed);
                *cursor = (i + 1) % n;
                // Orders the stores above before the post that follows (the device's
                // completion is observed by a poller only after the post).
                std::sync::atomic::fence(Ordering::Release);
                return Some(i as u32);
            }
        }
        None
    }

    /// Frees `entry` and returns the caller's `wr_id` of its receive; None if the entry is
    /// not taken (a completion naming no receive posted). The caller has ordered its read
    /// of the completion before this call (an acquire fence).
    pub(super) fn free(&self, entry: usize) -> Option<u64> {
        let taken = self.taken.get(entry)?;
        if !taken.load(Ordering::Acquire) {
            return None;
        }
        let wr_id = self.wr_ids[entry].load(Ordering::Relaxed);
        taken.store(false, Ordering::Release);
        self.outstanding.fetch_sub(1, Ordering::Release);
        Some(wr_id)
    }

    /// Marks the queue destroyed.
    pub(super) fn set_dead(&self) {
        self.live.store(false, Ordering::Release);
    }

    /// Whether no completion can name the queue any more: destroyed, no entry taken.
    fn is_done(&self) -> bool {
        !self.live.load(Ordering::Acquire) && self.outstanding() == 0
    }
}

#[derive(Default)]
struct Table {
    entries: Vec<(u8, Option<Arc<WqTrack>>)>,
    cursor: usize,
    /// The shared receive queues whose receives may complete here.
    srqs: Vec<Arc<SrqTrack>>,
}

/// The shared part of a completion queue: the device object and its work queue table.
pub(super) struct CqInner {
    pub(super) cq: *mut ibv_cq,
    /// The queue's completion channel (non-blocking), or null if the device gave none.
    channel: *mut ibv_comp_channel,
    table: Mutex<Table>,
    /// Set by the monitor on `IBV_EVENT_CQ_ERR`: the queue overflowed.
    overrun: Arc<AtomicBool>,
    ctx: Arc<Context>,
}

// SAFETY: an ibv_cq may be used from any thread; only the owner of the VerbsCq polls it
// (poll takes `&mut`), and queue pairs only pass the pointer to rdma_create_qp.
unsafe impl Send for CqInner {}
// SAFETY: as above; the table is behind a mutex.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        if let Some(m) = monitor() {
            m.unwatch_cq(self.cq);
        }
        self.free_srq_entries();
        // SAFETY: every queue pair using the queue holds an Arc of this value, so all are
        // destroyed; the queue is destroyed once (libibverbs waits for the monitor to
        // acknowledge any event of it already read). Every completion event read from the
        // channel was acknowledged at once (`take_notifications`).
        unsafe { ibv_destroy_cq(self.cq) };
        if !self.channel.is_null() {
            // SAFETY: the channel's only queue is destroyed just above.
            unsafe { ibv_destroy_comp_channel(self.channel) };
        }
    }
}

impl CqInner {
    /// Gives `track` a slot; its requests are posted under that slot's ids.
    pub(super) fn register(&self, track: Arc<WqTrack>) -> Result<WqSlot, FabricError> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let n = t.entries.len();
        // Reuse slots round-robin, so a freed slot's late completions stay recognisable
        // for as long as possible.
        for k in 0..n {
            let i = (t.cursor + k) % n;
            if t.entries[i].1.is_none() {
                let gen = t.entries[i].0.wrapping_add(1);
                t.entries[i] = (gen, Some(track));
                t.cursor = (i + 1) % n.max(1);
                return Ok(WqSlot {
                    index: i as u16,
                    gen,
                });
            }
        }
        if n >= MAX_SLOTS {
            return Err(FabricError::Exhausted(
                "work queues on one completion queue",
            ));
        }
        t.entries.push((0, Some(track)));
        t.cursor = 0;
        Ok(WqSlot {
            index: n as u16,
            gen: 0,
        })
    }

    /// Lets completions of `srq`'s receives be polled here (a queue pair made with it
    /// takes this queue as its receive completion queue). The queue keeps the record until
    /// the shared queue is destroyed and none of its receives is outstanding.
    pub(super) fn register_srq(&self, srq: &Arc<SrqTrack>) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.srqs.retain(|s| !s.is_done());
        if !t.srqs.iter().any(|s| Arc::ptr_eq(s, srq)) {
            t.srqs.push(srq.clone());
        }
    }

    fn lookup_srq(&self, id: u32) -> Option<Arc<SrqTrack>> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.srqs
            .iter()
            .find(|s| s.id() == id && !s.is_done())
            .cloned()
    }

    /// Polls what is left on a queue about to be destroyed that served shared receive
    /// queues, and frees the entries of their receives among it: the receives were taken
    /// from the shared queue, and nobody will poll them now.
    fn free_srq_entries(&mut self) {
        let srqs = {
            let t = self.table.get_mut().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut t.srqs)
        };
        if srqs.is_empty() {
            return;
        }
        let poll_fn = self.ctx.ops.poll_cq;
        let mut raw = MaybeUninit::<[ibv_wc; POLL_BATCH]>::uninit();
        loop {
            // SAFETY: the queue is live (destroyed after this) and polled by nobody else (the
            // last holder is dropping it); `raw` has room for POLL_BATCH entries.
            let got = unsafe { poll_fn(self.cq, POLL_BATCH as i32, raw.as_mut_ptr().cast()) };
            if got <= 0 {
                return;
            }
            std::sync::atomic::fence(Ordering::Acquire);
            for k in 0..(got as usize).min(POLL_BATCH) {
                // SAFETY: the provider initialised the first `got` entries of the array.
                let r = unsafe { &*raw.as_ptr().cast::<ibv_wc>().add(k) };
                if let Some((id, entry)) = srq_entry_of(r.wr_id) {
                    if let Some(t) = srqs.iter().find(|s| s.id() == id) {
                        t.free(entry);
                    }
                }
            }
        }
    }

    /// Frees a slot given by [`register`](Self::register).
    pub(super) fn deregister(&self, slot: WqSlot) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = t.entries.get_mut(usize::from(slot.index)) {
            if e.0 == slot.gen {
                e.1 = None;
            }
        }
    }

    fn lookup(&self, index: usize, gen: u8) -> Option<Arc<WqTrack>> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        match t.entries.get(index) {
            Some((g, Some(track))) if *g == gen => Some(track.clone()),
            _ => None,
        }
    }
}

/// A completion queue (`struct ibv_cq`), polled with `ibv_poll_cq` in batches.
pub struct VerbsCq {
    pub(super) inner: Arc<CqInner>,
    poll_fn: PollCqFn,
    depth: u32,
    /// The `wc_flags` bits that announce an invalidated rkey (see `Context`).
    with_inv_flags: u32,
    /// The poller's own copy of the table, refreshed (under the table's lock) only when a
    /// completion names a slot or generation it does not know: the hot path takes no lock.
    cache: Vec<Option<(u8, Arc<WqTrack>)>>,
    /// The poller's copy of the shared receive queues of the table, refreshed likewise.
    srq_cache: Vec<Arc<SrqTrack>>,
}

impl VerbsCq {
    pub(super) fn new(ctx: &Arc<Context>, min_depth: u32) -> Result<VerbsCq, FabricError> {
        let want = i32::try_from(min_depth.max(1))
            .map_err(|_| FabricError::InvalidArgument("completion queue depth"))?;
        let channel = comp_channel(ctx);
        // SAFETY: the context is open; the channel is null or open on this context; vector 0.
        let cq = unsafe { ibv_create_cq(ctx.ctx, want, std::ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            let e = FabricError::last_os("ibv_create_cq");
            if !channel.is_null() {
                // SAFETY: the channel was created above and serves no queue.
                unsafe { ibv_destroy_comp_channel(channel) };
            }
            return Err(e);
        }
        // SAFETY: `cq` is the queue just created; `cqe` holds the granted size.
        let depth = unsafe { (*cq).cqe }.max(0) as u32;
        let overrun = Arc::new(AtomicBool::new(false));
        if let Some(m) = monitor() {
            m.watch_cq(cq, &overrun);
        }
        Ok(VerbsCq {
            inner: Arc::new(CqInner {
                cq,
                channel,
                table: Mutex::new(Table::default()),
                overrun,
                ctx: ctx.clone(),
            }),
            poll_fn: ctx.ops.poll_cq,
            depth,
            with_inv_flags: ctx.with_inv_flags,
            cache: Vec::new(),
            srq_cache: Vec::new(),
        })
    }

    /// The work queue of a slot and generation, from the cache (no reference count
    /// traffic on the hot path) or, on a miss, from the table.
    fn track(&mut self, index: usize, gen: u8) -> Option<&WqTrack> {
        let hit = matches!(self.cache.get(index), Some(Some((g, _))) if *g == gen);
        if !hit {
            let t = self.inner.lookup(index, gen)?;
            if self.cache.len() <= index {
                self.cache.resize(index + 1, None);
            }
            self.cache[index] = Some((gen, t));
        }
        self.cache[index].as_ref().map(|(_, t)| &**t)
    }

    /// The caller's completion for a device completion; None if it belongs to a work
    /// queue that no longer exists.
    fn translate(&mut self, raw: &ibv_wc) -> Option<Wc> {
        let index = (raw.wr_id >> SLOT_SHIFT) as usize;
        if index == SRQ_SLOT {
            return self.translate_srq(raw);
        }
        let gen = (raw.wr_id >> GEN_SHIFT) as u8;
        let seq40 = raw.wr_id & SEQ_MASK;
        let with_inv_flags = self.with_inv_flags;
        let track = self.track(index, gen)?;
        std::sync::atomic::fence(Ordering::Acquire);
        let retired = track.retired.load(Ordering::Relaxed);
        let seq = retired.wrapping_add(seq40.wrapping_sub(retired) & SEQ_MASK);
        let i = (seq & track.mask) as usize;
        let wr_id = track.wr_ids[i].load(Ordering::Relaxed);
        let posted_op = match track.ops.get(i) {
            Some(o) => WcOpcode::from_raw(u32::from(o.load(Ordering::Relaxed))),
            None => Some(WcOpcode::Recv),
        };
        // Completions of one queue arrive in posting order: this one retires every
        // earlier request of the queue (unsignaled sends complete silently).
        track.retired.store(seq.wrapping_add(1), Ordering::Release);
        let is_send = track.is_send();
        Some(completion(raw, wr_id, posted_op, is_send, with_inv_flags))
    }

    /// The caller's completion for a device completion of a shared receive queue's
    /// receive; None if it names no receive of a queue this completion queue knows.
    fn translate_srq(&mut self, raw: &ibv_wc) -> Option<Wc> {
        let (id, entry) = srq_entry_of(raw.wr_id)?;
        let with_inv_flags = self.with_inv_flags;
        let track = self.srq_track(id)?;
        std::sync::atomic::fence(Ordering::Acquire);
        let wr_id = track.free(entry)?;
        Some(completion(
            raw,
            wr_id,
            Some(WcOpcode::Recv),
            false,
            with_inv_flags,
        ))
    }

    /// The record of shared receive queue `id`, from the poller's copy or, on a miss, from
    /// the table (the copy then forgets queues that are done). A queue that is done does
    /// not match: its id (from a 24-bit counter) may have been given to a newer one.
    fn srq_track(&mut self, id: u32) -> Option<&SrqTrack> {
        let found = self
            .srq_cache
            .iter()
            .position(|s| s.id() == id && !s.is_done());
        let pos = match found {
            Some(i) => i,
            None => {
                let t = self.inner.lookup_srq(id)?;
                self.srq_cache.retain(|s| !s.is_done());
                self.srq_cache.push(t);
                self.srq_cache.len() - 1
            }
        };
        Some(&*self.srq_cache[pos])
    }
}

/// The caller's completion with `wr_id` for the device's `raw`; `posted_op` is the
/// operation posted (for a failed completion, whose `opcode` is undefined), `is_send`
/// whether it was a send request.
fn completion(
    raw: &ibv_wc,
    wr_id: u64,
    posted_op: Option<WcOpcode>,
    is_send: bool,
    with_inv_flags: u32,
) -> Wc {
    let status = WcStatus::from_raw(raw.status).unwrap_or(WcStatus::GeneralErr);
    let mut wc = Wc {
        wr_id,
        status,
        opcode: posted_op.unwrap_or_default(),
        byte_len: 0,
        imm: None,
        invalidated_rkey: None,
        qp_num: raw.qp_num,
        vendor_err: raw.vendor_err,
    };
    if status.is_ok() {
        if let Some(op) = WcOpcode::from_raw(raw.opcode) {
            wc.opcode = op;
        }
        wc.byte_len = raw.byte_len;
        let flags = raw.wc_flags;
        if flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate data.
            wc.imm = Some(u32::from_be(unsafe {
                raw.imm_data_invalidated_rkey_union.imm_data
            }));
        }
        if flags & with_inv_flags != 0 {
            // SAFETY: with IBV_WC_WITH_INV the union holds the invalidated rkey.
            wc.invalidated_rkey =
                Some(unsafe { raw.imm_data_invalidated_rkey_union.invalidated_rkey });
        }
    } else if !is_send {
        wc.opcode = WcOpcode::Recv;
    }
    wc
}

impl core::fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsCq")
            .field("depth", &self.depth)
            .finish()
    }
}

impl CompletionQueue for VerbsCq {
    fn poll(&mut self, out: &mut [Wc]) -> Result<usize, CqError> {
        if self.inner.overrun.load(Ordering::Relaxed) {
            return Err(CqError::Overrun);
        }
        let mut n = 0;
        let mut raw = MaybeUninit::<[ibv_wc; POLL_BATCH]>::uninit();
        while n < out.len() {
            let want = (out.len() - n).min(POLL_BATCH);
            // SAFETY: the queue is live while `inner` is; `raw` has room for `want`
            // entries, which the provider writes before returning their number.
            let got =
                unsafe { (self.poll_fn)(self.inner.cq, want as i32, raw.as_mut_ptr().cast()) };
            if got < 0 {
                if n > 0 {
                    return Ok(n);
                }
                return Err(CqError::Os(if got == -1 { errno() } else { -got }));
            }
            let got = (got as usize).min(want);
            for k in 0..got {
                // SAFETY: the provider initialised the first `got` entries of the array.
                let r = unsafe { &*raw.as_ptr().cast::<ibv_wc>().add(k) };
                if let Some(wc) = self.translate(r) {
                    out[n] = wc;
                    n += 1;
                }
            }
            if got < want {
                break;
            }
        }
        Ok(n)
    }

    fn depth(&self) -> u32 {
        self.depth
    }

    fn arm(&mut self) -> Result<bool, CqError> {
        if self.inner.channel.is_null() {
            return Ok(false);
        }
        // SAFETY: the queue is live while `inner` is and has a completion channel.
        match unsafe { ibv_req_notify_cq(self.inner.cq, 0) } {
            0 => Ok(true),
            rc => Err(CqError::Os(if rc < 0 { errno() } else { rc })),
        }
    }

    fn notify_fd(&self) -> Option<BorrowedFd<'_>> {
        if self.inner.channel.is_null() {
            return None;
        }
        // SAFETY: the channel is open while `inner` lives, which outlives the borrow of
        // `self`; its descriptor is the channel's own.
        Some(unsafe { BorrowedFd::borrow_raw((*self.inner.channel).fd) })
    }

    fn take_notifications(&mut self) -> u32 {
        if self.inner.channel.is_null() {
            return 0;
        }
        let mut n = 0u32;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: the channel is open and non-blocking: the call returns -1 (EAGAIN) at
            // once when no event is queued; the out-pointers are locals.
            if unsafe { ibv_get_cq_event(self.inner.channel, &mut cq, &mut ctx) } != 0 {
                break;
            }
            n = n.saturating_add(1);
        }
        if n > 0 {
            // SAFETY: `n` events of this queue (its channel serves no other) were read above
            // and not yet acknowledged.
            unsafe { ibv_ack_cq_events(self.inner.cq, n) };
        }
        n
    }
}

/// A non-blocking completion channel on `ctx`, or null if the device refuses one (the
/// queue then cannot notify: its users poll).
fn comp_channel(ctx: &Context) -> *mut ibv_comp_channel {
    // SAFETY: the context is open.
    let ch = unsafe { ibv_create_comp_channel(ctx.ctx) };
    if ch.is_null() {
        return ch;
    }
    // SAFETY: `ch` was just created; its descriptor is open.
    if set_nonblocking(unsafe { (*ch).fd }, "fcntl(comp channel)").is_err() {
        // SAFETY: the channel serves no queue yet.
        unsafe { ibv_destroy_comp_channel(ch) };
        return std::ptr::null_mut();
    }
    ch
}
