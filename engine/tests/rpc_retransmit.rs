//! Retransmission after a lost connection (`ConnConfig::retransmit`): pending RPCs survive
//! the loss, the requester reconnects and sends each Call again with its original XID
//! (RFC 5531 §9), freshly bound windows — the rkeys of the old connection are dead and the
//! re-encoded header advertises new ones (RFC 8166 §4.4.1, §8.1.3) — and the new
//! connection's credits, which start from one (§3.3.3); deadlines hold whether or not the
//! responder comes back.

mod common;
mod raw;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use raw::*;
use rpcrdma_engine::conn::{ConnConfig, Registration, RetransmitPolicy, Version};
use rpcrdma_engine::dispatch::{Dispatch, Lookup};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::{Provider, RemoteAddr, WcStatus};
use rpcrdma_engine::loopback::soft_server;
use rpcrdma_engine::requester::{CallArgs, CancelError, Client, Completion, RpcError, SubmitError};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, Segment};
use rpcrdma_proto::rpc::ReplyHeader;

fn retransmitting(policy: RetransmitPolicy) -> ConnConfig {
    ConnConfig {
        retransmit: Some(policy),
        ..config()
    }
}

// ---------------------------------------------------------------------------------------
// A real responder on its own thread, driven by commands from the test.

const SERVE: u32 = 0;
const FREEZE: u32 = 1;
const DROP_AND_ACCEPT: u32 = 2;
const STOP: u32 = 3;

/// A `Server` on a thread: serves its connections (`SERVE`), stops polling them
/// (`FREEZE`: Calls stay unanswered in the receive queue), or disconnects the newest one
/// and accepts the next (`DROP_AND_ACCEPT`, then back to `SERVE`). Its handlers record
/// (connection number, XID) of every Call they run.
struct ServerThread {
    addr: SoftAddr,
    mode: Arc<AtomicU32>,
    /// The last mode the thread acted on.
    acked: Arc<AtomicU32>,
    seen: Arc<Mutex<Vec<(usize, u32)>>>,
    handle: Option<JoinHandle<()>>,
}

/// The test program, with each handler first recording the Call's XID.
fn recording_dispatch(
    seen: Arc<Mutex<Vec<(usize, u32)>>>,
    conn: Arc<AtomicUsize>,
) -> Arc<Dispatch> {
    let base = dispatch();
    let mut d = Dispatch::new();
    for p in [NULL, ECHO, READ, WRITE, MULTI] {
        let Lookup::Found(e) = base.lookup(PROG, VERS, p) else {
            panic!("procedure {p} missing");
        };
        let (spec, h) = (e.spec, e.handler.clone());
        let (seen, conn) = (Arc::clone(&seen), Arc::clone(&conn));
        d.register(PROG, VERS, p, spec, move |req, resp| {
            seen.lock()
                .unwrap()
                .push((conn.load(Ordering::Relaxed), req.xid));
            h(req, resp)
        });
    }
    Arc::new(d)
}

impl ServerThread {
    /// A server thread whose server has the settings `cfg`.
    fn start_with(cfg: ConnConfig) -> ServerThread {
        let mode = Arc::new(AtomicU32::new(SERVE));
        let acked = Arc::new(AtomicU32::new(SERVE));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let (m, a, sn) = (Arc::clone(&mode), Arc::clone(&acked), Arc::clone(&seen));
        let handle = std::thread::spawn(move || {
            let current = Arc::new(AtomicUsize::new(0));
            let (mut srv, addr) =
                soft_server(recording_dispatch(sn, Arc::clone(&current)), cfg).unwrap();
            tx.send(addr).unwrap();
            let mut conns = vec![srv.accept(Duration::from_secs(5)).unwrap()];
            loop {
                match m.load(Ordering::Acquire) {
                    SERVE => {
                        let k = conns.len() - 1;
                        current.store(k, Ordering::Relaxed);
                        for _ in 0..64 {
                            conns[k].poll();
                        }
                        a.store(SERVE, Ordering::Release);
                    }
                    FREEZE => {
                        a.store(FREEZE, Ordering::Release);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    DROP_AND_ACCEPT => {
                        conns.last_mut().unwrap().disconnect();
                        conns.push(srv.accept(Duration::from_secs(5)).unwrap());
                        a.store(DROP_AND_ACCEPT, Ordering::Release);
                        m.store(SERVE, Ordering::Release);
                    }
                    _ => return,
                }
            }
        });
        ServerThread {
            addr: rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            mode,
            acked,
            seen,
            handle: Some(handle),
        }
    }

    /// Stops polling the connections and waits until the thread has stopped.
    fn freeze(&self) {
        self.mode.store(FREEZE, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.acked.load(Ordering::Acquire) != FREEZE {
            assert!(Instant::now() < deadline, "server thread did not freeze");
            std::thread::yield_now();
        }
    }

    /// XIDs the handlers ran on connection `conn`.
    fn xids_on(&self, conn: usize) -> BTreeSet<u32> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|s| s.0 == conn).map(|s| s.1).collect()
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.mode.store(STOP, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One RPC of each form the test sends, and what its reply must hold.
struct Rpcs {
    echo_short: Vec<u8>,
    echo_long: Vec<u8>,
    read_args: Vec<u8>,
    seed: [u8; 4],
    bulk: Vec<u8>,
}

impl Rpcs {
    fn new() -> Rpcs {
        Rpcs {
            echo_short: opaque(&pattern(1, 100)),
            // Larger than the 4 KiB inline thresholds both ways: a Long Call (Position-Zero
            // Read chunk) with a Reply chunk.
            echo_long: opaque(&pattern(2, 6000)),
            read_args: [5000u32.to_be_bytes(), 4u32.to_be_bytes()].concat(),
            seed: 8u32.to_be_bytes(),
            bulk: pattern(8, 7000),
        }
    }

    /// Kind `k % 4`: short ECHO, Long ECHO, READ (Write chunk), WRITE (Read chunk).
    fn args(&self, k: u64) -> CallArgs<'_> {
        match k % 4 {
            0 => CallArgs::new(PROG, VERS, ECHO, &self.echo_short, 104),
            1 => CallArgs::new(PROG, VERS, ECHO, &self.echo_long, 6004),
            2 => {
                let mut a = CallArgs::new(PROG, VERS, READ, &self.read_args, 4);
                a.bulk_results = &[5000];
                a
            }
            _ => {
                let mut a = CallArgs::new(PROG, VERS, WRITE, &self.seed, 8);
                a.bulk_arg = Some(&self.bulk);
                a
            }
        }
    }

    /// Whether the reply of kind `k % 4` is right, byte for byte.
    fn verify(&self, k: u64, r: &rpcrdma_engine::requester::Reply<'_>) -> bool {
        r.is_success()
            && match k % 4 {
                0 => r.results == &self.echo_short[..],
                1 => r.results == &self.echo_long[..],
                2 => {
                    r.results == [5000u32.to_be_bytes(), 5000u32.to_be_bytes()].concat()
                        && r.bulk() == [&pattern(4, 5000)[..]]
                }
                _ => r.results == [1u32.to_be_bytes(), 7000u32.to_be_bytes()].concat(),
            }
    }
}

/// A real responder drops the connection with short, Long, Write-chunk and Read-chunk
/// RPCs pending (sent, never run): the requester reconnects by itself and every RPC
/// completes with verified data under its original XID, which the responder sees on the
/// new connection; the blocking `call` rides over a loss the same way.
#[test]
fn pending_rpcs_are_retransmitted_with_their_xids() {
    pending_rpcs_retransmitted(Version::V1);
}

/// The same in RPC-over-RDMA version 2: each new connection opens with RDMA2_CONNPROP
/// again, and the re-encoded headers carry the new windows in rdma_inv_handle.
#[test]
fn pending_rpcs_are_retransmitted_in_version_2() {
    pending_rpcs_retransmitted(Version::V2);
}

fn pending_rpcs_retransmitted(version: Version) {
    let srv = ServerThread::start_with(ConnConfig {
        version: Version::Auto,
        ..config()
    });
    let policy = RetransmitPolicy {
        max_attempts: 20,
        attempt_timeout: Duration::from_secs(2),
        backoff: Duration::from_millis(10),
        ..RetransmitPolicy::default()
    };
    let device = Soft::open_device(None).unwrap();
    let ccfg = ConnConfig {
        version,
        ..retransmitting(policy)
    };
    let mut c = Client::<Soft>::connect(&device, &srv.addr, ccfg).unwrap();
    assert_eq!(
        c.negotiation().wire().number(),
        version.name().parse::<u32>().unwrap()
    );
    let rpcs = Rpcs::new();
    // Warm up: every form once, so the grant is the full 32.
    for k in 0..4 {
        let ok = c.call(&rpcs.args(k), |r| rpcs.verify(k, &r.unwrap()));
        assert_eq!(ok, Ok(true), "warm-up {k}");
    }
    assert_eq!(c.credits().granted(), 32);

    // Twelve RPCs reach the responder's receive queue, which is not polled; then the
    // connection drops.
    srv.freeze();
    let mut xids = HashMap::new();
    for k in 0..12u64 {
        xids.insert(k, c.submit(&rpcs.args(k), k).expect("credit"));
    }
    for _ in 0..100 {
        c.poll_completions(|x| panic!("completion before the loss: {}", x.xid));
    }
    let before = c.snapshot();
    srv.mode.store(DROP_AND_ACCEPT, Ordering::Release);

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = HashMap::new();
    while done.len() < 12 {
        c.poll_completions(|x| {
            let ok = x.result.map(|r| rpcs.verify(x.tag, &r));
            assert!(done.insert(x.tag, (x.xid, ok)).is_none(), "completed twice");
        });
        assert!(Instant::now() < deadline, "{} of 12 completed", done.len());
    }
    for k in 0..12u64 {
        assert_eq!(
            done[&k],
            (xids[&k], Ok(true)),
            "RPC {k}: original XID, right data"
        );
    }
    let sent: BTreeSet<u32> = xids.values().copied().collect();
    assert!(
        srv.xids_on(0).is_disjoint(&sent),
        "never run on the lost connection"
    );
    assert_eq!(srv.xids_on(1), sent, "the new connection saw the same XIDs");
    let st = c.snapshot();
    assert_eq!(st.retransmits - before.retransmits, 12);
    assert_eq!((st.reconnects, st.conn_lost), (1, 1));
    assert_eq!(st.calls, 16, "a retransmit is not a new Call");
    assert_eq!(st.rpcs, 16);
    assert_eq!(c.in_flight(), 0);
    assert!(!c.is_dead() && !c.is_reconnecting());

    // The blocking call: the connection drops while it waits for its reply.
    srv.freeze();
    let mode = Arc::clone(&srv.mode);
    let dropper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        mode.store(DROP_AND_ACCEPT, Ordering::Release);
    });
    let ok = c.call(&rpcs.args(2), |r| rpcs.verify(2, &r.unwrap()));
    dropper.join().unwrap();
    assert_eq!(ok, Ok(true));
    let st = c.snapshot();
    assert_eq!((st.reconnects, st.conn_lost), (2, 2));
    assert_eq!(st.retransmits - before.retransmits, 13);
    assert_eq!(
        srv.xids_on(2).len(),
        1,
        "the blocking call ran once, on connection 2"
    );
    assert_eq!(
        c.negotiation().wire().number(),
        version.name().parse::<u32>().unwrap()
    );
    if version == Version::V2 {
        assert_eq!(st.connprops_sent, 3, "one opening per connection");
        assert!(st.remote_invalidations > 0);
    }
}

// ---------------------------------------------------------------------------------------
// A raw responder that sees every rkey the requester advertises.

/// Waits for the next Call at the raw end, polling the client (which must not complete
/// anything meanwhile).
fn next_call(c: &mut Client<Soft>, e: &mut Ends) -> Vec<u8> {
    next_call_or(c, e, |x| panic!("unexpected completion {}", x.xid))
}

/// Waits for the next Call at the raw end, polling the client and handing each completion
/// to `f`.
fn next_call_or(c: &mut Client<Soft>, e: &mut Ends, mut f: impl FnMut(Completion<'_>)) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        e.poll();
        if let Some(m) = e.received.pop_front() {
            return m;
        }
        c.poll_completions(&mut f);
        assert!(Instant::now() < deadline, "no Call in 5 s");
    }
}

/// The segments a Call advertises, in order: read list, write list, reply chunk.
fn advertised(call: &[u8]) -> Vec<Segment> {
    let h = HeaderView::parse(call).unwrap();
    let mut v: Vec<Segment> = h.read_list().iter().map(|r| r.segment).collect();
    for c in h.write_list().iter() {
        v.extend(c.iter());
    }
    if let Some(r) = h.reply_chunk() {
        v.extend(r.iter());
    }
    v
}

/// A Short RPC reply with grant 32.
fn reply(xid: u32, chunks: Chunks<'_>, results: &[u8]) -> Vec<u8> {
    let rh = ReplyHeader::accepted_success(xid);
    let mut p = vec![0; rh.encoded_len()];
    rh.encode(&mut p).unwrap();
    p.extend_from_slice(results);
    message(&Header::msg(xid, 32, chunks), &p)
}

/// Accepts the client's next connection on a thread while this one polls the client
/// (whose reconnect attempt blocks inside `poll_completions`).
fn reaccept(c: &mut Client<Soft>, rs: RawServer) -> (RawServer, Ends) {
    let t = std::thread::spawn(move || {
        let mut rs = rs;
        let (e, _) = rs.accept(true);
        (rs, e)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !t.is_finished() {
        c.poll_completions(|x| panic!("completion while reconnecting: {}", x.xid));
        assert!(Instant::now() < deadline, "no reconnection");
    }
    t.join().unwrap()
}

/// RFC 8166 §4.4.1, §8.1.3, §3.3.3: after a loss the rkeys of the old connection are
/// dead (an RDMA Write through one fails with a remote access error) and each retransmit
/// carries the same XID over the same memory under new rkeys, one Call at a time until
/// the new connection's first reply grants more.
#[test]
fn retransmits_advertise_fresh_rkeys_and_old_ones_are_dead() {
    let (mut c, mut e, rs) = connect_raw(RetransmitPolicy {
        max_attempts: 20,
        attempt_timeout: Duration::from_secs(2),
        backoff: Duration::from_millis(10),
        ..RetransmitPolicy::default()
    });
    let rpcs = Rpcs::new();
    let xa = c.submit(&rpcs.args(2), 2).unwrap(); // READ: Write chunk
    let xb = c.submit(&rpcs.args(3), 3).unwrap(); // WRITE: Read chunk
    let mut keys1 = HashMap::new();
    for _ in 0..2 {
        let m = next_call(&mut c, &mut e);
        keys1.insert(HeaderView::parse(&m).unwrap().xid(), advertised(&m));
    }
    assert_eq!(keys1.len(), 2);
    let wa = keys1[&xa][0];
    assert_eq!(
        e.rdma_write(RemoteAddr::new(wa.offset, wa.handle), 64, 0x55),
        WcStatus::Success,
        "pending: usable"
    );
    drop(e); // the connection is lost

    // Connection 2: one Call (one credit), same XID, same memory, new rkeys.
    let (rs, mut e) = reaccept(&mut c, rs);
    let m = next_call(&mut c, &mut e);
    let x2 = HeaderView::parse(&m).unwrap().xid();
    assert!(x2 == xa || x2 == xb, "retransmitted XID {x2:#x}");
    let keys2 = advertised(&m);
    assert_eq!(keys2.len(), keys1[&x2].len());
    for (new, old) in keys2.iter().zip(&keys1[&x2]) {
        assert_eq!((new.offset, new.length), (old.offset, old.length));
        assert_ne!(new.handle, old.handle, "a fresh rkey");
    }
    for _ in 0..200 {
        e.poll();
        c.poll_completions(|x| panic!("unexpected completion {}", x.xid));
    }
    assert!(e.received.is_empty(), "a second Call before any grant");
    assert_eq!((c.credits().in_flight(), c.in_flight()), (1, 2));
    // The new rkey works; the old one is dead (the failed probe ends connection 2).
    let (new, old) = (keys2[0], keys1[&x2][0]);
    let st = if x2 == xb {
        let (st, bytes) = e.rdma_read(RemoteAddr::new(new.offset, new.handle), new.length);
        assert_eq!(bytes, rpcs.bulk, "the argument, through the new rkey");
        st
    } else {
        e.rdma_write(RemoteAddr::new(new.offset, new.handle), 64, 0x56)
    };
    assert_eq!(st, WcStatus::Success);
    assert_eq!(
        e.rdma_write(RemoteAddr::new(old.offset, old.handle), 16, 0x57),
        WcStatus::RemAccessErr,
        "an rkey of the lost connection is dead"
    );
    drop(e);

    // Connection 3: both Calls again, answered properly.
    let (_rs, mut e) = reaccept(&mut c, rs);
    let mut seen = Vec::new();
    let mut early = Vec::new();
    for _ in 0..2 {
        let m = next_call_or(&mut c, &mut e, |x| {
            early.push((x.tag, x.xid, x.result.map(|r| rpcs.verify(x.tag, &r))));
        });
        let h = HeaderView::parse(&m).unwrap();
        let x = h.xid();
        let keys = advertised(&m);
        for (i, (k3, k1)) in keys.iter().zip(&keys1[&x]).enumerate() {
            assert_eq!((k3.offset, k3.length), (k1.offset, k1.length));
            assert_ne!(k3.handle, k1.handle);
            if x == x2 {
                assert_ne!(k3.handle, keys2[i].handle);
            }
        }
        let m = if x == xa {
            let s = keys[0];
            let data = pattern(4, 5000);
            assert_eq!(
                e.rdma_write_bytes(RemoteAddr::new(s.offset, s.handle), &data),
                WcStatus::Success
            );
            let echo = [Segment::new(s.handle, 5000, s.offset)];
            let res = [5000u32.to_be_bytes(), 5000u32.to_be_bytes()].concat();
            let w: [&[Segment]; 1] = [&echo];
            reply(
                x,
                Chunks {
                    writes: &w,
                    ..Chunks::NONE
                },
                &res,
            )
        } else {
            let s = keys[0];
            let (st, bytes) = e.rdma_read(RemoteAddr::new(s.offset, s.handle), s.length);
            assert_eq!((st, bytes), (WcStatus::Success, rpcs.bulk.clone()));
            let res = [1u32.to_be_bytes(), 7000u32.to_be_bytes()].concat();
            reply(x, Chunks::NONE, &res)
        };
        assert_eq!(e.send(&m), WcStatus::Success);
        seen.push(x);
    }
    assert_eq!(seen[0], x2, "the first retransmitted Call goes first again");
    // The first RPC completed while the second Call was awaited (its reply carried the
    // grant that let the second go).
    assert_eq!(early.len(), 1);
    let mut done = HashMap::new();
    done.insert(early[0].0, (early[0].1, early[0].2));
    let deadline = Instant::now() + Duration::from_secs(5);
    while done.len() < 2 {
        c.poll_completions(|x| {
            done.insert(x.tag, (x.xid, x.result.map(|r| rpcs.verify(x.tag, &r))));
        });
        assert!(Instant::now() < deadline);
    }
    assert_eq!(done[&2], (xa, Ok(true)));
    assert_eq!(done[&3], (xb, Ok(true)));
    let st = c.snapshot();
    assert_eq!((st.conn_lost, st.reconnects, st.retransmits), (2, 2, 3));
}

/// A real client with `cfg` connected to a raw responder (not warmed up: one credit).
fn accept_raw(cfg: ConnConfig) -> (Client<Soft>, Ends, RawServer) {
    let mut rs = RawServer::listen();
    let addr = rs.addr.clone();
    let t = std::thread::spawn(move || {
        let device = Soft::open_device(None).unwrap();
        Client::<Soft>::connect(&device, &addr, cfg).unwrap()
    });
    let (e, _) = rs.accept(true);
    (t.join().unwrap(), e, rs)
}

/// A NULL RPC tagged `tag`, answered by the raw end (grant 32); waits for its success.
fn null_rpc(c: &mut Client<Soft>, e: &mut Ends, tag: u64) {
    c.submit(&CallArgs::new(PROG, VERS, NULL, &[], 0), tag)
        .unwrap();
    let m = next_call(c, e);
    let xid = HeaderView::parse(&m).unwrap().xid();
    assert_eq!(e.send(&reply(xid, Chunks::NONE, &[])), WcStatus::Success);
    let mut done = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done {
        c.poll_completions(|x| {
            assert_eq!(x.tag, tag);
            assert!(x.result.unwrap().is_success());
            done = true;
        });
        assert!(Instant::now() < deadline, "no reply to the NULL RPC");
    }
}

/// A real client connected to a raw responder, warmed up to the full grant of 32.
fn connect_raw(policy: RetransmitPolicy) -> (Client<Soft>, Ends, RawServer) {
    let (mut c, mut e, rs) = accept_raw(retransmitting(policy));
    null_rpc(&mut c, &mut e, 99);
    assert_eq!(c.in_flight(), 0);
    assert_eq!(c.credits().granted(), 32);
    (c, e, rs)
}

/// A responder that never comes back. With a listener that never accepts, each pending
/// RPC completes with `Timeout` at its own deadline (an attempt never blocks past the
/// earliest one) and no Call is taken meanwhile; with no listener at all, the attempts run
/// out and the RPCs complete with `ConnectionLost` long before their deadlines, after
/// which `submit` and the blocking `call` fail at once. Nothing hangs.
#[test]
fn a_responder_that_never_comes_back() {
    let rpcs = Rpcs::new();
    for listener_stays in [true, false] {
        let policy = RetransmitPolicy {
            max_attempts: if listener_stays { 1000 } else { 3 },
            attempt_timeout: Duration::from_millis(100),
            backoff: Duration::from_millis(20),
            ..RetransmitPolicy::default()
        };
        let (mut c, mut e, rs) = connect_raw(policy);
        let timeouts = [300u64, 450, 600];
        let mut t0 = HashMap::new();
        for (k, &ms) in timeouts.iter().enumerate() {
            let mut a = rpcs.args(k as u64 + 1);
            a.timeout = if listener_stays {
                Duration::from_millis(ms)
            } else {
                Duration::from_secs(30)
            };
            t0.insert(k as u64, Instant::now());
            c.submit(&a, k as u64).unwrap();
            next_call(&mut c, &mut e);
        }
        drop(e);
        if !listener_stays {
            drop(rs);
        }
        let mut got = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 3 {
            c.poll_completions(|x| {
                got.insert(x.tag, (x.result.err(), t0[&x.tag].elapsed()));
            });
            if listener_stays && c.is_dead() {
                assert!(
                    matches!(c.submit(&rpcs.args(0), 9), Err(SubmitError::WouldBlock)),
                    "no Call taken while reconnecting"
                );
            }
            assert!(Instant::now() < deadline, "hung: {got:?}");
        }
        let st = c.snapshot();
        assert_eq!((st.conn_lost, st.reconnects, st.retransmits), (1, 0, 0));
        assert_eq!(c.in_flight(), 0);
        if listener_stays {
            for (k, &ms) in timeouts.iter().enumerate() {
                let (err, waited) = got[&(k as u64)];
                assert_eq!(err, Some(RpcError::Timeout), "RPC {k}");
                assert!(waited >= Duration::from_millis(ms), "RPC {k}: {waited:?}");
                assert!(
                    waited < Duration::from_millis(ms + 250),
                    "RPC {k}: an attempt blocked past the deadline: {waited:?}"
                );
            }
            assert_eq!(st.timeouts, 3);
            assert!(c.is_reconnecting(), "attempts left");
        } else {
            for k in 0..3u64 {
                let (err, waited) = got[&k];
                assert_eq!(err, Some(RpcError::ConnectionLost), "RPC {k}");
                assert!(waited < Duration::from_secs(2), "RPC {k}: {waited:?}");
            }
            assert!(!c.is_reconnecting(), "attempts ran out");
            assert!(matches!(
                c.submit(&rpcs.args(0), 1),
                Err(SubmitError::Disconnected)
            ));
            let t = Instant::now();
            assert_eq!(c.call(&rpcs.args(0), |_| ()), Err(RpcError::ConnectionLost));
            assert!(t.elapsed() < Duration::from_millis(100));
        }
    }
}

#[test]
fn retransmission_needs_windows() {
    let cfg = ConnConfig {
        registration: Registration::Persistent,
        ..retransmitting(RetransmitPolicy::default())
    };
    assert!(cfg.validate().is_err());
    assert!(retransmitting(RetransmitPolicy::default())
        .validate()
        .is_ok());
    let zero = RetransmitPolicy {
        max_attempts: 0,
        ..RetransmitPolicy::default()
    };
    assert!(retransmitting(zero).validate().is_err());
    let instant = RetransmitPolicy {
        reply_timeout: Duration::ZERO,
        ..RetransmitPolicy::default()
    };
    assert!(retransmitting(instant).validate().is_err());
    let never = RetransmitPolicy {
        reply_timeout: Duration::MAX,
        ..RetransmitPolicy::default()
    };
    assert!(retransmitting(never).validate().is_ok());
}

/// RFC 8166 §3.3.1, §3.3.3: an RPC that timed out keeps its credit until a late reply
/// (the responder may still be working on it). When such RPCs hold every credit, nothing
/// could be sent until the responder answers one, so the connection is replaced: with
/// retransmission on the requester reconnects and new RPCs run on the new connection (with
/// the credit accounting started over); with it off, the requester is disconnected and
/// says so at once instead of refusing every Call for want of a credit.
#[test]
fn timed_out_rpcs_holding_every_credit_replace_the_connection() {
    let (mut c, mut e, rs) = connect_raw(RetransmitPolicy {
        max_attempts: 20,
        attempt_timeout: Duration::from_secs(2),
        backoff: Duration::from_millis(10),
        ..RetransmitPolicy::default()
    });
    let mut null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    null.timeout = Duration::from_millis(100);
    // 31 of the 32 credits time out: one is left, the connection stays.
    for k in 0..31 {
        c.submit(&null, k).unwrap();
        next_call(&mut c, &mut e);
    }
    let mut timeouts = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while timeouts < 31 {
        c.poll_completions(|x| {
            assert_eq!(x.result.err(), Some(RpcError::Timeout));
            timeouts += 1;
        });
        assert!(Instant::now() < deadline, "{timeouts} timeouts");
    }
    for _ in 0..1000 {
        c.poll_completions(|x| panic!("completion {}", x.xid));
    }
    assert!(!c.is_dead(), "a credit is left");
    assert_eq!(c.in_flight(), 31);
    // The last one times out too: the connection goes and a new one is made.
    c.submit(&null, 31).unwrap();
    next_call(&mut c, &mut e);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.is_dead() {
        c.poll_completions(|x| assert_eq!(x.result.err(), Some(RpcError::Timeout)));
        assert!(Instant::now() < deadline, "stuck with every credit held");
    }
    let (_rs, mut e2) = reaccept(&mut c, rs);
    assert_eq!(c.in_flight(), 0, "the zombies went with the old connection");
    // A new RPC runs on the new connection.
    null_rpc(&mut c, &mut e2, 40);
    let st = c.snapshot();
    assert_eq!((st.timeouts, st.conn_lost, st.reconnects), (32, 1, 1));

    // Without retransmission, on a fresh connection's single credit.
    let (mut c, mut e, _rs) = accept_raw(config());
    c.submit(&null, 1).unwrap();
    next_call(&mut c, &mut e);
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.is_dead() {
        c.poll_completions(|x| got = Some(x.result.err()));
        assert!(Instant::now() < deadline, "stuck with the one credit held");
    }
    assert_eq!(got, Some(Some(RpcError::Timeout)));
    assert!(matches!(c.submit(&null, 2), Err(SubmitError::Disconnected)));
    assert_eq!(c.snapshot().conn_lost, 1);
}

/// An RPC waiting to be sent again after a loss can be cancelled: it completes with
/// `Cancelled`, once, and is not sent on the new connection; the other pending RPC is, with
/// its XID, and completes.
#[test]
fn cancelled_rpcs_are_not_retransmitted() {
    let (mut c, mut e, rs) = connect_raw(RetransmitPolicy {
        max_attempts: 20,
        attempt_timeout: Duration::from_secs(2),
        backoff: Duration::from_millis(10),
        ..RetransmitPolicy::default()
    });
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let xa = c.submit(&null, 1).unwrap();
    let xb = c.submit(&null, 2).unwrap();
    for _ in 0..2 {
        next_call(&mut c, &mut e);
    }
    drop(e); // the connection is lost
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.is_reconnecting() {
        c.poll_completions(|x| panic!("unexpected completion {}", x.xid));
        assert!(Instant::now() < deadline, "the loss was not noticed");
    }
    assert_eq!(c.cancel(xa), Ok(()));
    assert_eq!(c.cancel(xa), Err(CancelError::NotPending));
    let t = std::thread::spawn(move || {
        let mut rs = rs;
        let (e, _) = rs.accept(true);
        (rs, e)
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !t.is_finished() {
        c.poll_completions(|x| seen.push((x.tag, x.xid, x.result.err())));
        assert!(Instant::now() < deadline, "no reconnection");
    }
    let (_rs, mut e) = t.join().unwrap();
    let m = next_call_or(&mut c, &mut e, |x| {
        seen.push((x.tag, x.xid, x.result.err()))
    });
    assert_eq!(
        HeaderView::parse(&m).unwrap().xid(),
        xb,
        "only B is sent again"
    );
    assert_eq!(seen, [(1, xa, Some(RpcError::Cancelled))]);
    assert_eq!(e.send(&reply(xb, Chunks::NONE, &[])), WcStatus::Success);
    let mut done = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done {
        e.poll();
        c.poll_completions(|x| {
            assert_eq!((x.tag, x.xid), (2, xb));
            assert!(x.result.unwrap().is_success());
            done = true;
        });
        assert!(Instant::now() < deadline, "no reply to B");
    }
    for _ in 0..200 {
        e.poll();
        c.poll_completions(|x| panic!("unexpected completion {}", x.xid));
    }
    assert!(e.received.is_empty(), "the cancelled Call was sent again");
    let st = c.snapshot();
    assert_eq!((st.cancels, st.retransmits, c.in_flight()), (1, 1, 0));
}

/// A connection that goes silent (the responder holds a Call without answering, as a peer
/// whose fabric stopped delivering would) is taken as lost once the RPC has waited the
/// policy's `reply_timeout`: the requester reconnects and sends the Call again with its
/// XID, and the answer on the new connection completes it, long before its own timeout.
#[test]
fn a_silent_connection_is_replaced_and_its_calls_sent_again() {
    let (mut c, mut e, rs) = connect_raw(RetransmitPolicy {
        max_attempts: 20,
        attempt_timeout: Duration::from_secs(2),
        backoff: Duration::from_millis(10),
        reply_timeout: Duration::from_millis(100),
    });
    let mut null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    null.timeout = Duration::from_secs(30);
    c.submit(&null, 7).unwrap();
    let first = HeaderView::parse(&next_call(&mut c, &mut e)).unwrap().xid();
    // Not answered: the connection goes after about 100 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.is_dead() {
        e.poll();
        assert!(e.received.is_empty(), "nothing else was sent");
        c.poll_completions(|x| panic!("completion {}", x.xid));
        assert!(Instant::now() < deadline, "the silent connection was kept");
    }
    let (_rs, mut e2) = reaccept(&mut c, rs);
    let again = next_call(&mut c, &mut e2);
    assert_eq!(HeaderView::parse(&again).unwrap().xid(), first, "same XID");
    assert_eq!(e2.send(&reply(first, Chunks::NONE, &[])), WcStatus::Success);
    let mut done = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.is_none() {
        c.poll_completions(|x| done = Some((x.tag, x.result.map(|r| r.is_success()))));
        assert!(
            Instant::now() < deadline,
            "no completion after the retransmission"
        );
    }
    assert_eq!(done, Some((7, Ok(true))));
    let s = c.snapshot();
    assert_eq!(
        (
            s.stalls,
            s.conn_lost,
            s.reconnects,
            s.retransmits,
            s.timeouts
        ),
        (1, 1, 1, 1, 0)
    );
}

/// A reply timeout too large for the clock never acts: the RPC waits for its reply (here
/// through thousands of polls, each timeout check among them) and completes.
#[test]
fn an_unbounded_reply_timeout_never_replaces_the_connection() {
    let (mut c, mut e, _rs) = connect_raw(RetransmitPolicy {
        reply_timeout: Duration::MAX,
        ..RetransmitPolicy::default()
    });
    c.submit(&CallArgs::new(PROG, VERS, NULL, &[], 0), 3)
        .unwrap();
    let xid = HeaderView::parse(&next_call(&mut c, &mut e)).unwrap().xid();
    for _ in 0..10_000 {
        c.poll_completions(|x| panic!("completion {}", x.xid));
    }
    assert!(!c.is_dead());
    assert_eq!(e.send(&reply(xid, Chunks::NONE, &[])), WcStatus::Success);
    let mut done = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done {
        c.poll_completions(|x| {
            assert_eq!((x.tag, x.result.map(|r| r.is_success())), (3, Ok(true)));
            done = true;
        });
        assert!(Instant::now() < deadline, "no completion");
    }
    assert_eq!(c.snapshot().stalls, 0);
}
