//! The verbs provider through its public API, where a device opens (the rxe-vm guest):
//! two queue pairs on one shared receive queue. Without a device (the development host) it
//! says so and passes; the no-device paths are the provider's own unit tests.

#![cfg(feature = "verbs")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rpcrdma_conformance::{connect_pair, expect_quiet, poll_one, Env, Side, VerbsEnv};
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::{
    Access, Device, FabricError, MemoryRegion, PostError, ProtectionDomain, Provider, QpCaps,
    QpInit, QpState, QueuePair, RecvWr, SendWr, Sge, SharedReceiveQueue, WcOpcode, WcStatus,
};

/// Two queue pairs on one shared receive queue, one accepted and one connecting (both
/// of rdma_cm's paths), on a real device: each Send consumes the next shared receive,
/// which completes on its own queue pair's receive completion queue with its `qp_num`;
/// the queue pairs' own receive queues refuse posts; the armed limit fires once; the
/// depth is enforced from post to poll; a disconnected queue pair flushes none of the
/// shared receives, which the other queue pair then consumes. Runs only where a device
/// opens (the rxe-vm guest), listening on `RPCRDMA_VERBS_ADDR` (default
/// 10.0.2.15:18750, the guest's address).
#[test]
fn two_queue_pairs_share_receives() {
    let device = match Verbs::open_device(None) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no RDMA device ({e}); the shared receive queue test does not apply");
            return;
        }
    };
    let base: SocketAddr = std::env::var("RPCRDMA_VERBS_ADDR")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| "10.0.2.15:18750".parse().unwrap());
    let env = VerbsEnv::new(device, base, Duration::from_secs(10));
    if let Err(e) = run(&env) {
        panic!("{e}");
    }
}

fn run(env: &VerbsEnv) -> Result<(), String> {
    let t = env.timeout();
    let dev = env.device();
    let attr = dev.attr();
    if attr.max_srq_wr == 0 {
        return Err(format!("{} reports no shared receive queues", dev.name()));
    }
    let cq = |what: &str| dev.create_cq(16).map_err(|e| format!("{what}: {e}"));
    let pd = |what: &str| dev.alloc_pd().map_err(|e| format!("{what}: {e}"));

    // The server: one domain, one shared receive queue, a pair of completion queues per
    // queue pair. Declared before the queue pairs, so dropped after them.
    let spd = pd("server pd")?;
    let (s1_scq, mut s1_rcq, s2_scq, mut s2_rcq) =
        (cq("s1 scq")?, cq("s1 rcq")?, cq("s2 scq")?, cq("s2 rcq")?);
    match spd.create_srq(attr.max_srq_wr + 1, 1) {
        Err(FabricError::InvalidArgument(_)) => {}
        other => return Err(format!("create_srq beyond max_srq_wr: {other:?}")),
    }
    let srq = spd
        .create_srq(8, 1)
        .map_err(|e| format!("create_srq: {e}"))?;
    if srq.depth() < 8 {
        return Err(format!("depth {} < 8", srq.depth()));
    }
    let buf = spd
        .alloc_region(4096, Access::LOCAL_WRITE)
        .map_err(|e| format!("region: {e}"))?;
    let sge = |i: u64| Sge::new(buf.addr() + i * 64, 64, buf.lkey());

    // The clients.
    let (c1pd, c2pd) = (pd("c1 pd")?, pd("c2 pd")?);
    let (mut c1_cq, mut c2_cq) = (cq("c1 cq")?, cq("c2 cq")?);
    let cbuf = c1pd
        .alloc_region(64, Access::LOCAL_WRITE)
        .map_err(|e| format!("region: {e}"))?;
    let cbuf2 = c2pd
        .alloc_region(64, Access::LOCAL_WRITE)
        .map_err(|e| format!("region: {e}"))?;
    let caps = QpCaps::default();
    let mut s1_init = QpInit::<Verbs>::new(&s1_scq, &s1_rcq, caps);
    s1_init.srq = Some(&srq);
    let mut s2_init = QpInit::<Verbs>::new(&s2_scq, &s2_rcq, caps);
    s2_init.srq = Some(&srq);
    // c1 connects to s1 (accepted with the shared queue); s2 connects to c2 (connecting
    // with it).
    let (mut c1, mut s1) = env.pair(
        Side {
            pd: &c1pd,
            init: QpInit::new(&c1_cq, &c1_cq, caps),
        },
        Side {
            pd: &spd,
            init: s1_init,
        },
    )?;
    let (mut s2, _, mut c2, _) = connect_pair(
        env,
        Side {
            pd: &spd,
            init: s2_init,
        },
        Side {
            pd: &c2pd,
            init: QpInit::new(&c2_cq, &c2_cq, caps),
        },
        &[],
        &[],
    )?;

    let own = [sge(15)];
    for (name, qp) in [("accepted", &mut s1), ("connecting", &mut s2)] {
        match qp.post_recv(&RecvWr::new(1, &own)) {
            Err(PostError::InvalidWr(_)) => {}
            other => return Err(format!("{name}: own receive queue post: {other:?}")),
        }
        if qp.caps().max_recv_wr != 0 {
            return Err(format!("{name}: caps {:?}", qp.caps()));
        }
    }

    let sges: Vec<[Sge; 1]> = (0..4).map(|i| [sge(i)]).collect();
    let wrs: Vec<RecvWr<'_>> = (0..4)
        .map(|i| RecvWr::new(100 + i as u64, &sges[i]))
        .collect();
    srq.post_recv_list(&wrs)
        .map_err(|e| format!("post_recv_list: {e:?}"))?;
    srq.arm_limit(3).map_err(|e| format!("arm_limit: {e}"))?;
    if srq.take_limit_event() {
        return Err("limit event before any receive was consumed".into());
    }

    let send = |qp: &mut <Verbs as Provider>::Qp,
                cq: &mut <Verbs as Provider>::Cq,
                mr: &<Verbs as Provider>::Mr,
                bytes: &[u8],
                wr_id: u64|
     -> Result<(), String> {
        mr.write_at(0, bytes);
        let s = [Sge::new(mr.addr(), bytes.len() as u32, mr.lkey())];
        qp.post_send(&SendWr::send(wr_id, &s).signaled())
            .map_err(|e| format!("post_send: {e}"))?;
        let wc = poll_one::<Verbs>(cq, t)?;
        if wc.wr_id != wr_id || wc.status != WcStatus::Success {
            return Err(format!("send completion {wc:?}"));
        }
        Ok(())
    };
    let expect_recv = |cq: &mut <Verbs as Provider>::Cq,
                       wr_id: u64,
                       qp_num: u32,
                       bytes: &[u8]|
     -> Result<(), String> {
        let wc = poll_one::<Verbs>(cq, t)?;
        if wc.wr_id != wr_id
            || wc.status != WcStatus::Success
            || wc.opcode != WcOpcode::Recv
            || wc.qp_num != qp_num
            || wc.byte_len as usize != bytes.len()
        {
            return Err(format!(
                "receive completion {wc:?}, expected wr_id {wr_id} on qp {qp_num}"
            ));
        }
        let mut got = vec![0; bytes.len()];
        buf.read_at((wr_id - 100) as usize * 64, &mut got);
        if got != bytes {
            return Err(format!("received {got:?}, expected {bytes:?}"));
        }
        Ok(())
    };

    send(&mut c1, &mut c1_cq, &cbuf, b"first", 1)?;
    expect_recv(&mut s1_rcq, 100, s1.qp_num(), b"first")?;
    if srq.take_limit_event() {
        return Err("limit event with 3 receives left of a limit of 3".into());
    }
    send(&mut c2, &mut c2_cq, &cbuf2, b"second", 2)?;
    expect_recv(&mut s2_rcq, 101, s2.qp_num(), b"second")?;
    let deadline = Instant::now() + t;
    while !srq.take_limit_event() {
        if Instant::now() > deadline {
            return Err("no limit event with 2 receives left of a limit of 3".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if srq.take_limit_event() {
        return Err("the limit event was not cleared by reading it".into());
    }

    // Depth from post to poll: 2 outstanding, depth - 2 more fit, then the queue is full.
    let more = srq.depth() as usize - 2;
    let extra: Vec<[Sge; 1]> = (0..more).map(|i| [sge(16 + i as u64 % 48)]).collect();
    let extra_wrs: Vec<RecvWr<'_>> = (0..more)
        .map(|i| RecvWr::new(1000 + i as u64, &extra[i]))
        .collect();
    srq.post_recv_list(&extra_wrs)
        .map_err(|e| format!("posting up to the depth: {e:?}"))?;
    match srq.post_recv(&RecvWr::new(9999, &own)) {
        Err(PostError::QueueFull) => {}
        other => return Err(format!("post beyond the depth: {other:?}")),
    }

    // The peer of s1 disconnects: s1 goes to the error state and flushes no shared
    // receive; s2 consumes the next one.
    c1.disconnect();
    let deadline = Instant::now() + t;
    while s1.state() != QpState::Err {
        if Instant::now() > deadline {
            return Err(format!("s1 in state {:?} after the disconnect", s1.state()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    expect_quiet::<Verbs>(&mut s1_rcq, env.quiet_period() * 5)?;
    send(&mut c2, &mut c2_cq, &cbuf2, b"third", 3)?;
    expect_recv(&mut s2_rcq, 102, s2.qp_num(), b"third")?;

    // The queue handle may go before its queue pairs: they keep the device object.
    drop(srq);
    drop(s1);
    drop(s2);
    drop(c1);
    drop(c2);
    Ok(())
}
