//! Protection domains, memory regions and memory windows of the soft provider.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::arena::{Domain, RegionInfo};
use super::srq::SoftSrq;
use super::sys::copy_bytes;
use super::Soft;
use crate::fabric::{Access, FabricError, MemoryRegion, MemoryWindow, ProtectionDomain};

/// A soft protection domain: one shared arena holding its key table and the bytes of its
/// regions. Peers connected to a queue pair of the domain map the whole arena.
pub struct SoftPd {
    pub(crate) dom: Arc<Domain>,
}

impl SoftPd {
    pub(crate) fn create(arena_bytes: usize, max_keys: u32) -> Result<SoftPd, FabricError> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = u64::from(std::process::id()) << 32 | NEXT.fetch_add(1, Ordering::Relaxed);
        Ok(SoftPd {
            dom: Arc::new(Domain::create(arena_bytes, max_keys, id)?),
        })
    }
}

impl std::fmt::Debug for SoftPd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SoftPd({:#x})", self.dom.view().domain_id())
    }
}

impl ProtectionDomain<Soft> for SoftPd {
    fn alloc_region(&self, len: usize, access: Access) -> Result<SoftMr, FabricError> {
        let RegionInfo {
            index,
            key,
            off,
            va,
        } = self.dom.alloc_region(len, access)?;
        Ok(SoftMr {
            dom: self.dom.clone(),
            index,
            key,
            off,
            va,
            len,
            access,
        })
    }

    fn alloc_mw(&self) -> Result<SoftMw, FabricError> {
        let (index, key) = self.dom.alloc_window()?;
        Ok(SoftMw {
            dom: self.dom.clone(),
            index,
            rkey: AtomicU32::new(key),
        })
    }

    fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SoftSrq, FabricError> {
        SoftSrq::create(self.dom.view().domain_id(), max_wr, max_sge)
    }
}

/// A soft memory region: a page-aligned span of its domain's arena. Its lkey and rkey are
/// equal; the key checks grant remote access only as its rights say.
pub struct SoftMr {
    pub(crate) dom: Arc<Domain>,
    index: u32,
    key: u32,
    off: u64,
    va: u64,
    len: usize,
    access: Access,
}

impl SoftMr {
    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "span {offset}+{len} outside a region of {} bytes",
            self.len
        );
    }
}

impl std::fmt::Debug for SoftMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftMr")
            .field("addr", &format_args!("{:#x}", self.va))
            .field("len", &self.len)
            .field("key", &format_args!("{:#x}", self.key))
            .field("access", &self.access)
            .finish()
    }
}

impl MemoryRegion for SoftMr {
    fn addr(&self) -> u64 {
        self.va
    }

    fn as_ptr(&self) -> *mut u8 {
        self.va as *mut u8
    }

    fn len(&self) -> usize {
        self.len
    }

    fn lkey(&self) -> u32 {
        self.key
    }

    fn rkey(&self) -> u32 {
        self.key
    }

    fn access(&self) -> Access {
        self.access
    }

    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: the span is inside the region (checked), which is inside the arena that
        // `self.dom` keeps mapped; `dst` is a distinct local buffer.
        unsafe { copy_bytes(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    fn write_at(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: as in `read_at`, with the roles of the buffers swapped.
        unsafe { copy_bytes(src.as_ptr(), self.as_ptr().add(offset), src.len()) }
    }

    unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        self.check(offset, len);
        // SAFETY: the span is inside the region (checked) and stays mapped while `self`
        // lives; the caller guarantees nothing writes it during the borrow.
        unsafe { std::slice::from_raw_parts(self.as_ptr().add(offset), len) }
    }

    unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        self.check(offset, len);
        // SAFETY: as in `slice`; the caller guarantees nothing else reads or writes the span
        // during the borrow.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(offset), len) }
    }
}

impl Drop for SoftMr {
    fn drop(&mut self) {
        self.dom
            .free_region(self.index, self.key, self.off, self.len);
    }
}

/// A soft type 2 memory window.
pub struct SoftMw {
    pub(crate) dom: Arc<Domain>,
    pub(crate) index: u32,
    pub(crate) rkey: AtomicU32,
}

impl std::fmt::Debug for SoftMw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SoftMw({:#x})", self.rkey())
    }
}

impl MemoryWindow for SoftMw {
    fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }
}

impl Drop for SoftMw {
    fn drop(&mut self) {
        self.dom.free_window(self.index);
    }
}
