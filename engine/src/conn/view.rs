//! In-place views of the engine's own registered buffers.
//!
//! This is the only `unsafe` of the engine outside the fabric providers and the pool. The
//! engine holds every buffer it views as a [`Buf`] it owns, and calls these functions only
//! in the states where the fabric's rule for in-place views holds:
//!
//! - a **receive buffer** is viewed after its receive completion was polled and before it
//!   is posted again;
//! - a **send buffer** (requester call buffer, responder reply ring slot) is viewed
//!   mutably only once every Send and RDMA Write gathering from it has been retired;
//! - a **pull buffer** is viewed after all RDMA Reads into it completed, and mutably only
//!   when none is outstanding;
//! - a **bulk buffer exposed through a window** is viewed only after the window was
//!   invalidated (locally, or remotely as reported by the receive completion), or before it
//!   is bound; in persistent mode a peer may still write it (the mode's documented trust).
//!
//! Views never outlive the call that made them.

#![allow(unsafe_code)]

use crate::fabric::Provider;
use crate::pool::Buf;

/// The first `len` bytes of `buf`, read in place.
#[inline]
pub(crate) fn bytes<P: Provider>(buf: &Buf<P>, len: usize) -> &[u8] {
    // SAFETY: per the module rules, no posted request or peer key writes `buf` while the
    // engine views it; `as_slice` checks nothing else, and the slice is cut to `len`
    // (panics if longer than the buffer, never reads outside it).
    unsafe { &buf.as_slice()[..len] }
}

/// The whole of `buf`, writable in place.
#[inline]
pub(crate) fn bytes_mut<P: Provider>(buf: &mut Buf<P>) -> &mut [u8] {
    // SAFETY: per the module rules, no posted request reads or writes `buf` and no peer key
    // covers it while the engine views it mutably.
    unsafe { buf.as_mut_slice() }
}
