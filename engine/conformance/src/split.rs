//! Split cases: each end in its own thread or process, talking only through the fabric.

use super::*;

pub(super) const SPLIT_MAGIC: &[u8; 4] = b"ECHO";
pub(super) const SPLIT_BUF: usize = 4096;
pub(super) const SPLIT_RECVS: usize = 16;
pub(super) const SPLIT_EXPOSED: usize = 65536;

pub(super) fn fnv(bytes: &[u8]) -> u64 {
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

/// The split cases [`split_active`] runs, in order, as its report names them.
pub const SPLIT_ACTIVE_CASES: [&str; 3] =
    ["split_send_recv", "split_write_read", "split_peer_death"];

/// The name a runner gives [`split_passive`]'s outcome, reported beside
/// [`SPLIT_ACTIVE_CASES`].
pub const SPLIT_PASSIVE_CASE: &str = "split_passive_end";

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
    let setup = accept_split::<P>(device, listener, timeout);
    let SplitConn {
        mut qp,
        mut cq,
        pd,
        bufs,
        remote,
    } = match setup {
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

    report.record(SPLIT_ACTIVE_CASES[0], || {
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

    report.record(SPLIT_ACTIVE_CASES[1], || {
        write_checksum_read::<P>(&mut qp, &mut cq, &bufs, remote, timeout, &mut send)
    });

    report.record(SPLIT_ACTIVE_CASES[2], || {
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

/// The active end's connection to the passive one ([`accept_split`]).
struct SplitConn<P: Provider> {
    qp: P::Qp,
    cq: P::Cq,
    pd: P::Pd,
    /// 64 buffers of `SPLIT_BUF` bytes: receives in the first 32, Sends and one-sided data
    /// in the others.
    bufs: P::Mr,
    /// The passive end's region, from its private data.
    remote: RemoteAddr,
}

/// The setup of [`split_active`]: accepts the passive end's connection on `listener` with
/// 32 receives posted, and reads its region's address and key from its private data.
fn accept_split<P: Provider>(
    device: &P::Device,
    listener: &mut P::Listener,
    timeout: Duration,
) -> Result<SplitConn<P>, String> {
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
    Ok(SplitConn {
        qp,
        cq,
        pd,
        bufs,
        remote,
    })
}

/// [`split_active`]'s second case: an RDMA Write of a pattern into the passive end's
/// region, its checksum asked for with a Send (`send`) and checked, and the bytes read
/// back with an RDMA Read.
fn write_checksum_read<P: Provider>(
    qp: &mut P::Qp,
    cq: &mut P::Cq,
    bufs: &P::Mr,
    remote: RemoteAddr,
    timeout: Duration,
    send: &mut impl FnMut(&mut P::Qp, &[u8], usize) -> Result<u64, String>,
) -> Result<(), String> {
    let data = pattern(77, 20000);
    let off = 40 * SPLIT_BUF;
    bufs.write_at(off, &data);
    let sges = [bufs.sge(off, 12000), bufs.sge(off + 12000, 8000)];
    qp.post_send(&SendWr::write(7, &sges, remote.offset(1234)).signaled())
        .map_err(err("write"))?;
    expect_status(
        &poll_one::<P>(cq, timeout)?,
        7,
        WcStatus::Success,
        "RDMA Write",
    )?;
    let mut req = vec![b'C'];
    req.extend(1234u32.to_be_bytes());
    req.extend(20000u32.to_be_bytes());
    send(qp, &req, 33)?;
    let got = poll_n::<P>(cq, 2, timeout)?;
    let c = got
        .iter()
        .find(|c| c.is_recv())
        .ok_or("no checksum reply")?;
    ensure!(c.status.is_ok() && c.byte_len == 9, "checksum reply: {c:?}");
    let reply = read_back(bufs, c.wr_id as usize * SPLIT_BUF, 9);
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
        &poll_one::<P>(cq, timeout)?,
        8,
        WcStatus::Success,
        "RDMA Read",
    )?;
    ensure_eq!(read_back(bufs, back, 20000), data, "bytes read back");
    Ok(())
}
