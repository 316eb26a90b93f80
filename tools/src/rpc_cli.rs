//! `rpcrdma serve`, `rpcrdma call` and `rpcrdma bench rpc`: the engine between two
//! processes (or in one), on the soft fabric or on verbs, with the built-in test program
//! ([`rpcrdma_engine::program`]).

use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rpcrdma_bench::rpc::{self, LoadConfig, LoadReport, Prepared, Workload};
use rpcrdma_engine::conn::{ConnConfig, ConnError, Registration, RetransmitPolicy};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::{bench as fabric_bench, ConnectError, Provider};
use rpcrdma_engine::program;
use rpcrdma_engine::requester::Client;
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::stats::{Snapshot, ERROR_COUNTERS};
use rpcrdma_engine::worker::{WorkerConfig, WorkerStats, Workers};
use serde_json::{json, Value};

use crate::conformance::Which;
use crate::open_device::open_verbs;

/// Connection settings shared by the three commands.
#[derive(ClapArgs, Debug, Clone)]
pub struct ConnOpts {
    /// The fabric.
    #[arg(long, value_enum, default_value_t = Which::Soft)]
    provider: Which,
    /// The RDMA device (verbs; default: the first one).
    #[arg(long)]
    device: Option<String>,
    /// Credits: the client's request and pending-table size; the server's receives.
    #[arg(long, default_value_t = 32)]
    credits: u32,
    /// Inline threshold this end offers in both directions (RFC 8797 Send and Receive
    /// Size), at least 1024.
    #[arg(long, default_value_t = 4096)]
    inline: u32,
    /// Sends of at most this many bytes are posted inline (copied into the work request:
    /// no DMA read of the buffer by a NIC), within the device's limit; 0: never.
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_INLINE_SENDS)]
    inline_sends: u32,
    /// Refuse Send With Invalidate (RFC 8797 R bit clear).
    #[arg(long)]
    no_remote_invalidation: bool,
    /// Expose pool regions once instead of per-RPC memory windows (fast, trusting).
    #[arg(long)]
    persistent: bool,
    /// Bytes of each RPC's bulk buffers (largest chunk payload).
    #[arg(long, default_value_t = 1 << 20)]
    bulk_size: u32,
    /// Client: after a lost connection, reconnect (at most this many attempts per loss) and
    /// retransmit the pending Calls with their XIDs and fresh registrations (0: off, pending
    /// RPCs fail with ConnectionLost). Needs per-RPC windows (not --persistent).
    #[arg(long, default_value_t = 0)]
    retransmit: u32,
}

impl ConnOpts {
    fn config(&self) -> ConnConfig {
        ConnConfig {
            send_size: self.inline,
            recv_size: self.inline,
            remote_invalidation: !self.no_remote_invalidation,
            credits: self.credits,
            initial_grant: self.credits,
            bulk_size: self.bulk_size,
            inline_sends: self.inline_sends,
            registration: if self.persistent {
                Registration::Persistent
            } else {
                Registration::Windows
            },
            retransmit: (self.retransmit > 0).then(|| RetransmitPolicy {
                max_attempts: self.retransmit,
                ..RetransmitPolicy::default()
            }),
            ..ConnConfig::default()
        }
    }

    fn default_addr(&self) -> &'static str {
        match self.provider {
            Which::Soft => "@rpcrdma",
            Which::Verbs => "0.0.0.0:20049",
        }
    }
}

/// A workload on the command line: `null`, `echo:N`, `read:N`, `write:N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadArg(pub Workload);

impl FromStr for WorkloadArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, size) = s.split_once(':').unwrap_or((s, "0"));
        let n: u32 = parse_size(size).ok_or_else(|| format!("bad size in {s:?}"))?;
        Ok(WorkloadArg(match name {
            "null" => Workload::Null,
            "echo" => Workload::Echo(n),
            "read" => Workload::Read(n),
            "write" => Workload::Write(n),
            _ => {
                return Err(format!(
                    "unknown workload {name:?} (null, echo:N, read:N, write:N)"
                ))
            }
        }))
    }
}

/// `4096`, `4k`, `64K`, `1m`.
fn parse_size(s: &str) -> Option<u32> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1024),
        'm' | 'M' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u32>().ok()?.checked_mul(mult)
}

/// Arguments of `rpcrdma serve`.
#[derive(ClapArgs, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    conn: ConnOpts,
    /// Where to listen: `@name` or a socket path (soft), `IP:PORT` (verbs).
    #[arg(long)]
    listen: Option<String>,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// First core to pin workers to (worker i gets core first+i); none: unpinned.
    #[arg(long)]
    first_core: Option<usize>,
    /// Stop after this many seconds (0: until SIGINT or SIGTERM, which stop gracefully).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
    /// Print the workers' counters every this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    stats_every: u64,
    /// Count executions per (AUTH_SYS stamp, XID) and answer EXECUTIONS (procedure 5):
    /// whether a run with lost connections lost or repeated an RPC.
    #[arg(long)]
    count_executions: bool,
}

/// Arguments of `rpcrdma call`.
#[derive(ClapArgs, Debug)]
pub struct CallArgs {
    #[command(flatten)]
    conn: ConnOpts,
    /// The server: `@name` or a socket path (soft), `IP:PORT` (verbs).
    #[arg(long)]
    connect: Option<String>,
    /// What to call: null, echo:N, read:N, write:N.
    #[arg(long, default_value = "null")]
    workload: WorkloadArg,
    /// How many calls, one after the other.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// Per-call timeout, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// Any other program's procedure instead of the built-in workload.
    #[command(flatten)]
    generic: crate::call_generic::Generic,
}

/// Arguments of `rpcrdma bench rpc`.
#[derive(ClapArgs, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    conn: ConnOpts,
    /// A running `rpcrdma serve` to load; without it, a server runs in this process on
    /// its own pinned worker.
    #[arg(long)]
    connect: Option<String>,
    /// Where the in-process server listens (default: a fresh abstract name on soft,
    /// 10.0.2.15:20050 on verbs, the soft-RoCE guest's address).
    #[arg(long)]
    listen: Option<String>,
    /// Workloads, comma-separated: null, echo:N, read:N, write:N (one report each).
    #[arg(long, value_delimiter = ',', default_value = "null")]
    workload: Vec<WorkloadArg>,
    /// Calls kept in flight.
    #[arg(long, default_value_t = 1)]
    depth: u32,
    /// Measured seconds per workload.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Warm-up seconds before each measurement.
    #[arg(long, default_value_t = 0.3)]
    warmup: f64,
    /// Core of the client thread (the in-process server's worker takes the next one).
    #[arg(long, default_value_t = 0)]
    core: usize,
    /// Print one JSON object per workload.
    #[arg(long)]
    json: bool,
    /// Measure another program's procedure (no arguments; a NULL, say) instead of the
    /// built-in workloads: its number.
    #[arg(long, conflicts_with = "workload")]
    prog: Option<u32>,
    /// The program's version.
    #[arg(long, default_value_t = 1, requires = "prog")]
    vers: u32,
    /// The procedure.
    #[arg(long = "proc", default_value_t = 0, requires = "prog")]
    proc_num: u32,
}

impl BenchArgs {
    /// The workloads to run: `--prog`'s procedure, or `--workload`'s.
    fn workloads(&self) -> Vec<Workload> {
        match self.prog {
            Some(prog) => vec![Workload::Proc {
                prog,
                vers: self.vers,
                proc_num: self.proc_num,
            }],
            None => self.workload.iter().map(|w| w.0).collect(),
        }
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("{what}: {e}");
    ExitCode::FAILURE
}

/// Runs `rpcrdma serve`.
pub fn serve(args: &ServeArgs) -> ExitCode {
    let addr = args
        .listen
        .clone()
        .unwrap_or_else(|| args.conn.default_addr().to_string());
    match args.conn.provider {
        Which::Soft => match Soft::open_device(None) {
            Ok(d) => serve_on::<Soft>(d, &addr, args),
            Err(e) => fail("soft fabric", e),
        },
        Which::Verbs => match open_verbs(args.conn.device.as_deref()) {
            Ok(d) => serve_on::<Verbs>(d, &addr, args),
            Err(e) => fail("verbs", e),
        },
    }
}

fn parse_addr<P: Provider>(s: &str) -> Result<P::Addr, String>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
{
    s.parse::<P::Addr>()
        .map_err(|e| format!("bad address {s:?}: {e}"))
}

fn serve_on<P: Provider>(device: P::Device, addr: &str, args: &ServeArgs) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    let addr = match parse_addr::<P>(addr) {
        Ok(a) => a,
        Err(e) => return fail("serve", e),
    };
    let dispatch = if args.count_executions {
        let mut d = rpcrdma_engine::dispatch::Dispatch::new();
        program::register_counted(&mut d);
        Arc::new(d)
    } else {
        program::dispatch()
    };
    let mut server = match Server::<P>::listen(device, &addr, dispatch, args.conn.config()) {
        Ok(s) => s,
        Err(e) => return fail(&format!("listen on {addr}"), e),
    };
    let configs: Vec<WorkerConfig> = (0..args.workers.max(1))
        .map(|i| WorkerConfig {
            core: args.first_core.map(|c| c + i),
            max_conns: 64,
        })
        .collect();
    let mut workers = match Workers::<ServerConn<P>>::start(&configs) {
        Ok(w) => w,
        Err(e) => return fail("starting workers", e),
    };
    eprintln!(
        "rpcrdma serve: program {} v{} on {} ({}), {} worker(s)",
        program::PROG,
        program::VERS,
        addr,
        P::NAME,
        workers.len()
    );
    // SIGINT and SIGTERM end the service gracefully: Calls in process finish, the
    // connections close, the counters are printed.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("rpcrdma serve: cannot handle signal {sig}: {e}");
        }
    }
    let start = Instant::now();
    let mut next_stats = start;
    loop {
        if stop.load(Ordering::Relaxed)
            || (args.seconds > 0 && start.elapsed() >= Duration::from_secs(args.seconds))
        {
            break;
        }
        match server.accept(Duration::from_millis(200)) {
            Ok(conn) => {
                let n = conn.negotiation();
                eprintln!(
                    "rpcrdma serve: accepted a connection ({n:?}), {:.1} MiB registered",
                    conn.registered_bytes() as f64 / f64::from(1 << 20)
                );
                if let Err(e) = workers.assign(conn) {
                    eprintln!("rpcrdma serve: connection refused: {e}");
                }
            }
            Err(ConnError::Connect(ConnectError::Timeout)) => {}
            Err(e) => eprintln!("rpcrdma serve: a connection attempt failed: {e}"),
        }
        if args.stats_every > 0 && Instant::now() >= next_stats {
            next_stats = Instant::now() + Duration::from_secs(args.stats_every);
            eprintln!("{}", workers_json(&workers.stats()));
        }
    }
    let stats = workers.stats();
    if let Err(e) = workers.shutdown(Duration::from_secs(2)) {
        return fail("stopping workers", e);
    }
    println!("{}", workers_json(&stats));
    ExitCode::SUCCESS
}

/// A snapshot as JSON: every counter the engine keeps, the error counters grouped.
fn snapshot_json(s: &Snapshot) -> Value {
    let mut top = serde_json::Map::new();
    let mut errors = serde_json::Map::new();
    for (name, v) in s.fields() {
        let into = if ERROR_COUNTERS.contains(&name) {
            &mut errors
        } else {
            &mut top
        };
        into.insert(name.to_string(), json!(v));
    }
    top.insert("errors".to_string(), Value::Object(errors));
    Value::Object(top)
}

fn workers_json(stats: &[WorkerStats]) -> Value {
    json!({
        "workers": stats.iter().map(|w| json!({
            "core": w.core, "loops": w.loops, "busy_loops": w.busy_loops,
            "conns": w.conns, "conns_adopted": w.conns_adopted, "conns_dead": w.conns_dead,
            "counters": snapshot_json(&w.rpc),
        })).collect::<Vec<_>>(),
    })
}

/// Runs `rpcrdma call`.
pub fn call(args: &CallArgs) -> ExitCode {
    let addr = args
        .connect
        .clone()
        .unwrap_or_else(|| args.conn.default_addr().to_string());
    match args.conn.provider {
        Which::Soft => match Soft::open_device(None) {
            Ok(d) => call_on::<Soft>(&d, &addr, args),
            Err(e) => fail("soft fabric", e),
        },
        Which::Verbs => match open_verbs(args.conn.device.as_deref()) {
            Ok(d) => call_on::<Verbs>(&d, &addr, args),
            Err(e) => fail("verbs", e),
        },
    }
}

fn call_on<P: Provider>(device: &P::Device, addr: &str, args: &CallArgs) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
{
    let addr = match parse_addr::<P>(addr) {
        Ok(a) => a,
        Err(e) => return fail("call", e),
    };
    let mut client = match Client::<P>::connect(device, &addr, args.conn.config()) {
        Ok(c) => c,
        Err(e) => return fail(&format!("connect to {addr}"), e),
    };
    if args.generic.prog.is_some() {
        let timeout = Duration::from_millis(args.timeout_ms);
        let code = crate::call_generic::run(&mut client, &args.generic, args.count, timeout);
        println!("{}", json!({ "client": snapshot_json(&client.snapshot()) }));
        client.disconnect();
        return code;
    }
    let prepared = Prepared::new(args.workload.0);
    let call = prepared.call(Duration::from_millis(args.timeout_ms));
    let mut ok = true;
    for i in 0..args.count.max(1) {
        let t = Instant::now();
        let verdict = client.call(&call, |r| prepared.verify(&r).map_err(|e| e.to_string()));
        let ns = t.elapsed().as_nanos() as u64;
        let (status, error) = match verdict {
            Ok(Ok(())) => ("ok", None),
            Ok(Err(e)) => ("bad_reply", Some(e)),
            Err(e) => ("rpc_error", Some(e.to_string())),
        };
        ok &= status == "ok";
        println!(
            "{}",
            json!({
                "call": i, "provider": P::NAME, "proc": args.workload.0.name(),
                "arg_size": args.workload.0.arg_size(), "res_size": args.workload.0.res_size(),
                "status": status, "error": error, "latency_ns": ns,
            })
        );
    }
    println!("{}", json!({ "client": snapshot_json(&client.snapshot()) }));
    client.disconnect();
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs `rpcrdma bench rpc`.
pub fn bench(args: &BenchArgs) -> ExitCode {
    match args.conn.provider {
        Which::Soft => {
            bench_on::<Soft>(args, || Soft::open_device(None).map_err(|e| e.to_string()))
        }
        Which::Verbs => bench_on::<Verbs>(args, || open_verbs(args.conn.device.as_deref())),
    }
}

fn bench_on<P: Provider>(
    args: &BenchArgs,
    open: impl Fn() -> Result<P::Device, String> + Sync,
) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    let cfg = args.conn.config();
    for w in args.workloads() {
        if let Err(e) = w.fits(cfg.bulk_size) {
            return fail("bench rpc", e);
        }
    }
    // The reference, measured on the same two cores: a cache-line round trip. Measured
    // before the in-process server's worker starts busy-polling one of those cores, and
    // again after it stopped.
    let reference = |iters| fabric_bench::cacheline_pingpong(iters).p50_ns * 2;
    let before = reference(200_000);
    // The in-process server, if there is no --connect.
    let mut local: Option<Workers<ServerConn<P>>> = None;
    let mut client = match &args.connect {
        Some(a) => {
            let addr = match parse_addr::<P>(a) {
                Ok(a) => a,
                Err(e) => return fail("bench rpc", e),
            };
            let device = match open() {
                Ok(d) => d,
                Err(e) => return fail("bench rpc", e),
            };
            match Client::<P>::connect(&device, &addr, cfg) {
                Ok(c) => c,
                Err(e) => return fail(&format!("connect to {addr}"), e),
            }
        }
        None => match in_process::<P>(&open, cfg, args.core + 1, args.listen.as_deref()) {
            Ok((c, w)) => {
                local = Some(w);
                c
            }
            Err(e) => return fail("bench rpc: in-process server", e),
        },
    };
    // The client runs on its own pinned thread: pinning this one would also narrow the
    // cores that the reference measurement (and any later thread) may use.
    let client_core = core_affinity::get_core_ids().and_then(|ids| ids.get(args.core).copied());
    // Progress goes through atomics to a display thread whose allocations (drawing) are
    // not counted: the measured loop itself must not allocate.
    let shown = AtomicUsize::new(usize::MAX);
    let workloads = args.workloads();
    let elapsed_ms = AtomicU64::new(0);
    let done_rpcs = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    let (ok, reports) = thread::scope(|s| {
        s.spawn(|| {
            rpcrdma_bench::alloc::exempt_this_thread();
            let mut current: Option<(usize, ProgressBar)> = None;
            loop {
                let i = shown.load(Ordering::Relaxed);
                if current.as_ref().map(|c| c.0) != Some(i) {
                    if let Some((_, bar)) = current.take() {
                        bar.finish_and_clear();
                    }
                    if let Some(w) = workloads.get(i) {
                        current = Some((i, progress_bar(*w, args)));
                    }
                }
                if let Some((_, bar)) = &current {
                    bar.set_position(elapsed_ms.load(Ordering::Relaxed));
                    bar.set_message(format!("{} RPCs", done_rpcs.load(Ordering::Relaxed)));
                }
                if finished.load(Ordering::Relaxed) {
                    if let Some((_, bar)) = current.take() {
                        bar.finish_and_clear();
                    }
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
        });
        let client_thread = s.spawn(|| {
            if let Some(c) = client_core {
                core_affinity::set_for_current(c);
            }
            let mut ok = true;
            let mut reports = Vec::with_capacity(workloads.len());
            for (i, w) in workloads.iter().enumerate() {
                let prepared = Prepared::new(*w);
                let load = LoadConfig {
                    depth: args.depth,
                    duration: Duration::from_secs_f64(args.seconds.max(0.01)),
                    warmup: Duration::from_secs_f64(args.warmup.max(0.0)),
                    timeout: Duration::from_secs(5),
                };
                elapsed_ms.store(0, Ordering::Relaxed);
                done_rpcs.store(0, Ordering::Relaxed);
                shown.store(i, Ordering::Relaxed);
                let result = rpc::run(
                    &mut client,
                    &prepared,
                    load,
                    rpcrdma_bench::alloc::allocations,
                    |p| {
                        elapsed_ms.store(p.elapsed.as_millis() as u64, Ordering::Relaxed);
                        done_rpcs.store(p.rpcs, Ordering::Relaxed);
                    },
                );
                match result {
                    Ok(r) => reports.push((*w, r)),
                    Err(e) => {
                        ok = false;
                        eprintln!("bench rpc {}: {e}", w.name());
                    }
                }
            }
            client.disconnect();
            (ok, reports)
        });
        let out = client_thread.join().unwrap_or_else(|_| (false, Vec::new()));
        finished.store(true, Ordering::Relaxed);
        out
    });
    let workers = local.as_ref().map(|w| w.len());
    if let Some(w) = local {
        let _ = w.shutdown(Duration::from_secs(1));
    }
    let limit = before.min(reference(200_000));
    for (w, r) in &reports {
        report(P::NAME, *w, args, r, limit, workers);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A server on a worker pinned to `server_core` and a client connected to it.
fn in_process<P: Provider>(
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    cfg: ConnConfig,
    server_core: usize,
    listen: Option<&str>,
) -> Result<(Client<P>, Workers<ServerConn<P>>), String>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    let addr_s = match (listen, P::NAME) {
        (Some(a), _) => a.to_string(),
        (None, "soft") => format!("@rpcrdma-bench.{}", std::process::id()),
        (None, _) => "10.0.2.15:20050".to_string(),
    };
    let addr = parse_addr::<P>(&addr_s)?;
    let cores = core_affinity::get_core_ids().map_or(0, |c| c.len());
    let worker = WorkerConfig {
        core: (server_core < cores).then_some(server_core),
        max_conns: 4,
    };
    let mut l = rpcrdma_bench::local::start::<P>(open, &addr, cfg, &[worker], 1)?;
    let client = l.clients.pop().ok_or("no client")?;
    Ok((client, l.workers))
}

fn progress_bar(w: Workload, args: &BenchArgs) -> ProgressBar {
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
    bar.set_prefix(format!("{}:{}", w.name(), w.arg_size().max(w.res_size())));
    bar
}

fn report(
    provider: &str,
    w: Workload,
    args: &BenchArgs,
    r: &LoadReport,
    limit_rtt: u64,
    workers: Option<usize>,
) {
    let ratio = r.lat_ns.p50 as f64 / limit_rtt.max(1) as f64;
    if args.json {
        println!(
            "{}",
            json!({
                "provider": provider,
                "workers": workers,
                "depth": args.depth,
                "proc": w.name(),
                "arg_size": w.arg_size(),
                "res_size": w.res_size(),
                "rpcs": r.rpcs,
                "seconds": (r.seconds * 1000.0).round() / 1000.0,
                "rate_rps": r.rate_rps.round(),
                "lat_ns": {
                    "min": r.lat_ns.min, "p50": r.lat_ns.p50, "p90": r.lat_ns.p90,
                    "p99": r.lat_ns.p99, "p999": r.lat_ns.p999, "max": r.lat_ns.max,
                },
                "allocs_per_rpc": r.allocs_per_rpc,
                "limit_ns_p50": limit_rtt,
                "ratio_p50": (ratio * 100.0).round() / 100.0,
                "client": snapshot_json(&r.client),
            })
        );
    } else {
        println!(
            "{provider} {:>5} {:>7} B  depth {:>3}: {:>10.0} RPC/s  p50 {} ns ({ratio:.2}x the {limit_rtt} ns cache-line round trip)  p90 {} p99 {} p99.9 {} max {} ns  allocs/RPC {}",
            w.name(),
            w.arg_size().max(w.res_size()),
            args.depth,
            r.rate_rps,
            r.lat_ns.p50,
            r.lat_ns.p90,
            r.lat_ns.p99,
            r.lat_ns.p999,
            r.lat_ns.max,
            r.allocs_per_rpc.map_or("n/a".to_string(), |a| format!("{a:.3}")),
        );
    }
}
