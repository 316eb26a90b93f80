//! READ, WRITE, COMMIT (RFC 1813 §3.3.6, §3.3.7, §3.3.21) and READLINK (§3.3.5).
//!
//! READ reads the file straight into the buffer it is given — the registered buffer the
//! engine RDMA-Writes into the client's Write chunk — and WRITE writes from the argument
//! bytes where the RDMA Read put them: no copy either way (RFC 8267 §4.2). A file is opened
//! relative to its directory without following a link, as the caller, and checked to be
//! the object the handle names. As Linux's nfsd does, the file's owner may read and write
//! it whatever its mode, and whoever may execute it may read it (NFS checks access when a
//! file is opened, on the client: a file created with mode 0444 is still written through
//! the descriptor that created it, and executing a file reads it).

use std::fs::File;
use std::os::unix::fs::FileExt;

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rustix::fs::{Mode, OFlags};

use super::export::{fattr, stat_at, Export, Obj};
use super::{Caller, Fail, Res};
use crate::xdr::{self, put_post_op_attr, put_wcc, FType, Stat, WccAttr, PATH_MAX};

/// `stable_how` (§3.3.7).
const UNSTABLE: u32 = 0;
const DATA_SYNC: u32 = 1;
const FILE_SYNC: u32 = 2;

/// Who opens a file: the caller, with the owner's and the executor's rights of Linux's
/// nfsd (NFSD_MAY_OWNER_OVERRIDE, NFSD_MAY_READ_IF_EXEC), or the server (COMMIT, which
/// only makes what was written stable).
#[derive(Clone, Copy, Debug)]
pub enum By<'a> {
    Caller(&'a Caller),
    Server,
}

/// Opens the regular file `o` names, refusing anything else (NFS3ERR_ISDIR for a directory,
/// NFS3ERR_INVAL otherwise) and a file swapped in meanwhile (NFS3ERR_STALE).
pub fn open(o: &Obj, by: By<'_>, write: bool) -> Result<File, Fail> {
    match o.ftype() {
        FType::Reg => {}
        FType::Dir => return Err(Fail::Status(Stat::IsDir)),
        _ => return Err(Fail::Status(Stat::Inval)),
    }
    let access = if write {
        OFlags::WRONLY
    } else {
        OFlags::RDONLY
    };
    let flags = access | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let open = || rustix::fs::openat(&o.parent, o.name.as_c_str(), flags, Mode::empty());
    let fd = match by {
        By::Server => super::as_server(open)?,
        By::Caller(c) => match open() {
            Err(rustix::io::Errno::ACCESS) if overrides(o, c, write) => super::as_server(open)?,
            r => r?,
        },
    };
    let st = rustix::fs::fstat(&fd)?;
    if st.st_ino != o.st.stx_ino {
        return Err(Fail::Status(Stat::Stale));
    }
    Ok(File::from(fd))
}

/// Whether `c` may open `o` although its mode bits refuse: its owner, or (to read) a caller
/// who may execute it.
fn overrides(o: &Obj, c: &Caller, write: bool) -> bool {
    c.uid == o.st.stx_uid
        || (!write
            && rustix::fs::accessat(
                &o.parent,
                o.name.as_c_str(),
                rustix::fs::Access::EXEC_OK,
                rustix::fs::AtFlags::EACCESS,
            )
            .is_ok())
}

/// READ: returns the bytes put in `bulk`.
pub fn read(
    e: &Export,
    caller: &Caller,
    r: &mut XdrReader<'_>,
    w: &mut XdrWriter<'_>,
    bulk: Option<&mut [u8]>,
) -> Result<Option<usize>, Fail> {
    let fh = xdr::fh(r)?;
    let offset = r.u64()?;
    let count = r.u32()?.min(e.config.max_io) as usize;
    let o = e.resolve(fh)?;
    let f = open(&o, By::Caller(caller), false)?;
    let buf = bulk.ok_or(Fail::Status(Stat::ServerFault))?;
    let want = count.min(buf.len());
    let mut n = 0;
    while n < want {
        match f.read_at(&mut buf[n..want], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let after = stat_at(&o.parent, &o.name).map(|st| fattr(&st)).ok();
    let size = after.map_or(o.st.stx_size, |a| a.size);
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_attr(w, after.as_ref())?;
    w.put_u32(n as u32)?;
    w.put_bool(offset.saturating_add(n as u64) >= size)?;
    Ok(Some(n))
}

/// WRITE: FILE_SYNC and DATA_SYNC writes reach stable storage before the reply
/// (`fsync`, `fdatasync`); UNSTABLE ones wait for COMMIT.
pub fn write(e: &Export, caller: &Caller, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let fh = xdr::fh(r)?;
    let offset = r.u64()?;
    let count = r.u32()? as usize;
    let stable = r.u32()?;
    let data = r.opaque_var(u32::MAX)?;
    if stable > FILE_SYNC || count > data.len() {
        return Err(Fail::Garbage);
    }
    let o = e.resolve(fh)?;
    let before = WccAttr::from(&fattr(&o.st));
    let f = open(&o, By::Caller(caller), true)?;
    f.write_all_at(&data[..count], offset)?;
    let committed = match stable {
        UNSTABLE => UNSTABLE,
        DATA_SYNC => {
            f.sync_data()?;
            DATA_SYNC
        }
        _ => {
            f.sync_all()?;
            FILE_SYNC
        }
    };
    let after = rustix::fs::fstat(&f).ok();
    let after = after
        .and_then(|_| stat_at(&o.parent, &o.name).ok())
        .map(|st| fattr(&st));
    w.put_u32(Stat::Ok as u32)?;
    put_wcc(w, Some(&before), after.as_ref())?;
    w.put_u32(count as u32)?;
    w.put_u32(committed)?;
    w.put_opaque_fixed(&e.write_verf)?;
    Ok(())
}

/// COMMIT: everything written to the file reaches stable storage; the verifier tells the
/// client whether the server restarted since its UNSTABLE writes.
pub fn commit(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let fh = xdr::fh(r)?;
    let _offset = r.u64()?;
    let _count = r.u32()?;
    let o = e.resolve(fh)?;
    let before = WccAttr::from(&fattr(&o.st));
    let f = open(&o, By::Server, false)?;
    f.sync_all()?;
    let after = stat_at(&o.parent, &o.name).ok().map(|st| fattr(&st));
    w.put_u32(Stat::Ok as u32)?;
    put_wcc(w, Some(&before), after.as_ref())?;
    w.put_opaque_fixed(&e.write_verf)?;
    Ok(())
}

/// READLINK: the link's target as it was made, never followed.
pub fn readlink(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Res {
    let o = e.resolve(xdr::fh(r)?)?;
    if o.ftype() != FType::Lnk {
        return Err(Fail::Status(Stat::Inval));
    }
    let target = rustix::fs::readlinkat(&o.parent, o.name.as_c_str(), Vec::new())?;
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_attr(w, Some(&fattr(&o.st)))?;
    w.put_string(target.as_bytes(), PATH_MAX)?;
    Ok(())
}
