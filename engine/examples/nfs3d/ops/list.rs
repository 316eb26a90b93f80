//! READDIR and READDIRPLUS (RFC 1813 §3.3.16, §3.3.17).
//!
//! A directory is listed in the order of its entries' cookies, and an entry's cookie is a
//! keyed hash of its name: a client continuing from a cookie gets the entries after that
//! name whatever was added or removed meanwhile, and the same after a server restart (the
//! key persists), so the cookie verifier never changes and NFS3ERR_BAD_COOKIE answers only a
//! verifier this server never gave. Replies hold as many entries as the client's `count`
//! (READDIR) or `dircount` and `maxcount` (READDIRPLUS) allow, exactly; NFS3ERR_TOOSMALL
//! when not even one fits.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rustix::fs::{Mode, OFlags};

use super::export::{fattr, stat_at, Export};
use super::{Fail, Res};
use crate::xdr::{self, put_post_op_attr, put_post_op_fh, Stat, POST_OP_ATTR_LEN};

/// Padded length of an XDR string of `n` bytes, with its length word.
fn str_len(n: usize) -> usize {
    4 + ((n + 3) & !3)
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
    let (d, _) = e.dir(fh)?;
    let dattr = fattr(&d.st);
    if cookie != 0 && verf != [0; 8] && verf != e.cookie_verf {
        w.put_u32(Stat::BadCookie as u32)?;
        put_post_op_attr(w, Some(&dattr))?;
        return Ok(());
    }
    let listing = rustix::fs::openat(
        &d.parent,
        d.name.as_c_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut entries: Vec<(u64, u64, CString)> = Vec::new();
    for ent in rustix::fs::Dir::read_from(&listing)? {
        let ent = ent?;
        let n = ent.file_name();
        if n.to_bytes() == b"." || n.to_bytes() == b".." {
            continue;
        }
        let c = e.cookie(n.to_bytes());
        if c > cookie {
            entries.push((c, ent.ino(), n.to_owned()));
        }
    }
    entries.sort_unstable_by_key(|x| x.0);

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
    for (c, ino, name) in &entries {
        let info = 8 + str_len(name.as_bytes().len()) + 8;
        let mut size = 4 + info;
        let mut extra = None;
        if plus {
            // Attributes and handle: an entry whose object went away meanwhile is left out.
            let Ok(st) = stat_at(&listing, name) else {
                continue;
            };
            let fh = e.handle_for(&d.rel.join(OsStr::from_bytes(name.as_bytes())), &st);
            size += POST_OP_ATTR_LEN + 4 + str_len(fh.as_bytes().len());
            extra = Some((fattr(&st), fh));
        }
        if used + size + tail > limit || dir_used + info > dircount {
            break;
        }
        w.put_bool(true)?;
        w.put_u64(extra.as_ref().map_or(*ino, |(a, _)| a.fileid))?;
        w.put_opaque_var(name.as_bytes(), xdr::NAME_MAX)?;
        w.put_u64(*c)?;
        if let Some((a, fh)) = &extra {
            put_post_op_attr(w, Some(a))?;
            put_post_op_fh(w, Some(fh.as_bytes()))?;
        }
        used += size;
        dir_used += info;
        sent += 1;
    }
    if sent == 0 && !entries.is_empty() {
        // Not even one entry fits what the client allows.
        return Err(Fail::Status(Stat::TooSmall));
    }
    w.put_bool(false)?;
    w.put_bool(sent == entries.len())?;
    Ok(())
}
