//! The NFS version 3 procedures (RFC 1813 §3.3) over the local filesystem: decoded from the
//! Call's argument bytes, run against the [`Export`], encoded into the results buffer the
//! engine sends (inline or through the Reply chunk) and, for READ, with the file's data read
//! straight into the registered buffer the engine RDMA-Writes into the client's Write chunk
//! (RFC 8267 §4.2: READ's data and WRITE's data are the DDP-eligible items).
//!
//! | module | procedures |
//! |---|---|
//! | [`attr`] | GETATTR, SETATTR, ACCESS, FSSTAT, FSINFO, PATHCONF |
//! | [`dir`] | LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK |
//! | [`list`] | READDIR, READDIRPLUS |
//! | [`io`] | READ, WRITE, COMMIT, READLINK |
//!
//! [`export`] reaches objects beneath the export; [`handles`] makes handles and finds the
//! object a handle names; [`listings`] keeps the snapshots of directories listed in pages.
//!
//! Every procedure runs as its caller ([`crate::identity`]: the Call's AUTH_SYS identity
//! as the export's options map it, [`crate::policy`]), so the kernel enforces what each
//! caller may do; a read-only export refuses every change with NFS3ERR_ROFS before it is
//! tried. Every procedure's failure is answered with its status and empty optional
//! attributes (`post_op_attr` and `wcc_data` are optional, §2.6), or the fuller body the
//! procedure writes itself where it has it.

pub mod attr;
pub mod dir;
pub mod export;
pub mod handles;
pub mod io;
pub mod list;
pub mod listings;
#[cfg(test)]
mod tests;

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rpcrdma_proto::{DecodeError, EncodeError};
use rustix::fs::CWD;

pub use export::{Export, Reach};

use crate::identity;
pub use crate::identity::Caller;

use crate::xdr::{Stat, FATTR_LEN, POST_OP_ATTR_LEN, POST_OP_FH_LEN, WCC_LEN};

/// Limits of the server, announced in FSINFO (§3.3.19), and whether it takes changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The largest READ and WRITE (`rtmax`, `wtmax`, and their preferred sizes).
    pub max_io: u32,
    /// The preferred READDIR size (`dtpref`) and the largest directory reply encoded.
    pub max_dir: u32,
    /// A read-only export (`ro`): every procedure that would change it is NFS3ERR_ROFS.
    pub read_only: bool,
}

/// How a procedure ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Bytes of results written (a multiple of 4).
    pub results_len: usize,
    /// READ that succeeded: bytes of data put in the bulk buffer.
    pub bulk_len: Option<usize>,
}

/// The arguments did not decode: GARBAGE_ARGS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Garbage;

/// Why a procedure stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    /// The arguments did not decode.
    Garbage,
    /// A status to answer with an empty failure body.
    Status(Stat),
    /// Going on would wait for the file system, which a polling worker must not do
    /// ([`export::Reach::Cached`]): the procedure goes to an I/O thread instead.
    WouldBlock,
}

impl From<DecodeError> for Fail {
    fn from(_: DecodeError) -> Fail {
        Fail::Garbage
    }
}

impl From<EncodeError> for Fail {
    fn from(_: EncodeError) -> Fail {
        Fail::Status(Stat::ServerFault)
    }
}

impl From<Stat> for Fail {
    fn from(s: Stat) -> Fail {
        Fail::Status(s)
    }
}

impl From<rustix::io::Errno> for Fail {
    fn from(e: rustix::io::Errno) -> Fail {
        Fail::Status(Stat::from_errno(e))
    }
}

impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Fail {
        Fail::Status(e.raw_os_error().map_or(Stat::Io, |n| {
            Stat::from_errno(rustix::io::Errno::from_raw_os_error(n))
        }))
    }
}

/// Runs the file system call `f` as the server ([`identity::as_server`]): what only the
/// server may do on a caller's behalf (the owner's access its mode does not give, COMMIT's
/// open). A thread that cannot become the server again answers NFS3ERR_SERVERFAULT.
pub fn as_server<T>(f: impl FnOnce() -> rustix::io::Result<T>) -> Result<T, Fail> {
    Ok(identity::as_server(f).map_err(|_| Fail::Status(Stat::ServerFault))??)
}

/// The name `/proc/self/fd/N` of the descriptor `fd`: the object it is open on, for the
/// calls that take no descriptor (or refuse an `O_PATH` one).
fn fd_path(fd: &impl std::os::fd::AsRawFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// The path the kernel holds for the object `fd` is open on (`/proc/self/fd`). Here, below
/// both [`export`] (the export's own path) and [`handles`] (paths of the objects beneath it),
/// so that neither imports the other.
fn kernel_path(fd: &OwnedFd) -> Option<PathBuf> {
    let target = rustix::fs::readlinkat(CWD, fd_path(fd).as_str(), Vec::new()).ok()?;
    Some(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
}

/// What a procedure returns: `Ok` after writing its whole results.
pub type Res = Result<(), Fail>;

/// NFSPROC3 numbers (§3.3).
#[allow(missing_docs)]
pub mod proc {
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const ACCESS: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const SYMLINK: u32 = 10;
    pub const MKNOD: u32 = 11;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const LINK: u32 = 15;
    pub const READDIR: u32 = 16;
    pub const READDIRPLUS: u32 = 17;
    pub const FSSTAT: u32 = 18;
    pub const FSINFO: u32 = 19;
    pub const PATHCONF: u32 = 20;
    pub const COMMIT: u32 = 21;
}

/// Procedures that change the export: refused with NFS3ERR_ROFS on a read-only one.
pub fn changes(proc_num: u32) -> bool {
    matches!(
        proc_num,
        proc::SETATTR | proc::WRITE | proc::CREATE..=proc::LINK
    )
}

/// Procedures that change state, answered from the duplicate request cache when
/// retransmitted (SETATTR, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK: what
/// a second execution would answer differently).
pub fn is_non_idempotent(proc_num: u32) -> bool {
    matches!(proc_num, proc::SETATTR | proc::CREATE..=proc::LINK)
}

/// Words of the empty failure body of each procedure: its optional attributes absent
/// (`post_op_attr`: 1 word; `wcc_data`: 2).
fn fail_words(proc_num: u32) -> usize {
    match proc_num {
        proc::GETATTR => 0,
        proc::SETATTR | proc::WRITE | proc::CREATE..=proc::RMDIR | proc::COMMIT => 2,
        proc::RENAME => 4,
        proc::LINK => 3,
        _ => 1,
    }
}

/// Largest inline results of a procedure (not counting READ's data).
pub fn max_results(proc_num: u32, config: &Config) -> u32 {
    let n = match proc_num {
        proc::GETATTR => 4 + FATTR_LEN,
        proc::SETATTR | proc::REMOVE | proc::RMDIR => 4 + WCC_LEN,
        proc::LOOKUP => 4 + 4 + 64 + 2 * POST_OP_ATTR_LEN,
        proc::ACCESS => 4 + POST_OP_ATTR_LEN + 4,
        proc::READLINK => 4 + POST_OP_ATTR_LEN + 4 + crate::xdr::PATH_MAX as usize,
        proc::READ => 4 + POST_OP_ATTR_LEN + 8,
        proc::WRITE => 4 + WCC_LEN + 16,
        proc::CREATE..=proc::MKNOD => 4 + POST_OP_FH_LEN + POST_OP_ATTR_LEN + WCC_LEN,
        proc::RENAME => 4 + 2 * WCC_LEN,
        proc::LINK => 4 + POST_OP_ATTR_LEN + WCC_LEN,
        proc::READDIR | proc::READDIRPLUS => config.max_dir.max(4096) as usize,
        proc::FSSTAT => 4 + POST_OP_ATTR_LEN + 52,
        proc::FSINFO => 4 + POST_OP_ATTR_LEN + 48,
        proc::PATHCONF => 4 + POST_OP_ATTR_LEN + 24,
        proc::COMMIT => 4 + WCC_LEN + 8,
        _ => 4,
    };
    n as u32
}

/// READ's count, at most the server's largest READ: the bytes to reserve for its data.
pub fn read_count(args: &[u8], config: &Config) -> Option<u32> {
    let mut r = XdrReader::new(args);
    crate::xdr::fh(&mut r).ok()?;
    r.u64().ok()?;
    Some(r.u32().ok()?.min(config.max_io))
}

/// Runs procedure `proc_num` with the XDR `args`, writing its results into `results` (for
/// READ, everything before the data, whose bytes go to `bulk`; the engine encodes the
/// data's opaque around them).
pub fn run(
    export: &Export,
    caller: &Caller,
    proc_num: u32,
    args: &[u8],
    results: &mut [u8],
    bulk: Option<&mut [u8]>,
) -> Result<Done, Garbage> {
    let mut r = XdrReader::new(args);
    let mut bulk_len = None;
    let acting = identity::act_as(caller);
    let outcome = {
        let mut w = XdrWriter::new(results);
        let res = match proc_num {
            _ if acting.is_err() => {
                // Never expected (a thread that cannot take the identity refused the job
                // before it came here): said, and answered as the server's fault.
                if let Err(e) = &acting {
                    eprintln!(
                        "nfs3d: procedure {proc_num} not run: acting as {}:{} failed: {e}",
                        caller.uid, caller.gid
                    );
                }
                Err(Fail::Status(Stat::ServerFault))
            }
            p if p != 0 && p <= proc::COMMIT && export.config.read_only && changes(p) => {
                Err(Fail::Status(Stat::Rofs))
            }
            0 => Ok(()),
            proc::GETATTR => attr::getattr(export, Reach::Any, &mut r, &mut w),
            proc::SETATTR => attr::setattr(export, caller, &mut r, &mut w),
            proc::ACCESS => attr::access(export, Reach::Any, caller, &mut r, &mut w),
            proc::FSSTAT => attr::fsstat(export, &mut r, &mut w),
            proc::FSINFO => attr::fsinfo(export, &mut r, &mut w),
            proc::PATHCONF => attr::pathconf(export, &mut r, &mut w),
            proc::LOOKUP => dir::lookup(export, Reach::Any, &mut r, &mut w),
            proc::CREATE => dir::create(export, &mut r, &mut w),
            proc::MKDIR => dir::mkdir(export, &mut r, &mut w),
            proc::SYMLINK => dir::symlink(export, &mut r, &mut w),
            proc::MKNOD => dir::mknod(export, &mut r, &mut w),
            proc::REMOVE => dir::remove(export, &mut r, &mut w, false),
            proc::RMDIR => dir::remove(export, &mut r, &mut w, true),
            proc::RENAME => dir::rename(export, &mut r, &mut w),
            proc::LINK => dir::link(export, &mut r, &mut w),
            proc::READDIR => list::readdir(export, &mut r, &mut w, false),
            proc::READDIRPLUS => list::readdir(export, &mut r, &mut w, true),
            proc::READ => io::read(export, caller, &mut r, &mut w, bulk).map(|n| {
                bulk_len = n;
            }),
            proc::WRITE => io::write(export, caller, &mut r, &mut w),
            proc::COMMIT => io::commit(export, &mut r, &mut w),
            proc::READLINK => io::readlink(export, &mut r, &mut w),
            _ => Err(Fail::Garbage),
        };
        res.map(|()| w.position())
    };
    finish(proc_num, results, outcome, bulk_len)
}

/// The procedure's results from how it ended: its own bytes, or its status with the empty
/// failure body.
fn finish(
    proc_num: u32,
    results: &mut [u8],
    outcome: Result<usize, Fail>,
    bulk_len: Option<usize>,
) -> Result<Done, Garbage> {
    let s = match outcome {
        Ok(len) => {
            return Ok(Done {
                results_len: len,
                bulk_len,
            })
        }
        Err(Fail::Garbage) => return Err(Garbage),
        Err(Fail::Status(s)) => s,
        // Only a worker's cached reach stops so; `run` reaches everything.
        Err(Fail::WouldBlock) => Stat::ServerFault,
    };
    if s == Stat::ServerFault {
        eprintln!("nfs3d: procedure {proc_num} answered NFS3ERR_SERVERFAULT");
    }
    let mut w = XdrWriter::new(results);
    let mut put = || -> Result<(), EncodeError> {
        w.put_u32(s as u32)?;
        for _ in 0..fail_words(proc_num) {
            w.put_u32(0)?;
        }
        Ok(())
    };
    match put() {
        Ok(()) => Ok(Done {
            results_len: w.position(),
            bulk_len: None,
        }),
        Err(_) => Err(Garbage),
    }
}

/// Whether a procedure may run on the polling worker itself ([`run_cached`]): GETATTR,
/// ACCESS and LOOKUP, which only read what the kernel may hold in memory.
pub fn runs_cached(proc_num: u32) -> bool {
    matches!(proc_num, proc::GETATTR | proc::ACCESS | proc::LOOKUP)
}

/// Runs GETATTR, ACCESS or LOOKUP on the polling worker, through the kernel's caches only
/// ([`Reach::Cached`]): `None` when that is not enough (an object not in the caches, a
/// handle the path cache does not know, a lock held by an I/O thread, a LOOKUP of a
/// caller this thread cannot act as, any other procedure), and the Call goes to an I/O
/// thread as every other.
pub fn run_cached(
    export: &Export,
    caller: &Caller,
    proc_num: u32,
    args: &[u8],
    results: &mut [u8],
) -> Option<Result<Done, Garbage>> {
    if !runs_cached(proc_num) {
        return None;
    }
    let mut r = XdrReader::new(args);
    let mut w = XdrWriter::new(results);
    // GETATTR and ACCESS ask for no permission (ACCESS answers from the mode bits for the
    // caller); LOOKUP needs search permission on the directory, so it runs here only as
    // the caller: a worker, which keeps the server's credentials, leaves other callers'
    // to an I/O thread (`identity`).
    if proc_num == proc::LOOKUP {
        identity::act_as(caller).ok()?;
    }
    let res = match proc_num {
        proc::GETATTR => attr::getattr(export, Reach::Cached, &mut r, &mut w),
        proc::ACCESS => attr::access(export, Reach::Cached, caller, &mut r, &mut w),
        proc::LOOKUP => dir::lookup(export, Reach::Cached, &mut r, &mut w),
        _ => return None,
    };
    let outcome = match res {
        Err(Fail::WouldBlock) => return None,
        r => r.map(|()| w.position()),
    };
    Some(finish(proc_num, results, outcome, None))
}
