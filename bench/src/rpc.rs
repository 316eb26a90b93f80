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
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::program::{self, encode_opaque, encode_words, fill_pattern, word};
use rpcrdma_engine::proto::plan::Forced;
use rpcrdma_engine::proto::rpc::{AcceptStat, AuthSys, Gids, OpaqueAuth, ReplyBody, AUTH_SYS};
use rpcrdma_engine::requester::{CallArgs, Client, Reply, RpcError, SubmitError};
use rpcrdma_engine::stats::Snapshot;

/// What each RPC of a run does (procedures of [`program`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// NULL: no arguments, no results.
    Null,
    /// ECHO of `n` bytes: inline both ways (or Long Call and Reply when large).
    Echo(u32),
    /// READ of `n` bytes: the result comes back through a Write chunk.
    Read(u32),
    /// WRITE of `n` bytes: the argument goes out through a Read chunk (or inline when
    /// small).
    Write(u32),
    /// Another program's procedure without arguments (a NULL, say: the Linux kernel's
    /// nfsd's, `bench rpc --prog 100003 --vers 3 --proc 0`); a reply is right when it is
    /// accepted SUCCESS.
    Proc {
        /// Program number.
        prog: u32,
        /// Its version.
        vers: u32,
        /// The procedure.
        proc_num: u32,
    },
}

impl Workload {
    /// The procedure's name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Null => "null",
            Workload::Echo(_) => "echo",
            Workload::Read(_) => "read",
            Workload::Write(_) => "write",
            Workload::Proc { .. } => "proc",
        }
    }

    /// Bytes of payload each Call carries.
    pub fn arg_size(self) -> u32 {
        match self {
            Workload::Echo(n) | Workload::Write(n) => n,
            _ => 0,
        }
    }

    /// Bytes of payload each Reply carries.
    pub fn res_size(self) -> u32 {
        match self {
            Workload::Echo(n) | Workload::Read(n) => n,
            _ => 0,
        }
    }
}

/// Bytes of RPC and transport headers a chunked RPC's bulk buffer holds beside the payload
/// (a Long Call's Position-Zero chunk carries the Call's headers too).
pub const BULK_SLACK: u32 = 4096;

impl Workload {
    /// The bulk buffer size the workload needs: its payload and [`BULK_SLACK`] (0 without a
    /// payload).
    pub fn bulk_needed(self) -> u32 {
        match self.arg_size().max(self.res_size()) {
            0 => 0,
            n => n.saturating_add(BULK_SLACK),
        }
    }

    /// Refuses, before anything runs, a workload whose payload cannot fit buffers of
    /// `bulk_size` bytes, with the option and a value that works.
    pub fn fits(self, bulk_size: u32) -> Result<(), String> {
        let need = self.bulk_needed();
        if need > bulk_size {
            return Err(format!(
                "{}:{} needs --bulk-size of at least {need} (the payload plus {BULK_SLACK} bytes of headers)",
                self.name(),
                self.arg_size().max(self.res_size())
            ));
        }
        Ok(())
    }
}

/// The arguments of one workload, built once.
#[derive(Debug)]
pub struct Prepared {
    workload: Workload,
    args: Vec<u8>,
    bulk: Vec<u8>,
    bulk_results: [u32; 1],
    forced: Forced,
    /// An AUTH_SYS credential's body, when the Calls carry one ([`Prepared::stamped`]).
    cred: Option<Vec<u8>>,
}

/// The seed of the bulk data the load generator sends and asks for.
const SEED: u32 = 0x5eed;

impl Prepared {
    /// Builds the arguments of `w`.
    pub fn new(w: Workload) -> Prepared {
        let mut p = Prepared {
            workload: w,
            args: Vec::new(),
            bulk: Vec::new(),
            bulk_results: [0],
            forced: Forced::default(),
            cred: None,
        };
        match w {
            Workload::Null | Workload::Proc { .. } => {}
            Workload::Echo(n) => {
                p.args = vec![0; program::opaque_len(n as usize)];
                let _ = encode_opaque(&mut p.args, n as usize, |d| fill_pattern(SEED, d));
            }
            Workload::Read(n) => {
                p.args = encode_words(n, SEED).to_vec();
                p.bulk_results = [n];
            }
            Workload::Write(n) => {
                p.args = SEED.to_be_bytes().to_vec();
                p.bulk = vec![0; n as usize];
                fill_pattern(SEED, &mut p.bulk);
            }
        }
        p
    }

    /// The same workload sent in the forms `forced` asks for (`CallArgs::forced`); with
    /// `inline_result`, a READ asks for its result inline (an empty Write chunk, RFC 8166
    /// §4.3.2.3) instead of through a Write chunk.
    pub fn forced(mut self, forced: Forced, inline_result: bool) -> Prepared {
        self.forced = forced;
        if inline_result {
            self.bulk_results = [0];
        }
        self
    }

    /// The same workload with an AUTH_SYS credential stamped `stamp` (RFC 5531 Appendix A),
    /// so that a server counting executions (`rpcrdma serve --count-executions`,
    /// [`program::register_counted`]) tells this run's Calls apart from any other's.
    pub fn stamped(mut self, stamp: u32) -> Prepared {
        let mut body = [0u8; 64];
        let sys = AuthSys {
            stamp,
            machinename: b"rpcrdma-bench",
            uid: 0,
            gid: 0,
            gids: Gids::default(),
        };
        // 13 bytes of name and no groups fit 64 bytes: the encoding cannot fail.
        let n = sys.encode(&mut body).unwrap_or(0);
        self.cred = Some(body[..n].to_vec());
        self
    }

    /// The Call to submit.
    pub fn call(&self, timeout: Duration) -> CallArgs<'_> {
        let (prog, vers) = match self.workload {
            Workload::Proc { prog, vers, .. } => (prog, vers),
            _ => (program::PROG, program::VERS),
        };
        let (proc_num, max_results) = match self.workload {
            Workload::Null => (program::NULL, 0),
            Workload::Echo(n) => (program::ECHO, program::opaque_len(n as usize) as u32),
            Workload::Read(_) => (program::READ, 4),
            Workload::Write(_) => (program::WRITE, 8),
            // Room for whatever the procedure answers inline.
            Workload::Proc { proc_num, .. } => (proc_num, 1024),
        };
        let mut c = CallArgs::new(prog, vers, proc_num, &self.args, max_results);
        c.timeout = timeout;
        c.forced = self.forced;
        if let Some(body) = &self.cred {
            c.cred = OpaqueAuth {
                flavor: AUTH_SYS,
                body,
            };
        }
        if let Workload::Write(_) = self.workload {
            c.bulk_arg = Some(&self.bulk);
        }
        if let Workload::Read(_) = self.workload {
            c.bulk_results = &self.bulk_results;
        }
        c
    }

    /// The length of a DDP-eligible argument the load generator writes in place
    /// (`Client::submit_in_place`, [`Prepared::fill_bulk`]): a WRITE's data, made where the
    /// responder reads it from, as a storage client reading a file into registered memory
    /// makes it. `None` for workloads without one.
    pub fn in_place(&self) -> Option<usize> {
        match self.workload {
            Workload::Write(n) => Some(n as usize),
            _ => None,
        }
    }

    /// Writes the DDP-eligible argument [`Prepared::in_place`] announces into `dst`.
    pub fn fill_bulk(&self, dst: &mut [u8]) {
        fill_pattern(SEED, dst);
    }

    /// Checks a reply: success, and every byte of the results as the program defines them.
    pub fn verify(&self, result: &Result<Reply<'_>, RpcError>) -> Result<(), ReplyError> {
        let need = self.workload.bulk_needed();
        let r = match result {
            Ok(r) => r,
            // A responder refuses a payload larger than its buffers with ERR_CHUNK (RFC
            // 8166 §8.1.4).
            Err(RpcError::ErrChunk) if need != 0 => {
                return Err(ReplyError::TooLarge {
                    answer: "ERR_CHUNK",
                    need,
                })
            }
            Err(e) => return Err(ReplyError::Rpc(*e)),
        };
        match r.rpc.body {
            ReplyBody::Accepted {
                stat: AcceptStat::Success,
                ..
            } => {}
            // The built-in program's READ answers SYSTEM_ERR when its result does not fit.
            ReplyBody::Accepted {
                stat: AcceptStat::SystemErr,
                ..
            } if need != 0 => {
                return Err(ReplyError::TooLarge {
                    answer: "SYSTEM_ERR",
                    need,
                })
            }
            ReplyBody::Accepted { stat, .. } => return Err(ReplyError::NotSuccess(stat.name())),
            ReplyBody::Denied(d) => return Err(ReplyError::NotSuccess(d.name())),
        }
        let ok = match self.workload {
            Workload::Null => r.results.is_empty(),
            Workload::Echo(_) => r.results == self.args.as_slice(),
            Workload::Read(n) => {
                // Through the Write chunk (`bulk`), or inline after the count when the Call
                // asked for it so: the opaque's length word, then its bytes.
                let data = match r.bulk().first().filter(|b| !b.is_empty()) {
                    Some(b) => Some(*b),
                    None if word(r.results, 4) == Some(n) => r.results.get(8..8 + n as usize),
                    None => None,
                };
                word(r.results, 0) == Some(n)
                    && data.is_some_and(|b| program::is_pattern(SEED, b) && b.len() == n as usize)
            }
            Workload::Write(n) => word(r.results, 0) == Some(1) && word(r.results, 4) == Some(n),
            // Accepted SUCCESS, checked above: nothing is known of the results.
            Workload::Proc { .. } => true,
        };
        if ok {
            Ok(())
        } else {
            Err(ReplyError::WrongData)
        }
    }
}

/// Why a reply did not pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// The RPC failed at the transport.
    Rpc(RpcError),
    /// The server answered this status (its RFC 5531 name) instead of SUCCESS.
    NotSuccess(&'static str),
    /// The server refused a payload with `answer` (ERR_CHUNK, or the built-in program's
    /// SYSTEM_ERR), as a server whose buffers are smaller than `need` bytes does.
    TooLarge {
        /// What the server answered.
        answer: &'static str,
        /// The bulk buffer size the payload needs ([`Workload::bulk_needed`]).
        need: u32,
    },
    /// The results are not what the program returns.
    WrongData,
}

impl core::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReplyError::Rpc(e) => write!(f, "RPC failed: {e}"),
            ReplyError::NotSuccess(status) => {
                write!(f, "the server answered {status}, not SUCCESS")
            }
            ReplyError::TooLarge { answer, need } => write!(
                f,
                "the server answered {answer}: a server's buffers must hold {need} bytes for this payload (`rpcrdma serve --bulk-size {need}`)"
            ),
            ReplyError::WrongData => f.write_str("the results are wrong"),
        }
    }
}

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
    /// Fault runs: drop a connection (`Client::sever`) this often, each connection of the
    /// run in turn, with Calls in flight. Needs clients with a retransmit policy, or the
    /// pending RPCs fail with `ConnectionLost`.
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

/// Latency percentiles, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// Fastest.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Slowest.
    pub max: u64,
}

impl Percentiles {
    /// The percentiles of a histogram.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// What a fault run saw: how often connections were dropped, and whether every RPC
/// completed exactly once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Connections dropped by the run (`Client::sever`).
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
    /// Heap allocations per RPC in the measured phase, if counted.
    pub allocs_per_rpc: Option<f64>,
    /// The client connections' counters at the end, summed.
    pub client: Snapshot,
    /// RPCs each connection completed in the measured phase, in the order given.
    pub per_conn: Vec<u64>,
    /// Exactly-once accounting (meaningful for every run, essential for fault runs).
    pub faults: Faults,
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
}

impl core::fmt::Display for LoadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoadError::Submit(e) => write!(f, "submit failed: {e}"),
            LoadError::Reply(e) => write!(f, "bad reply: {e}"),
            LoadError::Stalled => f.write_str("no reply within the RPC timeout"),
            LoadError::Config(why) => write!(f, "bad settings: {why}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Records in `hist` the round trip, ending at `now`, of each Call submitted at the
/// instants `sent` gives. Calls submitted together carry the same stamp and mostly
/// complete together, so runs of equal stamps are recorded with one count each (the
/// histogram ends up the same; its update and the clock arithmetic were a few percent of
/// the client thread's time at depth 32).
fn record_round_trips(
    hist: &mut Histogram<u64>,
    clock: &Clock,
    now: Stamp,
    sent: impl Iterator<Item = Stamp>,
) {
    let mut run: Option<(Stamp, u64)> = None;
    let mut flush = |run: Option<(Stamp, u64)>| {
        if let Some((at, n)) = run {
            let ns = clock.nanos(at, now);
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
            in_flight: vec![false; depth],
            rpcs: 0,
        }
    }

    /// Submits every free tag (corked when more than one), stamping them with one clock
    /// reading taken before the first: each round trip counts its submission, and a Call
    /// later in the batch is charged for the ones before it (never flattered). A WRITE's
    /// data is written in place ([`Prepared::in_place`]); making it is the load
    /// generator's work, not the transport's, and is left out of the round trips (each
    /// Call's stamp moves on by the time the fills up to its own took).
    fn submit<P: Provider>(
        &mut self,
        client: &mut Client<P>,
        call: &CallArgs<'_>,
        prepared: &Prepared,
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
        let in_place = prepared.in_place();
        while k < self.free.len() {
            let tag = self.free[k];
            let submitted = match in_place {
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

/// Runs `prepared` on `client` as `cfg` says (see [`run_many`]).
pub fn run<P: Provider>(
    client: &mut Client<P>,
    prepared: &Prepared,
    cfg: LoadConfig,
    allocations: fn() -> Option<u64>,
    progress: impl FnMut(Progress),
) -> Result<LoadReport, LoadError> {
    run_many(
        core::slice::from_mut(client),
        prepared,
        cfg,
        None,
        allocations,
        progress,
    )
}

/// Runs `prepared` on every one of `clients` from this thread (each connection polled in
/// turn, `depth` calls in flight on each) as `cfg` says; `progress` is called about every
/// 100 ms and `allocations` (the process's allocation counter, if any) is read around the
/// measured phase.
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
    prepared: &Prepared,
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
    let mut call = prepared.call(cfg.timeout);
    if prepared.in_place().is_some() {
        // Written in place by each submission instead (`Lane::submit`).
        call.bulk_arg = None;
    }
    let depth = cfg.depth as usize;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|_| LoadError::Config("histogram"))?;
    // Round trips are stamped with the cycle counter where it is steady (see
    // `rpcrdma_engine::clock`): the clock's own cost stays out of what is measured.
    let clock = Clock::get();
    let mut lanes: Vec<Lane> = clients
        .iter()
        .map(|_| Lane::new(depth, clock.now()))
        .collect();
    let mut faults = Faults::default();
    if let Some(g) = gates {
        g.start.wait();
    }
    let start = Instant::now();
    let mut failure: Option<ReplyError> = None;

    let measure_from = start + cfg.warmup;
    let end = measure_from + cfg.duration;
    let mut measuring = false;
    let mut allocs_at_start = None;
    let mut last_reply = start;
    let mut next_progress = start;
    let mut next_sever = cfg.sever_every.map(|e| start + e);
    let mut sever_turn = 0usize;
    let mut passes: u32 = 0;
    let mut replied = false;
    // The measured loop; its error, if any, is returned after the gates are passed (a
    // thread that stops early must not leave the others waiting at the end gate).
    let outcome: Result<(), LoadError> = (|| {
        loop {
            for (client, lane) in clients.iter_mut().zip(lanes.iter_mut()) {
                lane.submit(client, &call, prepared, &mut faults, &clock)?;
                let mut first_at: Option<Stamp> = None;
                let n = client.poll_completions(|c| {
                    // The round trip ends here, before the reply is checked.
                    first_at.get_or_insert_with(|| clock.now());
                    if !lane.complete(c.tag) {
                        faults.completed_twice += 1;
                        return;
                    }
                    faults.completed += 1;
                    if let Err(e) = prepared.verify(&c.result) {
                        failure.get_or_insert(e);
                    }
                    lane.finished.push(c.tag);
                });
                if let Some(e) = failure {
                    return Err(LoadError::Reply(e));
                }
                if let Some(now) = first_at.filter(|_| n > 0) {
                    replied = true;
                    if measuring {
                        record_round_trips(
                            &mut hist,
                            &clock,
                            now,
                            lane.finished.iter().map(|&t| lane.sent[t as usize]),
                        );
                        lane.rpcs += lane.finished.len() as u64;
                    }
                    lane.free.extend_from_slice(&lane.finished);
                    lane.finished.clear();
                }
            }
            passes = passes.wrapping_add(1);
            if passes.is_multiple_of(64) {
                // The run's own clock (its phases, progress, faults, stalls) is read once
                // every 64 passes: the passes between stay tight, busy or idle.
                let now = Instant::now();
                if std::mem::take(&mut replied) {
                    last_reply = now;
                }
                if !measuring && now >= measure_from {
                    measuring = true;
                    allocs_at_start = allocations();
                    hist.reset();
                    for lane in lanes.iter_mut() {
                        lane.rpcs = 0;
                    }
                }
                if now >= end {
                    break;
                }
                if let (Some(at), Some(every)) = (next_sever, cfg.sever_every) {
                    if now >= at {
                        let k = sever_turn % clients.len();
                        let c = &mut clients[k];
                        if !c.is_reconnecting() && !c.is_dead() && c.in_flight() > 0 {
                            c.sever();
                            faults.severed += 1;
                            sever_turn += 1;
                            next_sever = Some(now + every);
                        }
                    }
                }
                if now >= next_progress {
                    next_progress = now + Duration::from_millis(100);
                    progress(Progress {
                        elapsed: now.saturating_duration_since(measure_from),
                        total: cfg.duration,
                        rpcs: lanes.iter().map(|l| l.rpcs).sum(),
                    });
                }
                if now.saturating_duration_since(last_reply) > cfg.timeout + Duration::from_secs(1)
                {
                    return Err(LoadError::Stalled);
                }
            }
        }
        Ok(())
    })();
    let measured_end = Instant::now();
    let rpcs: u64 = lanes.iter().map(|l| l.rpcs).sum();
    let allocs = match (allocs_at_start, allocations()) {
        (Some(a), Some(b)) if rpcs > 0 => Some((b - a) as f64 / rpcs as f64),
        _ => None,
    };
    if let Some(g) = gates {
        g.end.wait();
    }
    outcome?;
    // Let the calls still in flight finish, so that the connections are quiet afterwards
    // and every RPC submitted is accounted for.
    let drain_until = Instant::now() + cfg.timeout + Duration::from_secs(1);
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
    let seconds = (measured_end - measure_from).as_secs_f64();
    progress(Progress {
        elapsed: cfg.duration,
        total: cfg.duration,
        rpcs,
    });
    let mut client_counters = Snapshot::default();
    for c in clients.iter() {
        client_counters.add(&c.snapshot());
    }
    Ok(LoadReport {
        rpcs,
        seconds,
        rate_rps: rpcs as f64 / seconds.max(1e-9),
        lat_ns: Percentiles::of(&hist),
        hist,
        allocs_per_rpc: allocs,
        client: client_counters,
        per_conn: lanes.iter().map(|l| l.rpcs).collect(),
        faults,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of equal stamps, interleaved ones and single ones: the histogram holds exactly
    /// what recording each round trip on its own would.
    #[test]
    fn round_trips_recorded_in_runs_match_one_by_one() {
        // The monotonic clock's ticks are nanoseconds.
        let clock = Clock::monotonic();
        let at = |us: u64| Stamp::from_ticks(us * 1000);
        let now = at(1000);
        let stamps: Vec<Stamp> = [1, 1, 1, 5, 5, 1, 9, 9, 9, 9, 2, 700, 700]
            .iter()
            .map(|&us| at(us))
            .collect();
        let new = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        let mut runs = new();
        record_round_trips(&mut runs, &clock, now, stamps.iter().copied());
        let mut single = new();
        for &s in &stamps {
            single.record(clock.nanos(s, now)).unwrap();
        }
        assert_eq!(runs.len(), stamps.len() as u64);
        assert_eq!(runs, single);
        let mut empty = new();
        record_round_trips(&mut empty, &clock, now, std::iter::empty());
        assert_eq!(empty.len(), 0);
    }
}
