//! A buffer handed out by a [`BufferPool`] ([`Buf`]: owned, with its address and
//! scatter-gather element worked out once), a buffer lent for a scope ([`Lease`]), and the
//! way buffers come back to their pool from other threads ([`ReturnPath`]).

use super::*;

/// One buffer of a [`BufferPool`], owned: neither `Copy` nor `Clone`.
///
/// Give it back with [`BufferPool::free`] on the owner thread or [`ReturnPath::send_back`]
/// elsewhere; dropping it sends it back as `send_back` does.
pub struct Buf<P: Provider> {
    /// The pool's shared state, which outlives every `Buf` (a pool dropped with buffers out
    /// leaks it).
    pub(super) shared: NonNull<PoolShared<P>>,
    /// The first byte in this process (`MemoryRegion::as_ptr` of the region plus the
    /// buffer's offset), worked out once when the buffer is handed out.
    pub(super) ptr: *mut u8,
    /// The whole buffer's scatter-gather element, worked out with `ptr`: the hot paths take
    /// it (and spans of it) without going through the pool's layout and region table.
    pub(super) sge: Sge,
    pub(super) index: u32,
}

// SAFETY: a `Buf` is an index its holder exclusively owns, that buffer's address (`ptr`,
// `sge`: plain values about memory the region keeps mapped), plus a pointer to `PoolShared<P>`,
// which is `Send + Sync` (regions are `Send + Sync` by the `Provider` bounds, the rest is
// atomics) and outlives every `Buf`; nothing in a `Buf` is tied to the thread that made it.
unsafe impl<P: Provider> Send for Buf<P> {}

// SAFETY: `&Buf` gives only reads: copies out of the region (`read_at`, which the region
// allows from any thread) and `as_slice`, whose contract forbids concurrent writers.
// Everything that writes or gives the buffer up takes `&mut self` or `self`.
unsafe impl<P: Provider> Sync for Buf<P> {}

impl<P: Provider> Buf<P> {
    #[inline]
    fn shared(&self) -> &PoolShared<P> {
        // SAFETY: `shared` came from a live `Arc<PoolShared<P>>` and stays valid while any `Buf`
        // exists: the pool's `Drop` leaks the `Arc` when buffers are out, and `ReturnPath`s
        // hold their own reference.
        unsafe { self.shared.as_ref() }
    }

    /// The number its pool's owner gave the pool ([`PoolShared::create_tagged`]).
    #[inline]
    pub(super) fn pool_tag(&self) -> u32 {
        self.shared().tag
    }

    /// The buffer's index in its pool, `0 .. capacity`: a natural work request id.
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Usable bytes.
    #[inline]
    pub fn size(&self) -> usize {
        self.sge.length as usize
    }

    /// The region the buffer is carved from, for memory window binds
    /// ([`mw_bind`](Self::mw_bind) builds one for the whole buffer).
    ///
    /// The region spans other holders' buffers too: writing outside
    /// [`region_offset`](Self::region_offset) `..+` [`size`](Self::size) through it breaks
    /// their [`as_slice`](Self::as_slice) contracts.
    #[inline]
    pub fn region(&self) -> &P::Mr {
        let (region, _) = self.shared().layout.locate(self.index);
        &self.shared().regions[region]
    }

    /// Byte offset of the buffer in its [`region`](Self::region).
    #[inline]
    pub fn region_offset(&self) -> usize {
        self.shared().layout.locate(self.index).1
    }

    /// Virtual address of the first byte, as work requests name it.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.sge.addr
    }

    /// The scatter-gather element of the whole buffer.
    #[inline]
    pub fn sge(&self) -> Sge {
        self.sge
    }

    /// The scatter-gather element of `len` bytes at `offset` of the buffer (say, just the
    /// encoded length of a reply).
    ///
    /// # Panics
    ///
    /// If the span is not inside the buffer.
    #[inline]
    pub fn sge_span(&self, offset: usize, len: u32) -> Sge {
        self.check_span(offset, len as usize);
        Sge::new(self.sge.addr + offset as u64, len, self.sge.lkey)
    }

    /// The buffer's address under its region's rkey, to advertise to a peer; `None` unless
    /// the pool was registered with a remote right.
    #[inline]
    pub fn remote(&self) -> Option<RemoteAddr> {
        if self.shared().remote {
            Some(self.region().remote(self.region_offset()))
        } else {
            None
        }
    }

    /// A memory window bind of the whole buffer with `access` (a subset of
    /// [`Access::WINDOW_RIGHTS`]) under `mw`'s next rkey. The pool must be registered with
    /// [`Access::MW_BIND`] (and [`Access::LOCAL_WRITE`] for write rights), or the bind fails
    /// when executed.
    pub fn mw_bind<'a>(&'a self, mw: &'a P::Mw, access: Access) -> MwBind<'a, P> {
        MwBind {
            mw,
            rkey: mw.next_rkey(),
            mr: self.region(),
            addr: self.addr(),
            len: self.size() as u64,
            access,
        }
    }

    /// Copies `dst.len()` bytes at `offset` of the buffer into `dst`.
    ///
    /// # Panics
    ///
    /// If the span is not inside the buffer.
    #[inline]
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) {
        self.check_span(offset, dst.len());
        self.region().read_at(self.region_offset() + offset, dst);
    }

    /// Copies `src` into the buffer at `offset`.
    ///
    /// # Panics
    ///
    /// If the span is not inside the buffer.
    #[inline]
    pub fn write_at(&mut self, offset: usize, src: &[u8]) {
        self.check_span(offset, src.len());
        self.region().write_at(self.region_offset() + offset, src);
    }

    /// Borrows the whole buffer in place.
    ///
    /// # Safety
    ///
    /// While the borrow lives nothing may write the buffer: no posted receive or RDMA Read
    /// scattering into it may be outstanding (a request is outstanding until its completion,
    /// flush completions included, has been polled), no peer may hold an rkey (the region's
    /// or a bound window's) with write access covering it, and no code may write it through
    /// [`region`](Self::region). This is [`MemoryRegion::slice`]'s rule for the buffer's
    /// bytes; writes through this `Buf` are already excluded by the borrow.
    #[inline]
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr ..+ size` is this buffer's span, inside its region (checked when it
        // was handed out), which stays mapped while any `Buf` exists; the caller guarantees
        // `MemoryRegion::slice`'s contract for it.
        unsafe { std::slice::from_raw_parts(self.ptr, self.size()) }
    }

    /// Borrows the whole buffer in place, mutably.
    ///
    /// # Safety
    ///
    /// As for [`as_slice`](Self::as_slice), and moreover nothing else may read the buffer
    /// while the borrow lives: no outstanding Send or RDMA Write gathering from it, no peer
    /// rkey with read access covering it, no read of it through [`region`](Self::region).
    /// This is [`MemoryRegion::slice_mut`]'s rule for the buffer's bytes.
    #[inline]
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` excludes every other view through this
        // `Buf`, the only handle to the buffer, and the caller guarantees the fabric side.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.size()) }
    }

    /// Sends the buffer back to its pool through the lock-free return list, from any thread;
    /// the same as dropping it. On the owner thread, [`BufferPool::free`] is cheaper.
    #[inline]
    pub fn send_back(self) {
        drop(self);
    }

    #[inline]
    fn check_span(&self, offset: usize, len: usize) {
        let size = self.size();
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= size),
            "span {offset}+{len} outside a buffer of {size} bytes"
        );
    }
}

impl<P: Provider> Drop for Buf<P> {
    #[inline]
    fn drop(&mut self) {
        self.shared().returns.push(self.index);
    }
}

impl<P: Provider> fmt::Debug for Buf<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf")
            .field("index", &self.index)
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("size", &self.size())
            .finish()
    }
}

/// A buffer borrowed from a pool on the owner thread, freed onto the owner's free stack when
/// dropped. Dereferences to [`Buf`].
pub struct Lease<'a, P: Provider> {
    pub(super) pool: &'a BufferPool<P>,
    pub(super) buf: ManuallyDrop<Buf<P>>,
}

impl<P: Provider> Lease<'_, P> {
    /// Detaches the buffer from the lease, to keep it beyond the lease's scope (say, while a
    /// work request uses it) or hand it to another thread.
    pub fn into_buf(self) -> Buf<P> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so its `buf` is taken exactly once, here.
        unsafe { ManuallyDrop::take(&mut this.buf) }
    }
}

impl<P: Provider> Deref for Lease<'_, P> {
    type Target = Buf<P>;

    fn deref(&self) -> &Buf<P> {
        &self.buf
    }
}

impl<P: Provider> DerefMut for Lease<'_, P> {
    fn deref_mut(&mut self) -> &mut Buf<P> {
        &mut self.buf
    }
}

impl<P: Provider> Drop for Lease<'_, P> {
    fn drop(&mut self) {
        // SAFETY: `buf` is taken exactly once: here, or in `into_buf`, which skips this drop.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        self.pool.free(buf);
    }
}

impl<P: Provider> fmt::Debug for Lease<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Lease").field(&*self.buf).finish()
    }
}

/// The handle other threads use to send buffers back to a pool and read its counters.
/// `Send + Sync + Clone`; it keeps the pool's regions registered while it lives.
pub struct ReturnPath<P: Provider> {
    pub(super) shared: Arc<PoolShared<P>>,
}

impl<P: Provider> ReturnPath<P> {
    /// Sends `buf` back to its pool (this one, or the one it belongs to) through the
    /// lock-free return list: one CAS, retried with back-off under contention.
    #[inline]
    pub fn send_back(&self, buf: Buf<P>) {
        drop(buf);
    }

    /// Sends back every buffer of `bufs`; this pool's buffers go as one chain with a single
    /// successful CAS, others one by one to their own pools. Returns how many of this pool's
    /// buffers were sent.
    pub fn send_back_all<I: IntoIterator<Item = Buf<P>>>(&self, bufs: I) -> u32 {
        let returns = &self.shared.returns;
        let (mut first, mut last, mut n) = (END, END, 0);
        for buf in bufs {
            if !self.owns(&buf) {
                drop(buf);
                continue;
            }
            let buf = ManuallyDrop::new(buf);
            returns.link(buf.index, first);
            if last == END {
                last = buf.index;
            }
            first = buf.index;
            n += 1;
        }
        if first != END {
            returns.push_chain(first, last);
        }
        n
    }

    /// Whether `buf` is one of this pool's buffers.
    #[inline]
    pub fn owns(&self, buf: &Buf<P>) -> bool {
        core::ptr::eq(buf.shared.as_ptr(), Arc::as_ptr(&self.shared))
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.shared.stats()
    }
}

impl<P: Provider> Clone for ReturnPath<P> {
    fn clone(&self) -> Self {
        ReturnPath {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<P: Provider> fmt::Debug for ReturnPath<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReturnPath")
            .field("stats", &self.stats())
            .finish()
    }
}
