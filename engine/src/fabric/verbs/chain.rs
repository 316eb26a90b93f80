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

#[cfg(test)]
mod tests {
    use super::*;

    /// Three receives at `raw`, built as the posting paths build them.
    fn chunk(sges: &[Sge]) -> [ibv_recv_wr; 3] {
        let wr = RecvWr::new(0, sges);
        [
            raw_recv_wr(10, &wr),
            raw_recv_wr(11, &wr),
            raw_recv_wr(12, &wr),
        ]
    }

    /// The provider sees one chain of the requests built, in order, ending in null; when it
    /// takes them all, the builder's refusal (if any) is the chunk's outcome.
    #[test]
    fn a_chunk_is_linked_and_posted_in_one_call() {
        let sges = [Sge::new(0x1000, 64, 7)];
        let mut raw = chunk(&sges);
        let raw_p = raw.as_mut_ptr();
        let mut seen = Vec::new();
        let post = |chain: *mut ibv_recv_wr, _: &mut *mut ibv_recv_wr| {
            let mut at = chain;
            while !at.is_null() {
                // SAFETY: the chain's entries are the test's array.
                let w = unsafe { &*at };
                seen.push((w.wr_id, w.num_sge));
                at = w.next;
            }
            0
        };
        // SAFETY: three initialised requests, their `next` null.
        let (posted, outcome) = unsafe { post_chain(raw_p, 3, None, post) };
        assert_eq!((posted, outcome), (3, Ok(3)));
        assert_eq!(seen, [(10, 1), (11, 1), (12, 1)]);

        let mut raw = chunk(&sges);
        let refused = Some((2, PostError::QueueFull));
        let never = |_: *mut ibv_recv_wr, _: &mut *mut ibv_recv_wr| -> i32 { unreachable!() };
        // SAFETY: as above; nothing is posted.
        let (posted, outcome) = unsafe { post_chain(raw.as_mut_ptr(), 0, refused, never) };
        assert_eq!((posted, outcome), (0, Err((2, PostError::QueueFull))));
    }

    /// The provider's refusal: the requests before the one it names are posted, and its
    /// error (ENOMEM a full queue) comes before the builder's refusal.
    #[test]
    fn a_refused_chain_counts_what_the_provider_took() {
        let mut raw = chunk(&[]);
        let raw_p = raw.as_mut_ptr();
        let refuse_third = |chain: *mut ibv_recv_wr, bad: &mut *mut ibv_recv_wr| {
            // SAFETY: the chain has three entries.
            *bad = unsafe { chain.add(2) };
            libc::ENOMEM
        };
        let refused = Some((3, PostError::TooManySge { given: 2, max: 1 }));
        // SAFETY: three initialised requests, their `next` null.
        let (posted, outcome) = unsafe { post_chain(raw_p, 3, refused, refuse_third) };
        assert_eq!((posted, outcome), (2, Err((2, PostError::QueueFull))));
        assert!(raw[0].sg_list.is_null() && raw[0].num_sge == 0);

        let mut raw = chunk(&[]);
        let other = |_: *mut ibv_recv_wr, bad: &mut *mut ibv_recv_wr| {
            *bad = ptr::null_mut();
            libc::EINVAL
        };
        // SAFETY: as above.
        let (posted, outcome) = unsafe { post_chain(raw.as_mut_ptr(), 3, None, other) };
        assert_eq!(
            (posted, outcome),
            (0, Err((0, PostError::Os(libc::EINVAL))))
        );
    }

    /// A list goes chunk by chunk; a refusal is reported at its index in the whole list.
    #[test]
    fn a_list_is_posted_chunk_by_chunk() {
        let wrs: Vec<u32> = (0..40).collect();
        let mut calls = Vec::new();
        let r = post_in_chunks(&wrs, |rest| {
            calls.push(rest[0]);
            if rest[0] == 32 {
                return Err((3, PostError::QueueFull));
            }
            Ok(rest.len().min(CHUNK))
        });
        assert_eq!(calls, [0, 16, 32]);
        let bad = r.unwrap_err();
        assert_eq!((bad.index, bad.error), (35, PostError::QueueFull));
        assert!(post_in_chunks(&wrs[..5], |rest| Ok(rest.len())).is_ok());
    }

    #[test]
    fn receive_scatter_lists_are_bounded() {
        let sges = [Sge::new(0, 1, 1), Sge::new(1, 1, 1)];
        let wr = RecvWr::new(1, &sges);
        assert_eq!(check_recv_sges(&wr, 2), Ok(()));
        assert_eq!(
            check_recv_sges(&wr, 1),
            Err(PostError::TooManySge { given: 2, max: 1 })
        );
    }
}
