//! OPEN, OPEN_DOWNGRADE, CLOSE (RFC 8881 §18.16, §18.18, §18.2) and LOCK, LOCKT, LOCKU
//! (§18.10-§18.12): the operations that make and end open and lock state
//! ([`crate::state`]).
//!
//! OPEN checks the caller's right to the access it asks by opening the file as the caller
//! (the owner of a file may read and write it whatever its mode, as Linux's nfsd allows:
//! NFS checks access at open, and a file created with mode 0444 is still written through
//! the open that created it). An EXCLUSIVE4_1 create keeps the client's verifier in the
//! file's times, as nfs3d's EXCLUSIVE CREATE does, so a retransmitted OPEN finds its file.

use std::ffi::CString;
use std::sync::Arc;

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::attrs::{self, Bitmap, ClientTimes};
use crate::fileops::{key, stateid, Cx, Stop};
use crate::locks::{Denied, Kind, Owner};
use crate::ops::export::{stat_at, Obj};
use crate::session::status;
use crate::state::{Stateid, ACCESS_READ, ACCESS_WRITE};
use crate::xdr::{FType, Sattr};

type R = Result<(), Stop>;

fn put_stateid(w: &mut XdrWriter<'_>, s: &Stateid) -> R {
    w.put_u32(s.seqid)?;
    w.put_opaque_fixed(&s.other)?;
    Ok(())
}

/// How an OPEN creates (`createhow4`).
enum How {
    Unchecked(Sattr, Bitmap, ClientTimes),
    Guarded(Sattr, Bitmap, ClientTimes),
    Exclusive([u8; 8], Sattr, Bitmap),
}

fn create_how(r: &mut XdrReader<'_>) -> Result<How, Stop> {
    Ok(match r.u32()? {
        0 => {
            let (s, m, t) = attrs::read_settable(r)?;
            How::Unchecked(s, m, t)
        }
        1 => {
            let (s, m, t) = attrs::read_settable(r)?;
            How::Guarded(s, m, t)
        }
        2 => How::Exclusive(verf(r)?, Sattr::default(), [0; 3]),
        3 => {
            let v = verf(r)?;
            let (s, m, t) = attrs::read_settable(r)?;
            if s.atime != crate::xdr::SetTime::Keep
                || s.mtime != crate::xdr::SetTime::Keep
                || t.iter().any(Option::is_some)
            {
                // The times hold the verifier (suppattr_exclcreat leaves them out).
                return Err(Stop::Status(status::INVAL));
            }
            How::Exclusive(v, s, m)
        }
        _ => return Err(Stop::Status(status::BADXDR)),
    })
}

fn verf(r: &mut XdrReader<'_>) -> Result<[u8; 8], Stop> {
    Ok(r.opaque_fixed(8)?.try_into().map_err(|_| status::BADXDR)?)
}

/// A lock type (`nfs_lock_type4`): READ_LT and READW_LT read, WRITE_LT and WRITEW_LT
/// write.
fn kind(t: u32) -> Result<Kind, Stop> {
    match t {
        1 | 3 => Ok(Kind::Read),
        2 | 4 => Ok(Kind::Write),
        _ => Err(Stop::Status(status::INVAL)),
    }
}

fn put_denied(w: &mut XdrWriter<'_>, d: &Denied) -> R {
    w.put_u32(status::DENIED)?;
    w.put_u64(d.offset)?;
    w.put_u64(d.length)?;
    w.put_u32(match d.kind {
        Kind::Read => 1,
        Kind::Write => 2,
    })?;
    w.put_u64(d.owner.clientid)?;
    w.put_opaque_var(&d.owner.name, 1024)?;
    Err(Stop::Written(status::DENIED))
}

impl Cx<'_> {
    /// Checks that the caller may open `o` with share `access`, as the kernel decides.
    fn may_open(&self, o: &Obj, access: u32) -> R {
        if access & ACCESS_READ != 0 {
            self.file(o, false)?;
        }
        if access & ACCESS_WRITE != 0 {
            self.file(o, true)?;
        }
        Ok(())
    }

    pub(crate) fn open(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        r.u32()?; // seqid: unused in 4.1 (§18.16.3)
        let share = r.u32()?;
        let access = share & 3;
        // OPEN4_SHARE_ACCESS_WANT_NO_DELEG (§18.16.3): the client wants none.
        let no_deleg = share & 0xff00 == 0x0400;
        let deny = r.u32()? & 3;
        r.u64()?; // the owner's client ID: the session's (§18.16.3)
        let owner = r.opaque_var(1024)?.to_vec();
        let how = match r.u32()? {
            0 => None,
            1 => Some(create_how(r)?),
            _ => return Err(Stop::Status(status::BADXDR)),
        };
        let claim = r.u32()?;
        // The delegation an open is made under (the client opened locally meanwhile and
        // tells the server before it returns the delegation, §10.4.3).
        let mut under = None;
        let mut reclaim = false;
        let name = match claim {
            0 => Some(r.string(4096)?), // CLAIM_NULL
            2 => {
                // CLAIM_DELEGATE_CUR
                under = Some(stateid(r)?);
                Some(r.string(4096)?)
            }
            4 => None, // CLAIM_FH
            1 => {
                // CLAIM_PREVIOUS: an open held before a restart, reclaimed during the
                // grace period by a client recorded then (§8.4.2.1, §9.11); the
                // delegation it had is not given again.
                r.u32()?;
                if !self.reclaim {
                    return Err(Stop::Status(if self.grace {
                        status::RECLAIM_BAD
                    } else {
                        status::NO_GRACE
                    }));
                }
                reclaim = true;
                None
            }
            5 => {
                // CLAIM_DELEG_CUR_FH
                under = Some(stateid(r)?);
                None
            }
            3 | 6 => return Err(Stop::Status(status::NOTSUPP)),
            _ => return Err(Stop::Status(status::BADXDR)),
        };
        if (under.is_some() || reclaim) && how.is_some() {
            return Err(Stop::Status(status::INVAL));
        }
        if !reclaim {
            self.not_in_grace()?;
        }
        if access == 0 {
            return Err(Stop::Status(status::INVAL));
        }
        let (o, cinfo, attrset) = match name {
            None => {
                if how.is_some() {
                    return Err(Stop::Status(status::INVAL));
                }
                let o = self.fs.export.resolve(
                    self.cur
                        .ok_or(Stop::Status(status::NOFILEHANDLE))?
                        .as_bytes(),
                )?;
                (o, None, [0; 3])
            }
            Some(raw) => self.open_named(raw, how)?,
        };
        self.may_open(&o, access)?;
        if access & ACCESS_WRITE != 0 && self.fs.read_only {
            return Err(Stop::Status(30));
        }
        let fh = self
            .fs
            .export
            .handle_for(&o.parent, &o.name, &o.rel, &o.st)?;
        let (sid, deleg) = {
            let mut files = self.files()?;
            if let Some(d) = &under {
                files.delegated(d, self.clientid, key(&o.st))?;
            }
            let sid = files.open(self.clientid, &owner, key(&o.st), access, deny)?;
            // A read delegation for a plain open for reading by a client that answers
            // callbacks (§10.4).
            let deleg = (access == ACCESS_READ
                && deny == 0
                && !no_deleg
                && under.is_none()
                && !reclaim
                && !self.grace
                && self.callbacks)
                .then(|| files.grant(self.clientid, key(&o.st), fh.as_bytes()))
                .flatten();
            (sid, deleg)
        };
        self.cur = Some(fh);
        w.put_u32(status::OK)?;
        put_stateid(w, &sid)?;
        match cinfo {
            Some((before, after)) => {
                w.put_bool(false)?;
                w.put_u64(before)?;
                w.put_u64(after)?;
            }
            None => {
                let c = attrs::change(&o.st);
                w.put_bool(true)?;
                w.put_u64(c)?;
                w.put_u64(c)?;
            }
        }
        w.put_u32(4)?; // OPEN4_RESULT_LOCKTYPE_POSIX
        attrs::put_bitmap(w, &attrset)?;
        match deleg {
            Some(d) => {
                // OPEN_DELEGATE_READ: its stateid, no recall yet, and an empty ACE
                // (ACE4_ACCESS_ALLOWED_ACE_TYPE, no flags, no mask, no one).
                w.put_u32(1)?;
                put_stateid(w, &d)?;
                w.put_bool(false)?;
                for v in [0, 0, 0, 0] {
                    w.put_u32(v)?;
                }
            }
            None => w.put_u32(0)?, // OPEN_DELEGATE_NONE
        }
        Ok(())
    }

    /// OPEN by name in the current directory, creating as `how` says: the object, the
    /// directory's change info, the attributes set.
    #[allow(clippy::type_complexity)]
    fn open_named(
        &mut self,
        raw: &[u8],
        how: Option<How>,
    ) -> Result<(Obj, Option<(u64, u64)>, Bitmap), Stop> {
        let e = &self.fs.export;
        let cur = self.cur.ok_or(Stop::Status(status::NOFILEHANDLE))?;
        let (d, dfd) = e.dir(cur.as_bytes())?;
        let name: CString = match raw {
            b"." | b".." => return Err(Stop::Status(status::BADNAME)),
            _ => crate::ops::export::name(raw)?,
        };
        let before = attrs::change(&d.st);
        let mut attrset = [0; 3];
        if let Some(how) = how {
            if self.fs.read_only {
                return Err(Stop::Status(30));
            }
            let (s, m, times, excl, guarded) = match how {
                How::Unchecked(s, m, t) => (s, m, t, None, false),
                How::Guarded(s, m, t) => (s, m, t, None, true),
                How::Exclusive(v, s, m) => (s, m, [None; 2], Some(v), true),
            };
            let mode = Mode::from_raw_mode(s.mode.unwrap_or(0o644) & 0o7777);
            let flags =
                OFlags::CREATE | OFlags::EXCL | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let created = match rustix::fs::openat(&dfd, name.as_c_str(), flags, mode) {
                Ok(_) => true,
                Err(rustix::io::Errno::EXIST) => match excl {
                    // A retransmission of the create that made it (§18.16.3).
                    Some(v)
                        if stat_at(&dfd, &name)
                            .is_ok_and(|st| crate::ops::dir::holds_verf(&st, &v)) =>
                    {
                        false
                    }
                    _ if guarded => return Err(Stop::Status(status::EXIST)),
                    _ => false,
                },
                Err(err) => return Err(err.into()),
            };
            let rest = Sattr { mode: None, ..s };
            if created {
                if let Some(v) = excl {
                    let ts = crate::ops::dir::verf_times(&v);
                    rustix::fs::utimensat(&dfd, name.as_c_str(), &ts, AtFlags::SYMLINK_NOFOLLOW)?;
                }
                crate::ops::attr::apply(&dfd, &name, FType::Reg, &rest, true)?;
                attrs::apply_times(&dfd, &name, &times)?;
                attrset = m;
            } else if excl.is_none() && rest.size.is_some() {
                // UNCHECKED4 on a file that exists: only its size is set (as nfsd does).
                let size = Sattr {
                    size: rest.size,
                    ..Sattr::default()
                };
                let st = stat_at(&dfd, &name)?;
                let owner = st.stx_uid == self.caller.uid;
                crate::ops::attr::apply(
                    &dfd,
                    &name,
                    FType::of_mode(u32::from(st.stx_mode)),
                    &size,
                    owner,
                )?;
                attrset = [1 << attrs::a::SIZE, 0, 0];
            }
        }
        let st = stat_at(&dfd, &name)?;
        let after = stat_at(&dfd, c".").map_or(before, |s| attrs::change(&s));
        let rel = d
            .rel
            .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.as_bytes()));
        let o = Obj {
            rel,
            parent: Arc::new(dfd),
            name,
            st,
        };
        Ok((o, Some((before, after)), attrset))
    }

    pub(crate) fn close(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        r.u32()?;
        let sid = stateid(r)?;
        self.cur.ok_or(Stop::Status(status::NOFILEHANDLE))?;
        self.fs
            .files
            .lock()
            .map_err(|_| status::SERVERFAULT)?
            .close(&sid)?;
        w.put_u32(status::OK)?;
        // The invalid special stateid (§18.2.4: what a 4.1 server should return).
        put_stateid(
            w,
            &Stateid {
                seqid: u32::MAX,
                other: [0; 12],
            },
        )
    }

    pub(crate) fn open_downgrade(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let sid = stateid(r)?;
        r.u32()?;
        let access = r.u32()? & 3;
        let deny = r.u32()? & 3;
        let s = self
            .fs
            .files
            .lock()
            .map_err(|_| status::SERVERFAULT)?
            .downgrade(&sid, access, deny)?;
        w.put_u32(status::OK)?;
        put_stateid(w, &s)
    }

    fn file_key(&self) -> Result<(u64, u64), Stop> {
        let o = self.obj()?;
        match o.ftype() {
            FType::Reg => Ok(key(&o.st)),
            FType::Dir => Err(Stop::Status(status::ISDIR)),
            _ => Err(Stop::Status(status::INVAL)),
        }
    }

    pub(crate) fn lock(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let k = kind(r.u32()?)?;
        let reclaim = r.bool()?;
        let offset = r.u64()?;
        let length = r.u64()?;
        let new_owner = r.bool()?;
        let file = self.file_key()?;
        // A lock held before a restart, reclaimed during the grace period (§8.4.2.1);
        // a new one waits for the period's end.
        match (reclaim, self.reclaim) {
            (true, false) if self.grace => return Err(Stop::Status(status::RECLAIM_BAD)),
            (true, false) => return Err(Stop::Status(status::NO_GRACE)),
            (false, _) => self.not_in_grace()?,
            (true, true) => {}
        }
        let mut files = self.fs.files.lock().map_err(|_| status::SERVERFAULT)?;
        let got = if new_owner {
            r.u32()?;
            let open = stateid(r)?;
            r.u32()?;
            r.u64()?;
            let owner = Owner {
                clientid: self.clientid,
                name: r.opaque_var(1024)?.to_vec(),
            };
            files.lock_new(&open, owner, file, k, (offset, length))
        } else {
            let sid = stateid(r)?;
            r.u32()?;
            files.lock_more(&sid, file, k, (offset, length))
        };
        match got {
            Ok(sid) => {
                w.put_u32(status::OK)?;
                put_stateid(w, &sid)
            }
            Err(Ok(s)) => Err(Stop::Status(s)),
            Err(Err(d)) => put_denied(w, &d),
        }
    }

    pub(crate) fn lockt(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let k = kind(r.u32()?)?;
        let offset = r.u64()?;
        let length = r.u64()?;
        r.u64()?;
        let owner = Owner {
            clientid: self.clientid,
            name: r.opaque_var(1024)?.to_vec(),
        };
        let file = self.file_key()?;
        let files = self.fs.files.lock().map_err(|_| status::SERVERFAULT)?;
        match files.locks.test(file, &owner, k, offset, length) {
            Ok(None) => {
                w.put_u32(status::OK)?;
                Ok(())
            }
            Ok(Some(d)) => put_denied(w, &d),
            Err(_) => Err(Stop::Status(status::INVAL)),
        }
    }

    pub(crate) fn locku(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        kind(r.u32()?)?;
        r.u32()?;
        let sid = stateid(r)?;
        let offset = r.u64()?;
        let length = r.u64()?;
        let file = self.file_key()?;
        let s = self
            .fs
            .files
            .lock()
            .map_err(|_| status::SERVERFAULT)?
            .unlock(&sid, file, (offset, length))?;
        w.put_u32(status::OK)?;
        put_stateid(w, &s)
    }
}
