//! Running a procedure's handler for a Call: the context it runs with
//! ([`HandlerContext`]: its ticket, a deferred Call's answerer, the loan board), and
//! [`run_handler`], which every reply path (`answer.rs`, `reply.rs`, `written.rs`) calls.
//! It takes nothing from the rest of the responder, so those files, which call one
//! another, all stand above it (no two of them import each other through it).

use std::sync::Arc;

use crate::dispatch::{Deferred, Entry, Lend, Outcome, Request, Response, MAX_BULK_RESULTS};
use crate::pool::loan::LoanBoard;

/// A closure run in place of a procedure's handler: the one given to
/// [`ServerConn::complete`](super::ServerConn::complete) for a deferred Call.
pub(crate) type Answerer<'a, 'f> =
    &'a mut (dyn FnMut(&Request<'_>, &mut Response<'_>) -> Outcome + 'f);

/// What a handler is run with, beside its request and buffers, to answer one Call: the
/// ticket it is given ([`Response::deferred`]), for a deferred Call's completion the
/// closure that runs in its place, the loan board and the server's largest bulk buffer.
pub(crate) struct HandlerContext<'a, 'f> {
    pub(super) ticket: Deferred,
    pub(super) answerer: Option<Answerer<'a, 'f>>,
    /// The connection's loan board, through which the handler may lend the Call's bytes
    /// (`None`: it cannot).
    pub(super) loans: Option<&'a Arc<LoanBoard>>,
    /// Bytes of the largest bulk buffer the server has: a DDP-eligible result the Call's
    /// bulk buffer cannot hold but one this large could was too long for what the Call
    /// provided (refused as such); a larger one is beyond the server (the handler's answer
    /// stands).
    pub(super) max_bulk: usize,
}

#[cfg(test)]
impl HandlerContext<'_, '_> {
    /// The context of a procedure's own handler, for a Call in slot 0 of connection `conn`.
    pub(super) fn handler(conn: u64) -> Self {
        HandlerContext {
            ticket: Deferred {
                conn,
                slot: 0,
                gen: 1,
            },
            answerer: None,
            loans: None,
            max_bulk: usize::MAX,
        }
    }
}

/// Whether [`run_handler`]'s count says a DDP-eligible result did not fit the bulk buffer.
#[inline]
pub(crate) fn overflowed(n_items: usize) -> bool {
    n_items == usize::MAX
}

/// Builds a [`Response`] over the reply ring buffer and the bulk buffer and runs the
/// handler (or `run`'s answerer) for `req`: its outcome, the inline results' length, the
/// DDP-eligible results (offset and length in `bulk`) and their count. A count of
/// `usize::MAX` ([`overflowed`]) says a DDP-eligible result did not fit `bulk`: the length
/// is then where it would have ended, and the reply must be refused as too long.
#[inline(always)]
pub(crate) fn run_handler(
    entry: &Entry,
    run: &mut HandlerContext<'_, '_>,
    req: &Request<'_>,
    results: &mut [u8],
    bulk: &mut [u8],
) -> (Outcome, usize, [(u32, u32); MAX_BULK_RESULTS], usize) {
    let max = (entry.spec.max_results as usize).min(results.len()) & !3;
    let lend = run.loans.map(|board| Lend {
        board,
        args: req.args,
    });
    let mut resp = Response::new(
        run.ticket,
        lend,
        &mut results[..max],
        bulk,
        entry.spec.ddp_results as usize,
    );
    let outcome = match run.answerer.as_deref_mut() {
        Some(f) => f(req, &mut resp),
        None => (entry.handler)(req, &mut resp),
    };
    // Lent bytes stay with the Call until it is completed.
    let outcome = if resp.lent() {
        Outcome::Deferred
    } else {
        outcome
    };
    // A DDP-eligible result the bulk buffer could not hold, though the server's largest
    // could: the buffer holds what the Call's chunks and an inline reply can carry, so the
    // reply is too long for what the Call provided — refused as such (ERR_CHUNK; version 2:
    // RDMA2_ERR_REPLY_RESOURCE) rather than with whatever the handler made of it.
    if let (Some(need), Outcome::Success | Outcome::SystemErr) =
        (resp.overflow().filter(|&n| n <= run.max_bulk), outcome)
    {
        return (
            Outcome::SystemErr,
            need,
            [(0, 0); MAX_BULK_RESULTS],
            usize::MAX,
        );
    }
    // By value, without a copy of a variable length (a call of memcpy for none).
    let n = resp.bulk_items().len();
    (outcome, resp.results_len(), resp.bulk_items_padded(), n)
}
