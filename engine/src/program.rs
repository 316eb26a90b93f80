//! The built-in test and benchmark program that `rpcrdma serve` exports and `rpcrdma call`,
//! `rpcrdma bench rpc` and the tests call: one procedure per message form.
//!
//! | procedure | arguments | results | exercises |
//! |---|---|---|---|
//! | `NULL` (0) | none | none | the bare round trip |
//! | `ECHO` (1) | `opaque<>` | the same `opaque<>`, inline | Short, Long Calls and Replies |
//! | `READ` (2) | `u32 n, u32 seed` | `u32 n`, then `n` bytes DDP-eligible | Write chunks |
//! | `WRITE` (3) | `u32 seed`, `opaque<>` DDP-eligible | `u32 ok, u32 n` | Read chunks |
//! | `MULTI` (4) | `u32 k, u32 n` | `u32 k`, then `k` DDP-eligible results of `n` bytes | several Write chunks |
//! | `EXECUTIONS` (5) | `u32 stamp` | `u32 xids, u32 executions, u32 repeated, u32 lost_track` | counting, below |
//!
//! Version [`VERS_TIMED`] (2) has the same procedures; its READ results are `u32 n, u32
//! work_ns`, then the data, and its WRITE results `u32 ok, u32 n, u32 work_ns`: the
//! nanoseconds the handler spent making READ's data or checking WRITE's (0 under
//! [`TIMED_MIN`] bytes). `rpcrdma bench rpc` and `sweep` call it and leave that time out of
//! their round trips, reporting it apart: it is the work of the load generator's server
//! half, not the transport's.
//!
//! With [`register_counted`] (`rpcrdma serve --count-executions`; [`register`] has no
//! `EXECUTIONS` and counts nothing), every Call with an AUTH_SYS credential is counted by
//! its stamp (exactly, however long the run) and by its (stamp, XID) while a bounded table
//! has room (RFC 5531 §9: the XID identifies a Call, and a retransmission keeps it):
//! `EXECUTIONS` tells how many executions the stamp's Calls had in all, how many distinct
//! XIDs of that stamp ran, how many XIDs ran more than once (a retransmitted Call whose
//! first execution happened before its connection was lost: this program has no duplicate
//! request cache), and how many executions the XID table could not place (then `xids` and
//! `repeated` are partial; `executions` never is). `rpcrdma bench rpc --disconnect-every`
//! uses it to show no RPC was lost and which ran twice. Calls with another credential cost
//! one comparison.
//!
//! Bulk data is [`fill_pattern`]'s pattern for a seed, so both ends verify every byte
//! without keeping a copy. The encoders write into caller buffers (no allocation).

#![deny(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rpcrdma_proto::rpc::AUTH_SYS;

use crate::clock::Clock;
use crate::dispatch::{Dispatch, Outcome, ProcSpec, Request, Response};

/// The program number (in the range RFC 5531 leaves to users).
pub const PROG: u32 = 400_100;
/// Its version.
pub const VERS: u32 = 1;
/// The timed version: the same procedures, but READ and WRITE also answer how long the
/// server spent on the data (making READ's, checking WRITE's), so that a load generator can
/// leave that work out of the transport's round trip and report it apart.
pub const VERS_TIMED: u32 = 2;
/// Data shorter than this is not timed (`work_ns` is 0): reading the clock would cost as
/// much as the work.
pub const TIMED_MIN: u32 = 512;
/// No arguments, no results.
pub const NULL: u32 = 0;
/// Arguments `opaque<>`; results the same opaque, inline.
pub const ECHO: u32 = 1;
/// Arguments `u32 n, u32 seed`; results `u32 n` and one DDP-eligible result of `n` bytes.
pub const READ: u32 = 2;
/// Arguments `u32 seed` and a DDP-eligible `opaque<>`; results `u32 ok, u32 n`.
pub const WRITE: u32 = 3;
/// Arguments `u32 k, u32 n`; results `u32 k` and `k` DDP-eligible results of `n` bytes
/// (result `i` has seed `i + 1`).
pub const MULTI: u32 = 4;
/// Arguments `u32 stamp`; results the counts of the Calls with that AUTH_SYS stamp.
pub const EXECUTIONS: u32 = 5;
/// Largest ECHO payload the server answers.
pub const MAX_ECHO: u32 = 1 << 20;

/// The pattern byte at `i` for `seed`.
#[inline]
pub fn pattern_byte(seed: u32, i: usize) -> u8 {
    ((i as u32)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(seed.wrapping_mul(7919)) as u8)
        ^ (i >> 8) as u8
}

/// The pattern's first 256 bytes for `seed`. Only the low byte of the product in
/// [`pattern_byte`] survives, and it depends only on `i mod 256`: byte `i` of the pattern is
/// `table[i % 256] ^ (i >> 8) as u8`, which fills and compares a byte vector at a time.
fn pattern_table(seed: u32) -> [u8; 256] {
    let mut t = [0u8; 256];
    for (i, b) in t.iter_mut().enumerate() {
        *b = pattern_byte(seed, i);
    }
    t
}

/// The pattern's first 256 bytes for `seed` as 32 native-endian words, so that filling
/// and comparing go a word (and, vectorised, several) at a time.
fn pattern_words(table: &[u8; 256]) -> [u64; 32] {
    let mut w = [0u64; 32];
    for (word, bytes) in w.iter_mut().zip(table.chunks_exact(8)) {
        *word = u64::from_ne_bytes(bytes.try_into().unwrap_or([0; 8]));
    }
    w
}

/// Block `k`'s mask: the pattern's 256-byte block `k` is the first block with every byte
/// XORed with `k as u8`.
fn block_mask(k: usize) -> u64 {
    u64::from(k as u8) * 0x0101_0101_0101_0101
}

/// Fills `out` with the pattern for `seed`.
pub fn fill_pattern(seed: u32, out: &mut [u8]) {
    // Short data byte by byte: the table would cost more than it saves.
    if out.len() < 256 {
        for (i, b) in out.iter_mut().enumerate() {
            *b = pattern_byte(seed, i);
        }
        return;
    }
    let table = pattern_table(seed);
    let words = pattern_words(&table);
    let mut blocks = out.chunks_exact_mut(256);
    let mut k = 0;
    for block in &mut blocks {
        let m = block_mask(k);
        for (dst, &w) in block.chunks_exact_mut(8).zip(words.iter()) {
            dst.copy_from_slice(&(w ^ m).to_ne_bytes());
        }
        k += 1;
    }
    let hi = k as u8;
    for (b, &t) in blocks.into_remainder().iter_mut().zip(table.iter()) {
        *b = t ^ hi;
    }
}

/// Whether `data` is the pattern for `seed`.
pub fn is_pattern(seed: u32, data: &[u8]) -> bool {
    if data.len() < 256 {
        return data
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern_byte(seed, i));
    }
    let table = pattern_table(seed);
    let words = pattern_words(&table);
    let mut blocks = data.chunks_exact(256);
    let mut k = 0;
    for block in &mut blocks {
        let m = block_mask(k);
        // Differences are gathered over the block without a branch, then tested once.
        let diff = block
            .chunks_exact(8)
            .zip(words.iter())
            .fold(0u64, |acc, (src, &w)| {
                acc | (u64::from_ne_bytes(src.try_into().unwrap_or([0; 8])) ^ w ^ m)
            });
        if diff != 0 {
            return false;
        }
        k += 1;
    }
    let hi = k as u8;
    blocks
        .remainder()
        .iter()
        .zip(table.iter())
        .all(|(&b, &t)| b == t ^ hi)
}

/// The big-endian word at `at`, if the bytes are there.
pub fn word(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// XDR length of an `opaque<>` of `n` bytes: the length word and the padded data.
pub const fn opaque_len(n: usize) -> usize {
    4 + ((n + 3) & !3)
}

/// Encodes `opaque<>` holding `fill`'s bytes (`n` of them) into `out`; returns the length
/// used, or `None` if `out` is too small.
pub fn encode_opaque(out: &mut [u8], n: usize, fill: impl FnOnce(&mut [u8])) -> Option<usize> {
    let total = opaque_len(n);
    let dst = out.get_mut(..total)?;
    dst[..4].copy_from_slice(&u32::try_from(n).ok()?.to_be_bytes());
    fill(&mut dst[4..4 + n]);
    dst[4 + n..].fill(0);
    Some(total)
}

/// Encodes two words (the arguments of READ and MULTI, or WRITE's seed and length).
pub fn encode_words(a: u32, b: u32) -> [u8; 8] {
    let mut w = [0u8; 8];
    w[..4].copy_from_slice(&a.to_be_bytes());
    w[4..].copy_from_slice(&b.to_be_bytes());
    w
}

/// The program's dispatch table.
pub fn dispatch() -> Arc<Dispatch> {
    let mut d = Dispatch::new();
    register(&mut d);
    Arc::new(d)
}

/// A procedure's handler.
type HandlerFn = fn(&Request<'_>, &mut Response<'_>) -> Outcome;

/// The program's procedures in version `vers`: number, what the transport knows of it, its
/// handler (which reads the version from the Call).
fn procedures(vers: u32) -> [(u32, ProcSpec, HandlerFn); 5] {
    // The timed version's READ and WRITE results have one more word.
    let timed = if vers == VERS_TIMED { 4 } else { 0 };
    [
        (NULL, ProcSpec::plain(0), null),
        (
            ECHO,
            ProcSpec::plain(opaque_len(MAX_ECHO as usize) as u32),
            echo,
        ),
        (
            READ,
            ProcSpec {
                max_results: 4 + timed,
                ddp_arg: false,
                ddp_results: 1,
            },
            read,
        ),
        (
            WRITE,
            ProcSpec {
                max_results: 8 + timed,
                ddp_arg: true,
                ddp_results: 0,
            },
            write,
        ),
        (
            MULTI,
            ProcSpec {
                max_results: 4,
                ddp_arg: false,
                ddp_results: 4,
            },
            multi,
        ),
    ]
}

/// Registers the program's procedures, both versions, in `d`.
pub fn register(d: &mut Dispatch) {
    // Calibrated now rather than by the first timed Call (it takes about 20 ms).
    let _ = Clock::get();
    for vers in [VERS, VERS_TIMED] {
        for (p, spec, f) in procedures(vers) {
            d.register(PROG, vers, p, spec, f);
        }
    }
}

/// Registers the program's procedures in `d` counting their executions, and `EXECUTIONS`
/// to report them (`rpcrdma serve --count-executions`); returns the count.
pub fn register_counted(d: &mut Dispatch) -> Arc<Executions> {
    let log = Arc::new(Executions::default());
    let _ = Clock::get();
    for vers in [VERS, VERS_TIMED] {
        for (p, spec, f) in procedures(vers) {
            let l = Arc::clone(&log);
            d.register(PROG, vers, p, spec, move |req, resp| {
                l.record(req);
                f(req, resp)
            });
        }
        let l = Arc::clone(&log);
        d.register(
            PROG,
            vers,
            EXECUTIONS,
            ProcSpec::plain(16),
            move |req, resp| {
                let Some(stamp) = word(req.args, 0) else {
                    return Outcome::GarbageArgs;
                };
                let c = l.of(stamp);
                let mut out = [0u8; 16];
                for (k, v) in [c.xids, c.executions, c.repeated, c.lost_track]
                    .into_iter()
                    .enumerate()
                {
                    out[4 * k..4 * k + 4].copy_from_slice(&v.to_be_bytes());
                }
                resp.write_results(&out);
                Outcome::Success
            },
        );
    }
    log
}

/// The `NULL` procedure's handler.
fn null(_: &Request<'_>, _: &mut Response<'_>) -> Outcome {
    Outcome::Success
}

/// The `ECHO` procedure's handler.
fn echo(req: &Request<'_>, resp: &mut Response<'_>) -> Outcome {
    let Some(n) = word(req.args, 0) else {
        return Outcome::GarbageArgs;
    };
    let len = opaque_len(n as usize);
    if n > MAX_ECHO || req.args.len() < len {
        return Outcome::GarbageArgs;
    }
    let out = resp.results();
    if out.len() < len {
        return Outcome::SystemErr;
    }
    out[..len].copy_from_slice(&req.args[..len]);
    resp.set_results_len(len);
    Outcome::Success
}

/// Runs `work` on `n` bytes of data and returns its time in nanoseconds when the Call is of
/// the timed version and the data at least [`TIMED_MIN`] bytes; 0 otherwise. Never
/// inlined: `rpcrdma bench cost` leaves the data work out of the server's count by name.
#[inline(never)]
fn data_work(req: &Request<'_>, n: u32, work: impl FnOnce()) -> u32 {
    if req.vers != VERS_TIMED || n < TIMED_MIN {
        work();
        return 0;
    }
    let clock = Clock::get();
    let from = clock.now();
    work();
    u32::try_from(clock.nanos_since(from)).unwrap_or(u32::MAX)
}

/// The `READ` procedure's handler.
fn read(req: &Request<'_>, resp: &mut Response<'_>) -> Outcome {
    let (Some(n), Some(seed)) = (word(req.args, 0), word(req.args, 4)) else {
        return Outcome::GarbageArgs;
    };
    let Some(b) = resp.push_bulk(n as usize) else {
        return Outcome::SystemErr;
    };
    let work = data_work(req, n, || fill_pattern(seed, b));
    if req.vers == VERS_TIMED {
        resp.write_results(&encode_words(n, work));
    } else {
        resp.write_results(&n.to_be_bytes());
    }
    Outcome::Success
}

/// The `WRITE` procedure's handler.
fn write(req: &Request<'_>, resp: &mut Response<'_>) -> Outcome {
    let (Some(seed), Some(n)) = (word(req.args, 0), word(req.args, 4)) else {
        return Outcome::GarbageArgs;
    };
    let Some(data) = req.args.get(8..8 + n as usize) else {
        return Outcome::GarbageArgs;
    };
    let mut ok = false;
    let work = data_work(req, n, || ok = is_pattern(seed, data));
    let results = encode_words(ok as u32, n);
    if req.vers == VERS_TIMED {
        let mut timed = [0u8; 12];
        timed[..8].copy_from_slice(&results);
        timed[8..].copy_from_slice(&work.to_be_bytes());
        resp.write_results(&timed);
    } else {
        resp.write_results(&results);
    }
    Outcome::Success
}

/// The `MULTI` procedure's handler.
fn multi(req: &Request<'_>, resp: &mut Response<'_>) -> Outcome {
    let (Some(k), Some(n)) = (word(req.args, 0), word(req.args, 4)) else {
        return Outcome::GarbageArgs;
    };
    resp.write_results(&k.to_be_bytes());
    for i in 0..k {
        match resp.push_bulk(n as usize) {
            Some(b) => fill_pattern(i + 1, b),
            None => return Outcome::SystemErr,
        }
    }
    Outcome::Success
}

/// Whether the open-addressing slot whose key word is `k` is `key`'s: it holds `key`
/// already, or it was free (0) and now does (another thread may claim it first).
fn claim(k: &AtomicU64, key: u64) -> bool {
    let cur = k.load(Ordering::Acquire);
    cur == key
        || (cur == 0
            && match k.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => true,
                Err(other) => other == key,
            })
}

/// The counts `EXECUTIONS` reports for one AUTH_SYS stamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Distinct XIDs that ran (of those the XID table could place).
    pub xids: u32,
    /// Executions in all (exact).
    pub executions: u32,
    /// XIDs that ran more than once (of those the XID table could place).
    pub repeated: u32,
    /// Executions the XID table had no room to count (of every stamp): `xids` and
    /// `repeated` are partial when this is not 0.
    pub lost_track: u32,
}

/// Slots of the execution table: (stamp, XID) pairs it can tell apart.
const EXEC_SLOTS: usize = 1 << 18;

/// Stamps counted exactly at once (runs against one server).
const STAMP_SLOTS: usize = 256;

/// Executions the XID table may fail to place before it stops trying (each failure costs
/// a probe of 64 slots; past this the table is full for practical purposes).
const GIVE_UP_AFTER: u32 = 4096;

/// Executions per AUTH_SYS stamp (exact) and per (stamp, XID) (while there is room),
/// counted by every procedure's handler: lock-free open-addressing tables (a key word
/// claimed by compare-and-swap, a count beside it), allocated at the first counted Call,
/// never resized. Handlers on any worker record into them; `EXECUTIONS` reads them.
#[derive(Debug, Default)]
pub struct Executions {
    table: OnceLock<Box<[(AtomicU64, AtomicU32)]>>,
    stamps: OnceLock<Box<[(AtomicU64, AtomicU64)]>>,
    lost: AtomicU32,
}

impl Executions {
    /// Counts `req` if it carries an AUTH_SYS credential (its stamp is the body's first word,
    /// RFC 5531 Appendix A).
    #[inline]
    pub fn record(&self, req: &Request<'_>) {
        if req.cred.flavor != AUTH_SYS {
            return;
        }
        if let Some(stamp) = word(req.cred.body, 0) {
            self.count_stamp(stamp);
            if self.lost.load(Ordering::Relaxed) < GIVE_UP_AFTER {
                self.count(stamp, req.xid);
            } else {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn stamp_table(&self) -> &[(AtomicU64, AtomicU64)] {
        self.stamps.get_or_init(|| {
            (0..STAMP_SLOTS)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect()
        })
    }

    /// Counts one execution of `stamp`'s (its key is the stamp plus one: 0 is free). A
    /// stamp that finds the table full is not counted (257 runs against one server).
    fn count_stamp(&self, stamp: u32) {
        let key = u64::from(stamp) + 1;
        let t = self.stamp_table();
        let start = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % t.len();
        for i in 0..t.len() {
            let (k, n) = &t[(start + i) % t.len()];
            if claim(k, key) {
                n.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// Executions of `stamp`'s Calls in all.
    fn stamp_total(&self, stamp: u32) -> u64 {
        let key = u64::from(stamp) + 1;
        self.stamps.get().map_or(0, |t| {
            t.iter()
                .find(|(k, _)| k.load(Ordering::Acquire) == key)
                .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
        })
    }

    fn table(&self) -> &[(AtomicU64, AtomicU32)] {
        self.table.get_or_init(|| {
            (0..EXEC_SLOTS)
                .map(|_| (AtomicU64::new(0), AtomicU32::new(0)))
                .collect()
        })
    }

    fn count(&self, stamp: u32, xid: u32) {
        // Key 0 marks a free slot: keys are stored plus one (stamp and XID fill 64 bits, so
        // the pair (u32::MAX, u32::MAX) shares a slot key with nothing else but wraps to 0;
        // it is counted as lost).
        let key = (u64::from(stamp) << 32 | u64::from(xid)).wrapping_add(1);
        let t = self.table();
        if key == 0 {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let start = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 46) as usize % t.len();
        for i in 0..64 {
            let (k, n) = &t[(start + i) % t.len()];
            if claim(k, key) {
                n.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts of `stamp`'s Calls so far.
    pub fn of(&self, stamp: u32) -> Counts {
        let mut c = Counts {
            lost_track: self.lost.load(Ordering::Relaxed),
            ..Counts::default()
        };
        c.executions = u32::try_from(self.stamp_total(stamp)).unwrap_or(u32::MAX);
        let Some(t) = self.table.get() else {
            return c;
        };
        for (k, n) in t.iter() {
            let key = k.load(Ordering::Acquire);
            if key == 0 || (key.wrapping_sub(1) >> 32) as u32 != stamp {
                continue;
            }
            let runs = n.load(Ordering::Relaxed);
            c.xids += 1;
            c.repeated += u32::from(runs > 1);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_encoding_pads_with_zeros() {
        let mut out = [0xffu8; 16];
        assert_eq!(encode_opaque(&mut out, 5, |d| d.fill(7)), Some(12));
        assert_eq!(&out[..12], &[0, 0, 0, 5, 7, 7, 7, 7, 7, 0, 0, 0]);
        assert_eq!(encode_opaque(&mut out, 13, |_| {}), None);
    }

    #[test]
    fn patterns_verify_and_differ_by_seed() {
        let mut a = vec![0u8; 1000];
        fill_pattern(3, &mut a);
        assert!(is_pattern(3, &a));
        assert!(!is_pattern(4, &a));
        a[999] ^= 1;
        assert!(!is_pattern(3, &a));
    }

    #[test]
    fn the_table_form_is_the_byte_definition() {
        for seed in [3, 0x5eed] {
            for n in [0, 1, 8, 255, 256, 257, 511, 512] {
                let mut a = vec![0u8; n];
                fill_pattern(seed, &mut a);
                assert!(a
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern_byte(seed, i)));
                assert!(is_pattern(seed, &a), "{n} B");
                if let Some(last) = a.last_mut() {
                    *last ^= 1;
                    assert!(!is_pattern(seed, &a), "{n} B, last byte flipped");
                }
            }
        }
        for seed in [0, 1, 0x5eed, u32::MAX] {
            let mut a = vec![0u8; 70_001];
            fill_pattern(seed, &mut a);
            for (i, &b) in a.iter().enumerate() {
                assert_eq!(b, pattern_byte(seed, i), "seed {seed} byte {i}");
            }
            assert!(is_pattern(seed, &a));
            for at in [0, 255, 256, 65_535, 70_000] {
                a[at] ^= 0x80;
                assert!(!is_pattern(seed, &a), "seed {seed} flipped byte {at}");
                a[at] ^= 0x80;
            }
        }
    }

    #[test]
    fn executions_are_counted_per_stamp_and_xid() {
        let log = Executions::default();
        static A: [u8; 4] = [0, 0, 0, 7];
        static B: [u8; 4] = [0, 0, 0, 8];
        let req = |xid, body: &'static [u8]| Request {
            xid,
            prog: PROG,
            vers: VERS,
            proc_num: NULL,
            cred: rpcrdma_proto::rpc::OpaqueAuth {
                flavor: AUTH_SYS,
                body,
            },
            args: &[],
        };
        let (a, b): (&'static [u8], &'static [u8]) = (&A, &B);
        for xid in 0..1000 {
            log.record(&req(xid, a));
        }
        // XIDs 10 and 11 again (retransmitted), another stamp's XID 10, and AUTH_NONE.
        log.record(&req(10, a));
        log.record(&req(11, a));
        log.record(&req(10, b));
        log.record(&Request {
            cred: rpcrdma_proto::rpc::OpaqueAuth::NONE,
            ..req(12, a)
        });
        assert_eq!(
            log.of(7),
            Counts {
                xids: 1000,
                executions: 1002,
                repeated: 2,
                lost_track: 0
            }
        );
        assert_eq!(log.of(8).executions, 1);
        assert_eq!(log.of(9), Counts::default());
    }
}
