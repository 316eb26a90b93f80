//! The kernel's own file handles (name_to_handle_at(2), open_by_handle_at(2)): what the
//! kernel's exports and nfs-ganesha's VFS layer build NFS handles on. A handle names an
//! inode of one file system for as long as it exists, whatever its names: resolving one
//! is one system call, a hard link is just another name, and a rename behind the server's
//! back cannot break it. Opening by handle needs CAP_DAC_READ_SEARCH (the server's
//! identity, [`crate::identity::as_server`]).
//!
//! These are the only two calls of nfs3d that no safe wrapper offers (rustix has none), so
//! this file alone holds `unsafe`: each call hands the kernel a buffer of the size it is
//! told, and reads back only what the kernel says it wrote.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Most bytes of a kernel handle that fit in an NFS handle beside this server's own fields
/// (`fh`): ext4's are 8, tmpfs's 12, xfs's 8 to 16, btrfs's 20 to 28 (without parent).
pub const MAX_BYTES: usize = 36;

/// The kernel's MAX_HANDLE_SZ: the buffer name_to_handle_at is given.
const KERNEL_MAX: usize = 128;

/// A kernel file handle: its type and bytes, inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelFh {
    kind: i32,
    len: u8,
    bytes: [u8; MAX_BYTES],
}

impl core::fmt::Debug for KernelFh {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KernelFh({}:", self.kind)?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// `struct file_handle` with room for the largest handle (fcntl.h).
#[repr(C)]
struct Raw {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; KERNEL_MAX],
}

impl KernelFh {
    /// A handle from its type and bytes (as carried in an NFS handle); `None` past
    /// [`MAX_BYTES`].
    pub fn new(kind: i32, bytes: &[u8]) -> Option<KernelFh> {
        if bytes.len() > MAX_BYTES {
            return None;
        }
        let mut b = [0u8; MAX_BYTES];
        b[..bytes.len()].copy_from_slice(bytes);
        Some(KernelFh {
            kind,
            len: bytes.len() as u8,
            bytes: b,
        })
    }

    /// The handle's type (the file system's `fid_type`).
    pub fn kind(&self) -> i32 {
        self.kind
    }

    /// The handle's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The handle of `name` in `dir` (an empty `name`: `dir` itself), never following a final
/// symbolic link, and the ID of the mount it is on. A handle longer than [`MAX_BYTES`] is
/// `EOVERFLOW`; a file system that makes none, `EOPNOTSUPP`.
pub fn of(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<(KernelFh, i32)> {
    let mut raw = Raw {
        handle_bytes: KERNEL_MAX as u32,
        handle_type: 0,
        f_handle: [0; KERNEL_MAX],
    };
    let mut mount_id: libc::c_int = 0;
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH
    } else {
        0
    };
    // SAFETY: `raw` is a `struct file_handle` whose `handle_bytes` says how many bytes
    // follow it (KERNEL_MAX, all of `f_handle`); `name` is NUL-terminated; `mount_id`
    // is a valid int; the kernel writes within these and nothing else.
    let rc = unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            name.as_ptr(),
            (&mut raw as *mut Raw).cast::<libc::file_handle>(),
            &mut mount_id,
            flags,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let n = raw.handle_bytes as usize;
    let bytes = raw.f_handle.get(..n).ok_or_else(overflow)?;
    let fh = KernelFh::new(raw.handle_type, bytes).ok_or_else(overflow)?;
    Ok((fh, mount_id))
}

fn overflow() -> io::Error {
    io::Error::from_raw_os_error(libc::EOVERFLOW)
}

/// Opens the object `fh` names on the file system of `mount` with `flags` (O_PATH and
/// O_NOFOLLOW where only its attributes are wanted): `ESTALE` when it no longer exists.
/// Needs CAP_DAC_READ_SEARCH.
pub fn open(mount: BorrowedFd<'_>, fh: &KernelFh, flags: i32) -> io::Result<OwnedFd> {
    let mut raw = Raw {
        handle_bytes: u32::from(fh.len),
        handle_type: fh.kind,
        f_handle: [0; KERNEL_MAX],
    };
    raw.f_handle[..fh.len as usize].copy_from_slice(fh.as_bytes());
    // SAFETY: `raw` is a `struct file_handle` whose `handle_bytes` (at most MAX_BYTES)
    // covers only bytes of `f_handle`; the kernel reads no more than that.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            (&mut raw as *mut Raw).cast::<libc::file_handle>(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel, open, and owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_handle_opens_its_object_after_a_rename() {
        let dir = std::env::temp_dir().join(format!("nfs3d-khandle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a/f"), b"hello").unwrap();
        let d = std::fs::File::open(dir.join("a")).unwrap();
        let (fh, mnt) = match of(d.as_fd(), c"f") {
            Ok(x) => x,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                eprintln!("skipped: the temporary directory's file system makes no handles");
                return;
            }
            Err(e) => panic!("name_to_handle_at: {e}"),
        };
        assert!(mnt > 0);
        assert!(!fh.as_bytes().is_empty());
        std::fs::create_dir_all(dir.join("b")).unwrap();
        std::fs::rename(dir.join("a/f"), dir.join("b/g")).unwrap();
        match open(d.as_fd(), &fh, libc::O_RDONLY) {
            Ok(f) => {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::fs::File::from(f), &mut s).unwrap();
                assert_eq!(s, "hello");
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                eprintln!("skipped: opening by handle needs CAP_DAC_READ_SEARCH");
            }
            Err(e) => panic!("open_by_handle_at: {e}"),
        }
        std::fs::remove_file(dir.join("b/g")).unwrap();
        let gone = open(d.as_fd(), &fh, libc::O_PATH);
        assert!(gone.is_err(), "a removed file's handle is stale");
        assert_eq!(
            KernelFh::new(1, &[0; MAX_BYTES + 1]),
            None,
            "too long for an NFS handle"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
