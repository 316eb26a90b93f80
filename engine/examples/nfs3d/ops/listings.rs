//! The snapshots of directories that READDIR and READDIRPLUS (`list.rs`) list in pages: one
//! read of a directory, kept for the continuations of its listing. A floor below the export
//! (`export.rs` holds the [`Listings`], `list.rs` uses both): it imports neither, and the
//! caller gives the cookie of each name.

use std::ffi::CStr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::Statx;

/// A directory's entries as one read of it found them, in cookie order: per entry its
/// cookie, inode number and where its name starts in `names` (NUL-terminated names one
/// after the other).
#[derive(Debug, Default)]
pub struct Snapshot {
    names: Vec<u8>,
    pub entries: Vec<(u64, u64, u32)>,
}

impl Snapshot {
    /// Reads the directory `listing` (`.` and `..` included), each name's cookie from
    /// `cookie` (the export's `Export::cookie`).
    pub fn read(listing: &OwnedFd, cookie: impl Fn(&[u8]) -> u64) -> rustix::io::Result<Snapshot> {
        let mut s = Snapshot::default();
        for ent in rustix::fs::Dir::read_from(listing)? {
            let ent = ent?;
            let n = ent.file_name().to_bytes();
            let at = s.names.len() as u32;
            s.names.extend_from_slice(n);
            s.names.push(0);
            s.entries.push((cookie(n), ent.ino(), at));
        }
        s.entries.sort_unstable_by_key(|x| x.0);
        Ok(s)
    }

    /// The name starting at `at`.
    pub fn name(&self, at: u32) -> &CStr {
        CStr::from_bytes_until_nul(&self.names[at as usize..]).unwrap_or_default()
    }

    /// Bytes it holds (for the cache's bound).
    fn bytes(&self) -> usize {
        self.names.len() + self.entries.len() * std::mem::size_of::<(u64, u64, u32)>()
    }
}

/// The snapshots of the listings under way, for their continuations (READDIR and
/// READDIRPLUS with a cookie): reading a large directory again for every reply made
/// listing it in pages cost several times a single read (2,000 entries, pages of 32 KiB:
/// 13 ms against 4 ms).
///
/// A snapshot is used while the directory's modification and change times and size are
/// what they were when it was taken, so a listing continued shows the directory as it was
/// at or after the listing began (RFC 1813 §3.3.16 asks no more of a directory that
/// changes between calls); a listing from the start (cookie 0) always reads the directory.
/// A change the times cannot show (within the clock tick of the snapshot, where the kernel
/// keeps coarse timestamps) came after the listing began, so a continuation need not show
/// it either.
#[derive(Debug, Default)]
pub struct Listings {
    kept: Mutex<Vec<(Key, Arc<Snapshot>)>>,
    /// Continuations answered from a snapshot.
    pub reused: AtomicU64,
}

/// What a snapshot is valid for: the directory (device major and minor numbers, inode) and
/// its modification time, change time and size.
type Key = ((u32, u32, u64), (i64, u32), (i64, u32), u64);

/// Most snapshots kept, and their most bytes in all.
const LISTINGS_MAX: usize = 16;
const LISTINGS_BYTES: usize = 16 << 20;

fn key(st: &Statx) -> Key {
    (
        (st.stx_dev_major, st.stx_dev_minor, st.stx_ino),
        (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
        st.stx_size,
    )
}

impl Listings {
    /// The snapshot of the directory with attributes `st`, if one was taken as it is now.
    /// Never waits for the lock: when another thread holds it, the directory is read.
    pub fn get(&self, st: &Statx) -> Option<Arc<Snapshot>> {
        let k = key(st);
        let kept = self.kept.try_lock().ok()?;
        let s = kept
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, s)| Arc::clone(s))?;
        self.reused.fetch_add(1, Ordering::Relaxed);
        Some(s)
    }

    /// Keeps `snap` of the directory with attributes `st` (the oldest snapshots go first).
    pub fn put(&self, st: &Statx, snap: Arc<Snapshot>) {
        if snap.bytes() > LISTINGS_BYTES / 4 {
            return;
        }
        let k = key(st);
        let Ok(mut kept) = self.kept.try_lock() else {
            return;
        };
        kept.retain(|(key, _)| key.0 != k.0);
        let mut total: usize = kept.iter().map(|(_, s)| s.bytes()).sum::<usize>() + snap.bytes();
        while !kept.is_empty() && (kept.len() >= LISTINGS_MAX || total > LISTINGS_BYTES) {
            total -= kept[0].1.bytes();
            kept.remove(0);
        }
        kept.push((k, snap));
    }
}
