//! NFS version 3 (RFC 1813) on the engine: the dispatch table, the jobs the handlers start
//! on I/O threads, and the connection driver that answers them.
//!
//! File I/O never runs on a polling worker. Every procedure but NULL defers (RFC 8166
//! leaves the reply's timing to the responder; the Call keeps its credit meanwhile, §3.3):
//! its handler takes the Call's ticket, lends the argument bytes (and, for READ, the
//! registered buffer of its DDP-eligible result, RFC 8267 §4.2) and leaves a [`Job`] in a
//! thread-local list; the connection's driver ([`conn::NfsConn`]) hands those jobs to the
//! I/O pool ([`io::IoPool`]) after each poll, with the sending end of its own completion
//! channel; an I/O thread runs [`ops::run`](crate::ops::run) and sends the answer back; the
//! driver completes the Call ([`ServerConn::complete`]) on the worker that owns the
//! connection. Channels are `std::sync::mpsc`: sending never blocks the worker, receiving
//! on the worker side is `try_recv`.
//!
//! [`ServerConn::complete`]: rpcrdma_engine::responder::ServerConn::complete

pub mod conn;
pub mod io;
pub mod lend;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_engine::dispatch::{Deferred, Dispatch, Outcome, ProcSpec, Request, Response};
use rpcrdma_engine::worker::Bell;
use rpcrdma_proto::rpc::{AuthStat, AUTH_SYS};

use crate::drc::{self, Drc, DrcLimits};
use crate::ops::{self, Caller, Config, Export};
use crate::policy::Policy;
use crate::stats::{NfsStats, NFS3_PROCS};

use lend::{Args, Bulk, BulkOut};

/// The NFS program (RFC 1813 §2.5).
pub const NFS_PROG: u32 = 100_003;
/// Its version 3.
pub const NFS_V3: u32 = 3;
/// NFSPROC3_NULL.
pub const NFSPROC3_NULL: u32 = 0;
/// NFSPROC3_READ: its data is DDP-eligible (RFC 8267 §4.2).
pub const NFSPROC3_READ: u32 = 6;
/// NFSPROC3_WRITE: its data is DDP-eligible (RFC 8267 §4.2).
pub const NFSPROC3_WRITE: u32 = 7;

/// How long a duplicate waits for its original still running before giving up.
pub const DRC_WAIT: Duration = Duration::from_secs(10);

/// What the handlers, the I/O threads and the report share.
pub struct Nfs {
    /// The exported directory.
    pub export: Arc<Export>,
    /// Its limits.
    pub config: Config,
    /// The duplicate request cache.
    pub drc: Drc,
    /// The counters.
    pub stats: NfsStats,
    /// Who may do what: the export's options.
    pub policy: Policy,
    /// How long a duplicate waits for its original.
    pub drc_wait: Duration,
    /// A test hook: how long every I/O job sleeps before it runs, in microseconds.
    io_delay_us: AtomicU64,
    /// Whether GETATTR, ACCESS and LOOKUP are tried on the worker first, from the kernel's
    /// caches ([`ops::run_cached`]).
    on_worker: AtomicBool,
    /// Whether the procedures of a few system calls run on the worker (an export whose
    /// operations never wait for a device: [`Nfs::set_on_worker_all`]).
    on_worker_all: AtomicBool,
}

impl core::fmt::Debug for Nfs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Nfs").finish_non_exhaustive()
    }
}

impl Nfs {
    /// The shared state of a server of `export` with the options `policy`.
    pub fn new(export: Arc<Export>, config: Config, drc: DrcLimits, policy: Policy) -> Arc<Nfs> {
        Arc::new(Nfs {
            export,
            config,
            drc: Drc::new(drc),
            stats: NfsStats::default(),
            policy,
            drc_wait: DRC_WAIT,
            io_delay_us: AtomicU64::new(0),
            on_worker: AtomicBool::new(true),
            on_worker_all: AtomicBool::new(false),
        })
    }

    /// Runs every procedure but READ, WRITE, READDIR and READDIRPLUS on the polling worker
    /// that received it, instead of handing it to an I/O thread (default: no). Only for an
    /// export whose file system never waits for a device (tmpfs, ramfs): its operations are
    /// memory operations (at most a short wait for an inode's lock held by an I/O thread),
    /// and the hand-off to a thread costs more than they do (in the soft-RoCE guest a
    /// CREATE's round trip took 480 us through the pool and 234 us on the worker, the
    /// kernel's nfsd 326). READ, WRITE and the listings still go to the pool: they move up
    /// to `max_io` or `max_dir` bytes (a listing stats every entry it sends), which would
    /// hold the worker's other connections up. (Removing or truncating a large file frees
    /// its pages on the worker.) A retransmission whose original is still in progress goes
    /// to the pool too, which waits for it (a worker never waits).
    pub fn set_on_worker_all(&self, on: bool) {
        self.on_worker_all.store(on, Ordering::Relaxed);
    }

    /// Whether procedure `proc_num` runs on the worker ([`Nfs::set_on_worker_all`]).
    pub fn on_worker_all(&self, proc_num: u32) -> bool {
        !matches!(
            proc_num,
            NFSPROC3_READ | NFSPROC3_WRITE | ops::proc::READDIR | ops::proc::READDIRPLUS
        ) && self.on_worker_all.load(Ordering::Relaxed)
    }

    /// Whether GETATTR, ACCESS and LOOKUP are tried on the polling worker first, from the
    /// kernel's caches only (default: yes); otherwise every procedure but NULL goes to an
    /// I/O thread.
    pub fn set_on_worker(&self, on: bool) {
        self.on_worker.store(on, Ordering::Relaxed);
    }

    /// Slows every I/O job down by `d` (tests: Calls stay in progress long enough for a
    /// connection to be lost under them).
    #[cfg(test)]
    pub fn set_io_delay(&self, d: Duration) {
        self.io_delay_us
            .store(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn io_delay(&self) -> Option<Duration> {
        match self.io_delay_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// One procedure to run on an I/O thread.
#[derive(Debug)]
pub struct Job {
    /// The Call's ticket.
    pub ticket: Deferred,
    /// Its XID (for the duplicate request cache).
    pub xid: u32,
    /// The NFSv3 procedure.
    pub proc_num: u32,
    /// Who calls.
    pub caller: Caller,
    /// A hash of the AUTH_SYS machine name (0 otherwise).
    pub client_hash: u64,
    /// The argument bytes.
    pub args: Args,
    /// READ's data buffer.
    pub bulk: Option<Bulk>,
    /// Where the answer goes: the completion channel of the connection's driver (set by the
    /// driver when it hands the job to the pool).
    pub reply: Option<ReplyTo>,
}

/// A connection driver's completion channel and the bell that wakes its worker when it
/// waits for events ([`rpcrdma_engine::worker::Workers::set_wait`]).
#[derive(Clone, Debug)]
pub struct ReplyTo {
    /// The channel the driver reads answers from.
    pub tx: Sender<Finished>,
    /// Rung after each answer is sent (none: the worker never waits for this connection).
    pub bell: Option<Arc<Bell>>,
}

impl ReplyTo {
    /// Sends the answer and wakes the worker if it waits; `false` if the driver is gone.
    pub fn send(&self, f: Finished) -> bool {
        let sent = self.tx.send(f).is_ok();
        if let Some(b) = &self.bell {
            b.ring();
        }
        sent
    }
}

/// How an I/O thread answered a Call.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// SUCCESS: the results bytes (inline part) and READ's data.
    Success {
        /// The XDR results (for READ: up to and including the data's length word).
        results: Arc<[u8]>,
        /// READ's data, if any.
        bulk: Option<BulkOut>,
    },
    /// GARBAGE_ARGS.
    Garbage,
    /// SYSTEM_ERR.
    SystemErr,
}

/// An answer on its way back to the connection's driver.
#[derive(Debug)]
pub struct Finished {
    /// The Call's ticket.
    pub ticket: Deferred,
    /// The answer.
    pub answer: Answer,
}

thread_local! {
    /// Jobs the handlers started during the current poll of a connection on this worker
    /// thread; the driver takes them right after the poll.
    static STARTED: RefCell<Vec<Job>> = const { RefCell::new(Vec::new()) };
}

/// Takes the jobs started on this thread for connection `id`, in the order they started.
pub(crate) fn take_started(id: u64, into: &mut Vec<Job>) {
    STARTED.with(|s| {
        let mut s = s.borrow_mut();
        if s.iter().all(|j| j.ticket.connection() == id) {
            into.append(&mut s);
            return;
        }
        // Never while one driver polls its connection and takes its jobs right after; kept
        // correct anyway (the other connection's driver takes its own).
        let mut k = 0;
        while k < s.len() {
            if s[k].ticket.connection() == id {
                into.push(s.remove(k));
            } else {
                k += 1;
            }
        }
    });
}

/// The ProcSpec of an NFSv3 procedure: the largest results from `ops::max_results`; READ's
/// data a DDP-eligible result, WRITE's a DDP-eligible argument (RFC 8267 §4.2).
pub fn spec(proc_num: u32, config: &Config) -> ProcSpec {
    ProcSpec {
        max_results: ops::max_results(proc_num, config),
        ddp_arg: proc_num == NFSPROC3_WRITE,
        ddp_results: u8::from(proc_num == NFSPROC3_READ),
    }
}

/// The dispatch table of NFS v3: NULL answered at once, every other procedure deferred to
/// the I/O pool.
pub fn dispatch(nfs: &Arc<Nfs>) -> Dispatch {
    let mut d = Dispatch::new();
    let n = Arc::clone(nfs);
    d.register(
        NFS_PROG,
        NFS_V3,
        NFSPROC3_NULL,
        spec(0, &nfs.config),
        move |_, _| {
            n.stats.calls[0].fetch_add(1, Ordering::Relaxed);
            n.stats.executed[0].fetch_add(1, Ordering::Relaxed);
            n.stats.answered.fetch_add(1, Ordering::Relaxed);
            Outcome::Success
        },
    );
    for p in 1..NFS3_PROCS as u32 {
        let n = Arc::clone(nfs);
        d.register(
            NFS_PROG,
            NFS_V3,
            p,
            spec(p, &nfs.config),
            move |req, resp| start(&n, req, resp),
        );
    }
    d
}

/// Who the Call runs as, from its credential as the export's options map it (RFC 5531
/// §10.1 AUTH_NONE: the anonymous user; Appendix A AUTH_SYS: its uid, gid and groups,
/// root squashed unless the export says not to, [`Policy::map`]), with the hash of the
/// machine name for the duplicate request cache. Other flavors run as the anonymous user
/// too; an AUTH_SYS body that does not decode is `None` (answered AUTH_ERROR /
/// AUTH_BADCRED).
fn caller_of(nfs: &Nfs, req: &Request<'_>) -> Option<(Caller, u64)> {
    match req.cred.flavor {
        AUTH_SYS => {
            let claimed = Caller::from_auth_sys(req.cred.body)?;
            let name = match req.cred.auth_sys() {
                Some(Ok(sys)) => sys.machinename,
                _ => &[],
            };
            let mapped = nfs.policy.map(claimed);
            if mapped.squashed {
                nfs.stats.squashed.fetch_add(1, Ordering::Relaxed);
            }
            Some((mapped.caller, drc::client_hash(name)))
        }
        _ => {
            nfs.stats.anonymous.fetch_add(1, Ordering::Relaxed);
            Some((nfs.policy.anonymous(), 0))
        }
    }
}

/// The handler of every procedure but NULL: starts its job and defers.
fn start(nfs: &Nfs, req: &Request<'_>, resp: &mut Response<'_>) -> Outcome {
    let p = req.proc_num as usize;
    if let Some(c) = nfs.stats.calls.get(p) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    let Some((caller, client_hash)) = caller_of(nfs, req) else {
        // An AUTH_SYS body that does not decode: a bad credential (RFC 5531 §9).
        nfs.stats.auth_errors.fetch_add(1, Ordering::Relaxed);
        return Outcome::AuthError(AuthStat::AUTH_BADCRED);
    };
    if ops::runs_cached(req.proc_num) && nfs.on_worker.load(Ordering::Relaxed) {
        if let Some(outcome) = on_worker(nfs, &caller, req, resp) {
            return outcome;
        }
    }
    let bulk = if req.proc_num == NFSPROC3_READ {
        let Some(n) = ops::read_count(req.args, &nfs.config) else {
            nfs.stats.garbage_args.fetch_add(1, Ordering::Relaxed);
            return Outcome::GarbageArgs;
        };
        Some(lend::bulk(
            resp,
            n.min(nfs.config.max_io) as usize,
            &nfs.stats,
        ))
    } else {
        None
    };
    let job = Job {
        ticket: resp.deferred(),
        xid: req.xid,
        proc_num: req.proc_num,
        caller,
        client_hash,
        args: lend::args(req, resp, &nfs.stats),
        bulk,
        reply: None,
    };
    STARTED.with(|s| s.borrow_mut().push(job));
    Outcome::Deferred
}

/// GETATTR, ACCESS or LOOKUP run on the worker from the kernel's caches (no thread hop:
/// on a client issuing one Call after another, the wake-up of an I/O thread is most of
/// the round trip); `None` when the caches were not enough and the Call goes to the pool.
fn on_worker(
    nfs: &Nfs,
    caller: &Caller,
    req: &Request<'_>,
    resp: &mut Response<'_>,
) -> Option<Outcome> {
    let max = ops::max_results(req.proc_num, &nfs.config) as usize;
    let out = resp.results().get_mut(..max)?;
    let stats = &nfs.stats;
    let Some(ran) = ops::run_cached(&nfs.export, caller, req.proc_num, req.args, out) else {
        stats.on_worker_missed.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    stats.on_worker.fetch_add(1, Ordering::Relaxed);
    if let Some(c) = stats.executed.get(req.proc_num as usize) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    stats.answered.fetch_add(1, Ordering::Relaxed);
    Some(match ran {
        Ok(done) => {
            if let Some(w) = out.get(..4) {
                stats.count_status(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
            }
            resp.set_results_len(done.results_len);
            Outcome::Success
        }
        Err(ops::Garbage) => {
            stats.garbage_args.fetch_add(1, Ordering::Relaxed);
            Outcome::GarbageArgs
        }
    })
}
