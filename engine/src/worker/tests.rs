//! Tests of the workers with mock connections.

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
    // The dying one went to the first worker (the two held one each): the second may not
    // have adopted its own yet on a busy machine.
    wait_for("every adoption", || {
        w.stats().iter().map(|s| s.conns_adopted).sum::<u64>() == 3
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
    // What `assign` would do if its count were wrong: count it and send it.
    let (b, _, b_closed) = Mock::new(u64::MAX, 0);
    w.workers[0].shared.held.fetch_add(1, Ordering::Relaxed);
    assert!(w.workers[0].inbox.try_send(b).is_ok());
    wait_for("the extra connection to be closed", || {
        b_closed.load(Ordering::Relaxed)
    });
    let s = &w.stats()[0];
    assert_eq!((s.conns, s.conns_adopted), (1, 1));
    assert_eq!(w.live_conns(), 1, "the closed one is no longer counted");
    assert!(!a_closed.load(Ordering::Relaxed));
    w.shutdown(Duration::from_secs(1)).unwrap();
}

/// A connection that dies when told.
struct Mortal {
    dead: Arc<AtomicBool>,
}

impl Drive for Mortal {
    fn poll(&mut self) -> usize {
        0
    }
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }
    fn busy(&self) -> bool {
        false
    }
    fn close(&mut self) {}
    fn counters(&self) -> Snapshot {
        Snapshot::default()
    }
}

/// `live_conns` counts a connection from its `assign` (before any housekeeping) until its
/// worker drops it as dead, and `assign` spreads and refuses by that count.
#[test]
fn live_conns_counts_each_connection_from_assign_until_dropped() {
    let mut w = Workers::<Mortal>::start(&[unpinned(1), unpinned(1)]).unwrap();
    assert_eq!((w.capacity(), w.live_conns()), (2, 0));
    let deaths: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let mortal = |i: usize| Mortal {
        dead: Arc::clone(&deaths[i]),
    };
    // Back to back, before either worker has adopted anything: the second goes to the
    // other worker all the same.
    let first = w.assign(mortal(0)).unwrap();
    let second = w.assign(mortal(1)).unwrap();
    assert_ne!(first, second);
    assert_eq!(w.live_conns(), 2);
    assert_eq!(w.assign(mortal(2)), Err(WorkerError::Full));
    assert_eq!(w.live_conns(), 2, "a refused connection is not counted");
    deaths[0].store(true, Ordering::Relaxed);
    wait_for("the dead connection to be dropped", || w.live_conns() == 1);
    assert_eq!(w.assign(mortal(2)), Ok(first), "its place is free again");
    assert_eq!(w.live_conns(), 2);
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

/// Work that is items another thread queues, ringing the connection's bell.
struct Rung {
    queued: Arc<AtomicU64>,
    taken: Arc<AtomicU64>,
}

/// Takes what was queued since the last poll.
impl Work for Rung {
    fn poll(&mut self) -> usize {
        let q = self.queued.load(Ordering::Acquire);
        let t = self.taken.load(Ordering::Relaxed);
        if q > t {
            self.taken.store(q, Ordering::Release);
        }
        (q - t) as usize
    }
}

/// A connection with a bell of its own (so that a worker can wait on it) whose polls `work`
/// decides.
struct Armed<W> {
    work: W,
    bell: Arc<Bell>,
}

/// What an [`Armed`] connection does when polled.
trait Work: Send + 'static {
    fn poll(&mut self) -> usize;
}

impl<W: Work> Drive for Armed<W> {
    fn poll(&mut self) -> usize {
        self.work.poll()
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
    fn arm(&mut self) -> bool {
        self.bell.arm();
        true
    }
    fn wake_fds(&self) -> WakeFds<'_> {
        [Some(self.bell.fd()), None]
    }
    fn disarm(&mut self) {
        self.bell.clear();
    }
}

#[test]
fn a_waiting_worker_sleeps_and_each_ring_wakes_it() {
    let queued = Arc::new(AtomicU64::new(0));
    let taken = Arc::new(AtomicU64::new(0));
    let bell = Arc::new(Bell::new().unwrap());
    let mut w = Workers::<Armed<Rung>>::start(&[unpinned(2)]).unwrap();
    w.set_wait(Some(Duration::from_micros(200)));
    // No wait ends by its limit here: every item must be taken because its ring woke the
    // worker (a lost ring hangs the test until `wait_for` fails it).
    w.set_wait_limit(Duration::from_secs(600));
    w.assign(Armed {
        work: Rung {
            queued: queued.clone(),
            taken: taken.clone(),
        },
        bell: bell.clone(),
    })
    .unwrap();
    wait_for("the adoption", || w.stats()[0].conns == 1);
    wait_for("a wait", || w.stats()[0].waits > 0);
    // Waiting, not spinning: the loop barely turns (a spinning worker turns millions of
    // times in this while).
    let before = w.stats()[0].loops;
    thread::sleep(Duration::from_millis(120));
    let turned = w.stats()[0].loops - before;
    assert!(turned < 1000, "{turned} turns while waiting");
    // Each item is taken, and each wait before one ended by the ring. The worker is
    // waiting when each item comes: armed and past its last look, only the ring wakes it.
    for k in 1..=20u64 {
        let (woken, waits) = (w.stats()[0].wakeups, w.stats()[0].waits);
        queued.store(k, Ordering::Release);
        bell.ring();
        wait_for("the item", || taken.load(Ordering::Acquire) == k);
        wait_for("the wake-up to be counted", || w.stats()[0].wakeups > woken);
        wait_for("the worker to wait again", || w.stats()[0].waits > waits);
    }
    assert_eq!(w.stats()[0].naps, 0);
    w.shutdown(Duration::from_secs(1)).unwrap();
}

#[test]
fn a_connection_that_cannot_be_armed_keeps_its_worker_polling() {
    let on = Arc::new(AtomicBool::new(false));
    let mut w = Workers::<Switch>::start(&[unpinned(2)]).unwrap();
    w.set_wait(Some(Duration::from_micros(100)));
    w.assign(Switch { on: on.clone() }).unwrap();
    wait_for("the adoption", || w.stats()[0].conns == 1);
    wait_for("idle turns", || w.stats()[0].loops > 100_000);
    assert_eq!(
        w.stats()[0].waits,
        0,
        "waited on a connection it cannot wake"
    );
    // With naps allowed, it naps instead.
    w.set_nap(Some((
        Duration::from_micros(100),
        Duration::from_micros(100),
    )));
    wait_for("naps", || w.stats()[0].naps > 10);
    assert_eq!(w.stats()[0].waits, 0);
    // A connection assigned while the worker rests is adopted (it is rung).
    w.assign(Switch { on: on.clone() }).unwrap();
    wait_for("the second adoption", || w.stats()[0].conns == 2);
    w.shutdown(Duration::from_secs(1)).unwrap();
}

#[test]
fn a_waiting_worker_adopts_new_connections_and_stops_when_told() {
    let mk = || Armed {
        work: Rung {
            queued: Arc::new(AtomicU64::new(0)),
            taken: Arc::new(AtomicU64::new(0)),
        },
        bell: Arc::new(Bell::new().unwrap()),
    };
    let mut w = Workers::<Armed<Rung>>::start(&[unpinned(4)]).unwrap();
    w.set_wait(Some(Duration::from_micros(100)));
    w.assign(mk()).unwrap();
    wait_for("a wait", || w.stats()[0].waits > 0);
    let second = mk();
    let (q, t, b) = (
        second.work.queued.clone(),
        second.work.taken.clone(),
        second.bell.clone(),
    );
    w.assign(second).unwrap();
    wait_for("the second adoption", || w.stats()[0].conns == 2);
    // The new connection's bell was added to the set the worker waits on.
    let waits = w.stats()[0].waits;
    wait_for("another wait", || w.stats()[0].waits > waits);
    let woken = w.stats()[0].wakeups;
    q.store(1, Ordering::Release);
    b.ring();
    wait_for("the item", || t.load(Ordering::Acquire) == 1);
    wait_for("the wake-up", || w.stats()[0].wakeups > woken);
    w.shutdown(Duration::from_secs(1)).unwrap();
}

/// Work of one item that holds the worker in `poll` until `release` is set.
struct Held {
    item: Arc<AtomicBool>,
    inside: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

impl Work for Held {
    fn poll(&mut self) -> usize {
        if !self.item.swap(false, Ordering::AcqRel) {
            return 0;
        }
        self.inside.store(true, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.release.load(Ordering::Acquire) && Instant::now() < deadline {
            thread::yield_now();
        }
        1
    }
}

#[test]
fn a_stop_that_comes_while_the_worker_is_busy_is_not_slept_through() {
    let (item, inside, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut w = Workers::<Armed<Held>>::start(&[unpinned(2)]).unwrap();
    w.set_wait(Some(Duration::from_nanos(1)));
    // A wait ends only when something rings: a stop the worker misses hangs it.
    w.set_wait_limit(Duration::from_secs(600));
    w.assign(Armed {
        work: Held {
            item: item.clone(),
            inside: inside.clone(),
            release: release.clone(),
        },
        bell: Arc::new(Bell::new().unwrap()),
    })
    .unwrap();
    wait_for("the adoption", || w.stats()[0].conns == 1);
    wait_for("a wait", || w.stats()[0].waits > 0);
    // An item, and a ring (a setting, through the inbox's bell) to wake the worker for it:
    // it is then held inside its poll, not armed, so that the stop's ring finds nobody to
    // wake.
    item.store(true, Ordering::Release);
    w.set_wait_limit(Duration::from_secs(600));
    wait_for("the worker inside the item", || {
        inside.load(Ordering::Acquire)
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let stopper = thread::spawn(move || {
        let r = w.shutdown(Duration::from_secs(1));
        let _ = done_tx.send(());
        r
    });
    // Let the stop land (flag set, ring lost) before the worker leaves the item.
    thread::sleep(Duration::from_millis(100));
    release.store(true, Ordering::Release);
    // Its next turn is idle and it rests: it must see the stop instead of waiting.
    assert!(
        done_rx.recv_timeout(Duration::from_secs(30)).is_ok(),
        "the worker slept through the stop"
    );
    stopper.join().unwrap().unwrap();
}

/// A connection always busy, each poll taking `pause`, that counts its polls and may
/// belong with a worker ([`Drive::home`]).
struct Probe {
    home: Option<usize>,
    polls: Arc<AtomicU64>,
    pause: Duration,
}

impl Probe {
    fn homed(home: Option<usize>) -> Probe {
        Probe {
            home,
            polls: Arc::new(AtomicU64::new(0)),
            pause: Duration::ZERO,
        }
    }

    fn slow(polls: &Arc<AtomicU64>) -> Probe {
        Probe {
            home: None,
            polls: Arc::clone(polls),
            pause: Duration::from_micros(200),
        }
    }
}

impl Drive for Probe {
    fn poll(&mut self) -> usize {
        self.polls.fetch_add(1, Ordering::Relaxed);
        if !self.pause.is_zero() {
            thread::sleep(self.pause);
        }
        1
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
    fn home(&self) -> Option<usize> {
        self.home
    }
}

/// A connection goes to its home worker while that worker has room, however loaded it is
/// beside the others; then, and without a home (or with one that does not exist), to the
/// least loaded.
#[test]
fn a_connection_goes_to_its_home_worker_while_it_has_room() {
    let mut w = Workers::<Probe>::start(&[unpinned(2), unpinned(2), unpinned(2)]).unwrap();
    assert_eq!(w.assign(Probe::homed(Some(2))).unwrap(), 2);
    assert_eq!(
        w.assign(Probe::homed(Some(2))).unwrap(),
        2,
        "home, though busier"
    );
    // Worker 2 is full: the least loaded instead.
    assert_eq!(w.assign(Probe::homed(Some(2))).unwrap(), 0);
    assert_eq!(w.assign(Probe::homed(None)).unwrap(), 1);
    assert_eq!(w.assign(Probe::homed(Some(7))).unwrap(), 0);
    w.shutdown(Duration::from_secs(1)).unwrap();
}

/// A connection handed to a worker whose turns are all busy is adopted within a few turns,
/// not at the next periodic housekeeping (1,024 turns: seconds when each turn is long).
#[test]
fn a_busy_worker_adopts_a_new_connection_within_a_few_turns() {
    let mut w = Workers::<Probe>::start(&[unpinned(4)]).unwrap();
    let turns = Arc::new(AtomicU64::new(0));
    w.assign(Probe::slow(&turns)).unwrap();
    wait_for("the first connection", || w.stats()[0].conns_adopted == 1);
    // Well into the busy turns, away from a periodic housekeeping.
    wait_for("busy turns", || turns.load(Ordering::Relaxed) >= 20);
    let at = turns.load(Ordering::Relaxed);
    w.assign(Probe::slow(&Arc::new(AtomicU64::new(0)))).unwrap();
    wait_for("the second connection", || w.stats()[0].conns_adopted == 2);
    let took = turns.load(Ordering::Relaxed) - at;
    assert!(took < 50, "adopted after {took} busy turns");
    w.shutdown(Duration::from_secs(1)).unwrap();
}

/// A connection with a real soft completion queue, fed by a queue pair the test sends on:
/// it counts its polls and the completions they take, and (when `watched`) says it waits for
/// nothing but its next completion.
struct Watching {
    cq: crate::fabric::soft::SoftCq,
    _qp: crate::fabric::soft::SoftQp,
    watched: bool,
    polls: Arc<AtomicU64>,
    taken: Arc<AtomicU64>,
}

impl Drive for Watching {
    fn poll(&mut self) -> usize {
        use crate::fabric::CompletionQueue;
        self.polls.fetch_add(1, Ordering::Relaxed);
        let mut wc = [crate::fabric::Wc::default(); 8];
        let n = self.cq.poll(&mut wc).unwrap_or(0);
        self.taken.fetch_add(n as u64, Ordering::Relaxed);
        n
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
    fn watch(&self) -> Option<CqWatch> {
        use crate::fabric::CompletionQueue;
        if self.watched {
            self.cq.watch()
        } else {
            None
        }
    }
    fn idle_at(&self) -> Option<u64> {
        use crate::fabric::CompletionQueue;
        Some(self.cq.cursor())
    }
}

/// A worker skips the connections that wait for a completion none of them has, polls
/// each one whose completion arrives (every message is taken), and polls the others now
/// and then all the same; a connection without a watch is polled at every turn.
#[test]
fn a_worker_polls_only_the_watched_connections_with_a_completion() {
    use crate::fabric::soft::{self, Soft};
    use crate::fabric::{
        Access, Device, MemoryRegion, ProtectionDomain, Provider, QpCaps, QpInit, QueuePair,
        RecvWr, SendWr,
    };
    const N: usize = 32;
    let dev = Soft::open_device(None).unwrap();
    let mut senders = Vec::new();
    let mut counts = Vec::new();
    let mut w = Workers::<Watching>::start(&[unpinned(N + 1)]).unwrap();
    let mut keep = Vec::new();
    for i in 0..=N {
        let (pa, pb) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
        let (sa, ra) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
        let (sb, rb) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
        let caps = QpCaps::default();
        let (qa, mut qb) = soft::pair(
            &pa,
            QpInit::new(&sa, &ra, caps),
            &pb,
            QpInit::new(&sb, &rb, caps),
        )
        .unwrap();
        let mr = pb.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
        for k in 0..8u64 {
            qb.post_recv(&RecvWr::new(k, &[mr.sge(k as usize * 64, 64)]))
                .unwrap();
        }
        let (polls, taken) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        w.assign(Watching {
            cq: rb,
            _qp: qb,
            // The last one has no watch.
            watched: i < N,
            polls: Arc::clone(&polls),
            taken: Arc::clone(&taken),
        })
        .unwrap();
        senders.push(qa);
        counts.push((polls, taken));
        keep.push((pa, pb, sa, ra, sb, mr));
    }
    wait_for("every adoption", || {
        w.stats()[0].conns_adopted == N as u64 + 1
    });
    let polls = |i: usize| counts[i].0.load(Ordering::Relaxed);
    let taken = |i: usize| counts[i].1.load(Ordering::Relaxed);
    // Counted from now: the first connections were adopted long before the last.
    let (idle0, always0) = (polls(0), polls(N));
    wait_for("a hundred thousand turns", || polls(N) > always0 + 100_000);
    // Idle watched connections: polled at the full turns (one in 64) and after each
    // housekeeping (one in 256 idle turns) only, while the one without a watch is polled at
    // every turn.
    let (idle, always) = (polls(0) - idle0, polls(N) - always0);
    assert!(
        idle * 16 < always,
        "an idle watched connection was polled {idle} times against {always}"
    );
    assert!(idle > 0, "an idle watched connection was never polled");
    // Messages to a few of them: each is taken, by a poll the watch asked for.
    for round in 0..4u64 {
        for i in [3, 17, N - 1] {
            senders[i]
                .post_send(&SendWr::send_inline(round, b"call"))
                .unwrap();
        }
        for i in [3, 17, N - 1] {
            wait_for("the message to be taken", || taken(i) == round + 1);
        }
    }
    assert_eq!(taken(0), 0);
    w.shutdown(Duration::from_secs(1)).unwrap();
}
