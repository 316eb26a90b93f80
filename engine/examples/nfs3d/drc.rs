//! The duplicate request cache: a non-idempotent NFSv3 procedure (CREATE, REMOVE, RENAME,
//! ...) retransmitted with its XID — as the Linux client does after a reconnect (RFC 5531
//! §9: the XID lets a server recognise a retransmission; RFC 8166 §3.3.3 and §4.4.1 for the
//! new connection) — is answered with the reply of its first execution instead of being
//! executed again (which would turn a successful CREATE into EXIST, a REMOVE into NOENT).
//!
//! Entries are keyed by (XID, procedure, a hash of the argument bytes, a hash of the
//! AUTH_SYS machine name), so that two clients, or two different Calls that happen to
//! share an XID, do not collide.
//!
//! - **InProgress**: the original is running on an I/O thread. A duplicate waits for it on
//!   a condition variable, on its own I/O thread (never on a polling worker), for at most
//!   the wait given to [`Drc::begin`], then replays the reply.
//! - **Done**: the reply's results bytes, replayed without executing anything.
//!
//! Memory is bounded: at most `max_entries` finished entries and `max_bytes` of cached
//! results (each entry counted as its results plus [`ENTRY_OVERHEAD`]). When either cap
//! would be exceeded the oldest finished entries are evicted first (FIFO by completion
//! time; a retransmission comes within seconds of its original, so age is the right
//! measure). In-progress entries are never evicted; there are at most as many as Calls in
//! process (credits × connections).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bytes each entry is counted for beside its results (key, map and queue slots).
pub const ENTRY_OVERHEAD: usize = 96;

/// What identifies one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DrcKey {
    /// The RPC XID.
    pub xid: u32,
    /// The NFSv3 procedure.
    pub proc_num: u32,
    /// A hash of the procedure's argument bytes.
    pub args_hash: u64,
    /// A hash of the AUTH_SYS machine name (0 for other credentials).
    pub client_hash: u64,
}

impl DrcKey {
    /// The key of a Call from a client whose [`client_hash`] is `client`.
    pub fn new(xid: u32, proc_num: u32, args: &[u8], client: u64) -> DrcKey {
        DrcKey {
            xid,
            proc_num,
            args_hash: hash(args),
            client_hash: client,
        }
    }
}

/// The hash of an AUTH_SYS machine name (0 for none).
pub fn client_hash(machine_name: &[u8]) -> u64 {
    if machine_name.is_empty() {
        0
    } else {
        hash(machine_name)
    }
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// A finished request's reply, as the engine sends it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cached {
    /// SUCCESS with these results bytes.
    Success(Arc<[u8]>),
    /// GARBAGE_ARGS.
    Garbage,
}

impl Cached {
    fn cost(&self) -> usize {
        ENTRY_OVERHEAD
            + match self {
                Cached::Success(r) => r.len(),
                Cached::Garbage => 0,
            }
    }
}

/// What [`Drc::begin`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Begin {
    /// Not seen before: execute it, then [`Drc::finish`] (or [`Drc::abandon`]) the key.
    Execute,
    /// Seen and finished (possibly after waiting for the original): send this again.
    Replay(Cached),
    /// The original is still running after the wait given: answer without executing (the
    /// client retransmits again later).
    StillRunning,
}

/// Bounds of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrcLimits {
    /// Most finished entries kept.
    pub max_entries: usize,
    /// Most bytes of finished entries kept (results plus [`ENTRY_OVERHEAD`] each).
    pub max_bytes: usize,
}

impl Default for DrcLimits {
    fn default() -> Self {
        DrcLimits {
            max_entries: 4096,
            max_bytes: 8 << 20,
        }
    }
}

/// The cache's counters.
#[derive(Debug, Default)]
pub struct DrcStats {
    /// Duplicates answered from the cache (after a wait or not).
    pub hits: AtomicU64,
    /// Requests not found, executed.
    pub misses: AtomicU64,
    /// Duplicates that found their original in progress and waited for it.
    pub waits: AtomicU64,
    /// Duplicates whose original was still running when the wait ended.
    pub wait_timeouts: AtomicU64,
    /// Finished entries evicted to stay within the limits.
    pub evictions: AtomicU64,
}

/// Where a cached request stands: still running, or done with its reply.
enum EntryState {
    InProgress,
    Done(Cached),
}

#[derive(Default)]
struct Inner {
    map: HashMap<DrcKey, EntryState>,
    /// Finished entries, oldest first.
    order: VecDeque<DrcKey>,
    bytes: usize,
}

/// The cache, shared by the I/O threads.
pub struct Drc {
    inner: Mutex<Inner>,
    finished: Condvar,
    limits: DrcLimits,
    /// Its counters.
    pub stats: DrcStats,
}

impl core::fmt::Debug for Drc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Drc")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Drc {
    /// An empty cache within `limits`.
    pub fn new(limits: DrcLimits) -> Drc {
        Drc {
            inner: Mutex::new(Inner::default()),
            finished: Condvar::new(),
            limits,
            stats: DrcStats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another I/O thread panicked mid-update of plain maps;
        // the maps stay consistent enough to go on.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What `key` finds in `inner`: a new request is marked in progress (`Execute`), a
    /// finished one replayed; `None` while its original is in progress.
    fn lookup(&self, inner: &mut Inner, key: DrcKey) -> Option<Begin> {
        match inner.map.get(&key) {
            None => {
                inner.map.insert(key, EntryState::InProgress);
                bump(&self.stats.misses);
                Some(Begin::Execute)
            }
            Some(EntryState::Done(c)) => {
                bump(&self.stats.hits);
                Some(Begin::Replay(c.clone()))
            }
            Some(EntryState::InProgress) => None,
        }
    }

    /// [`begin`](Self::begin) for a polling worker, which never waits: `None` when the
    /// cache is busy or the request's original is still in progress (an I/O thread takes
    /// it then, and waits as it may).
    pub fn try_begin(&self, key: DrcKey) -> Option<Begin> {
        let mut inner = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        self.lookup(&mut inner, key)
    }

    /// Looks `key` up: a new request is marked in progress and executed by the caller; a
    /// finished one is replayed; one in progress is waited for, at most `wait`.
    pub fn begin(&self, key: DrcKey, wait: Duration) -> Begin {
        let deadline = Instant::now() + wait;
        let mut inner = self.lock();
        let mut waited = false;
        loop {
            if let Some(b) = self.lookup(&mut inner, key) {
                return b;
            }
            if !waited {
                waited = true;
                bump(&self.stats.waits);
            }
            let now = Instant::now();
            if now >= deadline {
                bump(&self.stats.wait_timeouts);
                return Begin::StillRunning;
            }
            inner = self
                .finished
                .wait_timeout(inner, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Records the reply of the request `key` executed, wakes its duplicates, and evicts
    /// the oldest entries beyond the limits.
    pub fn finish(&self, key: DrcKey, reply: Cached) {
        let mut inner = self.lock();
        let cost = reply.cost();
        if let Some(EntryState::Done(old)) = inner.map.insert(key, EntryState::Done(reply)) {
            // Finished twice (cannot happen through `begin`): account for the old one.
            inner.bytes -= old.cost();
            inner.order.retain(|k| *k != key);
        }
        inner.bytes += cost;
        inner.order.push_back(key);
        while inner.order.len() > self.limits.max_entries || inner.bytes > self.limits.max_bytes {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(EntryState::Done(c)) = inner.map.remove(&old) {
                inner.bytes -= c.cost();
                bump(&self.stats.evictions);
            }
        }
        drop(inner);
        self.finished.notify_all();
    }

    /// Forgets the request `key` whose execution produced nothing to replay (its duplicate
    /// will execute it), and wakes its duplicates.
    pub fn abandon(&self, key: DrcKey) {
        let mut inner = self.lock();
        if matches!(inner.map.get(&key), Some(EntryState::InProgress)) {
            inner.map.remove(&key);
        }
        drop(inner);
        self.finished.notify_all();
    }

    /// Finished entries and their bytes (for tests and reports).
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.order.len(), inner.bytes)
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn key(xid: u32) -> DrcKey {
        DrcKey::new(xid, 8, b"args", client_hash(b"client"))
    }

    fn ok(b: &[u8]) -> Cached {
        Cached::Success(Arc::from(b))
    }

    #[test]
    fn executes_once_then_replays() {
        let d = Drc::new(DrcLimits::default());
        assert_eq!(d.begin(key(1), Duration::ZERO), Begin::Execute);
        d.finish(key(1), ok(b"done"));
        assert_eq!(d.begin(key(1), Duration::ZERO), Begin::Replay(ok(b"done")));
        // Another client, other arguments, another procedure: other requests.
        assert_eq!(
            d.begin(
                DrcKey::new(1, 8, b"args", client_hash(b"other")),
                Duration::ZERO
            ),
            Begin::Execute
        );
        assert_eq!(
            d.begin(
                DrcKey::new(1, 8, b"argz", client_hash(b"client")),
                Duration::ZERO
            ),
            Begin::Execute
        );
        assert_eq!(
            d.begin(
                DrcKey::new(1, 12, b"args", client_hash(b"client")),
                Duration::ZERO
            ),
            Begin::Execute
        );
        assert_eq!(d.stats.hits.load(Ordering::Relaxed), 1);
        assert_eq!(d.stats.misses.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_duplicate_waits_for_its_original() {
        let d = Arc::new(Drc::new(DrcLimits::default()));
        assert_eq!(d.begin(key(2), Duration::ZERO), Begin::Execute);
        let d2 = Arc::clone(&d);
        let dup = thread::spawn(move || d2.begin(key(2), Duration::from_secs(10)));
        thread::sleep(Duration::from_millis(50));
        d.finish(key(2), ok(b"first"));
        assert_eq!(dup.join().unwrap(), Begin::Replay(ok(b"first")));
        assert_eq!(d.stats.waits.load(Ordering::Relaxed), 1);
        // A wait that ends before the original does.
        assert_eq!(d.begin(key(3), Duration::ZERO), Begin::Execute);
        assert_eq!(
            d.begin(key(3), Duration::from_millis(20)),
            Begin::StillRunning
        );
        assert_eq!(d.stats.wait_timeouts.load(Ordering::Relaxed), 1);
        // Abandoned: the duplicate executes.
        d.abandon(key(3));
        assert_eq!(d.begin(key(3), Duration::ZERO), Begin::Execute);
    }

    #[test]
    fn a_worker_never_waits_for_an_original() {
        let d = Drc::new(DrcLimits::default());
        assert_eq!(d.try_begin(key(4)), Some(Begin::Execute));
        // In progress: left to an I/O thread, with nothing counted as a wait.
        assert_eq!(d.try_begin(key(4)), None);
        assert_eq!(d.stats.waits.load(Ordering::Relaxed), 0);
        d.finish(key(4), ok(b"done"));
        assert_eq!(d.try_begin(key(4)), Some(Begin::Replay(ok(b"done"))));
        // Held by another thread: left to an I/O thread too.
        let held = d.lock();
        assert_eq!(d.try_begin(key(5)), None);
        drop(held);
        assert_eq!(d.try_begin(key(5)), Some(Begin::Execute));
    }

    #[test]
    fn memory_is_bounded_oldest_first() {
        let d = Drc::new(DrcLimits {
            max_entries: 3,
            max_bytes: 10 * (ENTRY_OVERHEAD + 100),
        });
        for x in 0..5 {
            assert_eq!(d.begin(key(x), Duration::ZERO), Begin::Execute);
            d.finish(key(x), ok(&[0; 100]));
        }
        assert_eq!(d.usage(), (3, 3 * (ENTRY_OVERHEAD + 100)));
        assert_eq!(d.stats.evictions.load(Ordering::Relaxed), 2);
        // The two oldest were evicted: executed again; the newest replayed.
        assert_eq!(d.begin(key(0), Duration::ZERO), Begin::Execute);
        assert!(matches!(d.begin(key(4), Duration::ZERO), Begin::Replay(_)));
        // The byte cap alone.
        let d = Drc::new(DrcLimits {
            max_entries: 100,
            max_bytes: 2 * (ENTRY_OVERHEAD + 1000),
        });
        for x in 0..4 {
            d.begin(key(x), Duration::ZERO);
            d.finish(key(x), ok(&[0; 1000]));
        }
        assert_eq!(d.usage().0, 2);
    }
}
