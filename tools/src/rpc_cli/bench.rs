//! `rpcrdma bench rpc`: the fleet against an in-process server or `--connect`, fault runs,
//! the report.

use super::*;

/// Runs `rpcrdma bench rpc`.
pub fn bench(args: &BenchArgs) -> ExitCode {
    on_provider!(
        args.conn.provider,
        args.conn.device.as_deref(),
        |P, open| bench_on::<P>(args, open)
    )
}

/// What one run (a workload, or a mix of them) measured, for the report.
struct Measured {
    workload: Vec<Workload>,
    /// The RPC-over-RDMA version the connections spoke.
    version: u32,
    run: FleetReport,
    per_worker_rps: Vec<f64>,
    /// Memory the clients had registered when the run ended, in all.
    client_registered: u64,
    /// A fault run's verdict (`--disconnect-every`).
    verdict: Option<Verdict>,
}

/// `bench rpc` on provider `P`: the arguments checked, the connections made (to the server
/// at `--connect`, or to one started in this process), every workload run, then each
/// reported beside the same-run limits measured around the runs.
fn bench_on<P: Provider>(
    args: &BenchArgs,
    open: impl Fn() -> Result<P::Device, String> + Sync,
) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
    Server<P>: Send + 'static,
    Client<P>: Send,
{
    let cfg = args.conn.config();
    if let Err(e) = check_run(args, cfg.bulk_size) {
        return fail("bench rpc", e);
    }
    let faults = args.disconnect_every.map(Duration::from_secs_f64);
    let threads = args.client_threads.clamp(1, args.conns);
    let thread_cores = client_cores(args, threads);
    // The reference, measured on the same two cores: a cache-line round trip. Measured
    // before the in-process server's workers start busy-polling, and again after.
    let reference = |iters| fabric_probes::cacheline_pingpong(iters).p50_ns * 2;
    let before = reference(200_000);
    let ring_before = ring_ceiling(args, threads);
    let server = match &args.connect {
        Some(a) => connect_all::<P>(&open, a, cfg, args.conns).map(|c| (c, None)),
        None => {
            in_process::<P>(&open, cfg, args, threads, faults.is_some()).map(|(c, s)| (c, Some(s)))
        }
    };
    let (mut clients, mut local) = match server {
        Ok(x) => x,
        Err(e) => return fail("bench rpc", e),
    };
    let (ok, measured) = run_workloads(&mut clients, &local, args, faults, &thread_cores);
    let workers = local.as_ref().map(|l| l.len());
    if let Some(l) = local.take() {
        l.shutdown();
    }
    let limit = before.min(reference(200_000));
    // Measured before the in-process server started and after it stopped (its workers
    // busy-poll the same cores).
    let ring = Bracket::of(ring_before, ring_ceiling(args, threads));
    for m in &measured {
        report(P::NAME, args, m, limit, ring, workers, threads);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Refuses a run that cannot work: a workload whose data does not fit in `bulk_size`, a
/// shape [`check_shape`] refuses, or `--reverse` without `--connect`.
fn check_run(args: &BenchArgs, bulk_size: u32) -> Result<(), String> {
    for mix in args.workloads() {
        for w in &mix {
            w.fits(bulk_size)?;
        }
        if mix.len() > args.depth as usize {
            return Err(format!(
                "the mix {} needs --depth {} or more: one call of each in flight",
                mix_label(&mix).0,
                mix.len()
            ));
        }
    }
    check_shape(args)?;
    if args.conn.reverse > 0 && args.connect.is_none() {
        return Err(
            "--reverse serves a remote server's callbacks: use it with --connect to `rpcrdma serve --reverse N`"
                .into(),
        );
    }
    Ok(())
}

/// The cores of the `threads` client threads, from `--core` on; says so when they and the
/// in-process server's workers are more than the cores (they share them).
fn client_cores(args: &BenchArgs, threads: usize) -> Vec<Option<usize>> {
    let ncores = fleet::cores();
    let thread_cores = (0..threads)
        .map(|i| Some(core_of(args.core, i, 1, ncores)))
        .collect();
    if threads + args.workers > ncores && args.connect.is_none() {
        eprintln!(
            "bench rpc: {threads} client thread(s) and {} worker(s) busy-poll {ncores} core(s): they share cores, which measures the sharing",
            args.workers
        );
    }
    thread_cores
}

/// What the progress display shows, handed over through atomics to the thread that draws
/// it: its allocations (drawing) are not counted, and the measured loops must not allocate.
struct Shown {
    /// The index of the workload running (`usize::MAX` before the first).
    workload: AtomicUsize,
    /// Milliseconds into its measured phase.
    elapsed_ms: AtomicU64,
    /// RPCs it completed in that phase so far.
    rpcs: AtomicU64,
    /// Set once every workload has run: the display ends.
    finished: AtomicBool,
}

impl Shown {
    /// Nothing shown yet.
    fn new() -> Shown {
        Shown {
            workload: AtomicUsize::new(usize::MAX),
            elapsed_ms: AtomicU64::new(0),
            rpcs: AtomicU64::new(0),
            finished: AtomicBool::new(false),
        }
    }

    /// The `i`th workload starts, from zero.
    fn start(&self, i: usize) {
        self.elapsed_ms.store(0, Ordering::Relaxed);
        self.rpcs.store(0, Ordering::Relaxed);
        self.workload.store(i, Ordering::Relaxed);
    }

    /// A run's progress, as [`fleet::run`] reports it.
    fn progress(&self, p: rpcrdma_bench::rpc::Progress) {
        self.elapsed_ms
            .store(p.elapsed.as_millis() as u64, Ordering::Relaxed);
        self.rpcs.store(p.rpcs, Ordering::Relaxed);
    }

    /// The display thread: a progress bar for the workload running, redrawn every 100 ms,
    /// until every workload has run.
    fn display(&self, workloads: &[Vec<Workload>], args: &BenchArgs) {
        rpcrdma_bench::alloc::exempt_this_thread();
        let mut current: Option<(usize, ProgressBar)> = None;
        loop {
            let i = self.workload.load(Ordering::Relaxed);
            if current.as_ref().map(|c| c.0) != Some(i) {
                if let Some((_, bar)) = current.take() {
                    bar.finish_and_clear();
                }
                if let Some(w) = workloads.get(i) {
                    current = Some((i, progress_bar(w, args)));
                }
            }
            if let Some((_, bar)) = &current {
                bar.set_position(self.elapsed_ms.load(Ordering::Relaxed));
                bar.set_message(format!("{} RPCs", self.rpcs.load(Ordering::Relaxed)));
            }
            if self.finished.load(Ordering::Relaxed) {
                if let Some((_, bar)) = current.take() {
                    bar.finish_and_clear();
                }
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Runs every workload in turn on `clients` (a progress display drawn by another thread),
/// then disconnects them: whether every run passed, and what each run that ended measured.
fn run_workloads<P: Provider>(
    clients: &mut [Client<P>],
    local: &Option<LocalServer<P>>,
    args: &BenchArgs,
    faults: Option<Duration>,
    thread_cores: &[Option<usize>],
) -> (bool, Vec<Measured>)
where
    ServerConn<P>: Send,
    Server<P>: Send + 'static,
    Client<P>: Send,
{
    let shown = Shown::new();
    let workloads = args.workloads();
    thread::scope(|s| {
        s.spawn(|| shown.display(&workloads, args));
        let mut ok = true;
        let mut measured = Vec::with_capacity(workloads.len());
        for (i, w) in workloads.iter().enumerate() {
            shown.start(i);
            let Some(m) = run_workload(clients, local, w, args, faults, thread_cores, &shown)
            else {
                ok = false;
                continue;
            };
            if let Some(v) = &m.verdict {
                for p in v.problems() {
                    ok = false;
                    eprintln!("bench rpc {}: {p}", mix_label(w).0);
                }
            }
            measured.push(m);
        }
        for c in clients.iter_mut() {
            c.disconnect();
        }
        shown.finished.store(true, Ordering::Relaxed);
        (ok, measured)
    })
}

/// Runs workload `w` on `clients` (a fault run with `faults`: a connection dropped that
/// often, the server then asked how often the run's Calls ran); `None` when the run failed,
/// which is printed with the clients' error counters.
fn run_workload<P: Provider>(
    clients: &mut [Client<P>],
    local: &Option<LocalServer<P>>,
    w: &[Workload],
    args: &BenchArgs,
    faults: Option<Duration>,
    thread_cores: &[Option<usize>],
    shown: &Shown,
) -> Option<Measured>
where
    ServerConn<P>: Send,
    Server<P>: Send + 'static,
    Client<P>: Send,
{
    let stamp = fresh_stamp();
    let forms: Vec<Prepared> = w
        .iter()
        .map(|&w| {
            if faults.is_some() {
                Prepared::new(w).stamped(stamp)
            } else {
                Prepared::new(w)
            }
        })
        .collect();
    let load = LoadConfig {
        sever_every: faults,
        ..LoadConfig::new(
            args.depth,
            Duration::from_secs_f64(args.seconds.max(0.01)),
            Duration::from_secs_f64(args.warmup.max(0.0)),
            Duration::from_secs(5),
        )
    };
    let worker_rpcs = |l: &Option<LocalServer<P>>| l.as_ref().map(|l| l.rpcs());
    let before_w = worker_rpcs(local);
    let recovery_before = recovery(clients);
    let t0 = Instant::now();
    let result = fleet::run(
        clients,
        &forms,
        load,
        thread_cores,
        rpcrdma_bench::alloc::allocations,
        |p| shown.progress(p),
    );
    // The workers' counts cover the warm-up and the drain too: over the whole run.
    let whole = t0.elapsed().as_secs_f64().max(1e-9);
    let per_worker_rps = match (before_w, worker_rpcs(local)) {
        (Some(a), Some(b)) => a
            .iter()
            .zip(&b)
            .map(|(x, y)| y.saturating_sub(*x) as f64 / whole)
            .collect(),
        _ => Vec::new(),
    };
    match result {
        Ok(run) => {
            let verdict =
                faults.map(|_| fault_verdict(clients, &run, stamp, recovery_before, args));
            Some(Measured {
                workload: w.to_vec(),
                client_registered: clients.iter().map(Client::registered_bytes).sum(),
                version: clients[0].negotiation().wire().number(),
                run,
                per_worker_rps,
                verdict,
            })
        }
        Err(e) => {
            eprintln!("bench rpc {}: {e}", mix_label(w).0);
            // What the requesters saw go wrong, to tell a lost connection's cause.
            let mut s = Snapshot::default();
            for c in clients.iter() {
                s.add(&c.snapshot());
            }
            eprintln!(
                "bench rpc {}: the clients' error counters: {}",
                mix_label(w).0,
                snapshot_json(&s)["errors"]
            );
            None
        }
    }
}

/// The verdict on fault run `run`: the clients' account, the server's count of the
/// executions of `stamp`'s Calls (printed when it gives none), and the reconnections and
/// retransmissions since `recovery_before`.
fn fault_verdict<P: Provider>(
    clients: &mut [Client<P>],
    run: &FleetReport,
    stamp: u32,
    recovery_before: (u64, u64),
    args: &BenchArgs,
) -> Verdict {
    let server = match exactly_once::executions(&mut clients[0], stamp, Duration::from_secs(5)) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("bench rpc: no server-side count: {e}");
            None
        }
    };
    let (reconnects, retransmits) = recovery(clients);
    Verdict {
        client: run.total.faults,
        server,
        reconnects: reconnects - recovery_before.0,
        retransmits: retransmits - recovery_before.1,
        unique_xids: args.conns == 1 && run.total.faults.submitted < exactly_once::XID_WRAP,
    }
}

/// The zero-work message ring on the client's and the server's cores at the run's depth
/// (`rpcrdma_bench::ring`), for the shape it models: one client thread, one connection and
/// one worker in this process, and a null workload among those to run. `None` otherwise, or
/// if the ring could not run (printed).
fn ring_ceiling(args: &BenchArgs, threads: usize) -> Option<RingLimit> {
    let modelled = args.connect.is_none() && args.conns == 1 && args.workers == 1 && threads == 1;
    if !modelled || !args.workloads().contains(&vec![Workload::Null]) {
        return None;
    }
    let ncores = fleet::cores();
    let cores = (
        core_of(args.core, 0, 1, ncores),
        core_of(args.core + 1, 0, 1, ncores),
    );
    null_ring(args.depth as usize, cores)
        .map_err(|e| eprintln!("bench rpc: {e}"))
        .ok()
}

/// The clients' reconnections and retransmissions so far, summed.
fn recovery<P: Provider>(clients: &[Client<P>]) -> (u64, u64) {
    clients.iter().fold((0, 0), |(a, b), c| {
        let s = c.snapshot();
        (a + s.reconnects, b + s.retransmits)
    })
}

/// Refuses combinations that cannot work, naming the option and a value that does.
fn check_shape(args: &BenchArgs) -> Result<(), String> {
    if args.conns == 0 || args.workers == 0 || args.client_threads == 0 {
        return Err("--conns, --workers and --client-threads must be at least 1".into());
    }
    if let Some(s) = args.disconnect_every {
        if !(s > 0.0 && s.is_finite()) {
            return Err("--disconnect-every must be a positive number of seconds".into());
        }
        if args.conn.retransmit == 0 {
            return Err(
                "--disconnect-every needs --retransmit N (say 20): without it the RPCs pending at each drop fail"
                    .into(),
            );
        }
        if args.conn.persistent {
            return Err("--disconnect-every needs per-RPC windows: drop --persistent".into());
        }
    }
    Ok(())
}

/// The in-process server: its workers alone, or behind an acceptor (fault runs, whose
/// clients reconnect).
enum LocalServer<P: Provider>
where
    ServerConn<P>: Send,
{
    Workers(Workers<ServerConn<P>>),
    Accepting(Accepting<P>),
}

impl<P: Provider> LocalServer<P>
where
    ServerConn<P>: Send,
    Server<P>: Send + 'static,
{
    fn stats(&self) -> Vec<WorkerStats> {
        match self {
            LocalServer::Workers(w) => w.stats(),
            LocalServer::Accepting(a) => a.stats(),
        }
    }

    /// RPCs each worker has answered so far.
    fn rpcs(&self) -> Vec<u64> {
        self.stats().iter().map(|s| s.rpc.rpcs).collect()
    }

    fn len(&self) -> usize {
        self.stats().len()
    }

    fn shutdown(self) {
        let workers = match self {
            LocalServer::Workers(w) => Ok(w),
            LocalServer::Accepting(a) => a.stop(),
        };
        match workers {
            Ok(w) => {
                let _ = w.shutdown(Duration::from_secs(1));
            }
            Err(e) => eprintln!("bench rpc: {e}"),
        }
    }
}

/// A server with `args.workers` workers pinned after the `threads` client threads' cores,
/// and `args.conns` clients connected to it; counting executions and accepting
/// reconnections for a fault run.
fn in_process<P: Provider>(
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    cfg: ConnConfig,
    args: &BenchArgs,
    threads: usize,
    faults: bool,
) -> Result<(Vec<Client<P>>, LocalServer<P>), String>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
    Server<P>: Send + 'static,
{
    let addr_s = match (args.listen.as_deref(), P::NAME) {
        (Some(a), _) => a.to_string(),
        (None, "soft") => format!("@rpcrdma-bench.{}", std::process::id()),
        (None, _) => "10.0.2.15:20050".to_string(),
    };
    let addr = parse_addr::<P>(&addr_s)?;
    let ncores = fleet::cores();
    let workers: Vec<WorkerConfig> = (0..args.workers)
        .map(|k| WorkerConfig {
            core: Some(core_of(args.core + threads, k, 1, ncores)),
            max_conns: args.conns.max(4),
        })
        .collect();
    let dispatch = if faults {
        let mut d = rpcrdma_engine::dispatch::Dispatch::new();
        program::register_counted(&mut d);
        Arc::new(d)
    } else {
        program::dispatch()
    };
    // The in-process server as `serve` would be on this device (a shared receive queue
    // where it has one, --bulk-pool per worker); the clients ignore those settings.
    let cfg = args
        .conn
        .server_config::<P>(&open()?, cfg.version, workers.len())?;
    let l = rpcrdma_bench::local::start::<P>(open, &addr, dispatch, cfg, &workers, args.conns)?;
    let server = if faults {
        LocalServer::Accepting(Accepting::start(l.server, l.workers))
    } else {
        LocalServer::Workers(l.workers)
    };
    Ok((l.clients, server))
}

fn progress_bar(w: &[Workload], args: &BenchArgs) -> ProgressBar {
    let total_ms = (args.seconds * 1000.0) as u64;
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr())
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let (names, sizes) = mix_label(w);
    bar.set_prefix(format!("{names}:{sizes}"));
    bar
}

/// The figures a workload's report derives from its measurements, for the JSON and the
/// text alike.
struct Figures {
    /// The cache-line round trip between the cores, in nanoseconds.
    limit_rtt: u64,
    /// The median round trip over it.
    ratio: f64,
    /// A null run's zero-work ring at the same depth, and the run's rate over the ring's.
    ring: Option<(Bracket, f64)>,
    /// Each connection's rate, rounded.
    per_conn: Vec<f64>,
    /// How evenly the connections were served: the slowest, median and fastest
    /// connection's rates (unrounded, from which the ratio is taken).
    conn_rates: Option<rpcrdma_bench::summary::ConnRates>,
    /// Each in-process worker's rate, rounded.
    per_worker: Vec<f64>,
    /// The server's time on the data, which the round trips leave out (READ and WRITE).
    work: Option<Percentiles>,
    /// Calls in flight on average, all connections together (Little's law), and per
    /// connection.
    in_flight: f64,
    in_flight_per_conn: f64,
}

impl Figures {
    /// The figures of `m`, measured against `limit_rtt` and (null runs) `ring`.
    fn of(m: &Measured, limit_rtt: u64, ring: Option<Bracket>) -> Figures {
        let (w, r) = (&m.workload, &m.run.total);
        let in_flight = r.mean_in_flight();
        Figures {
            limit_rtt,
            ratio: r.lat_ns.p50 as f64 / limit_rtt.max(1) as f64,
            ring: ring
                .filter(|_| w[..] == [Workload::Null])
                .map(|g| (g, r.rate_rps / g.best.rate_rps.max(1e-9))),
            per_conn: r.per_conn_rps().iter().map(|x| x.round()).collect(),
            conn_rates: r.conn_rates(),
            per_worker: m.per_worker_rps.iter().map(|x| x.round()).collect(),
            work: (!r.server_work.is_empty()).then(|| Percentiles::of(&r.server_work)),
            in_flight,
            in_flight_per_conn: in_flight / r.per_conn.len().max(1) as f64,
        }
    }
}

/// Prints what workload run `m` measured — one JSON object with `--json`, lines of text
/// otherwise — beside the cache-line round trip `limit_rtt` and (null runs) the zero-work
/// ring; `workers` of the in-process server, `threads` client threads.
fn report(
    provider: &str,
    args: &BenchArgs,
    m: &Measured,
    limit_rtt: u64,
    ring: Option<Bracket>,
    workers: Option<usize>,
    threads: usize,
) {
    let f = Figures::of(m, limit_rtt, ring);
    if args.json {
        println!("{}", report_json(provider, args, m, &f, workers, threads));
    } else {
        report_text(provider, args, m, &f, threads);
    }
}

/// The report of `m` as one JSON object (`bench rpc --json`).
fn report_json(
    provider: &str,
    args: &BenchArgs,
    m: &Measured,
    f: &Figures,
    workers: Option<usize>,
    threads: usize,
) -> Value {
    let (w, r) = (&m.workload, &m.run.total);
    let secs = r.seconds.max(1e-9);
    let per_thread: Vec<Value> = m
        .run
        .threads
        .iter()
        .map(|t| {
            json!({
                "core": t.core, "conns": t.conns, "rate_rps": (t.rpcs as f64 / secs).round(),
                "cpu_ns_per_rpc": t.cpu.map(|c| (c.as_nanos() as f64 / t.rpcs.max(1) as f64).round()),
            })
        })
        .collect();
    let conn_rates = f.conn_rates;
    json!({
        "provider": provider,
        "rpcrdma_version": m.version,
        "workers": workers,
        "conns": args.conns,
        "client_threads": threads,
        "depth": args.depth,
        // What the depth came to (Little's law): under it when the grant held it.
        "in_flight_mean": (f.in_flight * 10.0).round() / 10.0,
        "in_flight_per_conn": (f.in_flight_per_conn * 100.0).round() / 100.0,
        "proc": mix_label(w).0,
        // A mix's largest: its workloads one by one are in `mix`.
        "arg_size": w.iter().map(|w| w.arg_size()).max(),
        "res_size": w.iter().map(|w| w.res_size()).max(),
        "mix": (w.len() > 1).then(|| w.iter().map(|w| json!({
            "proc": w.name(), "arg_size": w.arg_size(), "res_size": w.res_size(),
        })).collect::<Vec<_>>()),
        "rpcs": r.rpcs,
        "seconds": (r.seconds * 1000.0).round() / 1000.0,
        "rate_rps": r.rate_rps.round(),
        // `{min, p50, p90, p99, p999, max}`, as a sweep point's.
        "lat_ns": r.lat_ns,
        "server_work_ns": f.work,
        "allocs_per_rpc": r.allocs_per_rpc,
        "limit_ns_p50": f.limit_rtt,
        "ratio_p50": (f.ratio * 100.0).round() / 100.0,
        "ring": f.ring.map(|(g, x)| json!({
            "depth": g.best.depth,
            "rate_rps": g.best.rate_rps.round(),
            "ns_per_round_trip": (g.best.ns_per_round_trip * 10.0).round() / 10.0,
            "other_rate_rps": g.other.rate_rps.round(),
            "phase_changed": g.phase_changed(),
            "ratio_rate": (x * 1000.0).round() / 1000.0,
        })),
        "per_conn_rps": f.per_conn,
        "conn_rate_min": conn_rates.map(|c| c.min.round()),
        "conn_rate_median": conn_rates.map(|c| c.median.round()),
        "conn_rate_max": conn_rates.map(|c| c.max.round()),
        "conn_rate_min_to_median": conn_rates
            .map(|c| (c.min_to_median() * 1000.0).round() / 1000.0),
        "per_worker_rps": f.per_worker,
        "client_registered_bytes": m.client_registered,
        "threads": per_thread,
        "faults": m.verdict.as_ref().map(faults_json),
        "client": snapshot_json(&r.client),
    })
}

/// A fault run's verdict as JSON: the drops, the recovery, the client's and the server's
/// accounts, and whether every RPC ran exactly once.
fn faults_json(v: &Verdict) -> Value {
    json!({
        "severed": v.client.severed,
        "reconnects": v.reconnects,
        "retransmits": v.retransmits,
        "submitted": v.client.submitted,
        "completed": v.client.completed,
        "completed_twice": v.client.completed_twice,
        "lost": v.client.lost,
        "failed": v.client.failed,
        "server": v.server.map(|c| json!({
            "xids": c.xids, "executions": c.executions,
            "repeated": c.repeated, "lost_track": c.lost_track,
        })),
        "exact": v.problems().is_empty(),
    })
}

/// The report of `m` as lines of text: the rate and the latencies, then the ring, the
/// server's time on the data, the connections' and workers' rates and the faults where
/// there are some.
fn report_text(provider: &str, args: &BenchArgs, m: &Measured, f: &Figures, threads: usize) {
    let (r, (names, sizes)) = (&m.run.total, mix_label(&m.workload));
    let (ratio, limit_rtt) = (f.ratio, f.limit_rtt);
    println!(
        "{provider} {names:>5} {sizes:>7} B  depth {:>3}: {:>10.0} RPC/s  p50 {} ns ({ratio:.2}x the {limit_rtt} ns cache-line round trip)  p90 {} p99 {} p99.9 {} max {} ns  allocs/RPC {}",
        args.depth,
        r.rate_rps,
        r.lat_ns.p50,
        r.lat_ns.p90,
        r.lat_ns.p99,
        r.lat_ns.p999,
        r.lat_ns.max,
        r.allocs_per_rpc.map_or("n/a".to_string(), |a| format!("{a:.3}")),
    );
    if f.in_flight_per_conn < 0.75 * f64::from(args.depth) {
        println!(
            "      {:.1} calls in flight per connection on average (Little's law), not the {} asked: {}",
            f.in_flight_per_conn,
            args.depth,
            if args.conn.credits < args.depth {
                format!("--credits {} caps a connection's calls in flight (RFC 8166 §3.3.1)", args.conn.credits)
            } else {
                "the server's grant or a busy client kept fewer in flight".to_string()
            }
        );
    }
    if let Some((g, x)) = f.ring {
        println!(
            "      {x:.2}x the rate of a zero-work message ring on the same cores at depth {}: {:.0} round trips/s, {:.1} ns each",
            g.best.depth, g.best.rate_rps, g.best.ns_per_round_trip
        );
        if g.phase_changed() {
            println!(
                "      the ring measured {:.0} round trips/s on the other side of the run: the host changed phase, so the ratio means little",
                g.other.rate_rps
            );
        }
    }
    if let Some(w) = f.work {
        println!(
            "      the server's time on the data, left out of the round trips above: p50 {} p99 {} ns",
            w.p50, w.p99
        );
    }
    if args.conns > 1 || f.per_worker.len() > 1 || threads > 1 {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "      {} connection(s) on {threads} client thread(s): RPC/s per connection [{}]; per worker [{}]",
            args.conns,
            list(&f.per_conn),
            list(&f.per_worker)
        );
    }
    if let Some(c) = f.conn_rates.filter(|c| c.conns > 1) {
        println!(
            "      RPC/s per connection: min {:.0}, median {:.0}, max {:.0}; the slowest {:.2}x the median{}",
            c.min,
            c.median,
            c.max,
            c.min_to_median(),
            if c.fair() {
                String::new()
            } else {
                format!(" (under {}x: unfair)", rpcrdma_bench::summary::ConnRates::FAIR)
            }
        );
    }
    println!(
        "      the clients' registered memory: {:.1} MiB in all, {:.1} KiB a connection",
        m.client_registered as f64 / (1024.0 * 1024.0),
        m.client_registered as f64 / 1024.0 / args.conns.max(1) as f64
    );
    if let Some(v) = &m.verdict {
        println!("{}", faults_line(v));
    }
}

/// A fault run's verdict as a line of text: the drops, the recovery, the client's account,
/// the server's, and what was wrong or that every RPC ran exactly once.
fn faults_line(v: &Verdict) -> String {
    let server = match v.server {
        Some(c) if c.lost_track == 0 => format!(
            "; the server ran {} executions of {} distinct XIDs, {} XIDs more than once",
            c.executions, c.xids, c.repeated
        ),
        Some(c) => format!(
            "; the server ran {} executions (its XID table is full)",
            c.executions
        ),
        None => "; the server does not count executions".to_string(),
    };
    let problems = v.problems();
    format!(
        "      faults: {} connection(s) dropped, {} reconnects, {} retransmissions; {} RPCs submitted, {} completed, {} failed, {} lost, {} completed twice{server}: {}",
        v.client.severed,
        v.reconnects,
        v.retransmits,
        v.client.submitted,
        v.client.completed,
        v.client.failed,
        v.client.lost,
        v.client.completed_twice,
        if !problems.is_empty() {
            problems.join("; ")
        } else {
            match v.repeated_runs() {
                Some(0) => "every RPC completed and ran exactly once".to_string(),
                Some(extra) => format!(
                    "every RPC completed exactly once; {extra} retransmitted Call(s) ran again (the built-in program keeps no duplicate request cache)"
                ),
                None => "every RPC completed exactly once".to_string(),
            }
        }
    )
}
