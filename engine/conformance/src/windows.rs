//! Memory windows and invalidation: Send With Invalidate, Local Invalidate, rkey rotation,
//! bind errors, windows bound to their queue pair.

use super::*;

/// A window's span: offset in its region, length, rights.
pub(super) type Span = (usize, u64, Access);

/// Binds `mw` over `len` bytes at `offset` of `mr` through `qp`, signaled, and waits for it.
pub(super) fn bind<P: Provider>(
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

/// [`bind`], which must succeed: returns the window's new rkey (the old one rotated).
pub(super) fn bind_ok<P: Provider>(
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

pub(super) const WIN: Access = Access::LOCAL_WRITE.union(Access::MW_BIND);

pub(super) fn write_through<P: Provider>(
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

pub(super) fn send_with_invalidate<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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
    post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::send_with_inv(3, &reply, rkey).signaled(),
        WcStatus::Success,
        "send with invalidate",
        t,
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

pub(super) fn local_invalidate<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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
    let wc = post_expect::<P>(
        &mut p.qb,
        &mut p.b.scq,
        &SendWr::local_inv(2, rkey).signaled(),
        WcStatus::Success,
        "local invalidate",
        t,
    )?;
    ensure_eq!(wc.opcode, WcOpcode::LocalInv, "local invalidate opcode");
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at, 3, t)?,
        WcStatus::RemAccessErr,
        "write after local invalidate"
    );
    Ok(())
}

pub(super) fn local_invalidate_region_fails<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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

pub(super) fn mw_rkey_rotation<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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
    post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::read(2, &[dst.sge(0, 16)], at1).signaled(),
        WcStatus::Success,
        "read via window",
        t,
    )?;
    ensure_eq!(
        read_back(&dst, 0, 16),
        pattern(8, 16),
        "bytes read via window"
    );
    post_expect::<P>(
        &mut p.qb,
        &mut p.b.scq,
        &SendWr::local_inv(3, k1).signaled(),
        WcStatus::Success,
        "invalidate",
        t,
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
    post_expect::<P>(
        &mut p.qa,
        &mut p.a.scq,
        &SendWr::read(4, &[dst.sge(0, 16)], at2).signaled(),
        WcStatus::Success,
        "read via rebound window",
        t,
    )?;
    ensure_eq!(
        write_through::<P>(&mut p.qa, &mut p.a.scq, &src, at1, 5, t)?,
        WcStatus::RemAccessErr,
        "write with the window's previous rkey"
    );
    Ok(())
}

pub(super) fn mw_bind_errors<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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

pub(super) fn mw_bound_to_its_qp<P: Provider, E: Env<P>>(env: &E) -> Result<(), String> {
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
