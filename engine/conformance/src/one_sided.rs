//! One-sided operations: RDMA Writes and Reads placing and fetching data, and every way
//! they fail (bounds, rights, keys), which puts both queue pairs in the error state.

use super::*;

pub(super) fn read_into_unwritable_region<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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

pub(super) fn write_read_data<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let local = p.a.region(16384, Access::LOCAL_WRITE)?;
    let remote = p.b.region(16384, ALL)?;
    let data = pattern(42, 5000);
    local.write_at(0, &data);
    let sges = [local.sge(0, 1000), local.sge(1000, 4000)];
    let wc = post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::write(1, &sges, remote.remote(3000)).signaled(),
        WcStatus::Success,
        "RDMA Write",
        t,
    )?;
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
    let wc = post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::read(2, &back, remote.remote(3000)).signaled(),
        WcStatus::Success,
        "RDMA Read",
        t,
    )?;
    ensure_eq!(wc.opcode, WcOpcode::RdmaRead, "read opcode");
    let mut got = read_back(&local, 8192, 2500);
    got.extend(read_back(&local, 12288, 2500));
    ensure_eq!(got, data, "read bytes");
    // Zero-length operations need no valid key, as on verbs.
    post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::write(3, &[], RemoteAddr::new(0, 0)).signaled(),
        WcStatus::Success,
        "zero-length write",
        t,
    )?;
    // One-sided: the target saw nothing.
    expect_quiet::<P>(&mut p.b.rcq, env.quiet_period())?;
    expect_quiet::<P>(&mut p.b.scq, env.quiet_period())
}

/// Runs a one-sided operation that must fail with a remote access error, then checks both
/// queue pairs are in the error state with everything flushed.
pub(super) fn expect_access_error<P: Provider>(
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
    expect_next::<P>(
        &mut p.a.rcq,
        900,
        WcStatus::WrFlushErr,
        "initiator's receive",
        t,
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

pub(super) fn write_out_of_bounds<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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

pub(super) fn write_without_remote_write<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote =
        p.b.region(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let sges = [local.sge(0, 8)];
    let wr = SendWr::write(1, &sges, remote.remote(0)).signaled();
    expect_access_error(&mut p, &wr, env.timeout(), "write to a read-only region")
}

pub(super) fn read_without_remote_read<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote =
        p.b.region(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let sges = [local.sge(0, 8)];
    let wr = SendWr::read(1, &sges, remote.remote(0)).signaled();
    expect_access_error(&mut p, &wr, env.timeout(), "read from a write-only region")
}

pub(super) fn write_invalid_rkey<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote = p.b.region(4096, ALL)?;
    let sges = [local.sge(0, 8)];
    let bad = RemoteAddr::new(remote.addr(), remote.rkey() ^ 0x0000_0100);
    let wr = SendWr::write(1, &sges, bad).signaled();
    expect_access_error(&mut p, &wr, env.timeout(), "write with an invalid rkey")
}

pub(super) fn write_with_imm<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
    let mut p = Pair::<P>::new(env)?;
    let t = env.timeout();
    let local = p.a.region(4096, Access::LOCAL_WRITE)?;
    let remote = p.b.region(4096, ALL)?;
    let data = pattern(5, 100);
    local.write_at(0, &data);
    post_recv::<P>(&mut p.qb, 7, &[])?;
    let sges = [local.sge(0, 100)];
    let wc = post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::write_with_imm(1, &sges, remote.remote(200), 0xdead_beef).signaled(),
        WcStatus::Success,
        "write with immediate",
        t,
    )?;
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
