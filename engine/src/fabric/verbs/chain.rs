//! Work request chains as both posting paths (a queue pair's, `qp.rs`, and a shared
//! receive queue's, `srq.rs`) build them: at most [`CHUNK`] per provider call, in arrays on
//! the stack, scatter lists passed as they are; and what a failed post call means.

use std::mem;
use std::ptr;

use rdma_sys::*;

use super::sys::errno;
use crate::fabric::{PostError, RecvWr, Sge};

/// Work requests handed to the provider per post call.
pub(super) const CHUNK: usize = 16;

const _: () = {
    // Scatter lists are passed to the provider as they are: the layouts must agree.
    assert!(mem::size_of::<Sge>() == mem::size_of::<ibv_sge>());
    assert!(mem::align_of::<Sge>() == mem::align_of::<ibv_sge>());
};

/// The library's receive work request for `wr` under `wr_id` (its scatter list borrowed
/// from `wr`, which must outlive the post).
pub(super) fn raw_recv_wr(wr_id: u64, wr: &RecvWr<'_>) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: if wr.sges.is_empty() {
            ptr::null_mut()
        } else {
            wr.sges.as_ptr().cast_mut().cast()
        },
        num_sge: wr.sges.len() as i32,
    }
}

/// Links the first `count` (at least 1) work requests at `raw` into one chain.
///
/// # Safety
///
/// `raw` points to at least `count` initialised work requests.
pub(super) unsafe fn link_chain(raw: *mut ibv_recv_wr, count: usize) {
    for i in 0..count - 1 {
        // SAFETY: entries `i` and `i + 1` are inside the first `count` (the caller's
        // contract).
        unsafe { (*raw.add(i)).next = raw.add(i + 1) };
    }
}

/// How many entries of the chain at `chain` (of `count`) the provider took before the one
/// it reports in `bad`, bounded by the chain (a pointer before it counts none).
pub(super) fn posted_before<T>(chain: *mut T, bad: *mut T, count: usize) -> usize {
    if bad.is_null() {
        return 0;
    }
    ((bad as usize).saturating_sub(chain as usize) / mem::size_of::<T>()).min(count)
}

/// A post verb's nonzero return: a negative value defers to errno; ENOMEM is a full queue.
pub(super) fn post_error(rc: i32) -> PostError {
    let e = if rc < 0 { errno() } else { rc };
    if e == libc::ENOMEM {
        PostError::QueueFull
    } else {
        PostError::Os(e)
    }
}
