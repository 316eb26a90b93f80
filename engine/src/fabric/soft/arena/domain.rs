//! The owner's side of a protection domain: the arena's creation, its table's keys, and the
//! regions registered in it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::spans::SpanAlloc;
use super::{word, word_key, ArenaHeader, ArenaView, PAGE, ST_MR, ST_MR_DEAD, ST_UNUSED};
use crate::fabric::soft::sys::Mapping;
use crate::fabric::{Access, FabricError};

/// The owner's side of a protection domain: the arena and its (control-path) allocators.
pub(crate) struct Domain {
    pub(super) view: ArenaView,
    spans: Mutex<SpanAlloc>,
    keys: Mutex<KeyAlloc>,
}

/// A region as allocated: where it is and its key.
pub(crate) struct RegionInfo {
    pub index: u32,
    pub key: u32,
    pub off: u64,
    pub va: u64,
}

/// The key table's free indices: those given back (reused first), then those never used,
/// from `next` up. Kept this way rather than as a list of every index, so that a domain's
/// table can be large (a server's one domain serves a thousand connections) while a
/// client's domain that registers a few regions costs a few bytes.
struct KeyAlloc {
    freed: Vec<u32>,
    next: u32,
    max: u32,
}

impl KeyAlloc {
    fn take(&mut self) -> Option<u32> {
        self.freed.pop().or_else(|| {
            (self.next < self.max).then(|| {
                self.next += 1;
                self.next - 1
            })
        })
    }
}

impl Domain {
    /// A new domain with an arena of `bytes` bytes and `max_keys` table entries.
    pub(crate) fn create(
        bytes: usize,
        max_keys: u32,
        domain_id: u64,
    ) -> Result<Domain, FabricError> {
        if !(2..=1 << 24).contains(&max_keys) {
            return Err(FabricError::InvalidArgument("key table size"));
        }
        // The table takes at most a sixteenth of a small arena (64 bytes an entry): a test's
        // few-MiB arena keeps its room for data.
        let max_keys = max_keys.min((bytes / 16 / 64).clamp(2, 1 << 24) as u32);
        let map = Arc::new(Mapping::create(
            "rpcrdma-soft-pd",
            bytes.div_ceil(PAGE) * PAGE,
        )?);
        let view = ArenaView::init(map, max_keys, domain_id)?;
        let h: &ArenaHeader = view.map.mapping().at(0);
        let data_off = h.data_off.load(Ordering::Relaxed);
        let data_len = h.data_len.load(Ordering::Relaxed);
        let keys = KeyAlloc {
            freed: Vec::new(),
            next: 1,
            max: max_keys,
        };
        Ok(Domain {
            view,
            spans: Mutex::new(SpanAlloc {
                free: vec![(data_off, data_len)],
                fresh_from: data_off,
            }),
            keys: Mutex::new(keys),
        })
    }

    /// The arena.
    pub(crate) fn view(&self) -> &ArenaView {
        &self.view
    }

    /// Takes a free table index and gives it its next key (the previous key's low byte plus
    /// one, so a stale key never matches a reused entry until 256 reuses later).
    pub(super) fn take_key(&self) -> Result<(u32, u32), FabricError> {
        let index = self
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or(FabricError::Exhausted("memory keys"))?;
        let e = self.view.entry(index).expect("allocated index in table");
        let old = word_key(e.word.load(Ordering::Relaxed));
        let key = index << 8 | (old.wrapping_add(1) & 0xff);
        Ok((index, key))
    }

    pub(super) fn put_key(&self, index: u32) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .freed
            .push(index);
    }

    /// Allocates and registers a zeroed region of `len` bytes (rounded up to pages).
    pub(crate) fn alloc_region(
        &self,
        len: usize,
        access: Access,
    ) -> Result<RegionInfo, FabricError> {
        if len == 0 {
            return Err(FabricError::InvalidArgument("zero-length region"));
        }
        if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(FabricError::InvalidArgument(
                "remote write access needs local write access",
            ));
        }
        if access.bits() & !0x1f != 0 {
            return Err(FabricError::InvalidArgument("unsupported access flags"));
        }
        let span = (len.div_ceil(PAGE) * PAGE) as u64;
        let (off, used) = self
            .spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .alloc(span)
            .ok_or(FabricError::Exhausted("arena memory"))?;
        let (index, key) = match self.take_key() {
            Ok(k) => k,
            Err(e) => {
                self.release_span(off, span);
                return Err(e);
            }
        };
        let p = self
            .view
            .map
            .mapping()
            .span(off, span)
            .expect("span inside arena");
        // SAFETY: `p..p+span` is inside the arena (checked by `span`) and was free: no region,
        // and so no work request or peer, can reach it yet; `used <= span`. Reused memory
        // must read as zero; memory never handed out does already, and zeroing it would
        // touch (allocate) every page of every region at registration.
        unsafe { std::ptr::write_bytes(p, 0, used as usize) };
        let va = p as u64;
        let e = self.view.entry(index).expect("allocated index in table");
        e.va.store(va, Ordering::Relaxed);
        e.len.store(len as u64, Ordering::Relaxed);
        e.off.store(off, Ordering::Relaxed);
        e.access.store(access.bits(), Ordering::Relaxed);
        e.num_mw.store(0, Ordering::Relaxed);
        e.word.store(word(key, ST_MR), Ordering::Release);
        Ok(RegionInfo {
            index,
            key,
            off,
            va,
        })
    }

    fn release_span(&self, off: u64, span: u64) {
        self.spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .release(off, span);
    }

    /// Deregisters a region. Its memory is reused only if no window is bound over it;
    /// otherwise the span and the entry are leaked (rxe refuses such a deregistration).
    pub(crate) fn free_region(&self, index: u32, key: u32, off: u64, len: usize) {
        let Some(e) = self.view.entry(index) else {
            return;
        };
        if e.word
            .compare_exchange(
                word(key, ST_MR),
                word(key, ST_MR_DEAD),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return;
        }
        // Every memo of a region made so far is stale from now on (before the span can be
        // handed out again).
        let h: &ArenaHeader = self.view.map.mapping().at(0);
        h.regions_gen.fetch_add(1, Ordering::SeqCst);
        if e.num_mw.load(Ordering::SeqCst) != 0 {
            return;
        }
        e.word.store(word(key, ST_UNUSED), Ordering::Release);
        self.release_span(off, (len.div_ceil(PAGE) * PAGE) as u64);
        self.put_key(index);
    }
}
