//! [`CqWatch`]: one word per completion queue entry that a thread polling many queues reads
//! to learn, without touching the connection that owns the queue, whether a completion
//! waits at the queue's next position.
//!
//! A worker with hundreds of connections spends most of a turn on the idle ones: each poll
//! reads several cold lines of a connection several kilobytes long (measured on soft, 1,000
//! connections each with one null RPC in flight: about half of both the server's and the
//! client's time, before any RPC work). A watch lets it keep, in a dense table of its own,
//! the queue's entries and the position of the next completion ([`CompletionQueue::cursor`])
//! for every connection with nothing else to do, and poll only those whose word says a
//! completion has arrived.
//!
//! The soft provider's completion queue offers one (its entries carry a sequence word: the
//! entry at position `p` holds `p + 1` once its completion is published). A provider whose
//! queue cannot be read this way (verbs: the layout belongs to the device's library) offers
//! none, and its connections are polled at every turn, as before.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(doc)]
use crate::fabric::CompletionQueue;

/// A view of a completion queue's sequence words ([`CompletionQueue::watch`]).
///
/// It keeps the queue's memory alive, so it may outlive the queue's owner: a stale watch
/// reads a word that no longer changes, never freed memory.
pub struct CqWatch {
    /// The first entry's sequence word.
    first: NonNull<AtomicU64>,
    /// Words from one entry's sequence word to the next one's.
    stride: usize,
    /// Entries in the ring, less one (a power of two less one).
    mask: u64,
    /// Keeps the mapping that `first` points into.
    _keep: Arc<dyn Send + Sync>,
}

// SAFETY: the words are atomics in memory that `_keep` holds mapped; reading them from any
// thread is what their writers (other threads, other processes) expect.
unsafe impl Send for CqWatch {}
// SAFETY: as for `Send`; through `&CqWatch` the words are only read atomically.
unsafe impl Sync for CqWatch {}

impl CqWatch {
    /// A watch of `mask + 1` entries whose sequence words start at `first`, `stride` words
    /// apart.
    ///
    /// # Safety
    ///
    /// `first.add(i * stride)` must be a valid, aligned `AtomicU64` for every `i <= mask`
    /// for as long as `keep` lives, and `mask + 1` must be a power of two.
    pub(crate) unsafe fn new(
        first: NonNull<AtomicU64>,
        stride: usize,
        mask: u64,
        keep: Arc<dyn Send + Sync>,
    ) -> CqWatch {
        CqWatch {
            first,
            stride,
            mask,
            _keep: keep,
        }
    }

    /// The word of position `at`; valid while `self` lives.
    #[inline(always)]
    fn word(&self, at: u64) -> *const AtomicU64 {
        // SAFETY: `at & mask <= mask`, so the offset stays inside the ring `new`'s caller
        // vouched for.
        unsafe {
            self.first
                .as_ptr()
                .add((at & self.mask) as usize * self.stride)
                .cast_const()
        }
    }
}

/// One entry of a [`WatchTable`] as the scan reads it: the word of the completion its
/// owner waits for and the value that word takes once that completion is published (a
/// null word: the owner is polled at every turn). Sixteen bytes, four to a cache line.
#[derive(Clone, Copy)]
struct Hot {
    word: *const AtomicU64,
    expect: u64,
}

impl Hot {
    const POLL: Hot = Hot {
        word: std::ptr::null(),
        expect: 0,
    };
}

/// What a thread polling many queues keeps of them, in the order of its own list: for
/// each, its [`CqWatch`] (if any) and, while the queue's owner waits for nothing but a
/// completion, that completion's word. A turn reads this dense table and one word of each
/// waiting owner's queue, and polls only the owners whose word has changed (or that are
/// not waiting).
///
/// Indices follow the caller's list: [`rebuild`](Self::rebuild) it whenever the list
/// changes. Nothing here allocates once the table has the list's capacity.
#[derive(Default)]
pub struct WatchTable {
    /// What the scan reads.
    hot: Vec<Hot>,
    /// The watches, which keep the words' memory mapped; read only when an entry is set.
    watches: Vec<Option<CqWatch>>,
}

// SAFETY: the words are atomics in memory that the watches in `watches` keep mapped; they are
// only read, atomically, by whoever holds the table.
unsafe impl Send for WatchTable {}
// SAFETY: as for `Send`; nothing is written through `&WatchTable`.
unsafe impl Sync for WatchTable {}

impl WatchTable {
    /// How many places ahead of the entry it looks at a turn starts fetching a waiting
    /// owner's completion word ([`skip`](Self::skip)): a skipped owner takes a few
    /// nanoseconds, so the fetch must start well ahead to arrive in time.
    pub const AHEAD: usize = 16;

    /// Every this many turns, a caller polls every owner, waiting or not
    /// ([`skip`](Self::skip) with `full`): for what idle polls look at now and then (an
    /// overrun, a requester's timeouts).
    pub const FULL_TURN_EVERY: u64 = 64;

    /// An empty table with room for `n` entries.
    pub fn with_capacity(n: usize) -> WatchTable {
        WatchTable {
            hot: Vec::with_capacity(n),
            watches: Vec::with_capacity(n),
        }
    }

    /// Makes the table one entry per watch of `watches`, in order, none of them waiting.
    pub fn rebuild(&mut self, watches: impl Iterator<Item = Option<CqWatch>>) {
        self.hot.clear();
        self.watches.clear();
        self.watches.extend(watches);
        self.hot.resize(self.watches.len(), Hot::POLL);
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.hot.len()
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }

    /// Whether entry `i` may be skipped: its owner waits for a completion and none is there
    /// (false for an index past the end).
    #[inline(always)]
    pub fn quiet(&self, i: usize) -> bool {
        match self.hot.get(i) {
            // SAFETY: a non-null word was taken from the watch at `watches[i]`, which keeps
            // its memory mapped until the entry is rebuilt.
            Some(h) if !h.word.is_null() => unsafe { &*h.word }.load(Ordering::Relaxed) != h.expect,
            _ => false,
        }
    }

    /// One step of a turn over the owners: starts fetching the word entry
    /// `i + AHEAD` waits on, if any, and says whether the owner of entry `i` may be skipped
    /// ([`quiet`](Self::quiet), never on a `full` turn).
    #[inline(always)]
    pub fn skip(&self, i: usize, full: bool) -> bool {
        if let Some(h) = self.hot.get(i + Self::AHEAD) {
            if !h.word.is_null() {
                prefetch_word(h.word);
            }
        }
        !full && self.quiet(i)
    }

    /// Whether the owner of entry `i` waits for a completion (its word is then fetched
    /// ahead by [`skip`](Self::skip)); false for an index past the end.
    #[inline(always)]
    pub fn waiting(&self, i: usize) -> bool {
        self.hot.get(i).is_some_and(|h| !h.word.is_null())
    }

    /// Whether entry `i` has a watch at all.
    #[inline(always)]
    pub fn is_watched(&self, i: usize) -> bool {
        self.watches.get(i).is_some_and(Option::is_some)
    }

    /// Records, after a poll of entry `i`'s owner, where its next completion will be if only
    /// a completion can give it work (its [`cursor`](super::CompletionQueue::cursor));
    /// `None`: polled at the next turn.
    #[inline(always)]
    pub fn set(&mut self, i: usize, at: Option<u64>) {
        let (Some(h), Some(w)) = (self.hot.get_mut(i), self.watches.get(i)) else {
            return;
        };
        *h = match (w, at) {
            (Some(w), Some(at)) => Hot {
                word: w.word(at),
                expect: at.wrapping_add(1),
            },
            _ => Hot::POLL,
        };
    }

    /// Every owner polled at the next turn.
    pub fn wake_all(&mut self) {
        self.hot.fill(Hot::POLL);
    }
}

/// Starts fetching the cache line of `p` (a hint: never faults).
#[inline(always)]
fn prefetch_word(p: *const AtomicU64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl core::fmt::Debug for CqWatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CqWatch")
            .field("entries", &(self.mask + 1))
            .finish()
    }
}
