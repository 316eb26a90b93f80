//! Workers: threads pinned to cores, each owning its connections (their queue pairs and
//! completion queues) and busy-polling them, run to completion.
//!
//! A [`Workers`] set starts one thread per [`WorkerConfig`]. Connections are handed to a
//! worker with [`Workers::assign`] (the least loaded one) and from then on are touched by
//! that thread only: its loop calls [`Drive::poll`] on each connection in turn, with no
//! lock, no system call and no allocation (the connection list is allocated once, at
//! start, for [`WorkerConfig::max_conns`] connections). Every 1024 turns of the loop — and
//! every 256 turns that found nothing to do — the worker looks at its inbox for new
//! connections, drops the dead ones and publishes its counters.
//!
//! Counters ([`WorkerStats`]) are relaxed atomics written by the worker alone, so any thread
//! reads them without a lock: the worker's own (loop turns, connections) and the sum of its
//! connections' [`Counters`], refreshed at each publication (a few microseconds stale at
//! most while the worker is busy).
//!
//! A worker spins by default. [`Workers::set_nap`] lets it nap instead once it has found
//! nothing to do for a while — for a machine whose cores are shared with the threads the
//! requests wait for (a backend's I/O threads, the peer, a guest's other vCPU): after
//! `after` of continuous idleness it sleeps `nap` between polls, until a poll finds work.
//! Idleness is timed from the clock every 64 idle turns; a busy turn pays one store.
//!
//! [`Workers::shutdown`] is graceful: the workers stop taking connections, keep polling
//! until their connections have no Call in process and every reply posted is known sent
//! (or the deadline passes), then disconnect them and exit.

#![deny(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::fabric::Provider;
use crate::responder::ServerConn;
use crate::stats::{bump, Counters, Snapshot};

/// Turns of the loop between two looks at the inbox and two publications of the counters.
const HOUSEKEEPING_EVERY: u64 = 1024;
/// Idle turns between two housekeepings of an idle worker: an idle turn takes a few tens of
/// nanoseconds and a housekeeping a few hundred, so this keeps a Call that arrives from
/// finding the worker in housekeeping (at 16 it was about a third of the idle time) while
/// still adopting a connection within microseconds.
const IDLE_HOUSEKEEPING_EVERY: u64 = 256;

/// A connection a worker can drive.
pub trait Drive: Send + 'static {
    /// Does the work that is ready, without blocking; returns how much (0: idle).
    fn poll(&mut self) -> usize;
    /// Whether the connection is gone and can be dropped.
    fn is_dead(&self) -> bool;
    /// Whether work is still in process (a graceful shutdown waits for it).
    fn busy(&self) -> bool;
    /// Called while a graceful shutdown waits: makes the end of the work done so far
    /// observable, so that `busy` can turn false (see [`ServerConn::settle`]).
    fn settle(&mut self) {}
    /// Ends the connection.
    fn close(&mut self);
    /// The connection's counters.
    fn counters(&self) -> Snapshot;
}

impl<P: Provider> Drive for ServerConn<P>
where
    ServerConn<P>: Send,
{
    #[inline]
    fn poll(&mut self) -> usize {
        ServerConn::poll(self)
    }

    fn is_dead(&self) -> bool {
        ServerConn::is_dead(self)
    }

    fn busy(&self) -> bool {
        // Replies posted but not known sent count too: on a NIC a close would flush them.
        self.in_process() > 0 || self.sends_outstanding() > 0
    }

    fn settle(&mut self) {
        ServerConn::settle(self);
    }

    fn close(&mut self) {
        self.disconnect();
    }

    fn counters(&self) -> Snapshot {
        self.snapshot()
    }
}

/// How one worker runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// The core to pin the thread to (an index into `core_affinity::get_core_ids()`), or
    /// `None` to leave it unpinned.
    pub core: Option<usize>,
    /// Most connections the worker drives at once.
    pub max_conns: usize,
}

impl WorkerConfig {
    /// A worker pinned to `core` driving up to 64 connections.
    pub fn pinned(core: usize) -> WorkerConfig {
        WorkerConfig {
            core: Some(core),
            max_conns: 64,
        }
    }
}

/// Why a worker set could not start or take a connection.
#[derive(Debug, PartialEq, Eq)]
pub enum WorkerError {
    /// The configuration asks for no worker or for a worker with room for no connection.
    Config(&'static str),
    /// The core does not exist on this machine.
    NoSuchCore {
        /// The index asked for.
        core: usize,
        /// How many cores there are.
        available: usize,
    },
    /// The operating system refused to start the thread.
    Spawn(String),
    /// Every worker already drives as many connections as it may; the connection was
    /// closed.
    Full,
    /// The workers are shutting down (or a worker thread ended); the connection was closed.
    Stopped,
    /// A worker thread panicked.
    Panicked,
}

impl core::fmt::Display for WorkerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WorkerError::Config(why) => write!(f, "bad worker settings: {why}"),
            WorkerError::NoSuchCore { core, available } => {
                write!(f, "core {core} does not exist ({available} cores)")
            }
            WorkerError::Spawn(e) => write!(f, "starting a worker thread: {e}"),
            WorkerError::Full => f.write_str("every worker is full"),
            WorkerError::Stopped => f.write_str("the workers are stopping"),
            WorkerError::Panicked => f.write_str("a worker thread panicked"),
        }
    }
}

impl std::error::Error for WorkerError {}

/// The counters of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// The core the worker is pinned to, if it is.
    pub core: Option<usize>,
    /// Turns of the polling loop.
    pub loops: u64,
    /// Turns that found work.
    pub busy_loops: u64,
    /// Connections driven now.
    pub conns: u64,
    /// Connections taken since start.
    pub conns_adopted: u64,
    /// Connections dropped because they died.
    pub conns_dead: u64,
    /// Naps taken ([`Workers::set_nap`]).
    pub naps: u64,
    /// The sum of the connections' counters (dead ones included).
    pub rpc: Snapshot,
}

/// What a worker publishes for readers.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    loops: AtomicU64,
    busy_loops: AtomicU64,
    conns: AtomicU64,
    conns_adopted: AtomicU64,
    conns_dead: AtomicU64,
    naps: AtomicU64,
    /// Continuous idleness after which the worker naps, in nanoseconds (0: never).
    nap_after_ns: AtomicU64,
    /// How long one nap lasts, in nanoseconds.
    nap_ns: AtomicU64,
    /// How long a stopping worker lets Calls in process finish, in nanoseconds.
    grace_ns: AtomicU64,
    rpc: Counters,
}

struct Handle<T> {
    core: Option<usize>,
    inbox: SyncSender<T>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    max_conns: usize,
}

/// A set of worker threads driving connections of type `T`.
pub struct Workers<T: Drive> {
    workers: Vec<Handle<T>>,
}

impl<T: Drive> core::fmt::Debug for Workers<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Workers")
            .field("workers", &self.workers.len())
            .finish()
    }
}

impl<T: Drive> Workers<T> {
    /// Starts one thread per configuration, pinned as it says.
    pub fn start(configs: &[WorkerConfig]) -> Result<Workers<T>, WorkerError> {
        if configs.is_empty() {
            return Err(WorkerError::Config("no worker"));
        }
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let mut workers = Workers {
            workers: Vec::with_capacity(configs.len()),
        };
        for (i, c) in configs.iter().enumerate() {
            if c.max_conns == 0 {
                return Err(WorkerError::Config(
                    "a worker must take at least one connection",
                ));
            }
            let core_id = match c.core {
                None => None,
                Some(k) => Some(*cores.get(k).ok_or(WorkerError::NoSuchCore {
                    core: k,
                    available: cores.len(),
                })?),
            };
            // Room for every connection the worker may take: assign never blocks.
            let (tx, rx) = mpsc::sync_channel(c.max_conns);
            let shared = Arc::new(Shared::default());
            let s = Arc::clone(&shared);
            let max = c.max_conns;
            let thread = thread::Builder::new()
                .name(format!("rpcrdma-worker-{i}"))
                .spawn(move || {
                    if let Some(id) = core_id {
                        core_affinity::set_for_current(id);
                    }
                    run(rx, &s, max);
                })
                .map_err(|e| WorkerError::Spawn(e.to_string()))?;
            workers.workers.push(Handle {
                core: c.core,
                inbox: tx,
                shared,
                thread: Some(thread),
                max_conns: c.max_conns,
            });
        }
        Ok(workers)
    }

    /// The number of workers.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// Whether the set has no worker (never true for a started set).
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Hands `conn` to the worker driving the fewest connections; returns its index. When
    /// every worker is full or stopping, the connection is closed and dropped.
    pub fn assign(&mut self, mut conn: T) -> Result<usize, WorkerError> {
        let best = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, w)| !w.shared.stop.load(Ordering::Relaxed))
            .min_by_key(|(_, w)| w.shared.conns.load(Ordering::Relaxed));
        let Some((i, w)) = best else {
            conn.close();
            return Err(WorkerError::Stopped);
        };
        if w.shared.conns.load(Ordering::Relaxed) >= w.max_conns as u64 {
            conn.close();
            return Err(WorkerError::Full);
        }
        match w.inbox.try_send(conn) {
            Ok(()) => Ok(i),
            Err(TrySendError::Full(mut c)) => {
                c.close();
                Err(WorkerError::Full)
            }
            Err(TrySendError::Disconnected(mut c)) => {
                c.close();
                Err(WorkerError::Stopped)
            }
        }
    }

    /// Every worker's counters, read without a lock.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.workers
            .iter()
            .map(|w| WorkerStats {
                core: w.core,
                loops: w.shared.loops.load(Ordering::Relaxed),
                busy_loops: w.shared.busy_loops.load(Ordering::Relaxed),
                conns: w.shared.conns.load(Ordering::Relaxed),
                conns_adopted: w.shared.conns_adopted.load(Ordering::Relaxed),
                conns_dead: w.shared.conns_dead.load(Ordering::Relaxed),
                naps: w.shared.naps.load(Ordering::Relaxed),
                rpc: w.shared.rpc.snapshot(),
            })
            .collect()
    }

    /// Lets every worker nap: once it has found nothing to do for `after` (continuously),
    /// it sleeps `nap` before each poll until one finds work; `None` (the default) spins.
    /// Naps trade up to `nap` of latency, on the first message after an idle spell, for
    /// a core left to others. Taken into account at the workers' next housekeeping.
    pub fn set_nap(&self, nap: Option<(Duration, Duration)>) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        let (after, nap) = nap.map_or((0, 0), |(a, n)| (ns(a), ns(n)));
        for w in &self.workers {
            w.shared.nap_ns.store(nap, Ordering::Relaxed);
            w.shared.nap_after_ns.store(after, Ordering::Relaxed);
        }
    }

    /// Stops the workers: each finishes the Calls in process (for at most `grace`), closes
    /// its connections and exits. Waits for the threads.
    pub fn shutdown(mut self, grace: Duration) -> Result<(), WorkerError> {
        self.stop_all(grace)
    }

    fn stop_all(&mut self, grace: Duration) -> Result<(), WorkerError> {
        let grace_ns = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        for w in &self.workers {
            w.shared.grace_ns.store(grace_ns, Ordering::Relaxed);
            w.shared.stop.store(true, Ordering::Release);
        }
        let mut result = Ok(());
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                if t.join().is_err() {
                    result = Err(WorkerError::Panicked);
                }
            }
        }
        result
    }
}

impl<T: Drive> Drop for Workers<T> {
    fn drop(&mut self) {
        let _ = self.stop_all(Duration::from_secs(1));
    }
}

/// The worker's loop.
fn run<T: Drive>(inbox: Receiver<T>, shared: &Shared, max_conns: usize) {
    let mut conns: Vec<T> = Vec::with_capacity(max_conns);
    let mut retired = Snapshot::default();
    let mut loops: u64 = 0;
    // Busy turns are `loops - idle`.
    let mut idle: u64 = 0;
    let mut napper = Napper::default();
    loop {
        let mut work = 0;
        for c in conns.iter_mut() {
            work += c.poll();
        }
        loops += 1;
        // Busy turns house-keep every HOUSEKEEPING_EVERY turns, idle ones every
        // IDLE_HOUSEKEEPING_EVERY idle turns: connections are adopted promptly and a message
        // rarely arrives while the worker is busy with its counters.
        if work == 0 {
            idle += 1;
            napper.idle(shared);
        } else {
            napper.busy();
        }
        // A napping worker house-keeps at every turn: its turns are slow already, and it
        // must see new connections, settings and a stop without hundreds of naps first.
        if loops.is_multiple_of(HOUSEKEEPING_EVERY)
            || (work == 0 && (idle.is_multiple_of(IDLE_HOUSEKEEPING_EVERY) || napper.napping))
        {
            napper.configure(shared);
            housekeeping(&inbox, &mut conns, &mut retired, shared, max_conns);
            shared.loops.store(loops, Ordering::Relaxed);
            shared.busy_loops.store(loops - idle, Ordering::Relaxed);
            if shared.stop.load(Ordering::Acquire) {
                break;
            }
        }
    }
    drain(
        &mut conns,
        Duration::from_nanos(shared.grace_ns.load(Ordering::Relaxed)),
    );
    for c in conns.iter_mut() {
        c.close();
    }
    for c in &conns {
        retired.add(&c.counters());
    }
    shared.rpc.store(&retired);
    shared.conns.store(0, Ordering::Relaxed);
    shared.loops.store(loops, Ordering::Relaxed);
    shared.busy_loops.store(loops - idle, Ordering::Relaxed);
}

/// When an idle worker naps ([`Workers::set_nap`]).
#[derive(Debug, Default)]
struct Napper {
    /// Idleness before napping (zero: never nap).
    after: Duration,
    nap: Duration,
    /// Idle turns in a row.
    run: u32,
    /// When the current idle spell was first seen on the clock.
    since: Option<Instant>,
    /// Whether the spell has lasted `after`: every idle turn naps until a busy one.
    napping: bool,
}

impl Napper {
    /// Idle turns between two looks at the clock.
    const CLOCK_EVERY: u32 = 64;

    fn configure(&mut self, shared: &Shared) {
        self.after = Duration::from_nanos(shared.nap_after_ns.load(Ordering::Relaxed));
        self.nap = Duration::from_nanos(shared.nap_ns.load(Ordering::Relaxed));
        self.napping &= !self.after.is_zero();
    }

    #[inline]
    fn busy(&mut self) {
        self.run = 0;
    }

    #[inline]
    fn idle(&mut self, shared: &Shared) {
        if self.after.is_zero() {
            return;
        }
        self.run = self.run.saturating_add(1);
        if self.run == 1 {
            // A new idle spell.
            self.since = None;
            self.napping = false;
        }
        if self.napping {
            thread::sleep(self.nap);
            bump(&shared.naps, 1);
            return;
        }
        if !self.run.is_multiple_of(Self::CLOCK_EVERY) {
            return;
        }
        let now = Instant::now();
        match self.since {
            None => self.since = Some(now),
            Some(t) => self.napping = now.duration_since(t) >= self.after,
        }
    }
}

/// Polls until no connection has work in process or replies it has not seen complete, or
/// `grace` has passed.
fn drain<T: Drive>(conns: &mut [T], grace: Duration) {
    let deadline = Instant::now() + grace;
    while conns.iter().any(|c| !c.is_dead() && c.busy()) && Instant::now() < deadline {
        for c in conns.iter_mut() {
            c.poll();
            c.settle();
        }
    }
}

/// Drops dead connections (keeping their counters), takes new ones, publishes the sums.
///
/// The dead go first, so that their places go to the new ones. A connection the worker has
/// no room for is closed and dropped, as [`Workers::assign`] does when it sees the worker
/// full: `assign` judges by the count published at the last housekeeping, so a few can be
/// queued beyond the limit, and one left waiting in the inbox would be neither served nor
/// closed (its client would hang) until another connection ended.
fn housekeeping<T: Drive>(
    inbox: &Receiver<T>,
    conns: &mut Vec<T>,
    retired: &mut Snapshot,
    shared: &Shared,
    max_conns: usize,
) {
    reap(conns, retired, shared);
    while let Ok(mut c) = inbox.try_recv() {
        if conns.len() < max_conns {
            conns.push(c);
            bump(&shared.conns_adopted, 1);
        } else {
            c.close();
        }
    }
    let mut sum = *retired;
    for c in conns.iter() {
        sum.add(&c.counters());
    }
    shared.rpc.store(&sum);
    shared.conns.store(conns.len() as u64, Ordering::Relaxed);
}

/// Drops the dead connections, adding their counters to `retired`.
fn reap<T: Drive>(conns: &mut Vec<T>, retired: &mut Snapshot, shared: &Shared) {
    let mut i = 0;
    while i < conns.len() {
        if conns[i].is_dead() {
            // The connection (its queue pair and memory) goes with the statement.
            retired.add(&conns.swap_remove(i).counters());
            bump(&shared.conns_dead, 1);
        } else {
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that counts its polls as RPCs, dies after `die_after` polls and stays
    /// busy for `busy_for` polls after the workers are told to stop.
    struct Mock {
        polls: u64,
        die_after: u64,
        busy_polls: Arc<AtomicU64>,
        closed: Arc<AtomicBool>,
        busy_for: u64,
    }

    impl Mock {
        fn new(die_after: u64, busy_for: u64) -> (Mock, Arc<AtomicU64>, Arc<AtomicBool>) {
            let busy_polls = Arc::new(AtomicU64::new(0));
            let closed = Arc::new(AtomicBool::new(false));
            (
                Mock {
                    polls: 0,
                    die_after,
                    busy_polls: Arc::clone(&busy_polls),
                    closed: Arc::clone(&closed),
                    busy_for,
                },
                busy_polls,
                closed,
            )
        }
    }

    impl Drive for Mock {
        fn poll(&mut self) -> usize {
            self.polls += 1;
            if self.busy() {
                self.busy_polls.fetch_add(1, Ordering::Relaxed);
                self.busy_for -= 1;
            }
            1
        }
        fn is_dead(&self) -> bool {
            self.polls >= self.die_after
        }
        fn busy(&self) -> bool {
            self.busy_for > 0
        }
        fn close(&mut self) {
            self.closed.store(true, Ordering::Relaxed);
        }
        fn counters(&self) -> Snapshot {
            Snapshot {
                rpcs: self.polls,
                ..Snapshot::default()
            }
        }
    }

    fn unpinned(max_conns: usize) -> WorkerConfig {
        WorkerConfig {
            core: None,
            max_conns,
        }
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// A connection with work only while `on` is set.
    struct Switch {
        on: Arc<AtomicBool>,
    }

    impl Drive for Switch {
        fn poll(&mut self) -> usize {
            usize::from(self.on.load(Ordering::Relaxed))
        }
        fn is_dead(&self) -> bool {
            false
        }
        fn busy(&self) -> bool {
            false
        }
        fn close(&mut self) {}
        fn counters(&self) -> Snapshot {
            Snapshot::default()
        }
    }

    #[test]
    fn an_idle_worker_naps_only_when_told_and_wakes_to_work() {
        let on = Arc::new(AtomicBool::new(false));
        let mut w = Workers::<Switch>::start(&[unpinned(2)]).unwrap();
        w.assign(Switch { on: on.clone() }).unwrap();
        wait_for("the adoption", || w.stats()[0].conns == 1);
        thread::sleep(Duration::from_millis(30));
        assert_eq!(w.stats()[0].naps, 0, "spins by default");
        w.set_nap(Some((Duration::from_millis(2), Duration::from_micros(200))));
        wait_for("naps", || w.stats()[0].naps > 10);
        // Work: the naps stop and the turns are busy.
        on.store(true, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(20));
        let (naps, busy) = (w.stats()[0].naps, w.stats()[0].busy_loops);
        thread::sleep(Duration::from_millis(30));
        let s = w.stats()[0];
        assert!(
            s.naps <= naps + 1,
            "napped while busy: {naps} -> {}",
            s.naps
        );
        assert!(s.busy_loops > busy, "no busy turns");
        // Idle again, and naps stop for good once turned off.
        on.store(false, Ordering::Relaxed);
        wait_for("naps again", || w.stats()[0].naps > s.naps + 10);
        w.set_nap(None);
        thread::sleep(Duration::from_millis(20));
        let naps = w.stats()[0].naps;
        thread::sleep(Duration::from_millis(30));
        assert_eq!(w.stats()[0].naps, naps, "napped after set_nap(None)");
        w.shutdown(Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn connections_are_driven_spread_and_dropped_when_dead() {
        let mut w = Workers::<Mock>::start(&[unpinned(4), unpinned(4)]).unwrap();
        let (a, _, _) = Mock::new(u64::MAX, 0);
        let (b, _, _) = Mock::new(u64::MAX, 0);
        let (dies, _, _) = Mock::new(1000, 0);
        let first = w.assign(a).unwrap();
        wait_for("the first adoption", || w.stats()[first].conns == 1);
        let second = w.assign(b).unwrap();
        assert_ne!(
            first, second,
            "the least loaded worker takes the next connection"
        );
        w.assign(dies).unwrap();
        wait_for("the dead connection to go", || {
            w.stats().iter().map(|s| s.conns_dead).sum::<u64>() == 1
        });
        wait_for("polls to be counted", || {
            w.stats().iter().map(|s| s.rpc.rpcs).sum::<u64>() > 10_000
        });
        let s = w.stats();
        assert_eq!(s.iter().map(|s| s.conns).sum::<u64>(), 2);
        assert_eq!(s.iter().map(|s| s.conns_adopted).sum::<u64>(), 3);
        assert!(s.iter().all(|s| s.loops > 0 && s.busy_loops > 0));
        // The dead connection's counters stay in the sum.
        assert!(s.iter().map(|s| s.rpc.rpcs).sum::<u64>() >= 1000);
        w.shutdown(Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn shutdown_finishes_work_in_process_then_closes() {
        let mut w = Workers::<Mock>::start(&[unpinned(2)]).unwrap();
        let (m, busy_polls, closed) = Mock::new(u64::MAX, 500);
        w.assign(m).unwrap();
        w.shutdown(Duration::from_secs(5)).unwrap();
        assert_eq!(busy_polls.load(Ordering::Relaxed), 500);
        assert!(closed.load(Ordering::Relaxed));
    }

    #[test]
    fn a_full_set_refuses_and_closes_the_connection() {
        let mut w = Workers::<Mock>::start(&[unpinned(1)]).unwrap();
        let (a, _, _) = Mock::new(u64::MAX, 0);
        w.assign(a).unwrap();
        wait_for("the adoption", || w.stats()[0].conns == 1);
        let (b, _, closed) = Mock::new(u64::MAX, 0);
        assert_eq!(w.assign(b), Err(WorkerError::Full));
        assert!(closed.load(Ordering::Relaxed));
    }

    /// A connection queued while the worker is full (`assign` saw a count published before
    /// the last adoptions) is closed by the worker, not left waiting in the inbox.
    #[test]
    fn a_connection_queued_beyond_the_limit_is_closed() {
        let mut w = Workers::<Mock>::start(&[unpinned(1)]).unwrap();
        let (a, _, a_closed) = Mock::new(u64::MAX, 0);
        w.assign(a).unwrap();
        wait_for("the adoption", || w.stats()[0].conns == 1);
        // What `assign` does when its view of the count is stale.
        let (b, _, b_closed) = Mock::new(u64::MAX, 0);
        assert!(w.workers[0].inbox.try_send(b).is_ok());
        wait_for("the extra connection to be closed", || {
            b_closed.load(Ordering::Relaxed)
        });
        let s = &w.stats()[0];
        assert_eq!((s.conns, s.conns_adopted), (1, 1));
        assert!(!a_closed.load(Ordering::Relaxed));
        w.shutdown(Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn bad_settings_are_refused() {
        assert_eq!(
            Workers::<Mock>::start(&[]).err(),
            Some(WorkerError::Config("no worker"))
        );
        assert!(matches!(
            Workers::<Mock>::start(&[unpinned(0)]).err(),
            Some(WorkerError::Config(_))
        ));
        assert!(matches!(
            Workers::<Mock>::start(&[WorkerConfig::pinned(100_000)]).err(),
            Some(WorkerError::NoSuchCore { core: 100_000, .. })
        ));
    }
}
