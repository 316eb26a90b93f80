//! Connecting (private data, rejection) and two-sided operations: Sends in order with their
//! byte lengths, inline, with immediate data; receiver-not-ready, receives too small or
//! unwritable, local protection errors.

use super::*;

pub(super) fn connect_private_data<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let a = Host::new(env, 16)?;
    let b = Host::new(env, 16)?;
    let from_client: Vec<u8> = (1..=CmPrivateBytes::CONNECT_MAX as u8).collect();
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
    let long = [0u8; CmPrivateBytes::CONNECT_MAX + 1];
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

pub(super) fn connect_reject<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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

pub(super) fn send_recv_order_and_byte_len<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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

pub(super) fn send_inline<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    let max = p.qa.caps().max_inline_data as usize;
    ensure!(max >= 64, "max_inline_data {max} below the 64 asked");
    let data = pattern(9, 64);
    post_recv::<P>(&mut p.qb, 1, &[dst.sge(0, 4096)])?;
    post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::send_inline(2, &data).signaled(),
        WcStatus::Success,
        "inline send",
        t,
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

pub(super) fn send_with_imm<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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

pub(super) fn rnr_without_receive<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let own = p.a.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut p.qa, 77, &[own.sge(0, 64)])?;
    post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::send_inline(1, b"nobody listens").signaled(),
        WcStatus::RnrRetryExcErr,
        "send without a receive",
        t,
    )?;
    expect_next::<P>(
        &mut p.a.rcq,
        77,
        WcStatus::WrFlushErr,
        "sender's own receive",
        t,
    )?;
    expect_flushing::<P>(&mut p.qa, &mut p.a.scq, t, "sender after RNR")
}

pub(super) fn receive_too_small<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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
    expect_next::<P>(
        &mut p.b.rcq,
        2,
        WcStatus::WrFlushErr,
        "receiver's next receive",
        t,
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

pub(super) fn receive_into_unwritable_region<P: Provider, E: Env<P>>(
    env: &E,
) -> Result<(), String> {
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
    expect_next::<P>(&mut p.a.scq, 2, WcStatus::RemOpErr, "sender", t)?;
    expect_flushing::<P>(&mut p.qb, &mut p.b.scq, t, "receiver")
}

pub(super) fn local_protection_error<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let src = p.a.region(4096, Access::LOCAL_WRITE)?;
    let dst = p.b.region(4096, Access::LOCAL_WRITE)?;
    post_recv::<P>(&mut p.qb, 1, &[dst.sge(0, 4096)])?;
    // One byte past the end of the region.
    let bad = Sge::new(src.addr() + 4096 - 8, 9, src.lkey());
    post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::send(2, &[bad]).signaled(),
        WcStatus::LocProtErr,
        "send from outside the region",
        t,
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
