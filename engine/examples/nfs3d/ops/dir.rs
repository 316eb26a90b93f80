//! LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME and LINK (RFC 1813 §3.3.3,
//! §3.3.8-§3.3.15): everything done relative to the directory's descriptor, names checked
//! ([`export::name`]), links created but never followed. Each runs as its caller
//! ([`crate::identity`]): the kernel decides who may search, create, remove and rename
//! (sticky directories included), gives what is created to the caller, and applies a
//! setgid directory's group.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Statx, Timespec, Timestamps};

use super::attr::apply;
use super::export::{self, fattr, stat_at, Export, Obj, Reach};
use super::{Fail, Res};
use crate::xdr::{
    self, put_post_op_attr, put_post_op_fh, put_wcc, FType, Fattr, Sattr, SetTime, Stat, WccAttr,
    PATH_MAX,
};

fn dot() -> CString {
    CString::new(".").unwrap_or_default()
}

/// The empty name: a descriptor's own object (`AT_EMPTY_PATH`).
fn empty() -> CString {
    CString::default()
}

/// The directory's attributes now, for the `after` side of its `wcc_data`.
fn dir_after(fd: &OwnedFd) -> Option<Fattr> {
    stat_at(fd, &dot()).ok().map(|st| fattr(&st))
}

/// The path from the root of `name` in the directory at `dir`.
fn child_path(dir: &Path, name: &CString) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    dir.join(std::ffi::OsStr::from_bytes(name.as_bytes()))
}

/// What LOOKUP found: its path, its attributes, and where the kernel names it, a
/// directory's descriptor and its name there (an empty name: the directory itself; none:
/// the directory LOOKUP was asked about, `.`).
type Found = (PathBuf, Statx, Option<(OwnedFd, CString)>);

/// LOOKUP (§3.3.3), the objects reached as `reach` allows: `..` is the parent, and the
/// root's parent the root itself, so that a client can never walk out of the export.
pub fn lookup(e: &Export, reach: Reach, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let (dfh, name) = xdr::diropargs(r)?;
    let (d, dfd) = e.dir_in(dfh, reach)?;
    let dattr = fattr(&d.st);
    let found: Result<Found, Fail> = match name {
        b"." => Ok((d.rel.clone(), d.st, None)),
        b".." => {
            let up = d.rel.parent().map(Path::to_path_buf).unwrap_or_default();
            e.open_dir_in(&up, reach).and_then(|fd| {
                export::stat_child(&fd, &dot(), reach).map(|st| (up, st, Some((fd, empty()))))
            })
        }
        _ => match export::name(name) {
            Ok(n) => export::stat_child(&dfd, &n, reach)
                .map(|st| (child_path(&d.rel, &n), st, Some((dfd, n)))),
            Err(s) => Err(Fail::Status(if s == Stat::Inval { Stat::NoEnt } else { s })),
        },
    };
    match found {
        Ok((rel, st, at)) => {
            let fh = match &at {
                Some((fd, n)) => e.handle_in(fd, n, &rel, &st, reach)?,
                // `.`: the directory's own handle, as the client sent it.
                None => crate::fh::Fh::from_bytes(dfh).ok_or(Fail::Status(Stat::BadHandle))?,
            };
            w.put_u32(Stat::Ok as u32)?;
            w.put_opaque_var(fh.as_bytes(), xdr::FHSIZE)?;
            put_post_op_attr(w, Some(&fattr(&st)))?;
            put_post_op_attr(w, Some(&dattr))?;
        }
        Err(Fail::Status(s)) => {
            w.put_u32(s as u32)?;
            put_post_op_attr(w, Some(&dattr))?;
        }
        Err(f) => return Err(f),
    }
    Ok(())
}

/// The answer of CREATE, MKDIR and SYMLINK (§3.3.8): the new object's handle and
/// attributes, and the directory's before and after.
fn created(e: &Export, w: &mut XdrWriter<'_>, d: &Obj, dfd: &OwnedFd, name: &CString) -> Res {
    let st = stat_at(dfd, name)?;
    let fh = e.handle_for(dfd, name, &child_path(&d.rel, name), &st)?;
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_fh(w, Some(fh.as_bytes()))?;
    put_post_op_attr(w, Some(&fattr(&st)))?;
    put_wcc(
        w,
        Some(&WccAttr::from(&fattr(&d.st))),
        dir_after(dfd).as_ref(),
    )?;
    Ok(())
}

/// A failure that still reports the directory's attributes.
fn failed(w: &mut XdrWriter<'_>, s: Stat, d: &Obj, dfd: &OwnedFd) -> Res {
    w.put_u32(s as u32)?;
    put_wcc(
        w,
        Some(&WccAttr::from(&fattr(&d.st))),
        dir_after(dfd).as_ref(),
    )?;
    Ok(())
}

/// The times an EXCLUSIVE create stores its verifier in (as Linux's nfsd does): the
/// access time's seconds hold its first four bytes, the modification time's the others.
pub fn verf_times(verf: &[u8; 8]) -> Timestamps {
    let secs = |b: &[u8]| i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    Timestamps {
        last_access: Timespec {
            tv_sec: secs(&verf[..4]),
            tv_nsec: 0,
        },
        last_modification: Timespec {
            tv_sec: secs(&verf[4..]),
            tv_nsec: 0,
        },
    }
}

/// Whether `st` holds the EXCLUSIVE create verifier `verf` in its times.
pub fn holds_verf(st: &Statx, verf: &[u8; 8]) -> bool {
    let t = verf_times(verf);
    st.stx_atime.tv_sec == t.last_access.tv_sec && st.stx_mtime.tv_sec == t.last_modification.tv_sec
}

/// CREATE (§3.3.8): UNCHECKED opens an existing file (and applies the attributes),
/// GUARDED refuses one (NFS3ERR_EXIST), EXCLUSIVE keeps the client's verifier in the file's
/// times so that a retransmitted create with the same verifier succeeds again.
pub fn create(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let (dfh, raw) = xdr::diropargs(r)?;
    let how = r.u32()?;
    let (sattr, verf) = match how {
        0 | 1 => (Sattr::decode(r)?, None),
        2 => (Sattr::default(), Some(xdr::verf(r)?)),
        _ => return Err(Fail::Garbage),
    };
    let (d, dfd) = e.dir(dfh)?;
    let name = match export::name(raw) {
        Ok(n) => n,
        Err(s) => return failed(w, s, &d, &dfd),
    };
    // Always exclusive first: a new file gets the caller's attributes, an existing one
    // (UNCHECKED) keeps its owner and mode.
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(
        sattr
            .mode
            .unwrap_or(if verf.is_some() { 0o600 } else { 0o644 })
            & 0o7777,
    );
    match rustix::fs::openat(&dfd, name.as_c_str(), flags, mode) {
        Ok(_) => {
            if let Some(v) = &verf {
                rustix::fs::utimensat(
                    &dfd,
                    name.as_c_str(),
                    &verf_times(v),
                    AtFlags::SYMLINK_NOFOLLOW,
                )?;
            } else {
                // The mode was given to open; the size and times now.
                let rest = Sattr {
                    mode: None,
                    uid: None,
                    gid: None,
                    ..sattr
                };
                if let Err(Fail::Status(s)) =
                    apply(&dfd, &name, crate::xdr::FType::Reg, &rest, true)
                {
                    return failed(w, s, &d, &dfd);
                }
                if sattr.uid.is_some() || sattr.gid.is_some() {
                    let ids = Sattr {
                        uid: sattr.uid,
                        gid: sattr.gid,
                        ..Sattr::default()
                    };
                    let _ = apply(&dfd, &name, crate::xdr::FType::Reg, &ids, true);
                }
            }
            created(e, w, &d, &dfd, &name)
        }
        Err(rustix::io::Errno::EXIST) if how == 0 => {
            // UNCHECKED on an existing regular file: only its size is applied (a truncation,
            // as Linux's nfsd does); anything else there is NFS3ERR_EXIST.
            match stat_at(&dfd, &name) {
                Ok(st) if crate::xdr::FType::of_mode(u32::from(st.stx_mode)) == FType::Reg => {
                    let size = Sattr {
                        size: sattr.size,
                        ..Sattr::default()
                    };
                    let owner = st.stx_uid == rustix::process::geteuid().as_raw();
                    if let Err(Fail::Status(s)) = apply(&dfd, &name, FType::Reg, &size, owner) {
                        return failed(w, s, &d, &dfd);
                    }
                    created(e, w, &d, &dfd, &name)
                }
                _ => failed(w, Stat::Exist, &d, &dfd),
            }
        }
        Err(rustix::io::Errno::EXIST) if verf.is_some() => {
            // A retransmitted EXCLUSIVE create finds its own file.
            match stat_at(&dfd, &name) {
                Ok(st) if verf.as_ref().is_some_and(|v| holds_verf(&st, v)) => {
                    created(e, w, &d, &dfd, &name)
                }
                _ => failed(w, Stat::Exist, &d, &dfd),
            }
        }
        Err(err) => failed(w, Stat::from(err), &d, &dfd),
    }
}

/// MKDIR (§3.3.9).
pub fn mkdir(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let (dfh, raw) = xdr::diropargs(r)?;
    let sattr = Sattr::decode(r)?;
    let (d, dfd) = e.dir(dfh)?;
    let name = match export::name(raw) {
        Ok(n) => n,
        Err(s) => return failed(w, s, &d, &dfd),
    };
    let mode = Mode::from_raw_mode(sattr.mode.unwrap_or(0o755) & 0o7777);
    if let Err(err) = rustix::fs::mkdirat(&dfd, name.as_c_str(), mode) {
        return failed(w, Stat::from(err), &d, &dfd);
    }
    let rest = Sattr {
        mode: None,
        size: None,
        ..sattr
    };
    let _ = apply(&dfd, &name, crate::xdr::FType::Dir, &rest, true);
    created(e, w, &d, &dfd, &name)
}

/// SYMLINK (§3.3.10): the link is made with whatever target the client gives; the server
/// itself never follows it.
pub fn symlink(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let (dfh, raw) = xdr::diropargs(r)?;
    let sattr = Sattr::decode(r)?;
    let target = r.string(PATH_MAX)?;
    let (d, dfd) = e.dir(dfh)?;
    let name = match export::name(raw) {
        Ok(n) => n,
        Err(s) => return failed(w, s, &d, &dfd),
    };
    let Ok(target) = CString::new(target) else {
        return failed(w, Stat::Inval, &d, &dfd);
    };
    if let Err(err) = rustix::fs::symlinkat(target.as_c_str(), &dfd, name.as_c_str()) {
        return failed(w, Stat::from(err), &d, &dfd);
    }
    if sattr.atime != SetTime::Keep || sattr.mtime != SetTime::Keep {
        let times = Sattr {
            atime: sattr.atime,
            mtime: sattr.mtime,
            ..Sattr::default()
        };
        let _ = apply(&dfd, &name, crate::xdr::FType::Lnk, &times, true);
    }
    created(e, w, &d, &dfd, &name)
}

/// `ftype3` values MKNOD takes (§3.3.11).
const NF3BLK: u32 = 3;
const NF3CHR: u32 = 4;
const NF3SOCK: u32 = 6;
const NF3FIFO: u32 = 7;

/// MKNOD (§3.3.11): a character or block device (its `specdata3` the major and minor
/// numbers; the kernel lets only a caller with CAP_MKNOD make one: root, not squashed), a
/// socket or a FIFO. Any other type is NFS3ERR_BADTYPE.
pub fn mknod(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let (dfh, raw) = xdr::diropargs(r)?;
    let ftype = r.u32()?;
    let (kind, sattr, dev) = match ftype {
        NF3CHR | NF3BLK => {
            let sattr = Sattr::decode(r)?;
            let (major, minor) = (r.u32()?, r.u32()?);
            let kind = if ftype == NF3CHR {
                FileType::CharacterDevice
            } else {
                FileType::BlockDevice
            };
            (Some(kind), sattr, rustix::fs::makedev(major, minor))
        }
        NF3SOCK => (Some(FileType::Socket), Sattr::decode(r)?, 0),
        NF3FIFO => (Some(FileType::Fifo), Sattr::decode(r)?, 0),
        // The other types carry no arguments (`mknoddata3`'s default arm).
        _ => (None, Sattr::default(), 0),
    };
    let (d, dfd) = e.dir(dfh)?;
    let name = match export::name(raw) {
        Ok(n) => n,
        Err(s) => return failed(w, s, &d, &dfd),
    };
    let Some(kind) = kind else {
        return failed(w, Stat::BadType, &d, &dfd);
    };
    let mode = Mode::from_raw_mode(sattr.mode.unwrap_or(0o644) & 0o7777);
    if let Err(err) = rustix::fs::mknodat(&dfd, name.as_c_str(), kind, mode, dev) {
        return failed(w, Stat::from(err), &d, &dfd);
    }
    let rest = Sattr {
        mode: None,
        size: None,
        ..sattr
    };
    let _ = apply(&dfd, &name, FType::of_mode(kind.as_raw_mode()), &rest, true);
    created(e, w, &d, &dfd, &name)
}

/// LINK (§3.3.15): a new name for the file, in the directory the caller names (the kernel
/// refuses a directory, another file system, and what the caller may not link).
pub fn link(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let ffh = xdr::fh(r)?;
    let (dfh, raw) = xdr::diropargs(r)?;
    let o = e.resolve(ffh)?;
    let (d, dfd) = e.dir(dfh)?;
    let linked = match export::name(raw) {
        Ok(name) => rustix::fs::linkat(
            &o.parent,
            o.name.as_c_str(),
            &dfd,
            name.as_c_str(),
            AtFlags::empty(),
        )
        .map_err(Stat::from),
        Err(s) => Err(s),
    };
    let file = stat_at(&o.parent, &o.name).ok().map(|st| fattr(&st));
    w.put_u32(match linked {
        Ok(()) => Stat::Ok,
        Err(s) => s,
    } as u32)?;
    put_post_op_attr(w, file.as_ref())?;
    put_wcc(
        w,
        Some(&WccAttr::from(&fattr(&d.st))),
        dir_after(&dfd).as_ref(),
    )?;
    Ok(())
}

/// REMOVE (§3.3.12) and RMDIR (§3.3.13).
pub fn remove(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>, dir: bool) -> Res {
    let (dfh, raw) = xdr::diropargs(r)?;
    let (d, dfd) = e.dir(dfh)?;
    let name = match export::name(raw) {
        Ok(n) => n,
        Err(s) => return failed(w, s, &d, &dfd),
    };
    let st = match stat_at(&dfd, &name) {
        Ok(st) => st,
        Err(err) => return failed(w, Stat::from(err), &d, &dfd),
    };
    let is_dir = crate::xdr::FType::of_mode(u32::from(st.stx_mode)) == crate::xdr::FType::Dir;
    if dir != is_dir {
        return failed(w, if dir { Stat::NotDir } else { Stat::IsDir }, &d, &dfd);
    }
    let flags = if dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    if let Err(err) = rustix::fs::unlinkat(&dfd, name.as_c_str(), flags) {
        return failed(w, Stat::from(err), &d, &dfd);
    }
    if st.stx_nlink <= 1 || dir {
        e.forget(&st);
    }
    w.put_u32(Stat::Ok as u32)?;
    put_wcc(
        w,
        Some(&WccAttr::from(&fattr(&d.st))),
        dir_after(&dfd).as_ref(),
    )?;
    Ok(())
}

/// RENAME (§3.3.14).
pub fn rename(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let (ffh, fraw) = xdr::diropargs(r)?;
    let (tfh, traw) = xdr::diropargs(r)?;
    let (fd_obj, ffd) = e.dir(ffh)?;
    let (td_obj, tfd) = e.dir(tfh)?;
    let names = export::name(fraw).and_then(|f| export::name(traw).map(|t| (f, t)));
    let result = match names {
        Ok((from, to)) => rustix::fs::renameat(&ffd, from.as_c_str(), &tfd, to.as_c_str())
            .map_err(Stat::from)
            .map(|()| to),
        Err(s) => Err(s),
    };
    let status = match &result {
        Ok(to) => {
            if let Ok(st) = stat_at(&tfd, to) {
                if FType::of_mode(u32::from(st.stx_mode)) == FType::Dir {
                    // Paths under its old name may name other directories now.
                    e.forget_dirs();
                }
                let _ = e.handle_for(&tfd, to, &child_path(&td_obj.rel, to), &st);
            }
            Stat::Ok
        }
        Err(s) => *s,
    };
    w.put_u32(status as u32)?;
    put_wcc(
        w,
        Some(&WccAttr::from(&fattr(&fd_obj.st))),
        dir_after(&ffd).as_ref(),
    )?;
    put_wcc(
        w,
        Some(&WccAttr::from(&fattr(&td_obj.st))),
        dir_after(&tfd).as_ref(),
    )?;
    Ok(())
}
