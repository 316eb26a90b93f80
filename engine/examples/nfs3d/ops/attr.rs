//! GETATTR, SETATTR, ACCESS (RFC 1813 §3.3.1-§3.3.4) and FSSTAT, FSINFO, PATHCONF
//! (§3.3.18-§3.3.20).
//!
//! SETATTR runs as its caller: the kernel decides who may change an owner, a group, a mode
//! or times (and clears set-user-ID and set-group-ID bits as it does for a local process).
//! A size change is allowed to the file's owner whatever its mode, as Linux's nfsd allows
//! it (the client checked write access when it opened the file).

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rustix::fs::{
    AtFlags, Gid, Mode, OFlags, Timespec, Timestamps, Uid, CWD, UTIME_NOW, UTIME_OMIT,
};

use super::export::{fattr, stat_at, Export, Reach};
use super::{Caller, Fail, Res};
use crate::xdr::{self, put_post_op_attr, put_wcc, FType, Sattr, SetTime, Stat, WccAttr};

/// GETATTR (§3.3.1), the object reached as `reach` allows.
pub fn getattr(e: &Export, reach: Reach, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let o = e.resolve_in(xdr::fh(r)?, reach)?;
    w.put_u32(Stat::Ok as u32)?;
    fattr(&o.st).encode(w)?;
    Ok(())
}

fn timestamp(t: SetTime) -> Timespec {
    match t {
        SetTime::Keep => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        SetTime::Now => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        SetTime::To(t) => Timespec {
            tv_sec: i64::from(t.seconds),
            tv_nsec: i64::from(t.nseconds.min(999_999_999)),
        },
    }
}

/// Changes the mode of `name` in `dir` without following a symbolic link: through a
/// descriptor of the object itself (`O_PATH`, which needs no access to its data), by its
/// `/proc/self/fd` name (`fchmod` refuses an `O_PATH` descriptor, and `fchmodat` has no
/// flag to not follow before Linux 6.6). A link's mode cannot change on Linux: ignored.
fn chmod_nofollow(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::CStr,
    mode: Mode,
) -> Result<(), Fail> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if FType::of_mode(st.st_mode) == FType::Lnk {
        return Ok(());
    }
    rustix::fs::chmodat(CWD, super::fd_path(&fd).as_str(), mode, AtFlags::empty())?;
    Ok(())
}

/// Applies `s` to the object `name` in `dir` (of type `ftype`) as the caller; `owner`: the
/// caller owns it, and may change its size whatever its mode.
pub fn apply(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::CString,
    ftype: FType,
    s: &Sattr,
    owner: bool,
) -> Result<(), Fail> {
    if let Some(size) = s.size {
        if ftype != FType::Reg {
            return Err(Fail::Status(if ftype == FType::Dir {
                Stat::IsDir
            } else {
                Stat::Inval
            }));
        }
        let open = || {
            rustix::fs::openat(
                dir,
                name.as_c_str(),
                OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            )
        };
        let f = match open() {
            Err(rustix::io::Errno::ACCESS) if owner => super::as_server(open)?,
            r => r?,
        };
        rustix::fs::ftruncate(&f, size)?;
    }
    if let Some(mode) = s.mode {
        chmod_nofollow(dir, name.as_c_str(), Mode::from_raw_mode(mode & 0o7777))?;
    }
    if s.uid.is_some() || s.gid.is_some() {
        rustix::fs::chownat(
            dir,
            name.as_c_str(),
            s.uid.map(Uid::from_raw),
            s.gid.map(Gid::from_raw),
            AtFlags::SYMLINK_NOFOLLOW,
        )?;
    }
    if s.atime != SetTime::Keep || s.mtime != SetTime::Keep {
        let ts = Timestamps {
            last_access: timestamp(s.atime),
            last_modification: timestamp(s.mtime),
        };
        rustix::fs::utimensat(dir, name.as_c_str(), &ts, AtFlags::SYMLINK_NOFOLLOW)?;
    }
    Ok(())
}

/// SETATTR (§3.3.2): with the guard, NFS3ERR_NOT_SYNC when the object's ctime is not the
/// one the client gave.
pub fn setattr(e: &Export, caller: &Caller, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let fh = xdr::fh(r)?;
    let s = Sattr::decode(r)?;
    let guard = Sattr::guard(r)?;
    let o = e.resolve(fh)?;
    let before = fattr(&o.st);
    if guard.is_some_and(|g| g != before.ctime) {
        w.put_u32(Stat::NotSync as u32)?;
        put_wcc(w, Some(&WccAttr::from(&before)), Some(&before))?;
        return Ok(());
    }
    let owner = caller.uid == before.uid;
    let applied = apply(&o.parent, &o.name, o.ftype(), &s, owner);
    let after = stat_at(&o.parent, &o.name).ok().map(|st| fattr(&st));
    let status = match applied {
        Ok(()) => Stat::Ok,
        Err(Fail::Status(s)) => s,
        Err(f) => return Err(f),
    };
    w.put_u32(status as u32)?;
    put_wcc(w, Some(&WccAttr::from(&before)), after.as_ref())?;
    Ok(())
}

/// ACCESS bits (§3.3.4).
const READ: u32 = 0x01;
const LOOKUP: u32 = 0x02;
const MODIFY: u32 = 0x04;
const EXTEND: u32 = 0x08;
const DELETE: u32 = 0x10;
const EXECUTE: u32 = 0x20;

/// The access `caller` has to an object with attributes `a`, from its mode bits (root
/// reads and writes anything, and executes what anyone may).
pub fn allowed(caller: &Caller, a: &crate::xdr::Fattr) -> u32 {
    let bits = if caller.uid == 0 {
        let x = if a.mode & 0o111 != 0 || a.ftype == FType::Dir as u32 {
            0o1
        } else {
            0
        };
        0o6 | x
    } else if caller.uid == a.uid {
        (a.mode >> 6) & 7
    } else if caller.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    let dir = a.ftype == FType::Dir as u32;
    let mut out = 0;
    if bits & 4 != 0 {
        out |= READ;
    }
    if bits & 2 != 0 {
        out |= MODIFY | EXTEND | if dir { DELETE } else { 0 };
    }
    if bits & 1 != 0 {
        out |= if dir { LOOKUP } else { EXECUTE };
    }
    out
}

/// ACCESS (§3.3.4): the rights asked for that the caller has.
pub fn access(
    e: &Export,
    reach: Reach,
    caller: &Caller,
    r: &mut XdrReader<'_>,
    w: &mut XdrWriter<'_>,
) -> Res {
    let fh = xdr::fh(r)?;
    let asked = r.u32()?;
    let o = e.resolve_in(fh, reach)?;
    let a = fattr(&o.st);
    let mut may = allowed(caller, &a);
    if e.config.read_only {
        may &= !(MODIFY | EXTEND | DELETE);
    }
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_attr(w, Some(&a))?;
    w.put_u32(asked & may)?;
    Ok(())
}

/// FSSTAT (§3.3.18): space and files of the export's filesystem.
pub fn fsstat(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let (o, fd) = object_fd(e, xdr::fh(r)?)?;
    let v = rustix::fs::fstatvfs(&fd)?;
    let frsize = v.f_frsize.max(1);
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_attr(w, Some(&fattr(&o.st)))?;
    w.put_u64(v.f_blocks.saturating_mul(frsize))?;
    w.put_u64(v.f_bfree.saturating_mul(frsize))?;
    w.put_u64(v.f_bavail.saturating_mul(frsize))?;
    w.put_u64(v.f_files)?;
    w.put_u64(v.f_ffree)?;
    w.put_u64(v.f_favail)?;
    // invarsec: the values may change at any time.
    w.put_u32(0)?;
    Ok(())
}

/// A descriptor of the object `fh` names, for `fstatvfs` (an `O_PATH` one: no data).
fn object_fd(e: &Export, fh: &[u8]) -> Result<(super::export::Obj, std::os::fd::OwnedFd), Fail> {
    let o = e.resolve(fh)?;
    let fd = rustix::fs::openat(
        &o.parent,
        o.name.as_c_str(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok((o, fd))
}

/// FSF3_LINK, FSF3_SYMLINK, FSF3_HOMOGENEOUS, FSF3_CANSETTIME (§3.3.19).
const FSF3_LINK: u32 = 0x01;
const FSF3_SYMLINK: u32 = 0x02;
const FSF3_HOMOGENEOUS: u32 = 0x08;
const FSF3_CANSETTIME: u32 = 0x10;

/// FSINFO (§3.3.19): the server's limits and preferences, hard and symbolic links.
pub fn fsinfo(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let o = e.resolve(xdr::fh(r)?)?;
    let io = e.config.max_io;
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_attr(w, Some(&fattr(&o.st)))?;
    // rtmax, rtpref, rtmult, wtmax, wtpref, wtmult, dtpref
    for v in [io, io, 4096, io, io, 4096, e.config.max_dir] {
        w.put_u32(v)?;
    }
    w.put_u64(i64::MAX as u64)?;
    // time_delta: nanosecond timestamps.
    w.put_u32(0)?;
    w.put_u32(1)?;
    w.put_u32(FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME)?;
    Ok(())
}

/// PATHCONF (§3.3.20).
pub fn pathconf(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let o = e.resolve(xdr::fh(r)?)?;
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_attr(w, Some(&fattr(&o.st)))?;
    // linkmax (the file system's own limit applies; LINK reports it: NFS3ERR_MLINK),
    // name_max, no_trunc, chown_restricted, case_insensitive, case_preserving
    w.put_u32(u32::MAX)?;
    w.put_u32(crate::xdr::NAME_MAX)?;
    w.put_bool(true)?;
    w.put_bool(true)?;
    w.put_bool(false)?;
    w.put_bool(true)?;
    Ok(())
}
