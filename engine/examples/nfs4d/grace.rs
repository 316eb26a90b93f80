//! The grace period after a restart (RFC 8881 §8.4.2): which clients had state before it,
//! kept in stable storage, and the time they have to reclaim it.
//!
//! A client is recorded (its owner, the `co_ownerid` of EXCHANGE_ID, one hex line in
//! `STATE_DIR/nfs4d-clients`) when its first session is created, and forgotten at
//! DESTROY_CLIENTID. A server that starts with records is in its grace period: only the
//! recorded clients may reclaim their opens (OPEN with CLAIM_PREVIOUS) and locks (LOCK
//! with `reclaim`), and a new open, lock, REMOVE or RENAME is NFS4ERR_GRACE, until every
//! recorded client has sent RECLAIM_COMPLETE or the period is over (§8.4.2.1). A server
//! that starts without records has nothing to reclaim and no grace period.

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Clients' records and the grace period.
#[derive(Debug)]
pub struct Grace {
    path: Option<PathBuf>,
    records: BTreeSet<Vec<u8>>,
    /// Owners recorded before this start that have not completed their reclaim.
    reclaimable: HashSet<Vec<u8>>,
    until: Option<Instant>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Grace {
    /// No records and no grace period (a server without stable storage).
    pub fn none() -> Grace {
        Grace {
            path: None,
            records: BTreeSet::new(),
            reclaimable: HashSet::new(),
            until: None,
        }
    }

    /// The records in `path` (none when it does not exist), and a grace period of
    /// `period` if there are any.
    pub fn load(path: PathBuf, period: Duration) -> Grace {
        let records: BTreeSet<Vec<u8>> = std::fs::read_to_string(&path)
            .map(|s| s.lines().filter_map(|l| unhex(l.trim())).collect())
            .unwrap_or_default();
        let until = (!records.is_empty() && !period.is_zero()).then(|| Instant::now() + period);
        Grace {
            path: Some(path),
            reclaimable: records.iter().cloned().collect(),
            records,
            until,
        }
    }

    /// Whether the grace period lasts.
    pub fn in_grace(&mut self) -> bool {
        if self.until.is_some_and(|u| Instant::now() >= u) || self.reclaimable.is_empty() {
            self.until = None;
            self.reclaimable.clear();
        }
        self.until.is_some()
    }

    /// Clients still to reclaim.
    pub fn reclaiming(&self) -> usize {
        self.reclaimable.len()
    }

    /// Whether `owner` may reclaim its state now.
    pub fn may_reclaim(&mut self, owner: &[u8]) -> bool {
        self.in_grace() && self.reclaimable.contains(owner)
    }

    /// `owner` completed its reclaim (RECLAIM_COMPLETE): the period ends when every
    /// recorded client has.
    pub fn reclaim_complete(&mut self, owner: &[u8]) {
        self.reclaimable.remove(owner);
        self.in_grace();
    }

    /// `owner` has state now: recorded.
    pub fn confirmed(&mut self, owner: &[u8]) {
        if self.records.insert(owner.to_vec()) {
            self.save();
        }
    }

    /// `owner` has no state any more (DESTROY_CLIENTID): forgotten.
    pub fn destroyed(&mut self, owner: &[u8]) {
        if self.records.remove(owner) {
            self.save();
        }
        self.reclaim_complete(owner);
    }

    /// Writes the records (a new file renamed over the old: never half written).
    fn save(&self) {
        let Some(path) = &self.path else { return };
        let tmp = path.with_extension("new");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            for r in &self.records {
                writeln!(f, "{}", hex(r))?;
            }
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        // As the server: the thread acts as the caller whose COMPOUND recorded this.
        if let Err(e) = crate::identity::as_server(write).and_then(|r| r) {
            eprintln!("nfs4d: client records {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_clients_reclaim_after_a_restart_until_they_are_done() {
        let path = std::env::temp_dir().join(format!("nfs4d-grace-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut g = Grace::load(path.clone(), Duration::from_secs(60));
        assert!(!g.in_grace(), "nothing recorded: no grace period");
        g.confirmed(b"client-a");
        g.confirmed(b"client-b");
        g.confirmed(b"client-c");
        g.destroyed(b"client-c");
        // Restarted.
        let mut g = Grace::load(path.clone(), Duration::from_secs(60));
        assert!(g.in_grace());
        assert!(g.may_reclaim(b"client-a") && g.may_reclaim(b"client-b"));
        assert!(!g.may_reclaim(b"client-c"), "destroyed before the restart");
        g.reclaim_complete(b"client-a");
        assert!(!g.may_reclaim(b"client-a") && g.in_grace());
        g.reclaim_complete(b"client-b");
        assert!(
            !g.in_grace(),
            "every client reclaimed: the period ends early"
        );
        // A period that runs out.
        let mut g = Grace::load(path.clone(), Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!g.in_grace() && !g.may_reclaim(b"client-a"));
        let _ = std::fs::remove_file(&path);
    }
}
