//! File attributes, `fattr4` (RFC 8881 §5): the attributes this server reports, encoded
//! from what `statx` and `statvfs` say, and the few a client may set (SETATTR, CREATE,
//! OPEN's create attributes: size, mode, owner, owner_group, time_access_set,
//! time_modify_set).
//!
//! Owners and groups travel as decimal numbers ("1000"), as the Linux client sends and
//! reads them when ID mapping is off (its default with AUTH_SYS, `nfs4_disable_idmapping`).
//! A name the server cannot map is NFS4ERR_BADOWNER (§5.9).

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rpcrdma_proto::EncodeError;
use rustix::fs::Statx;

use crate::session::status;
use crate::xdr::{FType, Sattr, SetTime};

/// Attribute numbers (§5.6, §5.7, §5.8).
pub mod a {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
}

/// A bitmap of attributes, three words (attributes 0 to 95).
pub type Bitmap = [u32; 3];

const fn bits(list: &[u32]) -> Bitmap {
    let mut m = [0u32; 3];
    let mut i = 0;
    while i < list.len() {
        m[(list[i] / 32) as usize] |= 1 << (list[i] % 32);
        i += 1;
    }
    m
}

/// Every attribute this server reports.
pub const SUPPORTED: Bitmap = bits(&[
    a::SUPPORTED_ATTRS,
    a::TYPE,
    a::FH_EXPIRE_TYPE,
    a::CHANGE,
    a::SIZE,
    a::LINK_SUPPORT,
    a::SYMLINK_SUPPORT,
    a::NAMED_ATTR,
    a::FSID,
    a::UNIQUE_HANDLES,
    a::LEASE_TIME,
    a::RDATTR_ERROR,
    a::CANSETTIME,
    a::CASE_INSENSITIVE,
    a::CASE_PRESERVING,
    a::CHOWN_RESTRICTED,
    a::FILEHANDLE,
    a::FILEID,
    a::FILES_AVAIL,
    a::FILES_FREE,
    a::FILES_TOTAL,
    a::HOMOGENEOUS,
    a::MAXFILESIZE,
    a::MAXLINK,
    a::MAXNAME,
    a::MAXREAD,
    a::MAXWRITE,
    a::MODE,
    a::NO_TRUNC,
    a::NUMLINKS,
    a::OWNER,
    a::OWNER_GROUP,
    a::RAWDEV,
    a::SPACE_AVAIL,
    a::SPACE_FREE,
    a::SPACE_TOTAL,
    a::SPACE_USED,
    a::TIME_ACCESS,
    a::TIME_ACCESS_SET,
    a::TIME_DELTA,
    a::TIME_METADATA,
    a::TIME_MODIFY,
    a::TIME_MODIFY_SET,
    a::MOUNTED_ON_FILEID,
    a::SUPPATTR_EXCLCREAT,
]);

/// The attributes a client may set (§5.5: the others are read-only, NFS4ERR_INVAL).
pub const WRITABLE: Bitmap = bits(&[
    a::SIZE,
    a::MODE,
    a::OWNER,
    a::OWNER_GROUP,
    a::TIME_ACCESS_SET,
    a::TIME_MODIFY_SET,
]);

/// The attributes an EXCLUSIVE4_1 create may set with its verifier (§18.16.3): not the
/// times, which hold the verifier, as in Linux's nfsd.
pub const EXCLCREAT: Bitmap = bits(&[a::SIZE, a::MODE, a::OWNER, a::OWNER_GROUP]);

/// Whether `m` names attribute `n`.
fn has(m: &Bitmap, n: u32) -> bool {
    m.get((n / 32) as usize)
        .is_some_and(|w| w & (1 << (n % 32)) != 0)
}

/// Reads a `bitmap4`; words past the third must be zero (no such attributes here), or
/// the attribute is unsupported.
pub fn read_bitmap(r: &mut XdrReader<'_>) -> Result<(Bitmap, bool), u32> {
    let n = r.array_len(4, 8).map_err(|_| status::BADXDR)?;
    let mut m = [0u32; 3];
    let mut beyond = false;
    for i in 0..n as usize {
        let v = r.u32().map_err(|_| status::BADXDR)?;
        match m.get_mut(i) {
            Some(x) => *x = v,
            None => beyond |= v != 0,
        }
    }
    Ok((m, beyond))
}

/// Writes a `bitmap4`, without its trailing zero words.
pub fn put_bitmap(w: &mut XdrWriter<'_>, m: &Bitmap) -> Result<(), EncodeError> {
    let n = m.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    w.put_u32(n as u32)?;
    for v in &m[..n] {
        w.put_u32(*v)?;
    }
    Ok(())
}

/// What the file system as a whole says (`statvfs`), read only when asked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsSpace {
    pub files_avail: u64,
    pub files_free: u64,
    pub files_total: u64,
    pub space_avail: u64,
    pub space_free: u64,
    pub space_total: u64,
}

/// The attributes made of [`FsSpace`].
const SPACE: [u32; 6] = [
    a::FILES_AVAIL,
    a::FILES_FREE,
    a::FILES_TOTAL,
    a::SPACE_AVAIL,
    a::SPACE_FREE,
    a::SPACE_TOTAL,
];

/// Whether `asked` names an attribute that needs [`FsSpace`].
pub fn needs_space(asked: &Bitmap) -> bool {
    SPACE.iter().any(|&n| has(asked, n))
}

/// The server-wide values attributes report.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// lease_time, seconds.
    pub lease: u32,
    /// maxread and maxwrite.
    pub max_io: u64,
}

/// One object's attributes to encode.
pub struct Object<'a> {
    pub st: &'a Statx,
    pub fh: &'a [u8],
    pub space: Option<FsSpace>,
}

/// The `change` attribute: the inode's change time in nanoseconds (§5.8.1.4: it must
/// change whenever the object does; ctime does, at the file system's granularity).
pub fn change(st: &Statx) -> u64 {
    (st.stx_ctime.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(u64::from(st.stx_ctime.tv_nsec))
}

fn put_time(w: &mut XdrWriter<'_>, t: &rustix::fs::StatxTimestamp) -> Result<(), EncodeError> {
    w.put_i64(t.tv_sec)?;
    w.put_u32(t.tv_nsec)
}

/// Writes the `fattr4` of `o` for the attributes `asked` (those supported, in order).
pub fn put_fattr(
    w: &mut XdrWriter<'_>,
    asked: &Bitmap,
    o: &Object<'_>,
    lim: &Limits,
) -> Result<(), EncodeError> {
    let mut m = [0u32; 3];
    for i in 0..3 {
        m[i] = asked[i] & SUPPORTED[i];
    }
    if o.space.is_none() {
        for n in SPACE {
            m[(n / 32) as usize] &= !(1 << (n % 32));
        }
    }
    let mut vals = [0u8; 1024];
    let mut v = XdrWriter::new(&mut vals);
    let st = o.st;
    let mode = u32::from(st.stx_mode);
    let sp = o.space.unwrap_or_default();
    for n in 0..96 {
        if !has(&m, n) {
            continue;
        }
        match n {
            a::SUPPORTED_ATTRS => put_bitmap(&mut v, &SUPPORTED)?,
            a::TYPE => v.put_u32(FType::of_mode(mode) as u32)?,
            a::FH_EXPIRE_TYPE => v.put_u32(0)?, // FH4_PERSISTENT
            a::CHANGE => v.put_u64(change(st))?,
            a::SIZE => v.put_u64(st.stx_size)?,
            a::LINK_SUPPORT | a::SYMLINK_SUPPORT | a::UNIQUE_HANDLES => v.put_bool(true)?,
            a::NAMED_ATTR | a::CASE_INSENSITIVE => v.put_bool(false)?,
            a::FSID => {
                v.put_u64(u64::from(st.stx_dev_major))?;
                v.put_u64(u64::from(st.stx_dev_minor))?;
            }
            a::LEASE_TIME => v.put_u32(lim.lease)?,
            a::RDATTR_ERROR => v.put_u32(status::OK)?,
            a::CANSETTIME
            | a::CASE_PRESERVING
            | a::CHOWN_RESTRICTED
            | a::HOMOGENEOUS
            | a::NO_TRUNC => v.put_bool(true)?,
            a::FILEHANDLE => v.put_opaque_var(o.fh, 128)?,
            a::FILEID | a::MOUNTED_ON_FILEID => v.put_u64(st.stx_ino)?,
            a::FILES_AVAIL => v.put_u64(sp.files_avail)?,
            a::FILES_FREE => v.put_u64(sp.files_free)?,
            a::FILES_TOTAL => v.put_u64(sp.files_total)?,
            a::MAXFILESIZE => v.put_u64(i64::MAX as u64)?,
            a::MAXLINK => v.put_u32(65_000)?,
            a::MAXNAME => v.put_u32(255)?,
            a::MAXREAD | a::MAXWRITE => v.put_u64(lim.max_io)?,
            a::MODE => v.put_u32(mode & 0o7777)?,
            a::NUMLINKS => v.put_u32(st.stx_nlink)?,
            a::OWNER => v.put_string(st.stx_uid.to_string().as_bytes(), 64)?,
            a::OWNER_GROUP => v.put_string(st.stx_gid.to_string().as_bytes(), 64)?,
            a::RAWDEV => {
                v.put_u32(st.stx_rdev_major)?;
                v.put_u32(st.stx_rdev_minor)?;
            }
            a::SPACE_AVAIL => v.put_u64(sp.space_avail)?,
            a::SPACE_FREE => v.put_u64(sp.space_free)?,
            a::SPACE_TOTAL => v.put_u64(sp.space_total)?,
            a::SPACE_USED => v.put_u64(st.stx_blocks.saturating_mul(512))?,
            a::TIME_ACCESS => put_time(&mut v, &st.stx_atime)?,
            a::TIME_METADATA => put_time(&mut v, &st.stx_ctime)?,
            a::TIME_MODIFY => put_time(&mut v, &st.stx_mtime)?,
            a::TIME_DELTA => {
                v.put_i64(0)?;
                v.put_u32(1)?;
            }
            a::SUPPATTR_EXCLCREAT => put_bitmap(&mut v, &EXCLCREAT)?,
            // Write-only attributes (§5.5): never reported.
            a::TIME_ACCESS_SET | a::TIME_MODIFY_SET => {
                m[(n / 32) as usize] &= !(1 << (n % 32));
            }
            _ => {}
        }
    }
    let len = v.position();
    put_bitmap(w, &m)?;
    w.put_opaque_var(&vals[..len], 1024)
}

/// The space and file counts of the file system of `fd`.
pub fn space_of(fd: &impl std::os::fd::AsFd) -> Option<FsSpace> {
    let s = rustix::fs::fstatvfs(fd).ok()?;
    let f = s.f_frsize.max(1);
    Some(FsSpace {
        files_avail: s.f_favail,
        files_free: s.f_ffree,
        files_total: s.f_files,
        space_avail: s.f_bavail.saturating_mul(f),
        space_free: s.f_bfree.saturating_mul(f),
        space_total: s.f_blocks.saturating_mul(f),
    })
}

/// An owner or group string: a decimal ID, or a name this server cannot map
/// (NFS4ERR_BADOWNER, §5.9). "nobody" is refused too: it names no ID here.
fn id_of(s: &[u8]) -> Result<u32, u32> {
    let digits = s.split(|&b| b == b'@').next().unwrap_or_default();
    std::str::from_utf8(digits)
        .ok()
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u32>().ok())
        .ok_or(status::BADOWNER)
}

/// Times a client sets to its own clock (SET_TO_CLIENT_TIME4), access and modification:
/// `nfstime4`'s 64-bit seconds whole (before 1970 and past 2106 too), which NFSv3's
/// `sattr3` cannot carry.
pub type ClientTimes = [Option<rustix::fs::Timespec>; 2];

/// Reads a `settime4`: the server's time goes to `s`, a client's to `t`.
fn settime(
    r: &mut XdrReader<'_>,
    s: &mut SetTime,
    t: &mut Option<rustix::fs::Timespec>,
) -> Result<(), u32> {
    match r.u32().map_err(|_| status::BADXDR)? {
        0 => *s = SetTime::Now, // SET_TO_SERVER_TIME4
        1 => {
            let secs = r.i64().map_err(|_| status::BADXDR)?;
            let nsec = r.u32().map_err(|_| status::BADXDR)?;
            if nsec >= 1_000_000_000 {
                return Err(status::INVAL);
            }
            *t = Some(rustix::fs::Timespec {
                tv_sec: secs,
                tv_nsec: i64::from(nsec),
            });
        }
        _ => return Err(status::BADXDR),
    }
    Ok(())
}

/// Sets the client's times `t` of `name` in `dir`, as the caller, not following a link.
pub fn apply_times(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::CStr,
    t: &ClientTimes,
) -> rustix::io::Result<()> {
    if t.iter().all(Option::is_none) {
        return Ok(());
    }
    let keep = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_OMIT,
    };
    let ts = rustix::fs::Timestamps {
        last_access: t[0].unwrap_or(keep),
        last_modification: t[1].unwrap_or(keep),
    };
    rustix::fs::utimensat(dir, name, &ts, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
}

/// Reads a `fattr4` a client sends to set attributes: what to apply and the attributes
/// it named (the `attrset` of the reply when all were applied). NFS4ERR_ATTRNOTSUPP for
/// one this server does not have, NFS4ERR_INVAL for a read-only one (§18.30.4).
pub fn read_settable(r: &mut XdrReader<'_>) -> Result<(Sattr, Bitmap, ClientTimes), u32> {
    let (m, beyond) = read_bitmap(r)?;
    let vals = r.opaque_var(64 * 1024).map_err(|_| status::BADXDR)?;
    for i in 0..3 {
        if m[i] & !SUPPORTED[i] != 0 {
            return Err(status::ATTRNOTSUPP);
        }
        if m[i] & !WRITABLE[i] != 0 {
            return Err(status::INVAL);
        }
    }
    if beyond {
        return Err(status::ATTRNOTSUPP);
    }
    let mut v = XdrReader::new(vals);
    let mut s = Sattr::default();
    let mut t: ClientTimes = [None; 2];
    for n in 0..96 {
        if !has(&m, n) {
            continue;
        }
        let bad = |_| status::BADXDR;
        match n {
            a::SIZE => s.size = Some(v.u64().map_err(bad)?),
            a::MODE => s.mode = Some(v.u32().map_err(bad)? & 0o7777),
            a::OWNER => s.uid = Some(id_of(v.string(1024).map_err(bad)?)?),
            a::OWNER_GROUP => s.gid = Some(id_of(v.string(1024).map_err(bad)?)?),
            a::TIME_ACCESS_SET => settime(&mut v, &mut s.atime, &mut t[0])?,
            a::TIME_MODIFY_SET => settime(&mut v, &mut s.mtime, &mut t[1])?,
            _ => return Err(status::ATTRNOTSUPP),
        }
    }
    Ok((s, m, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settable_attributes_decode_and_others_are_refused() {
        // mode 0640 and owner "1000".
        let mut buf = vec![0u8; 256];
        let mut w = XdrWriter::new(&mut buf);
        put_bitmap(&mut w, &bits(&[a::MODE, a::OWNER])).unwrap();
        let mut vals = vec![0u8; 64];
        let mut v = XdrWriter::new(&mut vals);
        v.put_u32(0o640).unwrap();
        v.put_string(b"1000", 64).unwrap();
        let n = v.position();
        w.put_opaque_var(&vals[..n], 1024).unwrap();
        let len = w.position();
        let (s, m, _) = read_settable(&mut XdrReader::new(&buf[..len])).unwrap();
        assert_eq!((s.mode, s.uid, s.gid), (Some(0o640), Some(1000), None));
        assert_eq!(m, bits(&[a::MODE, a::OWNER]));
        // A read-only attribute, then one not supported, then a name with no number.
        for (attrs, want) in [
            (bits(&[a::FILEID]), status::INVAL),
            (bits(&[12]), status::ATTRNOTSUPP),
        ] {
            let mut buf = vec![0u8; 64];
            let mut w = XdrWriter::new(&mut buf);
            put_bitmap(&mut w, &attrs).unwrap();
            w.put_opaque_var(&[0; 8], 1024).unwrap();
            let len = w.position();
            let r = read_settable(&mut XdrReader::new(&buf[..len]));
            assert_eq!(r.err(), Some(want));
        }
        // A client's modification time past 2106 and an access time set to the server's.
        let mut buf = vec![0u8; 64];
        let mut w = XdrWriter::new(&mut buf);
        put_bitmap(&mut w, &bits(&[a::TIME_ACCESS_SET, a::TIME_MODIFY_SET])).unwrap();
        let mut vals = vec![0u8; 32];
        let mut v = XdrWriter::new(&mut vals);
        v.put_u32(0).unwrap();
        v.put_u32(1).unwrap();
        v.put_i64(1 << 32).unwrap();
        v.put_u32(5).unwrap();
        let n = v.position();
        w.put_opaque_var(&vals[..n], 1024).unwrap();
        let len = w.position();
        let (s, _, t) = read_settable(&mut XdrReader::new(&buf[..len])).unwrap();
        assert_eq!((s.atime, s.mtime), (SetTime::Now, SetTime::Keep));
        assert_eq!(t[0], None);
        assert_eq!(t[1].map(|t| (t.tv_sec, t.tv_nsec)), Some((1 << 32, 5)));
        assert_eq!(id_of(b"alice@example.com"), Err(status::BADOWNER));
        assert_eq!(id_of(b"0@localdomain"), Ok(0));
    }

    #[test]
    fn reported_attributes_are_those_asked_and_supported_in_order() {
        let st = rustix::fs::statx(
            rustix::fs::CWD,
            ".",
            rustix::fs::AtFlags::empty(),
            rustix::fs::StatxFlags::BASIC_STATS,
        )
        .unwrap();
        let o = Object {
            st: &st,
            fh: &[7; 12],
            space: None,
        };
        let lim = Limits {
            lease: 90,
            max_io: 1 << 20,
        };
        let mut buf = vec![0u8; 2048];
        let mut w = XdrWriter::new(&mut buf);
        // type, size, an unsupported ACL (12), fileid, space_total (no space given).
        put_fattr(
            &mut w,
            &bits(&[a::TYPE, a::SIZE, 12, a::FILEID, a::SPACE_TOTAL]),
            &o,
            &lim,
        )
        .unwrap();
        let len = w.position();
        let mut r = XdrReader::new(&buf[..len]);
        let (m, _) = read_bitmap(&mut r).unwrap();
        assert_eq!(m, bits(&[a::TYPE, a::SIZE, a::FILEID]));
        let vals = r.opaque_var(1024).unwrap();
        let mut v = XdrReader::new(vals);
        assert_eq!(v.u32().unwrap(), 2, "a directory");
        assert_eq!(v.u64().unwrap(), st.stx_size);
        assert_eq!(v.u64().unwrap(), st.stx_ino);
        assert_eq!(v.remaining(), 0);
    }
}
