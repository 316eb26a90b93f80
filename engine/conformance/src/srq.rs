//! Shared receive queues: two queue pairs consuming one queue's receives in posting order,
//! each completing on its own receive queue; a queue pair in the error state flushing none of
//! them; the limit event; the queue pair's own receive queue refused; receiver-not-ready when
//! the shared queue is empty.
//!
//! A device without shared receive queues (`max_srq_wr` 0) cannot run these: each passes
//! without running and says so on stderr.

use super::*;

/// Receives the cases' shared receive queues hold at most (fewer if the device's limit is
/// lower).
const SRQ_WR: u32 = 16;

/// Whether the device has shared receive queues; if not, notes on stderr that `case` is
/// skipped (the report has no skipped outcome: the case passes).
fn has_srq<P: Provider, E: Env<P>>(env: &E, case: &str) -> bool {
    let dev = env.device();
    if dev.attr().max_srq_wr == 0 {
        eprintln!(
            "{} {case}: skipped (passes without running): device {} has no shared receive \
             queues (max_srq_wr 0)",
            P::NAME,
            dev.name()
        );
        return false;
    }
    true
}

/// Host `b` with a shared receive queue and queue pairs made with it, each connected to a
/// host of its own and completing its receives on a receive queue of its own. Queue pairs
/// are declared first so they are dropped before the queues and domains they use.
struct SrqPairs<P: Provider> {
    /// The clients, `qa[i]` connected to `qb[i]`.
    qa: Vec<P::Qp>,
    /// `b`'s queue pairs, on its shared receive queue.
    qb: Vec<P::Qp>,
    a: Vec<Host<P>>,
    /// `qb[i]`'s receive completion queue.
    rcq: Vec<P::Cq>,
    /// Its shared receive queue holds `depth()` receives of two elements; its send
    /// completion queue is shared by the `qb`.
    b: Host<P>,
}

impl<P: Provider> SrqPairs<P> {
    fn new<E: Env<P>>(env: &E, n: usize) -> Result<Self, String> {
        let dev = env.device();
        let mut b = Host::<P>::new(env, 64)?;
        let max_wr = SRQ_WR.min(dev.attr().max_srq_wr);
        b.srq = Some(b.pd.create_srq(max_wr, 2).map_err(err("create srq"))?);
        let depth = b.srq().depth();
        ensure!(
            depth >= max_wr,
            "shared receive queue of {max_wr} receives granted {depth}"
        );
        let mut s = SrqPairs {
            qa: Vec::new(),
            qb: Vec::new(),
            a: Vec::new(),
            rcq: Vec::new(),
            b,
        };
        for _ in 0..n {
            s.rcq
                .push(dev.create_cq(64).map_err(err("create recv cq"))?);
        }
        for i in 0..n {
            let a = Host::<P>::new(env, 64)?;
            let caps = QpCaps::default();
            // The `b` side's receive queue is its own; the rest is `b.side`'s.
            let mut side = s.b.side(caps);
            side.init.recv_cq = &s.rcq[i];
            let (qa, qb) = env.pair(a.side(caps), side)?;
            s.qa.push(qa);
            s.qb.push(qb);
            s.a.push(a);
        }
        Ok(s)
    }

    fn srq(&self) -> &P::Srq {
        self.b.srq()
    }

    /// Posts a receive of 64 bytes at `offset` of `mr` to the shared receive queue.
    fn post_srq(&self, mr: &P::Mr, wr_id: u64, offset: usize) -> Result<(), String> {
        self.srq()
            .post_recv(&RecvWr::new(wr_id, &[mr.sge(offset, 64)]))
            .map_err(err("post to the shared receive queue"))
    }

    /// Sends `data` inline (signaled) from `qa[k]`, checks its completion, and returns the
    /// receive completion on `qb[k]`'s receive queue, checked for `wr_id` and the queue
    /// pair's number.
    fn send_to(&mut self, k: usize, wr_id: u64, data: &[u8], t: Duration) -> Result<Wc, String> {
        let send_id = 0x5e << 8 | wr_id;
        post_expect::<P>(
            &mut self.qa[k],
            &mut self.a[k].scq,
            &SendWr::send_inline(send_id, data).signaled(),
            WcStatus::Success,
            "send",
            t,
        )?;
        let wc = poll_one::<P>(&mut self.rcq[k], t)?;
        expect_status(
            &wc,
            wr_id,
            WcStatus::Success,
            &format!("receive of queue pair {k}"),
        )?;
        ensure_eq!(
            wc.qp_num,
            self.qb[k].qp_num(),
            format!("qp_num of {k}'s receive")
        );
        ensure_eq!(wc.opcode, WcOpcode::Recv, "receive opcode");
        ensure_eq!(wc.byte_len as usize, data.len(), "byte_len");
        Ok(wc)
    }

    /// Checks that no receive completion arrives on any `qb`'s queue.
    fn expect_no_receives(&mut self, period: Duration) -> Result<(), String> {
        for cq in &mut self.rcq {
            expect_quiet::<P>(cq, period)?;
        }
        Ok(())
    }
}

impl<P: Provider> Host<P> {
    fn srq(&self) -> &P::Srq {
        self.srq
            .as_ref()
            .expect("a host made with a shared receive queue")
    }
}

/// Two queue pairs on one shared receive queue each receive Sends: every Send, whichever
/// queue pair it arrives on, takes the oldest receive, which completes on that queue pair's
/// receive queue with its number, the receive's `wr_id` and the message's length, the
/// message scattered into the receive's elements.
pub(super) fn srq_shared_by_two_queue_pairs<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    if !has_srq(env, "srq_shared_by_two_queue_pairs") {
        return Ok(());
    }
    let mut s = SrqPairs::<P>::new(env, 2)?;
    let t = env.timeout();
    let dst = s.b.region(8192, Access::LOCAL_WRITE)?;
    let lens = [1usize, 64, 100, 200, 256, 0];
    for i in 0..lens.len() {
        // Each receive scatters over two pieces: 100 and 156 bytes.
        let base = i * 512;
        let sges = [dst.sge(base, 100), dst.sge(base + 256, 156)];
        s.srq()
            .post_recv(&RecvWr::new(100 + i as u64, &sges))
            .map_err(err("post to the shared receive queue"))?;
    }
    let srcs = [
        s.a[0].region(4096, Access::LOCAL_WRITE)?,
        s.a[1].region(4096, Access::LOCAL_WRITE)?,
    ];
    // Alternately from each client, one at a time (a Send's receive is the oldest left only
    // once the one before it has completed).
    for (i, &len) in lens.iter().enumerate() {
        let k = [0, 1, 1, 0, 1, 0][i];
        let data = pattern(i as u8, len);
        srcs[k].write_at(0, &data);
        post_expect::<P>(
            &mut s.qa[k],
            &mut s.a[k].scq,
            &SendWr::send(200 + i as u64, &[srcs[k].sge(0, len as u32)]).signaled(),
            WcStatus::Success,
            "send",
            t,
        )?;
        let wc = poll_one::<P>(&mut s.rcq[k], t)?;
        expect_status(
            &wc,
            100 + i as u64,
            WcStatus::Success,
            &format!("receive {i}, on queue pair {k}"),
        )?;
        ensure_eq!(wc.opcode, WcOpcode::Recv, "receive opcode");
        ensure_eq!(
            wc.qp_num,
            s.qb[k].qp_num(),
            format!("qp_num of receive {i}")
        );
        ensure_eq!(
            wc.byte_len as usize,
            len,
            format!("byte_len of receive {i}")
        );
        ensure_eq!(wc.imm, None, "imm");
        let base = i * 512;
        let mut received = read_back(&dst, base, len.min(100));
        if len > 100 {
            received.extend(read_back(&dst, base + 256, len - 100));
        }
        ensure_eq!(received, data, format!("payload of message {i}"));
    }
    s.expect_no_receives(env.quiet_period())?;
    for (k, qp) in s.qb.iter().enumerate() {
        ensure_eq!(qp.state(), QpState::Rts, format!("state of queue pair {k}"));
    }
    Ok(())
}

/// A queue pair made with a shared receive queue that goes to the error state flushes none of
/// the queue's receives: the other queue pair receives into them next, in posting order.
pub(super) fn srq_kept_when_a_queue_pair_disconnects<P: Provider, E: Env<P>>(
    env: &E,
) -> Result<(), String> {
    if !has_srq(env, "srq_kept_when_a_queue_pair_disconnects") {
        return Ok(());
    }
    let mut s = SrqPairs::<P>::new(env, 2)?;
    let t = env.timeout();
    let dst = s.b.region(4096, Access::LOCAL_WRITE)?;
    for i in 0..4 {
        s.post_srq(&dst, i, i as usize * 64)?;
    }
    s.send_to(0, 0, b"before", t)?;
    s.qb[0].disconnect();
    let deadline = Instant::now() + t;
    while s.qb[0].state() != QpState::Err {
        ensure!(
            Instant::now() < deadline,
            "queue pair not in the error state after disconnecting: {:?}",
            s.qb[0].state()
        );
        thread::yield_now();
    }
    expect_quiet::<P>(&mut s.rcq[0], env.quiet_period())
        .map_err(|e| format!("the disconnected queue pair flushed shared receives: {e}"))?;
    expect_flushing::<P>(&mut s.qb[0], &mut s.b.scq, t, "after disconnecting")?;
    for i in 1..4 {
        s.send_to(1, i, b"after", t)
            .map_err(|e| format!("the other queue pair, receive {i}: {e}"))?;
    }
    s.expect_no_receives(env.quiet_period())?;
    ensure_eq!(
        s.qb[1].state(),
        QpState::Rts,
        "the other queue pair's state"
    );
    Ok(())
}

/// The limit fires once a Send leaves fewer receives posted than it, not before, and once.
pub(super) fn srq_limit_event<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    if !has_srq(env, "srq_limit_event") {
        return Ok(());
    }
    let mut s = SrqPairs::<P>::new(env, 2)?;
    let t = env.timeout();
    let quiet = env.quiet_period();
    let dst = s.b.region(4096, Access::LOCAL_WRITE)?;
    for i in 0..8 {
        s.post_srq(&dst, i, i as usize * 64)?;
    }
    ensure!(!s.srq().take_limit_event(), "limit event before arming");
    s.srq().arm_limit(4).map_err(err("arm_limit"))?;
    // Four Sends leave four receives: not fewer than the limit.
    for i in 0..4 {
        s.send_to(i as usize % 2, i, b"above", t)?;
    }
    thread::sleep(quiet);
    ensure!(
        !s.srq().take_limit_event(),
        "limit 4 reached with 4 receives left"
    );
    // The fifth leaves three.
    s.send_to(0, 4, b"below", t)?;
    let deadline = Instant::now() + t;
    while !s.srq().take_limit_event() {
        ensure!(
            Instant::now() < deadline,
            "no limit event with 3 receives left of limit 4"
        );
        thread::sleep(Duration::from_millis(1));
    }
    // It fired once: the sixth, leaving two, does not fire it again.
    s.send_to(1, 5, b"again", t)?;
    thread::sleep(quiet);
    ensure!(
        !s.srq().take_limit_event(),
        "the limit fired twice without being armed again"
    );
    Ok(())
}

/// Posting to the own receive queue of a queue pair made with a shared receive queue is
/// refused, and nothing of it is queued: the next Send takes the shared queue's receive.
pub(super) fn srq_own_receive_queue_refused<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    if !has_srq(env, "srq_own_receive_queue_refused") {
        return Ok(());
    }
    let mut s = SrqPairs::<P>::new(env, 1)?;
    let t = env.timeout();
    let dst = s.b.region(4096, Access::LOCAL_WRITE)?;
    match s.qb[0].post_recv(&RecvWr::new(999, &[dst.sge(0, 64)])) {
        Err(PostError::InvalidWr(_)) => {}
        other => {
            return Err(format!(
                "post to the own receive queue of a queue pair on a shared receive queue: \
                 {other:?}"
            ))
        }
    }
    let (first, second) = ([dst.sge(64, 64)], [dst.sge(128, 64)]);
    let wrs = [RecvWr::new(998, &first), RecvWr::new(997, &second)];
    match s.qb[0].post_recv_list(&wrs) {
        Err(bad) if bad.index == 0 && matches!(bad.error, PostError::InvalidWr(_)) => {}
        other => return Err(format!("a list posted to the own receive queue: {other:?}")),
    }
    s.post_srq(&dst, 1, 256)?;
    s.send_to(0, 1, b"shared", t)?;
    s.expect_no_receives(env.quiet_period())
}

/// A Send to a queue pair whose shared receive queue is empty fails with receiver-not-ready
/// as one to a queue pair with an empty receive queue of its own does (`rnr_without_receive`),
/// on either queue pair; neither receiving queue pair completes anything.
pub(super) fn srq_rnr_when_empty<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    if !has_srq(env, "srq_rnr_when_empty") {
        return Ok(());
    }
    let mut s = SrqPairs::<P>::new(env, 2)?;
    let t = env.timeout();
    for k in 0..2 {
        let own = s.a[k].region(4096, Access::LOCAL_WRITE)?;
        post_recv::<P>(&mut s.qa[k], 77, &[own.sge(0, 64)])?;
        post_expect::<P>(
            &mut s.qa[k],
            &mut s.a[k].scq,
            &SendWr::send_inline(1, b"nobody listens").signaled(),
            WcStatus::RnrRetryExcErr,
            &format!("send to queue pair {k} on an empty shared receive queue"),
            t,
        )?;
        expect_next::<P>(
            &mut s.a[k].rcq,
            77,
            WcStatus::WrFlushErr,
            "sender's own receive",
            t,
        )?;
        expect_flushing::<P>(&mut s.qa[k], &mut s.a[k].scq, t, "sender after RNR")?;
    }
    s.expect_no_receives(env.quiet_period())
}
