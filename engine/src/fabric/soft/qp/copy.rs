//! Moving the bytes: a request's scatter-gather list resolved to addresses ([`Segs`]), and
//! the copies from it into a receive's elements (one element, or scattered over several, each
//! checked against the peer's key table) or into a checked remote span.

use std::cell::Cell;
use std::mem::MaybeUninit;

use crate::fabric::reader_copies::{copy_to_peer, STREAM_MIN_SEND};
use crate::fabric::soft::arena::{ArenaView, RegionMemo};
use crate::fabric::soft::rq::Claimed;
use crate::fabric::soft::sys::copy_bytes;
use crate::fabric::soft::MAX_SGE;
use crate::fabric::{Access, Sge};

/// Scatter-gather elements resolved to addresses; only the first `n` entries are set (no
/// zeroing of the array on the hot path).
pub(super) struct Segs {
    seg: [MaybeUninit<(*mut u8, u32)>; MAX_SGE],
    pub(super) n: usize,
    pub(super) total: u64,
}

impl Segs {
    #[inline]
    pub(super) fn new() -> Segs {
        Segs {
            seg: [const { MaybeUninit::uninit() }; MAX_SGE],
            n: 0,
            total: 0,
        }
    }

    #[inline]
    pub(super) fn push(&mut self, p: *mut u8, len: u32) {
        self.seg[self.n].write((p, len));
        self.n += 1;
        self.total += u64::from(len);
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> (*mut u8, u32) {
        assert!(i < self.n, "segment index");
        // SAFETY: entries below `n` were written by `push`.
        unsafe { self.seg[i].assume_init() }
    }
}

/// Copies the gathered `src` into the one receive element `d`, which can hold it all (the
/// common case of [`scatter`], without its walk over the receive's list). False if `d` is
/// not inside a registration of the peer granting local write.
#[inline]
pub(super) fn place(src: &Segs, d: Sge, arena: &ArenaView, memo: &Cell<RegionMemo>) -> bool {
    let need = Access::LOCAL_WRITE;
    let Ok(dp) = arena.resolve_local_memo(memo, d.lkey, d.addr, src.total, need) else {
        return false;
    };
    // SAFETY: the `src.total` bytes from `dp` lie in the checked part of the peer's receive
    // buffer, kept mapped by `arena`.
    unsafe { copy_gathered::<STREAM_MIN_SEND>(src, dp) };
    true
}

/// Copies the gathered `src` to `dst` in the peer's memory, its segments laid end to end,
/// as a NIC's DMA would place them: a payload of at least `MIN` bytes (`STREAM_MIN` for an
/// RDMA Write, `STREAM_MIN_SEND` for a Send) streamed past this core's cache
/// (`fabric::reader_copies`), out of line so that a small message's copy stays in line.
///
/// # Safety
///
/// `dst` must be valid for writes of `src.total` bytes.
#[inline]
pub(super) unsafe fn copy_gathered<const MIN: usize>(src: &Segs, mut dst: *mut u8) {
    if src.total >= MIN as u64 {
        // SAFETY: forwarded to the caller's contract.
        unsafe { copy_gathered_large(src, dst, MIN) };
        return;
    }
    for i in 0..src.n {
        let (p, len) = src.get(i);
        // SAFETY: `p..p+len` is a checked span of a local registration (or the inline slice);
        // the segments add up to `src.total`, which the caller's `dst` can take.
        unsafe {
            copy_bytes(p, dst, len as usize);
            dst = dst.add(len as usize);
        }
    }
}

/// [`copy_gathered`] of a large payload, each segment by `copy_to_peer` (streamed when it
/// is `min` bytes or more itself).
///
/// # Safety
///
/// As [`copy_gathered`].
#[inline(never)]
unsafe fn copy_gathered_large(src: &Segs, mut dst: *mut u8, min: usize) {
    for i in 0..src.n {
        let (p, len) = src.get(i);
        // SAFETY: as in `copy_gathered`.
        unsafe {
            copy_to_peer(p, dst, len as usize, min);
            dst = dst.add(len as usize);
        }
    }
}

/// Scatters `src` into the receive `wqe`'s elements, checking each piece used against the
/// peer's key table (local write rights).
#[inline]
pub(super) fn scatter(src: &Segs, wqe: &Claimed<'_>, arena: &ArenaView) -> bool {
    let mut si = 0;
    let mut soff = 0u32;
    let mut left = src.total;
    let mut di = 0;
    while left > 0 {
        if di >= wqe.num_sge() {
            return false;
        }
        let d: Sge = wqe.sge(di);
        di += 1;
        let take = u64::from(d.length).min(left);
        let Ok(mut dp) = arena.resolve_local(d.lkey, d.addr, take, Access::LOCAL_WRITE) else {
            return false;
        };
        let mut want = take as u32;
        while want > 0 {
            let (sp, slen) = src.get(si);
            let n = (slen - soff).min(want);
            // SAFETY: `sp+soff..+n` lies in a checked local span; `dp..dp+n` lies in the
            // checked part of the peer's receive buffer, kept mapped by `arena`.
            unsafe {
                copy_bytes(sp.add(soff as usize), dp, n as usize);
                dp = dp.add(n as usize);
            }
            want -= n;
            soff += n;
            if soff == slen {
                si += 1;
                soff = 0;
            }
        }
        left -= take;
    }
    true
}
