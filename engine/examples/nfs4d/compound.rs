//! One COMPOUND (RFC 8881 §16.2), run operation by operation: SEQUENCE first on its
//! session's slot (§2.10.6), the session operations against [`State`], the file
//! operations against the export ([`crate::fileops`]), until one fails. The session state
//! is locked per operation, never across a file system call, so COMPOUNDs of several
//! slots and clients run side by side on the I/O threads.

use std::sync::Mutex;

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

use crate::fileops::{Cx, Fs, ReadData, Stop};
use crate::identity::Caller;
use crate::ops::Reach;
use crate::session::{header_only, op, sessionless, status, Sequenced, SessionId, State};

/// What running a COMPOUND gave.
#[derive(Debug)]
pub struct Ran {
    /// Bytes of results written.
    pub len: usize,
    /// A READ's data that ends the results, if one did.
    pub data: ReadData,
}

/// Whether the COMPOUND `args` can run on the polling thread: SEQUENCE, then only
/// operations that act as nobody in particular and wait for no disk (PUTFH of a handle the
/// path cache knows and the kernel's caches reach, PUTROOTFH, GETFH, SAVEFH, RESTOREFH,
/// GETATTR, ACCESS, whose answer is made from the mode bits). The Linux client's
/// revalidations, {SEQUENCE, PUTFH, GETATTR}, are most of its COMPOUNDs: answered there,
/// they make no hop to an I/O thread and back (as nfs3d answers GETATTR and ACCESS on its
/// workers).
pub fn runs_on_poller(fs: &Fs, args: &[u8]) -> bool {
    let mut r = XdrReader::new(args);
    let mut scan = || -> Option<bool> {
        r.opaque_var(1024).ok()?;
        if r.u32().ok()? != 1 {
            return Some(false);
        }
        let n = r.u32().ok()?;
        if n == 0 || n > 8 || r.u32().ok()? != op::SEQUENCE {
            return Some(false);
        }
        r.skip(32).ok()?;
        for _ in 1..n {
            match r.u32().ok()? {
                op::PUTFH => {
                    let fh = r.opaque_var(128).ok()?;
                    if fs.export.resolve_in(fh, Reach::Cached).is_err() {
                        return Some(false);
                    }
                }
                op::PUTROOTFH | op::GETFH | op::SAVEFH | op::RESTOREFH => {}
                op::GETATTR => {
                    let words = r.array_len(4, 8).ok()?;
                    r.skip(4 * words as usize).ok()?;
                }
                op::ACCESS => {
                    r.u32().ok()?;
                }
                _ => return Some(false),
            }
        }
        Some(r.remaining() == 0)
    };
    scan().unwrap_or(false)
}

/// Session operations: run against the session state.
fn session_op(opnum: u32) -> bool {
    sessionless(opnum) || matches!(opnum, op::RECLAIM_COMPLETE | op::BACKCHANNEL_CTL)
}

/// Runs the COMPOUND `args` received on connection `conn`, its results written into
/// `out`. Its file operations run against `files` as the caller given there (without,
/// they are NFS4ERR_NOTSUPP); `lent` is the registered buffer a READ ending the
/// COMPOUND reads into.
pub fn run(
    sessions: &Mutex<State>,
    files: Option<(&Fs, &Caller)>,
    conn: u64,
    args: &[u8],
    out: &mut [u8],
    lent: Option<&mut [u8]>,
) -> Ran {
    let mut r = XdrReader::new(args);
    let mut w = XdrWriter::new(out);
    let head = (|| {
        let tag = r.opaque_var(1024).map_err(|_| status::BADXDR)?;
        let minor = r.u32().map_err(|_| status::BADXDR)?;
        let n = r.array_len(4, 128).map_err(|_| status::BADXDR)?;
        Ok::<_, u32>((tag, minor, n))
    })();
    let done = |len| Ran {
        len,
        data: ReadData::None,
    };
    let (tag, minor, n) = match head {
        Ok(h) => h,
        Err(s) => return done(header_only(&mut w, s, b"")),
    };
    // Minor version 1 only: a client asking for 4.2 falls back to 4.1 (§16.2.3).
    if minor != 1 {
        return done(header_only(&mut w, status::MINOR_VERS_MISMATCH, tag));
    }
    let _ = w.put_u32(status::OK);
    let _ = w.put_opaque_var(tag, 1024);
    let count_at = w.position();
    let _ = w.put_u32(0);
    let mut ran = 0u32;
    let mut last = status::OK;
    let mut slot: Option<(SessionId, u32)> = None;
    let lock = || sessions.lock().unwrap_or_else(|p| p.into_inner());
    let mut cx = files.map(|(fs, caller)| Cx {
        fs,
        caller,
        clientid: 0,
        cur: None,
        saved: None,
        lent,
        last: false,
        callbacks: false,
        grace: false,
        reclaim: false,
        data: ReadData::None,
    });
    for i in 0..n {
        let Ok(opnum) = r.u32() else {
            last = status::BADXDR;
            break;
        };
        let legal = (op::FIRST..=op::LAST).contains(&opnum);
        let _ = w.put_u32(if legal { opnum } else { op::ILLEGAL });
        ran += 1;
        let result: Result<(), Stop> = if !legal {
            Err(status::OP_ILLEGAL.into())
        } else if opnum == op::SEQUENCE && i > 0 {
            Err(status::SEQUENCE_POS.into())
        } else if i == 0 && opnum == op::SEQUENCE {
            let mut st = lock();
            match st.sequence(&mut r, &mut w) {
                Ok(Sequenced::New(s)) => {
                    if let (Some(cx), Some(id)) = (cx.as_mut(), st.client_of(&s.0)) {
                        cx.clientid = id;
                        cx.callbacks = st.cb_up.contains(&id);
                        cx.grace = st.in_grace();
                        cx.reclaim = st.may_reclaim(id);
                    }
                    slot = Some(s);
                    Ok(())
                }
                Ok(Sequenced::Replay((sid, k))) => {
                    // The reply this slot gave before, whole (§2.10.6.1).
                    return done(st.replay(&sid, k, out));
                }
                Err(e) => Err(e.into()),
            }
        } else if i == 0 && !sessionless(opnum) {
            Err(status::OP_NOT_IN_SESSION.into())
        } else if session_op(opnum) {
            let mut st = lock();
            let client = slot.and_then(|(sid, _)| st.client_of(&sid));
            let res = st.run_op(conn, client, opnum, &mut r, &mut w);
            let gone = std::mem::take(&mut st.gone_clients);
            drop(st);
            if let Some(cx) = cx.as_ref() {
                if let Ok(mut f) = cx.fs.files.lock() {
                    for id in gone {
                        f.drop_client(id);
                    }
                }
            }
            res.map_err(Stop::Status)
        } else {
            match cx.as_mut() {
                Some(cx) => {
                    cx.last = i + 1 == n;
                    cx.run(opnum, &mut r, &mut w)
                        .unwrap_or(Err(status::NOTSUPP.into()))
                }
                None => Err(status::NOTSUPP.into()),
            }
        };
        if let Some((fs, _)) = files {
            use std::sync::atomic::Ordering::Relaxed;
            if let Some(c) = fs.ops.get(opnum as usize) {
                c.fetch_add(1, Relaxed);
            }
            if result.is_err() {
                fs.failed.fetch_add(1, Relaxed);
            }
        }
        match result {
            Ok(()) => {}
            Err(Stop::Status(s)) => {
                last = s;
                let _ = w.put_u32(s);
                break;
            }
            Err(Stop::Written(s)) => {
                last = s;
                break;
            }
        }
    }
    let len = w.position();
    out[..4].copy_from_slice(&last.to_be_bytes());
    out[count_at..count_at + 4].copy_from_slice(&ran.to_be_bytes());
    let data = cx.map(|c| c.data).unwrap_or_default();
    if let Some((sid, k)) = slot {
        // A reply whose data left through the Write chunk is not kept whole.
        let keep = matches!(data, ReadData::None).then_some(&out[..len]);
        lock().finish(&sid, k, keep);
    }
    Ran { len, data }
}
