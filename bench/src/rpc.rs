//! A closed-loop RPC load generator: keeps `depth` calls of one workload in flight on a
//! [`Client`], resubmitting each as its reply arrives, for a fixed time; records every
//! round trip in a histogram and verifies every reply.
//!
//! The measured loop allocates nothing (the histogram, the send timestamps and the
//! argument buffers are made before it starts), so the allocations counted over it are the
//! engine's.

use std::time::{Duration, Instant};

use rpcrdma_engine::clock::{Clock, Stamp};

use hdrhistogram::Histogram;
use rpcrdma_engine::fabric::{Provider, WatchTable};
use rpcrdma_engine::requester::{CallArgs, Client, SubmitError};
use rpcrdma_engine::stats::Snapshot;
use rpcrdma_engine::worker::POLL_AHEAD;

pub use crate::workload::{Prepared, ReplyError, Workload, BULK_SLACK};

use crate::summary::{ConnRates, Percentiles};

/// How a load run goes.
#[derive(Clone, Copy, Debug)]
pub struct LoadConfig {
    /// Calls kept in flight on each connection.
    pub depth: u32,
    /// Length of the measured phase.
    pub duration: Duration,
    /// Length of the unmeasured warm-up before it.
    pub warmup: Duration,
    /// Per-RPC timeout.
    pub timeout: Duration,
    /// Fault runs: drop a connection (`Client::inject_loss`) this often, each connection
    /// of the run in turn, with Calls in flight. Needs clients with a retransmit policy, or
    /// the pending RPCs fail with `ConnectionLost`.
    pub sever_every: Option<Duration>,
}

impl LoadConfig {
    /// `depth` calls in flight for `duration` after `warmup`, each with `timeout`; no faults.
    pub fn new(depth: u32, duration: Duration, warmup: Duration, timeout: Duration) -> Self {
        LoadConfig {
            depth,
            duration,
            warmup,
            timeout,
            sever_every: None,
        }
    }
}

/// What a fault run saw: how often connections were dropped, and whether every RPC
/// completed exactly once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Connections dropped by the run (`Client::inject_loss`).
    pub severed: u64,
    /// RPCs submitted over the whole run (warm-up and drain included).
    pub submitted: u64,
    /// RPCs completed over the whole run.
    pub completed: u64,
    /// Completions of an RPC that had already completed (or was never submitted).
    pub completed_twice: u64,
    /// RPCs submitted that never completed, even after the drain.
    pub lost: u64,
    /// RPCs the drain saw complete with an error (a timeout, a lost connection not
    /// recovered): counted as completed, but never answered. (In the measured phase an
    /// error ends the run.)
    pub failed: u64,
}

impl Faults {
    /// Adds another run's counts.
    pub fn add(&mut self, o: &Faults) {
        self.severed += o.severed;
        self.submitted += o.submitted;
        self.completed += o.completed;
        self.completed_twice += o.completed_twice;
        self.lost += o.lost;
        self.failed += o.failed;
    }

    /// Whether every RPC submitted completed exactly once.
    pub fn exact(&self) -> bool {
        self.completed_twice == 0
            && self.lost == 0
            && self.failed == 0
            && self.submitted == self.completed
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// RPCs completed in the measured phase.
    pub rpcs: u64,
    /// Length of the measured phase.
    pub seconds: f64,
    /// RPCs per second.
    pub rate_rps: f64,
    /// Round-trip latency.
    pub lat_ns: Percentiles,
    /// Every round trip of the measured phase (for merging runs of several threads).
    pub hist: Histogram<u64>,
    /// The time the server said it spent on each RPC's data (the built-in program's timed
    /// READ making it, WRITE checking it: [`VERS_TIMED`]), which the round trips leave out;
    /// empty for the other workloads and for data under [`TIMED_MIN`] bytes.
    ///
    /// [`VERS_TIMED`]: rpcrdma_engine::program::VERS_TIMED
    /// [`TIMED_MIN`]: rpcrdma_engine::program::TIMED_MIN
    pub server_work: Histogram<u64>,
    /// Heap allocations per RPC in the measured phase, if counted.
    pub allocs_per_rpc: Option<f64>,
    /// The client connections' counters at the end, summed.
    pub client: Snapshot,
    /// RPCs each connection completed in the measured phase, in the order given.
    pub per_conn: Vec<u64>,
    /// Exactly-once accounting (meaningful for every run, essential for fault runs).
    pub faults: Faults,
}

impl LoadReport {
    /// Each connection's rate over the measured phase, RPCs per second, in the order of
    /// [`per_conn`](Self::per_conn) (over [`seconds`](Self::seconds): of a merged report,
    /// the longest thread's measured phase, over which the total rate is taken too, so
    /// that the rates add up to it).
    pub fn per_conn_rps(&self) -> Vec<f64> {
        let secs = self.seconds.max(1e-9);
        self.per_conn.iter().map(|&n| n as f64 / secs).collect()
    }

    /// The calls in flight on average over the measured phase, all connections together,
    /// by Little's law: the round trips' total time (with the server's time on the data,
    /// which they leave out, added back) over the phase's length. Below `connections ×
    /// depth` when fewer were in flight than asked: a grant under the depth (RFC 8166
    /// §3.3.1: a requester has no more Calls outstanding than its credits) or a client too
    /// busy to send the next call as soon as a reply came.
    pub fn mean_in_flight(&self) -> f64 {
        let total = |h: &Histogram<u64>| {
            if h.is_empty() {
                0.0
            } else {
                h.mean() * h.len() as f64
            }
        };
        (total(&self.hist) + total(&self.server_work)) / 1e9 / self.seconds.max(1e-9)
    }

    /// The distribution of the connections' rates ([`per_conn_rps`](Self::per_conn_rps));
    /// `None` for a report of no connection.
    pub fn conn_rates(&self) -> Option<ConnRates> {
        ConnRates::of(&self.per_conn_rps())
    }
}

/// Progress of a run, for a display.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Time into the measured phase (zero during warm-up).
    pub elapsed: Duration,
    /// The measured phase's length.
    pub total: Duration,
    /// RPCs completed in the measured phase so far.
    pub rpcs: u64,
}

/// Why a run stopped early.
#[derive(Debug, PartialEq, Eq)]
pub enum LoadError {
    /// A Call could not be submitted.
    Submit(SubmitError),
    /// A reply did not pass.
    Reply(ReplyError),
    /// No RPC completed for longer than the per-RPC timeout.
    Stalled,
    /// Bad settings.
    Config(&'static str),
    /// The measured phase ended with no RPC completed in it: its numbers would say
    /// nothing. The RPCs are slower than the phase is long (or a stall of the fabric
    /// outlasted it).
    NoneMeasured {
        /// The measured phase's length.
        phase: Duration,
        /// RPCs that ended, answered or failed, in the warm-up and the drain around it.
        outside: u64,
    },
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoadError::Submit(e) => write!(f, "submit failed: {e}"),
            LoadError::Reply(e) => write!(f, "bad reply: {e}"),
            LoadError::Stalled => f.write_str("no reply within the RPC timeout"),
            LoadError::Config(why) => write!(f, "bad settings: {why}"),
            LoadError::NoneMeasured { phase, outside } => write!(
                f,
                "no RPC completed in the {:.2} s measured phase ({outside} ended before or \
                 after it): lengthen the phase or lower the depth",
                phase.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// Records in `hist` the round trip, ending at `now`, of each Call submitted at the
/// instant `sent` gives with it, less the time the server spent on its data (also given).
/// Calls submitted together carry the same stamp and mostly complete together, so runs of
/// equal stamps are recorded with one count each (the histogram ends up the same; its
/// update and the clock arithmetic were a few percent of the client thread's time at depth
/// 32).
fn record_round_trips(
    hist: &mut Histogram<u64>,
    clock: &Clock,
    now: Stamp,
    sent: impl Iterator<Item = (Stamp, u32)>,
) {
    let mut run: Option<((Stamp, u32), u64)> = None;
    let mut flush = |run: Option<((Stamp, u32), u64)>| {
        if let Some(((at, work), n)) = run {
            let ns = clock.nanos(at, now).saturating_sub(u64::from(work));
            let _ = hist.record_n(ns.max(1), n);
        }
    };
    for at in sent {
        match &mut run {
            Some((same, n)) if *same == at => *n += 1,
            _ => flush(run.replace((at, 1))),
        }
    }
    flush(run);
}

/// The barriers several threads' runs meet at: before their loops, and after their
/// measured phases.
#[derive(Debug)]
pub struct Gates {
    /// Passed once every thread has made its state.
    pub start: std::sync::Barrier,
    /// Passed once every thread has ended its measured phase.
    pub end: std::sync::Barrier,
}

impl Gates {
    /// Gates for `n` threads.
    pub fn new(n: usize) -> Gates {
        Gates {
            start: std::sync::Barrier::new(n),
            end: std::sync::Barrier::new(n),
        }
    }
}

/// One connection's state in a run: its `depth` tags, when each was sent, which are in
/// flight, and which are ready to go again.
struct Lane {
    /// Tags free to submit.
    free: Vec<u64>,
    /// Tags completed by the last poll, whose round trip is recorded after it.
    finished: Vec<u64>,
    /// When each tag was last submitted.
    sent: Vec<Stamp>,
    /// The server's time on the data of each tag's last reply, in nanoseconds.
    work: Vec<u32>,
    /// Whether each tag is in flight.
    in_flight: Vec<bool>,
    /// RPCs completed in the measured phase.
    rpcs: u64,
}

impl Lane {
    fn new(depth: usize, now: Stamp) -> Lane {
        Lane {
            free: (0..depth as u64).collect(),
            finished: Vec::with_capacity(depth),
            sent: vec![now; depth],
            work: vec![0; depth],
            in_flight: vec![false; depth],
            rpcs: 0,
        }
    }

    /// Submits every free tag (corked when more than one), stamping them with one clock
    /// reading taken before the first: each round trip counts its submission, and a Call
    /// later in the batch is charged for the ones before it (never flattered). Tag `t`
    /// runs form `t % forms.len()` of the mix (`calls[i]` is `forms[i]`'s Call). A
    /// WRITE's data is written in place ([`Prepared::in_place`]); making it is the load
    /// generator's work, not the transport's, and is left out of the round trips (each
    /// Call's stamp moves on by the time the fills up to its own took).
    fn submit<P: Provider>(
        &mut self,
        client: &mut Client<P>,
        calls: &[CallArgs<'_>],
        forms: &[Prepared],
        faults: &mut Faults,
        clock: &Clock,
    ) -> Result<(), LoadError> {
        if self.free.is_empty() {
            return Ok(());
        }
        let batch_start = clock.now();
        // The batch's Sends go out together, as a run-to-completion caller posts them (a
        // lone Call is simply posted).
        let corked = self.free.len() > 1;
        if corked {
            client.cork();
        }
        let mut k = 0;
        let mut failed = None;
        // Ticks spent making WRITE data so far in this batch.
        let mut filling = 0u64;
        while k < self.free.len() {
            let tag = self.free[k];
            let form = form_of(tag, forms.len());
            let (call, prepared) = (&calls[form], &forms[form]);
            let submitted = match prepared.in_place() {
                Some(n) => client.submit_in_place(call, tag, n, |dst| {
                    let from = clock.now();
                    prepared.fill_bulk(dst);
                    filling += clock.now().ticks().saturating_sub(from.ticks());
                }),
                None => client.submit(call, tag),
            };
            match submitted {
                Ok(_) => {
                    self.sent[tag as usize] =
                        Stamp::from_ticks(batch_start.ticks().wrapping_add(filling));
                    self.in_flight[tag as usize] = true;
                    faults.submitted += 1;
                    k += 1;
                }
                Err(SubmitError::WouldBlock) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if corked {
            client.uncork();
        }
        self.free.drain(..k);
        match failed {
            Some(e) => Err(LoadError::Submit(e)),
            None => Ok(()),
        }
    }

    /// Marks `tag` complete; false when it was not in flight (a second completion).
    fn complete(&mut self, tag: u64) -> bool {
        match self.in_flight.get_mut(tag as usize) {
            Some(f) if *f => {
                *f = false;
                true
            }
            _ => false,
        }
    }
}

/// Which form of a mix of `n` a tag runs: the tags take the forms in turn, so that a
/// connection `depth` deep keeps `depth / n` (rounded) of each in flight.
#[inline]
fn form_of(tag: u64, n: usize) -> usize {
    if n == 1 {
        0
    } else {
        (tag % n as u64) as usize
    }
}

/// Runs `prepared` on `client` as `cfg` says (see [`run_many`]); a measured phase in
/// which no RPC completed is [`LoadError::NoneMeasured`].
pub fn run<P: Provider>(
    client: &mut Client<P>,
    prepared: &Prepared,
    cfg: LoadConfig,
    allocations: fn() -> Option<u64>,
    progress: impl FnMut(Progress),
) -> Result<LoadReport, LoadError> {
    run_many(
        core::slice::from_mut(client),
        core::slice::from_ref(prepared),
        cfg,
        None,
        allocations,
        progress,
    )
    .and_then(measured)
}

/// `report` if its measured phase completed an RPC, else [`LoadError::NoneMeasured`]:
/// a rate of 0 and percentiles of nothing are no result. (One thread of several may
/// complete none; a whole run must not.)
pub fn measured(report: LoadReport) -> Result<LoadReport, LoadError> {
    if report.rpcs > 0 {
        return Ok(report);
    }
    Err(LoadError::NoneMeasured {
        phase: Duration::from_secs_f64(report.seconds.max(0.0)),
        outside: report.faults.completed,
    })
}

/// Runs the mix `forms` (one workload, or several taken in turn by each connection's
/// tags: tag `t` runs `forms[t % forms.len()]`) on every one of `clients` from this thread
/// (each connection polled in turn, `depth` calls in flight on each) as `cfg` says;
/// `progress` is called about every 100 ms and `allocations` (the process's allocation
/// counter, if any) is read around the measured phase. A mix needs a depth of at least
/// its number of forms, so that each has a call in flight.
///
/// A round trip ends when its completion is handed over, before the reply's data is
/// checked: the clock is read at the first completion of each poll, so the checks (on by
/// default, every byte) stay out of the latencies; they still cost the client thread's
/// time, and so its rate.
///
/// With `gates`, several threads' runs start together, once each has made its state, and
/// none goes on to its drain and report before all have ended their measured phase: no
/// thread's setup or report allocates inside another's measured phase.
pub fn run_many<P: Provider>(
    clients: &mut [Client<P>],
    forms: &[Prepared],
    cfg: LoadConfig,
    gates: Option<&Gates>,
    allocations: fn() -> Option<u64>,
    mut progress: impl FnMut(Progress),
) -> Result<LoadReport, LoadError> {
    if cfg.depth == 0 || cfg.depth > 4096 {
        return Err(LoadError::Config("depth must be 1 ..= 4096"));
    }
    if clients.is_empty() {
        return Err(LoadError::Config("no connection to load"));
    }
    if forms.is_empty() {
        return Err(LoadError::Config("no workload to run"));
    }
    if (cfg.depth as usize) < forms.len() {
        return Err(LoadError::Config(
            "a mix needs a depth of at least its number of workloads",
        ));
    }
    // WRITE data is written in place by each submission (`Lane::submit`).
    let negotiation = clients[0].negotiation();
    let calls: Vec<CallArgs<'_>> = forms
        .iter()
        .map(|p| p.call_on(cfg.timeout, negotiation))
        .collect();
    let depth = cfg.depth as usize;
    let hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|_| LoadError::Config("histogram"))?;
    let server_work = hist.clone();
    // Round trips are stamped with the cycle counter where it is steady (see
    // `rpcrdma_engine::clock`): the clock's own cost stays out of what is measured.
    let clock = Clock::get();
    let mut lanes: Vec<Lane> = clients
        .iter()
        .map(|_| Lane::new(depth, clock.now()))
        .collect();
    if let Some(g) = gates {
        g.start.wait();
    }
    let mut meter = Meter::new(&calls, forms, clock, cfg, allocations, hist, server_work);
    // The measured loop; its error, if any, is returned after the gates are passed (a
    // thread that stops early must not leave the others waiting at the end gate).
    let outcome = meter.measure(clients, &mut lanes, &mut progress);
    let measured_end = Instant::now();
    let rpcs: u64 = lanes.iter().map(|l| l.rpcs).sum();
    let allocs = match (meter.allocs_at_start, allocations()) {
        (Some(a), Some(b)) if rpcs > 0 => Some((b - a) as f64 / rpcs as f64),
        _ => None,
    };
    if let Some(g) = gates {
        g.end.wait();
    }
    outcome?;
    meter.drain(clients, &mut lanes);
    let seconds = (measured_end - meter.measure_from).as_secs_f64();
    progress(Progress {
        elapsed: cfg.duration,
        total: cfg.duration,
        rpcs,
    });
    Ok(meter.report(clients, &lanes, seconds, allocs))
}

/// One run's measured loop ([`run_many`]): what it runs, and its state besides the lanes —
/// the histograms, the exactly-once counts, and the run's own clock (its phases, progress,
/// faults and stall watch).
struct Meter<'a> {
    /// The Call of each form of the mix.
    calls: &'a [CallArgs<'a>],
    /// The mix's workloads: they make the Calls' data and check the replies'.
    forms: &'a [Prepared],
    /// The round trips' clock.
    clock: Clock,
    /// How the run goes.
    cfg: LoadConfig,
    /// The process's allocation counter, if any.
    allocations: fn() -> Option<u64>,
    /// Every round trip of the measured phase.
    hist: Histogram<u64>,
    /// The server's time on each RPC's data in the measured phase (nonzero times only).
    server_work: Histogram<u64>,
    /// Exactly-once accounting.
    faults: Faults,
    /// When the measured phase begins (after the warm-up).
    measure_from: Instant,
    /// When it ends.
    end: Instant,
    /// Whether the measured phase has begun.
    measuring: bool,
    /// The allocation counter when it began.
    allocs_at_start: Option<u64>,
    /// When the run's clock last saw replies.
    last_reply: Instant,
    /// Whether replies came since the run's clock was last read.
    replied: bool,
    /// When progress is next reported.
    next_progress: Instant,
    /// When a connection is next dropped (fault runs).
    next_sever: Option<Instant>,
    /// Connections dropped so far (the next to drop, in turn).
    sever_turn: usize,
}

impl<'a> Meter<'a> {
    /// A run starting now: its warm-up first, then its measured phase.
    fn new(
        calls: &'a [CallArgs<'a>],
        forms: &'a [Prepared],
        clock: Clock,
        cfg: LoadConfig,
        allocations: fn() -> Option<u64>,
        hist: Histogram<u64>,
        server_work: Histogram<u64>,
    ) -> Meter<'a> {
        let start = Instant::now();
        let measure_from = start + cfg.warmup;
        Meter {
            calls,
            forms,
            clock,
            cfg,
            allocations,
            hist,
            server_work,
            faults: Faults::default(),
            measure_from,
            end: measure_from + cfg.duration,
            measuring: false,
            allocs_at_start: None,
            last_reply: start,
            replied: false,
            next_progress: start,
            next_sever: cfg.sever_every.map(|e| start + e),
            sever_turn: 0,
        }
    }

    /// The measured loop: every lane served in turn ([`serve_lane`](Self::serve_lane)),
    /// pass after pass, until the measured phase ends ([`tick`](Self::tick)) or an error
    /// stops the run.
    fn measure<P: Provider>(
        &mut self,
        clients: &mut [Client<P>],
        lanes: &mut [Lane],
        progress: &mut impl FnMut(Progress),
    ) -> Result<(), LoadError> {
        let mut passes: u32 = 0;
        // The run's own clock is read once every 64 passes, so that the passes between stay
        // tight, busy or idle. A pass that completes bulk RPCs is long (their data made and
        // checked: milliseconds a MiB in a debug build), and 64 of them once outlasted a whole
        // 3 s measured phase, which then counted nothing: runs of 4 KiB or more also read it
        // after every pass that completed RPCs (outside every round trip, and a cost lost
        // beside the data's), their idle passes keeping the rhythm.
        let bulk = self.forms.iter().any(|p| {
            let w = p.workload();
            w.arg_size().max(w.res_size()) >= 4096
        });
        // A lane with every tag in flight and no completion at its client's next position
        // is skipped after one word is read (`WatchTable`); every
        // `WatchTable::FULL_TURN_EVERY`th pass serves them all, for what an idle poll looks
        // at (timeouts, a lost connection).
        let mut table = WatchTable::with_capacity(clients.len());
        table.rebuild(clients.iter().map(Client::cq_watch));
        loop {
            let mut worked = false;
            let full = u64::from(passes).is_multiple_of(WatchTable::FULL_TURN_EVERY);
            for i in 0..clients.len().min(lanes.len()) {
                if table.skip(i, full) {
                    continue;
                }
                // Many clients: the next ones' completion queues are fetched while this one
                // is served, so that their cache misses overlap (the table fetches the
                // waiting ones').
                if let Some(ahead) = clients.get(i + POLL_AHEAD) {
                    if !table.waiting(i + POLL_AHEAD) {
                        ahead.prefetch_poll();
                    }
                }
                if self.serve_lane(&mut clients[i], &mut lanes[i])? {
                    worked = true;
                }
                if table.is_watched(i) {
                    let idle = lanes[i].free.is_empty();
                    table.set(i, clients[i].idle_at().filter(|_| idle));
                }
            }
            passes = passes.wrapping_add(1);
            if passes.is_multiple_of(64) || (bulk && worked) {
                let severed = self.faults.severed;
                if self.tick(clients, lanes, progress)? {
                    return Ok(());
                }
                if self.faults.severed != severed {
                    table.wake_all();
                }
            }
        }
    }

    /// One lane's turn: its completions taken and checked, in the measured phase their
    /// round trips recorded, then its free tags submitted — those the completions freed
    /// among them, so that a tag waits no pass of the other lanes to go out again (with a
    /// thousand connections, submitting before polling had kept about 1.2 of 2 Calls in
    /// flight on each); whether any RPC completed. A reply that does not pass stops the run.
    #[inline]
    fn serve_lane<P: Provider>(
        &mut self,
        client: &mut Client<P>,
        lane: &mut Lane,
    ) -> Result<bool, LoadError> {
        let completed = self.take_completions(client, lane)?;
        lane.submit(
            client,
            self.calls,
            self.forms,
            &mut self.faults,
            &self.clock,
        )?;
        Ok(completed)
    }

    /// A lane's completions taken and checked, their round trips recorded in the measured
    /// phase and their tags freed; whether any RPC completed.
    #[inline]
    fn take_completions<P: Provider>(
        &mut self,
        client: &mut Client<P>,
        lane: &mut Lane,
    ) -> Result<bool, LoadError> {
        let (clock, forms, faults) = (&self.clock, self.forms, &mut self.faults);
        let mut failure: Option<ReplyError> = None;
        let mut first_at: Option<Stamp> = None;
        let n = client.poll_completions(|c| {
            // The round trip ends here, before the reply is checked.
            first_at.get_or_insert_with(|| clock.now());
            if !lane.complete(c.tag) {
                faults.completed_twice += 1;
                return;
            }
            faults.completed += 1;
            match forms[form_of(c.tag, forms.len())].verify(&c.result) {
                Ok(work) => lane.work[c.tag as usize] = work,
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
            lane.finished.push(c.tag);
        });
        if let Some(e) = failure {
            return Err(LoadError::Reply(e));
        }
        let Some(now) = first_at.filter(|_| n > 0) else {
            return Ok(false);
        };
        self.replied = true;
        if self.measuring {
            record_round_trips(
                &mut self.hist,
                &self.clock,
                now,
                lane.finished
                    .iter()
                    .map(|&t| (lane.sent[t as usize], lane.work[t as usize])),
            );
            for &t in &lane.finished {
                let w = lane.work[t as usize];
                if w > 0 {
                    let _ = self.server_work.record(u64::from(w));
                }
            }
            lane.rpcs += lane.finished.len() as u64;
        }
        lane.free.extend_from_slice(&lane.finished);
        lane.finished.clear();
        Ok(true)
    }

    /// The run's own clock, read: the measured phase begun, or ended (`true`: the loop
    /// ends); a connection dropped when one is due (fault runs); progress reported; a run
    /// with no reply for longer than the RPC timeout (and a second) stopped as stalled.
    fn tick<P: Provider>(
        &mut self,
        clients: &mut [Client<P>],
        lanes: &mut [Lane],
        progress: &mut impl FnMut(Progress),
    ) -> Result<bool, LoadError> {
        let now = Instant::now();
        if std::mem::take(&mut self.replied) {
            self.last_reply = now;
        }
        if !self.measuring && now >= self.measure_from {
            self.measuring = true;
            self.allocs_at_start = (self.allocations)();
            self.hist.reset();
            self.server_work.reset();
            for lane in lanes.iter_mut() {
                lane.rpcs = 0;
            }
        }
        if now >= self.end {
            return Ok(true);
        }
        if let (Some(at), Some(every)) = (self.next_sever, self.cfg.sever_every) {
            if now >= at {
                let k = self.sever_turn % clients.len();
                let c = &mut clients[k];
                if !c.is_reconnecting() && !c.is_dead() && c.in_flight() > 0 {
                    c.inject_loss();
                    self.faults.severed += 1;
                    self.sever_turn += 1;
                    self.next_sever = Some(now + every);
                }
            }
        }
        if now >= self.next_progress {
            self.next_progress = now + Duration::from_millis(100);
            progress(Progress {
                elapsed: now.saturating_duration_since(self.measure_from),
                total: self.cfg.duration,
                rpcs: lanes.iter().map(|l| l.rpcs).sum(),
            });
        }
        if now.saturating_duration_since(self.last_reply)
            > self.cfg.timeout + Duration::from_secs(1)
        {
            return Err(LoadError::Stalled);
        }
        Ok(false)
    }

    /// Lets the calls still in flight finish (for up to the RPC timeout and a second), so
    /// that the connections are quiet afterwards and every RPC submitted is accounted for:
    /// those that never complete are lost.
    fn drain<P: Provider>(&mut self, clients: &mut [Client<P>], lanes: &mut [Lane]) {
        let faults = &mut self.faults;
        let drain_until = Instant::now() + self.cfg.timeout + Duration::from_secs(1);
        for (client, lane) in clients.iter_mut().zip(lanes.iter_mut()) {
            while client.in_flight() > 0 && Instant::now() < drain_until {
                client.poll_completions(|c| {
                    if lane.complete(c.tag) {
                        faults.completed += 1;
                        if c.result.is_err() {
                            faults.failed += 1;
                        }
                    } else {
                        faults.completed_twice += 1;
                    }
                });
            }
            faults.lost += lane.in_flight.iter().filter(|&&f| f).count() as u64;
        }
    }

    /// What the run measured: its measured phase `seconds` long, with `allocs` heap
    /// allocations per RPC in it (if counted).
    fn report<P: Provider>(
        self,
        clients: &[Client<P>],
        lanes: &[Lane],
        seconds: f64,
        allocs: Option<f64>,
    ) -> LoadReport {
        let rpcs: u64 = lanes.iter().map(|l| l.rpcs).sum();
        let mut client_counters = Snapshot::default();
        for c in clients.iter() {
            client_counters.add(&c.snapshot());
        }
        LoadReport {
            rpcs,
            seconds,
            rate_rps: rpcs as f64 / seconds.max(1e-9),
            lat_ns: Percentiles::of(&self.hist),
            hist: self.hist,
            server_work: self.server_work,
            allocs_per_rpc: allocs,
            client: client_counters,
            per_conn: lanes.iter().map(|l| l.rpcs).collect(),
            faults: self.faults,
        }
    }
}

#[cfg(test)]
mod tests;
