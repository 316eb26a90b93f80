//! Byte-range locks (RFC 8881 §9, LOCK §18.10, LOCKT §18.11, LOCKU §18.12): the
//! in-memory table behind them, with the POSIX semantics the Linux client expects for
//! `fcntl` locks: a lock-owner's own locks never conflict with it, a new lock replaces
//! what the owner held under it (upgrade or downgrade in place, §9.3), and touching
//! ranges of one owner and kind merge. Ranges are kept inclusive, `[start, end]`, with
//! `end == u64::MAX` for "to end of file" (§9.2), so no arithmetic can overflow.

use std::collections::HashMap;

/// A file the locks are on (device, inode).
pub type FileKey = (u64, u64);

/// Who holds a lock: the client ID and the lock-owner's opaque name (`lock_owner4`;
/// byte-range locks belong to lock-owners, RFC 8881 §9.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The client ID the lock-owner belongs to.
    pub clientid: u64,
    /// The lock-owner's opaque name, unique within the client.
    pub name: Vec<u8>,
}

/// READ_LT / WRITE_LT (`nfs_lock_type4`, RFC 8881 §18.10; READW_LT and WRITEW_LT map to
/// these by the caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A shared lock: other owners' read locks may overlap it.
    Read,
    /// An exclusive lock: no other owner's lock may overlap it.
    Write,
}

/// A lock that stands in the way: what LOCK4denied (RFC 8881 §18.10.2) and LOCKT report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    /// Where the conflicting lock starts.
    pub offset: u64,
    /// Its length; `u64::MAX` for a lock to end of file (§18.10.4).
    pub length: u64,
    /// Its kind.
    pub kind: Kind,
    /// Who holds it.
    pub owner: Owner,
}

/// Why LOCK, LOCKT or LOCKU failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockError {
    /// NFS4ERR_INVAL: a zero length, or an offset and length past 2^64 - 1 with a length
    /// other than all ones (RFC 8881 §18.10.4; LOCKT and LOCKU alike).
    Invalid,
    /// NFS4ERR_DENIED: another owner's lock conflicts (§18.10.4).
    Denied(Denied),
}

/// One held range, inclusive: `[start, end]`, `end == u64::MAX` up to end of file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    kind: Kind,
    owner: Owner,
}

impl Range {
    /// Whether it shares a byte with `[start, end]`.
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    /// The range as LOCK4denied reports it.
    fn denied(&self) -> Denied {
        let length = if self.end == u64::MAX {
            u64::MAX
        } else {
            // end < MAX and start <= end: at most MAX, no overflow.
            self.end - self.start + 1
        };
        Denied {
            offset: self.start,
            length,
            kind: self.kind,
            owner: self.owner.clone(),
        }
    }
}

/// The byte-range locks of every file, each file's ranges sorted by `(start, end)`.
/// A file with no locks has no entry. Per owner, ranges never overlap, and two ranges of
/// one owner and kind never touch (they are merged).
#[derive(Default, Debug)]
pub struct Locks {
    files: HashMap<FileKey, Vec<Range>>,
}

/// `[offset, offset + length)` as an inclusive range, or NFS4ERR_INVAL (RFC 8881
/// §18.10.4): length 0 is invalid, all ones means to end of file, and otherwise the
/// range must end at or before 2^64 - 1.
fn inclusive(offset: u64, length: u64) -> Result<(u64, u64), LockError> {
    match length {
        0 => Err(LockError::Invalid),
        u64::MAX => Ok((offset, u64::MAX)),
        _ => match offset.checked_add(length) {
            // sum >= length >= 1, no underflow.
            Some(sum) => Ok((offset, sum - 1)),
            None => Err(LockError::Invalid),
        },
    }
}

/// Takes `[start, end]` out of `owner`'s ranges, splitting those that stick out on both
/// sides; `ranges` stays sorted.
fn carve(ranges: &mut Vec<Range>, owner: &Owner, start: u64, end: u64) {
    if !ranges
        .iter()
        .any(|r| r.owner == *owner && r.overlaps(start, end))
    {
        return;
    }
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges.drain(..) {
        if r.owner != *owner || !r.overlaps(start, end) {
            out.push(r);
            continue;
        }
        if r.start < start {
            // start > r.start >= 0: no underflow.
            out.push(Range {
                end: start - 1,
                ..r.clone()
            });
        }
        if r.end > end {
            // end < r.end <= MAX: no overflow.
            out.push(Range {
                start: end + 1,
                ..r
            });
        }
    }
    out.sort_by_key(|r| (r.start, r.end));
    *ranges = out;
}

impl Locks {
    /// An empty table.
    pub fn new() -> Locks {
        Locks::default()
    }

    /// LOCK (RFC 8881 §18.10): takes `[offset, offset + length)` of `kind` for `owner` on
    /// `file`. POSIX semantics: an owner's own locks never conflict with it; what it held
    /// under the range is replaced (upgrade or downgrade in place, §9.3: a Read lock inside
    /// a Write range splits the write range), and its touching or overlapping ranges of
    /// the same kind merge. Any other owner's Write lock overlapping, or any other owner's
    /// lock overlapping when asking Write, refuses the request with the first (lowest
    /// offset) such lock, `Err(Denied)`. Atomic: on error nothing changes.
    pub fn lock(
        &mut self,
        file: FileKey,
        owner: &Owner,
        kind: Kind,
        offset: u64,
        length: u64,
    ) -> Result<(), LockError> {
        if let Some(d) = self.test(file, owner, kind, offset, length)? {
            return Err(LockError::Denied(d));
        }
        let (start, end) = inclusive(offset, length)?;
        let ranges = self.files.entry(file).or_default();
        // The owner's ranges of this kind holding the bytes just before and just after
        // merge with the new one; nothing else of the owner's lies in between.
        let mine = |at: u64| {
            let held = |r: &&Range| r.owner == *owner && r.kind == kind && r.overlaps(at, at);
            ranges.iter().find(held)
        };
        let (before, after) = (start.checked_sub(1), end.checked_add(1));
        let lo = before.and_then(mine).map_or(start, |r| r.start);
        let hi = after.and_then(mine).map_or(end, |r| r.end);
        carve(ranges, owner, lo, hi);
        let owner = owner.clone();
        let new = Range {
            start: lo,
            end: hi,
            kind,
            owner,
        };
        let at = ranges.partition_point(|r| (r.start, r.end) <= (lo, hi));
        ranges.insert(at, new);
        Ok(())
    }

    /// LOCKT (RFC 8881 §18.11): the first lock of another owner that would conflict with
    /// `kind` on `[offset, offset + length)`, if any; `Err(Invalid)` for a bad range.
    pub fn test(
        &self,
        file: FileKey,
        owner: &Owner,
        kind: Kind,
        offset: u64,
        length: u64,
    ) -> Result<Option<Denied>, LockError> {
        let (start, end) = inclusive(offset, length)?;
        // Another owner's Write overlapping, or anything of another owner overlapping a
        // Write (§9.1); the ranges are sorted, so the first found starts lowest.
        let clash = |r: &&Range| {
            r.owner != *owner
                && r.overlaps(start, end)
                && (kind == Kind::Write || r.kind == Kind::Write)
        };
        let ranges = self.files.get(&file).map_or(&[][..], Vec::as_slice);
        Ok(ranges.iter().find(clash).map(Range::denied))
    }

    /// LOCKU (RFC 8881 §18.12): releases `[offset, offset + length)` of `owner`'s locks on
    /// `file`, splitting ranges that stick out on both sides; unlocking a range not held is
    /// not an error.
    pub fn unlock(
        &mut self,
        file: FileKey,
        owner: &Owner,
        offset: u64,
        length: u64,
    ) -> Result<(), LockError> {
        let (start, end) = inclusive(offset, length)?;
        if let Some(ranges) = self.files.get_mut(&file) {
            carve(ranges, owner, start, end);
            if ranges.is_empty() {
                self.files.remove(&file);
            }
        }
        Ok(())
    }

    /// Whether `owner` holds any lock on `file` (RELEASE_LOCKOWNER and FREE_STATEID answer
    /// NFS4ERR_LOCKS_HELD then; FREE_STATEID is RFC 8881 §18.38).
    pub fn holds(&self, file: FileKey, owner: &Owner) -> bool {
        self.files
            .get(&file)
            .is_some_and(|v| v.iter().any(|r| r.owner == *owner))
    }

    /// Whether `owner` holds any lock on any file.
    pub fn holds_any(&self, owner: &Owner) -> bool {
        self.files.values().flatten().any(|r| r.owner == *owner)
    }

    /// Drops every lock of every owner of client `clientid` (its lease expiring, or
    /// DESTROY_CLIENTID, RFC 8881 §18.50); returns how many ranges went.
    pub fn drop_client(&mut self, clientid: u64) -> usize {
        let mut dropped = 0;
        self.files.retain(|_, v| {
            let before = v.len();
            v.retain(|r| r.owner.clientid != clientid);
            dropped += before - v.len();
            !v.is_empty()
        });
        dropped
    }

    /// Drops every lock `owner` holds on `file` (CLOSE of its open, RFC 8881 §18.2, or
    /// FREE_STATEID after LOCKU).
    pub fn drop_owner_file(&mut self, file: FileKey, owner: &Owner) {
        if let Some(ranges) = self.files.get_mut(&file) {
            ranges.retain(|r| r.owner != *owner);
            if ranges.is_empty() {
                self.files.remove(&file);
            }
        }
    }

    /// Lock ranges held in total, over all files and owners (for counters).
    pub fn len(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    /// Whether no lock is held at all.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Kind::{Read, Write};
    use super::*;

    const F: FileKey = (1, 42);
    const ALL: u64 = u64::MAX;

    fn own(clientid: u64, name: &str) -> Owner {
        Owner {
            clientid,
            name: name.into(),
        }
    }

    fn d(offset: u64, length: u64, kind: Kind, owner: &Owner) -> Denied {
        Denied {
            offset,
            length,
            kind,
            owner: owner.clone(),
        }
    }

    /// What LOCK answers when `d(...)` is in the way.
    fn no(offset: u64, length: u64, kind: Kind, owner: &Owner) -> Result<(), LockError> {
        Err(LockError::Denied(d(offset, length, kind, owner)))
    }

    /// A file's ranges in order, as `start-end`, `R` or `W`, and the owner's name.
    fn show(l: &Locks, file: FileKey) -> String {
        let n = |x: u64| {
            if x == ALL {
                "max".into()
            } else {
                x.to_string()
            }
        };
        let v = l.files.get(&file).map_or(&[][..], Vec::as_slice);
        let one = |r: &Range| {
            let k = if r.kind == Read { 'R' } else { 'W' };
            format!(
                "{}-{}{k}{}",
                n(r.start),
                n(r.end),
                String::from_utf8_lossy(&r.owner.name)
            )
        };
        v.iter().map(one).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn two_owners_share_reads_but_not_writes() {
        let (a, b, c) = (own(1, "a"), own(2, "b"), own(1, "c"));
        let mut l = Locks::new();
        l.lock(F, &a, Read, 0, 10).unwrap();
        l.lock(F, &b, Read, 5, 10).unwrap();
        // Write over others' reads: denied with the first conflicting lock.
        assert_eq!(l.lock(F, &c, Write, 8, 1), no(0, 10, Read, &a));
        assert_eq!(l.test(F, &c, Write, 12, 1), Ok(Some(d(5, 10, Read, &b))));
        assert_eq!(l.test(F, &c, Read, 0, ALL), Ok(None));
        // Read over another's write, and write over write.
        l.lock(F, &c, Write, 100, 5).unwrap();
        assert_eq!(l.lock(F, &a, Read, 104, 3), no(100, 5, Write, &c));
        assert_eq!(l.lock(F, &b, Write, 90, 11), no(100, 5, Write, &c));
        // Touching is not overlapping; another file is independent.
        l.lock(F, &b, Write, 105, 5).unwrap();
        l.lock(F, &a, Write, 95, 5).unwrap();
        l.lock((1, 43), &a, Write, 100, 5).unwrap();
        // The same name in another client is another owner.
        assert_eq!(
            l.test(F, &own(2, "a"), Read, 96, 1),
            Ok(Some(d(95, 5, Write, &a)))
        );
        assert_eq!(l.len(), 6);
    }

    #[test]
    fn an_owner_upgrades_downgrades_and_merges_in_place() {
        let (a, b) = (own(1, "a"), own(2, "b"));
        let mut l = Locks::new();
        l.lock(F, &a, Write, 0, 10).unwrap();
        // Its own locks never conflict: a read inside its write splits the write.
        l.lock(F, &a, Read, 4, 2).unwrap();
        assert_eq!(show(&l, F), "0-3Wa 4-5Ra 6-9Wa");
        // Another owner may now read there, and only there.
        assert_eq!(l.test(F, &b, Read, 4, 2), Ok(None));
        assert_eq!(l.test(F, &b, Read, 3, 2), Ok(Some(d(0, 4, Write, &a))));
        // Upgrading back merges the three into one.
        l.lock(F, &a, Write, 4, 2).unwrap();
        assert_eq!(show(&l, F), "0-9Wa");
        // Downgrading it all, then upgrading across a read range's edge.
        l.lock(F, &a, Read, 0, 10).unwrap();
        l.lock(F, &a, Write, 5, 10).unwrap();
        assert_eq!(show(&l, F), "0-4Ra 5-14Wa");
        // Adjacent and overlapping ranges of one kind merge, another owner's stay apart.
        l.lock(F, &a, Read, 20, 5).unwrap();
        l.lock(F, &a, Read, 30, 5).unwrap();
        l.lock(F, &a, Read, 25, 7).unwrap();
        l.lock(F, &b, Read, 35, 5).unwrap();
        assert_eq!(show(&l, F), "0-4Ra 5-14Wa 20-34Ra 35-39Rb");
        l.lock(F, &a, Read, 15, 5).unwrap();
        assert_eq!(show(&l, F), "0-4Ra 5-14Wa 15-34Ra 35-39Rb");
    }

    #[test]
    fn unlocking_the_middle_splits_and_unheld_ranges_are_fine() {
        let a = own(1, "a");
        let mut l = Locks::new();
        l.lock(F, &a, Write, 10, 20).unwrap();
        l.unlock(F, &a, 15, 5).unwrap();
        assert_eq!(show(&l, F), "10-14Wa 20-29Wa");
        l.unlock(F, &a, 15, 5).unwrap();
        l.unlock((9, 9), &a, 0, ALL).unwrap();
        // Another owner's unlock does not touch a's locks.
        l.unlock(F, &own(1, "b"), 0, ALL).unwrap();
        assert_eq!(l.len(), 2);
        l.unlock(F, &a, 12, ALL).unwrap();
        assert_eq!(show(&l, F), "10-11Wa");
        l.unlock(F, &a, 0, ALL).unwrap();
        assert!(l.is_empty() && l.files.is_empty());
    }

    #[test]
    fn whole_file_locks_reach_the_end() {
        let (a, b) = (own(1, "a"), own(2, "b"));
        let mut l = Locks::new();
        l.lock(F, &a, Write, 0, ALL).unwrap();
        assert_eq!(l.lock(F, &b, Read, ALL - 1, 1), no(0, ALL, Write, &a));
        // Unlocking the tail of a whole-file lock; to end of file from an offset.
        l.unlock(F, &a, 100, ALL).unwrap();
        assert_eq!(l.test(F, &b, Write, 100, ALL), Ok(None));
        l.lock(F, &b, Read, 200, ALL).unwrap();
        assert_eq!(
            l.test(F, &a, Write, ALL - 1, 1),
            Ok(Some(d(200, ALL, Read, &b)))
        );
        // The very last byte can only be locked with the all-ones length.
        l.lock(F, &a, Read, ALL, ALL).unwrap();
        // Merging with a range to the end keeps the end.
        l.lock(F, &b, Read, 150, 50).unwrap();
        assert_eq!(show(&l, F), "0-99Wa 150-maxRb max-maxRa");
        assert_eq!(
            l.test(F, &a, Write, 160, 1),
            Ok(Some(d(150, ALL, Read, &b)))
        );
    }

    #[test]
    fn zero_and_overflowing_ranges_are_invalid() {
        let a = own(1, "a");
        let mut l = Locks::new();
        assert_eq!(l.lock(F, &a, Read, 0, 0), Err(LockError::Invalid));
        assert_eq!(l.lock(F, &a, Read, ALL, 1), Err(LockError::Invalid));
        assert_eq!(l.lock(F, &a, Write, 2, ALL - 1), Err(LockError::Invalid));
        assert_eq!(l.test(F, &a, Read, 5, 0), Err(LockError::Invalid));
        assert_eq!(l.unlock(F, &a, ALL - 3, 10), Err(LockError::Invalid));
        assert_eq!(l.unlock(F, &a, 7, 0), Err(LockError::Invalid));
        assert!(l.is_empty() && l.files.is_empty());
        // Ending exactly at 2^64 - 1 is fine.
        l.lock(F, &a, Read, 1, ALL - 1).unwrap();
        assert_eq!(show(&l, F), "1-18446744073709551614Ra");
        let deny = d(1, ALL - 1, Read, &a);
        assert_eq!(l.test(F, &own(2, "b"), Write, 0, 2), Ok(Some(deny)));
    }

    #[test]
    fn a_refused_lock_changes_nothing() {
        let (a, b) = (own(1, "a"), own(2, "b"));
        let mut l = Locks::new();
        l.lock(F, &a, Write, 0, 10).unwrap();
        l.lock(F, &a, Read, 20, 10).unwrap();
        l.lock(F, &b, Write, 40, 10).unwrap();
        let before = show(&l, F);
        // a would replace its own locks in 5..60, but b's write is in the way.
        assert_eq!(l.lock(F, &a, Write, 5, 55), no(40, 10, Write, &b));
        assert_eq!(l.lock(F, &a, Read, 0, ALL), no(40, 10, Write, &b));
        assert_eq!(show(&l, F), before);
        // No entry appears for a file only a refused or invalid lock named.
        l.lock((7, 7), &a, Read, 0, 0).unwrap_err();
        assert!(!l.files.contains_key(&(7, 7)));
    }

    #[test]
    fn owners_and_clients_are_dropped_and_holds_tells() {
        let (a, b, c) = (own(1, "a"), own(1, "b"), own(2, "a"));
        let (f, g) = ((1, 1), (1, 2));
        let mut l = Locks::new();
        assert!(!l.holds(f, &a) && !l.holds_any(&a));
        l.lock(f, &a, Read, 0, 5).unwrap();
        l.lock(f, &a, Write, 10, 5).unwrap();
        l.lock(g, &b, Read, 0, 5).unwrap();
        l.lock(g, &c, Read, 0, 5).unwrap();
        assert!(l.holds(f, &a) && !l.holds(g, &a) && l.holds_any(&a));
        assert!(l.holds(g, &b) && !l.holds_any(&own(1, "z")));
        assert_eq!(l.len(), 4);
        l.drop_owner_file(f, &a);
        assert!(!l.holds_any(&a) && !l.files.contains_key(&f));
        l.lock(f, &a, Read, 0, 5).unwrap();
        assert_eq!(l.drop_client(1), 2);
        assert_eq!(l.drop_client(1), 0);
        assert!(l.holds(g, &c) && !l.holds_any(&b) && !l.files.contains_key(&f));
        assert_eq!(l.drop_client(2), 1);
        assert!(l.is_empty() && l.files.is_empty());
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        }
    }

    /// Requests stay within the first `SIZE` bytes or run to end of file.
    const SIZE: usize = 64;
    /// Per byte, per owner: the kind held; the last cell stands for all bytes from `SIZE`.
    type Model = [[Option<Kind>; 4]; SIZE + 1];

    /// Checks the table's ranges for `file` against the per-byte model, and its invariants
    /// (sorted, an owner's ranges disjoint, and merged when of one kind).
    fn check(l: &Locks, file: FileKey, owners: &[Owner], m: &Model) {
        let v = l.files.get(&file).map_or(&[][..], Vec::as_slice);
        let mut seen: Model = [[None; 4]; SIZE + 1];
        for (i, r) in v.iter().enumerate() {
            assert!(r.start <= r.end && (r.end < SIZE as u64 || r.end == ALL));
            let o = owners.iter().position(|o| *o == r.owner).unwrap();
            for byte in &mut seen[r.start as usize..=r.end.min(SIZE as u64) as usize] {
                assert_eq!(byte[o].replace(r.kind), None, "overlap in {v:?}");
            }
            for q in &v[i + 1..] {
                assert!((r.start, r.end) <= (q.start, q.end), "unsorted {v:?}");
                let touch = r.end == ALL || q.start <= r.end + 1;
                assert!(!(q.owner == r.owner && q.kind == r.kind && touch), "{v:?}");
            }
        }
        assert_eq!(&seen, m);
    }

    #[test]
    fn test_and_lock_agree_with_a_per_byte_model() {
        let owners = [own(1, "a"), own(1, "b"), own(2, "a"), own(2, "c")];
        let files = [(0, 1), (0, 2)];
        let mut models: [Model; 2] = [[[None; 4]; SIZE + 1]; 2];
        let mut l = Locks::new();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut granted, mut refused, mut dropped) = (0, 0, 0);
        for _ in 0..20_000 {
            let fi = rng.below(2) as usize;
            let oi = rng.below(4) as usize;
            let (file, m, owner) = (files[fi], &mut models[fi], &owners[oi]);
            let kind = [Read, Write][rng.below(2) as usize];
            let offset = rng.below(SIZE as u64);
            // To end of file one time in six, else within the first SIZE bytes.
            let length = match rng.below(6) {
                0 => ALL,
                _ => 1 + rng.below(SIZE as u64 - offset).min(rng.below(16)),
            };
            let last = offset.saturating_add(length - 1).min(SIZE as u64) as usize;
            let span = offset as usize..=last;
            match rng.below(10) {
                0..=4 => {
                    let t = l.test(file, owner, kind, offset, length).unwrap();
                    let got = l.lock(file, owner, kind, offset, length);
                    let clash = |o: usize, k: Option<Kind>| {
                        o != oi && k.is_some_and(|k| k == Write || kind == Write)
                    };
                    let first = span.clone().find(|&b| (0..4).any(|o| clash(o, m[b][o])));
                    match (first, t, got) {
                        (None, None, Ok(())) => {
                            granted += 1;
                            span.for_each(|b| m[b][oi] = Some(kind));
                        }
                        (Some(b0), Some(t), Err(LockError::Denied(d))) => {
                            refused += 1;
                            assert_eq!(t, d);
                            let o = owners.iter().position(|o| *o == d.owner).unwrap();
                            assert!(clash(o, Some(d.kind)));
                            assert!(d.offset <= b0 as u64, "not the first conflict");
                            let end = d.offset.saturating_add(d.length - 1).min(SIZE as u64);
                            assert!(end >= offset && d.offset as usize <= last);
                            assert!((d.offset..=end).all(|b| m[b as usize][o] == Some(d.kind)));
                        }
                        other => panic!("model {first:?}, table {other:?}"),
                    }
                }
                5..=7 => {
                    l.unlock(file, owner, offset, length).unwrap();
                    span.for_each(|b| m[b][oi] = None);
                }
                8 => {
                    assert_eq!(l.holds(file, owner), m.iter().any(|b| b[oi].is_some()));
                    l.drop_owner_file(file, owner);
                    m.iter_mut().for_each(|b| b[oi] = None);
                }
                _ if rng.below(20) == 0 => {
                    let before = l.len();
                    let n = l.drop_client(owner.clientid);
                    assert_eq!(l.len(), before - n);
                    dropped += n;
                    // Owners 0 and 1 are client 1's, 2 and 3 client 2's.
                    let c = oi / 2 * 2;
                    for b in models.iter_mut().flatten() {
                        (b[c], b[c + 1]) = (None, None);
                    }
                }
                _ => {}
            }
            for (f, m) in files.iter().zip(&models) {
                check(&l, *f, &owners, m);
            }
            let held = |o: usize| models.iter().flatten().any(|b| b[o].is_some());
            assert!((0..4).all(|o| l.holds_any(&owners[o]) == held(o)));
            assert!(l.files.values().all(|v| !v.is_empty()));
            let none = !models.iter().flatten().flatten().any(Option::is_some);
            assert_eq!(l.is_empty(), none);
        }
        assert!(
            granted > 1000 && refused > 1000 && dropped > 0,
            "{granted} {refused}"
        );
    }
}
