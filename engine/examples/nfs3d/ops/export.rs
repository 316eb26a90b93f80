//! The exported directory: from a handle to the object it names, without ever leaving the
//! export.
//!
//! Every object is reached from a descriptor of the export's root, one component at a time
//! (`openat` with `O_NOFOLLOW`: a symbolic link is never followed, whatever a client made
//! of the tree), and acted on relative to its parent's descriptor, so a directory swapped
//! for a link between two calls cannot lead outside. Names from clients are checked first
//! (no `/`, no NUL, not `.` or `..`, at most 255 bytes). A handle ([`fh`]) carries the
//! kernel's own handle of the object ([`khandle`]) with its inode and generation; the path
//! to it comes from a cache filled as objects are looked up, created and listed, checked
//! against the handle at every use, and, when the cache does not know it (after a restart)
//! or is wrong (after a rename), from the kernel: the object opened by its handle (one
//! system call), its path read from `/proc/self/fd`, which must lie beneath the export (an
//! object moved out of the export is NFS3ERR_STALE). Only a file the kernel holds no name
//! for (on a disk file system after a restart, exported below its mount's root) is
//! searched for, breadth first and bounded. An object not found is NFS3ERR_STALE.
//!
//! [`khandle`]: crate::khandle

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Statx, StatxFlags, CWD};

use super::{kernel_path, Config, Fail};
use crate::fh::{self, Fh, Id, Key};
use crate::identity;
use crate::khandle::{self, KernelFh};
use crate::xdr::{FType, Fattr, Stat, Time, NAME_MAX};

/// Entries a search for a handle's object looks at, at most.
pub(super) const SEARCH_LIMIT: usize = 1_000_000;
/// Paths the handle cache keeps at most (it starts over past that: a cache, not a
/// record; what it forgets is found again by a search).
pub(super) const CACHE_MAX: usize = 1 << 20;
/// Removed objects remembered at most, so that their handles are STALE at once.
pub(super) const GONE_MAX: usize = 1 << 16;
/// Most directory descriptors kept open for [`Export::parent_dir`] (emptied when full).
const DIRS_MAX: usize = 512;

/// How far the server may go to reach an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Any way, waiting for the file system where it must (an I/O thread).
    Any,
    /// Only through what the kernel holds in its caches (`openat2` with `RESOLVE_CACHED`,
    /// `statx` with `AT_STATX_DONT_SYNC` on the descriptor): a polling worker, which must
    /// never wait for a disk. Anything more is [`Fail::WouldBlock`]: the pool does it.
    Cached,
}

/// `openat2` resolving only through the dentry cache, beneath `dir`, never following a
/// link (a trailing one is opened itself, with `O_PATH | O_NOFOLLOW`); `EAGAIN` when the
/// path is not all cached, `ENOENT` when a cached negative entry says it is not there.
fn open_cached(dir: &OwnedFd, path: &CStr, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        dir,
        path,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::CACHED | ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    )
}

/// The attributes of the object `fd` was opened on, from memory (no path walk).
pub(super) fn stat_fd(fd: &OwnedFd) -> rustix::io::Result<Statx> {
    rustix::fs::statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW | AtFlags::STATX_DONT_SYNC,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
}

/// The child `name` of the directory `dfd` (a checked name), reached as `reach` allows:
/// its attributes, or `NFS3ERR_NOENT` and the like when it is known not to be there.
pub fn stat_child(dfd: &OwnedFd, name: &CString, reach: Reach) -> Result<Statx, Fail> {
    match reach {
        Reach::Any => Ok(stat_at(dfd, name)?),
        Reach::Cached => match open_cached(dfd, name.as_c_str(), OFlags::PATH) {
            Ok(fd) => stat_fd(&fd).map_err(|_| Fail::WouldBlock),
            Err(rustix::io::Errno::NOENT) => Err(Fail::Status(Stat::NoEnt)),
            Err(_) => Err(Fail::WouldBlock),
        },
    }
}

thread_local! {
    /// Set while [`without_search`] runs its closure on this thread (handles resolved by
    /// the kernel are refused too: on a disk file system that may read an inode).
    static NO_SEARCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set when a search was refused meanwhile.
    static SEARCH_REFUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (a procedure on a polling worker) with searches of the export refused: a
/// handle whose path the cache does not give resolves to NFS3ERR_STALE instead, and the
/// second value says whether that happened (the caller then discards `f`'s answer and
/// hands the procedure to an I/O thread). A search may read every directory of the export.
pub fn without_search<R>(f: impl FnOnce() -> R) -> (R, bool) {
    /// Lets searches happen again when dropped, even if `f` unwinds.
    struct Allow;
    impl Drop for Allow {
        fn drop(&mut self) {
            NO_SEARCH.set(false);
        }
    }
    NO_SEARCH.set(true);
    SEARCH_REFUSED.set(false);
    let allow = Allow;
    let r = f();
    drop(allow);
    (r, SEARCH_REFUSED.replace(false))
}

/// What the path cache knows of an object: where it was last seen and its handle.
#[derive(Clone, Debug)]
pub(super) struct Known {
    pub(super) rel: PathBuf,
    pub(super) gen: u32,
    pub(super) fh: Fh,
}

/// An object a handle resolved to: where it is and what it was when last looked at.
#[derive(Debug)]
pub struct Obj {
    /// Its path from the export's root (empty for the root).
    pub rel: PathBuf,
    /// Its parent directory (the root's own descriptor for the root), shared with the
    /// export's cache of directory descriptors.
    pub parent: Arc<OwnedFd>,
    /// Its name in the parent (`.` for the root).
    pub name: CString,
    /// Its attributes.
    pub st: Statx,
}

impl Obj {
    /// Its type.
    pub fn ftype(&self) -> FType {
        FType::of_mode(u32::from(self.st.stx_mode))
    }
}

/// The export and what the procedures share about it.
pub struct Export {
    pub(super) root: OwnedFd,
    /// The root opened for reading: what `open_by_handle_at` takes to name the file system
    /// (it refuses an `O_PATH` descriptor).
    pub(super) mount_fd: OwnedFd,
    pub(super) path: PathBuf,
    /// The export's path as the kernel names it (`/proc/self/fd`), which the paths of
    /// objects opened by their handles must start with.
    pub(super) kpath: PathBuf,
    /// Whether the export is its mount's root: every object of its file system is then
    /// beneath it.
    pub(super) mount_root: bool,
    /// The export's mount, which handles are made on.
    pub(super) mount_id: i32,
    pub(super) root_id: Id,
    pub(super) root_fh: Fh,
    pub(super) key: Key,
    /// Limits of the server.
    pub config: Config,
    /// The write verifier (§3.3.7): changes when the server restarts, so that a client
    /// knows its UNSTABLE writes may be lost and sends them again.
    pub write_verf: [u8; 8],
    /// The cookie verifier of every directory listing (cookies are stable hashes of names,
    /// valid across restarts).
    pub cookie_verf: [u8; 8],
    /// Paths (relative to the root) and handles of objects by (device, inode).
    pub(super) cache: Mutex<HashMap<(u64, u64), Known>>,
    /// Objects this server removed: a client using their handles again (it revalidates
    /// what it had cached) gets NFS3ERR_STALE without a search of the whole export.
    pub(super) gone: Mutex<HashSet<Id>>,
    /// Searches of the export made so far.
    pub(super) searches: std::sync::atomic::AtomicU64,
    /// Objects found by their kernel handles (a handle the path cache did not know).
    pub(super) opened_by_handle: std::sync::atomic::AtomicU64,
    /// Descriptors of the directories handles were last resolved in, by path from the root
    /// ([`Export::parent_dir`]).
    pub(super) dirs: Mutex<HashMap<PathBuf, Arc<OwnedFd>>>,
    /// Snapshots of the directory listings under way, for their continuations.
    pub listings: super::listings::Listings,
}

impl core::fmt::Debug for Export {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Export")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The generation of an object: from its birth time when the filesystem keeps one.
fn generation(st: &Statx) -> u32 {
    if st.stx_mask & StatxFlags::BTIME.bits() != 0 {
        (st.stx_btime.tv_sec as u32).wrapping_mul(0x9e37_79b9) ^ st.stx_btime.tv_nsec
    } else {
        0
    }
}

/// The device number statx reports, as `st_dev` would.
pub fn dev_of(st: &Statx) -> u64 {
    u64::from(st.stx_dev_major) << 32 | u64::from(st.stx_dev_minor)
}

/// The handle identity of `st`.
pub fn id_of(st: &Statx) -> Id {
    Id {
        dev: dev_of(st),
        ino: st.stx_ino,
        gen: generation(st),
    }
}

/// Attributes of `name` in `dir`, not following a final symbolic link.
pub fn stat_at(dir: &OwnedFd, name: &CStr) -> rustix::io::Result<Statx> {
    rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
}

fn nsec(t: &rustix::fs::StatxTimestamp) -> Time {
    Time {
        seconds: t.tv_sec as u32,
        nseconds: t.tv_nsec,
    }
}

/// The `fattr3` of `st` (§2.5).
pub fn fattr(st: &Statx) -> Fattr {
    let mode = u32::from(st.stx_mode);
    Fattr {
        ftype: FType::of_mode(mode) as u32,
        mode: mode & 0o7777,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        size: st.stx_size,
        used: st.stx_blocks.saturating_mul(512),
        rdev: (st.stx_rdev_major, st.stx_rdev_minor),
        fsid: dev_of(st),
        fileid: st.stx_ino,
        atime: nsec(&st.stx_atime),
        mtime: nsec(&st.stx_mtime),
        ctime: nsec(&st.stx_ctime),
    }
}

/// A client's name for a directory entry, checked (§3.3.8 and kin: NFS3ERR_INVAL for `.`,
/// `..`, an empty name or one with `/` or NUL, NFS3ERR_NAMETOOLONG past 255 bytes).
pub fn name(bytes: &[u8]) -> Result<CString, Stat> {
    if bytes.len() > NAME_MAX as usize {
        return Err(Stat::NameTooLong);
    }
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(Stat::Inval);
    }
    CString::new(bytes).map_err(|_| Stat::Inval)
}

pub(super) fn dot() -> CString {
    CString::new(".").unwrap_or_default()
}

/// The status for an I/O error of the operating system.
pub(super) fn io_stat(e: &io::Error) -> Stat {
    e.raw_os_error().map_or(Stat::Io, |n| {
        Stat::from_errno(rustix::io::Errno::from_raw_os_error(n))
    })
}

/// The mount ID statx reports for `name` in `dir`.
fn mnt_id(dir: &OwnedFd, name: &CStr) -> rustix::io::Result<(u64, u64)> {
    let st = rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS | StatxFlags::MNT_ID,
    )?;
    Ok((st.stx_mnt_id, st.stx_ino))
}

fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl Export {
    /// Opens the export `dir`; handles are made with the key in `state_dir`.
    pub fn open(dir: &Path, state_dir: &Path, config: Config) -> io::Result<Export> {
        let root = rustix::fs::openat(CWD, dir, dir_flags(), Mode::empty())?;
        let st = stat_at(&root, &dot())?;
        let key = Key::load_or_create(state_dir)?;
        let no_handles = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!(
                    "its file system makes no kernel file handles (name_to_handle_at: {e}); \
                     nfs3d builds its NFS handles on them and cannot export it"
                ),
            )
        };
        let (root_kfh, mount_id) = khandle::of(root.as_fd(), c"").map_err(no_handles)?;
        let mount_fd = rustix::fs::openat(
            &root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // Opening by handle needs the server's privileges: checked now, not at the first
        // client's first handle after a restart.
        identity::as_server(|| khandle::open(mount_fd.as_fd(), &root_kfh, libc::O_PATH))?.map_err(
            |e| {
                io::Error::new(
                    e.kind(),
                    format!("opening the export by its kernel handle (open_by_handle_at): {e}; nfs3d needs root (CAP_DAC_READ_SEARCH)"),
                )
            },
        )?;
        let kpath = kernel_path(&root).ok_or_else(|| {
            io::Error::other(
                "the export's path in /proc/self/fd cannot be read (is /proc mounted?)",
            )
        })?;
        let (here, ino) = mnt_id(&root, c"")?;
        let (above, above_ino) = mnt_id(&root, c"..")?;
        let mount_root = here != above || ino == above_ino;
        let mut write_verf = [0u8; 8];
        fh::random(&mut write_verf)?;
        let cookie_verf = key.mac(b"cookie verifier").to_be_bytes();
        let root_id = id_of(&st);
        let root_fh = key.handle(root_id, &root_kfh);
        let mut cache = HashMap::new();
        cache.insert(
            (root_id.dev, root_id.ino),
            Known {
                rel: PathBuf::new(),
                gen: root_id.gen,
                fh: root_fh,
            },
        );
        Ok(Export {
            root,
            mount_fd,
            path: dir.to_path_buf(),
            kpath,
            mount_root,
            mount_id,
            root_id,
            root_fh,
            key,
            config,
            write_verf,
            cookie_verf,
            cache: Mutex::new(cache),
            gone: Mutex::new(HashSet::new()),
            searches: std::sync::atomic::AtomicU64::new(0),
            opened_by_handle: std::sync::atomic::AtomicU64::new(0),
            dirs: Mutex::new(HashMap::new()),
            listings: super::listings::Listings::default(),
        })
    }

    /// The exported directory.
    pub fn export_path(&self) -> &Path {
        &self.path
    }

    /// The root's handle.
    pub fn root_fh(&self) -> Fh {
        self.root_fh
    }

    /// MOUNT's MNT (RFC 1813 Appendix I): the root's handle for `/` or the export's own
    /// path; `MNT3ERR_NOENT` (2) otherwise.
    pub fn mnt(&self, dirpath: &[u8]) -> Result<Fh, u32> {
        let trimmed = if dirpath.len() > 1 {
            dirpath.strip_suffix(b"/").unwrap_or(dirpath)
        } else {
            dirpath
        };
        if trimmed == b"/" || trimmed == self.path.as_os_str().as_bytes() {
            Ok(self.root_fh())
        } else {
            Err(2)
        }
    }

    /// The READDIR cookie of the entry `name` (§3.3.16): 1 for `.`, 2 for `..` (listed
    /// first, as Linux's nfsd does), otherwise a keyed hash, at least 3, stable across
    /// calls and restarts whatever else the directory holds.
    pub fn cookie(&self, name: &[u8]) -> u64 {
        match name {
            b"." => 1,
            b".." => 2,
            _ => ((self.key.mac(name) >> 2) | 1).max(3),
        }
    }

    /// Searches of the export for a handle's object so far (a restart, a rename, a stale
    /// handle of an object removed behind the server's back).
    pub fn searches(&self) -> u64 {
        self.searches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Objects found by their kernel handles so far (handles the path cache did not know:
    /// after a restart, a rename behind the server's back, a cache that started over).
    pub fn opened_by_handle(&self) -> u64 {
        self.opened_by_handle
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A descriptor of the directory at `rel`, reached component by component without
    /// following a link. (One `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` in its
    /// place made the guest's small-file workload slower in three runs of three, tree copy
    /// 1.19 to 1.35 times the kernel's against 0.96 to 1.11 before: kept as it is.)
    pub fn open_dir(&self, rel: &Path) -> rustix::io::Result<OwnedFd> {
        let mut fd = rustix::fs::openat(&self.root, ".", dir_flags(), Mode::empty())?;
        for c in rel.components() {
            let n = CString::new(c.as_os_str().as_bytes()).map_err(|_| rustix::io::Errno::INVAL)?;
            fd = rustix::fs::openat(&fd, n.as_c_str(), dir_flags(), Mode::empty())?;
        }
        Ok(fd)
    }

    /// A descriptor of the directory at `rel`, from the cache of those opened before, else
    /// opened ([`open_dir`](Self::open_dir)) and kept: resolving a handle then takes one
    /// `statx` instead of a walk of one `openat` and one `close` per component.
    ///
    /// A kept descriptor names the directory it was opened on, wherever that has moved
    /// since, so it is used only where the object found in it is checked to be the one a
    /// handle names ([`at`](Self::at)): a directory moved (even out of the export, by a
    /// local user) can give a miss, which is searched for, never another object. Renaming or
    /// removing a directory through this server empties the cache ([`forget_dirs`](Self::forget_dirs)).
    ///
    /// `fresh` skips the cache (and replaces what it held): after a miss in a kept
    /// descriptor, the path may name another directory now.
    ///
    /// The second value says whether the descriptor was a kept one.
    fn parent_dir(&self, rel: &Path, fresh: bool) -> rustix::io::Result<(Arc<OwnedFd>, bool)> {
        if !fresh {
            if let Some(fd) = self.dirs.lock().ok().and_then(|d| d.get(rel).cloned()) {
                return Ok((fd, true));
            }
        }
        let fd = Arc::new(self.open_dir(rel)?);
        if let Ok(mut d) = self.dirs.lock() {
            if d.len() >= DIRS_MAX {
                d.clear();
            }
            d.insert(rel.to_path_buf(), Arc::clone(&fd));
        }
        Ok((fd, false))
    }

    /// Empties the cache of directory descriptors: a directory was renamed or removed, so
    /// paths may name other directories now.
    pub fn forget_dirs(&self) {
        if let Ok(mut d) = self.dirs.lock() {
            d.clear();
        }
    }

    /// The object at `rel`, if it is `id`: looked for in the parent's kept descriptor,
    /// then, if not found there, in the directory the path names now.
    pub(super) fn at(&self, rel: &Path, id: Id) -> Option<Obj> {
        let (dir, name) = match (rel.parent(), rel.file_name()) {
            (Some(p), Some(n)) => (p, CString::new(n.as_bytes()).ok()?),
            _ => (Path::new(""), dot()),
        };
        for fresh in [false, true] {
            let (parent, kept) = self.parent_dir(dir, fresh).ok()?;
            if let Ok(st) = stat_at(&parent, &name) {
                if id_of(&st) == id {
                    return Some(Obj {
                        rel: rel.to_path_buf(),
                        parent,
                        name,
                        st,
                    });
                }
            }
            if !kept {
                // Just opened by its path: looking again would find the same.
                break;
            }
        }
        None
    }

    /// The object `fh` names: NFS3ERR_BADHANDLE for a handle this server did not make,
    /// NFS3ERR_STALE for one whose object is gone.
    ///
    /// A handle gives its object whatever the caller may search (as Linux's nfsd, which
    /// never walks a path for a handle): what fails as the caller is looked for again as
    /// the server, so that a directory the caller cannot search never makes a handle
    /// stale. The procedure then acts on the object as the caller.
    pub fn resolve(&self, fh: &[u8]) -> Result<Obj, Stat> {
        let (id, kfh) = self.key.open(fh, self.root_id.dev).ok_or(Stat::BadHandle)?;
        match self.resolve_id(id, &kfh) {
            // A worker that may not open handles gives the whole job to the pool instead.
            Err(Stat::Stale | Stat::Acces) if identity::is_caller() && !SEARCH_REFUSED.get() => {
                identity::as_server(|| self.resolve_id(id, &kfh)).unwrap_or(Err(Stat::ServerFault))
            }
            r => r,
        }
    }

    fn resolve_id(&self, id: Id, kfh: &KernelFh) -> Result<Obj, Stat> {
        let cached = self
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(&(id.dev, id.ino)).map(|k| k.rel.clone()));
        if let Some(rel) = cached {
            if let Some(o) = self.at(&rel, id) {
                return Ok(o);
            }
        }
        if self.gone.lock().is_ok_and(|g| g.contains(&id)) {
            return Err(Stat::Stale);
        }
        if NO_SEARCH.get() {
            // A polling worker: the job goes to an I/O thread, which asks the kernel.
            SEARCH_REFUSED.set(true);
            return Err(Stat::Stale);
        }
        self.by_handle(id, kfh)
    }

    /// The object `fh` names, reached as `reach` allows: through the caches only, a
    /// handle the path cache does not know, or whose path no longer names it, is
    /// [`Fail::WouldBlock`] (the pool searches for it).
    pub fn resolve_in(&self, fh: &[u8], reach: Reach) -> Result<Obj, Fail> {
        if reach == Reach::Any {
            return Ok(self.resolve(fh)?);
        }
        let (id, _) = self.key.open(fh, self.root_id.dev).ok_or(Stat::BadHandle)?;
        // try_lock: a worker never waits for an I/O thread holding the cache.
        let rel = match self.cache.try_lock() {
            Ok(c) => c.get(&(id.dev, id.ino)).map(|k| k.rel.clone()),
            Err(_) => None,
        }
        .ok_or(Fail::WouldBlock)?;
        let (dir, name) = match (rel.parent(), rel.file_name()) {
            (Some(p), Some(n)) => (p, CString::new(n.as_bytes()).map_err(|_| Fail::WouldBlock)?),
            _ => (Path::new(""), dot()),
        };
        // The parent's kept descriptor if the cache is free (the object found in it is
        // checked below), else opened through the kernel's caches.
        let kept = match self.dirs.try_lock() {
            Ok(d) => d.get(dir).cloned(),
            Err(_) => None,
        };
        let parent = match kept {
            Some(fd) => fd,
            None => Arc::new(self.open_dir_in(dir, reach)?),
        };
        let fd =
            open_cached(&parent, name.as_c_str(), OFlags::PATH).map_err(|_| Fail::WouldBlock)?;
        let st = stat_fd(&fd).map_err(|_| Fail::WouldBlock)?;
        if id_of(&st) != id {
            return Err(Fail::WouldBlock);
        }
        Ok(Obj {
            rel,
            parent,
            name,
            st,
        })
    }

    /// A descriptor of the directory at `rel`, reached as `reach` allows.
    pub fn open_dir_in(&self, rel: &Path, reach: Reach) -> Result<OwnedFd, Fail> {
        match reach {
            Reach::Any => Ok(self.open_dir(rel)?),
            Reach::Cached => {
                let path = if rel.as_os_str().is_empty() {
                    dot()
                } else {
                    CString::new(rel.as_os_str().as_bytes()).map_err(|_| Fail::WouldBlock)?
                };
                open_cached(
                    &self.root,
                    path.as_c_str(),
                    OFlags::PATH | OFlags::DIRECTORY,
                )
                .map_err(|_| Fail::WouldBlock)
            }
        }
    }

    /// The directory `fh` names with its descriptor, reached as `reach` allows.
    pub fn dir_in(&self, fh: &[u8], reach: Reach) -> Result<(Obj, OwnedFd), Fail> {
        if reach == Reach::Any {
            return Ok(self.dir(fh)?);
        }
        let o = self.resolve_in(fh, reach)?;
        if o.ftype() != FType::Dir {
            return Err(Fail::Status(Stat::NotDir));
        }
        let fd = open_cached(
            &o.parent,
            o.name.as_c_str(),
            OFlags::PATH | OFlags::DIRECTORY,
        )
        .map_err(|_| Fail::WouldBlock)?;
        Ok((o, fd))
    }

    /// The directory `fh` names, with its descriptor: NFS3ERR_NOTDIR when it is not one.
    pub fn dir(&self, fh: &[u8]) -> Result<(Obj, OwnedFd), Stat> {
        let o = self.resolve(fh)?;
        if o.ftype() != FType::Dir {
            return Err(Stat::NotDir);
        }
        let fd = rustix::fs::openat(&o.parent, o.name.as_c_str(), dir_flags(), Mode::empty())?;
        Ok((o, fd))
    }
}
