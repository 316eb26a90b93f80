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
use rpcrdma_bench::fleet::{self, core_of, FleetReport};
use rpcrdma_bench::local::Accepting;
use rpcrdma_bench::once::{fresh_stamp, Verdict};
use rpcrdma_bench::rpc::{LoadConfig, Prepared, Workload};
use rpcrdma_engine::conn::{ConnConfig, ConnError, Registration, RetransmitPolicy, Version};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::{bench as fabric_bench, ConnectError, Provider};
use rpcrdma_engine::program;
use rpcrdma_engine::requester::Client;
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::stats::{Snapshot, ERROR_COUNTERS};
use rpcrdma_engine::worker::{WorkerConfig, WorkerStats, Workers};
use serde_json::{json, Value};

use crate::callbacks::Callbacks;
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
    /// Largest bulk payload of one RPC (chunk data and the headers around it); RPCs whose
    /// chunks exceed --slot-bulk-size share --large-bufs buffers of this size.
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_BULK_SIZE)]
    bulk_size: u32,
    /// Bytes of the bulk buffers every credit owns.
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_SLOT_BULK_SIZE)]
    slot_bulk_size: u32,
    /// Buffers of --bulk-size a connection's RPCs share (at least 3).
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_LARGE_BUFS)]
    large_bufs: u32,
    /// Client: after a lost connection, reconnect (at most this many attempts per loss) and
    /// retransmit the pending Calls with their XIDs and fresh registrations (0: off, pending
    /// RPCs fail with ConnectionLost). Needs per-RPC windows (not --persistent).
    #[arg(long, default_value_t = 0)]
    retransmit: u32,
    /// RPC-over-RDMA version: 1 (RFC 8166), 2 (draft-cel-nfsv4-rpcrdma-version-two-09) or
    /// auto. Client: 2 opens with RDMA2_CONNPROP and fails on a server without version 2;
    /// auto falls back to version 1 on it. Server: auto takes each connection in its
    /// client's version. Default: auto for `serve`, 1 for the clients.
    #[arg(long)]
    version: Option<Version>,
    /// Version 2 reverse-direction RPC (callbacks, inline). `serve`: keep N reverse ECHOs
    /// outstanding on each version 2 connection whose client takes them, every result
    /// checked; `call`, `bench rpc --connect`: serve up to N of the server's reverse Calls
    /// at once from the built-in program. 0: none.
    #[arg(long, default_value_t = 0)]
    reverse: u32,
}

impl ConnOpts {
    /// The settings, with `version` when `--version` was not given.
    fn config_with(&self, version: Version) -> ConnConfig {
        ConnConfig {
            version: self.version.unwrap_or(version),
            ..self.config()
        }
    }

    fn config(&self) -> ConnConfig {
        ConnConfig {
            send_size: self.inline,
            recv_size: self.inline,
            remote_invalidation: !self.no_remote_invalidation,
            credits: self.credits,
            initial_grant: self.credits,
            bulk_size: self.bulk_size,
            slot_bulk_size: self.slot_bulk_size,
            large_bufs: self.large_bufs,
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
            version: self.version.unwrap_or_default(),
            reverse_credits: self.reverse,
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
    /// Calls kept in flight on each connection.
    #[arg(long, default_value_t = 1)]
    depth: u32,
    /// Connections to the server, each with `--depth` calls in flight.
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Worker threads of the in-process server (pinned after the client threads' cores).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Client threads sharing the connections (each polls its share in turn).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Fault run: drop a connection every this many seconds (soft: the fabric's
    /// disconnect; verbs: rdma_disconnect), with Calls in flight; needs --retransmit. The
    /// report says how many RPCs completed, were retransmitted and reconnected, and checks
    /// that none was lost or completed twice (and, against a server that counts executions,
    /// that every XID ran).
    #[arg(long)]
    disconnect_every: Option<f64>,
    /// Measured seconds per workload.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Warm-up seconds before each measurement.
    #[arg(long, default_value_t = 0.3)]
    warmup: f64,
    /// Core of the first client thread (the others take the next ones, then the
    /// in-process server's workers).
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
    let config = args.conn.config_with(Version::Auto);
    let mut server = match Server::<P>::listen(device, &addr, dispatch, config) {
        Ok(s) => s,
        Err(e) => return fail(&format!("listen on {addr}"), e),
    };
    let configs: Vec<WorkerConfig> = (0..args.workers.max(1))
        .map(|i| WorkerConfig {
            core: args.first_core.map(|c| c + i),
            max_conns: 64,
        })
        .collect();
    let mut workers = match Workers::<Callbacks<P>>::start(&configs) {
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
    // Reverse results that were wrong or failed, over every connection (`--reverse`).
    let bad_reverse = Arc::new(AtomicU64::new(0));
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
                let conn = Callbacks::new(conn, args.conn.reverse, Arc::clone(&bad_reverse));
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
    let mut out = workers_json(&stats);
    let bad = bad_reverse.load(Ordering::Relaxed);
    if args.conn.reverse > 0 {
        out["reverse_bad"] = json!(bad);
    }
    println!("{out}");
    if bad > 0 {
        eprintln!("rpcrdma serve: {bad} reverse-direction results were wrong or failed");
        return ExitCode::FAILURE;
    }
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
    let mut client = match connect_one::<P>(device, &addr, args.conn.config()) {
        Ok(c) => c,
        Err(e) => return fail(&format!("connect to {addr}"), e),
    };
    if args.generic.prog.is_some() {
        let timeout = Duration::from_millis(args.timeout_ms);
        let code = crate::call_generic::run(&mut client, &args.generic, args.count, timeout);
        println!("{}", client_summary(&client));
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
    println!("{}", client_summary(&client));
    client.disconnect();
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The last line of `call`: the client's counters and the RPC-over-RDMA version its
/// connection speaks.
fn client_summary<P: Provider>(client: &Client<P>) -> serde_json::Value {
    json!({
        "client": snapshot_json(&client.snapshot()),
        "rpcrdma_version": client.negotiation().wire().number(),
    })
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

/// What one workload's run measured, for the report.
struct Measured {
    workload: Workload,
    /// The RPC-over-RDMA version the connections spoke.
    version: u32,
    run: FleetReport,
    per_worker_rps: Vec<f64>,
    once: Option<Verdict>,
}

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
    for w in args.workloads() {
        if let Err(e) = w.fits(cfg.bulk_size) {
            return fail("bench rpc", e);
        }
    }
    if let Err(e) = check_shape(args) {
        return fail("bench rpc", e);
    }
    if args.conn.reverse > 0 && args.connect.is_none() {
        return fail(
            "bench rpc",
            "--reverse serves a remote server's callbacks: use it with --connect to `rpcrdma serve --reverse N`",
        );
    }
    let faults = args.disconnect_every.map(Duration::from_secs_f64);
    let ncores = fleet::cores();
    let threads = args.client_threads.clamp(1, args.conns);
    let thread_cores: Vec<Option<usize>> = (0..threads)
        .map(|i| Some(core_of(args.core, i, 1, ncores)))
        .collect();
    if threads + args.workers > ncores && args.connect.is_none() {
        eprintln!(
            "bench rpc: {threads} client thread(s) and {} worker(s) busy-poll {ncores} core(s): they share cores, which measures the sharing",
            args.workers
        );
    }
    // The reference, measured on the same two cores: a cache-line round trip. Measured
    // before the in-process server's workers start busy-polling, and again after.
    let reference = |iters| fabric_bench::cacheline_pingpong(iters).p50_ns * 2;
    let before = reference(200_000);
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
    // Progress goes through atomics to a display thread whose allocations (drawing) are
    // not counted: the measured loops themselves must not allocate.
    let shown = AtomicUsize::new(usize::MAX);
    let workloads = args.workloads();
    let elapsed_ms = AtomicU64::new(0);
    let done_rpcs = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    let (ok, measured) = thread::scope(|s| {
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
        let mut ok = true;
        let mut measured = Vec::with_capacity(workloads.len());
        for (i, w) in workloads.iter().enumerate() {
            let stamp = fresh_stamp();
            let prepared = if faults.is_some() {
                Prepared::new(*w).stamped(stamp)
            } else {
                Prepared::new(*w)
            };
            let load = LoadConfig {
                sever_every: faults,
                ..LoadConfig::new(
                    args.depth,
                    Duration::from_secs_f64(args.seconds.max(0.01)),
                    Duration::from_secs_f64(args.warmup.max(0.0)),
                    Duration::from_secs(5),
                )
            };
            elapsed_ms.store(0, Ordering::Relaxed);
            done_rpcs.store(0, Ordering::Relaxed);
            shown.store(i, Ordering::Relaxed);
            let worker_rpcs = |l: &Option<LocalServer<P>>| l.as_ref().map(|l| l.rpcs());
            let before_w = worker_rpcs(&local);
            let recovery_before = recovery(&clients);
            let t0 = Instant::now();
            let result = fleet::run(
                &mut clients,
                &prepared,
                load,
                &thread_cores,
                rpcrdma_bench::alloc::allocations,
                |p| {
                    elapsed_ms.store(p.elapsed.as_millis() as u64, Ordering::Relaxed);
                    done_rpcs.store(p.rpcs, Ordering::Relaxed);
                },
            );
            // The workers' counts cover the warm-up and the drain too: over the whole run.
            let whole = t0.elapsed().as_secs_f64().max(1e-9);
            let per_worker_rps = match (before_w, worker_rpcs(&local)) {
                (Some(a), Some(b)) => a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| y.saturating_sub(*x) as f64 / whole)
                    .collect(),
                _ => Vec::new(),
            };
            match result {
                Ok(run) => {
                    let once = faults.map(|_| {
                        let server = match rpcrdma_bench::once::executions(
                            &mut clients[0],
                            stamp,
                            Duration::from_secs(5),
                        ) {
                            Ok(c) => Some(c),
                            Err(e) => {
                                eprintln!("bench rpc: no server-side count: {e}");
                                None
                            }
                        };
                        let (reconnects, retransmits) = recovery(&clients);
                        Verdict {
                            client: run.total.faults,
                            server,
                            reconnects: reconnects - recovery_before.0,
                            retransmits: retransmits - recovery_before.1,
                            unique_xids: args.conns == 1
                                && run.total.faults.submitted < rpcrdma_bench::once::XID_WRAP,
                        }
                    });
                    if let Some(v) = &once {
                        for p in v.problems() {
                            ok = false;
                            eprintln!("bench rpc {}: {p}", w.name());
                        }
                    }
                    measured.push(Measured {
                        workload: *w,
                        version: clients[0].negotiation().wire().number(),
                        run,
                        per_worker_rps,
                        once,
                    });
                }
                Err(e) => {
                    ok = false;
                    eprintln!("bench rpc {}: {e}", w.name());
                }
            }
        }
        for c in clients.iter_mut() {
            c.disconnect();
        }
        finished.store(true, Ordering::Relaxed);
        (ok, measured)
    });
    let workers = local.as_ref().map(|l| l.len());
    if let Some(l) = local.take() {
        l.shutdown();
    }
    let limit = before.min(reference(200_000));
    for m in &measured {
        report(P::NAME, args, m, limit, workers, threads);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
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

/// `n` clients connected to the server at `addr`.
fn connect_all<P: Provider>(
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    addr: &str,
    cfg: ConnConfig,
    n: usize,
) -> Result<Vec<Client<P>>, String>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
{
    let addr = parse_addr::<P>(addr)?;
    let device = open()?;
    (0..n)
        .map(|_| {
            connect_one::<P>(&device, &addr, cfg).map_err(|e| format!("connect to {addr}: {e}"))
        })
        .collect()
}

/// One client: serving the server's reverse Calls from the built-in program when
/// `--reverse` asks for it.
fn connect_one<P: Provider>(
    device: &P::Device,
    addr: &P::Addr,
    cfg: ConnConfig,
) -> Result<Client<P>, ConnError> {
    if cfg.reverse_credits > 0 {
        Client::<P>::connect_serving(device, addr, cfg, program::dispatch())
    } else {
        Client::<P>::connect(device, addr, cfg)
    }
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
    let l = rpcrdma_bench::local::start::<P>(open, &addr, dispatch, cfg, &workers, args.conns)?;
    let server = if faults {
        LocalServer::Accepting(Accepting::start(l.server, l.workers))
    } else {
        LocalServer::Workers(l.workers)
    };
    Ok((l.clients, server))
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
    args: &BenchArgs,
    m: &Measured,
    limit_rtt: u64,
    workers: Option<usize>,
    threads: usize,
) {
    let (w, r) = (m.workload, &m.run.total);
    let ratio = r.lat_ns.p50 as f64 / limit_rtt.max(1) as f64;
    let secs = r.seconds.max(1e-9);
    let per_conn: Vec<f64> = r
        .per_conn
        .iter()
        .map(|&n| (n as f64 / secs).round())
        .collect();
    let per_worker: Vec<f64> = m.per_worker_rps.iter().map(|x| x.round()).collect();
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
    let faults = m.once.as_ref().map(|v| {
        json!({
            "severed": v.client.severed,
            "reconnects": v.reconnects,
            "retransmits": v.retransmits,
            "submitted": v.client.submitted,
            "completed": v.client.completed,
            "completed_twice": v.client.completed_twice,
            "lost": v.client.lost,
            "server": v.server.map(|c| json!({
                "xids": c.xids, "executions": c.executions,
                "repeated": c.repeated, "lost_track": c.lost_track,
            })),
            "exact": v.problems().is_empty(),
        })
    });
    if args.json {
        println!(
            "{}",
            json!({
                "provider": provider,
                "rpcrdma_version": m.version,
                "workers": workers,
                "conns": args.conns,
                "client_threads": threads,
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
                "per_conn_rps": per_conn,
                "per_worker_rps": per_worker,
                "threads": per_thread,
                "faults": faults,
                "client": snapshot_json(&r.client),
            })
        );
        return;
    }
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
    if args.conns > 1 || per_worker.len() > 1 || threads > 1 {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "      {} connection(s) on {threads} client thread(s): RPC/s per connection [{}]; per worker [{}]",
            args.conns,
            list(&per_conn),
            list(&per_worker)
        );
    }
    if let Some(v) = &m.once {
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
        println!(
            "      faults: {} connection(s) dropped, {} reconnects, {} retransmissions; {} RPCs submitted, {} completed, {} lost, {} completed twice{server}: {}",
            v.client.severed,
            v.reconnects,
            v.retransmits,
            v.client.submitted,
            v.client.completed,
            v.client.lost,
            v.client.completed_twice,
            if problems.is_empty() {
                "exactly once".to_string()
            } else {
                problems.join("; ")
            }
        );
    }
}
