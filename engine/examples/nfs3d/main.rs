//! `nfs3d`: an NFS version 3 server (RFC 1813) over RPC-over-RDMA (RFC 8166, RFC 8797, with
//! the NFS upper-layer binding of RFC 8267) on the rpcrdma engine, with MOUNT v3 over TCP
//! and rpcbind registration beside it.
//!
//! ```sh
//! cargo build --release -p rpcrdma-engine --example nfs3d
//! nfs3d --export /srv/nfs --provider verbs --listen 10.0.2.15:20049 --mountd-port 20048
//! mount -t nfs -o vers=3,proto=rdma,port=20049,mountport=20048,mountproto=tcp,nolock \
//!     10.0.2.15:/ /mnt
//! ```
//!
//! Every procedure runs as its caller (the AUTH_SYS identity, root squashed by default as
//! exports(5) has it: `--no-root-squash`, `--all-squash`, `--anonuid`, `--anongid`, `--ro`,
//! `--allow CIDR`), so nfs3d runs as root. Its handles are the kernel's own file handles
//! under a MAC, so the export must be on a file system that makes them (most do; tmpfs,
//! ext4, xfs, btrfs).
//!
//! Polling workers drive the RDMA connections; every procedure but NULL runs on an I/O
//! thread (`--io-threads`), its data moved without a copy (a READ's data read straight
//! into the registered buffer the engine RDMA-Writes to the client's Write chunk, a
//! WRITE's data written from where the RDMA Read put it). SIGINT or SIGTERM stop it
//! gracefully; the counters are printed as one JSON line on stdout (`--stats-every`:
//! periodically on stderr too).

mod cli;
mod drc;
mod fh;
mod identity;
mod khandle;
mod mountd;
mod ops;
mod policy;
mod record;
mod rpcbind;
mod server;
mod stats;
#[cfg(test)]
mod tests;
mod xdr;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rpcrdma_engine::conn::{ConnConfig, ConnError, Version};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::{ConnectError, Device, Provider};
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::stats::{Counters, Snapshot};
use rpcrdma_engine::worker::{WorkerConfig, WorkerStats, Workers};

use cli::{on_memory_fs, Cli, MemoryExport, Which};
use drc::DrcLimits;
use mountd::Mountd;
use ops::Export;
use policy::{Cidr, Policy};
use server::conn::NfsConn;
use server::io::IoPool;
use server::Nfs;

/// Why a connection request is refused at the connection manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Its client is not in `--allow`.
    NotAllowed,
    /// `--max-conns` connections are live: `live` of them.
    Full {
        /// The connections live when the request came.
        live: u64,
    },
}

/// Whether to take a connection request from `peer` while `live` connections are: a client
/// outside the policy's `--allow` is refused first, then any past `max_conns`.
fn admission(
    policy: &Policy,
    peer: Option<SocketAddr>,
    live: u64,
    max_conns: u64,
) -> Result<(), Refusal> {
    if !policy.allows(peer.map(|a| a.ip())) {
        Err(Refusal::NotAllowed)
    } else if live >= max_conns {
        Err(Refusal::Full { live })
    } else {
        Ok(())
    }
}

/// The connection settings of an NFS server: inline sizes of at least 4 KiB both ways (the
/// Linux client sends 4 KiB inline and asks R=1, RFC 8797 §4), bulk buffers that hold the
/// largest READ or WRITE with its arguments or results beside it.
pub fn conn_config(
    credits: u32,
    max_io: u32,
    inline: u32,
    remote_invalidation: bool,
) -> ConnConfig {
    ConnConfig {
        send_size: inline.max(4096),
        recv_size: inline.max(4096),
        remote_invalidation,
        credits,
        initial_grant: credits,
        bulk_size: max_io.saturating_add(8192),
        version: Version::Auto,
        ..ConnConfig::default()
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("nfs3d: {what}: {e}");
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before the device and the buffers, when little but the program and its libraries is
    // mapped: a server started afresh then takes no page fault for its code on its first
    // client (some 50 on a mount's accept and first Calls in the soft-RoCE guest).
    if let Err(e) = rpcrdma_engine::prefault::prefault_mappings() {
        eprintln!("nfs3d: the first connection and Calls will take page faults: {e}");
    }
    match cli.provider {
        Which::Soft => match Soft::open_device(None) {
            Ok(d) => serve::<Soft>(d, &cli),
            Err(e) => fail("soft fabric", e),
        },
        Which::Verbs => match Verbs::open_device(cli.device.as_deref()) {
            Ok(d) => serve::<Verbs>(d, &cli),
            Err(e) => fail(
                "opening the RDMA device (see `rpcrdma devices`; --device NAME)",
                e,
            ),
        },
    }
}

/// Serves until SIGINT, SIGTERM or `--seconds`, then stops gracefully and prints the
/// counters: [`try_serve`]'s exit status, or the one of the start that failed.
fn serve<P: Provider>(device: P::Device, cli: &Cli) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    try_serve::<P>(device, cli).unwrap_or_else(|failed| failed)
}

/// [`serve`]'s phases in order: the checks before anything starts, the export, the I/O
/// threads, the listener and its workers, MOUNT and rpcbind, the accept loop, the stop.
/// `Err` is the exit status of a start that failed (the failure printed).
fn try_serve<P: Provider>(device: P::Device, cli: &Cli) -> Result<ExitCode, ExitCode>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    let addr = preflight::<P>(cli)?;
    let policy = cli.policy();
    let (export, nfs, memory) = open_export(cli, &policy)?;
    let pool =
        match IoPool::start_spinning(cli.io_threads, &nfs, Duration::from_micros(cli.io_spin_us)) {
            Ok(p) => p,
            Err(e) => return Err(fail("starting the I/O threads", e)),
        };
    let n_workers = cli.workers.max(1);
    let cfg = server_config::<P>(cli, &device, n_workers)?;
    let dispatch = Arc::new(server::dispatch(&nfs));
    let mut listener = match Server::<P>::listen(device, &addr, dispatch, cfg) {
        Ok(s) => s,
        Err(e) => return Err(fail(&format!("listen on {}", cli.listen), e)),
    };
    let mut workers = start_workers::<P>(cli, n_workers)?;
    // Refused at the connection manager past this, never accepted and then closed.
    let max_conns = cli.max_conns.map_or(workers.capacity() as u64, u64::from);
    let stop = stop_on_signals();
    let (mountd, registered) = start_mount(cli, &export, &policy)?;
    announce::<P>(cli, &export, &workers, max_conns, &cfg, memory, &mountd);
    announce_policy(&policy);
    // Every connection's counters (shared, readable here), for exact sums at the end.
    let mut conn_stats = ConnStats::default();
    let start = Instant::now();
    let mut next_stats = start + Duration::from_secs(cli.stats_every);
    while !stop.load(Ordering::Relaxed)
        && (cli.seconds == 0 || start.elapsed() < Duration::from_secs(cli.seconds))
    {
        accept_one(
            &mut listener,
            &mut workers,
            &nfs,
            &pool,
            &policy,
            max_conns,
            &mut conn_stats,
        );
        if cli.stats_every > 0 && Instant::now() >= next_stats {
            next_stats = Instant::now() + Duration::from_secs(cli.stats_every);
            let now = workers.stats();
            eprintln!("{}", report(&conn_stats, &now, &nfs, &mountd, &export));
        }
    }
    eprintln!("nfs3d: stopping");
    // The workers finish the Calls in process (the I/O threads still answer them), then
    // close their connections; then the I/O threads, MOUNT and the registrations go.
    let last = workers.stats();
    let stopped = workers.shutdown(Duration::from_secs(5));
    pool.shutdown();
    let out = report(&conn_stats, &last, &nfs, &mountd, &export);
    mountd.join();
    if let Some(r) = registered {
        r.unset_all();
    }
    println!("{out}");
    Ok(match stopped {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail("stopping workers", e),
    })
}

/// The checks before anything starts: the listen address, `--allow`'s need of IP addresses,
/// the rights to act as the callers; then the umask cleared. The address to listen on.
fn preflight<P: Provider>(cli: &Cli) -> Result<P::Addr, ExitCode>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
{
    let addr = match cli.listen.parse::<P::Addr>() {
        Ok(a) => a,
        Err(e) => return Err(fail(&format!("bad --listen {:?}", cli.listen), e)),
    };
    if !cli.allow.is_empty() && cli.listen.parse::<SocketAddr>().is_err() {
        return Err(fail(
            "--allow",
            "clients are told apart by IP address: the soft fabric's have none (use --provider verbs)",
        ));
    }
    if let Err(e) = identity::check() {
        return Err(fail("acting as the callers", e));
    }
    // Modes come from the clients, whose own umask applied (RFC 1813 §3.3.8: the mode in
    // sattr3 is the new object's); the server's would take bits away.
    rustix::process::umask(rustix::fs::Mode::empty());
    Ok(addr)
}

/// The export opened (its state directory made first) and the NFS service on it, with
/// where its procedures run; whether the export is a memory one (`--memory-export`).
fn open_export(cli: &Cli, policy: &Policy) -> Result<(Arc<Export>, Arc<Nfs>, bool), ExitCode> {
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("nfs3d-state"));
    if let Err(e) = std::fs::create_dir_all(&state_dir) {
        return Err(fail(&format!("state directory {}", state_dir.display()), e));
    }
    let export = match Export::open(&cli.export, &state_dir, cli.config()) {
        Ok(e) => Arc::new(e),
        Err(e) => return Err(fail(&format!("export {}", cli.export.display()), e)),
    };
    let nfs = Nfs::new(
        Arc::clone(&export),
        cli.config(),
        DrcLimits::default(),
        policy.clone(),
    );
    nfs.set_on_worker(!cli.no_on_worker);
    let memory = match cli.memory_export {
        MemoryExport::Auto => on_memory_fs(&cli.export),
        MemoryExport::Yes => true,
        MemoryExport::No => false,
    };
    nfs.set_on_worker_all(memory);
    Ok((export, nfs, memory))
}

/// The connection settings of the listener: [`conn_config`] from the command line, sized
/// for `n_workers` workers sharing the bulk pool, with a shared receive queue or not.
fn server_config<P: Provider>(
    cli: &Cli,
    device: &P::Device,
    n_workers: usize,
) -> Result<ConnConfig, ExitCode> {
    let cfg = conn_config(
        cli.credits,
        cli.max_io,
        cli.inline,
        !cli.no_remote_invalidation,
    );
    let want_srq = match (cli.srq, cli.no_srq) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    ConnConfig {
        version: cli.version,
        slot_bulk_size: cli.slot_bulk_size,
        ..cfg
    }
    .for_server(
        n_workers,
        cli.bulk_pool << 20,
        device.attr().max_srq_wr,
        want_srq,
    )
    .map_err(|e| fail("--srq", format!("device {}: {e}", device.name())))
}

/// `n_workers` polling workers, with room for `--max-conns` between them, napping and
/// waiting as `--nap-us`, `--nap-after-us` and `--wait-after-us` ask.
fn start_workers<P: Provider>(cli: &Cli, n_workers: usize) -> Result<Workers<NfsConn<P>>, ExitCode>
where
    ServerConn<P>: Send,
{
    let configs: Vec<WorkerConfig> = (0..n_workers)
        .map(|_| WorkerConfig {
            core: None,
            max_conns: cli.conns_per_worker(n_workers),
        })
        .collect();
    let workers = match Workers::<NfsConn<P>>::start(&configs) {
        Ok(w) => w,
        Err(e) => return Err(fail("starting workers", e)),
    };
    if cli.nap_us > 0 {
        workers.set_nap(Some((
            Duration::from_micros(cli.nap_after_us),
            Duration::from_micros(cli.nap_us),
        )));
    }
    if cli.wait_after_us > 0 {
        workers.set_wait(Some(Duration::from_micros(cli.wait_after_us)));
    }
    Ok(workers)
}

/// A flag SIGINT and SIGTERM raise, to stop the service gracefully.
fn stop_on_signals() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("nfs3d: cannot handle signal {sig}: {e}");
        }
    }
    stop
}

/// MOUNT started on the listen IP when it is one, else on every address; the service
/// registered with rpcbind unless `--no-rpcbind` (IPv4 only).
fn start_mount(
    cli: &Cli,
    export: &Arc<Export>,
    policy: &Policy,
) -> Result<(Mountd, Option<rpcbind::Registered>), ExitCode> {
    let listen_ip = cli
        .listen
        .parse::<SocketAddr>()
        .ok()
        .map(|a| (a.ip(), a.port()));
    let mount_ip = listen_ip.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |(ip, _)| ip);
    let mountd = match Mountd::start(
        SocketAddr::new(mount_ip, cli.mountd_port),
        Arc::clone(export),
        policy.clone(),
        Arc::new(AtomicBool::new(false)),
    ) {
        Ok(m) => m,
        Err(e) => return Err(fail(&format!("MOUNT on {mount_ip}:{}", cli.mountd_port), e)),
    };
    let registered = match (cli.no_rpcbind, listen_ip) {
        (false, Some((IpAddr::V4(ip), port))) => Some(rpcbind::Registered::register(
            rpcbind::Rpcbind::default(),
            mountd.addr().port(),
            ip,
            port,
        )),
        _ => None,
    };
    Ok((mountd, registered))
}

/// The line on stderr that says what is served, where and how.
fn announce<P: Provider>(
    cli: &Cli,
    export: &Export,
    workers: &Workers<NfsConn<P>>,
    max_conns: u64,
    cfg: &ConnConfig,
    memory: bool,
    mountd: &Mountd,
) where
    ServerConn<P>: Send,
{
    eprintln!(
        "nfs3d: exporting {} over {} on {} (NFS v3, {} worker(s), at most {} connections, {}, {} MiB of shared bulk buffers at most, {} I/O threads{}, max I/O {} B); MOUNT v3 on tcp {}",
        export.export_path().display(),
        P::NAME,
        cli.listen,
        workers.len(),
        max_conns,
        cfg.receives_summary(),
        cfg.share_config().bulk_limit >> 20,
        cli.io_threads.max(1),
        if memory {
            " for READ, WRITE and listings: a memory export, the rest on the workers"
        } else {
            ""
        },
        cli.max_io,
        mountd.addr()
    );
}

/// The line on stderr that says how callers are mapped and who may connect.
fn announce_policy(policy: &Policy) {
    eprintln!(
        "nfs3d: every Call runs as its caller; {}, anonymous {}:{}{}{}",
        if policy.all_squash {
            "all_squash"
        } else if policy.root_squash {
            "root_squash"
        } else {
            "no_root_squash"
        },
        policy.anon_uid,
        policy.anon_gid,
        if policy.read_only { ", ro" } else { ", rw" },
        if policy.allow.is_empty() {
            String::new()
        } else {
            let blocks: Vec<String> = policy.allow.iter().map(Cidr::to_string).collect();
            format!(", clients {}", blocks.join(" "))
        }
    );
}

/// One wait of at most 200 ms for a connection request. A client outside `--allow`, or
/// past `--max-conns`, is refused before anything is spent on it (an RDMA_CM reject),
/// counted and logged; a connection accepted goes to a worker, its counters to `conn_stats`.
fn accept_one<P: Provider>(
    listener: &mut Server<P>,
    workers: &mut Workers<NfsConn<P>>,
    nfs: &Arc<Nfs>,
    pool: &IoPool,
    policy: &Policy,
    max_conns: u64,
    conn_stats: &mut ConnStats,
) where
    ServerConn<P>: Send,
{
    let mut refusal = None;
    let admit = |peer: Option<SocketAddr>| {
        refusal = admission(policy, peer, workers.live_conns(), max_conns).err();
        refusal.is_none()
    };
    match listener.accept_if(Duration::from_millis(200), admit) {
        Ok(conn) => {
            // The line is made first and written after the connection is with its worker:
            // the client's first Call (already on its way) does not wait for the log.
            let line = format!(
                "nfs3d: accepted a connection ({}) in {:.1} ms, {}; {}{}\n",
                conn.negotiation(),
                conn.setup_time().as_secs_f64() * 1e3,
                conn.memory(),
                listener.share_stats(),
                conn.confirm_note()
            );
            conn_stats.add(conn.stats());
            let c = NfsConn::new(conn, Arc::clone(nfs), pool.sender());
            match workers.assign(c) {
                // One write of the made line: stderr is unbuffered, and each piece of a
                // line formatted there is a system call of its own (tens of them).
                Ok(_) => eprint!("{line}"),
                Err(e) => eprintln!("nfs3d: connection refused: {e}"),
            }
        }
        Err(ConnError::Connect(ConnectError::Timeout)) => {}
        Err(ConnError::Refused { peer }) => {
            let from = match peer {
                Some(p) => p.ip().to_string(),
                None if P::NAME == Soft::NAME => "a soft peer".to_string(),
                None => "an unknown address".to_string(),
            };
            match refusal {
                Some(Refusal::Full { live }) => {
                    nfs.stats.refused_max_conns.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "nfs3d: refused a connection from {from}: {live} connections \
                         already (--max-conns {max_conns})"
                    );
                }
                _ => {
                    nfs.stats.refused_conns.fetch_add(1, Ordering::Relaxed);
                    eprintln!("nfs3d: refused a connection from {from}: not in --allow");
                }
            }
        }
        Err(e) => eprintln!("nfs3d: a connection attempt failed: {e}"),
    }
}

/// The counters as one JSON value ([`stats::report`]): the engine's summed over every
/// connection, the workers' (`workers`), nfs3d's, MOUNT's and the export's.
fn report(
    conns: &ConnStats,
    workers: &[WorkerStats],
    nfs: &Nfs,
    mountd: &Mountd,
    export: &Export,
) -> serde_json::Value {
    stats::report(
        &conns.sum(),
        workers,
        &nfs.stats,
        &nfs.drc,
        Some(mountd.stats()),
        export.searches(),
        export.opened_by_handle(),
    )
}

/// The engine's counters of every connection accepted, live or gone: a gone connection's
/// are folded into one sum when the next one comes, so that memory stays bounded however
/// many connections come and go.
#[derive(Default)]
struct ConnStats {
    retired: Snapshot,
    live: Vec<Arc<Counters>>,
}

impl ConnStats {
    fn add(&mut self, c: Arc<Counters>) {
        let retired = &mut self.retired;
        // Held here alone: its connection was dropped, its counters are final.
        self.live.retain(|c| {
            let gone = Arc::strong_count(c) == 1;
            if gone {
                retired.add(&c.snapshot());
            }
            !gone
        });
        self.live.push(c);
    }

    fn sum(&self) -> Snapshot {
        let mut sum = self.retired;
        for c in &self.live {
            sum.add(&c.snapshot());
        }
        sum
    }
}

#[cfg(test)]
mod admission_tests {
    use super::*;

    #[test]
    fn a_request_is_refused_past_max_conns_and_outside_allow_first() {
        let open = Policy::default();
        assert_eq!(admission(&open, None, 0, 2), Ok(()));
        assert_eq!(admission(&open, None, 1, 2), Ok(()));
        assert_eq!(admission(&open, None, 2, 2), Err(Refusal::Full { live: 2 }));
        let inside: SocketAddr = "10.0.2.2:900".parse().unwrap();
        let outside: SocketAddr = "192.0.2.1:900".parse().unwrap();
        let allow = Policy {
            allow: vec!["10.0.2.0/24".parse().unwrap()],
            ..Policy::default()
        };
        assert_eq!(admission(&allow, Some(inside), 0, 2), Ok(()));
        assert_eq!(
            admission(&allow, Some(inside), 5, 2),
            Err(Refusal::Full { live: 5 })
        );
        assert_eq!(
            admission(&allow, Some(outside), 5, 2),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(admission(&allow, None, 0, 2), Err(Refusal::NotAllowed));
    }
}

#[cfg(test)]
mod conn_stats_tests {
    use super::*;
    use rpcrdma_engine::stats::bump;

    #[test]
    fn gone_connections_are_folded_and_sums_stay_exact() {
        let mut s = ConnStats::default();
        let mut held = Vec::new();
        for i in 0..100u64 {
            let c = Arc::new(Counters::default());
            bump(&c.rpcs, i);
            s.add(Arc::clone(&c));
            // Every other connection stays alive; the others are dropped at once.
            if i % 2 == 0 {
                held.push(c);
            }
        }
        assert!(s.live.len() <= 51, "{} entries kept", s.live.len());
        assert_eq!(s.sum().rpcs, (0..100).sum::<u64>());
        bump(&held[0].rpcs, 1000);
        assert_eq!(
            s.sum().rpcs,
            (0..100).sum::<u64>() + 1000,
            "live ones are read now"
        );
    }
}
