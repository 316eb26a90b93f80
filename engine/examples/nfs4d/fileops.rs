//! NFSv4.1's file operations (RFC 8881 §18) over the exported directory, through the
//! export module nfs3d and nfs4d share ([`crate::ops`]: handles made from the kernel's
//! own under a MAC, objects reached beneath the export only, names checked), run as the
//! caller ([`crate::identity`]), so the kernel makes every permission decision.
//!
//! Each operation reads its arguments, acts on the COMPOUND's current (and saved)
//! filehandle, and writes `NFS4_OK` and its results; a failure is returned as its status
//! for the COMPOUND to write ([`Stop`]), or written with the body its result carries
//! (SETATTR's `attrsset`, LOCK's and LOCKT's `LOCK4denied`).
//!
//! Implemented: ACCESS, CLOSE, COMMIT, CREATE, DELEGRETURN, GETATTR, GETFH, LINK, LOCK,
//! LOCKT, LOCKU, LOOKUP, LOOKUPP, OPEN, OPEN_DOWNGRADE, PUTFH, PUTPUBFH, PUTROOTFH, READ,
//! READDIR, READLINK, REMOVE, RENAME, RESTOREFH, SAVEFH, SECINFO, SECINFO_NO_NAME,
//! SETATTR, WRITE, TEST_STATEID, FREE_STATEID. Left out, answered NFS4ERR_NOTSUPP:
//! DELEGPURGE, NVERIFY, VERIFY, OPENATTR, the pNFS operations, directory delegations,
//! WANT_DELEGATION, SET_SSV, and NFSv4.2's (RFC 7862; minor version 2 is not served).
//! No delegation is granted yet (OPEN_DELEGATE_NONE).

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rustix::fs::{AtFlags, FileType, Mode, Statx};

use crate::attrs::{self, Bitmap, Limits, Object};
use crate::fh::Fh;
use crate::identity::Caller;
use crate::ops::export::{self, dev_of, stat_at, Obj};
use crate::ops::io::By;
use crate::ops::{Export, Fail};
use crate::session::{op, status};
use crate::state::{Files, Stateid};
use crate::xdr::{FType, Sattr, Stat};

/// What the file operations share: the export, the open and lock state, the limits.
pub struct Fs {
    pub export: Arc<Export>,
    pub files: Mutex<Files>,
    pub limits: Limits,
    /// `--ro`: every change is NFS4ERR_ROFS.
    pub read_only: bool,
    /// Operations run, by number, and those that failed.
    pub ops: Vec<std::sync::atomic::AtomicU64>,
    pub failed: std::sync::atomic::AtomicU64,
    /// COMPOUNDs answered on the polling thread (`compound::runs_on_poller`).
    pub on_poller: std::sync::atomic::AtomicU64,
}

impl Fs {
    /// `fs` over `export`, no operation counted yet.
    pub fn new(export: Arc<Export>, files: Files, limits: Limits, read_only: bool) -> Fs {
        Fs {
            export,
            files: Mutex::new(files),
            limits,
            read_only,
            ops: (0..=op::LAST).map(|_| Default::default()).collect(),
            failed: Default::default(),
            on_poller: Default::default(),
        }
    }

    /// The operations run, as a JSON object by name, and how many failed.
    pub fn ops_json(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let by_name: Vec<String> = self
            .ops
            .iter()
            .enumerate()
            .filter(|(_, n)| n.load(Relaxed) > 0)
            .map(|(i, n)| format!("\"{}\":{}", op_name(i as u32), n.load(Relaxed)))
            .collect();
        format!(
            "{{{}}},\"failed_ops\":{}",
            by_name.join(","),
            self.failed.load(Relaxed)
        )
    }
}

/// An operation's name (RFC 8881 §18), for the counters.
pub fn op_name(n: u32) -> &'static str {
    const NAMES: [&str; 59] = [
        "",
        "",
        "",
        "ACCESS",
        "CLOSE",
        "COMMIT",
        "CREATE",
        "DELEGPURGE",
        "DELEGRETURN",
        "GETATTR",
        "GETFH",
        "LINK",
        "LOCK",
        "LOCKT",
        "LOCKU",
        "LOOKUP",
        "LOOKUPP",
        "NVERIFY",
        "OPEN",
        "OPENATTR",
        "OPEN_CONFIRM",
        "OPEN_DOWNGRADE",
        "PUTFH",
        "PUTPUBFH",
        "PUTROOTFH",
        "READ",
        "READDIR",
        "READLINK",
        "REMOVE",
        "RENAME",
        "RENEW",
        "RESTOREFH",
        "SAVEFH",
        "SECINFO",
        "SETATTR",
        "SETCLIENTID",
        "SETCLIENTID_CONFIRM",
        "VERIFY",
        "WRITE",
        "RELEASE_LOCKOWNER",
        "BACKCHANNEL_CTL",
        "BIND_CONN_TO_SESSION",
        "EXCHANGE_ID",
        "CREATE_SESSION",
        "DESTROY_SESSION",
        "FREE_STATEID",
        "GET_DIR_DELEGATION",
        "GETDEVICEINFO",
        "GETDEVICELIST",
        "LAYOUTCOMMIT",
        "LAYOUTGET",
        "LAYOUTRETURN",
        "SECINFO_NO_NAME",
        "SEQUENCE",
        "SET_SSV",
        "TEST_STATEID",
        "WANT_DELEGATION",
        "DESTROY_CLIENTID",
        "RECLAIM_COMPLETE",
    ];
    NAMES
        .get(n as usize)
        .copied()
        .filter(|s| !s.is_empty())
        .unwrap_or("OTHER")
}

/// Where a READ that ends the COMPOUND puts its data (RFC 8267 §4.2: READ's data is the
/// DDP-eligible item, sent through the client's Write chunk).
#[derive(Debug, Default)]
pub enum ReadData {
    /// No READ ended the COMPOUND.
    #[default]
    None,
    /// `n` bytes were read into the lent registered buffer.
    Lent(usize),
    /// The data, read into a buffer of our own (none was lent).
    Owned(Vec<u8>),
}

/// One COMPOUND's file context: who calls, its filehandles, its client.
pub struct Cx<'a> {
    pub fs: &'a Fs,
    pub caller: &'a Caller,
    pub clientid: u64,
    pub cur: Option<Fh>,
    pub saved: Option<Fh>,
    /// The registered buffer lent for a READ ending the COMPOUND.
    pub lent: Option<&'a mut [u8]>,
    /// Whether the operation running is the COMPOUND's last.
    pub last: bool,
    /// Whether the client answers callbacks (its back channel answered CB_SEQUENCE):
    /// only such a client is given delegations.
    pub callbacks: bool,
    /// Whether the server is in its grace period, and whether this client may reclaim.
    pub grace: bool,
    pub reclaim: bool,
    pub data: ReadData,
}

/// Why an operation stopped the COMPOUND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Its status, for the COMPOUND to write.
    Status(u32),
    /// Its status, with the body already written.
    Written(u32),
}

impl From<u32> for Stop {
    fn from(s: u32) -> Stop {
        Stop::Status(s)
    }
}

impl From<Stat> for Stop {
    fn from(s: Stat) -> Stop {
        Stop::Status(v4(s))
    }
}

impl From<Fail> for Stop {
    fn from(f: Fail) -> Stop {
        Stop::Status(match f {
            Fail::Garbage => status::BADXDR,
            Fail::Status(s) => v4(s),
            Fail::WouldBlock => status::DELAY,
        })
    }
}

impl From<rustix::io::Errno> for Stop {
    fn from(e: rustix::io::Errno) -> Stop {
        Stat::from_errno(e).into()
    }
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Stop {
        Fail::from(e).into()
    }
}

impl From<rpcrdma_proto::EncodeError> for Stop {
    fn from(_: rpcrdma_proto::EncodeError) -> Stop {
        Stop::Status(status::SERVERFAULT)
    }
}

impl From<rpcrdma_proto::DecodeError> for Stop {
    fn from(_: rpcrdma_proto::DecodeError) -> Stop {
        Stop::Status(status::BADXDR)
    }
}

/// NFSv3's status as NFSv4's: the same numbers (RFC 8881 §15.1 kept them), but for the
/// few NFSv4 has not.
fn v4(s: Stat) -> u32 {
    match s {
        Stat::NotSync | Stat::NoDev => status::INVAL,
        s => s as u32,
    }
}

type R = Result<(), Stop>;

/// Reads a `stateid4`.
pub(crate) fn stateid(r: &mut XdrReader<'_>) -> Result<Stateid, Stop> {
    let seqid = r.u32()?;
    let other: [u8; 12] = r.opaque_fixed(12)?.try_into().map_err(|_| status::BADXDR)?;
    Ok(Stateid { seqid, other })
}

/// A `component4` checked as a name in a directory (§14.2: NFS4ERR_BADNAME for `.` and
/// `..`, NFS4ERR_INVAL for an empty one).
fn component(raw: &[u8]) -> Result<CString, Stop> {
    match raw {
        b"." | b".." => Err(status::BADNAME.into()),
        _ => export::name(raw).map_err(Stop::from),
    }
}

fn child(dir: &Path, name: &CString) -> PathBuf {
    dir.join(OsStr::from_bytes(name.as_bytes()))
}

/// The open and lock state's key of the object `st`: its device and inode.
pub(crate) fn key(st: &Statx) -> (u64, u64) {
    (dev_of(st), st.stx_ino)
}

fn ftype(st: &Statx) -> FType {
    FType::of_mode(u32::from(st.stx_mode))
}

/// `change_info4` of a directory: its change before, and now.
fn put_cinfo(w: &mut XdrWriter<'_>, before: &Statx, dfd: &OwnedFd) -> R {
    let after = stat_at(dfd, c".").map_or(attrs::change(before), |st| attrs::change(&st));
    w.put_bool(false)?;
    w.put_u64(attrs::change(before))?;
    w.put_u64(after)?;
    Ok(())
}

impl Cx<'_> {
    fn cur(&self) -> Result<Fh, Stop> {
        self.cur.ok_or(Stop::Status(status::NOFILEHANDLE))
    }

    pub(crate) fn obj(&self) -> Result<Obj, Stop> {
        Ok(self.fs.export.resolve(self.cur()?.as_bytes())?)
    }

    fn dir(&self) -> Result<(Obj, OwnedFd), Stop> {
        Ok(self.fs.export.dir(self.cur()?.as_bytes())?)
    }

    /// The open, lock and delegation state, locked.
    pub(crate) fn files(&self) -> Result<std::sync::MutexGuard<'_, Files>, Stop> {
        self.fs
            .files
            .lock()
            .map_err(|_| Stop::Status(status::SERVERFAULT))
    }

    /// A change of the object `st` by this client: other clients' delegations of it
    /// are recalled first (NFS4ERR_DELAY until they are returned).
    pub(crate) fn breaks(&self, st: &Statx) -> R {
        Ok(self.files()?.breaks(self.clientid, key(st))?)
    }

    /// NFS4ERR_GRACE during the grace period (a new open or lock, a REMOVE or RENAME
    /// could take what a client is yet to reclaim, §8.4.2.1).
    pub(crate) fn not_in_grace(&self) -> R {
        if self.grace {
            Err(Stop::Status(status::GRACE))
        } else {
            Ok(())
        }
    }

    fn writable(&self) -> R {
        if self.fs.read_only {
            Err(Stop::Status(v4(Stat::Rofs)))
        } else {
            Ok(())
        }
    }

    /// Runs the file operation `opnum`; `None` for one that is not a file operation.
    pub fn run(&mut self, opnum: u32, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> Option<R> {
        Some(match opnum {
            op::ACCESS => self.access(r, w),
            op::CLOSE => self.close(r, w),
            op::COMMIT => self.commit(r, w),
            op::CREATE => self.create(r, w),
            op::DELEGRETURN => (|| {
                let sid = stateid(r)?;
                self.cur()?;
                self.files()?.delegreturn(&sid)?;
                ok(w)
            })(),
            op::GETATTR => self.getattr(r, w),
            op::GETFH => {
                let fh = self.cur();
                fh.and_then(|fh| {
                    w.put_u32(status::OK)?;
                    w.put_opaque_var(fh.as_bytes(), 128)?;
                    Ok(())
                })
            }
            op::LINK => self.link(r, w),
            op::LOCK => self.lock(r, w),
            op::LOCKT => self.lockt(r, w),
            op::LOCKU => self.locku(r, w),
            op::LOOKUP => self.lookup(r, w),
            op::LOOKUPP => self.lookupp(w),
            op::OPEN => self.open(r, w),
            op::OPEN_DOWNGRADE => self.open_downgrade(r, w),
            op::PUTFH => (|| {
                let raw = r.opaque_var(128)?;
                let fh = Fh::from_bytes(raw).ok_or(Stop::Status(status::BADHANDLE))?;
                self.cur = Some(fh);
                ok(w)
            })(),
            op::PUTROOTFH | op::PUTPUBFH => {
                self.cur = Some(self.fs.export.root_fh());
                ok(w)
            }
            op::READ => self.read(r, w),
            op::READDIR => self.readdir(r, w),
            op::READLINK => self.readlink(w),
            op::REMOVE => self.remove(r, w),
            op::RENAME => self.rename(r, w),
            op::RESTOREFH => match self.saved {
                Some(fh) => {
                    self.cur = Some(fh);
                    ok(w)
                }
                None => Err(Stop::Status(status::RESTOREFH)),
            },
            op::SAVEFH => self.cur().and_then(|fh| {
                self.saved = Some(fh);
                ok(w)
            }),
            op::SECINFO => self.secinfo(Some(r), w),
            op::SECINFO_NO_NAME => r
                .u32()
                .map_err(Stop::from)
                .and_then(|_| self.secinfo(None, w)),
            op::SETATTR => self.setattr(r, w),
            op::WRITE => self.write(r, w),
            op::TEST_STATEID => self.test_stateid(r, w),
            op::FREE_STATEID => (|| {
                let sid = stateid(r)?;
                self.fs
                    .files
                    .lock()
                    .map_err(|_| status::SERVERFAULT)?
                    .free(&sid)?;
                ok(w)
            })(),
            _ => return None,
        })
    }

    fn access(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let asked = r.u32()?;
        let o = self.obj()?;
        let mut may = crate::ops::attr::allowed(self.caller, &export::fattr(&o.st));
        if self.fs.read_only {
            may &= !(0x04 | 0x08 | 0x10);
        }
        w.put_u32(status::OK)?;
        w.put_u32(asked & 0x3f)?;
        w.put_u32(asked & may)?;
        Ok(())
    }

    fn getattr(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let (asked, _) = attrs::read_bitmap(r)?;
        let fh = self.cur()?;
        let o = self.obj()?;
        w.put_u32(status::OK)?;
        self.put_attrs(w, &asked, &o.st, fh.as_bytes(), Some(&o.parent))
    }

    fn put_attrs(
        &self,
        w: &mut XdrWriter<'_>,
        asked: &Bitmap,
        st: &Statx,
        fh: &[u8],
        fd: Option<&Arc<OwnedFd>>,
    ) -> R {
        let space = if attrs::needs_space(asked) {
            fd.and_then(|f| attrs::space_of(&**f))
        } else {
            None
        };
        let o = Object { st, fh, space };
        attrs::put_fattr(w, asked, &o, &self.fs.limits)?;
        Ok(())
    }

    fn lookup(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let raw = r.string(4096)?;
        let (d, dfd) = self.dir()?;
        let name = component(raw)?;
        self.enter(&d, &dfd, &name)?;
        ok(w)
    }

    /// Makes the object `name` in the directory `d` (open as `dfd`) the current one.
    fn enter(&mut self, d: &Obj, dfd: &OwnedFd, name: &CString) -> R {
        let st = stat_at(dfd, name)?;
        let fh = self
            .fs
            .export
            .handle_for(dfd, name, &child(&d.rel, name), &st)?;
        self.cur = Some(fh);
        Ok(())
    }

    fn lookupp(&mut self, w: &mut XdrWriter<'_>) -> R {
        let (d, _) = self.dir()?;
        let Some(up) = d.rel.parent().map(Path::to_path_buf) else {
            return Err(Stop::Status(status::NOENT));
        };
        let e = &self.fs.export;
        let fd = e.open_dir(&up)?;
        let st = stat_at(&fd, c".")?;
        self.cur = Some(e.handle_for(&fd, c"", &up, &st)?);
        ok(w)
    }

    fn secinfo(&mut self, r: Option<&mut XdrReader<'_>>, w: &mut XdrWriter<'_>) -> R {
        if let Some(r) = r {
            let raw = r.string(4096)?;
            let (_, dfd) = self.dir()?;
            stat_at(&dfd, &component(raw)?)?;
        } else {
            self.cur()?;
        }
        // §2.6.3.1.1.8: SECINFO and SECINFO_NO_NAME consume the current filehandle.
        self.cur = None;
        w.put_u32(status::OK)?;
        w.put_u32(1)?;
        w.put_u32(1)?; // AUTH_SYS
        Ok(())
    }

    fn readlink(&mut self, w: &mut XdrWriter<'_>) -> R {
        let o = self.obj()?;
        if o.ftype() != FType::Lnk {
            return Err(Stop::Status(status::INVAL));
        }
        let target = rustix::fs::readlinkat(&*o.parent, o.name.as_c_str(), Vec::new())?;
        w.put_u32(status::OK)?;
        w.put_opaque_var(target.as_bytes(), 4096)?;
        Ok(())
    }

    fn create(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let kind = r.u32()?;
        let mut link = None;
        let mut dev = (0, 0);
        match kind {
            5 => link = Some(r.opaque_var(4096)?),
            3 | 4 => dev = (r.u32()?, r.u32()?),
            2 | 6 | 7 => {}
            1 => return Err(Stop::Status(status::BADTYPE)),
            _ => return Err(Stop::Status(status::BADXDR)),
        }
        let raw = r.string(4096)?;
        let (s, set, times) = attrs::read_settable(r)?;
        let (d, dfd) = self.dir()?;
        self.writable()?;
        let name = component(raw)?;
        let mode = Mode::from_raw_mode(s.mode.unwrap_or(0o755) & 0o7777);
        match kind {
            2 => rustix::fs::mkdirat(&dfd, name.as_c_str(), mode)?,
            5 => {
                let target = CString::new(link.unwrap_or_default())
                    .map_err(|_| Stop::Status(status::INVAL))?;
                rustix::fs::symlinkat(target.as_c_str(), &dfd, name.as_c_str())?;
            }
            _ => {
                let ft = match kind {
                    3 => FileType::BlockDevice,
                    4 => FileType::CharacterDevice,
                    6 => FileType::Socket,
                    _ => FileType::Fifo,
                };
                let rdev = rustix::fs::makedev(dev.0, dev.1);
                rustix::fs::mknodat(&dfd, name.as_c_str(), ft, mode, rdev)?;
            }
        }
        let st = stat_at(&dfd, &name)?;
        let rest = Sattr { mode: None, ..s };
        if kind != 5 {
            crate::ops::attr::apply(&dfd, &name, ftype(&st), &rest, true)?;
            attrs::apply_times(&dfd, &name, &times)?;
        }
        self.enter(&d, &dfd, &name)?;
        w.put_u32(status::OK)?;
        put_cinfo(w, &d.st, &dfd)?;
        attrs::put_bitmap(w, &set)?;
        Ok(())
    }

    fn remove(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let raw = r.string(4096)?;
        let (d, dfd) = self.dir()?;
        self.writable()?;
        self.not_in_grace()?;
        let name = component(raw)?;
        let st = stat_at(&dfd, &name)?;
        self.breaks(&st)?;
        let flags = if ftype(&st) == FType::Dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&dfd, name.as_c_str(), flags)?;
        if st.stx_nlink <= 1 || flags == AtFlags::REMOVEDIR {
            self.fs.export.forget(&st);
        }
        w.put_u32(status::OK)?;
        put_cinfo(w, &d.st, &dfd)
    }

    fn rename(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let old = r.string(4096)?;
        let new = r.string(4096)?;
        let src = self.saved.ok_or(Stop::Status(status::NOFILEHANDLE))?;
        let e = &self.fs.export;
        let (sd, sfd) = e.dir(src.as_bytes())?;
        let (td, tfd) = self.dir()?;
        self.writable()?;
        self.not_in_grace()?;
        let (from, to) = (component(old)?, component(new)?);
        self.breaks(&stat_at(&sfd, &from)?)?;
        if let Ok(st) = stat_at(&tfd, &to) {
            self.breaks(&st)?;
        }
        rustix::fs::renameat(&sfd, from.as_c_str(), &tfd, to.as_c_str())?;
        if let Ok(st) = stat_at(&tfd, &to) {
            if ftype(&st) == FType::Dir {
                e.forget_dirs();
            }
            let _ = e.handle_for(&tfd, &to, &child(&td.rel, &to), &st);
        }
        w.put_u32(status::OK)?;
        put_cinfo(w, &sd.st, &sfd)?;
        put_cinfo(w, &td.st, &tfd)
    }

    fn link(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let raw = r.string(4096)?;
        let src = self.saved.ok_or(Stop::Status(status::NOFILEHANDLE))?;
        let o = self.fs.export.resolve(src.as_bytes())?;
        let (d, dfd) = self.dir()?;
        self.writable()?;
        if o.ftype() == FType::Dir {
            return Err(Stop::Status(status::ISDIR));
        }
        let name = component(raw)?;
        rustix::fs::linkat(
            &*o.parent,
            o.name.as_c_str(),
            &dfd,
            name.as_c_str(),
            AtFlags::empty(),
        )?;
        w.put_u32(status::OK)?;
        put_cinfo(w, &d.st, &dfd)
    }

    fn setattr(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let sid = stateid(r)?;
        let got = attrs::read_settable(r).and_then(|(s, set, times)| {
            let o = self.obj().map_err(|e| match e {
                Stop::Status(s) | Stop::Written(s) => s,
            })?;
            Ok((s, set, times, o))
        });
        let done = got.and_then(|(s, set, times, o)| {
            if self.fs.read_only {
                return Err(v4(Stat::Rofs));
            }
            {
                let mut files = self.fs.files.lock().map_err(|_| status::SERVERFAULT)?;
                if s.size.is_some() && !sid.is_special() {
                    files.io(&sid, key(&o.st), true)?;
                }
                files.breaks(self.clientid, key(&o.st))?;
            }
            let owner = self.caller.uid == o.st.stx_uid;
            crate::ops::attr::apply(&o.parent, &o.name, o.ftype(), &s, owner).map_err(|f| {
                match Stop::from(f) {
                    Stop::Status(s) | Stop::Written(s) => s,
                }
            })?;
            attrs::apply_times(&o.parent, &o.name, &times).map_err(|e| v4(Stat::from_errno(e)))?;
            Ok(set)
        });
        // SETATTR4res carries `attrsset` whatever the status (§18.30.2).
        match done {
            Ok(set) => {
                w.put_u32(status::OK)?;
                attrs::put_bitmap(w, &set)?;
                Ok(())
            }
            Err(s) => {
                w.put_u32(s)?;
                w.put_u32(0)?;
                Err(Stop::Written(s))
            }
        }
    }

    fn test_stateid(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let n = r.array_len(16, 1024)?;
        let mut sids = Vec::with_capacity(n as usize);
        for _ in 0..n {
            sids.push(stateid(r)?);
        }
        let files = self.fs.files.lock().map_err(|_| status::SERVERFAULT)?;
        w.put_u32(status::OK)?;
        w.put_u32(n)?;
        for s in &sids {
            w.put_u32(files.test(s))?;
        }
        Ok(())
    }
}

/// NFS4_OK alone.
fn ok(w: &mut XdrWriter<'_>) -> R {
    w.put_u32(status::OK)?;
    Ok(())
}

/// `stable_how4` (§18.32): UNSTABLE4, DATA_SYNC4, FILE_SYNC4.
const FILE_SYNC: u32 = 2;

impl Cx<'_> {
    /// The regular file the current filehandle names, opened as the caller.
    pub(crate) fn file(&self, o: &Obj, write: bool) -> Result<File, Stop> {
        match o.ftype() {
            FType::Reg => {}
            FType::Dir => return Err(Stop::Status(status::ISDIR)),
            FType::Lnk => return Err(Stop::Status(status::SYMLINK)),
            _ => return Err(Stop::Status(status::WRONG_TYPE)),
        }
        Ok(crate::ops::io::open(o, By::Caller(self.caller), write)?)
    }

    fn read(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let sid = stateid(r)?;
        let offset = r.u64()?;
        let count = r.u32()?.min(self.fs.limits.max_io as u32) as usize;
        let o = self.obj()?;
        self.fs
            .files
            .lock()
            .map_err(|_| status::SERVERFAULT)?
            .io(&sid, key(&o.st), false)?;
        let f = self.file(&o, false)?;
        let fill = |buf: &mut [u8]| -> Result<usize, Stop> {
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(n)
        };
        let size = rustix::fs::fstat(&f).map_or(o.st.stx_size, |s| s.st_size as u64);
        if self.last {
            // The DDP-eligible data ends the reply (RFC 8267 §4.2, RFC 8166 §4.3.2).
            let n = match self.lent.take() {
                Some(buf) => {
                    let want = count.min(buf.len());
                    let n = fill(&mut buf[..want])?;
                    self.data = ReadData::Lent(n);
                    n
                }
                None => {
                    let mut v = vec![0u8; count];
                    let n = fill(&mut v)?;
                    v.truncate(n);
                    self.data = ReadData::Owned(v);
                    n
                }
            };
            w.put_u32(status::OK)?;
            w.put_bool(offset.saturating_add(n as u64) >= size)?;
            return Ok(());
        }
        // Operations follow: the data inline, as much as the reply holds.
        let room = w.remaining().saturating_sub(64) & !3;
        let mut v = vec![0u8; count.min(room)];
        let n = fill(&mut v)?;
        w.put_u32(status::OK)?;
        w.put_bool(offset.saturating_add(n as u64) >= size)?;
        w.put_opaque_var(&v[..n], u32::MAX)?;
        Ok(())
    }

    fn write(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let sid = stateid(r)?;
        let offset = r.u64()?;
        let stable = r.u32()?;
        let data = r.opaque_var(u32::MAX)?;
        if stable > FILE_SYNC {
            return Err(Stop::Status(status::BADXDR));
        }
        let o = self.obj()?;
        self.writable()?;
        {
            let mut files = self.files()?;
            files.io(&sid, key(&o.st), true)?;
            files.breaks(self.clientid, key(&o.st))?;
        }
        let f = self.file(&o, true)?;
        f.write_all_at(data, offset)?;
        let committed = match stable {
            0 => 0,
            1 => {
                f.sync_data()?;
                1
            }
            _ => {
                f.sync_all()?;
                FILE_SYNC
            }
        };
        w.put_u32(status::OK)?;
        w.put_u32(data.len() as u32)?;
        w.put_u32(committed)?;
        w.put_opaque_fixed(&self.fs.export.write_verf)?;
        Ok(())
    }

    fn commit(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        r.u64()?;
        r.u32()?;
        let o = self.obj()?;
        match o.ftype() {
            FType::Reg => {}
            FType::Dir => return Err(Stop::Status(status::ISDIR)),
            _ => return Err(Stop::Status(status::INVAL)),
        }
        let f = crate::ops::io::open(&o, By::Server, false)?;
        f.sync_all()?;
        w.put_u32(status::OK)?;
        w.put_opaque_fixed(&self.fs.export.write_verf)?;
        Ok(())
    }

    fn readdir(&mut self, r: &mut XdrReader<'_>, w: &mut XdrWriter<'_>) -> R {
        let cookie = r.u64()?;
        let verf: [u8; 8] = r.opaque_fixed(8)?.try_into().map_err(|_| status::BADXDR)?;
        let _dircount = r.u32()?;
        let maxcount = r.u32()? as usize;
        let (asked, _) = attrs::read_bitmap(r)?;
        let e = &self.fs.export;
        let (d, dfd) = self.dir()?;
        // Cookies 1 and 2 are reserved (§18.23.4); a cookie here is a keyed hash of the
        // entry's name, valid across restarts, so the verifier never changes.
        if cookie == 1 || cookie == 2 || (cookie != 0 && verf != e.cookie_verf) {
            return Err(Stop::Status(status::BAD_COOKIE));
        }
        let (snap, fresh) = crate::ops::list::snapshot(e, &d.st, &dfd, cookie)?;
        let from = snap.entries.partition_point(|x| x.0 <= cookie.max(2));
        let entries = &snap.entries[from..];
        // Status, verifier, and the list's end (no more entries, eof) around the entries.
        let limit = maxcount.min(w.remaining()).saturating_sub(4 + 8 + 8);
        let mut body = Vec::new();
        let mut sent = 0;
        let mut scratch = vec![0u8; 2048];
        let rdattr_error = asked[0] & (1 << attrs::a::RDATTR_ERROR) != 0;
        for &(c, _, at) in entries {
            let name = snap.name(at);
            let mut s = XdrWriter::new(&mut scratch);
            s.put_bool(true)?;
            s.put_u64(c)?;
            s.put_opaque_var(name.to_bytes(), 255)?;
            match stat_at(&dfd, name) {
                Ok(st) => {
                    let fh = e
                        .handle_for(&dfd, name, &child(&d.rel, &name.to_owned()), &st)
                        .ok();
                    let fh = fh.as_ref().map_or(&[][..], |f| f.as_bytes());
                    let o = Object {
                        st: &st,
                        fh,
                        space: None,
                    };
                    attrs::put_fattr(&mut s, &asked, &o, &self.fs.limits)?;
                }
                // Gone meanwhile: left out.
                Err(_) if !rdattr_error => continue,
                Err(err) => {
                    let mut m = [0u32; 3];
                    m[0] = 1 << attrs::a::RDATTR_ERROR;
                    attrs::put_bitmap(&mut s, &m)?;
                    s.put_u32(4)?;
                    s.put_u32(v4(Stat::from_errno(err)))?;
                }
            }
            let n = s.position();
            if body.len() + n > limit {
                break;
            }
            body.extend_from_slice(&scratch[..n]);
            sent += 1;
        }
        if sent == 0 && !entries.is_empty() {
            return Err(Stop::Status(status::TOOSMALL));
        }
        w.put_u32(status::OK)?;
        w.put_opaque_fixed(&e.cookie_verf)?;
        w.put_raw(&body)?;
        w.put_bool(false)?;
        let eof = sent == entries.len();
        w.put_bool(eof)?;
        crate::ops::list::keep(e, &d.st, snap, fresh, eof);
        Ok(())
    }
}
