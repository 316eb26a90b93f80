//! A counting global allocator, so that a benchmark can report heap allocations per RPC.
//!
//! A binary opts in with
//! `#[global_allocator] static A: rpcrdma_bench::alloc::Counting = rpcrdma_bench::alloc::Counting;`
//! and reads [`allocations`] before and after the measured phase. Counting costs one
//! relaxed atomic add per allocation: nothing on a path that does not allocate. Threads
//! that are not part of what is measured (a progress display) call
//! [`exempt_this_thread`].

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on threads whose allocations are not the engine's (a progress display).
    static EXEMPT: Cell<bool> = const { Cell::new(false) };
}

/// Stops counting the allocations of the calling thread (for a display or logging thread
/// that runs beside the measured one).
pub fn exempt_this_thread() {
    EXEMPT.with(|e| e.set(true));
}

#[inline]
fn count() {
    // Written once: a store per allocation would keep a shared line moving between cores.
    if INSTALLED.load(Ordering::Relaxed) == 0 {
        INSTALLED.store(1, Ordering::Relaxed);
    }
    // `try_with`: a thread being torn down still allocates and is counted.
    if !EXEMPT.try_with(|e| e.get()).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The system allocator, counting allocations and reallocations.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; the only addition is a relaxed counter increment.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (that is, from System) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: `ptr` and `layout` are the caller's, valid for System.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (and reallocations) made so far by the whole process, or `None` when
/// [`Counting`] is not the global allocator.
pub fn allocations() -> Option<u64> {
    // Any Rust program has allocated by the time it asks.
    (INSTALLED.load(Ordering::Relaxed) == 1).then(|| ALLOCATIONS.load(Ordering::Relaxed))
}
