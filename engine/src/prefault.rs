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

/// The most the process may have mapped (its virtual size) for [`prefault_mappings`] to map
/// it all. More means it is past its start: a fabric's memory or buffers are mapped, which
/// must not all be made resident (the soft provider maps arenas of hundreds of MiB, mostly
/// never touched).
pub const MAX_MAPPED: u64 = 1 << 30;

/// Why [`prefault_mappings`] did not map the process's pages.
#[derive(Debug)]
pub enum PrefaultError {
    /// The process has `mapped` bytes mapped, more than [`MAX_MAPPED`]: too late to map
    /// them all. Nothing was done.
    TooLate {
        /// The process's virtual size (`VmSize`).
        mapped: u64,
    },
    /// Its virtual size could not be read from `/proc/self/status`. Nothing was done.
    Status(io::Error),
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
            PrefaultError::TooLate { mapped } => write!(
                f,
                "{} MiB mapped already, past a start's (at most {} MiB): not mapped",
                mapped >> 20,
                MAX_MAPPED >> 20
            ),
            PrefaultError::Status(e) => write!(f, "cannot read /proc/self/status: {e}"),
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
/// none locked. See the [module](self) for when to call it: a process with more than
/// [`MAX_MAPPED`] mapped is refused ([`PrefaultError::TooLate`]). It unlocks every page of
/// the process, so it must not be called once something else has locked memory on purpose.
///
/// ```
/// // A server's start: no device opened, nothing allocated yet.
/// if let Err(e) = rpcrdma_engine::prefault::prefault_mappings() {
///     eprintln!("server: the first Calls will page-fault: {e}");
/// }
/// ```
pub fn prefault_mappings() -> Result<(), PrefaultError> {
    let mapped = virtual_size().map_err(PrefaultError::Status)?;
    if mapped > MAX_MAPPED {
        return Err(PrefaultError::TooLate { mapped });
    }
    mlockall(MlockAllFlags::CURRENT).map_err(|e| PrefaultError::Lock(e.into()))?;
    munlockall().map_err(|e| PrefaultError::Unlock(e.into()))
}

/// The process's virtual size in bytes (`VmSize` in /proc/self/status).
fn virtual_size() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb << 10)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no VmSize"))
}
