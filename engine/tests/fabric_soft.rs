//! The soft provider's own features, beyond the fabric conformance suite (the crate
//! `rpcrdma-conformance`, whose `tests/soft.rs` runs the suite on this provider): fault
//! injection, exact limits, connection management.

use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_conformance::{poll_n, poll_one, Env, SoftEnv};
use rpcrdma_engine::fabric::soft::{self, Delay, Soft, SoftAddr, SoftConfig, SoftDevice};
use rpcrdma_engine::fabric::{
    Access, CompletionQueue, ConnectError, CqError, Device, FabricError, Listener, MemoryRegion,
    MemoryWindow, MwBind, PostError, ProtectionDomain, Provider, QpCaps, QpInit, QpState,
    QueuePair, RecvWr, RemoteAddr, SendWr, Sge, Wc, WcOpcode, WcStatus,
};

const T: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// Soft provider specifics.
// ---------------------------------------------------------------------------------------

struct Side {
    qp: soft::SoftQp,
    scq: soft::SoftCq,
    rcq: soft::SoftCq,
    pd: soft::SoftPd,
}

fn direct_pair(caps: QpCaps, cq_depth: u32) -> (Side, Side) {
    let dev = Soft::open_device(None).unwrap();
    let mk = || {
        (
            dev.create_cq(cq_depth).unwrap(),
            dev.create_cq(cq_depth).unwrap(),
            dev.alloc_pd().unwrap(),
        )
    };
    let (sa, ra, pa) = mk();
    let (sb, rb, pb) = mk();
    let (qa, qb) = soft::pair(
        &pa,
        QpInit::new(&sa, &ra, caps),
        &pb,
        QpInit::new(&sb, &rb, caps),
    )
    .unwrap();
    (
        Side {
            qp: qa,
            scq: sa,
            rcq: ra,
            pd: pa,
        },
        Side {
            qp: qb,
            scq: sb,
            rcq: rb,
            pd: pb,
        },
    )
}

fn post_recvs(side: &mut Side, mr: &soft::SoftMr, n: u64) {
    for i in 0..n {
        side.qp
            .post_recv(&RecvWr::new(i, &[mr.sge(i as usize * 64, 64)]))
            .unwrap();
    }
}

fn poll_now(cq: &mut soft::SoftCq) -> Vec<Wc> {
    let mut wc = [Wc::default(); 32];
    let n = cq.poll(&mut wc).unwrap();
    wc[..n].to_vec()
}

/// A region used by a Send and then deregistered is refused by the next Send that names it,
/// on either side: the source (local protection error) and the receive it lands in (the
/// receiver's error, a remote operation error at the sender). The soft provider remembers
/// the last region each queue pair resolved; a deregistration must make it look again.
#[test]
fn deregistered_regions_are_refused_after_use() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 2);
    let src = a.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let sge = src.sge(0, 16);
    a.qp.post_send(&SendWr::send(1, &[sge]).signaled()).unwrap();
    let wc = poll_one::<Soft>(&mut a.scq, T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
    assert_eq!(
        poll_one::<Soft>(&mut b.rcq, T).unwrap().status,
        WcStatus::Success
    );
    drop(src);
    a.qp.post_send(&SendWr::send(2, &[sge]).signaled()).unwrap();
    let wc = poll_one::<Soft>(&mut a.scq, T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::LocProtErr), "{wc:?}");

    // The receiving side: a receive posted into a region deregistered since the last Send.
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 2);
    a.qp.post_send(&SendWr::send_inline(1, b"first").signaled())
        .unwrap();
    assert_eq!(
        poll_one::<Soft>(&mut a.scq, T).unwrap().status,
        WcStatus::Success
    );
    assert_eq!(
        poll_one::<Soft>(&mut b.rcq, T).unwrap().status,
        WcStatus::Success
    );
    drop(dst);
    a.qp.post_send(&SendWr::send_inline(2, b"second").signaled())
        .unwrap();
    let wc = poll_one::<Soft>(&mut a.scq, T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::RemOpErr), "{wc:?}");
    let wc = poll_one::<Soft>(&mut b.rcq, T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocQpOpErr), "{wc:?}");
}

#[test]
fn fault_fail_nth_send() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 8);
    a.qp.faults().fail_nth_send(3, WcStatus::RemAccessErr);
    for i in 0..4 {
        a.qp.post_send(&SendWr::send_inline(i, b"m").signaled())
            .unwrap();
    }
    let wc = poll_n::<Soft>(&mut a.scq, 4, T).unwrap();
    let st: Vec<_> = wc.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        st,
        [
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::RemAccessErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(a.qp.state(), QpState::Err);
    assert_eq!(
        poll_n::<Soft>(&mut b.rcq, 2, T).unwrap().len(),
        2,
        "only two messages arrived"
    );
    assert!(poll_now(&mut b.rcq).is_empty());
}

#[test]
fn fault_fail_nth_recv() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 4);
    b.qp.faults().fail_nth_recv(2, WcStatus::LocProtErr);
    for i in 0..3 {
        a.qp.post_send(&SendWr::send_inline(i, b"m").signaled())
            .unwrap();
    }
    let sent: Vec<_> = poll_n::<Soft>(&mut a.scq, 3, T)
        .unwrap()
        .iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(
        sent,
        [WcStatus::Success, WcStatus::RemOpErr, WcStatus::WrFlushErr]
    );
    let got: Vec<_> = poll_n::<Soft>(&mut b.rcq, 4, T)
        .unwrap()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        [
            (0, WcStatus::Success),
            (1, WcStatus::LocProtErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(b.qp.state(), QpState::Err);
}

/// A list of Sends claims the peer's receives and completion slots at once; what it does
/// not use goes back: receives to the peer's ring, slots as empty entries `poll` skips.
#[test]
fn send_lists_claim_in_one_go_and_give_back_the_rest() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let src = a.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 6);
    // Five Sends, the third from a key that does not exist: two arrive, the third fails
    // locally, the rest flush; the three receives claimed for them go back.
    let good = [src.sge(0, 8)];
    let bad = [Sge::new(src.sge(0, 8).addr, 8, 0xdead_0000)];
    let wrs: Vec<_> = (0..5u64)
        .map(|i| SendWr::send(i, if i == 2 { &bad[..] } else { &good[..] }).signaled())
        .collect();
    a.qp.post_send_list(&wrs).unwrap();
    let sent: Vec<_> = poll_n::<Soft>(&mut a.scq, 5, T)
        .unwrap()
        .iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(
        sent,
        [
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::LocProtErr,
            WcStatus::WrFlushErr,
            WcStatus::WrFlushErr
        ]
    );
    let got: Vec<_> = poll_n::<Soft>(&mut b.rcq, 2, T)
        .unwrap()
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len))
        .collect();
    assert_eq!(got, [(0, WcStatus::Success, 8), (1, WcStatus::Success, 8)]);
    assert!(poll_now(&mut b.rcq).is_empty(), "unused slots are skipped");
    assert_eq!(b.qp.state(), QpState::Rts, "the peer is untouched");
    // The three receives claimed and not used are posted again: ending the connection
    // flushes them with the one never claimed, behind the skipped slots.
    b.qp.disconnect();
    let flushed: Vec<_> = poll_n::<Soft>(&mut b.rcq, 4, T)
        .unwrap()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        flushed,
        [2, 3, 4, 5].map(|i| (i, WcStatus::WrFlushErr)).to_vec()
    );

    // A fresh pair: a list longer than the receives posted. Those posted are used in order,
    // the first without one fails with RNR, the rest flush.
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let src = a.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 3);
    let good = [src.sge(0, 8)];
    let wrs: Vec<_> = (0..5u64)
        .map(|i| SendWr::send(i, &good[..]).signaled())
        .collect();
    a.qp.post_send_list(&wrs).unwrap();
    let sent: Vec<_> = poll_n::<Soft>(&mut a.scq, 5, T)
        .unwrap()
        .iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(
        sent,
        [
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::RnrRetryExcErr,
            WcStatus::WrFlushErr
        ]
    );
    let got: Vec<_> = poll_n::<Soft>(&mut b.rcq, 3, T)
        .unwrap()
        .iter()
        .map(|c| c.wr_id)
        .collect();
    assert_eq!(got, [0, 1, 2]);
    assert!(poll_now(&mut b.rcq).is_empty());

    // Many lists in a row on a healthy pair: every message arrives once, in order, and the
    // completion queue never holds more than it should.
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let src = a.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let sge = [src.sge(0, 8)];
    for round in 0..50u64 {
        let n = 2 + round % 7;
        post_recvs(&mut b, &dst, n);
        // The last one signaled: its completion retires the list's send slots.
        let wrs: Vec<_> = (0..n)
            .map(|i| {
                let wr = SendWr::send(round * 100 + i, &sge);
                if i + 1 == n {
                    wr.signaled()
                } else {
                    wr
                }
            })
            .collect();
        a.qp.post_send_list(&wrs).unwrap();
        let got = poll_n::<Soft>(&mut b.rcq, n as usize, T).unwrap();
        let ids: Vec<_> = got.iter().map(|c| (c.wr_id, c.status)).collect();
        let want: Vec<_> = (0..n).map(|i| (i, WcStatus::Success)).collect();
        assert_eq!(ids, want, "round {round}");
        assert_eq!(
            poll_n::<Soft>(&mut a.scq, 1, T).unwrap()[0].wr_id,
            round * 100 + n - 1
        );
        assert!(poll_now(&mut b.rcq).is_empty());
    }
}

#[test]
fn fault_delay_by_polls_keeps_order() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 4);
    a.qp.faults().delay_completions(Some(Delay::Polls(3)));
    a.qp.post_send(&SendWr::send_inline(1, b"m").signaled())
        .unwrap();
    a.qp.faults().clear();
    a.qp.post_send(&SendWr::send_inline(2, b"m").signaled())
        .unwrap();
    for _ in 0..3 {
        assert!(
            poll_now(&mut a.scq).is_empty(),
            "completion visible too early"
        );
    }
    let ids: Vec<_> = poll_now(&mut a.scq).iter().map(|c| c.wr_id).collect();
    assert_eq!(
        ids,
        [1, 2],
        "the delayed completion holds back the later one"
    );
    // Delays apply to receive completions the peer produces, too.
    b.qp.faults().delay_completions(Some(Delay::Polls(2)));
    a.qp.post_send(&SendWr::send_inline(3, b"m")).unwrap();
    // The first poll returns the two earlier receives and is the first to see the delayed
    // one; the second sees it again; the third returns it.
    assert_eq!(
        poll_now(&mut b.rcq).len(),
        2,
        "the two earlier receives were not delayed"
    );
    assert!(poll_now(&mut b.rcq).is_empty());
    assert_eq!(poll_now(&mut b.rcq).len(), 1);
}

#[test]
fn fault_delay_by_time() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 1);
    a.qp.faults()
        .delay_completions(Some(Delay::For(Duration::from_millis(30))));
    let start = Instant::now();
    a.qp.post_send(&SendWr::send_inline(1, b"m").signaled())
        .unwrap();
    let wc = poll_one::<Soft>(&mut a.scq, T).unwrap();
    assert_eq!(wc.wr_id, 1);
    assert!(
        start.elapsed() >= Duration::from_millis(29),
        "visible after {:?}",
        start.elapsed()
    );
    assert_eq!(
        poll_one::<Soft>(&mut b.rcq, T).unwrap().status,
        WcStatus::Success
    );
}

#[test]
fn fault_drop_connection_from_another_thread() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 64);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let own = a.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 3);
    post_recvs(&mut a, &own, 2);
    let faults = a.qp.faults();
    thread::spawn(move || faults.drop_connection())
        .join()
        .unwrap();
    assert!(poll_n::<Soft>(&mut b.rcq, 3, T)
        .unwrap()
        .iter()
        .all(|c| c.status == WcStatus::WrFlushErr));
    assert!(poll_n::<Soft>(&mut a.rcq, 2, T)
        .unwrap()
        .iter()
        .all(|c| c.status == WcStatus::WrFlushErr));
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Err, QpState::Err));
}

#[test]
fn fault_drop_connection_over_sockets_wakes_the_peer() {
    let env = SoftEnv::sockets();
    let dev = env.device();
    let (sa, sb) = (dev.create_cq(16).unwrap(), dev.create_cq(16).unwrap());
    let (pa, pb) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let caps = QpCaps::default();
    let (qa, mut qb) = env
        .pair(
            rpcrdma_conformance::Side {
                pd: &pa,
                init: QpInit::new(&sa, &sa, caps),
            },
            rpcrdma_conformance::Side {
                pd: &pb,
                init: QpInit::new(&sb, &sb, caps),
            },
        )
        .unwrap();
    let dst = pb.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    qb.post_recv(&RecvWr::new(5, &[dst.sge(0, 64)])).unwrap();
    qa.faults().drop_connection();
    let mut sb = sb;
    let wc = poll_one::<Soft>(&mut sb, T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::WrFlushErr));
}

#[test]
fn exact_limits() {
    let caps = QpCaps {
        max_send_wr: 5,
        max_recv_wr: 3,
        max_send_sge: 3,
        max_recv_sge: 2,
        max_inline_data: 40,
    };
    let (mut a, mut b) = direct_pair(caps, 4);
    assert_eq!(a.qp.caps(), caps, "soft grants exactly what is asked");
    assert_eq!(a.scq.depth(), 4);
    assert_eq!(
        Soft::open_device(None)
            .unwrap()
            .create_cq(5)
            .unwrap()
            .depth(),
        8
    );
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 3);
    assert_eq!(
        b.qp.post_recv(&RecvWr::new(9, &[])),
        Err(PostError::QueueFull)
    );
    assert_eq!(
        a.qp.post_send(&SendWr::send_inline(1, &[0; 41])),
        Err(PostError::InlineTooLarge { given: 41, max: 40 })
    );
    // Receiver's status for an oversized message is exactly LOC_LEN_ERR on soft.
    let src = a.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    a.qp.post_send(&SendWr::send(1, &[src.sge(0, 65)])).unwrap();
    assert_eq!(
        poll_one::<Soft>(&mut b.rcq, T).unwrap().status,
        WcStatus::LocLenErr
    );
}

#[test]
fn cq_overrun_is_exact() {
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpCaps::default()
    };
    let (mut a, mut b) = direct_pair(caps, 4);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    post_recvs(&mut b, &dst, 6);
    for i in 0..4 {
        a.qp.post_send(&SendWr::send_inline(i, b"x")).unwrap();
    }
    assert_eq!(
        b.qp.state(),
        QpState::Rts,
        "a full queue is not yet an overrun"
    );
    a.qp.post_send(&SendWr::send_inline(4, b"x").signaled())
        .unwrap();
    let wc = poll_one::<Soft>(&mut a.scq, T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status),
        (4, WcStatus::RetryExcErr),
        "the responder lost the completion"
    );
    assert_eq!(b.qp.state(), QpState::Err);
    assert_eq!(b.rcq.poll(&mut [Wc::default(); 4]), Err(CqError::Overrun));
}

#[test]
fn region_drop_with_bound_window_invalidates() {
    let (mut a, mut b) = direct_pair(QpCaps::default(), 16);
    let src = a.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let mr =
        b.pd.alloc_region(4096, Access::LOCAL_WRITE | Access::MW_BIND)
            .unwrap();
    let mw = b.pd.alloc_mw().unwrap();
    let bind = MwBind {
        mw: &mw,
        rkey: mw.next_rkey(),
        mr: &mr,
        addr: mr.addr(),
        len: 4096,
        access: Access::REMOTE_WRITE,
    };
    b.qp.post_send(&SendWr::bind_mw(1, bind).signaled())
        .unwrap();
    assert_eq!(
        poll_one::<Soft>(&mut b.scq, T).unwrap().status,
        WcStatus::Success
    );
    let at = RemoteAddr::new(mr.addr(), mw.rkey());
    drop(mr);
    a.qp.post_send(&SendWr::write(2, &[src.sge(0, 8)], at).signaled())
        .unwrap();
    assert_eq!(
        poll_one::<Soft>(&mut a.scq, T).unwrap().status,
        WcStatus::RemAccessErr
    );
}

#[test]
fn control_path_errors() {
    let dev = SoftDevice::with_config(
        "tiny",
        SoftConfig {
            arena_bytes: 64 << 10,
            max_keys: 4,
            qps_per_cq: 1,
        },
    );
    let pd = dev.alloc_pd().unwrap();
    assert!(matches!(
        pd.alloc_region(0, Access::NONE),
        Err(FabricError::InvalidArgument(_))
    ));
    assert!(matches!(
        pd.alloc_region(4096, Access::REMOTE_WRITE),
        Err(FabricError::InvalidArgument(_))
    ));
    assert!(matches!(
        pd.alloc_region(1 << 20, Access::NONE),
        Err(FabricError::Exhausted(_))
    ));
    let keys: Vec<_> = (0..3).map(|_| pd.alloc_mw().unwrap()).collect();
    assert!(
        matches!(pd.alloc_mw(), Err(FabricError::Exhausted(_))),
        "key table of 4 holds 3 keys"
    );
    drop(keys);
    assert!(pd.alloc_mw().is_ok());
    let cq = dev.create_cq(4).unwrap();
    let caps = QpCaps::default();
    let _qp = soft::pair(
        &pd,
        QpInit::new(&cq, &cq, caps),
        &pd,
        QpInit::new(&dev.create_cq(4).unwrap(), &cq, caps),
    );
    assert!(
        _qp.is_err(),
        "a completion queue for one queue pair refuses the second"
    );
    assert!(dev.create_cq(0).is_err());
}

#[test]
fn connection_management() {
    let dev = Soft::open_device(None).unwrap();
    // No listener.
    let (cq, pd) = (dev.create_cq(8).unwrap(), dev.alloc_pd().unwrap());
    let init = QpInit::new(&cq, &cq, QpCaps::default());
    let r = Soft::connect(&pd, &SoftAddr::unique("nobody"), init, &[], T, |_| Ok(()));
    assert!(matches!(r, Err(ConnectError::Unreachable)), "{:?}", r.err());
    // A listener that nobody calls times out.
    let addr = SoftAddr::unique("idle");
    let mut l = Soft::listen(&dev, &addr).unwrap();
    let t0 = Instant::now();
    assert!(matches!(
        l.get_request(Duration::from_millis(50)),
        Err(ConnectError::Timeout)
    ));
    assert!(t0.elapsed() >= Duration::from_millis(45));
    // Sends are refused before the connection is established, receives are not.
    let path = std::env::temp_dir().join(format!("rpcrdma-soft-test-{}.sock", std::process::id()));
    let addr = SoftAddr::Path(path.clone());
    let mut l = Soft::listen(&dev, &addr).unwrap();
    let buf = pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let (qa, qb) = thread::scope(|s| {
        let c = s.spawn(|| {
            Soft::connect(&pd, &addr, init, b"hi", T, |qp| {
                assert_eq!(qp.state(), QpState::Init);
                assert_eq!(
                    qp.post_send(&SendWr::send_inline(1, b"early")),
                    Err(PostError::NotConnected)
                );
                qp.post_recv(&RecvWr::new(1, &[buf.sge(0, 64)]))
            })
        });
        let served = l.accept(&pd, init, b"ho", T, |qp| {
            assert_eq!(
                qp.post_send(&SendWr::send_inline(1, b"early")),
                Err(PostError::NotConnected)
            );
            Ok(())
        });
        (c.join().unwrap().unwrap(), served.unwrap())
    });
    assert!(path.exists());
    assert_eq!(qa.0.state(), QpState::Rts);
    assert_eq!(qb.0.state(), QpState::Rts);
    assert_eq!(&qa.1.as_bytes()[..2], b"ho");
    assert_eq!(
        qa.1.len(),
        196,
        "accept private data arrives padded as over rdma_cm"
    );
    assert_eq!(
        qb.1.len(),
        56,
        "connect private data arrives padded as over rdma_cm"
    );
    let _client = qa;
    let mut qb = qb.0;
    qb.post_send(&SendWr::send_inline(7, b"pre-posted").signaled())
        .unwrap();
    let mut cq = cq;
    let got = poll_n::<Soft>(&mut cq, 2, T).unwrap();
    assert!(got
        .iter()
        .any(|c| c.opcode == WcOpcode::Recv && c.byte_len == 10));
    drop(l);
    assert!(!path.exists(), "the socket file goes with the listener");
}

#[test]
fn shared_cq_with_concurrent_producers() {
    const N: u64 = 3000;
    let dev = Soft::open_device(None).unwrap();
    let rcq = dev.create_cq(2 * N as u32).unwrap();
    let bpd = dev.alloc_pd().unwrap();
    let dst = bpd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: N as u32,
        ..QpCaps::default()
    };
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..2 {
        let scq = dev.create_cq(64).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let bscq = dev.create_cq(8).unwrap();
        let (qa, mut qb) = soft::pair(
            &pd,
            QpInit::new(&scq, &scq, caps),
            &bpd,
            QpInit::new(&bscq, &rcq, caps),
        )
        .unwrap();
        for i in 0..N {
            qb.post_recv(&RecvWr::new(i, &[dst.sge(0, 64)])).unwrap();
        }
        senders.push((qa, scq, pd));
        receivers.push((qb, bscq));
    }
    let qpns: Vec<u32> = receivers.iter().map(|r| r.0.qp_num()).collect();
    thread::scope(|s| {
        for (qa, scq, _) in senders.iter_mut() {
            s.spawn(move || {
                for i in 0..N {
                    let signaled = i % 16 == 15;
                    let bytes = i.to_le_bytes();
                    let wr = SendWr::send_inline(i, &bytes);
                    let wr = if signaled { wr.signaled() } else { wr };
                    loop {
                        match qa.post_send(&wr) {
                            Ok(()) => break,
                            Err(PostError::QueueFull) => {
                                poll_n::<Soft>(scq, 1, T).unwrap();
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
    });
    let mut rcq = rcq;
    let got = poll_n::<Soft>(&mut rcq, 2 * N as usize, T).unwrap();
    for qpn in qpns {
        let ids: Vec<u64> = got
            .iter()
            .filter(|c| c.qp_num == qpn)
            .map(|c| c.wr_id)
            .collect();
        assert_eq!(
            ids,
            (0..N).collect::<Vec<_>>(),
            "receives of one queue pair complete in order"
        );
    }
    assert!(got.iter().all(|c| c.status == WcStatus::Success));
}

/// A watch table tells a queue with a completion at its cursor from one without, across a
/// wrap of the ring, and forgets its positions when woken or rebuilt.
#[test]
fn a_watch_table_sees_completions_arrive() {
    use rpcrdma_engine::fabric::WatchTable;
    let (mut a, mut b) = direct_pair(QpCaps::default(), 4);
    let dst = b.pd.alloc_region(4096, Access::LOCAL_WRITE).unwrap();
    let mut table = WatchTable::with_capacity(2);
    // Entry 0 watches b's receive queue; entry 1 has no watch (always polled).
    table.rebuild([b.rcq.watch(), None].into_iter());
    assert_eq!(table.len(), 2);
    assert!(table.is_watched(0) && !table.is_watched(1));
    assert!(!table.quiet(0), "not waiting yet: polled");
    assert!(!table.quiet(1) && !table.quiet(2));
    // Ten messages through a ring of four entries: the watch follows the cursor round.
    for m in 0..10u64 {
        table.set(0, Some(b.rcq.cursor()));
        table.set(1, Some(0));
        assert!(
            table.quiet(0),
            "message {m}: nothing arrived, yet not quiet"
        );
        assert!(!table.quiet(1), "an entry without a watch is never quiet");
        post_recvs(&mut b, &dst, 1);
        a.qp.post_send(&SendWr::send_inline(m, b"m")).unwrap();
        assert!(!table.quiet(0), "message {m}: a completion arrived unseen");
        assert_eq!(poll_now(&mut b.rcq).len(), 1);
    }
    table.set(0, Some(b.rcq.cursor()));
    assert!(table.quiet(0));
    table.wake_all();
    assert!(!table.quiet(0), "woken: polled at the next turn");
    table.set(0, None);
    assert!(!table.quiet(0), "not waiting: polled");
    table.set(0, Some(b.rcq.cursor()));
    table.rebuild(std::iter::once(b.rcq.watch()));
    assert!(!table.quiet(0), "rebuilt: polled");
}
