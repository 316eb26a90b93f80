//! Shared receive queues on the soft provider, beyond the conformance suite's cases (the
//! crate `rpcrdma-conformance`): a thousand queue pairs on one queue (connected directly, and
//! through the listener), posting from several threads while peers on several threads send,
//! receive faults, exact sizes and the control path's refusals, and a hot path (Sends into
//! the queue, polling, reposting) that allocates nothing.

mod counting;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_conformance::poll_n;
use rpcrdma_engine::fabric::soft::{self, Soft, SoftAddr, SoftConfig, SoftDevice};
use rpcrdma_engine::fabric::{
    Access, BadWr, CompletionQueue, Device, FabricError, Listener, MemoryRegion, PostError,
    ProtectionDomain, Provider, QpCaps, QpInit, QpState, QueuePair, RecvWr, SendWr,
    SharedReceiveQueue, Wc, WcStatus,
};

const T: Duration = Duration::from_secs(20);

/// A device whose completion queues take `qps` queue pairs each and whose domains are small
/// (each connection maps its peer's arena: 16 GiB of address space by default).
fn device(qps: u32) -> SoftDevice {
    SoftDevice::with_config(
        "soft-srq",
        SoftConfig {
            arena_bytes: 64 << 20,
            max_keys: 256,
            qps_per_cq: qps,
        },
    )
}

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// `n` queue pairs of a server, all on one shared receive queue and one receive completion
/// queue, each connected (by `connect`) to a client queue pair of one client domain; each
/// client sends one Send, which takes the oldest receive. Returns what connecting cost.
fn thousand_on_one_srq<F>(n: usize, mut connect: F) -> Connected
where
    F: FnMut(
        &soft::SoftPd,
        QpInit<'_, Soft>,
        &soft::SoftPd,
        QpInit<'_, Soft>,
    ) -> (soft::SoftQp, soft::SoftQp),
{
    let dev = device(n as u32);
    let (cpd, spd) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let depth = (n as u32).next_power_of_two();
    let (cscq, crcq) = (dev.create_cq(depth).unwrap(), dev.create_cq(4).unwrap());
    let (sscq, mut srcq) = (dev.create_cq(4).unwrap(), dev.create_cq(depth).unwrap());
    let srq = spd.create_srq(n as u32, 1).unwrap();
    assert_eq!(srq.depth(), depth);
    let dst = spd.alloc_region(n * 64, Access::LOCAL_WRITE).unwrap();
    for i in 0..n {
        srq.post_recv(&RecvWr::new(i as u64, &[dst.sge(i * 64, 64)]))
            .unwrap();
    }
    let start = Instant::now();
    let mut clients = Vec::with_capacity(n);
    let mut servers = Vec::with_capacity(n);
    for _ in 0..n {
        let mut sinit = QpInit::new(&sscq, &srcq, caps());
        sinit.srq = Some(&srq);
        let (c, s) = connect(&cpd, QpInit::new(&cscq, &crcq, caps()), &spd, sinit);
        assert_eq!(s.caps().max_recv_wr, 0, "no receive queue of its own");
        clients.push(c);
        servers.push(s);
    }
    let connected = Connected {
        took: start.elapsed(),
        fds: std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()),
        threads: std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count()),
    };
    let mut cscq = cscq;
    for (i, c) in clients.iter_mut().enumerate() {
        let msg = (i as u32).to_le_bytes();
        c.post_send(&SendWr::send_inline(i as u64, &msg).signaled())
            .unwrap();
        if i % 256 == 255 {
            poll_sends(&mut cscq, 256);
        }
    }
    poll_sends(&mut cscq, n % 256);
    let got = poll_n::<Soft>(&mut srcq, n, T).unwrap();
    for (i, wc) in got.iter().enumerate() {
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i as u64, WcStatus::Success, 4)
        );
        assert_eq!(wc.qp_num, servers[i].qp_num(), "receive {i}");
        let mut b = [0; 4];
        dst.read_at(i * 64, &mut b);
        assert_eq!(u32::from_le_bytes(b), i as u32);
    }
    assert_eq!(srcq.poll(&mut [Wc::default(); 4]).unwrap(), 0);
    // Every slot was handed back: the whole depth can be posted again.
    let again = vec![RecvWr::new(0, &[]); depth as usize];
    assert_eq!(srq.post_recv_list(&again), Ok(()), "slots handed back");
    // Queue pairs first, then the queues and domains they use.
    drop(servers);
    drop(clients);
    connected
}

/// What connecting the queue pairs took: time, and the process's descriptors and threads
/// once they were all connected.
#[derive(Debug)]
#[allow(dead_code)] // Read through Debug.
struct Connected {
    took: Duration,
    fds: usize,
    threads: usize,
}

fn poll_sends(cq: &mut soft::SoftCq, n: usize) {
    for wc in poll_n::<Soft>(cq, n, T).unwrap() {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
}

/// A thousand queue pairs connected directly (`soft::pair`) on one shared receive queue,
/// each receiving one Send.
#[test]
fn thousand_queue_pairs_on_one_srq_direct() {
    let took = thousand_on_one_srq(1000, |cpd, cinit, spd, sinit| {
        soft::pair(cpd, cinit, spd, sinit).unwrap()
    });
    eprintln!("1000 direct pairs on one shared receive queue: {took:?}");
}

/// The same through the listener and Unix sockets: every client maps the server's shared
/// receive queue in its handshake. Each connection costs two watchdog threads and some
/// fifteen descriptors (both ends are in this process), so the count is what the descriptor
/// limit allows, up to a thousand.
#[test]
fn thousand_queue_pairs_on_one_srq_over_sockets() {
    let n = sockets_for_descriptors(1000);
    let dev = device(n as u32);
    let addr = SoftAddr::unique("srq-thousand");
    let mut listener = Soft::listen(&dev, &addr).unwrap();
    let took = thousand_on_one_srq(n, |cpd, cinit, spd, sinit| {
        thread::scope(|s| {
            let addr = &addr;
            let client = s.spawn(move || {
                Soft::connect(cpd, addr, cinit, &[], T, |_| Ok(())).map(|(qp, _)| qp)
            });
            let served = listener.accept(spd, sinit, &[], T, |_| Ok(()));
            let c = client.join().unwrap().expect("connect");
            (c, served.expect("accept").0)
        })
    });
    eprintln!("{n} socket connections on one shared receive queue: {took:?}");
}

/// How many socket connections of both ends fit in this process's descriptor limit (raised
/// to its hard limit), at most `want`.
fn sockets_for_descriptors(want: usize) -> usize {
    const PER_CONNECTION: u64 = 16;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit; raising the soft limit to the hard one is allowed.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    // SAFETY: as for the first call.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let fit = (lim.rlim_cur.saturating_sub(256) / PER_CONNECTION) as usize;
    if fit < want {
        eprintln!(
            "descriptor limit {}: {fit} socket connections instead of {want}",
            lim.rlim_cur
        );
    }
    fit.min(want)
}

/// Four clients on four threads send through four queue pairs on one shared receive queue
/// while two threads repost its receives as the server's poll hands them back: every
/// message arrives once, each client's in its order, and no post ever waits (a post refused
/// because its slot's receive is still being consumed is retried).
#[test]
fn concurrent_posters_and_senders() {
    const CLIENTS: usize = 4;
    const PER_CLIENT: u64 = 5000;
    const DEPTH: u32 = 64;
    let dev = device(8);
    let (cpd, spd) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let sscq = dev.create_cq(4).unwrap();
    let mut srcq = dev.create_cq(256).unwrap();
    let srq = spd.create_srq(DEPTH, 1).unwrap();
    let dst = spd
        .alloc_region(DEPTH as usize * 64, Access::LOCAL_WRITE)
        .unwrap();
    for i in 0..DEPTH as usize {
        srq.post_recv(&RecvWr::new(i as u64, &[dst.sge(i * 64, 64)]))
            .unwrap();
    }
    let mut ends = Vec::new();
    for _ in 0..CLIENTS {
        let (scq, rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(4).unwrap());
        let mut sinit = QpInit::new(&sscq, &srcq, caps());
        sinit.srq = Some(&srq);
        let (c, s) = soft::pair(&cpd, QpInit::new(&scq, &rcq, caps()), &spd, sinit).unwrap();
        ends.push((c, s, scq, rcq));
    }
    let qp_nums: Vec<u32> = ends.iter().map(|e| e.1.qp_num()).collect();
    // Receives the server has handed back and not reposted yet: what clients may send into.
    let credits = AtomicU64::new(u64::from(DEPTH));
    let done = AtomicBool::new(false);
    let (repost_tx, repost_rx) = std::sync::mpsc::channel::<u64>();
    let repost_rx = std::sync::Mutex::new(repost_rx);
    let refused = AtomicU64::new(0);
    let mut seen = vec![Vec::new(); CLIENTS];
    thread::scope(|s| {
        for (k, (c, _, scq, _)) in ends.iter_mut().enumerate() {
            let credits = &credits;
            s.spawn(move || {
                for i in 0..PER_CLIENT {
                    loop {
                        let have = credits.load(Ordering::Acquire);
                        if have > 0
                            && credits
                                .compare_exchange(
                                    have,
                                    have - 1,
                                    Ordering::AcqRel,
                                    Ordering::Relaxed,
                                )
                                .is_ok()
                        {
                            break;
                        }
                        thread::yield_now();
                    }
                    let msg = ((k as u64) << 32 | i).to_le_bytes();
                    let mut wr = SendWr::send_inline(i, &msg);
                    if i % 8 == 7 {
                        wr = wr.signaled();
                    }
                    c.post_send(&wr).unwrap();
                    if i % 8 == 7 {
                        let wc = poll_n::<Soft>(scq, 1, T).unwrap()[0];
                        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                    }
                }
            });
        }
        for _ in 0..2 {
            let (srq, dst, credits, done, rx, refused) =
                (&srq, &dst, &credits, &done, &repost_rx, &refused);
            s.spawn(move || loop {
                let slot = match rx.lock().unwrap().recv_timeout(Duration::from_millis(10)) {
                    Ok(slot) => slot,
                    Err(_) if done.load(Ordering::Acquire) => return,
                    Err(_) => continue,
                };
                let sge = [dst.sge(slot as usize * 64, 64)];
                loop {
                    match srq.post_recv(&RecvWr::new(slot, &sge)) {
                        Ok(()) => break,
                        Err(PostError::QueueFull) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                credits.fetch_add(1, Ordering::AcqRel);
            });
        }
        let total = CLIENTS as u64 * PER_CLIENT;
        let mut got = 0;
        let mut wc = [Wc::default(); 32];
        let deadline = Instant::now() + T;
        while got < total {
            assert!(Instant::now() < deadline, "{got} of {total} arrived");
            let n = srcq.poll(&mut wc).unwrap();
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                let mut b = [0; 8];
                dst.read_at(w.wr_id as usize * 64, &mut b);
                let msg = u64::from_le_bytes(b);
                let k = (msg >> 32) as usize;
                assert_eq!(
                    w.qp_num, qp_nums[k],
                    "client {k}'s message on its queue pair"
                );
                seen[k].push(msg as u32 as u64);
                repost_tx.send(w.wr_id).unwrap();
            }
            got += n as u64;
        }
        done.store(true, Ordering::Release);
    });
    for (k, s) in seen.iter().enumerate() {
        assert!(
            s.iter().copied().eq(0..PER_CLIENT),
            "client {k}'s messages in order"
        );
    }
    eprintln!(
        "posts refused while their slot's receive was being consumed: {}",
        refused.load(Ordering::Relaxed)
    );
}

/// A receive fault on a queue pair made with a shared receive queue counts that queue
/// pair's receives: the second from now fails, with the sender's remote operation error,
/// and the next receive of the queue is the other queue pair's.
#[test]
fn receive_fault_on_a_shared_receive_queue() {
    let dev = device(4);
    let (cpd, spd) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let (cscq, crcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let (sscq, mut srcq) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let srq = spd.create_srq(8, 1).unwrap();
    let dst = spd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..6 {
        srq.post_recv(&RecvWr::new(i, &[dst.sge(i as usize * 64, 64)]))
            .unwrap();
    }
    let mut sinit = QpInit::new(&sscq, &srcq, caps());
    sinit.srq = Some(&srq);
    let (mut c1, s1) = soft::pair(&cpd, QpInit::new(&cscq, &crcq, caps()), &spd, sinit).unwrap();
    let (mut c2, s2) = soft::pair(&cpd, QpInit::new(&cscq, &crcq, caps()), &spd, sinit).unwrap();
    let mut cscq = cscq;
    // Receives of the other queue pair do not count.
    c2.post_send(&SendWr::send_inline(1, b"x")).unwrap();
    s1.faults().fail_nth_recv(2, WcStatus::LocProtErr);
    c2.post_send(&SendWr::send_inline(2, b"x")).unwrap();
    c1.post_send(&SendWr::send_inline(3, b"x")).unwrap();
    c1.post_send(&SendWr::send_inline(4, b"x").signaled())
        .unwrap();
    let wc = poll_n::<Soft>(&mut cscq, 1, T).unwrap()[0];
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::RemOpErr));
    let got: Vec<_> = poll_n::<Soft>(&mut srcq, 4, T)
        .unwrap()
        .iter()
        .map(|w| (w.wr_id, w.qp_num, w.status))
        .collect();
    let (q1, q2) = (s1.qp_num(), s2.qp_num());
    assert_eq!(
        got,
        [
            (0, q2, WcStatus::Success),
            (1, q2, WcStatus::Success),
            (2, q1, WcStatus::Success),
            (3, q1, WcStatus::LocProtErr),
        ]
    );
    assert_eq!(s1.state(), QpState::Err);
    // The failed queue pair flushed none of the queue's receives: the other takes the next.
    c2.post_send(&SendWr::send_inline(5, b"x")).unwrap();
    let wc = poll_n::<Soft>(&mut srcq, 1, T).unwrap()[0];
    assert_eq!((wc.wr_id, wc.qp_num, wc.status), (4, q2, WcStatus::Success));
}

/// Sizes granted and the control path's refusals.
#[test]
fn sizes_and_refusals() {
    let dev = device(4);
    let max = dev.attr().max_srq_wr;
    assert_eq!(max, 1 << 16);
    let pd = dev.alloc_pd().unwrap();
    for (wr, sge) in [(0, 1), (max + 1, 1), (4, 17)] {
        assert!(
            matches!(pd.create_srq(wr, sge), Err(FabricError::InvalidArgument(_))),
            "create_srq({wr}, {sge})"
        );
    }
    assert_eq!(pd.create_srq(1, 1).unwrap().depth(), 2);
    assert_eq!(pd.create_srq(5, 1).unwrap().depth(), 8);
    assert_eq!(pd.create_srq(max, 16).unwrap().depth(), max);
    let srq = pd.create_srq(4, 1).unwrap();
    assert!(srq.arm_limit(5).is_err());
    assert!(srq.arm_limit(4).is_ok());
    assert!(srq.arm_limit(0).is_ok());
    // Full: the fifth is refused, the list stops at it.
    let r = [RecvWr::new(0, &[]); 6];
    assert_eq!(
        srq.post_recv_list(&r),
        Err(BadWr {
            index: 4,
            error: PostError::QueueFull
        })
    );
    // A queue pair of another domain may not use it.
    let other = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4).unwrap();
    let mut init = QpInit::new(&cq, &cq, caps());
    init.srq = Some(&srq);
    let peer = QpInit::new(&cq, &cq, caps());
    assert!(matches!(
        soft::pair(&pd, peer, &other, init),
        Err(FabricError::InvalidArgument(_))
    ));
    // Its own, with receive capacities it ignores.
    init.caps.max_recv_wr = 0;
    init.caps.max_recv_sge = 99;
    let (_a, b) = soft::pair(&other, peer, &pd, init).unwrap();
    assert_eq!((b.caps().max_recv_wr, b.caps().max_recv_sge), (0, 0));
}

/// Sends from two clients into two queue pairs on one shared receive queue, polled and
/// reposted as they arrive, go through the global allocator zero times after warming up.
#[test]
fn hot_path_does_not_allocate() {
    let dev = device(4);
    let (cpd, spd) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let (cscq, crcq) = (dev.create_cq(64).unwrap(), dev.create_cq(4).unwrap());
    let (sscq, mut srcq) = (dev.create_cq(4).unwrap(), dev.create_cq(64).unwrap());
    let srq = spd.create_srq(16, 1).unwrap();
    let dst = spd.alloc_region(16 * 1024, Access::LOCAL_WRITE).unwrap();
    let src = cpd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..16u64 {
        srq.post_recv(&RecvWr::new(i, &[dst.sge(i as usize * 1024, 1024)]))
            .unwrap();
    }
    let mut sinit = QpInit::new(&sscq, &srcq, caps());
    sinit.srq = Some(&srq);
    let cinit = QpInit::new(&cscq, &crcq, caps());
    let (c1, _s1) = soft::pair(&cpd, cinit, &spd, sinit).unwrap();
    let (c2, _s2) = soft::pair(&cpd, cinit, &spd, sinit).unwrap();
    let mut clients = [c1, c2];
    let mut cscq = cscq;
    let mut wc = [Wc::default(); 16];
    let mut round = |i: u64| {
        let sge = [src.sge(0, 200)];
        // Every 8th Send of each client.
        let signaled = (i / 2) % 8 == 7;
        let mut wr = SendWr::send(i, &sge);
        if signaled {
            wr = wr.signaled();
        }
        clients[i as usize % 2].post_send(&wr).unwrap();
        let mut got = 0;
        while got == 0 {
            let n = srcq.poll(&mut wc).unwrap();
            for c in &wc[..n] {
                assert!(c.status.is_ok(), "{c:?}");
                let sge = [dst.sge(c.wr_id as usize * 1024, 1024)];
                srq.post_recv(&RecvWr::new(c.wr_id, &sge)).unwrap();
                got += 1;
            }
        }
        if signaled {
            while cscq.poll(&mut wc).unwrap() == 0 {}
        }
    };
    for i in 0..1000 {
        round(i);
    }
    let ((), allocs) = counting::counted(|| {
        for i in 1000..21000 {
            round(i);
        }
    });
    assert_eq!(allocs, 0, "allocations on the hot path");
    counting::assert_counter_counts();
}
