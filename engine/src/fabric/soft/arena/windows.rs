//! Type 2 memory windows: allocated, bound over a region, invalidated (locally or by a
//! peer's Send With Invalidate) and freed.

use std::sync::atomic::Ordering;

use super::{
    word, word_key, word_state, ArenaView, Domain, KeyEntry, KeyFault, ST_MR, ST_MW_BUSY,
    ST_MW_FREE, ST_MW_VALID, ST_UNUSED,
};
use crate::fabric::{Access, FabricError};

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

impl ArenaView {
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

impl Domain {
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
