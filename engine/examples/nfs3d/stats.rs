//! nfs3d's counters and the JSON report: the engine's counters summed over the workers
//! (engine/src/stats.rs; error counters grouped under `"errors"`, as `rpcrdma serve`
//! prints them), the workers' own, and nfs3d's (per-procedure counts, the duplicate
//! request cache, MOUNT, copies and dropped answers).

use std::sync::atomic::{AtomicU64, Ordering};

use rpcrdma_engine::stats::Snapshot;
use rpcrdma_engine::worker::WorkerStats;
use serde_json::{json, Map, Value};

use crate::drc::Drc;
use crate::mountd::MountStats;

/// NFSv3 procedures, 0..=21 (RFC 1813 §3.3).
pub const NFS3_PROCS: usize = 22;

/// The names of the NFSv3 procedures, by number.
pub const PROC_NAMES: [&str; NFS3_PROCS] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];

/// nfs3d's own counters, updated by the handlers and the I/O threads.
#[derive(Debug, Default)]
pub struct NfsStats {
    /// Calls received per procedure (replays from the cache included).
    pub calls: [AtomicU64; NFS3_PROCS],
    /// Procedures actually executed against the file system, per procedure.
    pub executed: [AtomicU64; NFS3_PROCS],
    /// Replies whose `nfsstat3` was not NFS3_OK.
    pub nfs_errors: AtomicU64,
    /// Replies whose `nfsstat3` was NFS3ERR_IO.
    pub io_errors: AtomicU64,
    /// GARBAGE_ARGS answers.
    pub garbage_args: AtomicU64,
    /// SYSTEM_ERR answers (an I/O thread failure, a cache wait that ended first).
    pub system_errs: AtomicU64,
    /// AUTH_ERROR answers (an AUTH_SYS credential that does not decode).
    pub auth_errors: AtomicU64,
    /// Argument bytes copied for an I/O thread because the engine could not lend them.
    pub args_copies: AtomicU64,
    /// READ results read into a buffer of our own and copied because the engine could not
    /// lend its registered buffer.
    pub bulk_copies: AtomicU64,
    /// Answers completed (sent).
    pub answered: AtomicU64,
    /// Answers dropped because their connection was gone.
    pub dropped: AtomicU64,
    /// Completions retried because the connection had no reply room at the time.
    pub retries: AtomicU64,
    /// GETATTR, ACCESS and LOOKUP answered on the worker from the kernel's caches.
    pub on_worker: AtomicU64,
    /// Those that needed more than the caches and went to an I/O thread.
    pub on_worker_missed: AtomicU64,
    /// Jobs run on the worker because the export's operations never wait for a device
    /// (`--memory-export`).
    pub on_worker_jobs: AtomicU64,
    /// AUTH_SYS Calls whose user or a group was squashed to the anonymous identity
    /// (`root_squash`, `all_squash`).
    pub squashed: AtomicU64,
    /// Calls without an AUTH_SYS credential, run as the anonymous identity.
    pub anonymous: AtomicU64,
    /// Answers that refused the caller: NFS3ERR_PERM, NFS3ERR_ACCES or NFS3ERR_ROFS.
    pub denied: AtomicU64,
    /// RDMA connections refused because their client is not allowed (`--allow`).
    pub refused_conns: AtomicU64,
    /// RDMA connections refused because `--max-conns` connections were live.
    pub refused_max_conns: AtomicU64,
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// The engine's counters as JSON, the error counters grouped under `"errors"`
/// (`Snapshot::write_json`, as `rpcrdma serve` prints them).
pub fn snapshot_json(s: &Snapshot) -> Value {
    serde_json::from_str(&s.to_json()).expect("the engine writes a snapshot as valid JSON")
}

impl NfsStats {
    /// The counters as JSON.
    pub fn json(&self) -> Value {
        let per = |a: &[AtomicU64; NFS3_PROCS]| {
            let mut m = Map::new();
            for (name, c) in PROC_NAMES.iter().zip(a.iter()) {
                m.insert((*name).to_string(), json!(get(c)));
            }
            Value::Object(m)
        };
        json!({
            "calls": per(&self.calls),
            "executed": per(&self.executed),
            "nfs_errors": get(&self.nfs_errors),
            "io_errors": get(&self.io_errors),
            "garbage_args": get(&self.garbage_args),
            "system_errs": get(&self.system_errs),
            "auth_errors": get(&self.auth_errors),
            "args_copies": get(&self.args_copies),
            "bulk_copies": get(&self.bulk_copies),
            "answered": get(&self.answered),
            "dropped": get(&self.dropped),
            "retries": get(&self.retries),
            "on_worker": get(&self.on_worker),
            "on_worker_missed": get(&self.on_worker_missed),
            "on_worker_jobs": get(&self.on_worker_jobs),
            "squashed": get(&self.squashed),
            "anonymous": get(&self.anonymous),
            "denied": get(&self.denied),
            "refused_conns": get(&self.refused_conns),
            "refused_max_conns": get(&self.refused_max_conns),
        })
    }

    /// Counts an answer's `nfsstat3`: an error, an I/O error, a refusal of the caller.
    pub fn count_status(&self, status: u32) {
        if status == 0 {
            return;
        }
        self.nfs_errors.fetch_add(1, Ordering::Relaxed);
        match status {
            5 => {
                self.io_errors.fetch_add(1, Ordering::Relaxed);
            }
            // NFS3ERR_PERM, NFS3ERR_ACCES, NFS3ERR_ROFS (RFC 1813 §2.6).
            1 | 13 | 30 => {
                self.denied.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// The duplicate request cache's counters as JSON.
pub fn drc_json(d: &Drc) -> Value {
    let (entries, bytes) = d.usage();
    json!({
        "hits": get(&d.stats.hits),
        "misses": get(&d.stats.misses),
        "waits": get(&d.stats.waits),
        "wait_timeouts": get(&d.stats.wait_timeouts),
        "evictions": get(&d.stats.evictions),
        "entries": entries,
        "bytes": bytes,
    })
}

/// MOUNT's counters as JSON.
pub fn mountd_json(m: &MountStats) -> Value {
    json!({
        "conns": get(&m.conns),
        "refused": get(&m.refused),
        "calls": get(&m.calls),
        "mounts": get(&m.mounts),
        "denied": get(&m.denied),
        "bad_records": get(&m.bad_records),
    })
}

/// The whole report: the engine's counters summed over the connections (`engine`), the
/// workers' own, and nfs3d's: `{"engine": {...}, "workers": [...], "nfs": {...}, "drc": {...},
/// "mountd": {...}}` (`mountd` null when there is none).
pub fn report(
    engine: &Snapshot,
    workers: &[WorkerStats],
    nfs: &NfsStats,
    drc: &Drc,
    mountd: Option<&MountStats>,
    handle_searches: u64,
    handles_opened: u64,
) -> Value {
    let mut nfs = nfs.json();
    nfs["handle_searches"] = json!(handle_searches);
    nfs["handles_opened"] = json!(handles_opened);
    json!({
        "engine": snapshot_json(engine),
        "workers": workers.iter().map(|w| json!({
            "core": w.core, "loops": w.loops, "busy_loops": w.busy_loops, "naps": w.naps,
            "waits": w.waits, "wakeups": w.wakeups,
            "conns": w.conns, "conns_adopted": w.conns_adopted, "conns_dead": w.conns_dead,
        })).collect::<Vec<_>>(),
        "nfs": nfs,
        "drc": drc_json(drc),
        "mountd": mountd.map(mountd_json),
    })
}
