//! Shared receive queues on verbs: `ibv_create_srq` in a protection domain, receives posted
//! with the provider's `post_srq_recv`, the limit armed with `ibv_modify_srq` and reported by
//! the monitor thread (`IBV_EVENT_SRQ_LIMIT_REACHED`).
//!
//! # What the device does, and what the caller sees
//!
//! - Receives are posted under provider `wr_id`s naming an entry of the queue's table
//!   (`cq.rs`, `SrqTrack`): a receive holds its entry, and a place in the queue's depth,
//!   from its post until its completion is polled on whichever completion queue it arrived
//!   (the fabric's queue-depth rule), so [`depth`](SharedReceiveQueue::depth) receives may
//!   be outstanding at once and the next post is refused with [`PostError::QueueFull`].
//! - A receive completes on the receive completion queue of the queue pair whose incoming
//!   Send consumed it, with that queue pair's `qp_num` (`ibv_wc.qp_num`).
//! - A queue pair made with the queue that goes to the error state flushes none of the
//!   queue's receives (rxe's `flush_recv_queue` returns at once for a queue pair with a
//!   shared receive queue; a NIC does the same): they stay posted for the other queue pairs,
//!   and the engine must expect no flush completion for them. A receive the queue pair was in
//!   the middle of filling is lost with it (rxe) and never completes.
//! - An empty queue answers an incoming Send with receiver-not-ready, as an empty receive
//!   queue of a queue pair does (`rnr_retry_count` 0: the sender's request fails).
//!
//! # Lifetime
//!
//! `ibv_destroy_srq` fails (EBUSY) while a queue pair uses the queue. Every queue pair made
//! with it keeps it (the rdma_cm connection holds a reference, like its protection domain),
//! so the queue is destroyed when its [`VerbsSrq`] and the last such queue pair are gone,
//! whichever goes last; its posted receives are released then. Should the device still
//! refuse, the queue is leaked (as a region that cannot be deregistered is): the device may
//! still reach its receives' buffers.

use std::mem::{self, MaybeUninit};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rdma_sys::*;

use super::chain::{check_recv_sges, post_chain, post_in_chunks, raw_recv_wr, CHUNK};
use super::context::PostSrqRecvFn;
use super::cq::{srq_wr_id, SrqTrack, SRQ_MAX_ENTRIES};
use super::mem::PdInner;
use super::monitor::monitor;
use super::sys::{errno, os_err};
use crate::fabric::{BadWr, FabricError, PostError, RecvWr, SharedReceiveQueue};

/// The device object, shared by the [`VerbsSrq`] and the rdma_cm connections of the queue
/// pairs made with it; the last holder destroys it.
pub(super) struct SrqInner {
    pub(super) srq: *mut ibv_srq,
    /// The table of the queue's receives, shared with the completion queues they complete on.
    pub(super) track: Arc<SrqTrack>,
    /// Set by the monitor on `IBV_EVENT_SRQ_LIMIT_REACHED`.
    limit_reached: Arc<AtomicBool>,
    /// The protection domain the queue was created in (freed after it).
    pub(super) pd: Arc<PdInner>,
}

// SAFETY: an ibv_srq may be used from any thread: the verbs taking it are thread-safe
// (libibverbs and its providers lock what needs it); the other fields are thread-safe.
unsafe impl Send for SrqInner {}
// SAFETY: as above; `&SrqInner` only passes the pointer to thread-safe verbs.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if let Some(m) = monitor() {
            m.unwatch_srq(self.srq);
        }
        self.track.set_dead();
        // On failure (EBUSY: a queue pair still uses it) nothing of the queue is freed, by
        // libibverbs or here: it is leaked, as the device may still reach its receives'
        // buffers.
        // SAFETY: the queue is destroyed once, by its last holder: every queue pair made
        // with it holds this value and was destroyed first, nothing posts to it any more, and
        // the monitor acknowledges at once any event of it that it read (libibverbs waits
        // for that).
        let _ = unsafe { ibv_destroy_srq(self.srq) };
    }
}

/// A verbs shared receive queue (`struct ibv_srq`), created in a protection domain with
/// [`ProtectionDomain::create_srq`](crate::fabric::ProtectionDomain::create_srq) and given
/// to queue pairs through [`QpInit::srq`](crate::fabric::QpInit::srq).
///
/// Every queue pair made with it keeps the device object alive: `ibv_destroy_srq` runs when
/// this handle and the last of them are gone (the engine drops the queue after its queue
/// pairs in any case). Should the device refuse (EBUSY) the queue is leaked, never freed
/// while the device may use it. Receives still posted then are released with it, without
/// completions.
pub struct VerbsSrq {
    pub(super) inner: Arc<SrqInner>,
    post_fn: PostSrqRecvFn,
    depth: u32,
    max_sge: u32,
    /// Where the search for a free entry of the table starts; the lock serialises posts.
    cursor: Mutex<usize>,
}

impl core::fmt::Debug for VerbsSrq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsSrq")
            .field("depth", &self.depth)
            .field("max_sge", &self.max_sge)
            .field("outstanding", &self.inner.track.outstanding())
            .finish()
    }
}

impl VerbsSrq {
    /// `ibv_create_srq` in `pd` for `max_wr` receives of `max_sge` elements, limit unarmed.
    pub(super) fn create(
        pd: &Arc<PdInner>,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<VerbsSrq, FabricError> {
        let ctx = &pd.ctx;
        if ctx.attr.max_srq_wr == 0 {
            return Err(FabricError::InvalidArgument(
                "the device has no shared receive queues",
            ));
        }
        if max_wr > ctx.attr.max_srq_wr || max_wr >= SRQ_MAX_ENTRIES {
            return Err(FabricError::InvalidArgument(
                "shared receive queue deeper than the device's max_srq_wr",
            ));
        }
        if max_sge > ctx.max_srq_sge {
            return Err(FabricError::InvalidArgument(
                "more scatter elements than the device's max_srq_sge",
            ));
        }
        let Some(post_fn) = ctx.ops.post_srq_recv else {
            return Err(FabricError::Os {
                call: "ibv_post_srq_recv",
                errno: libc::EOPNOTSUPP,
            });
        };
        let mut init = ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr: max_wr.max(1),
                max_sge: max_sge.max(1),
                srq_limit: 0,
            },
        };
        // SAFETY: the domain is live while the Arc is; `init` is valid for the call and
        // receives the granted sizes.
        let srq = unsafe { ibv_create_srq(pd.pd, &mut init) };
        if srq.is_null() {
            let e = errno();
            if e == libc::ENOMEM {
                return Err(FabricError::Exhausted("shared receive queues"));
            }
            return Err(FabricError::Os {
                call: "ibv_create_srq",
                errno: if e == 0 { libc::EIO } else { e },
            });
        }
        let mut granted = init.attr;
        // SAFETY: plain old data; all zeroes is valid and the call overwrites it.
        let mut q: ibv_srq_attr = unsafe { mem::zeroed() };
        // SAFETY: the queue was just created; `q` is a valid out-parameter.
        if unsafe { ibv_query_srq(srq, &mut q) } == 0 && q.max_wr > 0 {
            granted = q;
        }
        // A device that granted fewer than asked for is taken at its word: it holds no more.
        let depth = granted.max_wr.clamp(1, SRQ_MAX_ENTRIES - 1);
        let limit_reached = Arc::new(AtomicBool::new(false));
        if let Some(m) = monitor() {
            m.watch_srq(srq, &limit_reached);
        }
        Ok(VerbsSrq {
            inner: Arc::new(SrqInner {
                srq,
                track: Arc::new(SrqTrack::new(depth)),
                limit_reached,
                pd: pd.clone(),
            }),
            post_fn,
            depth,
            max_sge: granted.max_sge.max(max_sge),
            cursor: Mutex::new(0),
        })
    }

    /// Posts `wrs` (at most [`CHUNK`]) in one provider call, stopping before the first that
    /// cannot be posted now. Returns how many were posted, or the refused request's index
    /// and why. The caller holds the post lock (`cursor`).
    fn post_chunk(
        &self,
        cursor: &mut usize,
        wrs: &[RecvWr<'_>],
    ) -> Result<usize, (usize, PostError)> {
        let mut raw = MaybeUninit::<[ibv_recv_wr; CHUNK]>::uninit();
        let raw_p = raw.as_mut_ptr().cast::<ibv_recv_wr>();
        let mut entries = [0u32; CHUNK];
        let track = &self.inner.track;
        let free = self.depth.saturating_sub(track.outstanding()) as usize;
        let mut count: usize = 0;
        let mut refused = None;
        for (i, wr) in wrs.iter().take(CHUNK).enumerate() {
            if let Err(e) = check_recv_sges(wr, self.max_sge) {
                refused = Some((i, e));
                break;
            }
            // Fewer than `depth` taken leaves a free entry in the table of `depth`.
            let entry = match (i < free).then(|| track.take(cursor, wr.wr_id)) {
                Some(Some(e)) => e,
                _ => {
                    refused = Some((i, PostError::QueueFull));
                    break;
                }
            };
            entries[i] = entry;
            let w = raw_recv_wr(srq_wr_id(track.id(), entry), wr);
            // SAFETY: `i < CHUNK`, inside the array.
            unsafe { raw_p.add(i).write(w) };
            count += 1;
        }
        let (srq, post_srq_recv) = (self.inner.srq, self.post_fn);
        let post = |chain, bad: &mut _| {
            // libibverbs's providers serialise concurrent posts on one queue themselves
            // (rxe takes the queue's spinlock); here the post lock already does.
            // SAFETY: the queue is live while `inner` is; the chain's entries are
            // initialised and linked; their scatter lists (borrowed from `wrs`, `Sge` having
            // `ibv_sge`'s layout) outlive the call, and the provider copies them into its
            // queue before returning.
            unsafe { post_srq_recv(srq, chain, bad) }
        };
        // SAFETY: the array's first `count` entries are written above, their `next` null
        // (`raw_recv_wr`); `post` may be called with them.
        let (posted, outcome) = unsafe { post_chain(raw_p, count, refused, post) };
        // The entries of the requests the provider did not take are free again.
        for &e in &entries[posted..count] {
            track.free(e as usize);
        }
        outcome
    }
}

impl SharedReceiveQueue for VerbsSrq {
    /// `ibv_post_srq_recv` through the provider's operation, in chains of up to 16 built on
    /// the stack. Posts from several threads take turns on the queue's lock (the provider
    /// would serialise them anyway: rxe takes a spinlock per post).
    fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> Result<(), BadWr> {
        let mut cursor = self.cursor.lock().unwrap_or_else(|e| e.into_inner());
        post_in_chunks(wrs, |chunk| self.post_chunk(&mut cursor, chunk))
    }

    /// The `max_wr` the device granted (`ibv_query_srq` after creation; rxe rounds the one
    /// asked for up to a power of two, less one).
    fn depth(&self) -> u32 {
        self.depth
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`. A limit above the depth is
    /// [`FabricError::InvalidArgument`]. Without the monitor thread (no epoll) the event is
    /// never seen.
    fn arm_limit(&self, limit: u32) -> Result<(), FabricError> {
        if limit > self.depth {
            return Err(FabricError::InvalidArgument(
                "a limit beyond the shared receive queue's depth",
            ));
        }
        let mut attr = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: the queue is live while `inner` is; `attr` is valid for the call.
        let rc = unsafe {
            ibv_modify_srq(
                self.inner.srq,
                &mut attr,
                ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32,
            )
        };
        if rc != 0 {
            return Err(os_err("ibv_modify_srq", rc));
        }
        Ok(())
    }

    fn take_limit_event(&self) -> bool {
        self.inner.limit_reached.swap(false, Ordering::AcqRel)
    }
}
