//! Work request chains as every posting path (a queue pair's sends and receives, `qp.rs`,
//! and a shared receive queue's receives, `srq.rs`) builds and posts them: at most [`CHUNK`]
//! per provider call, in arrays on the stack, scatter lists passed as they are, a list
//! posted chunk by chunk ([`post_in_chunks`]), each chunk linked and handed to the provider
//! in one call ([`post_chain`]); and what a failed post call means.

use std::mem;
use std::ptr;

use rdma_sys::*;

use super::sys::errno;
use crate::fabric::{BadWr, PostError, RecvWr, Sge};

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

/// A work request of a provider's chain, linked to the next one by its `next` pointer
/// (`ibv_send_wr`, `ibv_recv_wr`).
pub(super) trait ChainLink: Sized {
    /// Points this request's `next` at `next`.
    fn set_next(&mut self, next: *mut Self);
}

impl ChainLink for ibv_send_wr {
    #[inline]
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

impl ChainLink for ibv_recv_wr {
    #[inline]
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

/// Links the first `count` (at least 1) work requests at `raw` into one chain; the last
/// one's `next` is left as it is (null, as built).
///
/// # Safety
///
/// `raw` points to at least `count` initialised work requests.
unsafe fn link_chain<T: ChainLink>(raw: *mut T, count: usize) {
    for i in 0..count - 1 {
        // SAFETY: entries `i` and `i + 1` are inside the first `count` (the caller's
        // contract).
        unsafe { (*raw.add(i)).set_next(raw.add(i + 1)) };
    }
}

/// Posts a chunk built at `raw`: its first `count` work requests (none if 0), linked into
/// one chain and handed to `post` (the provider's post verb on the queue, given the chain
/// and where to say which request it refused). `refused` is the request the builder
/// stopped before, if it refused one (at index `count`), and why.
///
/// Returns how many requests the provider took, for the caller's accounting, and the
/// chunk's outcome: how many were posted, or the index of the request that was not and
/// why (the provider's refusal first, then the builder's).
///
/// # Safety
///
/// `raw` points to at least `count` initialised work requests whose `next` is null, and
/// `post` may be called with them (whatever they name outlives the call).
#[inline]
pub(super) unsafe fn post_chain<T: ChainLink>(
    raw: *mut T,
    count: usize,
    refused: Option<(usize, PostError)>,
    post: impl FnOnce(*mut T, &mut *mut T) -> i32,
) -> (usize, Result<usize, (usize, PostError)>) {
    if count > 0 {
        // SAFETY: the first `count` entries are initialised (the caller's contract).
        unsafe { link_chain(raw, count) };
        let mut bad: *mut T = ptr::null_mut();
        let rc = post(raw, &mut bad);
        if rc != 0 {
            let posted = posted_before(raw, bad, count);
            return (posted, Err((posted, post_error(rc))));
        }
    }
    match refused {
        Some(r) => (count, Err(r)),
        None => (count, Ok(count)),
    }
}

/// Posts `wrs` in order through `post_chunk`, which posts what it can of the requests it is
/// given (at most [`CHUNK`], in one provider call) and says how many it posted, or the
/// index of the one it did not post and why. On a refusal, the requests before the refused
/// one are posted.
#[inline]
pub(super) fn post_in_chunks<W>(
    wrs: &[W],
    mut post_chunk: impl FnMut(&[W]) -> Result<usize, (usize, PostError)>,
) -> Result<(), BadWr> {
    let mut base = 0;
    while base < wrs.len() {
        match post_chunk(&wrs[base..]) {
            Ok(n) => base += n,
            Err((i, error)) => {
                return Err(BadWr {
                    index: base + i,
                    error,
                })
            }
        }
    }
    Ok(())
}

/// Why a receive `wr` cannot be posted to a queue taking at most `max_sge` scatter
/// elements per receive, if it cannot.
#[inline]
pub(super) fn check_recv_sges(wr: &RecvWr<'_>, max_sge: u32) -> Result<(), PostError> {
    if wr.sges.len() > max_sge as usize {
        return Err(PostError::TooManySge {
            given: wr.sges.len(),
            max: max_sge,
        });
    }
    Ok(())
}

/// How many entries of the chain at `chain` (of `count`) the provider took before the one
/// it reports in `bad`, bounded by the chain (a pointer before it counts none).
fn posted_before<T>(chain: *mut T, bad: *mut T, count: usize) -> usize {
    if bad.is_null() {
        return 0;
    }
    ((bad as usize).saturating_sub(chain as usize) / mem::size_of::<T>()).min(count)
}

/// A post verb's nonzero return: a negative value defers to errno; ENOMEM is a full queue.
fn post_error(rc: i32) -> PostError {
    let e = if rc < 0 { errno() } else { rc };
    if e == libc::ENOMEM {
        PostError::QueueFull
    } else {
        PostError::Os(e)
    }
}
