//! Loans: a deferred Call's registered bytes lent to another thread.
//!
//! A storage backend answers a Call later ([`Outcome::Deferred`](crate::dispatch::Outcome))
//! because its file I/O runs on another thread. Without loans that thread would read the
//! arguments from a copy and write a READ's data into a buffer of its own, to be copied
//! again into the registered bulk buffer when the Call is completed. A loan hands that
//! thread the registered bytes themselves: [`ArgsLoan`] the Call's argument bytes (a WRITE's
//! data, pulled there by RDMA Read), [`BulkLoan`] the reserved bytes of a DDP-eligible
//! result (where `pread` can put a READ's data, which the responder then RDMA-Writes into
//! the requester's Write chunk).
//!
//! # Why a loan is sound
//!
//! - **Nobody else touches the bytes while a loan is out.** A deferred Call keeps its
//!   receive, pull and bulk buffers until it is completed;
//!   [`ServerConn::complete`](crate::responder::ServerConn::complete) refuses to complete
//!   it while the `LoanBoard` counts a loan of its slot, and a handler that lent bytes
//!   has deferred, whatever it returns. The count is decremented with `Release` when a loan is dropped and
//!   read with `Acquire` before completing, so the borrower's writes are visible to the
//!   thread that then sends them.
//! - **The memory outlives the loan.** The board holds a reference to the shared state of
//!   every pool of the connection (its receive pool and the server's share), so a
//!   connection dropped while a loan is out — lost, say — keeps the regions mapped until
//!   the last loan is dropped. Its receive buffers are never handed out again (their pool
//!   went with the connection), and the shared pull and bulk buffers of a Call with loans
//!   out are handed to the board (`LoanBoard::hold`) instead of going back to the share,
//!   until the last loan goes.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The loans out, per slot of one connection, and what keeps the lent memory alive.
pub(crate) struct LoanBoard {
    /// The pools' shared states (registered regions), type-erased, and the lent buffers of
    /// a dropped connection. Locked only when the connection is dropped with loans out,
    /// never by a loan.
    keep: std::sync::Mutex<Vec<Arc<dyn Send + Sync>>>,
    /// Loans out per slot.
    out: Box<[AtomicU32]>,
}

impl LoanBoard {
    /// A board for `slots` slots keeping `keep` (the connection's pools) alive.
    pub(crate) fn new(keep: Vec<Arc<dyn Send + Sync>>, slots: usize) -> Arc<LoanBoard> {
        Arc::new(LoanBoard {
            keep: std::sync::Mutex::new(keep),
            out: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Keeps `buf` (a lent buffer of a shared pool, say) out of its pool until the board
    /// goes, that is until the last loan is dropped; it is dropped before anything else the
    /// board keeps, so that it goes home while its pool is still there.
    pub(crate) fn hold(&self, buf: Arc<dyn Send + Sync>) {
        self.keep
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(0, buf);
    }

    /// Loans of `slot` not yet dropped. `Acquire`: what their borrowers wrote is visible
    /// once this reads 0.
    #[inline]
    pub(crate) fn outstanding(&self, slot: u32) -> u32 {
        self.out
            .get(slot as usize)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    fn take(&self, slot: u32) {
        if let Some(c) = self.out.get(slot as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn give_back(&self, slot: u32) {
        if let Some(c) = self.out.get(slot as usize) {
            c.fetch_sub(1, Ordering::Release);
        }
    }
}

impl core::fmt::Debug for LoanBoard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LoanBoard")
            .field("slots", &self.out.len())
            .finish_non_exhaustive()
    }
}

/// A deferred Call's argument bytes (the same as its `Request::args`), lent to another
/// thread: read them there, then drop the loan before completing the Call.
pub struct ArgsLoan {
    board: Arc<LoanBoard>,
    slot: u32,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the loan is a read-only view of registered memory that no one writes while it
// is out (module docs: the slot's buffers stay with the deferred Call, which cannot be
// completed while the board counts this loan) and that stays mapped while the board lives
// (it keeps the pools' regions); nothing in it is tied to a thread.
unsafe impl Send for ArgsLoan {}
// SAFETY: `&ArgsLoan` gives only shared reads of memory no one writes (see `Send`).
unsafe impl Sync for ArgsLoan {}

impl ArgsLoan {
    /// Lends `bytes`, the arguments of the Call in `slot`.
    ///
    /// # Safety
    ///
    /// `bytes` lie in a buffer of a pool `board` keeps alive, that buffer belongs to the
    /// Call in `slot`, and the engine writes it neither while `board` counts a loan of
    /// `slot` nor before that Call is completed.
    pub(crate) unsafe fn new(board: &Arc<LoanBoard>, slot: u32, bytes: &[u8]) -> ArgsLoan {
        board.take(slot);
        ArgsLoan {
            board: Arc::clone(board),
            slot,
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// The argument bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract: the bytes stay mapped (the board keeps the regions) and
        // unwritten while this loan is counted, which it is until dropped.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for ArgsLoan {
    fn drop(&mut self) {
        self.board.give_back(self.slot);
    }
}

impl core::fmt::Debug for ArgsLoan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArgsLoan")
            .field("slot", &self.slot)
            .field("len", &self.len)
            .finish()
    }
}

/// The reserved bytes of a deferred Call's DDP-eligible result, lent to another thread to
/// fill: write them there, then drop the loan before completing the Call, whose answer
/// pushes the same result ([`Response::push_bulk`](crate::dispatch::Response::push_bulk))
/// and finds the bytes in place.
pub struct BulkLoan {
    board: Arc<LoanBoard>,
    slot: u32,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the loan is the only access to registered memory that stays mapped while the
// board lives; the engine neither reads nor writes it while the board counts the loan
// (module docs). Nothing in it is tied to a thread.
unsafe impl Send for BulkLoan {}

impl BulkLoan {
    /// Lends `bytes`, a reserved result of the Call in `slot`.
    ///
    /// # Safety
    ///
    /// `bytes` lie in a buffer of a pool `board` keeps alive, that buffer belongs to the
    /// Call in `slot`, and the engine neither reads nor writes them while `board` counts a
    /// loan of `slot`.
    pub(crate) unsafe fn new(board: &Arc<LoanBoard>, slot: u32, bytes: &mut [u8]) -> BulkLoan {
        board.take(slot);
        BulkLoan {
            board: Arc::clone(board),
            slot,
            ptr: bytes.as_mut_ptr(),
            len: bytes.len(),
        }
    }

    /// The lent bytes, to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `new`'s contract: the bytes stay mapped and no one else reads or writes
        // them while this loan is counted; `&mut self` makes this view the only one.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// How many bytes were lent.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the loan is of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for BulkLoan {
    fn drop(&mut self) {
        self.board.give_back(self.slot);
    }
}

impl core::fmt::Debug for BulkLoan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BulkLoan")
            .field("slot", &self.slot)
            .field("len", &self.len)
            .finish()
    }
}
