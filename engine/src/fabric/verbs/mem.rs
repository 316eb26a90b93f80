//! What is made in a protection domain: the domain's device object (`PdInner`, which every
//! region, window, shared receive queue and queue pair of the domain holds), memory regions
//! that own their memory, and type 2 memory windows. The handle `VerbsPd` that makes them is
//! a floor above, in `pd.rs`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rdma_sys::*;

use super::context::{Context, DeallocMwFn};
use super::sys::{errno, Mapping};
use crate::fabric::{Access, FabricError, MemoryRegion, MemoryWindow};

/// A protection domain and the context it belongs to.
pub(super) struct PdInner {
    pub(super) pd: *mut ibv_pd,
    pub(super) ctx: Arc<Context>,
}

// SAFETY: an ibv_pd may be used from any thread; verbs taking it are thread-safe.
unsafe impl Send for PdInner {}
// SAFETY: as above; `&PdInner` only passes the pointer to thread-safe verbs.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: every region, window, shared receive queue and queue pair of the domain
        // holds an Arc of this value, so none is left.
        unsafe { ibv_dealloc_pd(self.pd) };
    }
}

/// A registered memory region that owns its page-aligned mapping (`mmap` +
/// `ibv_reg_mr`). Dropping it deregisters the region, then unmaps the memory; if the
/// deregistration fails (a window is still bound over it, say) the memory is leaked
/// rather than unmapped, as the device may still reach it.
pub struct VerbsMr {
    mr: *mut ibv_mr,
    ptr: *mut u8,
    len: usize,
    lkey: u32,
    rkey: u32,
    access: Access,
    map: Option<Mapping>,
    _pd: Arc<PdInner>,
}

// SAFETY: the region's bytes are reached only through raw-pointer copies or the unsafe
// views whose contract covers concurrency; the ibv_mr is used only by thread-safe verbs.
unsafe impl Send for VerbsMr {}
// SAFETY: as above.
unsafe impl Sync for VerbsMr {}

impl VerbsMr {
    pub(super) fn new(
        pd: &Arc<PdInner>,
        len: usize,
        access: Access,
    ) -> Result<VerbsMr, FabricError> {
        if len == 0 {
            return Err(FabricError::InvalidArgument("zero-length region"));
        }
        if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(FabricError::InvalidArgument(
                "remote write or atomic access needs local write",
            ));
        }
        if access.bits() & !0x1f != 0 {
            return Err(FabricError::InvalidArgument("unknown access flags"));
        }
        let map = Mapping::new(len)?;
        // SAFETY: the domain is live; the mapping covers `len` bytes and stays mapped until
        // the registration is gone (see Drop). The access bits are ibv_access_flags values.
        let mr = unsafe { ibv_reg_mr(pd.pd, map.ptr().cast(), len, access.bits() as i32) };
        if mr.is_null() {
            let e = errno();
            // SAFETY: the registration failed, so nothing reaches the mapping.
            unsafe { map.unmap() };
            return Err(FabricError::Os {
                call: "ibv_reg_mr",
                errno: e,
            });
        }
        // SAFETY: `mr` is the registration just made.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(VerbsMr {
            mr,
            ptr: map.ptr(),
            len,
            lkey,
            rkey,
            access,
            map: Some(map),
            _pd: pd.clone(),
        })
    }

    pub(super) fn raw(&self) -> *mut ibv_mr {
        self.mr
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "span {offset}+{len} outside a region of {} bytes",
            self.len
        );
    }
}

impl Drop for VerbsMr {
    fn drop(&mut self) {
        // SAFETY: the registration is ours and deregistered once.
        let rc = unsafe { ibv_dereg_mr(self.mr) };
        if let Some(map) = self.map.take() {
            if rc == 0 {
                // SAFETY: the registration is gone, so the device no longer reaches the
                // memory, and no view outlives `self` (views borrow it).
                unsafe { map.unmap() };
            } else {
                // The device may still reach the memory: leak it.
                map.leak();
            }
        }
    }
}

impl core::fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsMr")
            .field("addr", &format_args!("{:#x}", self.ptr as usize))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

impl MemoryRegion for VerbsMr {
    fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn lkey(&self) -> u32 {
        self.lkey
    }

    fn rkey(&self) -> u32 {
        self.rkey
    }

    fn access(&self) -> Access {
        self.access
    }

    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: the span is inside the mapping (checked); the copy reads bytes the
        // device may write concurrently, which for plain bytes yields some value, and no
        // Rust reference to them is formed.
        unsafe {
            core::ptr::copy_nonoverlapping(self.ptr.add(offset), dst.as_mut_ptr(), dst.len())
        };
    }

    fn write_at(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: as for read_at; `src` cannot overlap the mapping through a safe borrow
        // other than an unsafe view, whose contract forbids this write.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), src.len()) };
    }

    unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        self.check(offset, len);
        // SAFETY: inside the mapping (checked), which lives as long as `self`; the caller
        // upholds the trait's rule that nothing writes the bytes meanwhile.
        unsafe { core::slice::from_raw_parts(self.ptr.add(offset), len) }
    }

    unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len);
        // SAFETY: as for slice, and the caller guarantees exclusivity.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }
}

/// A type 2 memory window (`ibv_alloc_mw(pd, IBV_MW_TYPE_2)`), bound with
/// `IBV_WR_BIND_MW` and invalidated with `IBV_WR_LOCAL_INV` or a peer's
/// `IBV_WR_SEND_WITH_INV`.
pub struct VerbsMw {
    mw: *mut ibv_mw,
    rkey: AtomicU32,
    dealloc: DeallocMwFn,
    _pd: Arc<PdInner>,
}

// SAFETY: the ibv_mw is used only through thread-safe verbs; the rkey is an atomic.
unsafe impl Send for VerbsMw {}
// SAFETY: as above.
unsafe impl Sync for VerbsMw {}

impl VerbsMw {
    pub(super) fn new(pd: &Arc<PdInner>) -> Result<VerbsMw, FabricError> {
        let ops = pd.ctx.ops;
        let (Some(alloc), Some(dealloc)) = (ops.alloc_mw, ops.dealloc_mw) else {
            return Err(FabricError::Os {
                call: "ibv_alloc_mw",
                errno: libc::EOPNOTSUPP,
            });
        };
        if !(pd.ctx.mw.type2a || pd.ctx.mw.type2b) {
            return Err(FabricError::Os {
                call: "ibv_alloc_mw",
                errno: libc::EOPNOTSUPP,
            });
        }
        // SAFETY: the domain is live; the provider's alloc_mw takes the domain and a type.
        let mw = unsafe { alloc(pd.pd, ibv_mw_type::IBV_MW_TYPE_2) };
        if mw.is_null() {
            let e = errno();
            if e == libc::ENOMEM {
                return Err(FabricError::Exhausted("memory windows"));
            }
            return Err(FabricError::Os {
                call: "ibv_alloc_mw",
                errno: e,
            });
        }
        // SAFETY: `mw` is the window just allocated.
        let rkey = unsafe { (*mw).rkey };
        Ok(VerbsMw {
            mw,
            rkey: AtomicU32::new(rkey),
            dealloc,
            _pd: pd.clone(),
        })
    }

    pub(super) fn raw(&self) -> *mut ibv_mw {
        self.mw
    }

    /// The window's current rkey.
    pub(super) fn rkey_now(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }

    /// Records the rkey a posted bind gave the window, here and in `ibv_mw.rkey`: some
    /// providers (rxe) name the window in the next bind by the key found there, and the
    /// device refuses a bind whose key is not the window's current one.
    pub(super) fn set_rkey(&self, rkey: u32) {
        self.rkey.store(rkey, Ordering::Release);
        // SAFETY: the window is live and `rkey` is a properly aligned u32 field of it;
        // AtomicU32 has the layout of u32, and writing through it keeps two threads that
        // bind the same window at once (a caller bug, but reachable from safe code) from
        // racing in Rust's sense.
        let field = unsafe { &*(core::ptr::addr_of_mut!((*self.mw).rkey) as *const AtomicU32) };
        field.store(rkey, Ordering::Release);
    }
}

impl Drop for VerbsMw {
    fn drop(&mut self) {
        // SAFETY: the window is ours and deallocated once with the provider's operation.
        unsafe { (self.dealloc)(self.mw) };
    }
}

impl core::fmt::Debug for VerbsMw {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "VerbsMw(rkey {:#x})", self.rkey())
    }
}

impl MemoryWindow for VerbsMw {
    fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }
}
