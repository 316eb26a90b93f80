//! Acting as the caller: the identity a thread's file system calls carry (RFC 1813 §4.4:
//! the server checks a Call's permissions with the credential it carries; RFC 5531
//! Appendix A, AUTH_SYS).
//!
//! Each procedure runs with its caller's (mapped, [`crate::policy`]) user, group and
//! supplementary groups as the thread's effective identity, so that the kernel itself makes
//! every decision (permission bits and ACLs, sticky directories, setgid inheritance, who
//! may chown, chmod or set times, quotas and ownership of what is created) exactly as it
//! makes them for a local process. The alternative, deciding in the server "as the kernel
//! would", would copy rules that the kernel keeps changing and cannot see its ACLs or
//! security modules.
//!
//! The switch is per thread: `setresuid`, `setresgid` and `setgroups` as raw system calls
//! (rustix's `set_thread_*`), which on Linux change only the calling thread's credentials
//! (the C library's wrappers change every thread of the process). The real and saved user
//! IDs stay 0, so a thread can always become the server again ([`as_server`]): going from
//! effective user 0 to another clears the effective capabilities, going back restores
//! them from the permitted set (capabilities(7)). A thread switches only when the identity
//! changes: a client whose Calls come from one user costs no system call per Call.
//!
//! Only the I/O threads switch ([`switching_thread`]). A polling worker posts to the RDMA
//! device and the connection manager through their character devices, and the kernel
//! refuses a `write` to them from a thread whose credentials are no longer those the file
//! was opened with (`ib_safe_file_access`: "changed security contexts after opening file
//! descriptor", seen on soft-RoCE, whose every Send is such a write), even after switching
//! back. So a worker keeps the server's credentials for good: it runs a procedure itself
//! only for a caller who is the server's identity, root not squashed ([`runs_here`]), and
//! hands every other caller's Calls to the I/O threads. An I/O thread keeps the last
//! caller's identity until a Call needs another.

use std::cell::RefCell;
use std::io;

use rustix::fs::{Gid, Uid};
use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};

use rpcrdma_proto::rpc::AuthSys;

/// Who calls (RFC 5531 Appendix A, AUTH_SYS), as the export's options map it: the identity
/// the procedure runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// User.
    pub uid: u32,
    /// Primary group.
    pub gid: u32,
    /// Other groups.
    pub gids: Vec<u32>,
}

impl Caller {
    /// The caller of an AUTH_SYS credential body; `None` when it does not decode.
    pub fn from_auth_sys(body: &[u8]) -> Option<Caller> {
        let sys = AuthSys::parse(body).ok()?;
        Some(Caller {
            uid: sys.uid,
            gid: sys.gid,
            gids: sys.gids.iter().collect(),
        })
    }

    /// The superuser (an export that does not squash root, or the tests).
    #[cfg(test)]
    pub fn root() -> Caller {
        Caller {
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        }
    }

    /// Whether the caller is in group `gid`.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.gids.contains(&gid)
    }
}

/// Most supplementary groups applied (RFC 5531 Appendix A: an AUTH_SYS credential carries
/// at most 16).
pub const MAX_GROUPS: usize = 16;

/// What this thread's credentials are now, as far as this module set them.
#[derive(Debug)]
struct ThreadCreds {
    /// The effective user.
    uid: u32,
    /// The effective group and the supplementary groups, once set (`None`: still the
    /// process's own).
    groups: Option<(u32, Vec<u32>)>,
    /// Whether the thread may take callers' identities (an I/O thread).
    switching: bool,
}

thread_local! {
    static STATE: RefCell<ThreadCreds> = const {
        RefCell::new(ThreadCreds { uid: 0, groups: None, switching: false })
    };
}

fn uid(raw: u32) -> Uid {
    Uid::from_raw(raw)
}

/// Makes this thread's effective user `raw` (a no-op when it is already). From one user
/// other than 0 to another, through 0: without its capabilities a thread may only take
/// its real or saved user (both 0).
fn set_euid(state: &mut ThreadCreds, raw: u32) -> io::Result<()> {
    if state.uid == raw {
        return Ok(());
    }
    if state.uid != 0 && raw != 0 {
        set_thread_res_uid(None, Some(uid(0)), None)?;
        state.uid = 0;
    }
    set_thread_res_uid(None, Some(uid(raw)), None)?;
    state.uid = raw;
    Ok(())
}

/// Whether `c` is the server's own identity (user and group 0), as whom any thread acts
/// without changing its credentials.
pub fn is_server(c: &Caller) -> bool {
    c.uid == 0 && c.gid == 0
}

/// Whether this thread can run a procedure of `c`: an I/O thread any caller's, any other
/// thread only the server's own identity's.
pub fn runs_here(c: &Caller) -> bool {
    is_server(c) || STATE.with(|s| s.borrow().switching)
}

/// Makes this thread one that takes its callers' identities (an I/O thread, which never
/// touches the RDMA device). It keeps the last caller's identity between Calls.
pub fn switching_thread() {
    STATE.with(|s| s.borrow_mut().switching = true);
}

/// Makes this thread act as `c`: its effective user, group and supplementary groups (at
/// most [`MAX_GROUPS`]), kept until a Call needs another (the next Call of the same user
/// costs no system call). A thread that does not switch ([`switching_thread`]) acts only
/// as the server (`PermissionDenied` otherwise), with its own credentials untouched.
pub fn act_as(c: &Caller) -> io::Result<()> {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if !s.switching {
            return if is_server(c) {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "this thread keeps the server's credentials (it drives RDMA connections)",
                ))
            };
        }
        let groups = &c.gids[..c.gids.len().min(MAX_GROUPS)];
        let same = s
            .groups
            .as_ref()
            .is_some_and(|(g, gs)| *g == c.gid && gs.as_slice() == groups);
        if !same {
            // Groups change only with CAP_SETGID: as the server first.
            set_euid(&mut s, 0)?;
            let mut raw = [Gid::from_raw(0); MAX_GROUPS];
            for (r, g) in raw.iter_mut().zip(groups) {
                *r = Gid::from_raw(*g);
            }
            s.groups = None;
            set_thread_groups(&raw[..groups.len()])?;
            set_thread_res_gid(None, Some(Gid::from_raw(c.gid)), None)?;
            let kept = s
                .groups
                .get_or_insert_with(|| (c.gid, Vec::with_capacity(MAX_GROUPS)));
            kept.0 = c.gid;
            kept.1.clear();
            kept.1.extend_from_slice(groups);
        }
        set_euid(&mut s, c.uid)
    })
}

/// Runs `f` as the server (effective user 0, with its capabilities), then acts as the
/// caller again: what only the server may do, never on the caller's behalf beyond what
/// the procedure allows (opening a file by its kernel handle; the owner's access to a
/// file its mode does not allow, as Linux's nfsd grants it).
pub fn as_server<R>(f: impl FnOnce() -> R) -> io::Result<R> {
    let was = STATE.with(|s| s.borrow().uid);
    if was == 0 {
        return Ok(f());
    }
    STATE.with(|s| set_euid(&mut s.borrow_mut(), 0))?;
    let r = f();
    STATE.with(|s| set_euid(&mut s.borrow_mut(), was))?;
    Ok(r)
}

/// Whether this thread acts as someone other than the server now.
pub fn is_caller() -> bool {
    STATE.with(|s| s.borrow().uid != 0)
}

/// Checks that this process can act as its callers (it runs as root, or with
/// CAP_SETUID, CAP_SETGID and CAP_DAC_READ_SEARCH): a scratch thread takes a caller's
/// identity, creates nothing, and becomes the server again.
pub fn check() -> io::Result<()> {
    std::thread::Builder::new()
        .name("nfs3d-identity-check".into())
        .spawn(|| -> io::Result<()> {
            switching_thread();
            if !rustix::process::geteuid().is_root() {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "nfs3d runs as root: it acts as each caller (per-thread setresuid, \
                     setgroups) and opens files by their kernel handles",
                ));
            }
            let nobody = Caller {
                uid: 65534,
                gid: 65534,
                gids: vec![65534],
            };
            act_as(&nobody)?;
            if rustix::process::geteuid().as_raw() != 65534 {
                return Err(io::Error::other(
                    "the thread's effective user did not change",
                ));
            }
            let root = as_server(|| rustix::process::geteuid().is_root())?;
            if !root {
                return Err(io::Error::other("the thread could not become root again"));
            }
            Ok(())
        })?
        .join()
        .map_err(|_| io::Error::other("the identity check panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn euid() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    fn in_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().expect("the thread ran");
    }

    #[test]
    fn a_thread_acts_as_its_caller_and_becomes_the_server_again() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: acting as a caller needs root");
            return;
        }
        check().expect("this process can act as its callers");
        let (acting_tx, acting_rx) = std::sync::mpsc::channel();
        let (seen_tx, seen_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            switching_thread();
            let c = Caller {
                uid: 1234,
                gid: 2345,
                gids: vec![3456, 4567],
            };
            act_as(&c).unwrap();
            assert_eq!(euid(), 1234);
            assert_eq!(rustix::process::getegid().as_raw(), 2345);
            assert!(is_caller());
            acting_tx.send(()).unwrap();
            seen_rx.recv().unwrap();
            let inside = as_server(euid).unwrap();
            assert_eq!(inside, 0);
            assert_eq!(euid(), 1234, "back to the caller after as_server");
            assert_eq!(euid(), 1234, "kept between Calls");
        });
        acting_rx.recv().unwrap();
        // This thread is still root while the other acts: the switch is per thread.
        assert_eq!(euid(), 0);
        seen_tx.send(()).unwrap();
        other.join().expect("the thread ran");
    }

    #[test]
    fn a_thread_that_does_not_switch_acts_only_as_the_server() {
        in_thread(|| {
            let before = rustix::process::geteuid().as_raw();
            let root = Caller {
                uid: 0,
                gid: 0,
                gids: vec![1, 2, 3],
            };
            assert!(runs_here(&root));
            act_as(&root).expect("the server's identity, unchanged");
            let user = Caller {
                uid: 1000,
                gid: 1000,
                gids: vec![],
            };
            assert!(!runs_here(&user));
            assert_eq!(
                act_as(&user).map(|_| ()).unwrap_err().kind(),
                io::ErrorKind::PermissionDenied
            );
            assert_eq!(rustix::process::geteuid().as_raw(), before, "untouched");
        });
    }

    #[test]
    fn a_switching_thread_keeps_identities_and_switches_only_on_change() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: acting as a caller needs root");
            return;
        }
        in_thread(|| {
            switching_thread();
            let a = Caller {
                uid: 1000,
                gid: 1000,
                gids: vec![],
            };
            act_as(&a).unwrap();
            assert_eq!(euid(), 1000, "kept between Calls");
            let b = Caller {
                uid: 1001,
                gid: 1001,
                gids: vec![1000],
            };
            act_as(&b).unwrap();
            assert_eq!(euid(), 1001);
            assert_eq!(rustix::process::getegid().as_raw(), 1001);
            // Another user with the same groups: only the user changes, through root.
            let c = Caller {
                uid: 1002,
                ..b.clone()
            };
            act_as(&c).unwrap();
            assert_eq!(euid(), 1002);
            act_as(&b).unwrap();
            assert_eq!(euid(), 1001);
            // A file created now belongs to the caller.
            let dir = std::env::temp_dir().join(format!("nfs3d-identity-{}", std::process::id()));
            as_server(|| {
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                    .unwrap();
            })
            .unwrap();
            act_as(&b).unwrap();
            std::fs::write(dir.join("f"), b"x").unwrap();
            let st = rustix::fs::stat(dir.join("f")).unwrap();
            assert_eq!((st.st_uid, st.st_gid), (1001, 1001));
            as_server(|| std::fs::remove_dir_all(&dir).unwrap()).unwrap();
        });
    }
}
