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
//!
//! Bulk data is [`fill_pattern`]'s pattern for a seed, so both ends verify every byte
//! without keeping a copy. The encoders write into caller buffers (no allocation).

#![deny(unsafe_code)]

use std::sync::Arc;

use crate::dispatch::{Dispatch, Outcome, ProcSpec};

/// The program number (in the range RFC 5531 leaves to users).
pub const PROG: u32 = 400_100;
/// Its version.
pub const VERS: u32 = 1;
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

/// Fills `out` with the pattern for `seed`.
pub fn fill_pattern(seed: u32, out: &mut [u8]) {
    let table = pattern_table(seed);
    for (k, block) in out.chunks_mut(256).enumerate() {
        let hi = k as u8;
        for (b, &t) in block.iter_mut().zip(table.iter()) {
            *b = t ^ hi;
        }
    }
}

/// Whether `data` is the pattern for `seed`.
pub fn is_pattern(seed: u32, data: &[u8]) -> bool {
    let table = pattern_table(seed);
    data.chunks(256).enumerate().all(|(k, block)| {
        let hi = k as u8;
        block
            .iter()
            .zip(table.iter())
            .fold(0u8, |acc, (&b, &t)| acc | (b ^ t ^ hi))
            == 0
    })
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

/// Registers the program's procedures in `d`.
pub fn register(d: &mut Dispatch) {
    d.register(PROG, VERS, NULL, ProcSpec::plain(0), |_, _| {
        Outcome::Success
    });
    d.register(
        PROG,
        VERS,
        ECHO,
        ProcSpec::plain(opaque_len(MAX_ECHO as usize) as u32),
        |req, resp| {
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
        },
    );
    d.register(
        PROG,
        VERS,
        READ,
        ProcSpec {
            max_results: 4,
            ddp_arg: false,
            ddp_results: 1,
        },
        |req, resp| {
            let (Some(n), Some(seed)) = (word(req.args, 0), word(req.args, 4)) else {
                return Outcome::GarbageArgs;
            };
            resp.write_results(&n.to_be_bytes());
            match resp.push_bulk(n as usize) {
                Some(b) => fill_pattern(seed, b),
                None => return Outcome::SystemErr,
            }
            Outcome::Success
        },
    );
    d.register(
        PROG,
        VERS,
        WRITE,
        ProcSpec {
            max_results: 8,
            ddp_arg: true,
            ddp_results: 0,
        },
        |req, resp| {
            let (Some(seed), Some(n)) = (word(req.args, 0), word(req.args, 4)) else {
                return Outcome::GarbageArgs;
            };
            let Some(data) = req.args.get(8..8 + n as usize) else {
                return Outcome::GarbageArgs;
            };
            let ok = is_pattern(seed, data);
            resp.write_results(&encode_words(ok as u32, n));
            Outcome::Success
        },
    );
    d.register(
        PROG,
        VERS,
        MULTI,
        ProcSpec {
            max_results: 4,
            ddp_arg: false,
            ddp_results: 4,
        },
        |req, resp| {
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
        },
    );
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
}
