//! The dispatch table: (program, version, procedure) → handler, with what the transport
//! needs to know about each procedure (RFC 8166 §6: DDP-eligibility and the largest reply).
//!
//! A handler receives its arguments as borrowed bytes — the receive buffer for a Short
//! Call, the pull buffer into which the Read chunks were fetched otherwise — and writes its
//! results straight into the registered reply buffer ([`Response::results`]) and its
//! DDP-eligible results into the registered bulk buffer ([`Response::push_bulk`]). The
//! responder then sends, writes or places them; the handler never copies for the transport.
//!
//! A handler that cannot answer at once (storage I/O under way) returns
//! [`Outcome::Deferred`] and answers later with the ticket [`Response::deferred`] gives it,
//! through [`ServerConn::complete`](crate::responder::ServerConn::complete).
//!
//! Missing entries give the RPC answers of RFC 5531 §9: an unknown program is
//! PROG_UNAVAIL, a known program without the version is PROG_MISMATCH with the lowest and
//! highest versions registered, a known version without the procedure is PROC_UNAVAIL.

#![deny(unsafe_code)]

use std::sync::Arc;

use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth};

use crate::pool::loan::{ArgsLoan, BulkLoan, LoanBoard};

/// Most DDP-eligible results one reply may carry.
pub const MAX_BULK_RESULTS: usize = 4;

/// What the transport knows about one procedure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcSpec {
    /// Largest encoded results the handler writes inline ([`Response::results`]), not
    /// counting the DDP-eligible results.
    pub max_results: u32,
    /// Whether the arguments end with a DDP-eligible opaque (which a requester sends in a
    /// Read chunk).
    pub ddp_arg: bool,
    /// Number of DDP-eligible results (each an opaque ending the results, at most
    /// [`MAX_BULK_RESULTS`]).
    pub ddp_results: u8,
}

impl ProcSpec {
    /// A procedure without DDP-eligible data whose results take at most `max_results`
    /// bytes.
    pub const fn plain(max_results: u32) -> ProcSpec {
        ProcSpec {
            max_results,
            ddp_arg: false,
            ddp_results: 0,
        }
    }
}

/// The arguments of one Call, as the handler sees them.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The RPC XID.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
    /// The caller's credential.
    pub cred: OpaqueAuth<'a>,
    /// The procedure's XDR-encoded arguments, unreduced (Read chunks already reinserted).
    pub args: &'a [u8],
}

impl<'a> Request<'a> {
    /// The request of the Call `call` (XID `xid`) whose arguments are `args`.
    pub(crate) fn of(xid: u32, call: &CallHeader<'a>, args: &'a [u8]) -> Self {
        Request {
            xid,
            prog: call.prog,
            vers: call.vers,
            proc_num: call.proc_num,
            cred: call.cred,
            args,
        }
    }
}

/// The ticket of a Call whose handler returned [`Outcome::Deferred`]: given to
/// [`ServerConn::complete`](crate::responder::ServerConn::complete) later, on the thread
/// that polls the connection, to answer it. Valid until then, or until the connection is
/// lost; a ticket used twice, or on another connection, is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Deferred {
    pub(crate) conn: u64,
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

impl Deferred {
    /// The number of the connection the Call came on
    /// ([`ServerConn::id`](crate::responder::ServerConn::id)): where to complete it, for a
    /// backend that drives several connections.
    pub fn connection(&self) -> u64 {
        self.conn
    }
}

/// What a [`Response`] needs to lend a Call's bytes ([`Response::lend_args`],
/// [`Response::lend_bulk`]): the connection's loan board, the Call's slot, its arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lend<'a> {
    pub(crate) board: &'a Arc<LoanBoard>,
    pub(crate) args: &'a [u8],
}

/// Where a handler writes its results.
#[derive(Debug)]
pub struct Response<'a> {
    deferred: Deferred,
    lend: Option<Lend<'a>>,
    /// Whether a loan was made: the Call is deferred then, whatever the handler returns.
    lent: bool,
    results: &'a mut [u8],
    results_len: usize,
    bulk: &'a mut [u8],
    bulk_used: usize,
    bulk_items: [(u32, u32); MAX_BULK_RESULTS],
    n_bulk: usize,
    max_bulk: usize,
    /// Where the bulk buffer would have had to end for a DDP-eligible result it could not
    /// hold (0: none): the reply is then refused as too long for what the Call provided.
    overflow: usize,
}

impl<'a> Response<'a> {
    pub(crate) fn new(
        deferred: Deferred,
        lend: Option<Lend<'a>>,
        results: &'a mut [u8],
        bulk: &'a mut [u8],
        max_bulk: usize,
    ) -> Self {
        Response {
            deferred,
            lend,
            lent: false,
            results,
            results_len: 0,
            bulk,
            bulk_used: 0,
            bulk_items: [(0, 0); MAX_BULK_RESULTS],
            n_bulk: 0,
            max_bulk: max_bulk.min(MAX_BULK_RESULTS),
            overflow: 0,
        }
    }

    /// The bytes a DDP-eligible result [`push_bulk`](Self::push_bulk) could not hold would
    /// have needed in the bulk buffer, if one was refused for room.
    pub(crate) fn overflow(&self) -> Option<usize> {
        (self.overflow != 0).then_some(self.overflow)
    }

    /// The ticket that answers this Call later, if the handler returns
    /// [`Outcome::Deferred`] (what it writes now is not sent then).
    pub fn deferred(&self) -> Deferred {
        self.deferred
    }

    /// The registered reply buffer the inline results go to (XDR, in place, at most the
    /// procedure's `max_results` bytes).
    pub fn results(&mut self) -> &mut [u8] {
        self.results
    }

    /// Sets how many bytes of [`results`](Self::results) were written.
    ///
    /// # Panics
    ///
    /// If `len` is larger than the buffer or not a multiple of 4 (XDR).
    pub fn set_results_len(&mut self, len: usize) {
        assert!(
            len <= self.results.len() && len & 3 == 0,
            "bad results length {len}"
        );
        self.results_len = len;
    }

    /// Copies `bytes` in as the whole inline results (convenience for small results).
    pub fn write_results(&mut self, bytes: &[u8]) {
        self.results[..bytes.len()].copy_from_slice(bytes);
        self.set_results_len(bytes.len());
    }

    /// Reserves the next DDP-eligible result of `len` bytes in the registered bulk buffer
    /// and returns it for the handler to fill; `None` when the procedure has no more
    /// DDP-eligible results or the buffer is too small. Results follow the inline results
    /// as XDR opaques, in the order pushed.
    pub fn push_bulk(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.n_bulk >= self.max_bulk {
            return None;
        }
        let start = (self.bulk_used + 7) & !7;
        let end = start.checked_add(len)?;
        if end > self.bulk.len() || len > u32::MAX as usize {
            self.overflow = self.overflow.max(end);
            return None;
        }
        self.bulk_items[self.n_bulk] = (start as u32, len as u32);
        self.n_bulk += 1;
        self.bulk_used = end;
        Some(&mut self.bulk[start..end])
    }

    /// Lends the Call's argument bytes — the same as [`Request::args`] — to another thread
    /// (a storage backend's I/O thread writing a WRITE's data to its file, say), without a
    /// copy. Lending defers the Call: it is answered with
    /// [`ServerConn::complete`](crate::responder::ServerConn::complete) once every loan of
    /// it was dropped (complete refuses with
    /// [`CompleteError::OnLoan`](crate::responder::CompleteError::OnLoan) before), whatever
    /// the handler returns. `None` where the engine cannot lend (a Response of a test).
    #[allow(unsafe_code)]
    pub fn lend_args(&mut self) -> Option<ArgsLoan> {
        let lend = self.lend?;
        self.lent = true;
        // SAFETY: `args` lie in the Call's receive or pull buffer, which belong to its slot
        // (the ticket's) and to pools the board keeps alive; the responder writes neither
        // before the Call is completed, and `complete` waits for the board to count no loan.
        Some(unsafe { ArgsLoan::new(lend.board, self.deferred.slot, lend.args) })
    }

    /// Reserves the next DDP-eligible result of `len` bytes, as
    /// [`push_bulk`](Self::push_bulk) does, and lends those registered bytes to another
    /// thread to fill (a READ's data read from its file straight into the buffer the
    /// responder RDMA-Writes into the requester's Write chunk). Lending defers the Call, as
    /// with [`lend_args`](Self::lend_args); the completion pushes the same results in the
    /// same order (`push_bulk(n)`, `n` at most the lent length) and finds the bytes the
    /// loan filled, unchanged. `None` when `push_bulk` would give `None`, or where the
    /// engine cannot lend.
    #[allow(unsafe_code)]
    pub fn lend_bulk(&mut self, len: usize) -> Option<BulkLoan> {
        let lend = self.lend?;
        let slot = self.deferred.slot;
        let bytes = self.push_bulk(len)?;
        // SAFETY: the bytes lie in the Call's bulk buffer, which belongs to its slot and to a
        // pool the board keeps alive; this Response hands out disjoint reservations only, and
        // the responder reads or writes the buffer again only when completing the Call,
        // which waits for the board to count no loan.
        let loan = unsafe { BulkLoan::new(lend.board, slot, bytes) };
        self.lent = true;
        Some(loan)
    }

    /// Whether bytes were lent ([`lend_args`](Self::lend_args),
    /// [`lend_bulk`](Self::lend_bulk)).
    pub(crate) fn lent(&self) -> bool {
        self.lent
    }

    pub(crate) fn results_len(&self) -> usize {
        self.results_len
    }

    pub(crate) fn bulk_items(&self) -> &[(u32, u32)] {
        &self.bulk_items[..self.n_bulk]
    }

    /// [`bulk_items`](Self::bulk_items) as the whole array, by value: the items made, then
    /// zeros (an item is only ever added after the last).
    pub(crate) fn bulk_items_padded(&self) -> [(u32, u32); MAX_BULK_RESULTS] {
        self.bulk_items
    }
}

/// How a handler ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// SUCCESS: the results were written.
    Success,
    /// The arguments did not decode: GARBAGE_ARGS.
    GarbageArgs,
    /// The handler failed: SYSTEM_ERR.
    SystemErr,
    /// The credential (or verifier) is refused: the Call is answered MSG_DENIED /
    /// AUTH_ERROR with this status (RFC 5531 §9: AUTH_BADCRED for a credential that does not
    /// decode, AUTH_TOOWEAK for a flavor the procedure does not accept), without results.
    AuthError(rpcrdma_proto::rpc::AuthStat),
    /// The handler answers later (its storage I/O, say, is under way): it keeps
    /// [`Response::deferred`] and calls
    /// [`ServerConn::complete`](crate::responder::ServerConn::complete) with it, which runs
    /// a closure in its place to write the results. Nothing is sent now; the Call keeps its
    /// receive (and so the credit it stands for, RFC 8166 §3.3) and its argument bytes stay
    /// in place, unchanged, until it is completed or the connection is lost. Replies may
    /// leave in any order. A handler that lent bytes ([`Response::lend_args`],
    /// [`Response::lend_bulk`]) has deferred, whatever it returns.
    Deferred,
}

/// A procedure's code. Shared by every connection (and worker) of an endpoint.
pub type Handler = Arc<dyn Fn(&Request<'_>, &mut Response<'_>) -> Outcome + Send + Sync>;

/// One registered procedure.
#[derive(Clone)]
pub struct Entry {
    /// What the transport knows about it.
    pub spec: ProcSpec,
    /// Its code.
    pub handler: Handler,
}

impl core::fmt::Debug for Entry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Entry").field("spec", &self.spec).finish()
    }
}

/// The answer of a lookup.
#[derive(Debug)]
pub enum Lookup<'a> {
    /// The procedure is registered.
    Found(&'a Entry),
    /// No such program: PROG_UNAVAIL.
    ProgUnavail,
    /// The program exists, not this version: PROG_MISMATCH with the range registered.
    ProgMismatch {
        /// Lowest version registered.
        low: u32,
        /// Highest version registered.
        high: u32,
    },
    /// The version exists, not this procedure: PROC_UNAVAIL.
    ProcUnavail,
}

/// The table. Build it, then share it (`Arc`) with every connection; lookups take no lock.
#[derive(Debug, Default, Clone)]
pub struct Dispatch {
    // Sorted by (prog, vers, proc): the source of truth, searched for what `dense` misses.
    entries: Vec<((u32, u32, u32), Entry)>,
    // The hot path: per (prog << 32 | vers), procedure numbers below `DENSE_PROCS` mapped to
    // 1 + their index in `entries` (0: none). A few versions, scanned in order.
    dense: Vec<(u64, Box<[u16]>)>,
}

/// Procedure numbers below this are found by indexing (RPC programs number their
/// procedures densely from 0; NFSv3 has 22, NFSv4 2).
const DENSE_PROCS: u32 = 128;

impl Dispatch {
    /// An empty table.
    pub fn new() -> Dispatch {
        Dispatch::default()
    }

    /// Registers (or replaces) a procedure.
    pub fn register<F>(&mut self, prog: u32, vers: u32, proc_num: u32, spec: ProcSpec, f: F)
    where
        F: Fn(&Request<'_>, &mut Response<'_>) -> Outcome + Send + Sync + 'static,
    {
        let key = (prog, vers, proc_num);
        let entry = Entry {
            spec,
            handler: Arc::new(f),
        };
        match self.entries.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => self.entries[i].1 = entry,
            Err(i) => self.entries.insert(i, (key, entry)),
        }
        self.reindex();
    }

    /// Rebuilds the dense index from `entries` (registration time only).
    fn reindex(&mut self) {
        self.dense.clear();
        for (i, ((prog, vers, proc_num), _)) in self.entries.iter().enumerate() {
            let key = u64::from(*prog) << 32 | u64::from(*vers);
            if self.dense.last().is_none_or(|(k, _)| *k != key) {
                self.dense
                    .push((key, vec![0; DENSE_PROCS as usize].into_boxed_slice()));
            }
            let (_, table) = self.dense.last_mut().expect("pushed above");
            if *proc_num < DENSE_PROCS {
                // At most 2^16 - 1 entries are indexed; beyond that the search finds them.
                if let Ok(v) = u16::try_from(i + 1) {
                    table[*proc_num as usize] = v;
                }
            }
        }
    }

    /// Finds a procedure, or the RPC error that replaces it.
    #[inline(always)]
    pub fn lookup(&self, prog: u32, vers: u32, proc_num: u32) -> Lookup<'_> {
        let vkey = u64::from(prog) << 32 | u64::from(vers);
        if proc_num < DENSE_PROCS {
            for (k, table) in &self.dense {
                if *k == vkey {
                    let i = table[proc_num as usize];
                    if i != 0 {
                        return Lookup::Found(&self.entries[usize::from(i) - 1].1);
                    }
                    break;
                }
            }
        }
        self.lookup_sparse(prog, vers, proc_num)
    }

    /// [`Dispatch::lookup`] past the dense tables: the sorted search, then the error.
    #[inline(never)]
    fn lookup_sparse(&self, prog: u32, vers: u32, proc_num: u32) -> Lookup<'_> {
        let key = (prog, vers, proc_num);
        if let Ok(i) = self.entries.binary_search_by_key(&key, |(k, _)| *k) {
            return Lookup::Found(&self.entries[i].1);
        }
        let mut low = u32::MAX;
        let mut high = 0;
        let mut have_vers = false;
        for ((p, v, _), _) in &self.entries {
            if *p == prog {
                low = low.min(*v);
                high = high.max(*v);
                have_vers |= *v == vers;
            }
        }
        if low == u32::MAX {
            Lookup::ProgUnavail
        } else if !have_vers {
            Lookup::ProgMismatch { low, high }
        } else {
            Lookup::ProcUnavail
        }
    }

    /// The largest `max_results` of any procedure.
    pub fn max_results(&self) -> u32 {
        self.entries
            .iter()
            .map(|(_, e)| e.spec.max_results)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_answers() {
        let mut d = Dispatch::new();
        d.register(100, 2, 1, ProcSpec::plain(8), |_, _| Outcome::Success);
        d.register(100, 3, 1, ProcSpec::plain(8), |_, _| Outcome::Success);
        assert!(matches!(d.lookup(100, 2, 1), Lookup::Found(_)));
        assert!(matches!(d.lookup(101, 2, 1), Lookup::ProgUnavail));
        assert!(matches!(
            d.lookup(100, 4, 1),
            Lookup::ProgMismatch { low: 2, high: 3 }
        ));
        assert!(matches!(d.lookup(100, 3, 2), Lookup::ProcUnavail));
    }

    #[test]
    fn indexed_lookups_find_what_was_registered_last() {
        let mut d = Dispatch::new();
        // Procedures on both sides of the dense limit, versions interleaved, replacements.
        let keys: Vec<(u32, u32, u32)> = (0..300u32)
            .map(|i| (100 + i % 3, 1 + i % 4, (i * 37) % 400))
            .collect();
        for (n, &(p, v, c)) in keys.iter().enumerate() {
            d.register(p, v, c, ProcSpec::plain(n as u32), |_, _| Outcome::Success);
        }
        for p in 99..104 {
            for v in 0..6 {
                for c in 0..420 {
                    let last = keys.iter().rposition(|k| *k == (p, v, c));
                    match (d.lookup(p, v, c), last) {
                        (Lookup::Found(e), Some(n)) => assert_eq!(e.spec.max_results, n as u32),
                        (Lookup::Found(_), None) => panic!("{p}/{v}/{c} found, never registered"),
                        (other, Some(_)) => panic!("{p}/{v}/{c} registered, got {other:?}"),
                        (_, None) => {}
                    }
                }
            }
        }
    }
}
