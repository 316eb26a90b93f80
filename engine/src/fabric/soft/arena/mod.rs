//! A protection domain's arena: one memfd-backed shared mapping holding the key table (every
//! memory region and memory window of the domain) and the bytes of the regions.
//!
//! ```text
//! page 0          ArenaHeader
//! page 1 + 0x800  KeyEntry table, 64 bytes an entry, index = key >> 8 (index 0 unused)
//! data_off ..     region bytes, page granular
//! ```
//!
//! A peer maps the same memfd and checks and performs RDMA Reads and Writes directly against
//! it, so the table is made of atomics. An entry's `word` packs the full key and the state;
//! it is written last when an entry is set up (Release) and read first and last by a peer
//! (a sequence lock), so a peer never acts on a half-written binding. The entry layout is the
//! protocol between peers; both run this code.
//!
//! By concern: this file holds the shared layout (header, key table entries, entry states);
//! `view` the view of an arena and its key resolution, `domain` the owner's side (regions
//! and their keys), `windows` memory windows (bind, invalidate, free), `spans` the allocator
//! of the data area.

mod domain;
mod spans;
mod view;
mod windows;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU32, AtomicU64};

use super::sys::Atomics;

pub(crate) use domain::{Domain, RegionInfo};
pub(crate) use view::{ArenaView, RegionMemo};
pub(crate) use windows::BindReq;

/// Page size of the arena's granularity.
pub(crate) const PAGE: usize = 4096;
/// Where the key table starts. Hot shared structures of the provider sit at distinct offsets
/// within their pages (here 0x800 into page 1; queue pair headers at 0x000, completion
/// queue headers at 0x400), so that the lines one Send touches do not all compete for the
/// same few sets of the L1 cache.
const TABLE_OFF: usize = PAGE + 0x800;
const MAGIC: u64 = 0x7270_6364_6172_6e32; // "rpcdarn2"

/// Entry states (low 32 bits of `KeyEntry::word`).
const ST_UNUSED: u32 = 0;
const ST_MR: u32 = 1;
const ST_MR_DEAD: u32 = 2;
const ST_MW_FREE: u32 = 3;
const ST_MW_VALID: u32 = 4;
const ST_MW_BUSY: u32 = 5;

#[repr(C, align(64))]
struct ArenaHeader {
    magic: AtomicU64,
    table_len: AtomicU64,
    data_off: AtomicU64,
    data_len: AtomicU64,
    domain_id: AtomicU64,
    /// Deregistrations so far: a [`RegionMemo`] made before the last one is stale.
    regions_gen: AtomicU64,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for ArenaHeader {}

#[repr(C, align(64))]
struct KeyEntry {
    /// `key << 32 | state`.
    word: AtomicU64,
    /// Virtual address of the first byte, in the owner's address space.
    va: AtomicU64,
    len: AtomicU64,
    /// Offset of the first byte from the arena's base.
    off: AtomicU64,
    access: AtomicU32,
    /// Type 2 window: the owner's queue pair it was bound through.
    qp_num: AtomicU32,
    /// Window: index and full key of the region it is bound over.
    parent: AtomicU32,
    parent_key: AtomicU32,
    /// Region: windows currently bound over it.
    num_mw: AtomicU32,
}

// SAFETY: repr(C), atomics only.
unsafe impl Atomics for KeyEntry {}

const fn word(key: u32, state: u32) -> u64 {
    (key as u64) << 32 | state as u64
}

const fn word_key(w: u64) -> u32 {
    (w >> 32) as u32
}

const fn word_state(w: u64) -> u32 {
    w as u32
}

/// Why a key check failed; providers map it to the status of whoever asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyFault;
