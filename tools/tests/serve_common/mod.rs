//! Test infrastructure shared by the tests that run hostile peers against the `rpcrdma serve`
//! PROCESS (`serve_hostile/`, `serve_fuzz/`; each includes this module from its `main.rs`
//! with `#[path = "../serve_common/mod.rs"] mod serve_common;`): the guard of the server
//! process ([`ServerProc`]), bounded runs of other commands ([`run_bounded`]), the lock that
//! runs one server at a time ([`serial`]), and the raw requester on the soft fabric
//! ([`RawConn`]) both build their peers on, with its bounded waits and the checks every test
//! makes of it (a NULL answered, a connection torn down without a reply). What differs
//! between the two tests is a parameter here ([`ConnOpts`], the arguments of
//! [`ServerProc::spawn`], the bounds of the waits); each test's own `Server` and peer types
//! wrap these.
//!
//! The message builders and reply checks are the engine's (`engine/tests/raw/msg.rs`),
//! included here as [`msg`].
#![allow(dead_code)]

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::fabric::soft::{
    Soft, SoftAddr, SoftConfig, SoftCq, SoftDevice, SoftMr, SoftPd, SoftQp,
};
use rpcrdma_engine::fabric::{
    Access, CompletionQueue, ConnectError, Device, MemoryRegion, PostError, ProtectionDomain,
    Provider, QpCaps, QpInit, QueuePair, RecvWr, RemoteAddr, SendWr, Wc, WcStatus,
};
use rpcrdma_proto::header::HeaderView;
use rpcrdma_proto::rpc::ReplyHeader;
use serde_json::Value;

#[path = "../../../engine/tests/raw/msg.rs"]
pub mod msg;
use msg::{null_call, w};

static SERIAL: Mutex<()> = Mutex::new(());

/// One server process at a time (each busy-polls a core; the machine may have two). Held
/// for the whole test; a test that panicked does not poison it for the others.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes as lowercase hex, for failure messages.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A short description of a received message, for failure messages.
pub fn describe(m: &[u8]) -> String {
    match HeaderView::parse(m) {
        Ok(h) => {
            let rpc = ReplyHeader::parse(h.payload())
                .map(|(r, _)| format!("{:?}", r.body))
                .unwrap_or_else(|_| "no RPC reply".into());
            format!(
                "xid {:#x} proc {:?} credit {} writes {} reply chunk {:?} payload {} bytes, {rpc}",
                h.xid(),
                h.proc(),
                h.credit(),
                h.write_list().len(),
                h.reply_chunk().map(|c| c.len()),
                h.payload().len()
            )
        }
        Err(e) => format!("undecodable: {e:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The server process.

/// A running `rpcrdma serve` listening on an abstract soft address, killed (SIGKILL, by its
/// PID through `Child`) when dropped, whatever happened; the last lines of its log are
/// printed if the test is failing. Each test file's `Server` wraps one and adds its own
/// warm-up and end.
pub struct ServerProc {
    child: Option<Child>,
    /// The listening address as `rpcrdma call --connect` takes it (`@name`).
    pub addr: String,
    log: PathBuf,
    out: PathBuf,
    /// Extra arguments of every `rpcrdma call` of [`good_calls`](Self::good_calls).
    call_args: Vec<String>,
    /// Threads and descriptors once warmed up (set by the wrapper, usually from
    /// [`steady`](Self::steady)).
    pub baseline: (usize, usize),
}

impl ServerProc {
    /// Starts `rpcrdma serve --listen @NAME --seconds SECONDS SERVE_ARGS` (the server ends by
    /// itself after `seconds` even if this process dies before its guard runs), with its
    /// standard output and error in temporary files named after `name` (which must be unique
    /// among the servers alive; it includes this process's PID). `call_args` go to every
    /// `rpcrdma call` of [`good_calls`](Self::good_calls). Not yet known to be ready: see
    /// [`wait_ready`](Self::wait_ready).
    pub fn spawn<I, S>(name: &str, seconds: u32, serve_args: I, call_args: Vec<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let dir = std::env::temp_dir();
        let log = dir.join(format!("{name}.stderr"));
        let out = dir.join(format!("{name}.stdout"));
        let child = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
            .args(["serve", "--listen", &format!("@{name}")])
            .args(["--seconds", &seconds.to_string()])
            .args(serve_args)
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawn rpcrdma serve");
        ServerProc {
            child: Some(child),
            addr: format!("@{name}"),
            log,
            out,
            call_args,
            baseline: (0, 0),
        }
    }

    /// Waits until `probe` succeeds against the server (a raw connection accepted and
    /// served), retrying every 50 ms; fails if the process exits or `limit` passes first.
    pub fn wait_ready(
        &mut self,
        limit: Duration,
        mut probe: impl FnMut(&SoftAddr) -> Result<(), ConnectError>,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            self.assert_alive("starting");
            match probe(&self.soft_addr()) {
                Ok(()) => return,
                Err(e) => assert!(Instant::now() < deadline, "server never ready: {e:?}"),
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The listening address as the soft provider takes it.
    pub fn soft_addr(&self) -> SoftAddr {
        self.addr.parse().unwrap()
    }

    /// The server's process ID (while it runs).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The server's standard error so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics (with the server's log) if the process has exited.
    pub fn assert_alive(&mut self, what: &str) {
        if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
            panic!(
                "{what}: rpcrdma serve exited ({st:?}); its log:\n{}",
                self.log_text()
            );
        }
    }

    /// The first number of the `field` line (e.g. `"Threads:"`, `"VmRSS:"`) of the server's
    /// `/proc/PID/status`; panics if there is none.
    pub fn status_field(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("server /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/PID/status"))
    }

    /// Threads and open descriptors of the server process.
    pub fn usage(&self) -> (usize, usize) {
        let threads = self.status_field("Threads:") as usize;
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("server /proc fd")
            .count();
        (threads, fds)
    }

    /// What the server's descriptors are (`number=link`, sorted).
    pub fn fd_links(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| {
                        let l = std::fs::read_link(e.path()).unwrap_or_default();
                        format!("{}={}", e.file_name().to_string_lossy(), l.display())
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The usage once it stops changing over 300 ms (or after 10 s).
    pub fn steady(&self) -> (usize, usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = self.usage();
        loop {
            thread::sleep(Duration::from_millis(300));
            let now = self.usage();
            if now == last || Instant::now() >= deadline {
                return now;
            }
            last = now;
        }
    }

    /// Waits (at most `limit`) until threads and descriptors are back to the
    /// [`baseline`](Self::baseline): the bad connections' watchdogs, sockets and memfds are
    /// all gone. Fails with the server's descriptors after `limit`, or if it exits.
    pub fn assert_back_to_baseline(&mut self, what: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        let (t0, f0) = self.baseline;
        loop {
            self.assert_alive(what);
            let (t, f) = self.usage();
            if t <= t0 && f <= f0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: server threads {t} (baseline {t0}), descriptors {f} (baseline {f0}): \
                 {:?}",
                self.fd_links()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `rpcrdma call` NULL, a short ECHO and an ECHO through chunks (two Calls each, 5 s
    /// timeout, the whole command within 30 s) all succeed.
    pub fn good_calls(&mut self, what: &str) {
        for wl in ["null", "echo:100", "echo:8000"] {
            self.assert_alive(what);
            let (st, out, err) = run_bounded(
                Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
                    .args(["call", "--connect", &self.addr, "--workload", wl])
                    .args(["--count", "2", "--timeout-ms", "5000"])
                    .args(&self.call_args),
                Duration::from_secs(30),
            );
            assert!(st.success(), "{what}: call {wl} failed: {out} {err}");
            let lines: Vec<Value> = out
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(lines.len(), 3, "{what}: {wl}: {out}");
            for l in &lines[..2] {
                assert_eq!(l["status"], "ok", "{what}: {wl}: {l}");
            }
        }
    }

    /// SIGTERM stops the server (within 15 s) gracefully: exit status 0, no panic in its
    /// log. Returns the final statistics it printed (the last line of its standard output).
    pub fn terminate(&mut self, what: &str) -> Value {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: SIGTERM did not stop the server"
            );
            thread::sleep(Duration::from_millis(20));
        };
        self.child = None;
        let log = self.log_text();
        assert!(status.success(), "{what}: exit {status:?}; log:\n{log}");
        assert!(!log.contains("panicked"), "{what}: a panic:\n{log}");
        let out = std::fs::read_to_string(&self.out).unwrap();
        let last = out.lines().last().expect("final counters");
        serde_json::from_str(last).unwrap()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- rpcrdma serve log (last lines, newest first) ---");
            for l in tail {
                eprintln!("{l}");
            }
        }
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.out);
    }
}

/// Runs a command to completion within `limit` (killed after it, and the test fails);
/// returns its status, standard output and standard error.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> (ExitStatus, String, String) {
    let dir = std::env::temp_dir();
    let tag = format!(
        "rpcrdma-serve-test-call.{}.{:?}",
        std::process::id(),
        thread::current().id()
    );
    let (out_p, err_p) = (
        dir.join(format!("{tag}.out")),
        dir.join(format!("{tag}.err")),
    );
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out_p).unwrap())
        .stderr(File::create(&err_p).unwrap())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish in {limit:?}");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let out = std::fs::read_to_string(&out_p).unwrap_or_default();
    let err = std::fs::read_to_string(&err_p).unwrap_or_default();
    let _ = std::fs::remove_file(&out_p);
    let _ = std::fs::remove_file(&err_p);
    (status, out, err)
}

/// A plain socket connection to the server's abstract address (`@name`), below the soft
/// provider: for hand-made handshakes and silent or half-open connections.
pub fn unix_connect(addr: &str) -> UnixStream {
    let name = addr.strip_prefix('@').unwrap();
    let a = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    UnixStream::connect_addr(&a).expect("connect to the server's socket")
}

// ---------------------------------------------------------------------------------------
// A raw requester on the soft fabric: its own registered buffers and receives, hand-built
// messages, everything it receives reported unjudged.

/// Tag of receive work requests (send requests are numbered from 0).
const RECV_TAG: u64 = 1 << 63;

/// How a [`RawConn`] is built and how long it waits.
#[derive(Clone, Copy, Debug)]
pub struct ConnOpts {
    /// Name of its soft device.
    pub device: &'static str,
    /// Bytes of its protection domain's arena.
    pub arena_bytes: usize,
    /// Bytes of each receive slot and each send slot (the largest message it sends).
    pub slot: usize,
    /// Send slots, used round robin.
    pub send_slots: usize,
    /// Receives posted before connecting (and reposted as they complete).
    pub nrecv: u32,
    /// Bytes of each receive actually posted (at most `slot`; a lying peer posts less than
    /// it advertises).
    pub recv_len: u32,
    /// Completions its completion queue holds.
    pub cq_depth: u32,
    /// Its queue pair's send queue depth.
    pub max_send_wr: u32,
    /// Bytes of the region its chunks name (remote read and write).
    pub data_len: usize,
    /// How long connecting, and any single expected event, may take.
    pub wait: Duration,
    /// An overrun of its completion queue (a peer that polls too seldom on purpose): `true`,
    /// the connection counts as torn down (a `GeneralErr` receive error, nothing more will
    /// come); `false`, the test fails.
    pub cq_overrun_ends: bool,
}

/// A raw requester connected to the server over the soft fabric, built directly on the
/// engine's public fabric API: registered receive, send and data regions, hand-built
/// messages, every completion kept for the test to look at. The peers of both test files
/// are (or wrap) one.
pub struct RawConn {
    pub qp: SoftQp,
    pub cq: SoftCq,
    pub recv: SoftMr,
    pub send: SoftMr,
    /// The region its chunks name (remote read and write).
    pub data: SoftMr,
    opts: ConnOpts,
    next_send: u64,
    /// Messages received and not yet taken.
    pub received: VecDeque<Vec<u8>>,
    /// Send completions not yet waited for.
    pub send_done: VecDeque<Wc>,
    /// Statuses of receives that completed in error (the connection's end).
    pub recv_errors: Vec<WcStatus>,
    /// XIDs of Calls that may still be answered late (passed on to the RPC layer by a
    /// mutated message): their replies are dropped when they arrive.
    pub late: Vec<u32>,
    /// The server's grant, from the first NULL answered ([`null_ok`](Self::null_ok)).
    pub grant: Option<u32>,
    _pd: SoftPd,
}

impl RawConn {
    /// Connects with `o.nrecv` receives of `o.recv_len` bytes posted and `pdata` as the
    /// connection's private data (one attempt, at most `o.wait`). `extra` registers the
    /// caller's further regions in the protection domain, after the receive, send and data
    /// regions and before the connection; what it returns comes back beside the connection.
    pub fn try_connect<T>(
        addr: &SoftAddr,
        o: &ConnOpts,
        pdata: &[u8],
        extra: impl FnOnce(&SoftPd) -> Result<T, ConnectError>,
    ) -> Result<(RawConn, T), ConnectError> {
        assert!(o.recv_len as usize <= o.slot);
        let device = SoftDevice::with_config(
            o.device,
            SoftConfig {
                arena_bytes: o.arena_bytes,
                ..SoftConfig::default()
            },
        );
        let pd = device.alloc_pd()?;
        let cq = device.create_cq(o.cq_depth)?;
        let recv = pd.alloc_region(o.slot * o.nrecv.max(1) as usize, Access::LOCAL_WRITE)?;
        let send = pd.alloc_region(o.slot * o.send_slots, Access::LOCAL_WRITE)?;
        let data = pd.alloc_region(
            o.data_len,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )?;
        let more = extra(&pd)?;
        let caps = QpCaps {
            max_send_wr: o.max_send_wr,
            max_recv_wr: o.nrecv.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let (slot, recv_len) = (o.slot, o.recv_len);
        let (qp, _) = Soft::connect(
            &pd,
            addr,
            QpInit::new(&cq, &cq, caps),
            pdata,
            o.wait,
            |qp| {
                for i in 0..o.nrecv {
                    let sge = [recv.sge(i as usize * slot, recv_len)];
                    qp.post_recv(&RecvWr::new(RECV_TAG | u64::from(i), &sge))?;
                }
                Ok(())
            },
        )?;
        let conn = RawConn {
            qp,
            cq,
            recv,
            send,
            data,
            opts: *o,
            next_send: 0,
            received: VecDeque::new(),
            send_done: VecDeque::new(),
            recv_errors: Vec::new(),
            late: Vec::new(),
            grant: None,
            _pd: pd,
        };
        Ok((conn, more))
    }

    /// Moves available completions into `received` / `send_done` / `recv_errors`,
    /// reposting receives.
    pub fn poll(&mut self) {
        let mut wc = [Wc::default(); 32];
        loop {
            let n = match self.cq.poll(&mut wc) {
                Ok(n) => n,
                Err(e) => {
                    assert!(self.opts.cq_overrun_ends, "raw completion queue: {e:?}");
                    // Nothing more will come.
                    if self.recv_errors.is_empty() {
                        self.recv_errors.push(WcStatus::GeneralErr);
                    }
                    return;
                }
            };
            for c in &wc[..n] {
                if c.wr_id & RECV_TAG == 0 {
                    self.send_done.push_back(*c);
                    continue;
                }
                if c.status != WcStatus::Success {
                    self.recv_errors.push(c.status);
                    continue;
                }
                let i = (c.wr_id & !RECV_TAG) as usize;
                let slot = self.opts.slot;
                let mut m = vec![0; c.byte_len as usize];
                self.recv.read_at(i * slot, &mut m);
                self.received.push_back(m);
                let sge = [self.recv.sge(i * slot, self.opts.recv_len)];
                let _ = self.qp.post_recv(&RecvWr::new(c.wr_id, &sge));
            }
            if n < wc.len() {
                return;
            }
        }
    }

    /// Posts a signaled Send of `bytes` (at most a slot); its request ID.
    pub fn post(&mut self, bytes: &[u8]) -> Result<u64, PostError> {
        let slot = self.opts.slot;
        assert!(bytes.len() <= slot);
        let id = self.next_send;
        self.next_send += 1;
        let off = (id as usize % self.opts.send_slots) * slot;
        self.send.write_at(off, bytes);
        let sges = [self.send.sge(off, bytes.len() as u32)];
        self.qp.post_send(&SendWr::send(id, &sges).signaled())?;
        Ok(id)
    }

    /// The status of send request `id`; fails if it does not complete within the wait.
    pub fn wait_send(&mut self, id: u64, what: &str) -> WcStatus {
        let deadline = Instant::now() + self.opts.wait;
        loop {
            self.poll();
            if let Some(p) = self.send_done.iter().position(|c| c.wr_id == id) {
                return self.send_done.remove(p).unwrap().status;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: send {id} never completed"
            );
            thread::yield_now();
        }
    }

    /// Sends `bytes`; the Send's status (`WrFlushErr` if it could not be posted).
    pub fn send(&mut self, bytes: &[u8], what: &str) -> WcStatus {
        match self.post(bytes) {
            Ok(id) => self.wait_send(id, what),
            Err(_) => WcStatus::WrFlushErr,
        }
    }

    /// The next message (replies to [`late`](Self::late) XIDs dropped), or `None` if the
    /// connection was torn down first. Silence longer than the wait on a live connection
    /// fails.
    pub fn next_message(&mut self, what: &str) -> Option<Vec<u8>> {
        let deadline = Instant::now() + self.opts.wait;
        loop {
            self.poll();
            if let Some(m) = self.received.pop_front() {
                let xid = (m.len() >= 4).then(|| w(&m, 0));
                if let Some(p) = self.late.iter().position(|x| Some(*x) == xid) {
                    self.late.swap_remove(p);
                    continue;
                }
                return Some(m);
            }
            if !self.recv_errors.is_empty() {
                return None;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: neither a message nor a teardown within {:?}",
                self.opts.wait
            );
            thread::yield_now();
        }
    }

    /// The next message; fails if the connection is torn down instead (or is silent).
    pub fn expect(&mut self, what: &str) -> Vec<u8> {
        match self.next_message(what) {
            Some(m) => m,
            None => panic!(
                "{what}: the connection was torn down instead of answering (receive errors \
                 {:?})",
                self.recv_errors
            ),
        }
    }

    /// A NULL Call with `xid` is sent and the next message answers it: an RDMA_MSG whose
    /// transport and RPC XIDs are `xid`, accepted with SUCCESS. Records the server's grant
    /// from the first one; returns the reply.
    pub fn null_ok(&mut self, xid: u32, what: &str) -> Vec<u8> {
        let st = self.send(&null_call(xid), what);
        assert_eq!(st, WcStatus::Success, "{what}: NULL {xid:#x} sent");
        let m = self.expect(&format!("{what}: NULL probe {xid:#x}"));
        let answered = HeaderView::parse(&m).ok().and_then(|h| {
            let (r, _) = ReplyHeader::parse(h.payload()).ok()?;
            (h.xid() == xid && r.xid == xid && r.is_success()).then_some(h.credit())
        });
        match answered {
            Some(credit) => {
                self.grant.get_or_insert(credit);
            }
            None => panic!(
                "{what}: the next message is not the answer to NULL {xid:#x}: {} ({})",
                hex(&m),
                describe(&m)
            ),
        }
        m
    }

    /// The connection is torn down without a reply: every receive flushes (within the
    /// wait), and nothing was received.
    pub fn expect_torn_down(&mut self, what: &str) {
        let deadline = Instant::now() + self.opts.wait;
        while self.recv_errors.is_empty() {
            self.poll();
            assert!(
                Instant::now() < deadline,
                "{what}: the connection is still up"
            );
            thread::yield_now();
        }
        assert!(
            self.received.is_empty(),
            "{what}: a reply on a torn-down connection: {}",
            hex(self.received.front().unwrap())
        );
        assert!(
            self.recv_errors.iter().all(|s| *s == WcStatus::WrFlushErr),
            "{what}: {:?}",
            self.recv_errors
        );
    }

    /// The remote address of byte `offset` of the data region.
    pub fn data_at(&self, offset: usize) -> RemoteAddr {
        self.data.remote(offset)
    }
}

/// Calls `attempt` until it connects; retried every 20 ms while `retry_for` lasts (zero:
/// one attempt only), then the test fails with the last error.
pub fn connect_retrying<T>(
    retry_for: Duration,
    mut attempt: impl FnMut() -> Result<T, ConnectError>,
) -> T {
    let deadline = Instant::now() + retry_for;
    loop {
        match attempt() {
            Ok(c) => return c,
            // The server's accept loop may be busy for a moment (its accept timeout).
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("raw connect to rpcrdma serve: {e:?}"),
        }
    }
}
