//! Open and lock state (RFC 8881 §8.2, §9): the stateids OPEN and LOCK hand out, share
//! reservations (§9.7), and the byte-range locks behind lock stateids ([`crate::locks`]).
//!
//! A stateid's `other` is this server instance's boot time and a counter, so a stateid
//! of an earlier instance is never taken for one of this. Its `seqid` starts at 1 and
//! grows with every change of the state (§8.2.2); a stateid whose seqid is 0 means the
//! current one (§8.2.2), an older one is NFS4ERR_OLD_STATEID.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::locks::{FileKey, Kind, LockError, Locks, Owner};
use crate::session::status;

/// A `stateid4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stateid {
    pub seqid: u32,
    pub other: [u8; 12],
}

impl Stateid {
    /// The anonymous stateid (all zeros) and the READ bypass stateid (all ones, §8.2.3):
    /// I/O outside any open, allowed as the caller's permissions allow.
    pub fn is_special(&self) -> bool {
        (self.other == [0; 12] && (self.seqid == 0 || self.seqid == 1))
            || (self.other == [0xff; 12] && self.seqid == u32::MAX)
    }
}

/// OPEN4_SHARE_ACCESS_READ and _WRITE (§18.16.3).
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_WRITE: u32 = 2;

#[derive(Debug)]
struct Open {
    clientid: u64,
    owner: Vec<u8>,
    file: FileKey,
    access: u32,
    deny: u32,
    seqid: u32,
}

#[derive(Debug)]
struct Lock {
    owner: Owner,
    file: FileKey,
    /// The open stateid's `other` it was made from.
    open: [u8; 12],
    seqid: u32,
}

/// A read delegation (§10.4): the client may serve opens for reading and cache the
/// file's data until it is recalled.
#[derive(Debug)]
struct Deleg {
    clientid: u64,
    file: FileKey,
    fh: Vec<u8>,
    seqid: u32,
    /// When its recall was asked for.
    recalled: Option<Instant>,
}

#[derive(Debug)]
enum State {
    Open(Open),
    Lock(Lock),
    Deleg(Deleg),
}

/// A delegation to recall: CB_RECALL to a session of `clientid` (§20.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    pub clientid: u64,
    pub stateid: Stateid,
    pub fh: Vec<u8>,
}

/// How long a recalled delegation may stay unreturned before it is revoked (one lease,
/// §10.4.6: the server may revoke a delegation the client does not return).
pub const REVOKE_AFTER: Duration = Duration::from_secs(90);

/// What a READ or WRITE stateid stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// A special stateid: the caller's permissions alone decide.
    Anonymous,
    /// An open (or a lock made from one) with this share access.
    Opened { access: u32 },
}

/// Every open and lock state of the server.
#[derive(Debug)]
pub struct Files {
    boot: u32,
    next: u64,
    states: HashMap<[u8; 12], State>,
    /// The byte-range locks.
    pub locks: Locks,
    /// Delegations whose recall is to be sent, for the polling thread.
    pub recalls: Vec<Recall>,
    /// Delegations granted, recalled, returned and revoked so far.
    pub delegations: [u64; 4],
}

impl Files {
    /// No state; `boot` marks this instance's stateids.
    pub fn new(boot: u32) -> Files {
        Files {
            boot,
            next: 1,
            states: HashMap::new(),
            locks: Locks::new(),
            recalls: Vec::new(),
            delegations: [0; 4],
        }
    }

    /// Opens and lock states held.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    fn fresh(&mut self) -> [u8; 12] {
        let mut o = [0u8; 12];
        o[..4].copy_from_slice(&self.boot.to_be_bytes());
        o[4..].copy_from_slice(&self.next.to_be_bytes());
        self.next += 1;
        o
    }

    /// The state `sid` names, its seqid checked (§8.2.2).
    fn get(&self, sid: &Stateid) -> Result<&State, u32> {
        let s = self.states.get(&sid.other).ok_or(status::BAD_STATEID)?;
        let cur = match s {
            State::Open(o) => o.seqid,
            State::Lock(l) => l.seqid,
            State::Deleg(d) => d.seqid,
        };
        match sid.seqid {
            0 => Ok(s),
            q if q == cur => Ok(s),
            q if q < cur => Err(status::OLD_STATEID),
            _ => Err(status::BAD_STATEID),
        }
    }

    /// OPEN (§18.16): the owner's open of `file`, made or upgraded with `access` and
    /// `deny`; NFS4ERR_SHARE_DENIED when another owner's open conflicts (§9.7).
    pub fn open(
        &mut self,
        clientid: u64,
        owner: &[u8],
        file: FileKey,
        access: u32,
        deny: u32,
    ) -> Result<Stateid, u32> {
        if access & ACCESS_WRITE != 0 {
            self.breaks(clientid, file)?;
        }
        let mut mine = None;
        for (k, s) in &self.states {
            let State::Open(o) = s else { continue };
            if o.file != file {
                continue;
            }
            if o.clientid == clientid && o.owner == owner {
                mine = Some(*k);
            } else if access & o.deny != 0 || deny & o.access != 0 {
                return Err(status::SHARE_DENIED);
            }
        }
        if let Some(k) = mine {
            if let Some(State::Open(o)) = self.states.get_mut(&k) {
                o.access |= access;
                o.deny |= deny;
                o.seqid = o.seqid.wrapping_add(1).max(1);
                return Ok(Stateid {
                    seqid: o.seqid,
                    other: k,
                });
            }
        }
        let other = self.fresh();
        self.states.insert(
            other,
            State::Open(Open {
                clientid,
                owner: owner.to_vec(),
                file,
                access,
                deny,
                seqid: 1,
            }),
        );
        Ok(Stateid { seqid: 1, other })
    }

    /// OPEN_DOWNGRADE (§18.18): access and deny reduced to a subset of what they were.
    pub fn downgrade(&mut self, sid: &Stateid, access: u32, deny: u32) -> Result<Stateid, u32> {
        let State::Open(_) = self.get(sid)? else {
            return Err(status::BAD_STATEID);
        };
        let Some(State::Open(o)) = self.states.get_mut(&sid.other) else {
            return Err(status::BAD_STATEID);
        };
        if access == 0 || access & !o.access != 0 || deny & !o.deny != 0 {
            return Err(status::INVAL);
        }
        o.access = access;
        o.deny = deny;
        o.seqid = o.seqid.wrapping_add(1).max(1);
        Ok(Stateid {
            seqid: o.seqid,
            other: sid.other,
        })
    }

    /// CLOSE (§18.2): the open goes, with the lock states made from it and their locks.
    pub fn close(&mut self, sid: &Stateid) -> Result<(), u32> {
        let State::Open(o) = self.get(sid)? else {
            return Err(status::BAD_STATEID);
        };
        let file = o.file;
        self.states.remove(&sid.other);
        let locks: Vec<([u8; 12], Owner)> = self
            .states
            .iter()
            .filter_map(|(k, s)| match s {
                State::Lock(l) if l.open == sid.other => Some((*k, l.owner.clone())),
                _ => None,
            })
            .collect();
        for (k, owner) in locks {
            self.locks.drop_owner_file(file, &owner);
            self.states.remove(&k);
        }
        Ok(())
    }

    /// Checks a READ's or WRITE's stateid against the file it names (§8.2.5):
    /// NFS4ERR_BAD_STATEID for another file's, NFS4ERR_OPENMODE for a WRITE through a
    /// read-only open.
    pub fn io(&self, sid: &Stateid, file: FileKey, write: bool) -> Result<Io, u32> {
        if sid.is_special() {
            return Ok(Io::Anonymous);
        }
        let (f, access) = match self.get(sid)? {
            State::Open(o) => (o.file, o.access),
            State::Deleg(d) => (d.file, ACCESS_READ),
            State::Lock(l) => match self.states.get(&l.open) {
                Some(State::Open(o)) => (l.file, o.access),
                _ => return Err(status::BAD_STATEID),
            },
        };
        if f != file {
            return Err(status::BAD_STATEID);
        }
        if write && access & ACCESS_WRITE == 0 {
            return Err(status::OPENMODE);
        }
        Ok(Io::Opened { access })
    }

    /// LOCK (§18.10) by a new lock owner, from its open's stateid: a lock stateid.
    pub fn lock_new(
        &mut self,
        open: &Stateid,
        owner: Owner,
        file: FileKey,
        kind: Kind,
        range: (u64, u64),
    ) -> Result<Stateid, Result<u32, crate::locks::Denied>> {
        let State::Open(o) = self.get(open).map_err(Ok)? else {
            return Err(Ok(status::BAD_STATEID));
        };
        if o.file != file {
            return Err(Ok(status::BAD_STATEID));
        }
        check_mode(o.access, kind).map_err(Ok)?;
        // An owner that already has a lock state on the file uses it (§9.1.4).
        let existing = self.states.iter().find_map(|(k, s)| match s {
            State::Lock(l) if l.owner == owner && l.file == file => Some(*k),
            _ => None,
        });
        self.locks
            .lock(file, &owner, kind, range.0, range.1)
            .map_err(lock_err)?;
        let other = match existing {
            Some(k) => k,
            None => {
                let k = self.fresh();
                self.states.insert(
                    k,
                    State::Lock(Lock {
                        owner,
                        file,
                        open: open.other,
                        seqid: 0,
                    }),
                );
                k
            }
        };
        Ok(self.bump(other))
    }

    fn bump(&mut self, other: [u8; 12]) -> Stateid {
        let seqid = match self.states.get_mut(&other) {
            Some(State::Lock(l)) => {
                l.seqid = l.seqid.wrapping_add(1).max(1);
                l.seqid
            }
            Some(State::Open(o)) => o.seqid,
            Some(State::Deleg(d)) => d.seqid,
            None => 0,
        };
        Stateid { seqid, other }
    }

    /// LOCK by a lock owner that has a lock stateid.
    pub fn lock_more(
        &mut self,
        sid: &Stateid,
        file: FileKey,
        kind: Kind,
        range: (u64, u64),
    ) -> Result<Stateid, Result<u32, crate::locks::Denied>> {
        let State::Lock(l) = self.get(sid).map_err(Ok)? else {
            return Err(Ok(status::BAD_STATEID));
        };
        if l.file != file {
            return Err(Ok(status::BAD_STATEID));
        }
        let owner = l.owner.clone();
        if let Some(State::Open(o)) = self.states.get(&l.open) {
            check_mode(o.access, kind).map_err(Ok)?;
        }
        self.locks
            .lock(file, &owner, kind, range.0, range.1)
            .map_err(lock_err)?;
        Ok(self.bump(sid.other))
    }

    /// LOCKU (§18.12).
    pub fn unlock(
        &mut self,
        sid: &Stateid,
        file: FileKey,
        range: (u64, u64),
    ) -> Result<Stateid, u32> {
        let State::Lock(l) = self.get(sid)? else {
            return Err(status::BAD_STATEID);
        };
        if l.file != file {
            return Err(status::BAD_STATEID);
        }
        let owner = l.owner.clone();
        self.locks
            .unlock(file, &owner, range.0, range.1)
            .map_err(|_| status::INVAL)?;
        Ok(self.bump(sid.other))
    }

    /// TEST_STATEID's answer for one stateid (§18.48).
    pub fn test(&self, sid: &Stateid) -> u32 {
        if sid.is_special() {
            return status::BAD_STATEID;
        }
        self.get(sid).map_or_else(|e| e, |_| status::OK)
    }

    /// FREE_STATEID (§18.38): a lock state without locks goes; one with locks, or an
    /// open, is NFS4ERR_LOCKS_HELD.
    pub fn free(&mut self, sid: &Stateid) -> Result<(), u32> {
        match self.get(sid)? {
            State::Lock(l) if !self.locks.holds(l.file, &l.owner) => {
                self.states.remove(&sid.other);
                Ok(())
            }
            _ => Err(status::LOCKS_HELD),
        }
    }

    /// Every state of a client (DESTROY_CLIENTID, a client restarted).
    pub fn drop_client(&mut self, clientid: u64) {
        self.locks.drop_client(clientid);
        self.states.retain(|_, s| match s {
            State::Open(o) => o.clientid != clientid,
            State::Lock(l) => l.owner.clientid != clientid,
            State::Deleg(d) => d.clientid != clientid,
        });
    }

    /// A read delegation of `file` for `clientid` (OPEN, §10.4), when no other client has
    /// it open for writing, no delegation of it is being recalled, and the client holds
    /// none of it yet.
    pub fn grant(&mut self, clientid: u64, file: FileKey, fh: &[u8]) -> Option<Stateid> {
        let blocked = self.states.values().any(|s| match s {
            State::Open(o) => {
                o.file == file && o.clientid != clientid && o.access & ACCESS_WRITE != 0
            }
            State::Deleg(d) => d.file == file && (d.clientid == clientid || d.recalled.is_some()),
            State::Lock(_) => false,
        });
        if blocked {
            return None;
        }
        let other = self.fresh();
        self.states.insert(
            other,
            State::Deleg(Deleg {
                clientid,
                file,
                fh: fh.to_vec(),
                seqid: 1,
                recalled: None,
            }),
        );
        self.delegations[0] += 1;
        Some(Stateid { seqid: 1, other })
    }

    /// A change of `file` by `clientid` (an open for writing, a WRITE, SETATTR, REMOVE or
    /// RENAME): other clients' delegations of it are recalled (§10.4.4), and the change
    /// waits, NFS4ERR_DELAY, until they are returned, or revoked after [`REVOKE_AFTER`].
    pub fn breaks(&mut self, clientid: u64, file: FileKey) -> Result<(), u32> {
        let now = Instant::now();
        let mut waiting = false;
        let mut revoked = Vec::new();
        for (k, s) in self.states.iter_mut() {
            let State::Deleg(d) = s else { continue };
            if d.file != file || d.clientid == clientid {
                continue;
            }
            match d.recalled {
                Some(t) if now.duration_since(t) > REVOKE_AFTER => revoked.push(*k),
                Some(_) => waiting = true,
                None => {
                    d.recalled = Some(now);
                    self.recalls.push(Recall {
                        clientid: d.clientid,
                        stateid: Stateid {
                            seqid: d.seqid,
                            other: *k,
                        },
                        fh: d.fh.clone(),
                    });
                    self.delegations[1] += 1;
                    waiting = true;
                }
            }
        }
        self.delegations[3] += revoked.len() as u64;
        for k in revoked {
            self.states.remove(&k);
        }
        if waiting {
            Err(status::DELAY)
        } else {
            Ok(())
        }
    }

    /// DELEGRETURN (§18.6).
    pub fn delegreturn(&mut self, sid: &Stateid) -> Result<(), u32> {
        let State::Deleg(_) = self.get(sid)? else {
            return Err(status::BAD_STATEID);
        };
        self.states.remove(&sid.other);
        self.delegations[2] += 1;
        Ok(())
    }

    /// Checks that `sid` is a delegation of `file` held by `clientid` (an OPEN claiming
    /// it: CLAIM_DELEGATE_CUR, CLAIM_DELEG_CUR_FH).
    pub fn delegated(&self, sid: &Stateid, clientid: u64, file: FileKey) -> Result<(), u32> {
        match self.get(sid)? {
            State::Deleg(d) if d.clientid == clientid && d.file == file => Ok(()),
            _ => Err(status::BAD_STATEID),
        }
    }
}

/// A READ lock needs the open to read, a WRITE lock to write (§18.10.4: NFS4ERR_OPENMODE).
fn check_mode(access: u32, kind: Kind) -> Result<(), u32> {
    let need = match kind {
        Kind::Read => ACCESS_READ,
        Kind::Write => ACCESS_WRITE,
    };
    if access & need == 0 {
        Err(status::OPENMODE)
    } else {
        Ok(())
    }
}

fn lock_err(e: LockError) -> Result<u32, crate::locks::Denied> {
    match e {
        LockError::Invalid => Ok(status::INVAL),
        LockError::Denied(d) => Err(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_share_and_deny_and_close_with_their_locks() {
        let mut f = Files::new(5);
        let file = (1, 2);
        let a = f.open(1, b"a", file, ACCESS_READ, 0).unwrap();
        assert_eq!(a.seqid, 1);
        // Another owner denying reads conflicts with a's read access.
        assert_eq!(
            f.open(2, b"b", file, ACCESS_READ, ACCESS_READ),
            Err(status::SHARE_DENIED)
        );
        // The same owner upgrades: the same state, the next seqid.
        let a2 = f.open(1, b"a", file, ACCESS_WRITE, 0).unwrap();
        assert_eq!((a2.other, a2.seqid), (a.other, 2));
        assert_eq!(f.io(&a, file, false), Err(status::OLD_STATEID));
        assert_eq!(f.io(&a2, file, true), Ok(Io::Opened { access: 3 }));
        assert_eq!(f.io(&a2, (9, 9), true), Err(status::BAD_STATEID));
        let owner = Owner {
            clientid: 1,
            name: b"l".to_vec(),
        };
        let l = f
            .lock_new(&a2, owner.clone(), file, Kind::Write, (0, 10))
            .unwrap();
        assert_eq!(f.test(&l), status::OK);
        assert_eq!(f.free(&l), Err(status::LOCKS_HELD));
        f.close(&a2).unwrap();
        assert_eq!(f.test(&l), status::BAD_STATEID);
        assert!(f.locks.is_empty());
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn a_read_only_open_takes_no_write_lock_and_downgrade_narrows() {
        let mut f = Files::new(5);
        let file = (1, 3);
        let s = f.open(1, b"a", file, 3, 0).unwrap();
        let d = f.downgrade(&s, ACCESS_READ, 0).unwrap();
        assert_eq!(f.downgrade(&d, 3, 0), Err(status::INVAL));
        let owner = Owner {
            clientid: 1,
            name: b"l".to_vec(),
        };
        assert_eq!(
            f.lock_new(&d, owner, file, Kind::Write, (0, 1)),
            Err(Ok(status::OPENMODE))
        );
        assert_eq!(f.io(&d, file, true), Err(status::OPENMODE));
        f.drop_client(1);
        assert_eq!(f.len(), 0);
    }
}
