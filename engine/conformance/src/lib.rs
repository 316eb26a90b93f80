//! The fabric's behaviour, written once as tests generic over the [`Provider`], to run on
//! every provider: on the soft provider in `make test` (this crate's `tests/soft.rs`), on the
//! verbs provider over soft-RoCE in a QEMU guest (`rpcrdma conformance --provider verbs`).
//! Where the two disagree, the soft provider is wrong unless its module docs list the
//! difference as deliberate.
//!
//! The suite is a crate of its own, beside the engine rather than inside it: it uses the
//! engine's public fabric API only (`rpcrdma_engine::fabric`), so the library carries no test
//! scaffolding, and what the suite can check is what any user of the fabric can rely on.
//!
//! Two kinds of case:
//!
//! - **Pair cases** ([`cases`], [`run_all`]) drive both ends of connections made by an
//!   [`Env`] from one thread: post on one queue pair, poll the other. Their one list is
//!   [`for_each_case!`], which also gives each of them a `#[test]` in `tests/soft.rs`.
//! - **Split cases** ([`split_passive`], [`split_active`]) run each end in its own thread or
//!   process and talk only through the fabric; the active end also checks that the passive
//!   end's death flushes its requests.
//!
//! The environments: [`SoftEnv`] on the soft provider, [`VerbsEnv`] on the verbs provider
//! (behind the default `verbs` feature). The fabric latency probes
//! (`rpcrdma_bench::fabric_probes`) connect their queue pairs through them too.
//!
//! A case that needs an optional feature the device lacks (shared receive queues, when
//! `DeviceAttr::max_srq_wr` is 0) passes without running, saying so on stderr: the report
//! has no "skipped" outcome.
//!
//! Every wait has a deadline ([`Env::timeout`]); a lost completion is a failure, not a hang.
//! A verbs environment must connect with `rnr_retry_count = 0` and a short transport timeout
//! so that receiver-not-ready and peer-loss errors surface within it.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::fabric::{
    inc_rkey, Access, CmPrivateBytes, CompletionQueue, ConnRequest, ConnectError, Device, Listener,
    MemoryRegion, MemoryWindow, MwBind, Payload, PostError, ProtectionDomain, Provider, QpCaps,
    QpInit, QpState, QueuePair, RecvWr, RemoteAddr, SendOp, SendWr, Sge, SharedReceiveQueue, Wc,
    WcOpcode, WcStatus,
};

/// What the suite needs from its surroundings: a device, addresses to listen on, and a way to
/// connect two queue pairs.
pub trait Env<P: Provider>: Sync {
    /// The device every case allocates from.
    fn device(&self) -> &P::Device;

    /// A fresh address to listen on.
    fn fresh_addr(&self) -> P::Addr;

    /// How long any single wait may take.
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    /// How long to watch a completion queue to conclude that nothing arrives.
    fn quiet_period(&self) -> Duration {
        Duration::from_millis(20)
    }

    /// Connects a queue pair of `a` to one of `b` (by default through a listener on a fresh
    /// address, `a` connecting from a helper thread, `b` accepting).
    fn pair(&self, a: Side<'_, P>, b: Side<'_, P>) -> Result<(P::Qp, P::Qp), String> {
        let (qa, _, qb, _) = connect_pair(self, a, b, &[], &[])?;
        Ok((qa, qb))
    }
}

/// One end of a connection to make: its protection domain and queue pair attributes.
pub struct Side<'a, P: Provider> {
    /// The domain the queue pair is created in.
    pub pd: &'a P::Pd,
    /// The queue pair's completion queues and capacities.
    pub init: QpInit<'a, P>,
}

/// Connects `a` (client, sending `a_data`) to `b` (listener, accepting with `b_data`) through
/// a listener on a fresh address. Returns each queue pair with the private data it received.
pub fn connect_pair<P: Provider, E: Env<P> + ?Sized>(
    env: &E,
    a: Side<'_, P>,
    b: Side<'_, P>,
    a_data: &[u8],
    b_data: &[u8],
) -> Result<(P::Qp, CmPrivateBytes, P::Qp, CmPrivateBytes), String> {
    let addr = env.fresh_addr();
    let timeout = env.timeout();
    let mut listener =
        P::listen(env.device(), &addr).map_err(|e| format!("listen on {addr}: {e}"))?;
    thread::scope(|s| {
        let addr = &addr;
        let client = s.spawn(move || P::connect(a.pd, addr, a.init, a_data, timeout, |_| Ok(())));
        let served = listener.accept(b.pd, b.init, b_data, timeout, |_| Ok(()));
        let connected = client
            .join()
            .map_err(|_| "connecting thread panicked".to_string())?;
        let (qb, from_a) = served.map_err(|e| format!("accept: {e}"))?;
        let (qa, from_b) = connected.map_err(|e| format!("connect: {e}"))?;
        Ok((qa, from_b, qb, from_a))
    })
}

/// A named case of the suite.
pub struct Case<P: Provider, E: Env<P>> {
    /// The case's name.
    pub name: &'static str,
    /// Runs the case; `Err` describes the failure.
    pub run: fn(&E) -> Result<(), String>,
    _p: std::marker::PhantomData<fn() -> P>,
}

impl<P: Provider, E: Env<P>> Case<P, E> {
    const fn new(name: &'static str, run: fn(&E) -> Result<(), String>) -> Self {
        Case {
            name,
            run,
            _p: std::marker::PhantomData,
        }
    }
}

/// The result of one case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// `Ok`, or what went wrong.
    pub outcome: Result<(), String>,
    /// How long it took.
    pub elapsed: Duration,
}

/// The results of a run of the suite.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The provider's name.
    pub provider: &'static str,
    /// One entry per case run, in order.
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// Number of cases that passed.
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.outcome.is_ok()).count()
    }

    /// The cases that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CaseReport> {
        self.cases.iter().filter(|c| c.outcome.is_err())
    }

    /// Whether every case passed.
    pub fn is_success(&self) -> bool {
        self.failures().next().is_none()
    }

    fn record(&mut self, name: &'static str, f: impl FnOnce() -> Result<(), String>) {
        let start = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {msg}"))
        });
        self.cases.push(CaseReport {
            name,
            outcome,
            elapsed: start.elapsed(),
        });
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.cases {
            match &c.outcome {
                Ok(()) => writeln!(f, "ok     {} {} ({:?})", self.provider, c.name, c.elapsed)?,
                Err(e) => writeln!(f, "FAILED {} {}: {e}", self.provider, c.name)?,
            }
        }
        write!(
            f,
            "{} passed, {} failed",
            self.passed(),
            self.cases.len() - self.passed()
        )
    }
}

/// Calls the macro `$m` with the name of every pair case of the suite, in order, comma
/// separated: the suite's one list of pair cases. Each name is the case's function and its
/// [`Case::name`]. [`cases`] builds its list from it, and a test file gives each case a
/// `#[test]` of its own with it, so that a new case cannot be left out of either:
///
/// ```
/// macro_rules! count {
///     ($($case:ident),* $(,)?) => { [$(stringify!($case)),*].len() };
/// }
/// let n = rpcrdma_conformance::for_each_case!(count);
/// let cases = rpcrdma_conformance::cases::<
///     rpcrdma_engine::fabric::soft::Soft,
///     rpcrdma_conformance::SoftEnv,
/// >();
/// assert_eq!(n, cases.len());
/// ```
#[macro_export]
macro_rules! for_each_case {
    ($m:ident) => {
        $m! {
            connect_private_data,
            connect_reject,
            send_recv_order_and_byte_len,
            send_inline,
            send_with_imm,
            rnr_without_receive,
            receive_too_small,
            receive_into_unwritable_region,
            local_protection_error,
            read_into_unwritable_region,
            write_read_data,
            write_out_of_bounds,
            write_without_remote_write,
            read_without_remote_read,
            write_invalid_rkey,
            write_with_imm,
            send_with_invalidate,
            local_invalidate,
            local_invalidate_region_fails,
            mw_rkey_rotation,
            mw_bind_errors,
            mw_bound_to_its_qp,
            unsignaled_sends,
            sig_all,
            send_queue_depth,
            recv_queue_depth,
            too_many_sge,
            cq_overrun,
            disconnect_flushes,
            peer_destroyed_flushes,
            srq_shared_by_two_queue_pairs,
            srq_kept_when_a_queue_pair_disconnects,
            srq_limit_event,
            srq_own_receive_queue_refused,
            srq_rnr_when_empty,
        }
    };
}

/// Every pair case of the suite, in the order of [`for_each_case!`].
pub fn cases<P: Provider, E: Env<P>>() -> Vec<Case<P, E>> {
    // Each case is named after its function.
    macro_rules! case_list {
        ($($f:ident),* $(,)?) => {
            vec![$(Case::new(stringify!($f), $f::<P, E>)),*]
        };
    }
    for_each_case!(case_list)
}

/// Runs every pair case.
pub fn run_all<P: Provider, E: Env<P>>(env: &E) -> Report {
    run_matching(env, "")
}

/// Runs the pair cases whose name contains `filter`.
pub fn run_matching<P: Provider, E: Env<P>>(env: &E, filter: &str) -> Report {
    let mut report = Report {
        provider: P::NAME,
        cases: Vec::new(),
    };
    for case in cases::<P, E>() {
        if case.name.contains(filter) {
            report.record(case.name, || (case.run)(env));
        }
    }
    report
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

macro_rules! ensure_eq {
    ($got:expr, $want:expr, $what:expr) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            return Err(format!("{}: got {:?}, expected {:?}", $what, got, want));
        }
    }};
}

fn err<T: fmt::Display>(what: &str) -> impl FnOnce(T) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Polls `cq` until `n` completions arrived or `timeout` passed.
pub fn poll_n<P: Provider>(cq: &mut P::Cq, n: usize, timeout: Duration) -> Result<Vec<Wc>, String> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::with_capacity(n);
    let mut buf = [Wc::default(); 16];
    while out.len() < n {
        let want = (n - out.len()).min(buf.len());
        let k = cq.poll(&mut buf[..want]).map_err(err("poll"))?;
        out.extend_from_slice(&buf[..k]);
        if k == 0 {
            if Instant::now() > deadline {
                return Err(format!(
                    "timed out with {} of {n} completions: {out:?}",
                    out.len()
                ));
            }
            thread::yield_now();
        }
    }
    Ok(out)
}

/// Polls `cq` for one completion.
pub fn poll_one<P: Provider>(cq: &mut P::Cq, timeout: Duration) -> Result<Wc, String> {
    Ok(poll_n::<P>(cq, 1, timeout)?[0])
}

/// Checks that nothing arrives on `cq` for `period`.
pub fn expect_quiet<P: Provider>(cq: &mut P::Cq, period: Duration) -> Result<(), String> {
    let deadline = Instant::now() + period;
    let mut buf = [Wc::default(); 4];
    loop {
        let k = cq.poll(&mut buf).map_err(err("poll"))?;
        ensure!(k == 0, "unexpected completions {:?}", &buf[..k]);
        if Instant::now() > deadline {
            return Ok(());
        }
        thread::yield_now();
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            seed.wrapping_mul(31)
                .wrapping_add(i as u8)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

fn read_back<M: MemoryRegion>(mr: &M, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    mr.read_at(offset, &mut v);
    v
}

/// One host: a protection domain and its send and receive completion queues, and a shared
/// receive queue for the queue pairs of its sides if it was given one (declared before the
/// domain: destroyed before it, after the queue pairs).
struct Host<P: Provider> {
    scq: P::Cq,
    rcq: P::Cq,
    srq: Option<P::Srq>,
    pd: P::Pd,
}

impl<P: Provider> Host<P> {
    fn new<E: Env<P>>(env: &E, cq_depth: u32) -> Result<Self, String> {
        let dev = env.device();
        Ok(Host {
            scq: dev.create_cq(cq_depth).map_err(err("create send cq"))?,
            rcq: dev.create_cq(cq_depth).map_err(err("create recv cq"))?,
            srq: None,
            pd: dev.alloc_pd().map_err(err("alloc pd"))?,
        })
    }

    /// A queue pair on the host's queues, taking its receives from its shared receive queue
    /// if it has one.
    fn side(&self, caps: QpCaps) -> Side<'_, P> {
        let mut init = QpInit::new(&self.scq, &self.rcq, caps);
        init.srq = self.srq.as_ref();
        Side { pd: &self.pd, init }
    }

    fn region(&self, len: usize, access: Access) -> Result<P::Mr, String> {
        self.pd
            .alloc_region(len, access)
            .map_err(err("alloc region"))
    }
}

/// Two connected hosts. Queue pairs are declared first so they are dropped before the
/// completion queues and domains they use.
struct Pair<P: Provider> {
    qa: P::Qp,
    qb: P::Qp,
    a: Host<P>,
    b: Host<P>,
}

const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

impl<P: Provider> Pair<P> {
    fn new<E: Env<P>>(env: &E) -> Result<Self, String> {
        Self::with(env, QpCaps::default(), 64)
    }

    fn with<E: Env<P>>(env: &E, caps: QpCaps, cq_depth: u32) -> Result<Self, String> {
        let a = Host::new(env, cq_depth)?;
        let b = Host::new(env, cq_depth)?;
        let (qa, qb) = env.pair(a.side(caps), b.side(caps))?;
        Ok(Pair { qa, qb, a, b })
    }
}

fn post_send<P: Provider>(qp: &mut P::Qp, wr: &SendWr<'_, P>) -> Result<(), String> {
    qp.post_send(wr).map_err(err("post_send"))
}

fn post_recv<P: Provider>(qp: &mut P::Qp, wr_id: u64, sges: &[Sge]) -> Result<(), String> {
    qp.post_recv(&RecvWr::new(wr_id, sges))
        .map_err(err("post_recv"))
}

fn expect_status(wc: &Wc, wr_id: u64, status: WcStatus, what: &str) -> Result<(), String> {
    ensure!(
        wc.wr_id == wr_id && wc.status == status,
        "{what}: got {wc:?}, expected wr_id {wr_id} {status:?}"
    );
    Ok(())
}

/// Checks that the next completion on `cq` is `wr_id`'s, with `status`.
fn expect_next<P: Provider>(
    cq: &mut P::Cq,
    wr_id: u64,
    status: WcStatus,
    what: &str,
    timeout: Duration,
) -> Result<(), String> {
    expect_status(&poll_one::<P>(cq, timeout)?, wr_id, status, what)
}

/// Posts `wr` (signaled) on `qp` and checks that the next completion on `cq` is its own,
/// with `status`; returns it.
fn post_expect<P: Provider>(
    qp: &mut P::Qp,
    cq: &mut P::Cq,
    wr: &SendWr<'_, P>,
    status: WcStatus,
    what: &str,
    timeout: Duration,
) -> Result<Wc, String> {
    post_send::<P>(qp, wr)?;
    let wc = poll_one::<P>(cq, timeout)?;
    expect_status(&wc, wr.wr_id, status, what)?;
    Ok(wc)
}

/// Checks a queue pair is in the error state: a send posted now completes with a flush.
fn expect_flushing<P: Provider>(
    qp: &mut P::Qp,
    cq: &mut P::Cq,
    timeout: Duration,
    what: &str,
) -> Result<(), String> {
    let wr_id = 0xf1u64 << 56;
    post_send::<P>(qp, &SendWr::send(wr_id, &[]).signaled())?;
    let wc = poll_one::<P>(cq, timeout)
        .map_err(|e| format!("{what}: send on a flushing queue pair: {e}"))?;
    expect_status(&wc, wr_id, WcStatus::WrFlushErr, what)?;
    ensure_eq!(qp.state(), QpState::Err, format!("{what}: state"));
    Ok(())
}

mod one_sided;
mod queues;
mod sends;
mod soft_env;
mod split;
mod srq;
#[cfg(feature = "verbs")]
mod verbs_env;
mod windows;

use one_sided::*;
use queues::*;
use sends::*;
use srq::*;
use windows::*;

pub use soft_env::SoftEnv;
pub use split::{split_active, split_passive, SPLIT_ACTIVE_CASES, SPLIT_PASSIVE_CASE};
#[cfg(feature = "verbs")]
pub use verbs_env::VerbsEnv;
