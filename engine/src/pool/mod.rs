//! Buffer pools: fixed-size buffers carved from a few large memory regions registered once,
//! when the pool is built.
//!
//! # Shape
//!
//! A [`BufferPool`] belongs to one worker thread. It is [`Send`] (it is built on one thread
//! and moved to its worker) but not [`Sync`]: only its owner allocates and frees locally.
//! Its buffers are [`Buf`] handles: a pointer to the pool's shared state and an index, 16
//! bytes, neither `Copy` nor `Clone`, so holding a `Buf` is owning that buffer. Through it the
//! holder gets the buffer's scatter-gather element ([`Buf::sge`]), its remote address when
//! the pool's regions are remotely accessible ([`Buf::remote`]), copies in and out
//! ([`Buf::read_at`], [`Buf::write_at`]) and, under the fabric's rule, in-place views
//! ([`Buf::as_slice`], [`Buf::as_mut_slice`]).
//!
//! A buffer goes home one of three ways:
//!
//! - on the owner thread, [`BufferPool::free`] (or dropping a [`Lease`], the scoped guard of
//!   [`BufferPool::lease`]) pushes its index on the owner's free stack: a plain array with a
//!   length, sized for every buffer when the pool is built — no atomic instruction, no
//!   allocation;
//! - on any other thread, [`ReturnPath::send_back`] (or [`ReturnPath::send_back_all`] for a
//!   batch, one CAS for all) pushes it on the pool's lock-free return list;
//! - dropping a `Buf` anywhere does the same as `send_back`, so a buffer is never lost, but
//!   on the owner thread that costs an atomic read-modify-write that `free` avoids.
//!
//! The owner takes the whole return list with one `swap` when its free stack runs dry (in
//! [`BufferPool::alloc`]) and whenever it calls [`BufferPool::reclaim`] (say once per poll
//! loop, which costs one load of a cache line when nothing came back). When both are empty,
//! allocation fails with [`PoolError::Exhausted`]: back-pressure for the caller, never a
//! panic, a wait or an allocation.
//!
//! # Example
//!
//! ```
//! use rpcrdma_engine::fabric::soft::Soft;
//! use rpcrdma_engine::fabric::{Access, Device, Provider};
//! use rpcrdma_engine::pool::{BufferPool, PoolConfig, PoolError};
//!
//! let pd = Soft::open_device(None)?.alloc_pd()?;
//! let pool = BufferPool::<Soft>::new(&pd, PoolConfig::new(4096, 2, Access::LOCAL_WRITE))?;
//! let mut reply = pool.alloc()?;
//! reply.write_at(0, b"reply");
//! let _gather = [reply.sge_span(0, 5)]; // what a Send work request would name
//! let handed_off = pool.alloc()?;
//! assert!(matches!(pool.alloc(), Err(PoolError::Exhausted { capacity: 2 })));
//!
//! let back = pool.return_path();
//! std::thread::spawn(move || back.send_back(handed_off)).join().unwrap();
//! pool.free(reply); // after the Send's completion
//! assert_eq!(pool.reclaim(), 1);
//! assert_eq!(pool.available(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Counters
//!
//! The owner keeps its counters in relaxed atomics that only it writes (a load and a store,
//! no read-modify-write), so any thread may read a [`PoolStats`] snapshot through
//! [`BufferPool::stats`] or [`ReturnPath::stats`] without a lock.
//!
//! # Lifetime
//!
//! The regions live in the pool's shared state, which outlives every `Buf`: if the pool is
//! dropped while buffers are still out, it leaks its shared state (and so keeps the regions
//! registered) rather than leave those buffers dangling. A pool dropped with every buffer
//! home releases everything.

/// The default size of a large shared bulk buffer (`ConnConfig::bulk_size`): NFS's usual
/// 1 MiB transfer with room for its headers (a Long Call's Position-Zero chunk carries them
/// beside the data).
pub const DEFAULT_BULK_SIZE: u32 = (1 << 20) + 64 * 1024;

/// The default size of a small shared bulk buffer (`ConnConfig::slot_bulk_size`): chunks of
/// up to 64 KiB, with the headers a pull buffer holds beside them, use a credit's own buffers.
pub const DEFAULT_SLOT_BULK_SIZE: u32 = 68 * 1024;

mod buf;
pub mod loan;
mod return_list;
pub mod share;
pub mod srq;
#[cfg(test)]
mod tests;

use core::cell::Cell;
use core::fmt;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::fabric::{
    Access, FabricError, MemoryRegion, MemoryWindow, MwBind, ProtectionDomain, Provider,
    RemoteAddr, Sge,
};
// The pool's counters are written by its owner only: `bump` (plain loads and stores).
use crate::stats::bump;
use return_list::{ReturnList, END};

pub use buf::{Buf, Lease, ReturnPath};

/// Bytes of a cache line: the least padding between buffers.
const CACHE_LINE: usize = 64;
/// Bytes of a page: buffers aligned to a page or more are never padded.
const PAGE: usize = 4096;

/// How a [`BufferPool`] is laid out and registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Usable bytes of each buffer (the length of its [`Sge`]); at least 1, at most
    /// `u32::MAX`.
    pub buf_size: usize,
    /// Number of buffers; at least 1, at most [`PoolConfig::MAX_COUNT`].
    pub count: u32,
    /// Rights the regions are registered with: [`Access::LOCAL_WRITE`] for receive buffers
    /// and RDMA Read sinks, remote rights for buffers peers reach with the region's rkey,
    /// [`Access::MW_BIND`] for buffers exposed through memory windows.
    pub access: Access,
    /// Buffers start at multiples of this power of two (regions are page-aligned); the
    /// distance between buffers is `buf_size` rounded up to it, plus one `align` (at least a
    /// cache line) when that distance is a multiple of [`PoolConfig::SET_SPREAD`] and `align`
    /// is smaller than a page.
    pub align: usize,
    /// Largest region to register; the pool registers as few regions as fit the buffers
    /// under this limit (each holds a whole number of buffers).
    pub max_region_len: usize,
}

impl PoolConfig {
    /// The default [`align`](Self::align): a cache line, so no two buffers share one.
    pub const DEFAULT_ALIGN: usize = 64;
    /// The default [`max_region_len`](Self::max_region_len): 1 GiB.
    pub const DEFAULT_MAX_REGION_LEN: usize = 1 << 30;
    /// The largest number of buffers (`u32::MAX` marks the end of the return list).
    pub const MAX_COUNT: u32 = u32::MAX - 1;
    /// Buffer distances that are multiples of this many bytes are padded by one `align`
    /// (when `align` is under a page). Otherwise the first lines of all buffers (where
    /// every message header is written and read) would fall into the same few sets of the
    /// L1 cache (64 sets of 64-byte lines: a 4 KiB distance puts every buffer's first line
    /// in one set). Padded, consecutive buffers start in different sets.
    pub const SET_SPREAD: usize = 1024;

    /// `count` buffers of `buf_size` bytes registered with `access`, with the default
    /// alignment and region limit.
    pub const fn new(buf_size: usize, count: u32, access: Access) -> PoolConfig {
        PoolConfig {
            buf_size,
            count,
            access,
            align: Self::DEFAULT_ALIGN,
            max_region_len: Self::DEFAULT_MAX_REGION_LEN,
        }
    }

    /// The same configuration with buffers aligned to `align` bytes.
    pub const fn with_align(mut self, align: usize) -> PoolConfig {
        self.align = align;
        self
    }

    /// The same configuration with regions of at most `max_region_len` bytes.
    pub const fn with_max_region_len(mut self, max_region_len: usize) -> PoolConfig {
        self.max_region_len = max_region_len;
        self
    }

    /// Checks the configuration and computes where buffer `i` lives.
    fn layout(&self) -> Result<Layout, PoolError> {
        let buf_size = u32::try_from(self.buf_size).ok().filter(|&s| s > 0).ok_or(
            PoolError::InvalidConfig("buffer size must be 1 ..= u32::MAX bytes"),
        )?;
        if self.count == 0 || self.count > Self::MAX_COUNT {
            return Err(PoolError::InvalidConfig(
                "buffer count must be 1 ..= u32::MAX - 1",
            ));
        }
        if !self.align.is_power_of_two() {
            return Err(PoolError::InvalidConfig("alignment must be a power of two"));
        }
        let pad = self.align.max(CACHE_LINE);
        let stride = self
            .buf_size
            .checked_add(self.align - 1)
            .map(|s| s & !(self.align - 1))
            .and_then(|s| {
                if s % Self::SET_SPREAD == 0 && pad < PAGE {
                    s.checked_add(pad)
                } else {
                    Some(s)
                }
            })
            .ok_or(PoolError::InvalidConfig(
                "buffer size overflows when aligned",
            ))?;
        if self.max_region_len < stride {
            return Err(PoolError::InvalidConfig(
                "region limit smaller than one buffer",
            ));
        }
        stride
            .checked_mul(self.count as usize)
            .ok_or(PoolError::InvalidConfig("pool size overflows usize"))?;
        let per_region = (self.max_region_len / stride).min(self.count as usize) as u32;
        Ok(Layout {
            buf_size,
            stride,
            per_region,
            count: self.count,
        })
    }
}

/// Where the buffers are: buffer `i` is at byte `(i % per_region) * stride` of region
/// `i / per_region`.
#[derive(Clone, Copy, Debug)]
struct Layout {
    buf_size: u32,
    stride: usize,
    per_region: u32,
    count: u32,
}

impl Layout {
    /// Number of regions.
    fn regions(&self) -> u32 {
        self.count.div_ceil(self.per_region)
    }

    /// Length of region `r`.
    fn region_len(&self, r: u32) -> usize {
        let first = r * self.per_region;
        (self.count - first).min(self.per_region) as usize * self.stride
    }

    /// Region and byte offset of buffer `index`.
    #[inline]
    fn locate(&self, index: u32) -> (usize, usize) {
        if index < self.per_region {
            // The first region (the only one of most pools): no division on the hot paths.
            return (0, index as usize * self.stride);
        }
        let region = index / self.per_region;
        let slot = index % self.per_region;
        (region as usize, slot as usize * self.stride)
    }
}

/// Why a pool could not be built or could not hand out a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// Every buffer is out: none on the owner's free stack and none sent back. This is
    /// back-pressure: retry after completions have freed buffers.
    Exhausted {
        /// The pool's number of buffers.
        capacity: u32,
    },
    /// The configuration cannot be laid out.
    InvalidConfig(&'static str),
    /// Allocating and registering a region failed.
    Fabric(FabricError),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Exhausted { capacity } => {
                write!(
                    f,
                    "buffer pool exhausted: all {capacity} buffers are in use"
                )
            }
            PoolError::InvalidConfig(why) => write!(f, "invalid buffer pool configuration: {why}"),
            PoolError::Fabric(e) => write!(f, "registering the buffer pool failed: {e}"),
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoolError::Fabric(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FabricError> for PoolError {
    fn from(e: FabricError) -> Self {
        PoolError::Fabric(e)
    }
}

/// A snapshot of a pool's counters. Taken by another thread while the owner works, the
/// fields are each exact at some recent instant but not necessarily at the same one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PoolStats {
    /// Number of buffers.
    pub capacity: u32,
    /// Usable bytes of each buffer.
    pub buf_size: u32,
    /// Successful allocations.
    pub allocated: u64,
    /// Buffers freed onto the owner's free stack ([`BufferPool::free`], [`Lease`] drops).
    pub freed_local: u64,
    /// Buffers taken back from the return list (sent back, or dropped, as [`Buf`]s).
    pub returned_remote: u64,
    /// Allocations refused with [`PoolError::Exhausted`].
    pub exhausted: u64,
}

impl PoolStats {
    /// Buffers not yet back on the owner's free stack: held, or sent back and not yet
    /// reclaimed.
    pub fn outstanding(&self) -> u64 {
        self.allocated
            .saturating_sub(self.freed_local)
            .saturating_sub(self.returned_remote)
    }
}

/// Owner-written counters (see [`PoolStats`]).
#[derive(Default)]
struct PoolCounters {
    allocated: AtomicU64,
    freed_local: AtomicU64,
    returned_remote: AtomicU64,
    exhausted: AtomicU64,
}

/// What the owner, the buffers and the return paths share.
struct PoolShared<P: Provider> {
    regions: Box<[P::Mr]>,
    /// The owner's number for this pool among others (a shared receive queue's chunk
    /// index: its receives' ids follow from it without a search); 0 if unused.
    tag: u32,
    layout: Layout,
    remote: bool,
    returns: ReturnList,
    counters: CachePadded<PoolCounters>,
}

impl<P: Provider> PoolShared<P> {
    /// Allocates and registers the regions `config` describes (as few as
    /// [`PoolConfig::max_region_len`] allows), with an empty return list.
    fn create(pd: &P::Pd, config: PoolConfig) -> Result<Arc<PoolShared<P>>, PoolError> {
        Self::create_tagged(pd, config, 0)
    }

    /// [`create`](Self::create), numbered `tag` by its owner.
    fn create_tagged(
        pd: &P::Pd,
        config: PoolConfig,
        tag: u32,
    ) -> Result<Arc<PoolShared<P>>, PoolError> {
        let layout = config.layout()?;
        let regions = (0..layout.regions())
            .map(|r| pd.alloc_region(layout.region_len(r), config.access))
            .collect::<Result<Box<[P::Mr]>, FabricError>>()?;
        Ok(Arc::new(PoolShared {
            regions,
            tag,
            layout,
            remote: config.access.is_remote(),
            returns: ReturnList::new(layout.count),
            counters: CachePadded::new(PoolCounters::default()),
        }))
    }

    /// The handle of buffer `index`, which the caller holds from now on: its address and
    /// scatter-gather element worked out once.
    #[inline]
    fn buf(&self, index: u32) -> Buf<P> {
        let (region, offset) = self.layout.locate(index);
        let mr = &self.regions[region];
        let sge = mr.sge(offset, self.layout.buf_size);
        // SAFETY: `offset` is inside the region by construction of the layout (checked
        // again by `sge` just above), so the pointer stays inside the region's allocation.
        let ptr = unsafe { mr.as_ptr().add(offset) };
        Buf {
            shared: NonNull::from(self),
            ptr,
            sge,
            index,
        }
    }

    /// Bytes of the registered regions.
    fn bytes(&self) -> u64 {
        u64::from(self.layout.count) * self.layout.stride as u64
    }

    fn stats(&self) -> PoolStats {
        let c = &self.counters;
        PoolStats {
            capacity: self.layout.count,
            buf_size: self.layout.buf_size,
            allocated: c.allocated.load(Ordering::Relaxed),
            freed_local: c.freed_local.load(Ordering::Relaxed),
            returned_remote: c.returned_remote.load(Ordering::Relaxed),
            exhausted: c.exhausted.load(Ordering::Relaxed),
        }
    }
}

/// A pool of fixed-size registered buffers owned by one thread.
///
/// `Send` but not `Sync`: move it to its worker; other threads reach it only through a
/// [`ReturnPath`] (and by dropping the [`Buf`]s they were given).
pub struct BufferPool<P: Provider> {
    shared: Arc<PoolShared<P>>,
    /// The owner's free stack: `free[..top]` are the indices at home. Never grows: it has a
    /// slot for every buffer.
    free: Box<[Cell<u32>]>,
    top: Cell<u32>,
}

impl<P: Provider> BufferPool<P> {
    /// Allocates and registers the pool's regions in `pd` (as few as
    /// [`PoolConfig::max_region_len`] allows) and carves them into `config.count` buffers,
    /// all at home. The only allocations of the pool's life happen here.
    pub fn new(pd: &P::Pd, config: PoolConfig) -> Result<BufferPool<P>, PoolError> {
        let shared = PoolShared::create(pd, config)?;
        let count = shared.layout.count;
        // Lowest index on top, so a fresh pool hands out buffers in address order.
        let free = (0..count).rev().map(Cell::new).collect();
        Ok(BufferPool {
            shared,
            free,
            top: Cell::new(count),
        })
    }

    /// Takes a buffer: from the owner's free stack or, when that is empty, from what other
    /// threads sent back. No atomic instruction unless the stack is empty; never allocates.
    ///
    /// # Errors
    ///
    /// [`PoolError::Exhausted`] when every buffer is out.
    #[inline]
    pub fn alloc(&self) -> Result<Buf<P>, PoolError> {
        if self.top.get() == 0 && self.reclaim() == 0 {
            bump(&self.shared.counters.exhausted, 1);
            return Err(PoolError::Exhausted {
                capacity: self.capacity(),
            });
        }
        let top = self.top.get() - 1;
        let index = self.free[top as usize].get();
        self.top.set(top);
        bump(&self.shared.counters.allocated, 1);
        Ok(self.shared.buf(index))
    }

    /// Takes a buffer as a [`Lease`], which frees it onto this pool when dropped.
    ///
    /// # Errors
    ///
    /// [`PoolError::Exhausted`] when every buffer is out.
    #[inline]
    pub fn lease(&self) -> Result<Lease<'_, P>, PoolError> {
        Ok(Lease {
            pool: self,
            buf: ManuallyDrop::new(self.alloc()?),
        })
    }

    /// Gives `buf` back. A buffer of this pool goes on the owner's free stack with no atomic
    /// instruction; a buffer of another pool goes to that pool's return list.
    #[inline]
    pub fn free(&self, buf: Buf<P>) {
        if !self.owns(&buf) {
            drop(buf);
            return;
        }
        let buf = ManuallyDrop::new(buf);
        self.push_local(buf.index);
        bump(&self.shared.counters.freed_local, 1);
    }

    /// Moves every buffer sent back by other threads onto the owner's free stack and returns
    /// how many there were. Costs one relaxed load when there were none.
    #[inline]
    pub fn reclaim(&self) -> u32 {
        let n = self.shared.returns.take_all(|index| self.push_local(index));
        if n != 0 {
            bump(&self.shared.counters.returned_remote, u64::from(n));
        }
        n
    }

    #[inline]
    fn push_local(&self, index: u32) {
        let top = self.top.get();
        // In bounds: every index is either here, in the return list or held, once.
        self.free[top as usize].set(index);
        self.top.set(top + 1);
    }

    /// Whether `buf` is one of this pool's buffers.
    #[inline]
    pub fn owns(&self, buf: &Buf<P>) -> bool {
        core::ptr::eq(buf.shared.as_ptr(), Arc::as_ptr(&self.shared))
    }

    /// A handle through which other threads send buffers back and read the counters.
    pub fn return_path(&self) -> ReturnPath<P> {
        ReturnPath {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Number of buffers.
    pub fn capacity(&self) -> u32 {
        self.shared.layout.count
    }

    /// Usable bytes of each buffer.
    pub fn buf_size(&self) -> usize {
        self.shared.layout.buf_size as usize
    }

    /// Distance in bytes between consecutive buffers of a region: the buffer size rounded
    /// up to the alignment, padded as [`PoolConfig::SET_SPREAD`] says.
    pub fn stride(&self) -> usize {
        self.shared.layout.stride
    }

    /// Bytes the pool's buffers take in its registered regions (`capacity` × `stride`).
    pub fn bytes(&self) -> u64 {
        self.shared.bytes()
    }

    /// Buffers on the owner's free stack (not counting any sent back and not reclaimed).
    pub fn available(&self) -> u32 {
        self.top.get()
    }

    /// A reference to the pool's shared state (its registered regions), type-erased: the
    /// regions stay registered and mapped while it lives, even after the pool is dropped
    /// ([`loan`]).
    pub(crate) fn keepalive(&self) -> Arc<dyn Send + Sync> {
        Arc::clone(&self.shared) as Arc<dyn Send + Sync>
    }

    /// The registered regions the buffers are carved from.
    pub fn regions(&self) -> &[P::Mr] {
        &self.shared.regions
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        self.shared.stats()
    }
}

impl<P: Provider> Drop for BufferPool<P> {
    fn drop(&mut self) {
        self.reclaim();
        if self.top.get() != self.capacity() {
            // Buffers are still out and point at the shared state: keep it (and the
            // registered regions) alive for good rather than let them dangle.
            core::mem::forget(Arc::clone(&self.shared));
        }
    }
}

impl<P: Provider> fmt::Debug for BufferPool<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("available", &self.available())
            .field("stride", &self.stride())
            .field("regions", &self.shared.regions.len())
            .field("stats", &self.stats())
            .finish()
    }
}
