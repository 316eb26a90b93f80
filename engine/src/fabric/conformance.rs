//! The fabric's behaviour, written once as tests generic over the [`Provider`], to run on
//! every provider: on the soft provider in `make test`, on the verbs provider over soft-RoCE
//! in a QEMU guest. Where the two disagree, the soft provider is wrong unless its module docs
//! list the difference as deliberate.
//!
//! Two kinds of case:
//!
//! - **Pair cases** ([`cases`], [`run_all`]) drive both ends of connections made by an
//!   [`Env`] from one thread: post on one queue pair, poll the other.
//! - **Split cases** ([`split_passive`], [`split_active`]) run each end in its own thread or
//!   process and talk only through the fabric; the active end also checks that the passive
//!   end's death flushes its requests.
//!
//! Every wait has a deadline ([`Env::timeout`]); a lost completion is a failure, not a hang.
//! A verbs environment must connect with `rnr_retry_count = 0` and a short transport timeout
//! so that receiver-not-ready and peer-loss errors surface within it.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::{
    inc_rkey, Access, CompletionQueue, ConnRequest, ConnectError, Device, Listener, MemoryRegion,
    MemoryWindow, MwBind, Payload, PostError, PrivateData, ProtectionDomain, Provider, QpCaps,
    QpInit, QpState, QueuePair, RecvWr, RemoteAddr, SendOp, SendWr, Sge, Wc, WcOpcode, WcStatus,
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
) -> Result<(P::Qp, PrivateData, P::Qp, PrivateData), String> {
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

/// Every pair case of the suite.
pub fn cases<P: Provider, E: Env<P>>() -> Vec<Case<P, E>> {
    // Each case is named after its function.
    macro_rules! cases {
        ($($f:ident),* $(,)?) => {
            vec![$(Case::new(stringify!($f), $f::<P, E>)),*]
        };
    }
    cases![
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
    ]
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

/// One host: a protection domain and its send and receive completion queues.
struct Host<P: Provider> {
    scq: P::Cq,
    rcq: P::Cq,
    pd: P::Pd,
}

impl<P: Provider> Host<P> {
    fn new<E: Env<P>>(env: &E, cq_depth: u32) -> Result<Self, String> {
        let dev = env.device();
        Ok(Host {
            scq: dev.create_cq(cq_depth).map_err(err("create send cq"))?,
            rcq: dev.create_cq(cq_depth).map_err(err("create recv cq"))?,
            pd: dev.alloc_pd().map_err(err("alloc pd"))?,
        })
    }

    fn side(&self, caps: QpCaps) -> Side<'_, P> {
        Side {
            pd: &self.pd,
            init: QpInit::new(&self.scq, &self.rcq, caps),
        }
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

fn connect_private_data<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let a = Host::new(env, 16)?;
    let b = Host::new(env, 16)?;
    let from_client: Vec<u8> = (1..=PrivateData::CONNECT_MAX as u8).collect();
    let from_server = b"\xf6\xab\x0e\x18\x01\x00\x03\x03 RFC 8797 accept".to_vec();
    let (_qa, got_a, _qb, got_b) = connect_pair(
        env,
        a.side(QpCaps::default()),
        b.side(QpCaps::default()),
        &from_client,
        &from_server,
    )?;
    for (got, sent, what) in [
        (got_b, &from_client, "connect request"),
        (got_a, &from_server, "accept"),
    ] {
        let bytes = got.as_bytes();
        ensure!(
            bytes.len() >= sent.len(),
            "{what} private data truncated: {got:?}"
        );
        ensure_eq!(
            &bytes[..sent.len()],
            &sent[..],
            format!("{what} private data")
        );
        ensure!(
            bytes[sent.len()..].iter().all(|&b| b == 0),
            "{what} private data padding not zero"
        );
    }
    let long = [0u8; PrivateData::CONNECT_MAX + 1];
    let r = P::connect(
        &a.pd,
        &env.fresh_addr(),
        a.side(QpCaps::default()).init,
        &long,
        env.timeout(),
        |_| Ok(()),
    );
    ensure!(
        matches!(r, Err(ConnectError::PrivateDataTooLong { .. })),
        "57 bytes of connect private data accepted: {:?}",
        r.err()
    );
    Ok(())
}

fn connect_reject<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let a = Host::new(env, 16)?;
    let b = Host::new(env, 16)?;
    let addr = env.fresh_addr();
    let timeout = env.timeout();
    let mut listener = P::listen(env.device(), &addr).map_err(err("listen"))?;
    let side = a.side(QpCaps::default());
    let (client, got) = thread::scope(|s| {
        let addr = &addr;
        let client =
            s.spawn(move || P::connect(side.pd, addr, side.init, b"please", timeout, |_| Ok(())));
        let got = listener.get_request(timeout).map(|req| {
            let pd = req.private_data();
            (req.reject(b"go away"), pd)
        });
        (client.join(), got)
    });
    let (rejected, request_data) = got.map_err(err("get_request"))?;
    rejected.map_err(err("reject"))?;
    ensure_eq!(
        &request_data.as_bytes()[..6],
        b"please",
        "request private data"
    );
    match client.map_err(|_| "client panicked".to_string())? {
        Err(ConnectError::Rejected(pd)) => {
            ensure_eq!(&pd.as_bytes()[..7], b"go away", "reject private data")
        }
        other => {
            return Err(format!(
                "connect after a reject: {:?}",
                other.map(|(_, pd)| pd)
            ))
        }
    }
    drop(b);
    Ok(())
}

fn send_recv_order_and_byte_len<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let src = p.a.region(8192, Access::LOCAL_WRITE)?;
    let dst = p.b.region(8192, Access::LOCAL_WRITE)?;
    let lens = [1usize, 7, 64, 100, 101, 200, 256, 0];
    for i in 0..lens.len() {
        // Each receive scatters over two pieces: 100 and 156 bytes.
        let base = i * 512;
        let sges = [dst.sge(base, 100), dst.sge(base + 256, 156)];
        post_recv::<P>(&mut p.qb, 100 + i as u64, &sges)?;
    }
    for (i, &len) in lens.iter().enumerate() {
        let data = pattern(i as u8, len);
        src.write_at(i * 512, &data);
        // Gather from two pieces.
        let first = len / 3;
        let sges = [
            src.sge(i * 512, first as u32),
            src.sge(i * 512 + first, (len - first) as u32),
        ];
        post_send::<P>(&mut p.qa, &SendWr::send(200 + i as u64, &sges).signaled())?;
    }
    let sent = poll_n::<P>(&mut p.a.scq, lens.len(), t)?;
    let got = poll_n::<P>(&mut p.b.rcq, lens.len(), t)?;
    for (i, &len) in lens.iter().enumerate() {
        expect_status(
            &sent[i],
            200 + i as u64,
            WcStatus::Success,
            "send completion",
        )?;
        ensure_eq!(sent[i].opcode, WcOpcode::Send, "send opcode");
        expect_status(
            &got[i],
            100 + i as u64,
            WcStatus::Success,
            "receive completion",
        )?;
        ensure_eq!(got[i].opcode, WcOpcode::Recv, "receive opcode");
        ensure_eq!(
            got[i].byte_len as usize,
            len,
            format!("byte_len of message {i}")
        );
        ensure_eq!(got[i].qp_num, p.qb.qp_num(), "receive qp_num");
        ensure_eq!(got[i].imm, None, "imm");
        ensure_eq!(got[i].invalidated_rkey, None, "invalidated rkey");
        let base = i * 512;
        let mut received = read_back(&dst, base, len.min(100));
        if len > 100 {
            received.extend(read_back(&dst, base + 256, len - 100));
        }
        ensure_eq!(
            received,
            pattern(i as u8, len),
            format!("payload of message {i}")
        );
    }
    expect_quiet::<P>(&mut p.b.scq, env.quiet_period())?;
    ensure_eq!(p.qa.state(), QpState::Rts, "sender state");
    ensure_eq!(p.qb.state(), QpState::Rts, "receiver state");
    Ok(())
}

fn send_inline<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    let max = p.qa.caps().max_inline_data as usize;
    ensure!(max >= 64, "max_inline_data {max} below the 64 asked");
    let data = pattern(9, 64);
    post_recv::<P>(&mut p.qb, 1, &[dst.sge(0, 4096)])?;
    post_send::<P>(&mut p.qa, &SendWr::send_inline(2, &data).signaled())?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        2,
        WcStatus::Success,
        "inline send",
    )?;
    let wc = poll_one::<P>(&mut p.b.rcq, t)?;
    expect_status(&wc, 1, WcStatus::Success, "inline receive")?;
    ensure_eq!(wc.byte_len, 64, "byte_len");
    ensure_eq!(read_back(&dst, 0, 64), data, "payload");
    let big = vec![0u8; max + 1];
    match p.qa.post_send(&SendWr::send_inline(3, &big)) {
        Err(PostError::InlineTooLarge { .. })
        | Err(PostError::InvalidWr(_))
        | Err(PostError::Os(_)) => {}
        other => return Err(format!("inline send of {} bytes: {other:?}", max + 1)),
    }
    let read = SendWr::<P>::new(
        4,
        SendOp::RdmaRead {
            remote: dst.remote(0),
        },
        Payload::Inline(&data),
    );
    ensure!(p.qa.post_send(&read).is_err(), "inline RDMA Read accepted");
    Ok(())
}

fn send_with_imm<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut p.qb, 1, &[dst.sge(0, 64)])?;
    let wr = SendWr::<P>::new(
        2,
        SendOp::SendWithImm { imm: 0x1234_5678 },
        Payload::Inline(b"imm"),
    );
    post_send::<P>(&mut p.qa, &wr)?;
    let wc = poll_one::<P>(&mut p.b.rcq, t)?;
    expect_status(&wc, 1, WcStatus::Success, "receive")?;
    ensure_eq!(wc.opcode, WcOpcode::Recv, "opcode");
    ensure_eq!(wc.imm, Some(0x1234_5678), "imm");
    ensure_eq!(wc.byte_len, 3, "byte_len");
    Ok(())
}

fn rnr_without_receive<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let own = p.a.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut p.qa, 77, &[own.sge(0, 64)])?;
    post_send::<P>(
        &mut p.qa,
        &SendWr::send_inline(1, b"nobody listens").signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        1,
        WcStatus::RnrRetryExcErr,
        "send without a receive",
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.rcq, t)?,
        77,
        WcStatus::WrFlushErr,
        "sender's own receive",
    )?;
    expect_flushing::<P>(&mut p.qa, &mut p.a.scq, t, "sender after RNR")
}

fn receive_too_small<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut p.qb, 1, &[dst.sge(0, 16)])?;
    post_recv::<P>(&mut p.qb, 2, &[dst.sge(64, 16)])?;
    let data = pattern(1, 64);
    post_send::<P>(&mut p.qa, &SendWr::send_inline(3, &data).signaled())?;
    let wc = poll_one::<P>(&mut p.b.rcq, t)?;
    // The InfiniBand specification (and the soft provider) says local length error; rxe
    // reports a remote invalid request error (newer kernels) or a local QP operation error
    // (Linux 6.1) at the receiver.
    ensure!(
        wc.wr_id == 1
            && matches!(
                wc.status,
                WcStatus::LocLenErr | WcStatus::RemInvReqErr | WcStatus::LocQpOpErr
            ),
        "receiver of an oversized message: {wc:?}"
    );
    expect_status(
        &poll_one::<P>(&mut p.b.rcq, t)?,
        2,
        WcStatus::WrFlushErr,
        "receiver's next receive",
    )?;
    // NICs, newer rxe and the soft provider: remote invalid request; rxe on Linux 6.1:
    // remote operational error.
    let wc = poll_one::<P>(&mut p.a.scq, t)?;
    ensure!(
        wc.wr_id == 3 && matches!(wc.status, WcStatus::RemInvReqErr | WcStatus::RemOpErr),
        "sender of an oversized message: {wc:?}"
    );
    expect_flushing::<P>(&mut p.qa, &mut p.a.scq, t, "sender")?;
    expect_flushing::<P>(&mut p.qb, &mut p.b.scq, t, "receiver")
}

fn receive_into_unwritable_region<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let ro = p.b.region(4096, Access::NONE)?;
    post_recv::<P>(&mut p.qb, 1, &[ro.sge(0, 64)])?;
    post_send::<P>(&mut p.qa, &SendWr::send_inline(2, b"x").signaled())?;
    let wc = poll_one::<P>(&mut p.b.rcq, t)?;
    ensure!(
        wc.wr_id == 1 && !wc.status.is_ok(),
        "receive into an unwritable region: {wc:?}"
    );
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        2,
        WcStatus::RemOpErr,
        "sender",
    )?;
    expect_flushing::<P>(&mut p.qb, &mut p.b.scq, t, "receiver")
}

fn local_protection_error<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut p.qb, 1, &[dst.sge(0, 4096)])?;
    // One byte past the end of the region.
    let bad = Sge::new(src.addr() + 4096 - 8, 9, src.lkey());
    post_send::<P>(&mut p.qa, &SendWr::send(2, &[bad]).signaled())?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        2,
        WcStatus::LocProtErr,
        "send from outside the region",
    )?;
    expect_flushing::<P>(&mut p.qa, &mut p.a.scq, t, "sender")?;
    // A wrong lkey on a fresh pair.
    let mut p = Pair::<P>::new(env)?;
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    let bad = Sge::new(src.addr(), 8, src.lkey() ^ 0x55);
    post_send::<P>(&mut p.qa, &SendWr::send(3, &[bad]).signaled())?;
    // NICs (and the soft provider) say local protection error; rxe on Linux 6.1 reports a
    // key it cannot find as a local QP operation error.
    let wc = poll_one::<P>(&mut p.a.scq, t)?;
    ensure!(
        wc.wr_id == 3 && matches!(wc.status, WcStatus::LocProtErr | WcStatus::LocQpOpErr),
        "send with a bad lkey: {wc:?}"
    );
    Ok(())
}

fn read_into_unwritable_region<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let ro = p.a.region(4096, Access::NONE)?;
    let remote = p.b.region(4096, ALL)?;
    post_send::<P>(
        &mut p.qa,
        &SendWr::read(1, &[ro.sge(0, 64)], remote.remote(0)).signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        1,
        WcStatus::LocProtErr,
        "read into an unwritable region",
    )
}

fn write_read_data<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let local = p.a.region(16384, Access::LOCAL_WRITE)?;
    let remote = p.b.region(16384, ALL)?;
    let data = pattern(42, 5000);
    local.write_at(0, &data);
    let sges = [local.sge(0, 1000), local.sge(1000, 4000)];
    post_send::<P>(
        &mut p.qa,
        &SendWr::write(1, &sges, remote.remote(3000)).signaled(),
    )?;
    let wc = poll_one::<P>(&mut p.a.scq, t)?;
    expect_status(&wc, 1, WcStatus::Success, "RDMA Write")?;
    ensure_eq!(wc.opcode, WcOpcode::RdmaWrite, "write opcode");
    ensure_eq!(
        read_back(&remote, 3000, 5000),
        data,
        "written bytes at the target"
    );
    ensure_eq!(
        read_back(&remote, 2999, 1),
        vec![0],
        "byte before the write"
    );
    ensure_eq!(read_back(&remote, 8000, 1), vec![0], "byte after the write");
    let back = [local.sge(8192, 2500), local.sge(12288, 2500)];
    post_send::<P>(
        &mut p.qa,
        &SendWr::read(2, &back, remote.remote(3000)).signaled(),
    )?;
    let wc = poll_one::<P>(&mut p.a.scq, t)?;
    expect_status(&wc, 2, WcStatus::Success, "RDMA Read")?;
    ensure_eq!(wc.opcode, WcOpcode::RdmaRead, "read opcode");
    let mut got = read_back(&local, 8192, 2500);
    got.extend(read_back(&local, 12288, 2500));
    ensure_eq!(got, data, "read bytes");
    // Zero-length operations need no valid key, as on verbs.
    post_send::<P>(
        &mut p.qa,
        &SendWr::write(3, &[], RemoteAddr::new(0, 0)).signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        3,
        WcStatus::Success,
        "zero-length write",
    )?;
    // One-sided: the target saw nothing.
    expect_quiet::<P>(&mut p.b.rcq, env.quiet_period())?;
    expect_quiet::<P>(&mut p.b.scq, env.quiet_period())
}

/// Runs a one-sided operation that must fail with a remote access error, then checks both
/// queue pairs are in the error state with everything flushed.
fn expect_access_error<P: Provider>(
    p: &mut Pair<P>,
    wr: &SendWr<'_, P>,
    t: Duration,
    what: &str,
) -> Result<(), String> {
    let a_own = p.a.region(4096, Access::LOCAL_WRITE)?;
    let b_own = p.b.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut p.qa, 900, &[a_own.sge(0, 64)])?;
    post_recv::<P>(&mut p.qb, 901, &[b_own.sge(0, 64)])?;
    post_recv::<P>(&mut p.qb, 902, &[b_own.sge(64, 64)])?;
    post_send::<P>(&mut p.qa, wr)?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        wr.wr_id,
        WcStatus::RemAccessErr,
        what,
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.rcq, t)?,
        900,
        WcStatus::WrFlushErr,
        "initiator's receive",
    )?;
    let flushed = poll_n::<P>(&mut p.b.rcq, 2, t)?;
    expect_status(
        &flushed[0],
        901,
        WcStatus::WrFlushErr,
        "target's first receive",
    )?;
    expect_status(
        &flushed[1],
        902,
        WcStatus::WrFlushErr,
        "target's second receive",
    )?;
    expect_flushing::<P>(&mut p.qa, &mut p.a.scq, t, "initiator")?;
    expect_flushing::<P>(&mut p.qb, &mut p.b.scq, t, "target")
}

fn write_out_of_bounds<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let local = p.a.region(8192, Access::LOCAL_WRITE)?;
    let remote = p.b.region(4096, ALL)?;
    let sges = [local.sge(0, 100)];
    let wr = SendWr::write(1, &sges, remote.remote(4000)).signaled();
    expect_access_error(
        &mut p,
        &wr,
        env.timeout(),
        "write past the end of the region",
    )
}

fn write_without_remote_write<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote =
        p.b.region(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let sges = [local.sge(0, 8)];
    let wr = SendWr::write(1, &sges, remote.remote(0)).signaled();
    expect_access_error(&mut p, &wr, env.timeout(), "write to a read-only region")
}

fn read_without_remote_read<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote =
        p.b.region(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sges = [local.sge(0, 8)];
    let wr = SendWr::read(1, &sges, remote.remote(0)).signaled();
    expect_access_error(&mut p, &wr, env.timeout(), "read from a write-only region")
}

fn write_invalid_rkey<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote = p.b.region(4096, ALL)?;
    let sges = [local.sge(0, 8)];
    let bad = RemoteAddr::new(remote.addr(), remote.rkey() ^ 0x0000_0100);
    let wr = SendWr::write(1, &sges, bad).signaled();
    expect_access_error(&mut p, &wr, env.timeout(), "write with an invalid rkey")
}

fn write_with_imm<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote = p.b.region(4096, ALL)?;
    let data = pattern(5, 100);
    local.write_at(0, &data);
    post_recv::<P>(&mut p.qb, 7, &[])?;
    let sges = [local.sge(0, 100)];
    post_send::<P>(
        &mut p.qa,
        &SendWr::write_with_imm(1, &sges, remote.remote(200), 0xdead_beef).signaled(),
    )?;
    let wc = poll_one::<P>(&mut p.a.scq, t)?;
    expect_status(&wc, 1, WcStatus::Success, "write with immediate")?;
    ensure_eq!(wc.opcode, WcOpcode::RdmaWrite, "initiator opcode");
    let wc = poll_one::<P>(&mut p.b.rcq, t)?;
    expect_status(&wc, 7, WcStatus::Success, "target receive")?;
    ensure_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm, "target opcode");
    ensure_eq!(wc.imm, Some(0xdead_beef), "imm");
    ensure_eq!(wc.byte_len, 100, "byte_len");
    ensure_eq!(read_back(&remote, 200, 100), data, "written bytes");
    // Without a posted receive it is receiver-not-ready.
    post_send::<P>(
        &mut p.qa,
        &SendWr::write_with_imm(2, &sges, remote.remote(0), 1).signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        2,
        WcStatus::RnrRetryExcErr,
        "write with immediate, no receive",
    )
}

/// A window's span: offset in its region, length, rights.
type Span = (usize, u64, Access);

/// Binds `mw` over `len` bytes at `offset` of `mr` through `qp`, signaled, and waits for it.
fn bind<P: Provider>(
    qp: &mut P::Qp,
    cq: &mut P::Cq,
    mw: &P::Mw,
    mr: &P::Mr,
    (offset, len, access): Span,
    t: Duration,
) -> Result<Wc, String> {
    let rkey = mw.next_rkey();
    let b = MwBind {
        mw,
        rkey,
        mr,
        addr: mr.addr() + offset as u64,
        len,
        access,
    };
    post_send::<P>(qp, &SendWr::bind_mw(0xb1, b).signaled())?;
    poll_one::<P>(cq, t)
}

fn bind_ok<P: Provider>(
    qp: &mut P::Qp,
    cq: &mut P::Cq,
    mw: &P::Mw,
    mr: &P::Mr,
    span: Span,
    t: Duration,
) -> Result<u32, String> {
    let before = mw.rkey();
    let wc = bind::<P>(qp, cq, mw, mr, span, t)?;
    expect_status(&wc, 0xb1, WcStatus::Success, "bind")?;
    ensure_eq!(wc.opcode, WcOpcode::BindMw, "bind opcode");
    ensure_eq!(mw.rkey(), inc_rkey(before), "window rkey after bind");
    Ok(mw.rkey())
}

const WIN: Access = Access::LOCAL_WRITE.union(Access::MW_BIND);

fn write_through<P: Provider>(
    qp: &mut P::Qp,
    cq: &mut P::Cq,
    src: &P::Mr,
    remote: RemoteAddr,
    wr_id: u64,
    t: Duration,
) -> Result<WcStatus, String> {
    let sges = [src.sge(0, 16)];
    post_send::<P>(qp, &SendWr::write(wr_id, &sges, remote).signaled())?;
    let wc = poll_one::<P>(cq, t)?;
    ensure_eq!(wc.wr_id, wr_id, "write completion wr_id");
    Ok(wc.status)
}

fn send_with_invalidate<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    src.write_at(0, &pattern(3, 16));
    let exposed = p.b.region(8192, WIN)?;
    let rbuf = p.b.region(4096, Access::LOCAL_WRITE)?;
    let mw = p.b.pd.alloc_mw().map_err(err("alloc_mw"))?;
    let rkey = bind_ok::<P>(
        &mut p.qb,
        &mut p.b.scq,
        &mw,
        &exposed,
        (4096, 4096, Access::REMOTE_WRITE),
        t,
    )?;
    let at = RemoteAddr::new(exposed.addr() + 4096, rkey);
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at, 1, t)?,
        WcStatus::Success,
        "write through the window"
    );
    ensure_eq!(
        read_back(&exposed, 4096, 16),
        pattern(3, 16),
        "bytes written through the window"
    );
    post_recv::<P>(&mut p.qb, 2, &[rbuf.sge(0, 64)])?;
    let reply = [src.sge(0, 16)];
    post_send::<P>(
        &mut p.qa,
        &SendWr::send_with_inv(3, &reply, rkey).signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        3,
        WcStatus::Success,
        "send with invalidate",
    )?;
    let wc = poll_one::<P>(&mut p.b.rcq, t)?;
    expect_status(&wc, 2, WcStatus::Success, "receive of send with invalidate")?;
    ensure_eq!(
        wc.invalidated_rkey,
        Some(rkey),
        "invalidated rkey in the completion"
    );
    ensure_eq!(wc.byte_len, 16, "byte_len");
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at, 4, t)?,
        WcStatus::RemAccessErr,
        "write through the invalidated window"
    );
    Ok(())
}

fn local_invalidate<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    let exposed = p.b.region(8192, WIN)?;
    let mw = p.b.pd.alloc_mw().map_err(err("alloc_mw"))?;
    let rkey = bind_ok::<P>(
        &mut p.qb,
        &mut p.b.scq,
        &mw,
        &exposed,
        (0, 8192, Access::REMOTE_WRITE),
        t,
    )?;
    let at = RemoteAddr::new(exposed.addr(), rkey);
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at, 1, t)?,
        WcStatus::Success,
        "write before"
    );
    post_send::<P>(&mut p.qb, &SendWr::local_inv(2, rkey).signaled())?;
    let wc = poll_one::<P>(&mut p.b.scq, t)?;
    expect_status(&wc, 2, WcStatus::Success, "local invalidate")?;
    ensure_eq!(wc.opcode, WcOpcode::LocalInv, "local invalidate opcode");
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at, 3, t)?,
        WcStatus::RemAccessErr,
        "write after local invalidate"
    );
    Ok(())
}

fn local_invalidate_region_fails<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let mr = p.b.region(4096, ALL)?;
    // Only windows (and fast-registered regions) can be invalidated.
    post_send::<P>(&mut p.qb, &SendWr::local_inv(1, mr.rkey()).signaled())?;
    let wc = poll_one::<P>(&mut p.b.scq, t)?;
    ensure!(
        wc.wr_id == 1 && !wc.status.is_ok(),
        "local invalidate of a region: {wc:?}"
    );
    expect_flushing::<P>(
        &mut p.qb,
        &mut p.b.scq,
        t,
        "after a failed local invalidate",
    )
}

fn mw_rkey_rotation<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    let dst = p.a.region(4096, Access::LOCAL_WRITE)?;
    let exposed = p.b.region(16384, WIN)?;
    let mw = p.b.pd.alloc_mw().map_err(err("alloc_mw"))?;
    let k0 = mw.rkey();
    let k1 = bind_ok::<P>(
        &mut p.qb,
        &mut p.b.scq,
        &mw,
        &exposed,
        (4096, 4096, Access::REMOTE_WRITE | Access::REMOTE_READ),
        t,
    )?;
    ensure_eq!(k1 & !0xff, k0 & !0xff, "window index kept by the bind");
    ensure!(
        k1 & 0xff != k0 & 0xff,
        "low byte not rotated: {k0:#x} -> {k1:#x}"
    );
    src.write_at(0, &pattern(8, 16));
    let at1 = RemoteAddr::new(exposed.addr() + 4096, k1);
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at1, 1, t)?,
        WcStatus::Success,
        "write via window"
    );
    post_send::<P>(
        &mut p.qa,
        &SendWr::read(2, &[dst.sge(0, 16)], at1).signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        2,
        WcStatus::Success,
        "read via window",
    )?;
    ensure_eq!(
        read_back(&dst, 0, 16),
        pattern(8, 16),
        "bytes read via window"
    );
    post_send::<P>(&mut p.qb, &SendWr::local_inv(3, k1).signaled())?;
    expect_status(
        &poll_one::<P>(&mut p.b.scq, t)?,
        3,
        WcStatus::Success,
        "invalidate",
    )?;
    let k2 = bind_ok::<P>(
        &mut p.qb,
        &mut p.b.scq,
        &mw,
        &exposed,
        (8192, 4096, Access::REMOTE_READ),
        t,
    )?;
    ensure_eq!(k2, inc_rkey(k1), "second bind's rkey");
    let at2 = RemoteAddr::new(exposed.addr() + 8192, k2);
    post_send::<P>(
        &mut p.qa,
        &SendWr::read(4, &[dst.sge(0, 16)], at2).signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        4,
        WcStatus::Success,
        "read via rebound window",
    )?;
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at1, 5, t)?,
        WcStatus::RemAccessErr,
        "write with the window's previous rkey"
    );
    Ok(())
}

fn mw_bind_errors<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let t = env.timeout();
    type Variant = (&'static str, usize, u64, Access, Access, bool);
    // (what, offset, len, region rights, window rights, bind once before)
    let variants: [Variant; 4] = [
        (
            "rebind while bound",
            0,
            4096,
            WIN,
            Access::REMOTE_READ,
            true,
        ),
        (
            "span outside the region",
            4096,
            8192,
            WIN,
            Access::REMOTE_READ,
            false,
        ),
        (
            "region without MW_BIND",
            0,
            4096,
            Access::LOCAL_WRITE,
            Access::REMOTE_READ,
            false,
        ),
        (
            "writable window over a region without local write",
            0,
            4096,
            Access::MW_BIND,
            Access::REMOTE_WRITE,
            false,
        ),
    ];
    for (what, offset, len, mr_access, mw_access, twice) in variants {
        let mut p = Pair::<P>::new(env)?;
        let mr = p.b.region(8192, mr_access)?;
        let mw = p.b.pd.alloc_mw().map_err(err("alloc_mw"))?;
        if twice {
            bind_ok::<P>(
                &mut p.qb,
                &mut p.b.scq,
                &mw,
                &mr,
                (0, 4096, Access::REMOTE_READ),
                t,
            )?;
        }
        let wc = bind::<P>(
            &mut p.qb,
            &mut p.b.scq,
            &mw,
            &mr,
            (offset, len, mw_access),
            t,
        )?;
        expect_status(&wc, 0xb1, WcStatus::MwBindErr, what)?;
        expect_flushing::<P>(&mut p.qb, &mut p.b.scq, t, what)?;
    }
    // A zero-length bind is refused when posted, by both providers (verbs itself would bind
    // a window that grants nothing); the queue pair stays usable.
    let mut p = Pair::<P>::new(env)?;
    let mr = p.b.region(8192, WIN)?;
    let mw = p.b.pd.alloc_mw().map_err(err("alloc_mw"))?;
    let b = MwBind {
        mw: &mw,
        rkey: mw.next_rkey(),
        mr: &mr,
        addr: mr.addr(),
        len: 0,
        access: Access::REMOTE_READ,
    };
    ensure_eq!(
        p.qb.post_send(&SendWr::bind_mw(0xb2, b).signaled()),
        Err(PostError::InvalidWr("zero-length window bind")),
        "zero-length bind"
    );
    bind_ok::<P>(
        &mut p.qb,
        &mut p.b.scq,
        &mw,
        &mr,
        (0, 4096, Access::REMOTE_READ),
        t,
    )?;
    Ok(())
}

fn mw_bound_to_its_qp<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let t = env.timeout();
    let mut a1 = Host::<P>::new(env, 64)?;
    let mut a2 = Host::<P>::new(env, 64)?;
    let mut b = Host::<P>::new(env, 64)?;
    let caps = QpCaps::default();
    let (mut q1, mut qb1) = env.pair(a1.side(caps), b.side(caps))?;
    let (mut q2, _qb2) = env.pair(a2.side(caps), b.side(caps))?;
    let src1 = a1.region(4096, Access::LOCAL_WRITE)?;
    let src2 = a2.region(4096, Access::LOCAL_WRITE)?;
    let exposed = b.region(4096, WIN)?;
    let mw = b.pd.alloc_mw().map_err(err("alloc_mw"))?;
    let rkey = bind_ok::<P>(
        &mut qb1,
        &mut b.scq,
        &mw,
        &exposed,
        (0, 4096, Access::REMOTE_WRITE),
        t,
    )?;
    let at = RemoteAddr::new(exposed.addr(), rkey);
    ensure_eq!(
        write_through::<P>(&mut q1, &mut a1.scq, &src1, at, 1, t)?,
        WcStatus::Success,
        "write on the binding queue pair"
    );
    ensure_eq!(
        write_through::<P>(&mut q2, &mut a2.scq, &src2, at, 2, t)?,
        WcStatus::RemAccessErr,
        "write through a type 2 window on another queue pair"
    );
    Ok(())
}

fn unsignaled_sends<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    for i in 0..4 {
        post_recv::<P>(&mut p.qb, i, &[dst.sge(i as usize * 64, 64)])?;
    }
    for i in 0..3 {
        post_send::<P>(&mut p.qa, &SendWr::send_inline(10 + i, b"quiet"))?;
    }
    let got = poll_n::<P>(&mut p.b.rcq, 3, t)?;
    for (i, wc) in got.iter().enumerate() {
        expect_status(
            wc,
            i as u64,
            WcStatus::Success,
            "receive of an unsignaled send",
        )?;
    }
    expect_quiet::<P>(&mut p.a.scq, env.quiet_period())?;
    post_send::<P>(&mut p.qa, &SendWr::send_inline(13, b"loud").signaled())?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        13,
        WcStatus::Success,
        "signaled send",
    )?;
    poll_one::<P>(&mut p.b.rcq, t)?;
    expect_quiet::<P>(&mut p.a.scq, env.quiet_period())
}

fn sig_all<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let t = env.timeout();
    let mut a = Host::<P>::new(env, 16)?;
    let b = Host::<P>::new(env, 16)?;
    let mut side = a.side(QpCaps::default());
    side.init.sig_all = true;
    let (mut qa, mut qb) = env.pair(side, b.side(QpCaps::default()))?;
    let dst = b.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut qb, 1, &[dst.sge(0, 64)])?;
    post_send::<P>(&mut qa, &SendWr::send_inline(2, b"all"))?;
    expect_status(
        &poll_one::<P>(&mut a.scq, t)?,
        2,
        WcStatus::Success,
        "unsignaled send with sig_all",
    )
}

fn send_queue_depth<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let caps = QpCaps {
        max_send_wr: 8,
        ..QpCaps::default()
    };
    let mut p = Pair::<P>::with(env, caps, 64)?;
    let t = env.timeout();
    let depth = p.qa.caps().max_send_wr as u64;
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote = p.b.region(4096, ALL)?;
    let sges = [src.sge(0, 8)];
    for i in 0..depth {
        let mut wr = SendWr::write(i, &sges, remote.remote(0));
        if i == depth - 1 {
            wr = wr.signaled();
        }
        post_send::<P>(&mut p.qa, &wr)?;
    }
    match p
        .qa
        .post_send(&SendWr::write(depth, &sges, remote.remote(0)).signaled())
    {
        Err(PostError::QueueFull) => {}
        other => return Err(format!("post past the send queue depth {depth}: {other:?}")),
    }
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        depth - 1,
        WcStatus::Success,
        "last write",
    )?;
    post_send::<P>(
        &mut p.qa,
        &SendWr::write(depth + 1, &sges, remote.remote(0)).signaled(),
    )?;
    expect_status(
        &poll_one::<P>(&mut p.a.scq, t)?,
        depth + 1,
        WcStatus::Success,
        "write after polling",
    )
}

fn recv_queue_depth<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let caps = QpCaps {
        max_recv_wr: 8,
        ..QpCaps::default()
    };
    let mut p = Pair::<P>::with(env, caps, 64)?;
    let t = env.timeout();
    let depth = p.qb.caps().max_recv_wr as u64;
    let dst = p.b.region(65536, Access::LOCAL_WRITE)?;
    for i in 0..depth {
        post_recv::<P>(&mut p.qb, i, &[dst.sge(i as usize * 64, 64)])?;
    }
    match p.qb.post_recv(&RecvWr::new(depth, &[dst.sge(0, 64)])) {
        Err(PostError::QueueFull) => {}
        other => {
            return Err(format!(
                "post past the receive queue depth {depth}: {other:?}"
            ))
        }
    }
    post_send::<P>(&mut p.qa, &SendWr::send_inline(1, b"one").signaled())?;
    poll_one::<P>(&mut p.a.scq, t)?;
    expect_status(
        &poll_one::<P>(&mut p.b.rcq, t)?,
        0,
        WcStatus::Success,
        "first receive",
    )?;
    post_recv::<P>(&mut p.qb, depth, &[dst.sge(0, 64)])
}

fn too_many_sge<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    let n = p.qa.caps().max_send_sge as usize + 1;
    let sges = vec![src.sge(0, 1); n];
    ensure!(
        p.qa.post_send(&SendWr::send(1, &sges)).is_err(),
        "send with {n} elements accepted"
    );
    let m = p.qb.caps().max_recv_sge as usize + 1;
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    let rsges = vec![dst.sge(0, 1); m];
    ensure!(
        p.qb.post_recv(&RecvWr::new(1, &rsges)).is_err(),
        "receive with {m} elements accepted"
    );
    Ok(())
}

fn cq_overrun<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let t = env.timeout();
    let a = Host::<P>::new(env, 256)?;
    let dev = env.device();
    let mut rcq = dev.create_cq(4).map_err(err("create cq"))?;
    let scq = dev.create_cq(16).map_err(err("create cq"))?;
    let pd = dev.alloc_pd().map_err(err("alloc pd"))?;
    let depth = rcq.depth();
    let n = depth + 4;
    let caps = QpCaps {
        max_send_wr: n + 4,
        max_recv_wr: n,
        ..QpCaps::default()
    };
    let (mut qa, mut qb) = env.pair(
        a.side(caps),
        Side {
            pd: &pd,
            init: QpInit::new(&scq, &rcq, caps),
        },
    )?;
    let dst = pd
        .alloc_region(4096, Access::LOCAL_WRITE)
        .map_err(err("alloc region"))?;
    for i in 0..n {
        post_recv::<P>(&mut qb, u64::from(i), &[dst.sge(0, 64)])?;
    }
    for i in 0..n {
        post_send::<P>(&mut qa, &SendWr::send_inline(u64::from(i), b"flood"))?;
    }
    let deadline = Instant::now() + t;
    let mut buf = [Wc::default(); 1];
    loop {
        match rcq.poll(&mut buf[..0]) {
            Err(super::CqError::Overrun) => return Ok(()),
            Err(e) => return Err(format!("poll: {e}")),
            Ok(_) => {}
        }
        ensure!(
            Instant::now() < deadline,
            "{n} completions into a queue of {depth} not reported as an overrun"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

fn disconnect_flushes<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    for i in 0..3 {
        post_recv::<P>(&mut p.qb, i, &[dst.sge(0, 64)])?;
    }
    p.qa.disconnect();
    let got = poll_n::<P>(&mut p.b.rcq, 3, t)?;
    for (i, wc) in got.iter().enumerate() {
        expect_status(
            wc,
            i as u64,
            WcStatus::WrFlushErr,
            "receive after the peer disconnected",
        )?;
    }
    expect_flushing::<P>(&mut p.qb, &mut p.b.scq, t, "after the peer disconnected")?;
    expect_flushing::<P>(&mut p.qa, &mut p.a.scq, t, "after disconnecting")?;
    // A receive posted in the error state is flushed too (IBA o10-2.2). rxe cannot: its
    // user-space post_recv writes the queue without entering the kernel, and nothing
    // flushes it after the error. Documented difference; the engine never waits for work
    // posted after an error.
    if P::NAME == "verbs" && env.device().name().starts_with("rxe") {
        return Ok(());
    }
    post_recv::<P>(&mut p.qb, 9, &[dst.sge(0, 64)])?;
    expect_status(
        &poll_one::<P>(&mut p.b.rcq, t)
            .map_err(|e| format!("receive posted after the error: {e}"))?,
        9,
        WcStatus::WrFlushErr,
        "receive posted after the error",
    )
}

fn peer_destroyed_flushes<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let Pair {
        qa,
        mut qb,
        a,
        mut b,
    } = Pair::<P>::new(env)?;
    let t = env.timeout();
    let dst = b.region(4096, Access::LOCAL_WRITE)?;
    for i in 0..2 {
        post_recv::<P>(&mut qb, i, &[dst.sge(0, 64)])?;
    }
    drop(qa);
    drop(a);
    let got = poll_n::<P>(&mut b.rcq, 2, t)?;
    for (i, wc) in got.iter().enumerate() {
        expect_status(
            wc,
            i as u64,
            WcStatus::WrFlushErr,
            "receive after the peer was destroyed",
        )?;
    }
    expect_flushing::<P>(&mut qb, &mut b.scq, t, "after the peer was destroyed")
}

// ---------------------------------------------------------------------------------------
// Split cases: each end in its own thread or process.
// ---------------------------------------------------------------------------------------

const SPLIT_MAGIC: &[u8; 4] = b"ECHO";
const SPLIT_BUF: usize = 4096;
const SPLIT_RECVS: usize = 16;
const SPLIT_EXPOSED: usize = 65536;

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The passive end of the split cases: connects to `addr`, advertises a remotely readable
/// and writable region in its private data, then serves until told to stop, until its
/// connection ends (which is success), until `stop` is set (it then drops its queue pair
/// without a word, like a peer that dies) or until `timeout` passes without a message. It
/// answers `E…` by echoing the message, `C<off><len>` with a checksum of that span of its
/// region, `Q` by returning.
pub fn split_passive<P: Provider>(
    device: &P::Device,
    addr: &P::Addr,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<(), String> {
    let mut cq = device.create_cq(64).map_err(err("create cq"))?;
    let pd = device.alloc_pd().map_err(err("alloc pd"))?;
    let bufs = pd
        .alloc_region(2 * SPLIT_RECVS * SPLIT_BUF, Access::LOCAL_WRITE)
        .map_err(err("alloc region"))?;
    let exposed = pd
        .alloc_region(SPLIT_EXPOSED, ALL)
        .map_err(err("alloc region"))?;
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: SPLIT_RECVS as u32,
        ..QpCaps::default()
    };
    let mut data = Vec::from(&SPLIT_MAGIC[..]);
    data.extend(exposed.addr().to_be_bytes());
    data.extend(exposed.rkey().to_be_bytes());
    data.extend((SPLIT_EXPOSED as u32).to_be_bytes());
    let (mut qp, _) = P::connect(
        &pd,
        addr,
        QpInit::new(&cq, &cq, caps),
        &data,
        timeout,
        |qp| {
            for i in 0..SPLIT_RECVS {
                qp.post_recv(&RecvWr::new(
                    i as u64,
                    &[bufs.sge(i * SPLIT_BUF, SPLIT_BUF as u32)],
                ))?;
            }
            Ok(())
        },
    )
    .map_err(err("connect"))?;
    let mut wc = [Wc::default(); 16];
    let mut last = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let n = match cq.poll(&mut wc) {
            Ok(n) => n,
            Err(e) => return Err(format!("poll: {e}")),
        };
        if n == 0 {
            if last.elapsed() > timeout {
                return Err("no message before the timeout".into());
            }
            thread::yield_now();
            continue;
        }
        last = Instant::now();
        for c in &wc[..n] {
            if c.status == WcStatus::WrFlushErr {
                return Ok(());
            }
            ensure!(c.status.is_ok(), "passive end: {c:?}");
            if !c.is_recv() {
                continue;
            }
            let slot = c.wr_id as usize;
            let off = slot * SPLIT_BUF;
            let msg = read_back(&bufs, off, c.byte_len as usize);
            let reply_off = (SPLIT_RECVS + slot) * SPLIT_BUF;
            let reply: Vec<u8> = match msg.first() {
                Some(b'E') => msg.clone(),
                Some(b'C') if msg.len() == 9 => {
                    let o = u32::from_be_bytes(msg[1..5].try_into().unwrap_or_default()) as usize;
                    let l = u32::from_be_bytes(msg[5..9].try_into().unwrap_or_default()) as usize;
                    ensure!(
                        o + l <= SPLIT_EXPOSED,
                        "checksum request outside the region"
                    );
                    let mut r = vec![b'c'];
                    r.extend(fnv(&read_back(&exposed, o, l)).to_be_bytes());
                    r
                }
                Some(b'Q') => return Ok(()),
                _ => return Err(format!("passive end: unknown message {msg:?}")),
            };
            qp.post_recv(&RecvWr::new(
                slot as u64,
                &[bufs.sge(off, SPLIT_BUF as u32)],
            ))
            .map_err(err("repost"))?;
            bufs.write_at(reply_off, &reply);
            let sges = [bufs.sge(reply_off, reply.len() as u32)];
            qp.post_send(&SendWr::send(1000 + slot as u64, &sges).signaled())
                .map_err(err("reply"))?;
        }
    }
}

/// The active end of the split cases: accepts the passive end's connection on `listener`,
/// then runs `split_send_recv` (pipelined echoes in order, with their lengths and bytes),
/// `split_write_read` (RDMA Write into the passive end's memory, checked by a checksum it
/// computes itself, then RDMA Read back) and `split_peer_death` (calls `kill_peer`, then
/// expects every outstanding request to flush before the timeout).
pub fn split_active<P: Provider, K: FnOnce()>(
    device: &P::Device,
    listener: &mut P::Listener,
    timeout: Duration,
    kill_peer: K,
) -> Report {
    let mut report = Report {
        provider: P::NAME,
        cases: Vec::new(),
    };
    let setup = (|| -> Result<_, String> {
        let cq = device.create_cq(128).map_err(err("create cq"))?;
        let pd = device.alloc_pd().map_err(err("alloc pd"))?;
        let caps = QpCaps {
            max_send_wr: 64,
            max_recv_wr: 32,
            ..QpCaps::default()
        };
        let bufs = pd
            .alloc_region(64 * SPLIT_BUF, ALL)
            .map_err(err("alloc region"))?;
        let (qp, peer) = listener
            .accept(&pd, QpInit::new(&cq, &cq, caps), b"active", timeout, |qp| {
                for i in 0..32u64 {
                    qp.post_recv(&RecvWr::new(
                        i,
                        &[bufs.sge(i as usize * SPLIT_BUF, SPLIT_BUF as u32)],
                    ))?;
                }
                Ok(())
            })
            .map_err(err("accept"))?;
        let d = peer.as_bytes();
        ensure!(
            d.len() >= 20 && &d[..4] == SPLIT_MAGIC,
            "passive end's private data: {peer:?}"
        );
        let remote = RemoteAddr::new(
            u64::from_be_bytes(d[4..12].try_into().unwrap_or_default()),
            u32::from_be_bytes(d[12..16].try_into().unwrap_or_default()),
        );
        Ok((qp, cq, pd, bufs, remote))
    })();
    let (mut qp, mut cq, pd, bufs, remote) = match setup {
        Ok(s) => s,
        Err(e) => {
            report.record("split_setup", || Err(e));
            return report;
        }
    };
    let mut posted_recvs: Vec<u64> = (0..32).collect();
    let mut next_send = 0u64;

    // Sends `msg` from send buffer `slot` (32..64), signaled.
    let mut send = |qp: &mut P::Qp, msg: &[u8], slot: usize| -> Result<u64, String> {
        let off = slot * SPLIT_BUF;
        bufs.write_at(off, msg);
        next_send += 1;
        qp.post_send(
            &SendWr::send(1 << 32 | next_send, &[bufs.sge(off, msg.len() as u32)]).signaled(),
        )
        .map_err(err("post_send"))?;
        Ok(1 << 32 | next_send)
    };

    report.record("split_send_recv", || {
        let lens = [1usize, 9, 64, 333, 1000, 4096, 2, 17];
        let mut wanted = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            let mut msg = pattern(i as u8, len);
            msg[0] = b'E';
            send(&mut qp, &msg, 32 + i)?;
            wanted.push(msg);
        }
        let got = poll_n::<P>(&mut cq, 2 * lens.len(), timeout)?;
        let mut replies = got.iter().filter(|c| c.is_recv());
        for (i, want) in wanted.iter().enumerate() {
            let c = replies.next().ok_or("missing echo")?;
            ensure!(c.status.is_ok(), "echo {i}: {c:?}");
            ensure_eq!(
                c.byte_len as usize,
                want.len(),
                format!("echo {i} byte_len")
            );
            ensure_eq!(
                read_back(&bufs, c.wr_id as usize * SPLIT_BUF, want.len()),
                *want,
                format!("echo {i}")
            );
            posted_recvs.retain(|&r| r != c.wr_id);
            qp.post_recv(&RecvWr::new(
                c.wr_id,
                &[bufs.sge(c.wr_id as usize * SPLIT_BUF, SPLIT_BUF as u32)],
            ))
            .map_err(err("repost"))?;
            posted_recvs.push(c.wr_id);
        }
        ensure!(got.iter().all(|c| c.status.is_ok()), "completions: {got:?}");
        Ok(())
    });

    report.record("split_write_read", || {
        let data = pattern(77, 20000);
        let off = 40 * SPLIT_BUF;
        bufs.write_at(off, &data);
        let sges = [bufs.sge(off, 12000), bufs.sge(off + 12000, 8000)];
        qp.post_send(&SendWr::write(7, &sges, remote.offset(1234)).signaled())
            .map_err(err("write"))?;
        expect_status(
            &poll_one::<P>(&mut cq, timeout)?,
            7,
            WcStatus::Success,
            "RDMA Write",
        )?;
        let mut req = vec![b'C'];
        req.extend(1234u32.to_be_bytes());
        req.extend(20000u32.to_be_bytes());
        send(&mut qp, &req, 33)?;
        let got = poll_n::<P>(&mut cq, 2, timeout)?;
        let c = got
            .iter()
            .find(|c| c.is_recv())
            .ok_or("no checksum reply")?;
        ensure!(c.status.is_ok() && c.byte_len == 9, "checksum reply: {c:?}");
        let reply = read_back(&bufs, c.wr_id as usize * SPLIT_BUF, 9);
        ensure_eq!(
            reply[1..].to_vec(),
            fnv(&data).to_be_bytes().to_vec(),
            "checksum computed by the peer"
        );
        qp.post_recv(&RecvWr::new(
            c.wr_id,
            &[bufs.sge(c.wr_id as usize * SPLIT_BUF, SPLIT_BUF as u32)],
        ))
        .map_err(err("repost"))?;
        let back = 50 * SPLIT_BUF;
        let sges = [bufs.sge(back, 5000), bufs.sge(back + 5000, 15000)];
        qp.post_send(&SendWr::read(8, &sges, remote.offset(1234)).signaled())
            .map_err(err("read"))?;
        expect_status(
            &poll_one::<P>(&mut cq, timeout)?,
            8,
            WcStatus::Success,
            "RDMA Read",
        )?;
        ensure_eq!(read_back(&bufs, back, 20000), data, "bytes read back");
        Ok(())
    });

    report.record("split_peer_death", || {
        kill_peer();
        let outstanding = posted_recvs.len();
        let got = poll_n::<P>(&mut cq, outstanding, timeout)?;
        for c in &got {
            ensure_eq!(
                c.status,
                WcStatus::WrFlushErr,
                format!("receive {} after the peer died", c.wr_id)
            );
        }
        post_send::<P>(&mut qp, &SendWr::send_inline(99, b"anyone?").signaled())?;
        let c = poll_one::<P>(&mut cq, timeout)?;
        ensure!(
            c.wr_id == 99 && !c.status.is_ok(),
            "send after the peer died: {c:?}"
        );
        Ok(())
    });
    drop(qp);
    drop(pd);
    report
}
