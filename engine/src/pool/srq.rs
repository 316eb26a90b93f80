//! Receive buffers that a server's connections share through a shared receive queue
//! ([`SharedReceiveQueue`]): each connection owns no receive buffer of its own, and the
//! receives posted cover the credits granted on every connection together.
//!
//! # Credits and receives (RFC 8166 §3.3.1)
//!
//! A responder must never grant a credit that no posted receive backs. With one receive
//! queue per connection that is a per-connection count; with a shared one it is a sum:
//! every connection admitted reserves its grant plus its spare receives here
//! ([`SharedRecvs::admit`]), a grant is raised only after the receives that back it are
//! registered and posted (`admit` again), and grants are never lowered. So the
//! receives registered are always at least the sum of the reservations plus
//! [`SrqConfig::headroom`], and every Call's receive is posted again before its reply
//! leaves (the connections' flush order), so that a Call the grant allows always finds
//! one. The headroom covers the moments between a burst of Calls and the poll that reposts
//! their receives, when the queue holds fewer. A connection that sends beyond its grant
//! takes receives the others' grants need: the responder ends it (`responder`).
//!
//! # Ownership of a receive buffer
//!
//! A buffer is free (registered, on its chunk's free stack), posted (the queue holds it)
//! or held (a connection's Call is in it). Its state word moves posted → held when a
//! connection takes it from a completion ([`SharedRecvs::take`]): one compare-and-swap, so
//! a completion naming a buffer that is not posted (a duplicate, or a forged `wr_id`) gets
//! nothing. Posting moves it back.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::{Buf, PoolConfig, PoolError, PoolShared};
use crate::fabric::{
    Access, FabricError, MemoryRegion, PostError, ProtectionDomain, Provider, RecvWr, Sge,
    SharedReceiveQueue,
};
use crate::wrid::{self, Kind};

const FREE: u8 = 0;
const POSTED: u8 = 1;
const HELD: u8 = 2;

/// Receives posted per call to the queue.
const POST_BATCH: usize = 32;

/// The sizes of a server's shared receive queues, and how many it keeps (one per worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqConfig {
    /// Bytes of a receive buffer (the inline threshold this end receives).
    pub recv_size: usize,
    /// The most receives the queue holds: the bound on the sum of the reservations.
    pub max_recvs: u32,
    /// Receives registered and posted beyond the reservations.
    pub headroom: u32,
    /// Receives registered at a time when the queue must grow.
    pub per_chunk: u32,
    /// How many queues of these sizes a [`Share`](crate::pool::share::Share) keeps (one per
    /// worker).
    pub queues: u32,
}

impl SrqConfig {
    fn pool_config(&self) -> PoolConfig {
        PoolConfig::new(self.recv_size, self.per_chunk, Access::LOCAL_WRITE)
    }

    /// Checks the sizes.
    pub fn validate(&self) -> Result<(), PoolError> {
        self.pool_config().layout()?;
        if !(1..=1024).contains(&self.queues) {
            return Err(PoolError::InvalidConfig(
                "shared receive queues: 1 ..= 1024",
            ));
        }
        if self.headroom == 0 || self.headroom >= self.max_recvs {
            return Err(PoolError::InvalidConfig(
                "the headroom of a shared receive queue must be 1 ..= max_recvs - 1",
            ));
        }
        if self.max_recvs >= 1 << 20 {
            return Err(PoolError::InvalidConfig(
                "a shared receive queue holds fewer than 2^20 receives",
            ));
        }
        Ok(())
    }
}

/// Why [`SharedRecvs::admit`] reserved nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SrqError {
    /// The queue would hold more than [`SrqConfig::max_recvs`].
    Full,
    /// Registering or posting receives failed.
    Fabric(String),
}

/// Why registering and posting more receives stopped (`SharedRecvs::cover`).
enum Growth {
    /// Every chunk of the queue is registered.
    Full,
    /// Registering a chunk failed.
    Pool(PoolError),
    /// The queue refused a receive.
    Post(PostError),
}

impl From<Growth> for SrqError {
    fn from(g: Growth) -> SrqError {
        match g {
            Growth::Full => SrqError::Full,
            Growth::Pool(e) => SrqError::Fabric(e.to_string()),
            Growth::Post(e) => SrqError::Fabric(e.to_string()),
        }
    }
}

impl core::fmt::Display for SrqError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SrqError::Full => f.write_str("the shared receive queue is full"),
            SrqError::Fabric(e) => write!(f, "shared receive queue: {e}"),
        }
    }
}

impl std::error::Error for SrqError {}

/// A snapshot of a [`SharedRecvs`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqStats {
    /// Receives reserved by the connections (grants and spares).
    pub reserved: u32,
    /// Receive buffers registered.
    pub registered: u32,
    /// Their registered bytes.
    pub bytes: u64,
    /// Receives held by Calls now.
    pub held: u32,
}

impl SrqStats {
    /// The sums of two queues' figures (a server's queues together).
    pub fn plus(self, other: SrqStats) -> SrqStats {
        SrqStats {
            reserved: self.reserved + other.reserved,
            registered: self.registered + other.registered,
            bytes: self.bytes + other.bytes,
            held: self.held + other.held,
        }
    }
}

/// A shared receive queue and its buffers; see the module documentation.
pub struct SharedRecvs<P: Provider> {
    /// Declared first: destroyed before the buffers its receives point into.
    srq: P::Srq,
    config: SrqConfig,
    /// Buffers registered so far: `chunks[..len]`, each `per_chunk` buffers.
    chunks: Box<[OnceLock<Arc<PoolShared<P>>>]>,
    len: AtomicU32,
    /// Per buffer id: FREE, POSTED or HELD.
    state: Box<[AtomicU8]>,
    /// Receives reserved by the connections.
    reserved: AtomicU32,
    /// Serializes growth (registration and the first posts), never taken by a Call.
    growing: Mutex<()>,
    /// Free buffers waiting on their chunks' free stacks for a post the queue refused for
    /// now (a soft queue whose next slot is still being consumed says `QueueFull`).
    pending: AtomicU32,
}

impl<P: Provider> SharedRecvs<P> {
    /// A queue of `config.max_recvs` receives in `pd`, none registered yet.
    pub fn new(pd: &P::Pd, config: SrqConfig) -> Result<SharedRecvs<P>, PoolError> {
        config.validate()?;
        let srq = pd.create_srq(config.max_recvs, 1)?;
        // A device may grant more than asked (rxe rounds up); never count on more.
        let config = SrqConfig {
            max_recvs: config.max_recvs.min(srq.depth().max(config.headroom + 1)),
            ..config
        };
        let chunks = config.max_recvs.div_ceil(config.per_chunk) as usize;
        let recvs = SharedRecvs {
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            len: AtomicU32::new(0),
            state: (0..chunks as u32 * config.per_chunk)
                .map(|_| AtomicU8::new(FREE))
                .collect(),
            reserved: AtomicU32::new(0),
            growing: Mutex::new(()),
            pending: AtomicU32::new(0),
            config,
            srq,
        };
        // The headroom's receives, and a chunk more for the first connections'
        // reservations, are registered and posted now, when the server starts, so that
        // accepting its first connections registers nothing: registering them there took
        // 30 to 60 ms of a 70 ms accept in the soft-RoCE guest.
        let first = config.headroom + config.per_chunk.min(config.max_recvs - config.headroom);
        recvs.cover_to(pd, first).map_err(|e| match e {
            Growth::Full => PoolError::InvalidConfig("the headroom fills the shared receive queue"),
            Growth::Pool(e) => e,
            Growth::Post(_) => PoolError::Fabric(FabricError::InvalidArgument(
                "the shared receive queue refused its first receives",
            )),
        })?;
        Ok(recvs)
    }

    /// The queue, for [`QpInit::srq`](crate::fabric::QpInit).
    pub fn srq(&self) -> &P::Srq {
        &self.srq
    }

    /// The sizes.
    pub fn config(&self) -> &SrqConfig {
        &self.config
    }

    /// Registered bytes per receive buffer (its size at its stride).
    pub fn stride(&self) -> u64 {
        self.config
            .pool_config()
            .layout()
            .map_or(0, |l| l.stride as u64)
    }

    /// Reserves `n` receives for a connection (its grant and spares at accept, or the
    /// receives behind a raised grant), registering (in
    /// `pd`, the queue's) and posting more if the reservations and the headroom need them.
    pub fn admit(&self, pd: &P::Pd, n: u32) -> Result<(), SrqError> {
        let max = self.config.max_recvs - self.config.headroom;
        self.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                r.checked_add(n).filter(|&t| t <= max)
            })
            .map_err(|_| SrqError::Full)?;
        if let Err(e) = self.cover(pd) {
            self.reserved.fetch_sub(n, Ordering::AcqRel);
            return Err(e.into());
        }
        Ok(())
    }

    /// Gives back `n` receives a connection reserved (it is gone). Its buffers stay
    /// registered and posted, for the next connections.
    pub fn release(&self, n: u32) {
        let _ = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some(r.saturating_sub(n))
            });
    }

    /// Registers and posts receives until the reservations and the headroom are covered.
    fn cover(&self, pd: &P::Pd) -> Result<(), Growth> {
        self.cover_to(
            pd,
            self.reserved.load(Ordering::Acquire) + self.config.headroom,
        )
    }

    /// Registers and posts receives, a chunk at a time, until at least `want` are
    /// registered.
    fn cover_to(&self, pd: &P::Pd, want: u32) -> Result<(), Growth> {
        if self.registered() >= want {
            return Ok(());
        }
        let _guard = self.growing.lock().unwrap_or_else(|p| p.into_inner());
        while self.registered() < want {
            let n = self.len.load(Ordering::Acquire);
            let Some(entry) = self.chunks.get(n as usize) else {
                return Err(Growth::Full);
            };
            let chunk = PoolShared::<P>::create_tagged(pd, self.config.pool_config(), n)
                .map_err(Growth::Pool)?;
            let _ = entry.set(chunk);
            self.len.store(n + 1, Ordering::Release);
            let first = n * self.config.per_chunk;
            let ids: Vec<u32> = (first..first + self.config.per_chunk).collect();
            self.post_or_keep(&ids).map_err(Growth::Post)?;
        }
        Ok(())
    }

    /// Receive buffers registered so far.
    fn registered(&self) -> u32 {
        self.len.load(Ordering::Acquire) * self.config.per_chunk
    }

    /// Takes the buffer of the receive `wr_id` names (a completion's): `None` unless the
    /// queue holds it (posted, not yet taken).
    #[inline]
    pub fn take(&self, wr_id: u64) -> Option<Buf<P>> {
        if wrid::kind(wr_id) != Some(Kind::SrqRecv) {
            return None;
        }
        let id = wrid::index(wr_id);
        let state = self.state.get(id as usize)?;
        state
            .compare_exchange(POSTED, HELD, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        let chunk = self.chunks[(id / self.config.per_chunk) as usize].get()?;
        Some(chunk.buf(id % self.config.per_chunk))
    }

    /// The id of `buf`, one of this queue's (taken from it): its chunk is the one its pool's
    /// tag names, checked to be the very chunk (no search: a queue of 16,384 receives has
    /// 64 chunks, and a repost's search through them was on every Call's path).
    fn id_of(&self, buf: &Buf<P>) -> Option<u32> {
        let k = buf.pool_tag();
        let chunk = self.chunks.get(k as usize)?.get()?;
        core::ptr::eq(buf.shared.as_ptr(), Arc::as_ptr(chunk))
            .then(|| k * self.config.per_chunk + buf.index)
    }

    /// Posts `bufs` (taken from this queue) again, in batches, after any free buffers whose
    /// post was refused for now. A buffer the queue refuses for now waits on its chunk's
    /// free stack for the next post; any other refusal is returned (the queue is broken).
    /// A buffer that is not this queue's is dropped.
    pub fn repost(&self, bufs: impl IntoIterator<Item = Buf<P>>) -> Result<(), PostError> {
        if self.pending.load(Ordering::Relaxed) != 0 {
            self.post_pending()?;
        }
        let mut ids = [0u32; POST_BATCH];
        let mut n = 0;
        let mut result = Ok(());
        for buf in bufs {
            let Some(id) = self.id_of(&buf) else {
                drop(buf);
                continue;
            };
            // The queue owns it from here on: its handle is not dropped (which would put it
            // on the chunk's free stack) but forgotten, and made again by `take`.
            core::mem::forget(buf);
            self.state[id as usize].store(FREE, Ordering::Relaxed);
            ids[n] = id;
            n += 1;
            if n == POST_BATCH {
                result = result.and(self.post_or_keep(&ids[..n]));
                n = 0;
            }
        }
        if n > 0 {
            result = result.and(self.post_or_keep(&ids[..n]));
        }
        result
    }

    /// [`repost`](Self::repost) of one buffer, the usual case when many connections each
    /// have one RPC in flight: one work request made from the buffer's own scatter-gather
    /// element, without a batch's arrays or a look-up of its place in the chunk.
    #[inline]
    pub fn repost_one(&self, buf: Buf<P>) -> Result<(), PostError> {
        if self.pending.load(Ordering::Relaxed) != 0 {
            self.post_pending()?;
        }
        let Some(id) = self.id_of(&buf) else {
            return Ok(());
        };
        let sge = buf.sge();
        // The queue owns it from here on (as in `repost`).
        core::mem::forget(buf);
        // Posted before the queue can hand it to a completion.
        self.state[id as usize].store(POSTED, Ordering::Release);
        let wr = RecvWr::new(
            wrid::pack(Kind::SrqRecv, id, 0),
            core::slice::from_ref(&sge),
        );
        match self.srq.post_recv(&wr) {
            Ok(()) => Ok(()),
            Err(error) => self.keep(&[id], error),
        }
    }

    /// Posts the free buffers `ids`; those the queue refuses for now wait on their chunks'
    /// free stacks (counted in `pending`).
    fn post_or_keep(&self, ids: &[u32]) -> Result<(), PostError> {
        match self.post_ids(ids) {
            Ok(()) => Ok(()),
            Err((posted, error)) => self.keep(&ids[posted..], error),
        }
    }

    /// The buffers `ids` the queue refused (`error`) wait on their chunks' free stacks
    /// (counted in `pending`) when the refusal is for now (a full queue); any other refusal
    /// is returned.
    #[cold]
    fn keep(&self, ids: &[u32], error: PostError) -> Result<(), PostError> {
        for &id in ids {
            self.state[id as usize].store(FREE, Ordering::Relaxed);
            let chunk = self.chunks[(id / self.config.per_chunk) as usize]
                .get()
                .expect("registered before its ids are posted");
            chunk.returns.push(id % self.config.per_chunk);
            self.pending.fetch_add(1, Ordering::Relaxed);
        }
        match error {
            PostError::QueueFull => Ok(()),
            e => Err(e),
        }
    }

    /// Posts the buffers waiting on the chunks' free stacks, until the queue refuses one
    /// for now (it waits again).
    #[cold]
    fn post_pending(&self) -> Result<(), PostError> {
        let n = self.len.load(Ordering::Acquire) as usize;
        for (k, chunk) in self.chunks[..n].iter().enumerate() {
            let Some(chunk) = chunk.get() else { continue };
            while let Some(index) = chunk.returns.pop() {
                let _ = self
                    .pending
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                        Some(p.saturating_sub(1))
                    });
                let id = k as u32 * self.config.per_chunk + index;
                if let Err((_, e)) = self.post_ids(core::slice::from_ref(&id)) {
                    self.state[id as usize].store(FREE, Ordering::Relaxed);
                    chunk.returns.push(index);
                    self.pending.fetch_add(1, Ordering::Relaxed);
                    return match e {
                        PostError::QueueFull => Ok(()),
                        e => Err(e),
                    };
                }
            }
        }
        Ok(())
    }

    /// The scatter-gather element of buffer `id` (registered).
    #[inline(always)]
    fn sge_of(&self, id: u32) -> Sge {
        let chunk = self.chunks[(id / self.config.per_chunk) as usize]
            .get()
            .expect("registered before its ids are posted");
        let (region, offset) = chunk.layout.locate(id % self.config.per_chunk);
        chunk.regions[region].sge(offset, chunk.layout.buf_size)
    }

    /// Posts the free buffers `ids`; on a refusal, how many were posted and why.
    fn post_ids(&self, ids: &[u32]) -> Result<(), (usize, PostError)> {
        let mut done = 0;
        for batch in ids.chunks(POST_BATCH) {
            let mut sges = [Sge::default(); POST_BATCH];
            for (sge, &id) in sges.iter_mut().zip(batch) {
                *sge = self.sge_of(id);
            }
            let mut wrs = [RecvWr::new(0, &[]); POST_BATCH];
            for ((wr, sge), &id) in wrs.iter_mut().zip(&sges).zip(batch) {
                // Posted before the queue can hand it to a completion.
                self.state[id as usize].store(POSTED, Ordering::Release);
                *wr = RecvWr::new(wrid::pack(Kind::SrqRecv, id, 0), core::slice::from_ref(sge));
            }
            if let Err(bad) = self.srq.post_recv_list(&wrs[..batch.len()]) {
                return Err((done + bad.index, bad.error));
            }
            done += batch.len();
        }
        Ok(())
    }

    /// Receives reserved by the connections now (grants and spares).
    pub fn reserved(&self) -> u32 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// A snapshot of the reservations and buffers.
    pub fn stats(&self) -> SrqStats {
        let registered = self.registered();
        let held = self.state[..registered as usize]
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) == HELD)
            .count() as u32;
        let bytes = (0..self.len.load(Ordering::Acquire) as usize)
            .filter_map(|k| self.chunks[k].get())
            .map(|c| c.bytes())
            .sum();
        SrqStats {
            reserved: self.reserved.load(Ordering::Relaxed),
            registered,
            bytes,
            held,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::soft::Soft;
    use crate::fabric::{Device, Provider};

    /// The headroom, and a chunk more, are registered and posted when the queue is made, so
    /// that the first connections' reservations register nothing (accept stays cheap); a
    /// reservation beyond them grows the queue by chunks.
    #[test]
    fn headroom_registered_at_creation_and_first_admit_registers_nothing() {
        let device = Soft::open_device(None).unwrap();
        let pd = device.alloc_pd().unwrap();
        let config = SrqConfig {
            recv_size: 1024,
            max_recvs: 256,
            headroom: 16,
            per_chunk: 32,
            queues: 1,
        };
        let recvs = SharedRecvs::<Soft>::new(&pd, config).unwrap();
        let fresh = recvs.stats();
        assert_eq!(
            fresh.registered, 64,
            "the headroom and a chunk, in whole chunks"
        );
        assert!(fresh.bytes >= 64 * 1024);
        assert_eq!(fresh.reserved, 0);
        // 48 more fit in the chunks registered already, in several reservations.
        for _ in 0..6 {
            recvs.admit(&pd, 8).unwrap();
            assert_eq!(recvs.stats().registered, 64);
            assert_eq!(recvs.stats().bytes, fresh.bytes);
        }
        // Beyond them, the queue grows.
        recvs.admit(&pd, 1).unwrap();
        assert_eq!(recvs.stats().registered, 96);
        recvs.release(49);
        assert_eq!(recvs.reserved(), 0);
    }
}
