//! `rpcrdma serve`, `rpcrdma call` and `rpcrdma bench rpc`: the engine between two
//! processes (or in one), on the soft fabric or on verbs, with the built-in test program
//! ([`rpcrdma_engine::program`]).

mod bench;
mod call;
mod serve;

pub use bench::bench;
pub use call::call;
pub use serve::serve;

use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rpcrdma_bench::exactly_once::{self, fresh_stamp, Verdict};
use rpcrdma_bench::fabric_probes;
use rpcrdma_bench::fleet::{self, core_of, FleetReport};
use rpcrdma_bench::local::Accepting;
use rpcrdma_bench::ring::{null_ring, Bracket, RingLimit};
use rpcrdma_bench::rpc::{LoadConfig, Prepared, Workload};
use rpcrdma_bench::summary::Percentiles;
use rpcrdma_engine::conn::{ConnConfig, ConnError, Registration, RetransmitPolicy, Version};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::{ConnectError, Device, Provider};
use rpcrdma_engine::program;
use rpcrdma_engine::requester::Client;
use rpcrdma_engine::responder::{Server, ServerConn, ShareStats};
use rpcrdma_engine::stats::Snapshot;
use rpcrdma_engine::worker::{WorkerConfig, WorkerStats, Workers};
use serde_json::{json, Value};

use crate::callbacks::Callbacks;
use crate::provider::{on_provider, ProviderChoice};

/// Connection settings shared by the three commands.
#[derive(ClapArgs, Debug, Clone)]
pub struct ConnOpts {
    /// The fabric.
    #[arg(long, value_enum, default_value_t = ProviderChoice::Soft)]
    provider: ProviderChoice,
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
    /// The reliable connection's acknowledgement timeout exponent (verbs): an
    /// unacknowledged packet is sent again after 4.096 us x 2^N, and 7 retries fail the
    /// connection. 0 (the default) keeps rdma_cm's (19 for RoCE on Linux 6.1: 2.1 s a
    /// retry); perftest uses 14.
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_ACK_TIMEOUT, value_parser = clap::value_parser!(u8).range(0..=i64::from(rpcrdma_engine::conn::MAX_ACK_TIMEOUT)))]
    ack_timeout: u8,
    /// Client: after a lost connection, reconnect (at most this many attempts per loss) and
    /// retransmit the pending Calls with their XIDs and fresh registrations (0: off, pending
    /// RPCs fail with ConnectionLost). Needs per-RPC windows (not --persistent).
    #[arg(long, default_value_t = 0)]
    retransmit: u32,
    /// Client with --retransmit: seconds an RPC waits for its reply on one connection
    /// before the connection is taken as silent, replaced, and its Calls sent again.
    #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
    reply_timeout: f64,
    /// RPC-over-RDMA version: 1 (RFC 8166), 2 (draft-cel-nfsv4-rpcrdma-version-two-09) or
    /// auto. Client: 2 opens with RDMA2_CONNPROP and fails on a server without version 2;
    /// auto falls back to version 1 on it. Server: auto takes each connection in its
    /// client's version. Default: auto for `serve`, 1 for the clients.
    #[arg(long)]
    version: Option<Version>,
    /// Reverse-direction RPC (callbacks, inline; RFC 8167 on version 1, the draft's §3.2
    /// on version 2). `serve`: keep N reverse ECHOs outstanding on each connection whose
    /// client takes them, every result checked (a version 1 client that drops the first
    /// is left alone after `reverse_timeout`, 10 s); `call`, `bench rpc --connect`: serve
    /// up to N of the server's reverse Calls at once from the built-in program. 0: none.
    #[arg(long, default_value_t = 0)]
    reverse: u32,
    /// Server: take every connection's receives from one shared receive queue (each
    /// connection then reserves its grant there, 8 to start, raised as its Calls fill it).
    /// Default: where the device has shared receive queues.
    #[arg(long, conflicts_with = "no_srq")]
    srq: bool,
    /// Server: a receive queue of its own for each connection (credits receives each).
    #[arg(long)]
    no_srq: bool,
    /// Server: MiB of bulk buffers (pull buffers for Read chunks, result buffers for Write
    /// and Reply chunks) the connections of each worker share, registered as their Calls
    /// need them; at least three buffers of --bulk-size.
    #[arg(long, default_value_t = DEFAULT_BULK_POOL_MIB, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    bulk_pool: u64,
}

/// The default `--bulk-pool`: 64 MiB per worker.
const DEFAULT_BULK_POOL_MIB: u64 = 64;

impl ConnOpts {
    /// A server's settings on `device` with `workers` workers: the shared receive queue
    /// where the device has one (unless `--no-srq`), `--bulk-pool` MiB of shared bulk
    /// buffers per worker.
    pub(crate) fn server_config<P: Provider>(
        &self,
        device: &P::Device,
        version: Version,
        workers: usize,
    ) -> Result<ConnConfig, String> {
        let want_srq = match (self.srq, self.no_srq) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        self.config_with(version)
            .for_server(
                workers,
                self.bulk_pool << 20,
                device.attr().max_srq_wr,
                want_srq,
            )
            .map_err(|e| format!("--srq: device {}: {e}", device.name()))
    }

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
            ack_timeout: self.ack_timeout,
            registration: if self.persistent {
                Registration::Persistent
            } else {
                Registration::Windows
            },
            retransmit: (self.retransmit > 0).then(|| RetransmitPolicy {
                max_attempts: self.retransmit,
                reply_timeout: Duration::from_secs_f64(self.reply_timeout),
                ..RetransmitPolicy::default()
            }),
            version: self.version.unwrap_or_default(),
            reverse_credits: self.reverse,
            ..ConnConfig::default()
        }
    }

    /// Where `serve` listens and `call` connects without `--listen` / `--connect`.
    fn default_addr(&self) -> String {
        self.provider.local_addr("rpcrdma", 20049)
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

/// One entry of `bench rpc --workload`: a workload, or several joined with `+`
/// (`null+read:64k`) that every connection runs together, its calls taking them in turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixArg(pub Vec<Workload>);

impl FromStr for MixArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let forms = s
            .split('+')
            .map(|w| WorkloadArg::from_str(w).map(|w| w.0))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MixArg(forms))
    }
}

/// What a run's report calls its mix: the workloads' names, then their sizes (the larger
/// of argument and result), each joined with `+`.
fn mix_label(mix: &[Workload]) -> (String, String) {
    let names: Vec<&str> = mix.iter().map(|w| w.name()).collect();
    let sizes: Vec<String> = mix
        .iter()
        .map(|w| w.arg_size().max(w.res_size()).to_string())
        .collect();
    (names.join("+"), sizes.join("+"))
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
    #[arg(long, conflicts_with = "cores")]
    first_core: Option<usize>,
    /// The cores to pin workers to, comma-separated: worker i gets the (i mod N)th, so
    /// `--workers 2 --cores 0` puts both on core 0 and leaves the other cores to the
    /// clients (a core may be named twice).
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    cores: Vec<usize>,
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
    /// After this many microseconds without work, a worker waits for its connections' next
    /// completion (off its core, woken through the completion queue's notification)
    /// instead of spinning; 0: spin (the lowest latency).
    #[arg(long, default_value_t = 0)]
    wait_after_us: u64,
    /// Refuse a connection, at the connection manager (a reject the client sees as the
    /// server refusing it), while this many are live (accepted and not yet dropped as
    /// dead); each refusal is logged and counted (`refused_max_conns`). Default: what the
    /// workers can hold, 64 per worker (more are made room for when this asks for more).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_conns: Option<u32>,
}

/// Connections each `serve` worker has room for unless `--max-conns` asks for more.
const SERVE_CONNS_PER_WORKER: usize = 64;

impl ServeArgs {
    /// The core worker `i` is pinned to: the (i mod N)th of `--cores`, else `--first-core`
    /// plus `i`, else none.
    fn worker_core(&self, i: usize) -> Option<usize> {
        match self.cores.len() {
            0 => self.first_core.map(|c| c + i),
            n => Some(self.cores[i % n]),
        }
    }

    /// Room for connections in each of `workers` workers: 64, or enough for `--max-conns`
    /// between them.
    fn conns_per_worker(&self, workers: usize) -> usize {
        let wanted = self.max_conns.map_or(0, |n| n as usize);
        SERVE_CONNS_PER_WORKER.max(wanted.div_ceil(workers.max(1)))
    }
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
    /// Workloads, comma-separated: null, echo:N, read:N, write:N (one report each). Several
    /// joined with `+` run together as one mix (`null+read:64k`): each connection's calls
    /// take them in turn, so `--depth 2` keeps one of each in flight.
    #[arg(long, value_delimiter = ',', default_value = "null")]
    workload: Vec<MixArg>,
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
    /// The runs to make, each a mix of one workload or more: `--prog`'s procedure, or
    /// `--workload`'s.
    fn workloads(&self) -> Vec<Vec<Workload>> {
        match self.prog {
            Some(prog) => vec![vec![Workload::Proc {
                prog,
                vers: self.vers,
                proc_num: self.proc_num,
            }]],
            None => self.workload.iter().map(|w| w.0.clone()).collect(),
        }
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("{what}: {e}");
    ExitCode::FAILURE
}

fn parse_addr<P: Provider>(s: &str) -> Result<P::Addr, String>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
{
    s.parse::<P::Addr>()
        .map_err(|e| format!("bad address {s:?}: {e}"))
}

/// A positive, finite number of seconds that a `Duration` holds (the parser refuses the
/// rest with a message, never a panic later).
fn positive_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v > 0.0 && Duration::try_from_secs_f64(v).is_ok() {
        Ok(v)
    } else {
        Err("a positive, finite number of seconds".into())
    }
}

/// A snapshot as JSON: every counter the engine keeps, the error counters grouped
/// (`Snapshot::write_json`).
fn snapshot_json(s: &Snapshot) -> Value {
    serde_json::from_str(&s.to_json()).expect("the engine writes a snapshot as valid JSON")
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
        .map(|_| connect_one::<P>(&device, &addr, cfg).map_err(|e| connect_failure(&addr, &e)))
        .collect()
}

/// Why connecting to the server at `addr` failed, as a user reads it: a reject at the
/// connection manager is the server refusing the connection (`serve --max-conns`, nfs3d's
/// `--max-conns` or `--allow`), not a fault of the fabric.
fn connect_failure(addr: &impl std::fmt::Display, e: &ConnError) -> String {
    match e {
        ConnError::Connect(ConnectError::Rejected(_)) => format!(
            "connect to {addr}: the server refused the connection (rejected at the connection \
             manager: it may hold as many connections as its --max-conns allows, or not admit \
             this client)"
        ),
        e => format!("connect to {addr}: {e}"),
    }
}

/// How a refusal log line names the peer: its address, or what the fabric gives instead
/// (soft addresses are names, not told to the listener).
fn peer_name(peer: Option<std::net::SocketAddr>, provider: &str) -> String {
    match peer {
        Some(p) => p.to_string(),
        None if provider == Soft::NAME => "a soft peer".to_string(),
        None => "a peer of unknown address".to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::ServeArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn cores(args: &[&str], workers: usize) -> Vec<Option<usize>> {
        let parsed = Serve::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .expect("arguments");
        (0..workers).map(|i| parsed.serve.worker_core(i)).collect()
    }

    #[test]
    fn workers_are_pinned_to_the_cores_named_in_turn() {
        assert_eq!(
            cores(&["--workers", "3", "--cores", "0,2"], 3),
            [Some(0), Some(2), Some(0)]
        );
        assert_eq!(
            cores(&["--workers", "2", "--cores", "0"], 2),
            [Some(0), Some(0)]
        );
        assert_eq!(cores(&["--first-core", "1"], 2), [Some(1), Some(2)]);
        assert_eq!(cores(&[], 2), [None, None]);
        assert!(Serve::try_parse_from(["serve", "--first-core", "1", "--cores", "0"]).is_err());
    }
}
