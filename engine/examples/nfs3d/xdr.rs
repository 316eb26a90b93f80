//! NFS version 3's XDR (RFC 1813 §2.5-§2.6, §3.3): the status codes, file types, attribute
//! structures and argument pieces the procedures share, decoded from and encoded into the
//! engine's buffers with the protocol crate's XDR cursor and writer (RFC 4506).
//!
//! Decoders never panic on hostile bytes: a short or malformed argument is an `Err`, which
//! the procedure answers GARBAGE_ARGS.

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rpcrdma_proto::{DecodeError, EncodeError};

/// `NFS3_FHSIZE`: the largest file handle (§2.4).
pub const FHSIZE: u32 = 64;
/// The longest name in a directory we accept (`filename3`; POSIX NAME_MAX).
pub const NAME_MAX: u32 = 255;
/// The longest symbolic-link target (`nfspath3`; POSIX PATH_MAX).
pub const PATH_MAX: u32 = 4096;
/// `NFS3_COOKIEVERFSIZE`, `NFS3_CREATEVERFSIZE`, `NFS3_WRITEVERFSIZE` (§2.4).
pub const VERF_SIZE: usize = 8;

/// `nfsstat3` (§2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum Stat {
    Ok = 0,
    Perm = 1,
    NoEnt = 2,
    Io = 5,
    Nxio = 6,
    Acces = 13,
    Exist = 17,
    Xdev = 18,
    NoDev = 19,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    FBig = 27,
    NoSpc = 28,
    Rofs = 30,
    MLink = 31,
    NameTooLong = 63,
    NotEmpty = 66,
    DQuot = 69,
    Stale = 70,
    BadHandle = 10001,
    NotSync = 10002,
    BadCookie = 10003,
    NotSupp = 10004,
    TooSmall = 10005,
    ServerFault = 10006,
    BadType = 10007,
}

impl Stat {
    /// The status for an operating-system error (§2.6 gives each its POSIX origin).
    pub fn from_errno(e: rustix::io::Errno) -> Stat {
        use rustix::io::Errno as E;
        match e {
            E::PERM => Stat::Perm,
            E::NOENT => Stat::NoEnt,
            E::NXIO => Stat::Nxio,
            E::ACCESS => Stat::Acces,
            E::EXIST => Stat::Exist,
            E::XDEV => Stat::Xdev,
            E::NODEV => Stat::NoDev,
            E::NOTDIR | E::LOOP => Stat::NotDir,
            E::ISDIR => Stat::IsDir,
            E::INVAL => Stat::Inval,
            E::FBIG => Stat::FBig,
            E::NOSPC => Stat::NoSpc,
            E::ROFS => Stat::Rofs,
            E::MLINK => Stat::MLink,
            E::NAMETOOLONG => Stat::NameTooLong,
            E::NOTEMPTY => Stat::NotEmpty,
            E::DQUOT => Stat::DQuot,
            E::STALE => Stat::Stale,
            E::OPNOTSUPP => Stat::NotSupp,
            _ => Stat::Io,
        }
    }
}

impl From<rustix::io::Errno> for Stat {
    fn from(e: rustix::io::Errno) -> Stat {
        Stat::from_errno(e)
    }
}

/// `ftype3` (§2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum FType {
    Reg = 1,
    Dir = 2,
    Blk = 3,
    Chr = 4,
    Lnk = 5,
    Sock = 6,
    Fifo = 7,
}

impl FType {
    /// The type in a `st_mode`.
    pub fn of_mode(mode: u32) -> FType {
        match mode & 0o170000 {
            0o040000 => FType::Dir,
            0o060000 => FType::Blk,
            0o020000 => FType::Chr,
            0o120000 => FType::Lnk,
            0o140000 => FType::Sock,
            0o010000 => FType::Fifo,
            _ => FType::Reg,
        }
    }
}

/// `nfstime3` (§2.5): seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time {
    /// Seconds.
    pub seconds: u32,
    /// Nanoseconds.
    pub nseconds: u32,
}

impl Time {
    fn decode(r: &mut XdrReader<'_>) -> Result<Time, DecodeError> {
        Ok(Time {
            seconds: r.u32()?,
            nseconds: r.u32()?,
        })
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.seconds)?;
        w.put_u32(self.nseconds)
    }
}

/// `fattr3` (§2.5): an object's attributes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fattr {
    /// `ftype3`.
    pub ftype: u32,
    /// Permission bits (and set-id, sticky).
    pub mode: u32,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Bytes.
    pub size: u64,
    /// Bytes of storage used.
    pub used: u64,
    /// Device numbers of a device file (`specdata3`).
    pub rdev: (u32, u32),
    /// The file system.
    pub fsid: u64,
    /// The file's number in it.
    pub fileid: u64,
    /// Last access.
    pub atime: Time,
    /// Last change of the data.
    pub mtime: Time,
    /// Last change of the attributes.
    pub ctime: Time,
}

/// Encoded bytes of a `fattr3`.
pub const FATTR_LEN: usize = 84;
/// Encoded bytes of a `post_op_attr` holding attributes.
pub const POST_OP_ATTR_LEN: usize = 4 + FATTR_LEN;
/// Encoded bytes of a `wcc_data` with both sides present.
pub const WCC_LEN: usize = 4 + 24 + POST_OP_ATTR_LEN;
/// Encoded bytes of a `post_op_fh3` with the largest handle.
pub const POST_OP_FH_LEN: usize = 4 + 4 + FHSIZE as usize;

impl Fattr {
    /// Encodes the `fattr3`.
    pub fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        for v in [self.ftype, self.mode, self.nlink, self.uid, self.gid] {
            w.put_u32(v)?;
        }
        w.put_u64(self.size)?;
        w.put_u64(self.used)?;
        w.put_u32(self.rdev.0)?;
        w.put_u32(self.rdev.1)?;
        w.put_u64(self.fsid)?;
        w.put_u64(self.fileid)?;
        self.atime.encode(w)?;
        self.mtime.encode(w)?;
        self.ctime.encode(w)
    }

    /// Decodes a `fattr3` (tests read replies back).
    #[cfg(test)]
    pub fn decode(r: &mut XdrReader<'_>) -> Result<Fattr, DecodeError> {
        Ok(Fattr {
            ftype: r.u32()?,
            mode: r.u32()?,
            nlink: r.u32()?,
            uid: r.u32()?,
            gid: r.u32()?,
            size: r.u64()?,
            used: r.u64()?,
            rdev: (r.u32()?, r.u32()?),
            fsid: r.u64()?,
            fileid: r.u64()?,
            atime: Time::decode(r)?,
            mtime: Time::decode(r)?,
            ctime: Time::decode(r)?,
        })
    }
}

/// `post_op_attr` (§2.6): the attributes, if they could be had.
pub fn put_post_op_attr(w: &mut XdrWriter<'_>, a: Option<&Fattr>) -> Result<(), EncodeError> {
    match a {
        Some(a) => {
            w.put_bool(true)?;
            a.encode(w)
        }
        None => w.put_bool(false),
    }
}

/// `wcc_attr` (§2.6): what a client needs to tell whether its cache is still good.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WccAttr {
    /// Bytes.
    pub size: u64,
    /// Last change of the data.
    pub mtime: Time,
    /// Last change of the attributes.
    pub ctime: Time,
}

impl From<&Fattr> for WccAttr {
    fn from(a: &Fattr) -> WccAttr {
        WccAttr {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

/// `wcc_data` (§2.6): the attributes before (`pre_op_attr`) and after (`post_op_attr`) an
/// operation that changed the object.
pub fn put_wcc(
    w: &mut XdrWriter<'_>,
    before: Option<&WccAttr>,
    after: Option<&Fattr>,
) -> Result<(), EncodeError> {
    match before {
        Some(b) => {
            w.put_bool(true)?;
            w.put_u64(b.size)?;
            b.mtime.encode(w)?;
            b.ctime.encode(w)?;
        }
        None => w.put_bool(false)?,
    }
    put_post_op_attr(w, after)
}

/// `post_op_fh3` (§3.3.8): a handle, if there is one.
pub fn put_post_op_fh(w: &mut XdrWriter<'_>, fh: Option<&[u8]>) -> Result<(), EncodeError> {
    match fh {
        Some(fh) => {
            w.put_bool(true)?;
            w.put_opaque_var(fh, FHSIZE)
        }
        None => w.put_bool(false),
    }
}

/// `nfs_fh3` (§2.5): the handle's bytes, at most [`FHSIZE`].
pub fn fh<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], DecodeError> {
    r.opaque_var(FHSIZE)
}

/// The longest name decoded: longer ones are not garbage but NFS3ERR_NAMETOOLONG, which
/// the procedure answers once it checks the name (`ops::export::name`).
pub const NAME_DECODE_MAX: u32 = 4096;

/// `diropargs3` (§2.6): a directory's handle and a name in it.
pub fn diropargs<'a>(r: &mut XdrReader<'a>) -> Result<(&'a [u8], &'a [u8]), DecodeError> {
    Ok((fh(r)?, r.string(NAME_DECODE_MAX)?))
}

/// How a `sattr3` sets a time (`time_how`, §2.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetTime {
    /// DONT_CHANGE.
    #[default]
    Keep,
    /// SET_TO_SERVER_TIME.
    Now,
    /// SET_TO_CLIENT_TIME.
    To(Time),
}

/// `sattr3` (§2.6): the attributes a client asks to set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sattr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// New access time.
    pub atime: SetTime,
    /// New modification time.
    pub mtime: SetTime,
}

impl Sattr {
    /// Decodes a `sattr3`.
    pub fn decode(r: &mut XdrReader<'_>) -> Result<Sattr, DecodeError> {
        let opt32 = |r: &mut XdrReader<'_>| -> Result<Option<u32>, DecodeError> {
            Ok(if r.bool()? { Some(r.u32()?) } else { None })
        };
        let mode = opt32(r)?;
        let uid = opt32(r)?;
        let gid = opt32(r)?;
        let size = if r.bool()? { Some(r.u64()?) } else { None };
        let time = |r: &mut XdrReader<'_>| -> Result<SetTime, DecodeError> {
            match r.u32()? {
                0 => Ok(SetTime::Keep),
                1 => Ok(SetTime::Now),
                2 => Ok(SetTime::To(Time::decode(r)?)),
                v => Err(DecodeError::InvalidDiscriminant {
                    offset: r.position() - 4,
                    value: v,
                }),
            }
        };
        Ok(Sattr {
            mode,
            uid,
            gid,
            size,
            atime: time(r)?,
            mtime: time(r)?,
        })
    }

    /// Decodes the `sattrguard3` that follows a SETATTR's `sattr3` (§3.3.2): the ctime the
    /// client believes the object has, if it asks for the check.
    pub fn guard(r: &mut XdrReader<'_>) -> Result<Option<Time>, DecodeError> {
        Ok(if r.bool()? {
            Some(Time::decode(r)?)
        } else {
            None
        })
    }
}

/// Reads an 8-byte verifier.
pub fn verf(r: &mut XdrReader<'_>) -> Result<[u8; VERF_SIZE], DecodeError> {
    let b = r.opaque_fixed(VERF_SIZE)?;
    let mut v = [0u8; VERF_SIZE];
    v.copy_from_slice(b);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_encode_to_their_documented_sizes() {
        let mut buf = [0u8; 256];
        let mut w = XdrWriter::new(&mut buf);
        let a = Fattr {
            ftype: 1,
            size: 7,
            fileid: 42,
            ..Fattr::default()
        };
        put_post_op_attr(&mut w, Some(&a)).unwrap();
        assert_eq!(w.position(), POST_OP_ATTR_LEN);
        let mut r = XdrReader::new(&buf[4..]);
        assert_eq!(Fattr::decode(&mut r).unwrap(), a);
        let mut w = XdrWriter::new(&mut buf);
        put_wcc(&mut w, Some(&WccAttr::from(&a)), Some(&a)).unwrap();
        assert_eq!(w.position(), WCC_LEN);
    }

    #[test]
    fn sattr_decodes_and_rejects_a_bad_time_how() {
        let words: Vec<u8> = [1u32, 0o644, 0, 0, 1, 0, 9, 2, 5, 6, 1]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        let s = Sattr::decode(&mut XdrReader::new(&words)).unwrap();
        assert_eq!(s.mode, Some(0o644));
        assert_eq!((s.uid, s.gid, s.size), (None, None, Some(9)));
        assert_eq!(
            s.atime,
            SetTime::To(Time {
                seconds: 5,
                nseconds: 6
            })
        );
        assert_eq!(s.mtime, SetTime::Now);
        let bad: Vec<u8> = [0u32, 0, 0, 0, 7]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert!(Sattr::decode(&mut XdrReader::new(&bad)).is_err());
        assert!(Sattr::decode(&mut XdrReader::new(&words[..10])).is_err());
    }
}
