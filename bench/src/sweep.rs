//! The sweep runner (`rpcrdma sweep`): every point the [`axes`](crate::axes) span, run as
//! a closed loop ([`rpc::run`](crate::rpc::run)) on as many connections as the point asks,
//! against a server started in this process for the point (its workers pinned) or one
//! running elsewhere, repeated, and measured against same-run limits.
//!
//! Per point it records ([`Point`]): latency percentiles, rate and bandwidth, the CPU time
//! the client threads spent per RPC (and the in-process server's), the message forms the
//! client's counters saw, and the ratios of the median round trip to the cache-line round
//! trip between the same cores and to a cross-core copy of the payload.
//!
//! With several connections they are shared out among the client threads
//! ([`Settings::client_threads`]; by default one thread per connection) by the
//! [`fleet`]; every round trip of every connection goes into one histogram,
//! whose percentiles are the point's; its rate is the connections' sum, and each
//! connection's and each worker's rate is kept.

use std::str::FromStr;
use std::time::Duration;

use crate::fabric_probes::cacheline_pingpong;
use rpcrdma_engine::conn::{ConnConfig, Registration};
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::program;
use rpcrdma_engine::proto::plan::{CallForm, Forced};
use rpcrdma_engine::requester::Client;
use rpcrdma_engine::responder::ServerConn;
use rpcrdma_engine::worker::{WorkerConfig, Workers};

use crate::cpu;
use crate::fleet::{self, core_of, cores, FleetReport};
use crate::limits::{copy_to_reader_ns, cross_core_copy_ns};
use crate::local;
pub use crate::point::Failure;
use crate::point::{CpuPerRpc, Forms, Limits, MemoryPerConn, Point, PointConfig, Ratios};
use crate::ring::null_ring;
use crate::rpc::{LoadConfig, Prepared, Workload};
use crate::summary::Percentiles;

/// How each point runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Measured seconds per point and repetition.
    pub seconds: f64,
    /// Warm-up seconds before measuring.
    pub warmup: f64,
    /// Repetitions of each point.
    pub reps: u32,
    /// Bytes of each RPC's bulk buffers; `None` sizes them to the point's payload.
    pub bulk_size: Option<u32>,
    /// Bytes of the bulk buffers each credit owns (`ConnConfig::slot_bulk_size`).
    pub slot_bulk_size: u32,
    /// Large buffers each connection shares (`ConnConfig::large_bufs`).
    pub large_bufs: u32,
    /// The transport's acknowledgement timeout exponent (`ConnConfig::ack_timeout`).
    pub ack_timeout: u8,
    /// The core of the first client thread; server workers take the next ones.
    pub first_core: usize,
    /// How long one RPC may take before the point fails.
    pub timeout: Duration,
    /// Client threads sharing a point's connections; `None`: one per connection.
    pub client_threads: Option<usize>,
}

/// Where the server is.
#[derive(Clone, Debug)]
pub enum Target {
    /// Started in this process for each point, listening on this address (`@name` on
    /// soft: a suffix keeps each point's apart; `IP:PORT` on verbs: the port grows by one
    /// per point so that no listener waits for the last one's to be released).
    InProcess(String),
    /// An `rpcrdma serve` (or any server of the built-in program) at this address; the
    /// point's server-side axes (workers) are whatever it runs with.
    Connect(String),
}

/// Why a sweep stopped.
#[derive(Debug)]
pub enum SweepError {
    /// A point's settings cannot work (named option and a value that does).
    Misfit(String),
    /// The server could not start or be reached.
    Setup(String),
}

impl core::fmt::Display for SweepError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SweepError::Misfit(s) | SweepError::Setup(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for SweepError {}

/// The workload a point runs.
pub fn workload(c: &PointConfig) -> Result<Workload, SweepError> {
    Ok(match c.op.as_str() {
        "null" => Workload::Null,
        "echo" => Workload::Echo(c.size),
        "read" => Workload::Read(c.size),
        "write" => Workload::Write(c.size),
        other if other.starts_with("prog:") => match crate::axes::parse_prog(other) {
            Some((prog, vers, proc_num)) => Workload::Proc {
                prog,
                vers,
                proc_num,
            },
            None => {
                return Err(SweepError::Misfit(format!(
                    "--op: {other:?} is not prog:PROGRAM:VERSION:PROCEDURE"
                )))
            }
        },
        other => {
            return Err(SweepError::Misfit(format!(
                "--op: unknown operation {other:?}"
            )))
        }
    })
}

/// The forms a point forces, and whether a READ asks for its result inline.
pub fn forced(c: &PointConfig) -> (Forced, bool) {
    let min_form = match c.form.as_str() {
        "short" => Some(CallForm::Short),
        "chunked" => Some(CallForm::Chunked),
        "long" => Some(CallForm::Long),
        _ => None,
    };
    let forced = Forced {
        min_form,
        reply_chunk: c.form == "long",
    };
    (forced, c.form == "short" && c.op == "read")
}

/// The connection settings of a point, or the option that must change for it to run.
pub fn conn_config(c: &PointConfig, s: &Settings) -> Result<ConnConfig, SweepError> {
    let w = workload(c)?;
    let bulk_size = match s.bulk_size {
        Some(b) => {
            w.fits(b).map_err(SweepError::Misfit)?;
            b
        }
        None => w.bulk_needed().max(ConnConfig::default().bulk_size),
    };
    Ok(ConnConfig {
        send_size: c.inline,
        recv_size: c.inline,
        remote_invalidation: c.remote_invalidation,
        credits: c.credits,
        initial_grant: c.credits,
        bulk_size,
        slot_bulk_size: s.slot_bulk_size,
        large_bufs: s.large_bufs,
        ack_timeout: s.ack_timeout,
        inline_sends: c.inline_sends,
        registration: if c.registration == "persistent" {
            Registration::Persistent
        } else {
            Registration::Windows
        },
        version: match c.version {
            2 => rpcrdma_engine::conn::Version::V2,
            0 => rpcrdma_engine::conn::Version::Auto,
            _ => rpcrdma_engine::conn::Version::V1,
        },
        ..ConnConfig::default()
    })
}

/// The address of the `n`th point's in-process server.
fn point_addr(base: &str, n: usize) -> String {
    if base.starts_with('@') || !base.contains(':') {
        return format!("{base}.{n}");
    }
    match base.rsplit_once(':') {
        Some((ip, port)) => match port.parse::<u16>() {
            Ok(p) => format!("{ip}:{}", p.wrapping_add(n as u16)),
            Err(_) => base.to_string(),
        },
        None => base.to_string(),
    }
}

/// One step of a sweep, as [`run`] hands it over.
#[derive(Clone, Copy, Debug)]
pub enum Step<'a> {
    /// A repetition measured.
    Measured(&'a Point),
    /// A repetition whose RPCs failed.
    Failed(&'a Failure),
}

/// What a sweep measured, and the repetitions that failed.
#[derive(Debug, Default)]
pub struct Swept {
    /// Every repetition measured, in order.
    pub points: Vec<Point>,
    /// Every repetition whose RPCs failed, in order.
    pub failed: Vec<Failure>,
}

/// Runs every point of `points` `settings.reps` times; calls `each` with every step as it
/// ends (for progress and streaming output) and returns them all.
///
/// A repetition whose RPCs fail (a stall, a bad reply, a phase that completed nothing) is
/// recorded as a [`Failure`] and the sweep goes on: one point of a long tuning run does
/// not cost the rest. Settings that cannot work stop it before anything runs
/// ([`SweepError::Misfit`]), and a server that cannot be started or reached stops it
/// where it happens ([`SweepError::Setup`]).
pub fn run<P: Provider>(
    points: &[PointConfig],
    settings: &Settings,
    target: &Target,
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    mut each: impl FnMut(usize, Step<'_>),
) -> Result<Swept, SweepError>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: core::fmt::Display,
    ServerConn<P>: Send,
{
    // Every setting is checked before anything runs.
    for c in points {
        conn_config(c, settings)?;
        workload(c)?;
    }
    // The same-run limits, measured again before every repetition of every point (the
    // server of the last one stopped, this one's not yet started): these hosts change speed
    // by a factor of several within a minute, and a ratio is only worth something against a
    // limit taken in the same phase.
    let mut out = Swept {
        points: Vec::with_capacity(points.len() * settings.reps as usize),
        failed: Vec::new(),
    };
    for (n, c) in points.iter().enumerate() {
        for rep in 0..settings.reps {
            let cacheline = cacheline_pingpong(100_000).p50_ns * 2;
            let pair = Some((0, 1 % cores()));
            let same_run = SameRun {
                cacheline,
                from_other: cross_core_copy_ns(c.size as usize, 100, pair),
                to_reader: copy_to_reader_ns(c.size as usize, 100, pair),
                ring: ring_for(c, settings, target),
            };
            let step = out.points.len() + out.failed.len();
            match run_point::<P>(c, rep, n, settings, target, open, same_run)? {
                Ok(p) => {
                    each(step, Step::Measured(&p));
                    out.points.push(p);
                }
                Err(error) => {
                    let f = Failure {
                        config: c.clone(),
                        rep,
                        error,
                    };
                    each(step, Step::Failed(&f));
                    out.failed.push(f);
                }
            }
        }
    }
    Ok(out)
}

/// The same-run limits measured before a repetition: the cache-line round trip
/// ([`cacheline_pingpong`]), the copies of the point's payload ([`crate::limits`]) and the
/// zero-work ring ([`crate::ring`]).
#[derive(Clone, Copy, Debug)]
struct SameRun {
    /// The cache-line round trip between the client's two cores, in nanoseconds.
    cacheline: u64,
    /// Bytes another core wrote, copied into this core's buffer.
    from_other: Option<u64>,
    /// This core's bytes copied into a buffer another core read.
    to_reader: Option<u64>,
    /// The zero-work message ring's rate at the point's depth (null points it models).
    ring: Option<f64>,
}

/// The zero-work message ring ([`crate::ring`]) on the client's and the first worker's
/// cores at the point's depth, for the shape it models: a null point with one connection
/// and one worker in this process. `None` for other points, or if the ring could not run.
fn ring_for(c: &PointConfig, settings: &Settings, target: &Target) -> Option<f64> {
    let modelled = c.op == "null" && c.conns == 1 && c.workers == 1;
    if !modelled || !matches!(target, Target::InProcess(_)) {
        return None;
    }
    let n = cores();
    let pair = (settings.first_core % n, (settings.first_core + 1) % n);
    null_ring(c.depth as usize, pair).ok().map(|r| r.rate_rps)
}

/// One repetition of one point: `Err` stops the sweep, `Ok(Err)` is this repetition's
/// failed load.
fn run_point<P: Provider>(
    c: &PointConfig,
    rep: u32,
    n: usize,
    settings: &Settings,
    target: &Target,
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    same_run: SameRun,
) -> Result<Result<Point, String>, SweepError>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: core::fmt::Display,
    ServerConn<P>: Send,
{
    let cfg = conn_config(c, settings)?;
    let (forced, inline_result) = forced(c);
    let w = workload(c)?;
    let conns = c.conns as usize;
    let Ends {
        mut clients,
        workers,
        server,
    } = connect_point::<P>(c, rep, n, settings, target, open, cfg)?;
    let load = LoadConfig::new(
        c.depth,
        Duration::from_secs_f64(settings.seconds.max(0.01)),
        Duration::from_secs_f64(settings.warmup.max(0.0)),
        settings.timeout,
    );
    let prepared = Prepared::new(w).forced(forced, inline_result);
    let server_rpcs_before = workers.as_ref().map(|w| total_rpcs(w));
    let cpu_before = cpu::process_cpu();
    let run = fleet::run(
        &mut clients,
        core::slice::from_ref(&prepared),
        load,
        &thread_cores(c, settings),
        || None,
        |_| {},
    );
    for client in clients.iter_mut() {
        client.disconnect();
    }
    let cpu_after = cpu::process_cpu();
    let per_worker: Vec<u64> = match (&workers, &server_rpcs_before) {
        (Some(w), Some(before)) => w
            .stats()
            .iter()
            .zip(before)
            .map(|(s, b)| s.rpc.rpcs.saturating_sub(*b))
            .collect(),
        _ => Vec::new(),
    };
    // Everything the server registered for its connections after the run, per connection:
    // each one's own, and its part of the share (rings, bulk buffers, a shared receive
    // queue), which stays registered for the next connections.
    let server_memory = server.as_ref().map(|(s, own)| {
        let st = s.share_stats();
        own + (st.registered_bytes + st.srq_bytes) / conns.max(1) as u64
    });
    if let Some(w) = workers {
        let _ = w.shutdown(Duration::from_secs(1));
    }
    let memory = MemoryPerConn {
        client: clients.first().map_or(0, |c| c.registered_bytes()),
        server: server_memory,
    };
    let spoke = clients
        .first()
        .map_or(1, |c| c.negotiation().wire().number());
    let run = match run {
        Ok(run) => run,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut p = combine(
        c,
        rep,
        &run,
        &per_worker,
        cpu_before.zip(cpu_after),
        same_run,
    );
    p.memory_per_conn = memory;
    p.spoke = spoke;
    Ok(Ok(p))
}

/// A point's connected clients and, for a server in this process, the server.
struct Ends<P: Provider>
where
    ServerConn<P>: Send,
{
    /// The point's clients, connected.
    clients: Vec<Client<P>>,
    /// The in-process server's workers (`None` for a remote server).
    workers: Option<Workers<ServerConn<P>>>,
    /// The in-process server, and the bytes each of its connections registered on its own.
    server: Option<(rpcrdma_engine::responder::Server<P>, u64)>,
}

/// Starts the server of repetition `rep` of the `n`th point in this process (its workers
/// pinned after the client's core), or reaches the remote one, and connects the point's
/// clients to it with `cfg`.
fn connect_point<P: Provider>(
    c: &PointConfig,
    rep: u32,
    n: usize,
    settings: &Settings,
    target: &Target,
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    cfg: ConnConfig,
) -> Result<Ends<P>, SweepError>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: core::fmt::Display,
    ServerConn<P>: Send,
{
    let setup = |e: String| SweepError::Setup(e);
    let conns = c.conns as usize;
    let addr = match target {
        Target::InProcess(base) => point_addr(base, n * 64 + rep as usize),
        Target::Connect(a) => a.clone(),
    };
    let paddr = addr
        .parse::<P::Addr>()
        .map_err(|e| SweepError::Setup(format!("bad address {addr}: {e}")))?;
    match target {
        Target::InProcess(_) => {
            let ncores = cores();
            let configs: Vec<WorkerConfig> = (0..c.workers as usize)
                .map(|k| WorkerConfig {
                    core: Some((settings.first_core + 1 + k) % ncores),
                    max_conns: conns.max(1),
                })
                .collect();
            let l = local::start::<P>(open, &paddr, program::dispatch(), cfg, &configs, conns)
                .map_err(setup)?;
            Ok(Ends {
                clients: l.clients,
                workers: Some(l.workers),
                server: Some((l.server, l.server_memory)),
            })
        }
        Target::Connect(_) => {
            let device = open().map_err(setup)?;
            let mut clients = Vec::with_capacity(conns);
            for _ in 0..conns {
                clients.push(
                    Client::<P>::connect(&device, &paddr, cfg)
                        .map_err(|e| setup(format!("connect to {addr}: {e}")))?,
                );
            }
            Ok(Ends {
                clients,
                workers: None,
                server: None,
            })
        }
    }
}

/// The cores of a point's client threads: thread i on the first core, then every
/// (workers + 1)th (in process, the server's workers take the cores after the first
/// client's).
fn thread_cores(c: &PointConfig, settings: &Settings) -> Vec<Option<usize>> {
    let (conns, ncores) = (c.conns as usize, cores());
    let threads = settings
        .client_threads
        .unwrap_or(conns)
        .clamp(1, conns.max(1));
    (0..threads)
        .map(|i| {
            Some(core_of(
                settings.first_core,
                i,
                c.workers as usize + 1,
                ncores,
            ))
        })
        .collect()
}

fn total_rpcs<P: Provider>(w: &Workers<ServerConn<P>>) -> Vec<u64>
where
    ServerConn<P>: Send,
{
    w.stats().iter().map(|s| s.rpc.rpcs).collect()
}

/// One point from its client threads' runs.
fn combine(
    c: &PointConfig,
    rep: u32,
    run: &FleetReport,
    per_worker_rpcs: &[u64],
    process_cpu: Option<(Duration, Duration)>,
    same_run: SameRun,
) -> Point {
    let cacheline = same_run.cacheline;
    let r = &run.total;
    let (rpcs, seconds, rate) = (r.rpcs, r.seconds, r.rate_rps);
    let lat = r.lat_ns;
    let server_work = (!r.server_work.is_empty()).then(|| Percentiles::of(&r.server_work));
    let client_cpu: Duration = run.threads.iter().filter_map(|t| t.cpu).sum();
    let per_rpc = |d: Duration| d.as_nanos() as f64 / rpcs.max(1) as f64;
    let server = if per_worker_rpcs.is_empty() {
        None
    } else {
        process_cpu.map(|(a, b)| per_rpc(b.saturating_sub(a).saturating_sub(client_cpu)))
    };
    let s = &r.client;
    let forms = Forms {
        short_calls: s.short_calls,
        chunked_calls: s.chunked_calls,
        long_calls: s.long_calls,
        short_replies: s.short_replies,
        long_replies: s.long_replies,
        write_chunks: s.write_chunks,
        remote_invalidations: s.remote_invalidations,
    };
    let payload = u64::from(c.size);
    let mut p = Point {
        config: c.clone(),
        rep,
        rpcs,
        seconds,
        rate_rps: rate,
        bandwidth_bps: rate * payload as f64,
        lat_ns: lat,
        server_work_ns: server_work,
        cpu_ns_per_rpc: CpuPerRpc {
            client: per_rpc(client_cpu),
            server,
        },
        forms,
        limits: Limits {
            cacheline_rtt_ns: cacheline,
            copy_ns: same_run.from_other,
            copy_to_reader_ns: same_run.to_reader,
            ring_rps: same_run.ring,
        },
        ratios: Ratios {
            p50_to_cacheline: lat.p50 as f64 / cacheline.max(1) as f64,
            p50_to_copy: same_run
                .from_other
                .map(|k| lat.p50 as f64 / k.max(1) as f64),
            p50_to_copy_to_reader: same_run.to_reader.map(|k| lat.p50 as f64 / k.max(1) as f64),
            rate_to_ring: same_run.ring.map(|g| rate / g.max(1e-9)),
        },
        spoke: c.version.max(1),
        per_conn_rps: r.per_conn_rps(),
        conn_rate_min: None,
        conn_rate_median: None,
        conn_rate_max: None,
        conn_rate_min_to_median: None,
        per_worker_rps: per_worker_rpcs
            .iter()
            .map(|&n| n as f64 / seconds.max(1e-9))
            .collect(),
        memory_per_conn: MemoryPerConn::default(),
    };
    // How evenly the connections were served (issue 33's fairness).
    p.set_conn_rates(r.conn_rates());
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::axes::Axes;
    use rpcrdma_engine::fabric::soft::Soft;

    fn settings() -> Settings {
        Settings {
            // Long enough for a debug build on a loaded machine to complete RPCs in each point.
            seconds: 0.2,
            warmup: 0.01,
            reps: 2,
            bulk_size: None,
            slot_bulk_size: rpcrdma_engine::conn::DEFAULT_SLOT_BULK_SIZE,
            large_bufs: rpcrdma_engine::conn::DEFAULT_LARGE_BUFS,
            ack_timeout: rpcrdma_engine::conn::DEFAULT_ACK_TIMEOUT,
            first_core: 0,
            timeout: Duration::from_secs(5),
            client_threads: None,
        }
    }

    /// The axes of one null point on soft (one connection, one worker, depth 1); tests
    /// change what they sweep.
    fn one_null_point() -> Axes {
        Axes {
            provider: "soft".into(),
            ops: vec!["null".into()],
            sizes: vec![0],
            inline: vec![4096],
            credits: vec![8],
            depth: vec![1],
            inline_sends: vec![256],
            registration: vec!["windows".into()],
            remote_invalidation: vec![crate::axes::RemoteInvalidation::On],
            conns: vec![1],
            workers: vec![1],
            forms: vec!["auto".into()],
            versions: vec![1],
        }
    }

    #[test]
    fn every_form_runs_in_process_and_is_seen_in_its_form() {
        let axes = Axes {
            ops: vec!["write".into(), "read".into()],
            sizes: vec![512],
            depth: vec![2],
            conns: vec![2],
            forms: vec!["short".into(), "chunked".into(), "long".into()],
            // Both versions: a version 2 client refuses a server without it, so a point of
            // version 2 that ran spoke it.
            versions: vec![1, 2],
            ..one_null_point()
        };
        let points = axes.points().unwrap();
        assert_eq!(points.len(), 12);
        let open = || Soft::open_device(None).map_err(|e| e.to_string());
        let mut seen = 0;
        let target = Target::InProcess(format!("@rpcrdma-sweep-test.{}", std::process::id()));
        let out = run::<Soft>(&points, &settings(), &target, &open, |i, _| {
            assert_eq!(i, seen);
            seen += 1;
        })
        .unwrap();
        assert!(out.failed.is_empty(), "{:?}", out.failed);
        let out = out.points;
        assert_eq!(out.len(), 24);
        for p in &out {
            assert!(p.rpcs > 0 && p.lat_ns.p50 > 0, "{p:?}");
            assert_eq!(p.per_conn_rps.len(), 2);
            let (min, median, max) = (
                p.conn_rate_min.unwrap(),
                p.conn_rate_median.unwrap(),
                p.conn_rate_max.unwrap(),
            );
            assert!(min <= median && median <= max, "{p:?}");
            assert_eq!(p.conn_rate_min_to_median, Some(min / median));
            assert_eq!(p.per_worker_rps.len(), 1);
            assert!(p.memory_per_conn.client > 0 && p.memory_per_conn.server > Some(0));
            let f = &p.forms;
            match (p.config.op.as_str(), p.config.form.as_str()) {
                ("write", "short") => assert!(f.short_calls > 0 && f.chunked_calls == 0),
                ("write", "chunked") => assert!(f.chunked_calls > 0 && f.short_calls == 0),
                ("read", "short") => assert_eq!(f.write_chunks, 0),
                ("read", "chunked") => assert!(f.write_chunks > 0),
                (_, "long") => assert!(f.long_calls > 0),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_null_point_of_one_connection_is_read_against_the_ring() {
        let axes = Axes {
            depth: vec![4],
            conns: vec![1, 2],
            ..one_null_point()
        };
        let points = axes.points().unwrap();
        let open = || Soft::open_device(None).map_err(|e| e.to_string());
        let target = Target::InProcess(format!("@rpcrdma-sweep-ring.{}", std::process::id()));
        let out = run::<Soft>(&points, &settings(), &target, &open, |_, _| {})
            .unwrap()
            .points;
        assert_eq!(out.len(), 4);
        for p in &out {
            let (ring, ratio) = (p.limits.ring_rps, p.ratios.rate_to_ring);
            if p.config.conns == 1 {
                let g = ring.expect("the ring at depth 4");
                assert!(g > 0.0, "{p:?}");
                let want = p.rate_rps / g;
                assert!(ratio.is_some_and(|r| (r - want).abs() < 1e-9), "{p:?}");
            } else {
                assert_eq!((ring, ratio), (None, None), "{p:?}");
            }
        }
    }

    /// A procedure the in-process server does not serve fails each time it runs; the sweep
    /// records both repetitions and measures the next point anyway.
    #[test]
    fn a_failing_point_is_recorded_and_the_sweep_goes_on() {
        let axes = Axes {
            ops: vec!["prog:400199:1:0".into(), "null".into()],
            ..one_null_point()
        };
        let points = axes.points().unwrap();
        assert_eq!(points.len(), 2);
        let open = || Soft::open_device(None).map_err(|e| e.to_string());
        let target = Target::InProcess(format!("@rpcrdma-sweep-fail.{}", std::process::id()));
        let mut steps = Vec::new();
        let out = run::<Soft>(&points, &settings(), &target, &open, |i, step| {
            steps.push((i, matches!(step, Step::Failed(_))));
        })
        .unwrap();
        let failing = points.iter().find(|c| c.op.starts_with("prog:")).unwrap();
        assert_eq!(out.failed.len(), 2, "{:?}", out.failed);
        for (rep, f) in out.failed.iter().enumerate() {
            assert_eq!((&f.config, f.rep), (failing, rep as u32));
            assert!(!f.error.is_empty());
            // Its JSON line names the point and the error, and is no point.
            let line = f.to_json();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["op"], "prog:400199:1:0");
            assert_eq!(v["rep"], rep);
            assert_eq!(v["error"], f.error.as_str());
        }
        assert_eq!(out.points.len(), 2);
        assert!(out
            .points
            .iter()
            .all(|p| p.config.op == "null" && p.rpcs > 0));
        // Every step handed over, in order, failures included.
        let failed_first = points[0].op.starts_with("prog:");
        let want: Vec<(usize, bool)> = (0..4).map(|i| (i, (i < 2) == failed_first)).collect();
        assert_eq!(steps, want);
    }

    #[test]
    fn a_bulk_size_too_small_is_refused_before_anything_runs() {
        let c = PointConfig {
            provider: "soft".into(),
            op: "write".into(),
            size: 2 << 20,
            inline: 4096,
            credits: 8,
            depth: 1,
            inline_sends: 256,
            registration: "windows".into(),
            remote_invalidation: true,
            conns: 1,
            workers: 1,
            form: "auto".into(),
            version: 1,
        };
        let s = Settings {
            bulk_size: Some(1 << 20),
            ..settings()
        };
        let open = || Soft::open_device(None).map_err(|e| e.to_string());
        let target = Target::InProcess("@never".into());
        match run::<Soft>(&[c], &s, &target, &open, |_, _| panic!("ran")) {
            Err(SweepError::Misfit(m)) => {
                assert!(
                    m.contains("write:2097152 needs --bulk-size of at least"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
