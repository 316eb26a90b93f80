//! `nfs4d`: an NFSv4.1 server on the engine (RFC 8881), exporting a directory as the
//! pseudo-root `/` to the Linux client's default mount over RDMA:
//!
//! ```sh
//! nfs4d --export /srv/nfs --listen 10.0.2.15:20051 --provider verbs
//! mount -t nfs -o proto=rdma,port=20051 10.0.2.15:/ /mnt
//! ```
//!
//! - Sessions (`session.rs`): EXCHANGE_ID, CREATE_SESSION with its back channel on the
//!   connection it came on, SEQUENCE with a slot table replaying each slot's last reply
//!   (exactly once, §2.10.6), BIND_CONN_TO_SESSION, RECLAIM_COMPLETE, DESTROY_SESSION,
//!   DESTROY_CLIENTID. A COMPOUND runs operation by operation (`compound.rs`).
//! - File operations (`fileops.rs`, `openlock.rs`) over the export module nfs3d and
//!   nfs4d share (`crate::ops`: handles, names, objects reached beneath the export), with
//!   attributes (`attrs.rs`), open and lock state (`state.rs`) and byte-range locks
//!   (`locks.rs`). Every COMPOUND runs on an I/O thread as its caller (`io.rs`), the
//!   AUTH_SYS identity as the export's options map it (`--no-root-squash`,
//!   `--all-squash`, `--anonuid`, `--anongid`, `--ro`, `--allow`, as nfs3d's), so nfs4d
//!   runs as root.
//! - READ's data goes through the client's Write chunk and WRITE's comes through its Read
//!   chunk (RFC 8267 §4.2), lent to the I/O thread without a copy.
//! - Callbacks (`backchannel.rs`): for each session with a back channel, CB_NULL and then
//!   a CB_COMPOUND holding CB_SEQUENCE, sent in RFC 8167's backward direction on version 1
//!   (`ServerConn::call_reverse_as`), their answers counted.
//!
//! On SIGINT or SIGTERM (or after `--seconds`) it prints its counters as one JSON line,
//! `"backchannel"` among them.

mod attrs;
mod backchannel;
mod compound;
#[path = "../nfs3d/fh.rs"]
mod fh;
mod fileops;
#[cfg(test)]
mod files_test;
mod grace;
#[allow(dead_code)]
#[path = "../nfs3d/identity.rs"]
mod identity;
mod io;
#[path = "../nfs3d/khandle.rs"]
mod khandle;
#[allow(dead_code)]
mod locks;
#[path = "../nfs4common/mod.rs"]
mod nfs4common;
mod openlock;
/// nfs3d's export module, shared: handles, names, objects beneath the export (nfs4d
/// uses its export, handle and listing parts and a few of its helpers, not its NFSv3
/// procedures).
#[allow(dead_code)]
#[path = "../nfs3d/ops/mod.rs"]
mod ops;
#[allow(dead_code)]
#[path = "../nfs3d/policy.rs"]
mod policy;
mod session;
mod state;
/// nfs3d's XDR types, shared for the statuses NFSv3 and NFSv4 number alike.
#[allow(dead_code)]
#[path = "../nfs3d/xdr.rs"]
mod xdr;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rpcrdma_engine::conn::{ConnConfig, ConnError, Version};
use rpcrdma_engine::dispatch::{Dispatch, Outcome, ProcSpec, Request, Response};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::responder::{CompleteError, Server, ServerConn};
use rpcrdma_proto::rpc::AuthStat;

use backchannel::Callbacks;
use fileops::{Fs, ReadData};
use identity::Caller;
use io::{Finished, IoPool, Job, Shared};
use policy::{Cidr, Policy};
use session::{State, MAX_COMPOUND, MAX_IO};
use state::Files;

/// NFSv4's program, version and procedures (RFC 8881 §16).
const NFS4_PROGRAM: u32 = 100_003;
const NFS_V4: u32 = 4;
const NFSPROC4_NULL: u32 = 0;
const NFSPROC4_COMPOUND: u32 = 1;
/// How long the polling loop spins (yielding its core) with nothing to do before it naps,
/// and how long a nap is.
const IDLE_SPIN: Duration = Duration::from_millis(2);
const IDLE_NAP: Duration = Duration::from_micros(50);
/// AUTH_SYS (RFC 5531 Appendix A).
const AUTH_SYS: u32 = 1;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProviderName {
    Verbs,
    Soft,
}

#[derive(Parser, Debug)]
#[command(
    name = "nfs4d",
    about = "An NFSv4.1 server on the rpcrdma engine (sessions, files, locks, callbacks)"
)]
struct Cli {
    /// The directory to export as the pseudo-root `/`.
    #[arg(long)]
    export: std::path::PathBuf,
    /// Address to listen on (IP:PORT on verbs, a name on soft).
    #[arg(long)]
    listen: String,
    /// The fabric.
    #[arg(long, value_enum, default_value_t = ProviderName::Verbs)]
    provider: ProviderName,
    /// The RDMA device (verbs; default: the first).
    #[arg(long)]
    device: Option<String>,
    /// Stop after this many seconds (0: at SIGINT or SIGTERM).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
    /// Where the handle key is kept (handles stay valid across restarts).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
    /// Seconds of the grace period after a restart, during which the clients recorded
    /// before it reclaim their opens and locks (RFC 8881 §8.4.2; none when no client is
    /// recorded).
    #[arg(long, default_value_t = 90)]
    grace: u64,
    /// Threads that run COMPOUNDs against the file system.
    #[arg(long, default_value_t = 4)]
    io_threads: usize,
    /// Refuse every change (exports(5) `ro`).
    #[arg(long)]
    ro: bool,
    /// Let uid 0 act as root (exports(5) `no_root_squash`).
    #[arg(long)]
    no_root_squash: bool,
    /// Map every user to the anonymous one (exports(5) `all_squash`).
    #[arg(long)]
    all_squash: bool,
    /// The anonymous user.
    #[arg(long, default_value_t = policy::ANON_ID)]
    anonuid: u32,
    /// The anonymous group.
    #[arg(long, default_value_t = policy::ANON_ID)]
    anongid: u32,
    /// Clients allowed, as address blocks (IP/BITS; repeatable; default: every client).
    #[arg(long)]
    allow: Vec<Cidr>,
}

impl Cli {
    fn policy(&self) -> Policy {
        Policy {
            root_squash: !self.no_root_squash,
            all_squash: self.all_squash,
            anon_uid: self.anonuid,
            anon_gid: self.anongid,
            read_only: self.ro,
            allow: self.allow.clone(),
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !cli.export.is_dir() {
        eprintln!("nfs4d: --export {}: not a directory", cli.export.display());
        return std::process::ExitCode::FAILURE;
    }
    if let Err(e) = identity::check() {
        eprintln!("nfs4d: {e}");
        return std::process::ExitCode::FAILURE;
    }
    // Modes come from the clients, whose own umask applied.
    rustix::process::umask(rustix::fs::Mode::empty());
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("nfs4d: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let r = match cli.provider {
        ProviderName::Verbs => serve::<Verbs>(&cli, &stop, |_| {}),
        ProviderName::Soft => serve::<Soft>(&cli, &stop, |_| {}),
    };
    match r {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nfs4d: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Who a Call runs as: its AUTH_SYS identity as `policy` maps it, the anonymous one for
/// any other flavor; `None` for an AUTH_SYS body that does not decode.
fn caller_of(policy: &Policy, req: &Request<'_>) -> Option<Caller> {
    if req.cred.flavor == AUTH_SYS {
        Caller::from_auth_sys(req.cred.body).map(|c| policy.map(c).caller)
    } else {
        Some(policy.anonymous())
    }
}

/// The count of a READ that ends the COMPOUND `args` (the Linux client's {SEQUENCE,
/// PUTFH, READ}): a READ's arguments are its last 28 bytes, after its operation number.
/// Only a hint for lending a buffer: the I/O thread decodes the COMPOUND.
fn read_at_end(args: &[u8]) -> Option<u32> {
    let word = |at: usize| {
        args.get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let n = args.len();
    (n >= 44 && word(n - 32)? == session::op::READ).then(|| word(n - 4))?
}

/// NULL, and COMPOUND: run on the polling thread when it only looks at attributes the
/// kernel has cached (`compound::runs_on_poller`), handed to the I/O threads otherwise.
fn dispatch(policy: Policy, jobs: Sender<Job>, shared: Arc<Shared>) -> Arc<Dispatch> {
    let mut d = Dispatch::new();
    d.register(
        NFS4_PROGRAM,
        NFS_V4,
        NFSPROC4_NULL,
        ProcSpec::plain(0),
        |_, _| Outcome::Success,
    );
    let jobs = Mutex::new(jobs);
    d.register(
        NFS4_PROGRAM,
        NFS_V4,
        NFSPROC4_COMPOUND,
        ProcSpec {
            ddp_arg: true,
            ddp_results: 1,
            ..ProcSpec::plain(MAX_COMPOUND)
        },
        move |req: &Request<'_>, resp: &mut Response<'_>| {
            let Some(caller) = caller_of(&policy, req) else {
                return Outcome::AuthError(AuthStat::AUTH_BADCRED);
            };
            if compound::runs_on_poller(&shared.fs, req.args) {
                let conn = resp.deferred().connection();
                let ran = compound::run(
                    &shared.sessions,
                    Some((&shared.fs, &caller)),
                    conn,
                    req.args,
                    resp.results(),
                    None,
                );
                shared.fs.on_poller.fetch_add(1, Ordering::Relaxed);
                resp.set_results_len(ran.len);
                return Outcome::Success;
            }
            let bulk = read_at_end(req.args).and_then(|n| resp.lend_bulk(n.min(MAX_IO) as usize));
            let args = match resp.lend_args() {
                Some(l) => io::Args::Lent(l),
                None => io::Args::Copied(req.args.to_vec()),
            };
            let job = Job {
                conn: resp.deferred().connection(),
                ticket: resp.deferred(),
                caller,
                args,
                bulk,
            };
            match jobs.lock() {
                Ok(j) if j.send(job).is_ok() => Outcome::Deferred,
                _ => Outcome::SystemErr,
            }
        },
    );
    Arc::new(d)
}

/// Completes the Call `f` answers on its connection; `false` when it must wait.
fn complete<P: Provider>(conns: &mut [ServerConn<P>], f: &mut Finished) -> bool {
    let Some(c) = conns.iter_mut().find(|c| c.id() == f.conn) else {
        return true; // the connection is gone
    };
    let results = std::mem::take(&mut f.results);
    let data = std::mem::take(&mut f.data);
    let r = c.complete(f.ticket, |_, resp| {
        let Some(out) = resp.results().get_mut(..results.len()) else {
            // Larger than the reply buffer the engine gives: never the case for results
            // made within MAX_COMPOUND, refused rather than cut.
            return Outcome::SystemErr;
        };
        out.copy_from_slice(&results);
        resp.set_results_len(results.len());
        let pushed = match &data {
            ReadData::None => true,
            ReadData::Lent(n) => resp.push_bulk(*n).is_some(),
            ReadData::Owned(v) => resp
                .push_bulk(v.len())
                .map(|b| b.copy_from_slice(v))
                .is_some(),
        };
        if pushed {
            Outcome::Success
        } else {
            Outcome::SystemErr
        }
    });
    match r {
        Err(CompleteError::WouldBlock) => {
            f.results = results;
            f.data = data;
            false
        }
        _ => true,
    }
}

/// Listens, accepts, polls every connection, completes the COMPOUNDs the I/O threads ran
/// and calls back every session's client until `stop` is set (or `--seconds` pass);
/// `listening` is called once it listens. The counters, as a JSON line.
fn serve<P: Provider>(
    cli: &Cli,
    stop: &AtomicBool,
    listening: impl FnOnce(&P::Addr),
) -> Result<String, String>
where
    P::Addr: std::str::FromStr,
    Server<P>: Send + 'static,
    ServerConn<P>: Send + 'static,
{
    let device = P::open_device(cli.device.as_deref()).map_err(|e| e.to_string())?;
    let addr = cli
        .listen
        .parse::<P::Addr>()
        .map_err(|_| format!("bad --listen {:?}", cli.listen))?;
    let boot = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs() as u32);
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("nfs4d-state"));
    std::fs::create_dir_all(&state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let policy = cli.policy();
    let config = ops::Config {
        max_io: MAX_IO,
        max_dir: MAX_COMPOUND,
        read_only: cli.ro,
    };
    let export = ops::Export::open(&cli.export, &state_dir, config)
        .map_err(|e| format!("export {}: {e}", cli.export.display()))?;
    let grace = grace::Grace::load(
        state_dir.join("nfs4d-clients"),
        Duration::from_secs(cli.grace),
    );
    if grace.reclaiming() > 0 {
        eprintln!(
            "nfs4d: {} client(s) recorded before this start: a grace period of up to {} s",
            grace.reclaiming(),
            cli.grace
        );
    }
    let sessions = Arc::new(Mutex::new(State::new(boot).with_grace(grace)));
    let shared = Arc::new(Shared {
        sessions: Arc::clone(&sessions),
        fs: Fs::new(
            Arc::new(export),
            Files::new(boot),
            attrs::Limits {
                lease: 90,
                max_io: u64::from(MAX_IO),
            },
            cli.ro,
        ),
    });
    let (done_tx, done_rx) = mpsc::channel();
    let pool = IoPool::start(cli.io_threads, &shared, &done_tx).map_err(|e| e.to_string())?;
    let jobs = pool.sender().ok_or("no I/O threads")?;
    // Callbacks are inline (RFC 8167): a few outstanding per connection.
    let cfg = ConnConfig {
        send_size: 4096,
        recv_size: 4096,
        credits: 32,
        initial_grant: 32,
        bulk_size: MAX_IO + 8192,
        version: Version::V1,
        reverse_credits: 4,
        ..ConnConfig::default()
    };
    let mut server = Server::<P>::listen(
        device,
        &addr,
        dispatch(policy.clone(), jobs, Arc::clone(&shared)),
        cfg,
    )
    .map_err(|e| format!("listen on {}: {e}", cli.listen))?;
    // Connections are accepted on a thread of their own (an accept waits for the client's
    // side of the connection manager's exchange), handed to the polling loop.
    let (accepted_tx, accepted) = mpsc::channel::<ServerConn<P>>();
    let accepting = Arc::new(AtomicBool::new(true));
    let acceptor = {
        let (policy, accepting) = (policy.clone(), Arc::clone(&accepting));
        std::thread::Builder::new()
            .name("nfs4d-accept".into())
            .spawn(move || {
                while accepting.load(Ordering::Relaxed) {
                    let admit =
                        |peer: Option<std::net::SocketAddr>| policy.allows(peer.map(|a| a.ip()));
                    match server.accept_if(Duration::from_millis(100), admit) {
                        Ok(c) => {
                            eprintln!("nfs4d: accepted connection {}", c.id());
                            if accepted_tx.send(c).is_err() {
                                return;
                            }
                        }
                        Err(ConnError::Refused { peer }) => {
                            eprintln!("nfs4d: refused a connection from {peer:?}: not in --allow");
                        }
                        Err(_) => {}
                    }
                }
            })
            .map_err(|e| e.to_string())?
    };
    eprintln!(
        "nfs4d: NFSv4.1 on {} exporting {}",
        cli.listen,
        cli.export.display()
    );
    listening(&addr);
    let end = (cli.seconds > 0).then(|| Instant::now() + Duration::from_secs(cli.seconds));
    let mut conns: Vec<ServerConn<P>> = Vec::new();
    let mut callbacks = Callbacks::default();
    let mut next_housekeeping = Instant::now();
    let mut done = Vec::new();
    let mut pending: Vec<Finished> = Vec::new();
    let mut compounds = 0u64;
    let mut idle_since = Instant::now();
    while !stop.load(Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
        let now = Instant::now();
        let before = conns.len();
        conns.extend(accepted.try_iter());
        if now >= next_housekeeping || conns.len() != before {
            next_housekeeping = now + Duration::from_millis(1);
            for c in conns.iter_mut() {
                c.housekeep(now);
            }
        }
        let mut work = 0;
        for c in conns.iter_mut() {
            work += c.poll();
        }
        pending.extend(done_rx.try_iter());
        pending.retain_mut(|f| {
            let finished = complete(&mut conns, f);
            compounds += u64::from(finished);
            work += usize::from(finished);
            !finished
        });
        {
            let recalls = shared
                .fs
                .files
                .lock()
                .map(|mut f| std::mem::take(&mut f.recalls))
                .unwrap_or_default();
            let mut st = sessions.lock().unwrap_or_else(|p| p.into_inner());
            callbacks.add(std::mem::take(&mut st.new_back_channels));
            for r in recalls {
                callbacks.recall(r, &st);
            }
            callbacks.drive(&mut conns, &mut st);
        }
        conns.retain(|c| {
            if c.is_dead() {
                done.push(c.snapshot());
                false
            } else {
                true
            }
        });
        // Idle: give the core to the I/O threads (and, in a small machine, to the
        // client), then nap after a while, so that a polling loop never keeps the thread
        // that runs a COMPOUND from its core.
        if work > 0 || !pending.is_empty() {
            idle_since = now;
        } else if now.duration_since(idle_since) > IDLE_SPIN {
            std::thread::sleep(IDLE_NAP);
        } else {
            std::thread::yield_now();
        }
    }
    drop(pool);
    accepting.store(false, Ordering::Relaxed);
    let _ = acceptor.join();
    let reverse_calls: u64 = conns
        .iter()
        .map(|c| c.snapshot())
        .chain(done)
        .map(|s| s.reverse_calls)
        .sum();
    let (opens, d) = shared
        .fs
        .files
        .lock()
        .map_or((0, [0; 4]), |f| (f.len(), f.delegations));
    Ok(format!(
        "{{\"sessions\":{},\"compounds\":{},\"on_poller\":{},\"ops\":{},\"open_states\":{},\"delegations\":{{\"granted\":{},\"recalled\":{},\"returned\":{},\"revoked\":{}}},\"backchannel\":{},\"reverse_calls\":{}}}",
        sessions.lock().map_or(0, |s| s.sessions()),
        compounds + shared.fs.on_poller.load(Ordering::Relaxed),
        shared.fs.on_poller.load(Ordering::Relaxed),
        shared.fs.ops_json(),
        opens,
        d[0],
        d[1],
        d[2],
        d[3],
        callbacks.json(),
        reverse_calls
    ))
}
