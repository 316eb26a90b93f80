//! Taking a fresh server process's page faults before it serves, instead of on its first
//! connection and its first Calls.
//!
//! A process maps its program and libraries lazily: each 4 KiB page of code is mapped at the
//! first instruction fetched from it, a minor page fault. A server started afresh thus pays
//! for every page of its accept path and of its Call path on its first client: in the
//! soft-RoCE guest, nfs3d's worker took some 40 such faults on the mount's first Calls and
//! its accept thread a dozen (traced with the kernel's `exceptions:page_fault_user` events),
//! where the kernel's nfsd, whose code is always mapped, takes none.
//!
//! [`prefault_mappings`] maps every page already mapped into the process, at once: it locks
//! them all (`mlockall(MCL_CURRENT)`, which faults each one in) and unlocks them at once
//! (`munlockall`); the pages stay mapped, now unlocked. Call it first thing at startup,
//! before a device is opened (the soft provider maps its memory then, and a verbs device
//! maps its queues) and before buffers are allocated or threads started, so that little but
//! the program and its libraries is mapped: every writable private page mapped then (data,
//! heap, the main thread's stack) is made resident too, which is what its first write would
//! do. (The verbs provider's own library, loaded when a device is opened, is not covered.)

use std::fmt;
use std::io;

use rustix::mm::{mlockall, munlockall, MlockAllFlags};

/// Why [`prefault_mappings`] did not map the process's pages.
#[derive(Debug)]
pub enum PrefaultError {
    /// `mlockall` refused: the mapped size is past `RLIMIT_MEMLOCK` for a process without
    /// `CAP_IPC_LOCK` (ENOMEM), or locking is not permitted (EPERM). Nothing was locked.
    Lock(io::Error),
    /// `munlockall` failed after the pages were locked; they stay locked (resident), which
    /// costs nothing more than they already do.
    Unlock(io::Error),
}

impl fmt::Display for PrefaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefaultError::Lock(e) => write!(
                f,
                "mlockall refused ({e}): RLIMIT_MEMLOCK is below the mapped size, \
                 or locking is not permitted"
            ),
            PrefaultError::Unlock(e) => write!(f, "munlockall failed ({e})"),
        }
    }
}

impl std::error::Error for PrefaultError {}

/// Maps every page currently mapped into the process (code, read-only data, data, heap,
/// the calling thread's stack) so that none of them costs a page fault later, and leaves
/// none locked. See the [module](self) for when to call it. It unlocks every page of the
/// process, so it must not be called once something else has locked memory on purpose.
///
/// ```
/// // A server's start: no device opened, nothing allocated yet.
/// if let Err(e) = rpcrdma_engine::prefault::prefault_mappings() {
///     eprintln!("server: the first Calls will page-fault: {e}");
/// }
/// ```
pub fn prefault_mappings() -> Result<(), PrefaultError> {
    mlockall(MlockAllFlags::CURRENT).map_err(|e| PrefaultError::Lock(e.into()))?;
    munlockall().map_err(|e| PrefaultError::Unlock(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kB of `field` ("Size", "Rss") in /proc/self/smaps for this program's code.
    fn code_kb(field: &str) -> u64 {
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_code = false;
        let mut total = 0;
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if first.contains('-') && !first.ends_with(':') {
                // A mapping's header: range, permissions, offset, device, inode, path.
                let perms = words.next().unwrap_or("");
                in_code = perms == "r-xp" && line.ends_with(exe);
            } else if in_code && first == format!("{field}:") {
                total += words.next().unwrap().parse::<u64>().unwrap();
            }
        }
        total
    }

    #[test]
    fn prefaulting_maps_the_code_and_leaves_nothing_locked() {
        match prefault_mappings() {
            Ok(()) => {
                // Every page of the code is mapped now.
                let size = code_kb("Size");
                assert!(size > 0, "no code mapping found");
                assert_eq!(code_kb("Rss"), size, "code pages left unmapped");
            }
            // Without the rights (an unprivileged run with a small RLIMIT_MEMLOCK), the
            // refusal is the typed error and the process goes on.
            Err(PrefaultError::Lock(_)) => {}
            Err(e) => panic!("{e}"),
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let locked = status
            .lines()
            .find_map(|l| l.strip_prefix("VmLck:"))
            .map(|v| {
                v.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap()
            })
            .unwrap();
        assert_eq!(locked, 0, "pages left locked");
    }
}
