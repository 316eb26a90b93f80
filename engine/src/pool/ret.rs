//! The cross-thread return path of a buffer pool: a bounded, pre-allocated, lock-free
//! multi-producer single-consumer list of buffer indices.
//!
//! It is a Treiber stack whose consumer never pops one node: it takes the whole list with one
//! `swap`. Producers push with a compare-and-swap on the head. Each buffer index owns one link
//! word (`next[index]`), written only by whoever holds that buffer, so the list needs no
//! storage beyond one `u32` per buffer, allocated when the pool is built, and can never be
//! full: a buffer is in the list at most once because only its unique holder can put it there.
//!
//! Why the classic ABA hazard of Treiber stacks does not arise: a push only needs the head it
//! read to still be the head when its CAS succeeds, and then the new node's link is exactly
//! that head, whatever happened in between (a take-all and a re-push of the same index leave
//! a list that still begins at that index). Only single-node pops suffer ABA, and there are
//! none.
//!
//! Memory ordering: a producer writes its links (relaxed) before its CAS (release); every
//! modification of the head is a read-modify-write, so the consumer's `swap` (acquire)
//! synchronises with every producer whose node it takes (release sequences), and the relaxed
//! link reads that follow see the links.

use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_utils::{Backoff, CachePadded};

/// The end-of-list marker; never a buffer index (pools hold at most `u32::MAX - 1` buffers).
pub(super) const END: u32 = u32::MAX;

/// A lock-free list of returned buffer indices; see the module documentation.
pub(super) struct ReturnList {
    /// First index of the list, or [`END`]. On its own cache line: producers hammer it, the
    /// owner reads it on every periodic reclaim.
    head: CachePadded<AtomicU32>,
    /// `next[i]`: the index after `i` while `i` is in the list; written only by the holder of
    /// buffer `i` before it publishes `i`.
    next: Box<[AtomicU32]>,
}

impl ReturnList {
    /// An empty list for indices `0..count`.
    pub(super) fn new(count: u32) -> ReturnList {
        ReturnList {
            head: CachePadded::new(AtomicU32::new(END)),
            next: (0..count).map(|_| AtomicU32::new(END)).collect(),
        }
    }

    /// Whether the list looked empty (a relaxed load: a racing push may be missed, and is
    /// then seen by a later call).
    #[inline]
    pub(super) fn looks_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) == END
    }

    /// Pushes `index`. The caller must hold buffer `index` and give it up by this call.
    #[inline]
    pub(super) fn push(&self, index: u32) {
        self.push_chain(index, index);
    }

    /// Links `index` in front of `first` without publishing it, for a chain built by one
    /// holder and pushed with [`push_chain`](Self::push_chain). The caller must hold `index`.
    #[inline]
    pub(super) fn link(&self, index: u32, first: u32) {
        self.next[index as usize].store(first, Ordering::Relaxed);
    }

    /// Publishes the chain `first ..= last` (linked with [`link`](Self::link); `last`'s link
    /// is set here) with one successful CAS. The caller must hold every buffer of the chain.
    pub(super) fn push_chain(&self, first: u32, last: u32) {
        let backoff = Backoff::new();
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            self.next[last as usize].store(head, Ordering::Relaxed);
            match self
                .head
                .compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => {
                    head = now;
                    backoff.spin();
                }
            }
        }
    }

    /// Takes every index in the list, hands each to `f` and returns how many there were.
    /// Only the pool's owner calls this (single consumer).
    #[inline]
    pub(super) fn take_all(&self, mut f: impl FnMut(u32)) -> u32 {
        if self.looks_empty() {
            return 0;
        }
        let mut at = self.head.swap(END, Ordering::Acquire);
        let mut n = 0;
        while at != END {
            let next = self.next[at as usize].load(Ordering::Relaxed);
            f(at);
            n += 1;
            at = next;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn take_all_returns_each_pushed_index_once() {
        let list = ReturnList::new(8);
        assert_eq!(list.take_all(|_| unreachable!()), 0);
        for i in [3, 0, 7] {
            list.push(i);
        }
        let mut got = Vec::new();
        assert_eq!(list.take_all(|i| got.push(i)), 3);
        got.sort_unstable();
        assert_eq!(got, [0, 3, 7]);
        assert!(list.looks_empty());
    }

    #[test]
    fn chains_push_in_one_step() {
        let list = ReturnList::new(8);
        list.push(5);
        // Chain 1 -> 2 -> 4, built by one holder.
        list.link(2, 4);
        list.link(1, 2);
        list.push_chain(1, 4);
        let mut got = Vec::new();
        list.take_all(|i| got.push(i));
        assert_eq!(got, [1, 2, 4, 5]);
    }

    #[test]
    fn concurrent_producers_lose_nothing() {
        const PER: u32 = 2_000;
        const THREADS: u32 = 4;
        let list = Arc::new(ReturnList::new(PER * THREADS));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let list = Arc::clone(&list);
                std::thread::spawn(move || {
                    for i in 0..PER {
                        list.push(t * PER + i);
                    }
                })
            })
            .collect();
        let mut seen = vec![false; (PER * THREADS) as usize];
        let mut total = 0;
        let deadline = Instant::now() + Duration::from_secs(20);
        while total < PER * THREADS {
            assert!(Instant::now() < deadline, "only {total} indices came back");
            total += list.take_all(|i| {
                assert!(!std::mem::replace(&mut seen[i as usize], true), "{i} twice");
            });
            std::hint::spin_loop();
        }
        for w in workers {
            w.join().unwrap();
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(list.take_all(|_| unreachable!()), 0);
    }
}
