//! The one place where a deferred Call's bytes leave the polling worker for an I/O thread:
//! lent without a copy ([`Response::lend_args`], [`Response::lend_bulk`]) when the engine
//! can lend them, copied otherwise (counted, so that a test can check the READ and WRITE
//! paths never copy: `args_copies` and `bulk_copies` stay 0).

use std::sync::atomic::Ordering;

use rpcrdma_engine::dispatch::{Request, Response};
use rpcrdma_engine::pool::loan::{ArgsLoan, BulkLoan};

use crate::stats::NfsStats;

/// A Call's argument bytes on the I/O thread.
#[derive(Debug)]
pub enum Args {
    /// The registered bytes themselves (a WRITE's data where the RDMA Read put it).
    Lent(ArgsLoan),
    /// A copy (the engine could not lend).
    Copied(Vec<u8>),
}

impl Args {
    /// The argument bytes (the same as the handler's `req.args`).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Args::Lent(l) => l.bytes(),
            Args::Copied(v) => v,
        }
    }
}

/// Where the I/O thread puts a READ's data.
#[derive(Debug)]
pub enum Bulk {
    /// The registered bytes the responder RDMA-Writes into the client's Write chunk.
    Lent(BulkLoan),
    /// A buffer of our own, copied into the reply when the Call is completed.
    Owned(Vec<u8>),
}

impl Bulk {
    /// The bytes to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Bulk::Lent(l) => l.bytes_mut(),
            Bulk::Owned(v) => v,
        }
    }
}

/// What the completion finds of a READ's data once the I/O thread is done.
#[derive(Debug, PartialEq, Eq)]
pub enum BulkOut {
    /// `n` bytes were put into the lent buffer: `push_bulk(n)` finds them in place.
    Lent(usize),
    /// The data, to copy into `push_bulk`'s buffer.
    Owned(Vec<u8>),
}

impl Bulk {
    /// Gives the buffer back after `n` bytes were filled: the loan is dropped here (before
    /// the Call can be completed, which refuses while a loan is out).
    pub fn finish(self, n: usize) -> BulkOut {
        match self {
            Bulk::Lent(_) => BulkOut::Lent(n),
            Bulk::Owned(mut v) => {
                v.truncate(n);
                BulkOut::Owned(v)
            }
        }
    }
}

/// The Call's arguments for an I/O thread: lent, or copied when lending is impossible.
pub fn args(req: &Request<'_>, resp: &mut Response<'_>, stats: &NfsStats) -> Args {
    match resp.lend_args() {
        Some(l) => Args::Lent(l),
        None => {
            stats.args_copies.fetch_add(1, Ordering::Relaxed);
            Args::Copied(req.args.to_vec())
        }
    }
}

/// The READ's DDP-eligible result of `n` bytes (RFC 8267 §4.2: READ3resok's data is the
/// DDP-eligible item), lent, or a buffer of our own when lending is impossible.
pub fn bulk(resp: &mut Response<'_>, n: usize, stats: &NfsStats) -> Bulk {
    match resp.lend_bulk(n) {
        Some(l) => Bulk::Lent(l),
        None => {
            stats.bulk_copies.fetch_add(1, Ordering::Relaxed);
            Bulk::Owned(vec![0; n])
        }
    }
}

/// Pushes a READ's data into the reply being completed: the lent bytes are already there
/// (`push_bulk` returns them; nothing is written), owned bytes are copied. `false` when
/// the reply has no room for them.
pub fn push(resp: &mut Response<'_>, out: &BulkOut) -> bool {
    match out {
        BulkOut::Lent(n) => resp.push_bulk(*n).is_some(),
        BulkOut::Owned(v) => match resp.push_bulk(v.len()) {
            Some(dst) => {
                dst.copy_from_slice(v);
                true
            }
            None => false,
        },
    }
}
