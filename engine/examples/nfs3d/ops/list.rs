//! READDIR and READDIRPLUS (RFC 1813 §3.3.16, §3.3.17).
//!
//! A directory is listed in the order of its entries' cookies: `.` (cookie 1) and `..`
//! (cookie 2) first, as Linux's nfsd lists them (the export's root is its own parent), then
//! every other entry, whose cookie is a keyed hash of its name: a client continuing from a cookie gets the entries after that
//! name whatever was added or removed meanwhile, and the same after a server restart (the
//! key persists), so the cookie verifier never changes and NFS3ERR_BAD_COOKIE answers only a
//! verifier this server never gave. Replies hold as many entries as the client's `count`
//! (READDIR) or `dircount` and `maxcount` (READDIRPLUS) allow, exactly; NFS3ERR_TOOSMALL
//! when not even one fits.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rustix::fs::{Mode, OFlags};

use super::export::{fattr, id_of, stat_at, Export};
use super::listings::Snapshot;
use super::{Fail, Res};
use crate::xdr::{self, put_post_op_attr, put_post_op_fh, Stat, POST_OP_ATTR_LEN};

/// Padded length of an XDR string of `n` bytes, with its length word.
fn str_len(n: usize) -> usize {
    4 + ((n + 3) & !3)
}

/// The entries of the directory `dfd` (attributes `st`) for a listing from `cookie`: the
/// snapshot a listing of the unchanged directory took, for a continuation, or a fresh read
/// (`true`), which a listing that goes on keeps (`Listings::put`).
pub fn snapshot(
    e: &Export,
    st: &rustix::fs::Statx,
    dfd: &std::os::fd::OwnedFd,
    cookie: u64,
) -> Result<(Arc<Snapshot>, bool), Fail> {
    if cookie != 0 {
        if let Some(s) = e.listings.get(st) {
            return Ok((s, false));
        }
    }
    // The directory's descriptor (O_PATH) serves its entries' statx; reading the directory
    // needs a readable one, opened only when it is read.
    let listing = rustix::fs::openat(
        dfd,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok((
        Arc::new(Snapshot::read(&listing, |name| e.cookie(name))?),
        true,
    ))
}

/// Keeps a fresh snapshot of the directory `st` for the continuations of a listing that
/// goes on (not `eof`).
pub fn keep(e: &Export, st: &rustix::fs::Statx, snap: Arc<Snapshot>, fresh: bool, eof: bool) {
    if !eof && fresh {
        e.listings.put(st, snap);
    }
}

/// READDIR (`plus` false) and READDIRPLUS (`plus` true).
pub fn readdir(e: &Export, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>, plus: bool) -> Res {
    let fh = xdr::fh(r)?;
    let cookie = r.u64()?;
    let verf = xdr::verf(r)?;
    let (dircount, maxcount) = if plus {
        (r.u32()? as usize, r.u32()? as usize)
    } else {
        let c = r.u32()? as usize;
        (usize::MAX, c)
    };
    // The directory's descriptor (O_PATH) serves its entries' statx; reading the directory
    // needs a readable one, opened only when it is read.
    let (d, dfd) = e.dir(fh)?;
    let dattr = fattr(&d.st);
    if cookie != 0 && verf != [0; 8] && verf != e.cookie_verf {
        w.put_u32(Stat::BadCookie as u32)?;
        put_post_op_attr(w, Some(&dattr))?;
        return Ok(());
    }
    let (snap, fresh) = snapshot(e, &d.st, &dfd, cookie)?;
    let from = snap.entries.partition_point(|x| x.0 <= cookie);
    let entries = &snap.entries[from..];

    // The reply's size, bounded by the client's count and our buffer: status, directory
    // attributes, verifier, then entries, then the list's end (no more entries, eof).
    let limit = maxcount.min(w.remaining() + w.position());
    let head = 4 + POST_OP_ATTR_LEN + 8;
    let tail = 8;
    if head + tail > limit {
        w.put_u32(Stat::TooSmall as u32)?;
        put_post_op_attr(w, Some(&dattr))?;
        return Ok(());
    }
    w.put_u32(Stat::Ok as u32)?;
    put_post_op_attr(w, Some(&dattr))?;
    w.put_opaque_fixed(&e.cookie_verf)?;
    let mut used = head;
    let mut dir_used = 0usize;
    let mut sent = 0usize;
    // The objects sent with handles, and where their names are, remembered at the end.
    let mut listed = Vec::new();
    for &(c, ino, at) in entries {
        let name = snap.name(at);
        let dots = c <= 2;
        // The root's `..` is the root itself: nothing above the export is shown.
        let (target, ino) = if c == 2 && d.rel.as_os_str().is_empty() {
            (c".", d.st.stx_ino)
        } else {
            (name, ino)
        };
        let info = 8 + str_len(name.to_bytes().len()) + 8;
        let mut size = 4 + info;
        let mut extra = None;
        if plus {
            // Attributes and handle: an entry whose object went away meanwhile is left out.
            let Ok(st) = stat_at(&dfd, target) else {
                continue;
            };
            let id = id_of(&st);
            let Ok(fh) = e.handle_of(&dfd, target, &st) else {
                continue;
            };
            size += POST_OP_ATTR_LEN + 4 + str_len(fh.as_bytes().len());
            extra = Some((fattr(&st), fh, id));
        }
        if used + size + tail > limit || dir_used + info > dircount {
            break;
        }
        w.put_bool(true)?;
        w.put_u64(extra.as_ref().map_or(ino, |(a, _, _)| a.fileid))?;
        w.put_opaque_var(name.to_bytes(), xdr::NAME_MAX)?;
        w.put_u64(c)?;
        if let Some((a, fh, id)) = &extra {
            put_post_op_attr(w, Some(a))?;
            put_post_op_fh(w, Some(fh.as_bytes()))?;
            if !dots {
                listed.push((*id, at, *fh));
            }
        }
        used += size;
        dir_used += info;
        sent += 1;
    }
    if sent == 0 && !entries.is_empty() {
        // Not even one entry fits what the client allows.
        return Err(Fail::Status(Stat::TooSmall));
    }
    e.remember_listed(
        &d.rel,
        listed
            .iter()
            .map(|&(id, at, fh)| (id, OsStr::from_bytes(snap.name(at).to_bytes()), fh)),
    );
    w.put_bool(false)?;
    let eof = sent == entries.len();
    w.put_bool(eof)?;
    keep(e, &d.st, snap, fresh, eof);
    Ok(())
}
