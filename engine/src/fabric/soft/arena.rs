//! A protection domain's arena: one memfd-backed shared mapping holding the key table (every
//! memory region and memory window of the domain) and the bytes of the regions.
//!
//! ```text
//! page 0          ArenaHeader
//! page 1 + 0x800  KeyEntry table, 64 bytes an entry, index = key >> 8 (index 0 unused)
//! data_off ..     region bytes, page granular
//! ```
//!
//! A peer maps the same memfd and checks and performs RDMA Reads and Writes directly against
//! it, so the table is made of atomics. An entry's `word` packs the full key and the state;
//! it is written last when an entry is set up (Release) and read first and last by a peer
//! (a sequence lock), so a peer never acts on a half-written binding. The entry layout is the
//! protocol between peers; both run this code.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::sys::{Atomics, Mapping};
use crate::fabric::{Access, FabricError};

/// Page size of the arena's granularity.
pub(crate) const PAGE: usize = 4096;
/// Where the key table starts. Hot shared structures of the provider sit at distinct offsets
/// within their pages (here 0x800 into page 1; queue pair headers at 0x000, completion
/// queue headers at 0x400), so that the lines one Send touches do not all compete for the
/// same few sets of the L1 cache.
const TABLE_OFF: usize = PAGE + 0x800;
const MAGIC: u64 = 0x7270_6364_6172_6e32; // "rpcdarn2"

/// Entry states (low 32 bits of `KeyEntry::word`).
const ST_UNUSED: u32 = 0;
const ST_MR: u32 = 1;
const ST_MR_DEAD: u32 = 2;
const ST_MW_FREE: u32 = 3;
const ST_MW_VALID: u32 = 4;
const ST_MW_BUSY: u32 = 5;

#[repr(C, align(64))]
struct ArenaHeader {
    magic: AtomicU64,
    table_len: AtomicU64,
    data_off: AtomicU64,
    data_len: AtomicU64,
    domain_id: AtomicU64,
    /// Deregistrations so far: a [`RegionMemo`] made before the last one is stale.
    regions_gen: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for ArenaHeader {}

/// Where a registration's bytes are: its virtual span, their offset from the arena's base,
/// and the rights it grants, as its key table entry says.
#[derive(Clone, Copy, Debug)]
struct Span {
    va: u64,
    end: u64,
    off: u64,
    access: Access,
}

impl Span {
    const EMPTY: Span = Span {
        va: 0,
        end: 0,
        off: 0,
        access: Access::NONE,
    };

    /// The span entry `e` describes (`None` if it wraps around the address space).
    #[inline]
    fn of(e: &KeyEntry) -> Option<Span> {
        let va = e.va.load(Ordering::Relaxed);
        Some(Span {
            va,
            end: va.checked_add(e.len.load(Ordering::Relaxed))?,
            off: e.off.load(Ordering::Relaxed),
            access: Access::from_bits(e.access.load(Ordering::Relaxed)),
        })
    }

    /// The arena offset of `len` bytes at `addr`, if they lie inside the span and it grants
    /// `need`.
    #[inline(always)]
    fn offset_of(&self, addr: u64, len: u64, need: Access) -> Option<u64> {
        let end = addr.checked_add(len)?;
        if !(self.access.contains(need) && addr >= self.va && end <= self.end) {
            return None;
        }
        // Checked: a peer's table may hold any offset.
        self.off.checked_add(addr - self.va)
    }
}

/// A region's key and span as last resolved, and the arena's deregistration count then
/// (see [`ArenaView::resolve_local_memo`]); the whole span lies inside the mapping. `lkey`
/// 0 (never a region's) is empty.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegionMemo {
    lkey: u32,
    span: Span,
    /// The arena's deregistration count when the memo was made.
    gen: u64,
}

impl Default for RegionMemo {
    fn default() -> RegionMemo {
        RegionMemo {
            lkey: 0,
            span: Span::EMPTY,
            gen: 0,
        }
    }
}

#[repr(C, align(64))]
struct KeyEntry {
    /// `key << 32 | state`.
    word: AtomicU64,
    /// Virtual address of the first byte, in the owner's address space.
    va: AtomicU64,
    len: AtomicU64,
    /// Offset of the first byte from the arena's base.
    off: AtomicU64,
    access: AtomicU32,
    /// Type 2 window: the owner's queue pair it was bound through.
    qp_num: AtomicU32,
    /// Window: index and full key of the region it is bound over.
    parent: AtomicU32,
    parent_key: AtomicU32,
    /// Region: windows currently bound over it.
    num_mw: AtomicU32,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for KeyEntry {}

const fn word(key: u32, state: u32) -> u64 {
    (key as u64) << 32 | state as u64
}

const fn word_key(w: u64) -> u32 {
    (w >> 32) as u32
}

const fn word_state(w: u64) -> u32 {
    w as u32
}

/// Why a key check failed; providers map it to the status of whoever asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyFault;

/// A view of an arena, local or a peer's: geometry read once, checked against the mapping.
#[derive(Clone)]
pub(crate) struct ArenaView {
    map: Arc<Mapping>,
    table_len: u32,
    domain_id: u64,
}

impl ArenaView {
    /// Lays out a fresh arena in `map`.
    fn init(map: Arc<Mapping>, max_keys: u32, domain_id: u64) -> Result<ArenaView, FabricError> {
        let table_bytes = TABLE_OFF + (max_keys as usize) * 64;
        let data_off = table_bytes.div_ceil(PAGE) * PAGE;
        if data_off >= map.len() {
            return Err(FabricError::InvalidArgument(
                "arena smaller than its key table",
            ));
        }
        let h: &ArenaHeader = map.at(0);
        h.table_len.store(u64::from(max_keys), Ordering::Relaxed);
        h.data_off.store(data_off as u64, Ordering::Relaxed);
        h.data_len
            .store((map.len() - data_off) as u64, Ordering::Relaxed);
        h.domain_id.store(domain_id, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(ArenaView {
            map,
            table_len: max_keys,
            domain_id,
        })
    }

    /// A view of a peer's arena, after checking its geometry.
    pub(crate) fn open(map: Arc<Mapping>) -> Result<ArenaView, FabricError> {
        let h: &ArenaHeader = map.try_at(0).ok_or(FabricError::InvalidArgument(
            "peer arena is smaller than its header",
        ))?;
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(FabricError::InvalidArgument(
                "peer arena has a bad magic number",
            ));
        }
        let table_len = h.table_len.load(Ordering::Relaxed);
        let fits = match (TABLE_OFF as u64).checked_add(table_len.saturating_mul(64)) {
            Some(end) => end <= map.len() as u64,
            None => false,
        };
        if table_len > u64::from(u32::MAX) || !fits {
            return Err(FabricError::InvalidArgument(
                "peer arena table does not fit",
            ));
        }
        let domain_id = h.domain_id.load(Ordering::Relaxed);
        Ok(ArenaView {
            map,
            table_len: table_len as u32,
            domain_id,
        })
    }

    /// The mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    /// The identity of the domain the arena belongs to.
    pub(crate) fn domain_id(&self) -> u64 {
        self.domain_id
    }

    #[inline]
    fn entry(&self, index: u32) -> Option<&KeyEntry> {
        if index == 0 || index >= self.table_len {
            return None;
        }
        // SAFETY: `index < table_len`, and `TABLE_OFF + 64 * table_len` was checked against
        // the mapping's length by `init`/`open`.
        Some(unsafe { self.map.at_unchecked(TABLE_OFF + index as usize * 64) })
    }

    /// The address in this mapping of `len` bytes at virtual address `addr` of the local
    /// key `lkey` (a region's), if the key is valid, grants `need` and covers the span.
    /// Zero-length spans are not checked (the address is then meaningless).
    #[inline]
    pub(crate) fn resolve_local(
        &self,
        lkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<*mut u8, KeyFault> {
        // A one-off: through a memo of its own.
        self.resolve_local_memo(&Cell::new(RegionMemo::default()), lkey, addr, len, need)
    }

    /// The entry of the region whose local key is `lkey`, if it is one's.
    #[inline]
    fn region_entry(&self, lkey: u32) -> Result<&KeyEntry, KeyFault> {
        let e = self.entry(lkey >> 8).ok_or(KeyFault)?;
        if e.word.load(Ordering::Acquire) != word(lkey, ST_MR) {
            return Err(KeyFault);
        }
        Ok(e)
    }

    /// [`resolve_local`](Self::resolve_local) (zero-length spans not checked either) through
    /// `memo`, the last region it resolved: while the key is the memo's and no region of
    /// this arena was deregistered since, the span is checked against the memo and the key
    /// table is not read; another key (or a stale memo) is looked up and becomes the memo,
    /// if it names a region lying wholly inside the mapping (a peer's table saying otherwise
    /// is refused). A queue pair keeps one memo for its own arena (gather lists) and one for
    /// its peer's (receives), so that Sends from one pool into another look their keys up
    /// once. A region deregistered while a request naming it is being posted may still be
    /// read or written by that request, as an HCA might; every access stays inside the
    /// arena.
    #[inline(always)]
    pub(crate) fn resolve_local_memo(
        &self,
        memo: &Cell<RegionMemo>,
        lkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<*mut u8, KeyFault> {
        if len == 0 {
            return Ok(self.map.base());
        }
        let mut m = memo.get();
        if m.lkey != lkey || m.gen != self.regions_gen() {
            m = self.memo_region(lkey)?;
            memo.set(m);
        }
        let off = m.span.offset_of(addr, len, need).ok_or(KeyFault)?;
        // Inside the mapping: the whole region is (checked when the memo was made).
        Ok(self.map.base().wrapping_add(off as usize))
    }

    /// The arena's deregistration count.
    #[inline(always)]
    fn regions_gen(&self) -> u64 {
        // SAFETY: the header lies at offset 0, checked against the mapping by `init`/`open`.
        let h: &ArenaHeader = unsafe { self.map.at_unchecked(0) };
        h.regions_gen.load(Ordering::Acquire)
    }

    /// A memo of the region whose local key is `lkey`, which must lie wholly inside the
    /// mapping (a peer's table saying otherwise is refused).
    #[inline(never)]
    fn memo_region(&self, lkey: u32) -> Result<RegionMemo, KeyFault> {
        // Read first: a deregistration from here on leaves the memo stale.
        let gen = self.regions_gen();
        let span = Span::of(self.region_entry(lkey)?).ok_or(KeyFault)?;
        self.map
            .span(span.off, span.end - span.va)
            .ok_or(KeyFault)?;
        Ok(RegionMemo { lkey, span, gen })
    }

    /// The address in this mapping of `len` bytes at `addr` under the remote key `rkey`, for
    /// a request with rights `need` arriving on the owner's queue pair `qp_num`.
    /// Zero-length requests are not checked, as on verbs.
    #[inline]
    pub(crate) fn resolve_remote(
        &self,
        rkey: u32,
        addr: u64,
        len: u64,
        need: Access,
        qp_num: u32,
    ) -> Result<*mut u8, KeyFault> {
        if len == 0 {
            return Ok(self.map.base());
        }
        let e = self.entry(rkey >> 8).ok_or(KeyFault)?;
        let w = e.word.load(Ordering::Acquire);
        if word_key(w) != rkey {
            return Err(KeyFault);
        }
        let p = match word_state(w) {
            ST_MR => self.span_of(e, addr, len, need)?,
            ST_MW_VALID => {
                if e.qp_num.load(Ordering::Relaxed) != qp_num {
                    return Err(KeyFault);
                }
                let parent = self
                    .entry(e.parent.load(Ordering::Relaxed))
                    .ok_or(KeyFault)?;
                let pkey = e.parent_key.load(Ordering::Relaxed);
                if parent.word.load(Ordering::Acquire) != word(pkey, ST_MR) {
                    return Err(KeyFault);
                }
                self.span_of(e, addr, len, need)?
            }
            _ => return Err(KeyFault),
        };
        // Sequence lock: the entry must not have changed while it was read.
        if e.word.load(Ordering::Acquire) != w {
            return Err(KeyFault);
        }
        Ok(p)
    }

    #[inline]
    fn span_of(
        &self,
        e: &KeyEntry,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<*mut u8, KeyFault> {
        let off = Span::of(e)
            .and_then(|s| s.offset_of(addr, len, need))
            .ok_or(KeyFault)?;
        self.map.span(off, len).ok_or(KeyFault)
    }

    /// Invalidates the memory window whose current key is `rkey` (Local Invalidate, or a
    /// peer's Send With Invalidate). Fails if `rkey` is not a bound window's current key:
    /// regions cannot be invalidated, as on rxe (only fast-registered regions could be).
    pub(crate) fn invalidate(&self, rkey: u32) -> Result<(), KeyFault> {
        let e = self.entry(rkey >> 8).ok_or(KeyFault)?;
        e.word
            .compare_exchange(
                word(rkey, ST_MW_VALID),
                word(rkey, ST_MW_BUSY),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .map_err(|_| KeyFault)?;
        self.release_binding(e);
        e.word.store(word(rkey, ST_MW_FREE), Ordering::Release);
        Ok(())
    }

    /// Undoes a window's binding: its region counts one window less. The entry is BUSY.
    fn release_binding(&self, e: &KeyEntry) {
        if let Some(parent) = self.entry(e.parent.load(Ordering::Relaxed)) {
            parent.num_mw.fetch_sub(1, Ordering::SeqCst);
        }
        e.len.store(0, Ordering::Relaxed);
        e.access.store(0, Ordering::Relaxed);
        e.parent.store(0, Ordering::Relaxed);
    }
}

/// What a bind asks for, checked by [`Domain::bind`].
pub(crate) struct BindReq {
    pub mw_index: u32,
    pub mw_rkey: u32,
    pub new_rkey: u32,
    pub mr_lkey: u32,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
    pub qp_num: u32,
}

/// First-fit allocator of page-granular spans of the data area.
struct SpanAlloc {
    free: Vec<(u64, u64)>,
    /// Every byte from here on was never handed out: the memfd still reads as zero there,
    /// and its pages are not allocated until touched.
    fresh_from: u64,
}

impl SpanAlloc {
    /// Takes `len` bytes: their offset, and how many of them, from the start, were handed
    /// out before (and may hold old bytes); the rest reads as zero.
    fn alloc(&mut self, len: u64) -> Option<(u64, u64)> {
        let i = self.free.iter().position(|&(_, l)| l >= len)?;
        let (off, l) = self.free[i];
        if l == len {
            self.free.remove(i);
        } else {
            self.free[i] = (off + len, l - len);
        }
        let used = self.fresh_from.clamp(off, off + len) - off;
        self.fresh_from = self.fresh_from.max(off + len);
        Some((off, used))
    }

    fn release(&mut self, off: u64, len: u64) {
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, len));
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

/// The owner's side of a protection domain: the arena and its (control-path) allocators.
pub(crate) struct Domain {
    view: ArenaView,
    spans: Mutex<SpanAlloc>,
    keys: Mutex<Vec<u32>>,
}

/// A region as allocated: where it is and its key.
pub(crate) struct RegionInfo {
    pub index: u32,
    pub key: u32,
    pub off: u64,
    pub va: u64,
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
        let map = Arc::new(Mapping::create(
            "rpcrdma-soft-pd",
            bytes.div_ceil(PAGE) * PAGE,
        )?);
        let view = ArenaView::init(map, max_keys, domain_id)?;
        let h: &ArenaHeader = view.map.at(0);
        let data_off = h.data_off.load(Ordering::Relaxed);
        let data_len = h.data_len.load(Ordering::Relaxed);
        // Hand out low indices first.
        let keys = (1..max_keys).rev().collect();
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
    fn take_key(&self) -> Result<(u32, u32), FabricError> {
        let index = self
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .ok_or(FabricError::Exhausted("memory keys"))?;
        let e = self.view.entry(index).expect("allocated index in table");
        let old = word_key(e.word.load(Ordering::Relaxed));
        let key = index << 8 | (old.wrapping_add(1) & 0xff);
        Ok((index, key))
    }

    fn put_key(&self, index: u32) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
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
        let p = self.view.map.span(off, span).expect("span inside arena");
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
        let h: &ArenaHeader = self.view.map.at(0);
        h.regions_gen.fetch_add(1, Ordering::SeqCst);
        if e.num_mw.load(Ordering::SeqCst) != 0 {
            return;
        }
        e.word.store(word(key, ST_UNUSED), Ordering::Release);
        self.release_span(off, (len.div_ceil(PAGE) * PAGE) as u64);
        self.put_key(index);
    }

    /// Allocates an unbound type 2 window; returns its index and key.
    pub(crate) fn alloc_window(&self) -> Result<(u32, u32), FabricError> {
        let (index, key) = self.take_key()?;
        let e = self.view.entry(index).expect("allocated index in table");
        e.len.store(0, Ordering::Relaxed);
        e.access.store(0, Ordering::Relaxed);
        e.parent.store(0, Ordering::Relaxed);
        e.word.store(word(key, ST_MW_FREE), Ordering::Release);
        Ok((index, key))
    }

    /// Deallocates a window, invalidating it if bound.
    pub(crate) fn free_window(&self, index: u32) {
        let Some(e) = self.view.entry(index) else {
            return;
        };
        loop {
            let w = e.word.load(Ordering::Acquire);
            match word_state(w) {
                ST_MW_VALID => {
                    let busy = word(word_key(w), ST_MW_BUSY);
                    if e.word
                        .compare_exchange(w, busy, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.view.release_binding(e);
                        break;
                    }
                }
                ST_MW_FREE => {
                    let busy = word(word_key(w), ST_MW_BUSY);
                    if e.word
                        .compare_exchange(w, busy, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                }
                _ => std::hint::spin_loop(),
            }
        }
        let key = word_key(e.word.load(Ordering::Relaxed));
        e.word.store(word(key, ST_UNUSED), Ordering::Release);
        self.put_key(index);
    }

    /// Executes a type 2 bind with the checks of rxe (`rxe_check_bind_mw`): the window must be
    /// unbound and carry `mw_rkey`; the region valid, with MW_BIND rights, covering the span;
    /// a writable window needs a locally writable region; the span is not empty. Returns the
    /// window's new key.
    pub(crate) fn bind(&self, req: &BindReq) -> Result<u32, KeyFault> {
        let e = self.view.entry(req.mw_index).ok_or(KeyFault)?;
        if req.len == 0 || !Access::WINDOW_RIGHTS.contains(req.access) {
            return Err(KeyFault);
        }
        let pe = self.view.entry(req.mr_lkey >> 8).ok_or(KeyFault)?;
        if pe.word.load(Ordering::Acquire) != word(req.mr_lkey, ST_MR) {
            return Err(KeyFault);
        }
        let mr_access = Access::from_bits(pe.access.load(Ordering::Relaxed));
        if !mr_access.contains(Access::MW_BIND) {
            return Err(KeyFault);
        }
        if req
            .access
            .intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
            && !mr_access.contains(Access::LOCAL_WRITE)
        {
            return Err(KeyFault);
        }
        let mr_va = pe.va.load(Ordering::Relaxed);
        let mr_len = pe.len.load(Ordering::Relaxed);
        let end = req.addr.checked_add(req.len).ok_or(KeyFault)?;
        if req.addr < mr_va || end > mr_va + mr_len {
            return Err(KeyFault);
        }
        e.word
            .compare_exchange(
                word(req.mw_rkey, ST_MW_FREE),
                word(req.mw_rkey, ST_MW_BUSY),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .map_err(|_| KeyFault)?;
        pe.num_mw.fetch_add(1, Ordering::SeqCst);
        if pe.word.load(Ordering::SeqCst) != word(req.mr_lkey, ST_MR) {
            pe.num_mw.fetch_sub(1, Ordering::SeqCst);
            e.word
                .store(word(req.mw_rkey, ST_MW_FREE), Ordering::Release);
            return Err(KeyFault);
        }
        e.va.store(req.addr, Ordering::Relaxed);
        e.len.store(req.len, Ordering::Relaxed);
        e.off.store(
            pe.off.load(Ordering::Relaxed) + (req.addr - mr_va),
            Ordering::Relaxed,
        );
        e.access.store(req.access.bits(), Ordering::Relaxed);
        e.qp_num.store(req.qp_num, Ordering::Relaxed);
        e.parent.store(req.mr_lkey >> 8, Ordering::Relaxed);
        e.parent_key.store(req.mr_lkey, Ordering::Relaxed);
        let new_key = (req.mw_rkey & !0xff) | (req.new_rkey & 0xff);
        e.word.store(word(new_key, ST_MW_VALID), Ordering::Release);
        Ok(new_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain() -> Domain {
        Domain::create(1 << 20, 64, 7).unwrap()
    }

    #[test]
    fn span_allocator_coalesces() {
        let mut a = SpanAlloc {
            free: vec![(0, 40)],
            fresh_from: 0,
        };
        let x = a.alloc(10).unwrap();
        let y = a.alloc(10).unwrap();
        let z = a.alloc(10).unwrap();
        assert_eq!((x, y, z), ((0, 0), (10, 0), (20, 0)), "all fresh");
        a.release(y.0, 10);
        a.release(x.0, 10);
        a.release(z.0, 10);
        assert_eq!(a.free, vec![(0, 40)]);
        assert_eq!(a.alloc(41), None);
        // Handed out again: the 30 bytes used before must be zeroed, the last 5 need not.
        assert_eq!(a.alloc(35), Some((0, 30)));
        a.release(0, 35);
        assert_eq!(a.alloc(5), Some((0, 5)));
        assert_eq!(a.alloc(20), Some((5, 20)));
        assert_eq!(a.alloc(15), Some((25, 10)));
    }

    /// A region handed out again reads as zero, whatever the one before it held; a fresh
    /// one reads as zero without being written.
    #[test]
    fn regions_read_as_zero() {
        let d = domain();
        let access = Access::LOCAL_WRITE;
        let r = d.alloc_region(3 * PAGE, access).unwrap();
        let p = d.view().map.span(r.off, 3 * PAGE as u64).unwrap();
        // SAFETY: the region's span, owned by this test.
        unsafe { std::ptr::write_bytes(p, 0xab, 3 * PAGE) };
        d.free_region(r.index, r.key, r.off, 3 * PAGE);
        let again = d.alloc_region(4 * PAGE, access).unwrap();
        assert_eq!(again.off, r.off, "the same memory, first fit");
        let q = d.view().map.span(again.off, 4 * PAGE as u64).unwrap();
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(q, 4 * PAGE) };
        assert!(bytes.iter().all(|&b| b == 0));
    }

    #[test]
    fn region_keys_resolve_and_check() {
        let d = domain();
        let r = d
            .alloc_region(100, Access::LOCAL_WRITE | Access::REMOTE_READ)
            .unwrap();
        let v = d.view();
        assert!(v
            .resolve_local(r.key, r.va, 100, Access::LOCAL_WRITE)
            .is_ok());
        assert!(
            v.resolve_local(r.key, r.va + 1, 100, Access::NONE).is_err(),
            "past the end"
        );
        assert!(
            v.resolve_local(r.key ^ 1, r.va, 1, Access::NONE).is_err(),
            "stale key"
        );
        assert!(v
            .resolve_remote(r.key, r.va, 8, Access::REMOTE_READ, 0)
            .is_ok());
        assert!(v
            .resolve_remote(r.key, r.va, 8, Access::REMOTE_WRITE, 0)
            .is_err());
        assert!(
            v.invalidate(r.key).is_err(),
            "regions cannot be invalidated"
        );
        d.free_region(r.index, r.key, r.off, 100);
        assert!(v.resolve_local(r.key, r.va, 1, Access::NONE).is_err());
        let again = d.alloc_region(100, Access::LOCAL_WRITE).unwrap();
        assert_eq!(again.index, r.index);
        assert_ne!(again.key, r.key, "a reused entry gets a new key");
    }

    #[test]
    fn window_bind_invalidate_cycle() {
        let d = domain();
        let r = d
            .alloc_region(8192, Access::LOCAL_WRITE | Access::MW_BIND)
            .unwrap();
        let (mw, key) = d.alloc_window().unwrap();
        let req = BindReq {
            mw_index: mw,
            mw_rkey: key,
            new_rkey: key + 1,
            mr_lkey: r.key,
            addr: r.va + 4096,
            len: 100,
            access: Access::REMOTE_WRITE,
            qp_num: 9,
        };
        let k1 = d.bind(&req).unwrap();
        assert_eq!(k1 >> 8, key >> 8);
        let v = d.view();
        assert!(v
            .resolve_remote(k1, r.va + 4096, 100, Access::REMOTE_WRITE, 9)
            .is_ok());
        assert!(
            v.resolve_remote(k1, r.va + 4096, 100, Access::REMOTE_WRITE, 8)
                .is_err(),
            "other qp"
        );
        assert!(
            v.resolve_remote(k1, r.va + 4096, 101, Access::REMOTE_WRITE, 9)
                .is_err(),
            "bounds"
        );
        assert!(
            v.resolve_remote(k1, r.va + 4096, 1, Access::REMOTE_READ, 9)
                .is_err(),
            "rights"
        );
        assert!(
            d.bind(&BindReq { mw_rkey: k1, ..req }).is_err(),
            "type 2 rebind while bound"
        );
        v.invalidate(k1).unwrap();
        assert!(v.invalidate(k1).is_err(), "second invalidation");
        assert!(v
            .resolve_remote(k1, r.va + 4096, 1, Access::REMOTE_WRITE, 9)
            .is_err());
        d.free_region(r.index, r.key, r.off, 8192);
        d.free_window(mw);
    }
}
