//! The cross-thread return path of a buffer pool: a bounded, pre-allocated, lock-free list of
//! buffer indices; multi-producer single-consumer for an owned pool, multi-producer
//! multi-consumer for a chunk of a shared pool ([`super::share`]).
//!
//! It is a Treiber stack. An owned pool's consumer never pops one node: it takes the whole
//! list with one `swap`-like step. A shared pool's takers pop one node each ([`pop`]).
//! Producers push with a compare-and-swap on the head. Each buffer index owns one link
//! word (`next[index]`), written only by whoever holds that buffer, so the list needs no
//! storage beyond one `u32` per buffer, allocated when the pool is built, and can never be
//! full: a buffer is in the list at most once because only its unique holder can put it there.
//!
//! The classic ABA hazard of Treiber stacks: a push only needs the head it read to still be
//! the head when its CAS succeeds, and then the new node's link is exactly that head,
//! whatever happened in between, so pushes and take-alls are safe as they are. A single-node
//! pop is not: between reading the head `A` and its successor `B` and swinging the head to
//! `B`, `A` could be popped, `B` popped and `A` pushed again, and the CAS would succeed with
//! a `B` no longer free. So the head word carries a tag beside the index, bumped by every
//! change of the head: a CAS that read a head before any change fails.
//!
//! [`pop`]: ReturnList::pop
//!
//! Memory ordering: a producer writes its links (relaxed) before its CAS (release); every
//! modification of the head is a read-modify-write, so the consumer's `swap` (acquire)
//! synchronises with every producer whose node it takes (release sequences), and the relaxed
//! link reads that follow see the links.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::{Backoff, CachePadded};

/// The end-of-list marker; never a buffer index (pools hold at most `u32::MAX - 1` buffers).
pub(super) const END: u32 = u32::MAX;

/// A lock-free list of returned buffer indices; see the module documentation.
pub(super) struct ReturnList {
    /// The tag (high 32 bits, bumped by every change) and the first index of the list, or
    /// [`END`] (low 32 bits). On its own cache line: producers hammer it, the owner reads it
    /// on every periodic reclaim.
    head: CachePadded<AtomicU64>,
    /// `next[i]`: the index after `i` while `i` is in the list; written only by the holder of
    /// buffer `i` before it publishes `i`.
    next: Box<[AtomicU32]>,
}

impl ReturnList {
    /// An empty list for indices `0..count`.
    pub(super) fn new(count: u32) -> ReturnList {
        ReturnList {
            head: CachePadded::new(AtomicU64::new(u64::from(END))),
            next: (0..count).map(|_| AtomicU32::new(END)).collect(),
        }
    }

    /// Whether the list looked empty (a relaxed load: a racing push may be missed, and is
    /// then seen by a later call).
    #[inline]
    pub(super) fn looks_empty(&self) -> bool {
        index_of(self.head.load(Ordering::Relaxed)) == END
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
            self.next[last as usize].store(index_of(head), Ordering::Relaxed);
            match self.head.compare_exchange_weak(
                head,
                retag(head, first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
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
        let mut head = self.head.load(Ordering::Relaxed);
        let mut at = loop {
            match self.head.compare_exchange_weak(
                head,
                retag(head, END),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(old) => break index_of(old),
                Err(now) => head = now,
            }
        };
        let mut n = 0;
        while at != END {
            let next = self.next[at as usize].load(Ordering::Relaxed);
            f(at);
            n += 1;
            at = next;
        }
        n
    }

    /// Takes one index off the list, or `None` when it is empty. Any number of threads may
    /// pop and push at once (a shared pool's chunk); an owned pool never pops.
    #[inline]
    pub(super) fn pop(&self) -> Option<u32> {
        let backoff = Backoff::new();
        // Acquire: the pusher's link of this node (written before its Release CAS) is seen.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let first = index_of(head);
            if first == END {
                return None;
            }
            // Read before the CAS: if the node was popped (and its link changed) meanwhile,
            // the head's tag changed too and the CAS below fails.
            let next = self.next[first as usize].load(Ordering::Relaxed);
            match self.head.compare_exchange_weak(
                head,
                retag(head, next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(first),
                Err(now) => {
                    head = now;
                    backoff.spin();
                }
            }
        }
    }

    /// How many indices the list holds, counted by walking it (at most `count` steps): exact
    /// when nobody pushes or pops meanwhile, an estimate otherwise. For reports.
    pub(super) fn len(&self) -> u32 {
        let mut at = index_of(self.head.load(Ordering::Acquire));
        let mut n = 0;
        while at != END && (n as usize) < self.next.len() {
            n += 1;
            at = self.next[at as usize].load(Ordering::Relaxed);
        }
        n
    }
}

/// The index half of a head word.
#[inline]
fn index_of(head: u64) -> u32 {
    head as u32
}

/// The head word after `head` that names `index`: its tag bumped.
#[inline]
fn retag(head: u64, index: u32) -> u64 {
    ((head >> 32).wrapping_add(1) << 32) | u64::from(index)
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
    fn pops_take_the_last_pushed_first() {
        let list = ReturnList::new(4);
        assert_eq!(list.pop(), None);
        for i in [2, 0, 3] {
            list.push(i);
        }
        assert_eq!(list.len(), 3);
        assert_eq!(list.pop(), Some(3));
        assert_eq!(list.pop(), Some(0));
        list.push(1);
        assert_eq!(list.pop(), Some(1));
        assert_eq!(list.pop(), Some(2));
        assert_eq!(list.pop(), None);
        assert_eq!(list.len(), 0);
    }

    #[test]
    fn concurrent_pops_and_pushes_hand_each_index_to_one_holder() {
        // Every thread pops an index, marks it held (a second holder would find the mark),
        // and pushes it back: with ABA the same index would be handed out twice.
        const N: u32 = 8;
        const ROUNDS: u32 = 50_000;
        let list = Arc::new(ReturnList::new(N));
        for i in 0..N {
            list.push(i);
        }
        let held: Arc<Vec<AtomicU32>> = Arc::new((0..N).map(|_| AtomicU32::new(0)).collect());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (list, held) = (Arc::clone(&list), Arc::clone(&held));
                std::thread::spawn(move || {
                    let mut got = 0u32;
                    for _ in 0..ROUNDS {
                        if let Some(i) = list.pop() {
                            let was = held[i as usize].swap(1, Ordering::AcqRel);
                            assert_eq!(was, 0, "index {i} handed to two holders");
                            held[i as usize].store(0, Ordering::Release);
                            list.push(i);
                            got += 1;
                        }
                    }
                    got
                })
            })
            .collect();
        let got: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(got > 0);
        assert_eq!(list.len(), N);
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
