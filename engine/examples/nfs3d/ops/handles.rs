//! Handles and where their objects are: making a handle from the kernel's own
//! ([`khandle`]), the path cache that remembers where each object was last seen, and
//! finding an object the cache does not know by its kernel handle (or, for a file the
//! kernel holds no name for, by a bounded search of the export).
//!
//! [`khandle`]: crate::khandle

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, Statx};

use super::export::{
    dev_of, id_of, io_stat, stat_at, stat_fd, Export, Known, Obj, Reach, CACHE_MAX, GONE_MAX,
    SEARCH_LIMIT,
};
use super::{kernel_path, Fail};
use crate::fh::{Fh, Id};
use crate::identity;
use crate::khandle::{self, KernelFh};
use crate::xdr::{FType, Stat};

impl Export {
    /// The handle of the object `name` in `dir` (empty: `dir` itself), with attributes
    /// `st`: the one the path cache holds for it, else made from its kernel handle.
    fn make(
        &self,
        dir: &OwnedFd,
        name: &CStr,
        st: &Statx,
        known: Option<(u32, Fh)>,
    ) -> Result<Fh, Stat> {
        let id = id_of(st);
        if let Some((_, fh)) = known.filter(|&(gen, _)| gen == id.gen) {
            return Ok(fh);
        }
        let (kfh, mount) = khandle::of(dir.as_fd(), name).map_err(|e| io_stat(&e))?;
        if mount != self.mount_id {
            // Another file system mounted beneath the export: its objects are not served
            // (a handle of it would not open on the export's mount).
            return Err(Stat::Acces);
        }
        Ok(self.key.handle(id, &kfh))
    }

    /// The handle of the object `name` in the directory `dir` (an empty `name`: `dir`
    /// itself), with attributes `st`, remembered at `rel`.
    pub fn handle_for(
        &self,
        dir: &OwnedFd,
        name: &CStr,
        rel: &Path,
        st: &Statx,
    ) -> Result<Fh, Stat> {
        let key = (dev_of(st), st.stx_ino);
        // What the cache knows, copied out without its path: (generation, handle, whether
        // the path is `rel`).
        let known = self
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(&key).map(|k| (k.gen, k.fh, k.rel == rel)));
        let fh = self.make(dir, name, st, known.map(|(g, f, _)| (g, f)))?;
        if known.is_none_or(|(_, f, here)| !here || f != fh) {
            self.remember(id_of(st), rel.to_path_buf(), fh);
        }
        Ok(fh)
    }

    /// [`handle_for`](Self::handle_for), as `reach` allows: a worker never waits for the
    /// path cache's lock ([`Fail::WouldBlock`]).
    pub fn handle_in(
        &self,
        dir: &OwnedFd,
        name: &CStr,
        rel: &Path,
        st: &Statx,
        reach: Reach,
    ) -> Result<Fh, Fail> {
        if reach == Reach::Any {
            return Ok(self.handle_for(dir, name, rel, st)?);
        }
        let id = id_of(st);
        let mut c = self.cache.try_lock().map_err(|_| Fail::WouldBlock)?;
        let known = c.get(&(id.dev, id.ino));
        let fh = self.make(dir, name, st, known.map(|k| (k.gen, k.fh)))?;
        if known.is_none_or(|k| k.rel != rel || k.fh != fh) {
            if c.len() >= CACHE_MAX {
                return Err(Fail::WouldBlock);
            }
            c.insert(
                (id.dev, id.ino),
                Known {
                    rel: rel.to_path_buf(),
                    gen: id.gen,
                    fh,
                },
            );
        }
        Ok(fh)
    }

    /// The handle of the entry `name` of the directory `dir`, with attributes `st`,
    /// without remembering where it is (a listing remembers its entries together:
    /// [`remember_listed`](Self::remember_listed)).
    pub fn handle_of(&self, dir: &OwnedFd, name: &CStr, st: &Statx) -> Result<Fh, Stat> {
        let known = self
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(&(dev_of(st), st.stx_ino)).map(|k| (k.gen, k.fh)));
        self.make(dir, name, st, known)
    }

    /// Remembers that each of `entries` (an object, its name and its handle) is in the
    /// directory at `dir`: one lock for them all, and a path made only for an entry whose
    /// remembered path is another (a listing of a directory whose entries are known
    /// allocates nothing).
    pub fn remember_listed<'a>(
        &self,
        dir: &Path,
        entries: impl Iterator<Item = (Id, &'a OsStr, Fh)>,
    ) {
        let Ok(mut c) = self.cache.lock() else {
            return;
        };
        for (id, name, fh) in entries {
            let known = c.get(&(id.dev, id.ino)).is_some_and(|k| {
                k.fh == fh && k.rel.file_name() == Some(name) && k.rel.parent() == Some(dir)
            });
            if known {
                continue;
            }
            if c.len() >= CACHE_MAX {
                c.clear();
            }
            c.insert(
                (id.dev, id.ino),
                Known {
                    rel: dir.join(name),
                    gen: id.gen,
                    fh,
                },
            );
        }
    }

    /// Forgets where an object was (it was removed): a directory empties the cache of
    /// directory descriptors too.
    pub fn forget(&self, st: &Statx) {
        if FType::of_mode(u32::from(st.stx_mode)) == FType::Dir {
            self.forget_dirs();
        }
        if let Ok(mut c) = self.cache.lock() {
            c.remove(&(dev_of(st), st.stx_ino));
        }
        if let Ok(mut g) = self.gone.lock() {
            if g.len() >= GONE_MAX {
                g.clear();
            }
            g.insert(id_of(st));
        }
    }

    /// Remembers that the object `id`, whose handle is `fh`, is at `rel`.
    fn remember(&self, id: Id, rel: PathBuf, fh: Fh) {
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= CACHE_MAX {
                c.clear();
            }
            c.insert(
                (id.dev, id.ino),
                Known {
                    rel,
                    gen: id.gen,
                    fh,
                },
            );
        }
    }

    /// The object `id` found by its kernel handle `kfh`: opened (as the server), checked to
    /// be `id`, and named by the path the kernel holds for it, which must lie beneath the
    /// export.
    pub(super) fn by_handle(&self, id: Id, kfh: &KernelFh) -> Result<Obj, Stat> {
        let flags = libc::O_PATH | libc::O_NOFOLLOW;
        let fd = identity::as_server(|| khandle::open(self.mount_fd.as_fd(), kfh, flags))
            .map_err(|_| Stat::ServerFault)?
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ESTALE | libc::ENOENT) => Stat::Stale,
                _ => io_stat(&e),
            })?;
        self.opened_by_handle
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let st = stat_fd(&fd)?;
        if id_of(&st) != id {
            return Err(Stat::Stale);
        }
        let beneath =
            kernel_path(&fd).and_then(|p| p.strip_prefix(&self.kpath).ok().map(Path::to_path_buf));
        let fh = self.key.handle(id, kfh);
        let rel = match beneath {
            Some(rel) => rel,
            // A file the kernel holds no name for (its dentry not connected, as on a disk
            // file system after a restart): searched for, where the export is its mount's
            // root (every object of the file system is beneath it).
            None if self.mount_root && FType::of_mode(u32::from(st.stx_mode)) != FType::Dir => {
                self.searches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.search(id).ok_or(Stat::Stale)?
            }
            // Moved out of the export (or removed, still open somewhere).
            None => return Err(Stat::Stale),
        };
        let o = self.at(&rel, id).ok_or(Stat::Stale)?;
        self.remember(id, rel, fh);
        Ok(o)
    }

    /// Looks for `id` in the export, breadth first, never following a link.
    pub(super) fn search(&self, id: Id) -> Option<PathBuf> {
        if id == self.root_id {
            return Some(PathBuf::new());
        }
        let mut queue = VecDeque::from([PathBuf::new()]);
        let mut seen = 0usize;
        while let Some(dir) = queue.pop_front() {
            let fd = self.open_dir(&dir).ok()?;
            let listing = rustix::fs::openat(
                &fd,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()?;
            let Ok(entries) = rustix::fs::Dir::read_from(&listing) else {
                continue;
            };
            for e in entries.flatten() {
                seen += 1;
                if seen > SEARCH_LIMIT {
                    return None;
                }
                let n = e.file_name().to_bytes();
                if n == b"." || n == b".." {
                    continue;
                }
                let rel = dir.join(OsStr::from_bytes(n));
                if e.ino() == id.ino {
                    let name = CString::new(n).ok()?;
                    if let Ok(st) = stat_at(&fd, &name) {
                        if id_of(&st) == id {
                            return Some(rel);
                        }
                    }
                }
                if e.file_type() == rustix::fs::FileType::Directory {
                    queue.push_back(rel);
                }
            }
        }
        None
    }
}
