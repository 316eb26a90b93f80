//! A view of an arena, local or a peer's: its geometry, checked against the mapping, and the
//! resolution of local and remote keys to addresses in it.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{
    word, word_key, word_state, ArenaHeader, KeyEntry, KeyFault, MAGIC, PAGE, ST_MR, ST_MW_VALID,
    TABLE_OFF,
};
use crate::fabric::soft::sys::{MapRef, Mapping};
use crate::fabric::{Access, FabricError};

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

/// A view of an arena, local or a peer's: geometry read once, checked against the mapping.
#[derive(Clone)]
pub(crate) struct ArenaView {
    pub(super) map: MapRef,
    table_len: u32,
    domain_id: u64,
}

impl ArenaView {
    /// Lays out a fresh arena in `map`.
    pub(super) fn init(
        map: Arc<Mapping>,
        max_keys: u32,
        domain_id: u64,
    ) -> Result<ArenaView, FabricError> {
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
            map: MapRef::new(map),
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
            map: MapRef::new(map),
            table_len: table_len as u32,
            domain_id,
        })
    }

    /// The mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        self.map.mapping()
    }

    /// The identity of the domain the arena belongs to.
    pub(crate) fn domain_id(&self) -> u64 {
        self.domain_id
    }

    #[inline]
    pub(super) fn entry(&self, index: u32) -> Option<&KeyEntry> {
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
            .mapping()
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
        self.map.mapping().span(off, len).ok_or(KeyFault)
    }
}
