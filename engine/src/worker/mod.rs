//! Workers: threads pinned to cores, each owning its connections (their queue pairs and
//! completion queues) and busy-polling them, run to completion.
//!
//! A [`Workers`] set starts one thread per [`WorkerConfig`]. Connections are handed to a
//! worker with [`Workers::assign`] (the least loaded one) and from then on are touched by
//! that thread only: its loop calls [`Drive::poll`] on each connection in turn, with no
//! lock, no system call and no allocation (the connection list is allocated once, at
//! start, for [`WorkerConfig::max_conns`] connections). Every 1024 turns of the loop — and
//! every 256 turns that found nothing to do, and after any turn that ends with a connection
//! handed over (one flag read a turn) — the worker looks at its inbox for new connections,
//! drops the dead ones and publishes its counters.
//!
//! [`Workers::live_conns`] says how many connections the workers hold now (assigned and not
//! yet dropped as dead), without waiting for a housekeeping: an accept loop compares it
//! with its limit to refuse a connection at the connection manager
//! ([`Server::accept_if`](crate::responder::Server::accept_if)) rather than accept one the
//! workers have no room for; [`Workers::capacity`] is the most they can hold.
//!
//! Counters ([`WorkerStats`]) are relaxed atomics written by the worker alone, so any thread
//! reads them without a lock: the worker's own (loop turns, connections) and the sum of its
//! connections' [`Counters`], refreshed at each publication (a few microseconds stale at
//! most while the worker is busy).
//!
//! A worker spins by default. For a machine whose cores are shared with the threads the
//! requests wait for (a backend's I/O threads, the peer, a guest's other vCPU) it can rest
//! once it has found nothing to do for a while (`idle.rs`): [`Workers::set_wait`] lets it
//! wait in epoll for its connections' next event (completion channels, and [`Bell`]s that
//! a backend's threads ring), woken within microseconds; [`Workers::set_nap`] lets it sleep
//! a fixed nap between polls, for connections that cannot be waited for.
//!
//! [`Workers::shutdown`] is graceful: the workers stop taking connections, keep polling
//! until their connections have no Call in process and every reply posted is known sent
//! (or the deadline passes), then disconnect them and exit.

#![deny(unsafe_code)]

mod bell;
mod idle;

pub use bell::Bell;

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::fabric::{CqWatch, Provider, WatchTable};
use crate::responder::ServerConn;
use crate::stats::{bump, Counters, Snapshot};
use idle::Rest;

/// How many places ahead of the connection it polls a worker asks one to prefetch
/// ([`Drive::prefetch`]): far enough for the fetch to arrive, near enough for it to stay.
pub const POLL_AHEAD: usize = 4;

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
    /// Starts fetching what the next [`poll`](Self::poll) of an idle connection reads
    /// ([`ServerConn::prefetch_poll`]). The worker asks it of the connection
    /// [`POLL_AHEAD`] places ahead of the one it polls, so that the cache misses of a turn
    /// over hundreds of idle connections overlap. The default does nothing.
    fn prefetch(&self) {}
    /// Called at each of the worker's housekeepings (every few hundred turns of its loop, at
    /// every turn while it rests), with the time it read once for all its connections: room
    /// for work done seldom, such as giving back the buffers of a connection idle for long
    /// ([`ServerConn::shed`]). The default does nothing.
    fn housekeep(&mut self, now: Instant) {
        let _ = now;
    }
    /// Called while a graceful shutdown waits: makes the end of the work done so far
    /// observable, so that `busy` can turn false (see [`ServerConn::settle`]).
    fn settle(&mut self) {}
    /// Ends the connection.
    fn close(&mut self);
    /// The connection's counters.
    fn counters(&self) -> Snapshot;

    /// Asks to be woken by the connection's next event (a completion; an answer another
    /// thread completes): arms its notifications so that one of its
    /// [`wake_fds`](Self::wake_fds) turns readable. `false` when it cannot be waited for now
    /// (its provider cannot notify, or an event is on its way): the worker then polls on.
    /// After arming every connection, a worker polls each once more before it waits, so an
    /// event between the arming and the wait is never missed. The default cannot be armed.
    fn arm(&mut self) -> bool {
        false
    }

    /// The descriptors that turn readable when an armed connection has an event; asked
    /// when the worker adopts the connection and when it drops it, so they must stay the
    /// same, and open, for the connection's life.
    fn wake_fds(&self) -> WakeFds<'_> {
        [None, None]
    }

    /// Called after a wait: takes the notifications delivered, so that the descriptors are
    /// no longer readable.
    fn disarm(&mut self) {}

    /// The worker the connection belongs with, if any: [`Workers::assign`] gives it to that
    /// worker while it has room (a server connection on shared receive queue `i` belongs
    /// with worker `i`: [`ServerConn::home`]). `None` (the default): the least loaded.
    fn home(&self) -> Option<usize> {
        None
    }

    /// A watch of the connection's completion queue ([`ServerConn::cq_watch`]), asked when
    /// the worker adopts it: with [`idle_at`](Self::idle_at), the worker skips the
    /// connection at turns when nothing has arrived for it. `None` (the default): polled at
    /// every turn.
    fn watch(&self) -> Option<CqWatch> {
        None
    }

    /// Asked after each poll: the position of the completion the connection waits for, when
    /// only a completion can give it work ([`ServerConn::idle_at`]); `None` (the default)
    /// when it must be polled at the next turn. A connection whose other sources of work (a
    /// backend's threads completing its Calls) may have work must say `None`, or wake its
    /// worker another way than its completion queue. Every few dozen turns the worker polls
    /// every connection all the same.
    #[inline]
    fn idle_at(&self) -> Option<u64> {
        None
    }
}

/// Up to two descriptors that wake a worker for a connection ([`Drive::wake_fds`]): its
/// completion channel and, say, the bell of the threads that complete its deferred Calls.
pub type WakeFds<'a> = [Option<BorrowedFd<'a>>; 2];

impl<P: Provider> Drive for ServerConn<P>
where
    ServerConn<P>: Send,
{
    #[inline]
    fn poll(&mut self) -> usize {
        ServerConn::poll(self)
    }

    #[inline]
    fn prefetch(&self) {
        self.prefetch_poll();
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

    fn housekeep(&mut self, now: Instant) {
        ServerConn::housekeep(self, now);
    }

    fn close(&mut self) {
        self.disconnect();
    }

    fn counters(&self) -> Snapshot {
        self.snapshot()
    }

    fn arm(&mut self) -> bool {
        self.arm_notify()
    }

    fn wake_fds(&self) -> WakeFds<'_> {
        [self.notify_fd(), None]
    }

    fn disarm(&mut self) {
        self.take_notifications();
    }

    fn home(&self) -> Option<usize> {
        ServerConn::home(self)
    }

    fn watch(&self) -> Option<CqWatch> {
        self.cq_watch()
    }

    #[inline]
    fn idle_at(&self) -> Option<u64> {
        ServerConn::idle_at(self)
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
    /// Waits for an event begun ([`Workers::set_wait`]); counted as the worker starts
    /// waiting, armed and past its last look.
    pub waits: u64,
    /// Waits ended by an event (the others by their limit).
    pub wakeups: u64,
    /// The sum of the connections' counters (dead ones included).
    pub rpc: Snapshot,
}

/// What a worker publishes for readers.
#[derive(Debug, Default)]
struct WorkerShared {
    /// Rung when there is something for a waiting worker to see: a connection in its
    /// inbox, new settings, a stop (`None` if no eventfd could be made: never waits).
    bell: Option<Bell>,
    /// Set when a connection has been put in the inbox, cleared by the worker before it
    /// looks: a worker about to wait sees it (or is rung) and looks instead.
    mail: AtomicBool,
    stop: AtomicBool,
    /// Bumped by every change of the settings below, so that a worker about to wait sees a
    /// change whose ring came while it was not armed.
    settings: AtomicU64,
    loops: AtomicU64,
    busy_loops: AtomicU64,
    conns: AtomicU64,
    /// Connections this worker holds: counted by [`Workers::assign`] before it hands one
    /// over (so one still in the inbox counts), discounted by the worker when it drops a
    /// dead one or closes one it has no room for, zeroed when it exits. Current, unlike
    /// `conns` (published at housekeeping); `assign` chooses and refuses by it.
    held: AtomicU64,
    conns_adopted: AtomicU64,
    conns_dead: AtomicU64,
    naps: AtomicU64,
    waits: AtomicU64,
    wakeups: AtomicU64,
    /// Continuous idleness after which the worker waits for an event, in nanoseconds (0:
    /// never).
    wait_after_ns: AtomicU64,
    /// The longest one wait lasts, in nanoseconds (0: `idle::WAIT_MAX`).
    wait_max_ns: AtomicU64,
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
    shared: Arc<WorkerShared>,
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
            let shared = Arc::new(WorkerShared {
                bell: Bell::new().ok(),
                ..WorkerShared::default()
            });
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

    /// Hands `conn` to the worker holding the fewest connections (counting those not yet
    /// adopted); returns its index. When every worker is full or stopping, the connection
    /// is closed and dropped. While [`live_conns`](Self::live_conns) is below
    /// [`capacity`](Self::capacity), some worker has room: the connection is never closed
    /// for want of it.
    pub fn assign(&mut self, mut conn: T) -> Result<usize, WorkerError> {
        let live = |w: &&Handle<T>| !w.shared.stop.load(Ordering::Relaxed);
        let home = conn
            .home()
            .and_then(|h| self.workers.get(h).map(|w| (h, w)))
            .filter(|(_, w)| live(w) && w.shared.held.load(Ordering::Relaxed) < w.max_conns as u64);
        let best = home.or_else(|| {
            self.workers
                .iter()
                .enumerate()
                .filter(|(_, w)| live(w))
                .min_by_key(|(_, w)| w.shared.held.load(Ordering::Relaxed))
        });
        let Some((i, w)) = best else {
            conn.close();
            return Err(WorkerError::Stopped);
        };
        if w.shared.held.load(Ordering::Relaxed) >= w.max_conns as u64 {
            conn.close();
            return Err(WorkerError::Full);
        }
        // Counted before the send, so that the worker's discount of this connection (after
        // its receive) never comes first.
        w.shared.held.fetch_add(1, Ordering::Relaxed);
        match w.inbox.try_send(conn) {
            Ok(()) => {
                // After the send: a worker that reads `mail` set then finds the connection.
                w.shared.mail.store(true, Ordering::Release);
                w.shared.wake();
                Ok(i)
            }
            Err(TrySendError::Full(mut c)) => {
                w.shared.held.fetch_sub(1, Ordering::Relaxed);
                c.close();
                Err(WorkerError::Full)
            }
            Err(TrySendError::Disconnected(mut c)) => {
                w.shared.held.fetch_sub(1, Ordering::Relaxed);
                c.close();
                Err(WorkerError::Stopped)
            }
        }
    }

    /// How many connections the workers hold now: every one [`assign`](Self::assign) handed
    /// over (adopted or still in an inbox) and not yet dropped as dead. Exact as of the last
    /// `assign` and the workers' last housekeeping (a connection that has died stays counted
    /// until its worker's next one, microseconds later while it polls, at most its wait
    /// limit while it waits); relaxed loads, no lock. A worker that panicked keeps its last
    /// count.
    pub fn live_conns(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.shared.held.load(Ordering::Relaxed))
            .sum()
    }

    /// The most connections the workers can hold: the sum of their
    /// [`WorkerConfig::max_conns`].
    pub fn capacity(&self) -> usize {
        self.workers.iter().map(|w| w.max_conns).sum()
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
                waits: w.shared.waits.load(Ordering::Relaxed),
                wakeups: w.shared.wakeups.load(Ordering::Relaxed),
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
            w.shared.settings_changed();
        }
    }

    /// Lets every worker wait for its connections' next event once it has found nothing to
    /// do for `after` (continuously): it arms them ([`Drive::arm`]), polls them a last time
    /// and sleeps in epoll until one of their descriptors turns readable, a connection is
    /// assigned, or the wait limit passes ([`set_wait_limit`](Self::set_wait_limit)). `None` (the default) never waits. A worker with a connection
    /// that cannot be armed naps as [`set_nap`](Self::set_nap) says instead, or spins.
    /// Waiting trades the wake-up (an interrupt, a thread switch) on the first message after
    /// an idle spell for a core left entirely to others.
    pub fn set_wait(&self, after: Option<Duration>) {
        let ns = after.map_or(0, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        for w in &self.workers {
            w.shared.wait_after_ns.store(ns, Ordering::Relaxed);
            w.shared.settings_changed();
        }
    }

    /// The longest one wait lasts (default 50 ms, at least 1 ms): how stale a waiting
    /// worker's published counters may get, and what an event its notifier lost costs.
    /// Events, new connections, settings and a stop wake it sooner.
    pub fn set_wait_limit(&self, limit: Duration) {
        let ns = u64::try_from(limit.max(Duration::from_millis(1)).as_nanos()).unwrap_or(u64::MAX);
        for w in &self.workers {
            w.shared.wait_max_ns.store(ns, Ordering::Relaxed);
            w.shared.settings_changed();
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
            w.shared.wake();
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

impl WorkerShared {
    /// Whether something came that the worker's housekeeping must see before it waits: a
    /// connection in the inbox, a stop, or settings changed since it took them
    /// (`settings_seen`). Its ring may have come while the worker was busy and not armed:
    /// this look, after arming, sees it (the bell's fences order the two).
    pub(super) fn has_news(&self, settings_seen: u64) -> bool {
        self.mail.load(Ordering::Acquire)
            || self.stop.load(Ordering::Acquire)
            || self.settings.load(Ordering::Acquire) != settings_seen
    }

    /// Publishes settings just stored: bumps their generation, then wakes the worker.
    fn settings_changed(&self) {
        self.settings.fetch_add(1, Ordering::Release);
        self.wake();
    }

    /// Wakes the worker if it waits.
    fn wake(&self) {
        if let Some(b) = &self.bell {
            b.ring();
        }
    }
}

/// The worker's loop.
fn run<T: Drive>(inbox: Receiver<T>, shared: &WorkerShared, max_conns: usize) {
    let mut conns: Vec<T> = Vec::with_capacity(max_conns);
    let mut table = WatchTable::with_capacity(max_conns);
    let mut retired = Snapshot::default();
    let mut loops: u64 = 0;
    // Busy turns are `loops - idle`.
    let mut idle: u64 = 0;
    let mut rest = Rest::default();
    loop {
        let mut work = 0;
        // Waiting connections whose completion has not come are skipped after one word is
        // read (the table's fetch of that word, `WatchTable::AHEAD` places ahead, is what
        // the others' `prefetch` does); every `FULL_TURN_EVERY`th turn polls them all.
        let full = loops.is_multiple_of(WatchTable::FULL_TURN_EVERY);
        for i in 0..conns.len() {
            if table.skip(i, full) {
                continue;
            }
            if let Some(ahead) = conns.get(i + POLL_AHEAD) {
                if !table.waiting(i + POLL_AHEAD) {
                    ahead.prefetch();
                }
            }
            work += conns[i].poll();
            if table.is_watched(i) {
                table.set(i, conns[i].idle_at());
            }
        }
        loops += 1;
        // Busy turns house-keep every HOUSEKEEPING_EVERY turns, idle ones every
        // IDLE_HOUSEKEEPING_EVERY idle turns: connections are adopted promptly and a message
        // rarely arrives while the worker is busy with its counters.
        if work == 0 {
            idle += 1;
            if rest.idle() {
                work = rest.rest(&mut conns, shared);
                // A wait polls them outside the table: each is polled again at the next turn.
                table.wake_all();
                if work > 0 {
                    rest.busy();
                }
            }
        } else {
            rest.busy();
        }
        // A resting worker house-keeps at every turn: its turns are slow already, and it
        // must see new connections, settings and a stop without hundreds of rests first.
        if loops.is_multiple_of(HOUSEKEEPING_EVERY)
            || (work == 0 && (idle.is_multiple_of(IDLE_HOUSEKEEPING_EVERY) || rest.resting))
            // A connection handed over: adopted at the end of this turn, not 1,024 busy
            // turns later (a second or more when each turn polls hundreds of busy
            // connections: the last of 1,000 connections, handed over just as the load
            // began, made no progress for seconds).
            || shared.mail.load(Ordering::Relaxed)
        {
            rest.configure(shared);
            if housekeeping(&inbox, &mut conns, &mut retired, shared, max_conns, &rest) {
                table.rebuild(conns.iter().map(Drive::watch));
            }
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
    // Only a stop ends the loop, and only `shutdown` or the drop of the set stops: no
    // `assign` can come after this.
    shared.held.store(0, Ordering::Relaxed);
    shared.loops.store(loops, Ordering::Relaxed);
    shared.busy_loops.store(loops - idle, Ordering::Relaxed);
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

/// Drops dead connections (keeping their counters), takes new ones, publishes the sums;
/// returns whether the list changed (its watch table is then rebuilt).
///
/// The dead go first, so that their places go to the new ones. A connection the worker has
/// no room for is closed and dropped, as [`Workers::assign`] does when it sees the worker
/// full: one left waiting in the inbox would be neither served nor closed (its client would
/// hang) until another connection ended. `assign` judges by `held`, which counts the
/// inbox too, so it never sends one beyond the limit; this is the safety net.
fn housekeeping<T: Drive>(
    inbox: &Receiver<T>,
    conns: &mut Vec<T>,
    retired: &mut Snapshot,
    shared: &WorkerShared,
    max_conns: usize,
    rest: &Rest,
) -> bool {
    let mut changed = reap(conns, retired, shared, rest);
    // Reading it set (Acquire) makes the connections sent before visible to `try_recv`.
    shared.mail.swap(false, Ordering::Acquire);
    while let Ok(mut c) = inbox.try_recv() {
        if conns.len() < max_conns {
            rest.adopt(&c);
            conns.push(c);
            changed = true;
            bump(&shared.conns_adopted, 1);
        } else {
            c.close();
            shared.held.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let mut sum = *retired;
    let now = Instant::now();
    for c in conns.iter_mut() {
        c.housekeep(now);
        sum.add(&c.counters());
    }
    shared.rpc.store(&sum);
    shared.conns.store(conns.len() as u64, Ordering::Relaxed);
    changed
}

/// Drops the dead connections, adding their counters to `retired`; returns whether there
/// were any.
fn reap<T: Drive>(
    conns: &mut Vec<T>,
    retired: &mut Snapshot,
    shared: &WorkerShared,
    rest: &Rest,
) -> bool {
    let before = conns.len();
    let mut i = 0;
    while i < conns.len() {
        if conns[i].is_dead() {
            rest.forget(&conns[i]);
            // The connection (its queue pair and memory) goes with the statement.
            retired.add(&conns.swap_remove(i).counters());
            bump(&shared.conns_dead, 1);
            shared.held.fetch_sub(1, Ordering::Relaxed);
        } else {
            i += 1;
        }
    }
    conns.len() != before
}

#[cfg(test)]
mod tests;
