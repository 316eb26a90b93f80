//! The responder (server side): accepts connections, judges each received Call with the
//! protocol crate's verdict (RFC 8166 §4.5), pulls Read chunks with RDMA Read, runs the
//! handler from the [`Dispatch`] table, places DDP-eligible results into Write chunks with
//! RDMA Write, sends long replies through the Reply chunk and replies with Send With
//! Invalidate when both ends allowed it (RFC 8797 §4.1).
//!
//! A [`ServerConn`] is driven by whoever owns it, typically a pinned worker thread that
//! calls [`ServerConn::poll`] on each of its connections in turn: every call does a bounded
//! amount of work, never blocks, takes no lock and allocates nothing.
//!
//! # Resources of one connection
//!
//! Registered at accept, the connection's own:
//! - `credits` receive buffers and `conn::SPARE_RECVS` more, all posted at accept and reposted
//!   (in a batch) before the replies of the Calls they carried are sent, unless the spare
//!   ones cover the batch (`flush.rs`): posted + in process ≥ `credits` at every instant,
//!   and the grant never exceeds `credits` (RFC 8166 §3.3.1).
//!
//! Taken from the server's [`Share`] at the first Call and held
//! while the connection lives (`large.rs`):
//! - one pull buffer and one bulk result buffer per receive buffer, for the reassembled
//!   arguments of a chunked Call and the DDP-eligible results of its reply, of an inline
//!   reply's size; larger ones stand in for a Call's lifetime when its chunks need them;
//! - a ring of reply buffers, indexed in send order, reused only once the Send that used it
//!   has been retired by a signaled completion.

#![deny(unsafe_code)]
// Indexes run over parallel fixed arrays (segments, echoes, work requests).
#![allow(clippy::needless_range_loop)]

mod accept;
mod answer;
mod flush;
mod handler;
mod large;
mod pull;
mod receive;
mod reply;
mod reverse;
mod state;
mod version;
mod written;

pub use crate::pool::share::ShareStats;
pub use accept::Server;
pub use large::SHED_AFTER;
pub use reverse::{ReverseCallError, ReverseError, ReverseReply, MAX_REVERSE};

use answer::*;
use handler::{Answerer, HandlerContext};
use version::Mode;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::ops::Range;

use rpcrdma_proto::chunks::{Piece, ReadPlan};
use rpcrdma_proto::header::ReadList;
use rpcrdma_proto::header::{HeaderView, RdmaError};
use rpcrdma_proto::private_data::ConnEnd;
use rpcrdma_proto::rpc::{CallHeader, ReplyHeader, RpcMessage};
use rpcrdma_proto::shape::{self, CallForm, CallShape, Refusal};
use rpcrdma_proto::verdict::{self, AcceptedCall, Action, CallSummary};

use crate::conn::{
    self, send_payload, view, ConnConfig, ConnError, Negotiation, ResponderCredits, SendQueue,
    Wire, SPARE_RECVS,
};
use crate::dispatch::{Deferred, Dispatch, Lookup, Outcome, Request, Response};
use crate::fabric::{
    Access, CompletionQueue, ConnRequest, Device, Listener, Payload, Provider, QpCaps, QpInit,
    QpState, QueuePair, RemoteAddr, SendOp, SendWr, Sge, Wc, WcStatus,
};
use crate::pool::loan::LoanBoard;
use crate::pool::share::Share;
use crate::pool::{Buf, BufferPool};
use crate::stats::{bump, Counters, Snapshot};
use crate::wrid::{self, Kind};

use reply::{Body, Echo, ReplyAction, ReplyTo, WireError};

/// Completions taken from the completion queue per poll.
const POLL_BATCH: usize = 32;
/// Idle polls between two looks at the queue pair's state (a system call on verbs,
/// `ibv_query_qp`): about every millisecond of idleness.
const STATE_CHECK_EVERY: u32 = 1 << 16;
/// Idle polls between two looks at whether a connection on the shared receive queue was
/// ended (a flag, no system call): its queue pair has no receive to flush when the peer
/// goes. Each look is a chain of cache misses on a worker polling hundreds of idle
/// connections, so it comes seldom (a millisecond or less with one connection).
const GONE_CHECK_EVERY: u32 = 1024;
/// Send-queue slots a reply may need (RDMA Writes plus its Send).
const REPLY_WRS: u64 =
    (reply::MAX_WRITE_CHUNKS * reply::MAX_SEGMENTS + reply::MAX_SEGMENTS + 1) as u64;

/// Where the Call in a receive buffer stands (a [`RecvSlot`]'s state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvState {
    /// The receive is posted.
    Posted,
    /// RDMA Reads are fetching its chunks; `phase` 0 fetches a Long Call's Position-Zero
    /// chunk, 1 the other chunks.
    Pulling { phase: u8 },
    /// Ready to be answered (its arguments are all local) but waiting for send resources.
    Ready,
    /// Its handler deferred the answer ([`Outcome::Deferred`]): waiting for
    /// [`ServerConn::complete`] with the ticket of generation `RecvSlot::gen`.
    Deferred,
    /// Waiting for the connection's large bulk buffers before pulling (`large.rs`).
    AwaitLarge,
}

/// One RDMA Read to post: `len` bytes from the peer's `remote` to `dst` of the pull buffer.
#[derive(Clone, Copy, Debug)]
struct ReadOp {
    remote: RemoteAddr,
    len: u32,
    dst: u32,
}

/// The Call received in one receive buffer, from its arrival to its answer (the buffer's
/// index is the slot's).
///
/// Laid out as declared, a line apart (`repr(C, align(64))`): what every Call's arrival
/// and answer write (its state, form, length, `bare`) in the slot's first line; `judged`,
/// the chunked Calls' summary, after.
#[repr(C, align(64))]
struct RecvSlot {
    state: RecvState,
    /// Set for a version 2 message that arrived while the connection's version was still
    /// open and that does not decode as version 2 (`version::decodes_as_v2`): it is judged,
    /// and refused, in version 2 whatever the connection speaks by the time it is answered,
    /// and it decides nothing. Cleared when a message arrives.
    open_v2: bool,
    queued: bool,
    /// The Call's shape, classified once as it arrived (`rpcrdma_proto::shape`): which
    /// answer path a Call that waited (for send room, for its pull, for shared buffers)
    /// takes, without trying the others.
    form: CallForm,
    byte_len: u32,
    /// Where the reassembled stream starts in the pull buffer (a multiple of 4 below 64):
    /// its largest chunk then lands at the same offset within a cache line as the bytes it
    /// is read from (`pull::align_shift`). Set when the pull starts.
    shift: u32,
    pending_reads: u32,
    /// Bumped for each ticket the slot's handlers are given ([`Deferred`]), so that a
    /// ticket answers one deferral only.
    gen: u32,
    /// Set with `judged` for a version 1 Call that provided no Write list and no Reply
    /// chunk: its reassembled stream's length, and its first Read handle (the rkey its
    /// reply invalidates, RFC 8797 §4.1). Such a Call's reply is a bare RDMA_MSG
    /// (`reply::short_pulled`).
    bare: Option<(u32, u32)>,
    next_read: usize,
    /// How many RDMA Reads the slot's list holds (its part of `ServerConn::read_lists`).
    n_reads: u32,
    /// What the verdict learned about a chunked or Long Call when its pull started, so that
    /// the later phases (the Long Call's second phase, the answer) resume it instead of
    /// judging the receive buffer again; `None` otherwise. Cleared when the receive is
    /// reposted.
    judged: Option<CallSummary>,
}

/// A Send prepared during a poll, posted at its end (`flush`).
#[derive(Clone, Copy, Debug)]
struct PendingSend {
    ring: u32,
    len: u32,
    inv: Option<u32>,
    /// Signaled whatever the send queue's rhythm: its ring entry holds a large buffer.
    signal: bool,
}

/// The fabric side of a connection: its queue pair and send-queue accounting, its counters,
/// whether it is lost, and how replies go out (inline limit, version); what the reply
/// path needs mutably.
struct FabricSide<P: Provider> {
    qp: P::Qp,
    sq: SendQueue,
    stats: Arc<Counters>,
    /// The per-RPC counters of the current poll, published to `stats` when it ends.
    tally: Tally,
    dead: bool,
    /// Replies of at most this many bytes are posted inline ([`ConnConfig::inline_sends`]
    /// within what the device and the queue pair granted).
    inline_max: u32,
    /// The version replies are encoded in.
    wire: Wire,
}

/// Why [`ServerConn::complete`] did not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompleteError {
    /// The ticket does not name a Call of this connection waiting for its answer: used
    /// already, made by another connection, or made for a handler that did not return
    /// [`Outcome::Deferred`].
    UnknownTicket,
    /// No reply buffer or send-queue room now: poll the connection and try again (the
    /// closure was not run).
    WouldBlock,
    /// The connection is lost; its deferred Calls are gone with it.
    ConnectionLost,
    /// Bytes of the Call are still lent ([`Response::lend_args`],
    /// [`Response::lend_bulk`]): drop every loan, then complete it (the closure was not
    /// run; the ticket stays valid).
    OnLoan,
}

impl core::fmt::Display for CompleteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for CompleteError {}

/// The registered memory one connection costs ([`ServerConn::memory`]), beside what it
/// holds of its server's share for its Calls ([`ServerConn::shared_bytes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnMemory {
    /// Bytes it registered for itself ([`ServerConn::registered_bytes`]).
    pub own_bytes: u64,
    /// Receives it reserved in the server's shared receive queue (0 without one).
    pub shared_receives: u32,
    /// Their registered bytes.
    pub shared_receive_bytes: u64,
}

impl ConnMemory {
    /// Both together: what accepting the connection cost.
    pub fn total_bytes(&self) -> u64 {
        self.own_bytes + self.shared_receive_bytes
    }
}

/// An accept's wait for the client's confirmation, as its log line ends
/// ([`ServerConn::confirm_note`]).
#[derive(Clone, Copy, Debug)]
pub struct ConfirmNote(pub Option<Duration>);

impl core::fmt::Display for ConfirmNote {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(w) => write!(
                f,
                "; {:.1} ms of the accept waited for the client to confirm",
                w.as_secs_f64() * 1e3
            ),
            None => Ok(()),
        }
    }
}

impl core::fmt::Display for ConnMemory {
    /// "X KiB registered for it" and, with a shared receive queue, "(N receives of the
    /// shared queue: A KiB, and B KiB of its own)".
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kib = |b: u64| b as f64 / 1024.0;
        write!(f, "{:.1} KiB registered for it", kib(self.total_bytes()))?;
        if self.shared_receives > 0 {
            write!(
                f,
                " ({} receives of the shared queue: {:.1} KiB, and {:.1} KiB of its own)",
                self.shared_receives,
                kib(self.shared_receive_bytes),
                kib(self.own_bytes)
            )?;
        }
        Ok(())
    }
}

/// Connection numbers, for tickets.
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// The counters every Short RPC moves, summed in plain integers during one
/// [`ServerConn::poll`] and published with one load and store per counter when it returns
/// (instead of one per RPC). Readers see them at most one poll late; nothing in the
/// connection reads them back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tally {
    calls: u64,
    bytes_received: u64,
    short_calls: u64,
    short_replies: u64,
    bytes_sent: u64,
    rpcs: u64,
}

impl Tally {
    fn publish(&mut self, stats: &Counters) {
        for (n, c) in [
            (&mut self.calls, &stats.calls),
            (&mut self.bytes_received, &stats.bytes_received),
            (&mut self.short_calls, &stats.short_calls),
            (&mut self.short_replies, &stats.short_replies),
            (&mut self.bytes_sent, &stats.bytes_sent),
            (&mut self.rpcs, &stats.rpcs),
        ] {
            if *n != 0 {
                bump(c, *n);
                *n = 0;
            }
        }
    }
}

/// One accepted connection, driven by [`poll`](Self::poll).
pub struct ServerConn<P: Provider> {
    io: FabricSide<P>,
    cq: P::Cq,
    recv: Box<[Buf<P>]>,
    /// Per slot: its pull buffer (empty until the first Call, `Large::dress`).
    pull: Vec<Buf<P>>,
    /// Every slot's list of RDMA Reads to post, in one allocation (`pull::ReadLists`).
    read_lists: pull::ReadLists,
    /// The slot whose pull buffer received the last Call answered (its lines still in this
    /// core's cache), while that slot's receive waits for a message (`pull.rs`).
    hot_pull: Option<u32>,
    /// Per slot: its bulk result buffer (empty until the first Call).
    bulk: Vec<Buf<P>>,
    /// The reply ring (empty until the first Call).
    ring: Vec<Buf<P>>,
    ring_seq: Box<[u64]>,
    /// The reply ring slot the next reply takes (always below the ring's length).
    ring_next: u32,
    slots: Box<[RecvSlot]>,
    /// Calls waiting for read budget.
    read_wait: VecDeque<u32>,
    /// Calls whose reply waits for send resources.
    ready: VecDeque<u32>,
    reads_in_flight: u32,
    in_process: u32,
    /// Calls whose handler deferred the answer (part of `in_process`).
    deferred: u32,
    /// Idle polls so far (wrapping), for the look at the queue pair's state.
    idle_polls: u32,
    /// The next Call's landing was prefetched since the last completion (`watch_next_recv`).
    watched: bool,
    /// This connection's number in its tickets.
    id: u64,
    reposts: Vec<u32>,
    /// With the shared receive queue: the slots free for the next Call (a stack).
    srq_free: Vec<u32>,
    /// With the shared receive queue: per slot, its placeholder while a Call's receive
    /// buffer stands in `recv` (empty without it).
    srq_parked: Box<[Option<Buf<P>>]>,
    /// Receives this connection reserved in the shared receive queue (0 without it).
    srq_reserved: u32,
    /// Which of the server's shared receive queues it takes its receives from (one per
    /// worker; 0 without them).
    srq_home: usize,
    /// Receives beyond the grant for version 2's reverse-direction Replies.
    reverse_slots: u32,
    /// The grant as of the start of this poll: the largest the client may know, since
    /// replies leave only at the end of a poll (or from `complete`, between polls).
    known_grant: u32,
    sends: Vec<PendingSend>,
    credits: ResponderCredits,
    negotiation: Negotiation,
    /// The connection's version state: plain version 1 takes the hot path.
    mode: Mode,
    /// Reverse-direction Calls to the client (version 2).
    reverse: reverse::Reverse<P>,
    dispatch: Arc<Dispatch>,
    config: ConnConfig,
    wc: [Wc; POLL_BATCH],
    /// The shared buffers standing in (declared after the buffers above, which may hold
    /// some of them: dropped after them).
    large: large::Large<P>,
    /// The receive buffers' pool (`None` on a shared receive queue: the slots' placeholders
    /// are the share's).
    recv_pool: Option<BufferPool<P>>,
    /// Loans of deferred Calls' bytes out to other threads, per slot; keeps the pools'
    /// regions alive while one is out, even past this connection.
    loans: Arc<LoanBoard>,
    echo: Box<Echo>,
    /// How long [`accept`](Self::accept) took.
    setup: Duration,
    /// The client's address, as its connection request gave it.
    peer_addr: Option<std::net::SocketAddr>,
    /// The share, whose protection domain holds the queue pair and every region above:
    /// declared last, so that it goes after them.
    _share: Arc<Share<P>>,
}

/// A shared receive queue's buffer lent when its connection was dropped: posted to its
/// queue again when the last loan goes (the loan board drops it), not left unposted.
struct Repost<P: Provider> {
    buf: Option<Buf<P>>,
    share: Arc<Share<P>>,
    home: usize,
}

impl<P: Provider> Drop for Repost<P> {
    fn drop(&mut self) {
        if let (Some(b), Some(recvs)) = (self.buf.take(), self.share.recvs(self.home)) {
            let _ = recvs.repost([b]);
        }
    }
}

impl<P: Provider> Drop for ServerConn<P> {
    /// A Call whose bytes are still lent keeps its pull and bulk buffers out of the share
    /// until the last loan goes (the loan board holds them), so that no other Call is
    /// given memory a borrower still reads or writes; the connection's place in the share's
    /// line is given up.
    fn drop(&mut self) {
        self.large.leave_line();
        self._share.leave_conn(self.registered_bytes());
        if let Some(recvs) = self._share.recvs(self.srq_home) {
            recvs.release(self.srq_reserved);
            for k in 0..self.srq_parked.len() {
                let Some(own) = self.srq_parked[k].take() else {
                    continue;
                };
                let b = core::mem::replace(&mut self.recv[k], own);
                if self.loans.outstanding(k as u32) != 0 {
                    // Lent: out of the queue until the last loan goes, then posted again.
                    self.loans.hold(Arc::new(Repost {
                        buf: Some(b),
                        share: Arc::clone(&self._share),
                        home: self.srq_home,
                    }));
                } else {
                    let _ = recvs.repost([b]);
                }
            }
        }
        let (pull, bulk) = (
            core::mem::take(&mut self.pull),
            core::mem::take(&mut self.bulk),
        );
        for (i, (p, b)) in pull.into_iter().zip(bulk).enumerate() {
            if self.loans.outstanding(i as u32) != 0 {
                self.loans.hold(Arc::new(p));
                self.loans.hold(Arc::new(b));
            }
        }
    }
}

impl<P: Provider> core::fmt::Debug for ServerConn<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ServerConn")
            .field("negotiation", &self.negotiation)
            .field("grant", &self.credits.grant())
            .field("dead", &self.io.dead)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> ServerConn<P> {
    /// How long accepting this connection took once its request was in hand: the
    /// domain, queues and buffers made and registered, the receives posted and the
    /// rdma_cm exchange done. Most of it is memory registration, which grows with the
    /// credits and the bulk sizes ([`registered_bytes`](Self::registered_bytes)).
    pub fn setup_time(&self) -> Duration {
        self.setup
    }

    /// The part of [`setup_time`](Self::setup_time) spent waiting, once the acceptance was
    /// sent, for the client to confirm the connection
    /// ([`QueuePair::confirm_wait`](crate::fabric::QueuePair::confirm_wait)): the client's
    /// and the connection manager's time, not this server's. `None` where the provider
    /// does not measure it (soft).
    pub fn confirm_wait(&self) -> Option<Duration> {
        self.io.qp.confirm_wait()
    }

    /// [`confirm_wait`](Self::confirm_wait) for an accept's log line: displays as
    /// "; N ms of the accept waited for the client to confirm", or as nothing where it is
    /// not measured.
    pub fn confirm_note(&self) -> ConfirmNote {
        ConfirmNote(self.confirm_wait())
    }

    /// The address the client connected from, as its connection request gave it
    /// ([`ConnRequest::peer_addr`]): an IPv4 or IPv6 address and port on verbs, `None` on
    /// soft (whose addresses are names, not IP addresses).
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.peer_addr
    }

    /// Answers the deferred Call `ticket` names ([`Outcome::Deferred`]): `answer` runs in
    /// place of its handler, with the same [`Request`] (the argument bytes are where they
    /// were) and a fresh [`Response`], and its outcome is sent as the handler's would have
    /// been — results inline, in Write chunks or through the Reply chunk, RDMA_ERROR where
    /// they do not fit what the requester provided. The receive and the reply are both
    /// posted before this returns, in the order `flush` chooses (RFC 8166 §3.3.1). `answer`
    /// may defer again, under a new ticket ([`Response::deferred`]). Call it on the thread
    /// that polls the connection; it never blocks. Refused, without running `answer`, for a
    /// ticket that names no waiting Call, when no reply buffer or send-queue room is free
    /// now (poll, then try again), or on a lost connection.
    pub fn complete<F>(&mut self, ticket: Deferred, answer: F) -> Result<(), CompleteError>
    where
        F: FnOnce(&Request<'_>, &mut Response<'_>) -> Outcome,
    {
        if self.io.dead {
            return Err(CompleteError::ConnectionLost);
        }
        let waiting = ticket.conn == self.id
            && self
                .slots
                .get(ticket.slot as usize)
                .is_some_and(|s| s.state == RecvState::Deferred && s.gen == ticket.gen);
        if !waiting {
            return Err(CompleteError::UnknownTicket);
        }
        if self.loans.outstanding(ticket.slot) != 0 {
            return Err(CompleteError::OnLoan);
        }
        if !self.ready.is_empty() || !self.can_reply() {
            return Err(CompleteError::WouldBlock);
        }
        self.deferred -= 1;
        let mut answer = Some(answer);
        let mut run = |req: &Request<'_>, resp: &mut Response<'_>| match answer.take() {
            Some(f) => f(req, resp),
            // Never: one answer runs the closure at most once.
            None => Outcome::SystemErr,
        };
        if !self.answer_with(ticket.slot, Some(&mut run)) {
            // Waiting for a large buffer (a Long reply's): nothing was run.
            self.deferred += 1;
            return Err(CompleteError::WouldBlock);
        }
        self.flush();
        self.io.tally.publish(&self.io.stats);
        Ok(())
    }

    /// Ends the connection.
    pub fn disconnect(&mut self) {
        self.io.qp.disconnect();
        self.io.dead = true;
    }

    /// Does the work that is ready: polls a batch of completions, answers the Calls whose
    /// arguments are local, advances RDMA Reads, reposts the consumed receives (in one post)
    /// and then posts the replies (in one post). Returns the number of completions and
    /// replies handled; 0 means idle. Never blocks.
    pub fn poll(&mut self) -> usize {
        if self.io.dead {
            return 0;
        }
        let mut work = self.poll_batch();
        if work != 0 && self.large.has_holders() && !self.io.dead {
            // Replies just posted hold shared bulk buffers until their (signaled) completions
            // are seen. A device completes them within microseconds, the soft provider as
            // they are posted: looked for now, the buffers go back to the worker's pool at
            // once instead of at this connection's next turn. With many connections that
            // turn is hundreds of others' work away, and every READ in flight then held a
            // buffer of its own: 1,000 connections each with a 64 KiB READ in flight kept
            // about 1,000 of them out and filled and copied each from cold memory, where a
            // buffer given back at once is taken again while its lines are still cached.
            work += self.poll_batch();
        }
        // Every count in the tally comes with work done (or with the loss of the connection).
        if work != 0 || self.io.dead {
            self.io.tally.publish(&self.io.stats);
        }
        work
    }

    /// What a worker's housekeeping does for the connection (every few hundred turns of
    /// its loop, [`Drive::housekeep`](crate::worker::Drive::housekeep)): on a shared
    /// receive queue, the connection is lost if its peer has gone (no receive of its own
    /// flushes to say so, and a worker that skips waiting connections polls them too
    /// seldom for the idle polls' own look); then its buffers go back if it has been idle
    /// for long ([`shed`](Self::shed)). Returns whether they went back.
    pub fn housekeep(&mut self, now: Instant) -> bool {
        if !self.io.dead && self.peer_gone() {
            self.lose();
            return false;
        }
        if self.reverse.in_flight > 0 {
            self.expire_reverse(now);
        }
        self.shed(now)
    }

    /// On a shared receive queue, whether the peer has gone: no receive of the
    /// connection's own flushes to say so.
    fn peer_gone(&self) -> bool {
        self.srq_reserved > 0 && self.io.qp.is_disconnected()
    }

    /// Whether what the last poll left undone waits for nothing but a completion: no Read
    /// to start, no receive to repost, no reply to post, no Call waiting for shared
    /// buffers.
    fn waits_on_nothing(&self) -> bool {
        self.read_wait.is_empty()
            && self.reposts.is_empty()
            && self.sends.is_empty()
            && self.large.waiting.is_empty()
    }

    fn poll_batch(&mut self) -> usize {
        let mut work = 0;
        self.known_grant = self.credits.grant();
        // Calls deferred for send resources first, in arrival order.
        while let Some(&idx) = self.ready.front() {
            if !self.can_reply() {
                break;
            }
            let answered = self.answer(idx);
            self.ready.pop_front();
            self.slots[idx as usize].queued = false;
            if !answered {
                // Waits for shared buffers, out of the way of the Calls behind it.
                self.await_share(idx);
            }
            work += 1;
        }
        let n = match self.cq.poll(&mut self.wc) {
            Ok(n) => n,
            Err(_) => {
                self.lose();
                return work;
            }
        };
        if n > 0 {
            // Most of them are Calls whose receives go back at the end of this poll.
            self.io.qp.expect_recv_posts(n);
            self.watched = false;
        } else if work == 0 && self.waits_on_nothing() {
            // Idle: no Read to start, no receive to repost, no reply to post. Returning now
            // keeps the turn short, so the next Call is noticed sooner.
            self.idle_polls = self.idle_polls.wrapping_add(1);
            // Waiting for the next Call: its message is read as soon as it completes (the
            // requester does the same for replies). Measured, alternated in the host's slow
            // phase: null RPC p50 761–771 ns without, 660–671 ns with; 32-deep null RPCs
            // unchanged in either phase (6.3–6.5 M/s slow, 12.1–12.6 M/s fast).
            // Once per wait: a worker polling many connections would otherwise fetch every
            // idle one's landing on every turn.
            if !self.watched {
                self.io.qp.watch_next_recv();
                self.watched = true;
            }
            if self.idle_polls.is_multiple_of(STATE_CHECK_EVERY) {
                self.check_state();
            } else if self.idle_polls.is_multiple_of(GONE_CHECK_EVERY) && self.peer_gone() {
                // No receive of its own to flush: a departed peer says nothing else.
                self.lose();
            }
            return 0;
        }

        for i in 0..n {
            let wc = self.wc[i];
            self.on_completion(&wc);
            if self.io.dead {
                return work + i + 1;
            }
        }
        work += n;
        if self.large.has_holders() {
            // Shared buffers of retired replies go back now: other connections' Calls may
            // be waiting for them.
            self.reclaim_large();
        }
        if !self.large.waiting.is_empty() {
            self.retry_large_waits();
        }
        self.start_reads();
        work += self.flush();
        work
    }

    fn on_completion(&mut self, wc: &Wc) {
        let Some(kind) = wrid::kind(wc.wr_id) else {
            return;
        };
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushErr {
                bump(&self.io.stats.wc_errors, 1);
            }
            self.lose();
            return;
        }
        let idx = wrid::index(wc.wr_id);
        let seq = wrid::seq(wc.wr_id);
        if seq != 0 {
            self.io.sq.retire(seq);
        }
        match kind {
            Kind::Recv => self.on_call(idx, wc.byte_len),
            Kind::SrqRecv => self.on_srq_recv(wc.wr_id, wc.byte_len),
            Kind::Read => {
                self.reads_in_flight -= 1;
                let slot = &mut self.slots[idx as usize];
                slot.pending_reads -= 1;
                if slot.pending_reads == 0 && slot.next_read == slot.n_reads as usize {
                    self.pull_phase_done(idx);
                }
            }
            _ => {}
        }
    }

    /// Loses the connection if its queue pair is in the error state although no completion
    /// said so: on the soft provider a peer killed in the middle of a Send leaves the
    /// completion slot it claimed in this connection's completion queue unpublished, and
    /// every completion behind it (the flushes of its death included) unseen, so nothing
    /// else would ever end the connection (the soft provider's documented difference 7).
    #[cold]
    fn check_state(&mut self) {
        if self.io.qp.state() == QpState::Err {
            self.lose();
        }
    }

    /// The provider refused a post: counted, and the connection ended.
    #[cold]
    fn refused(&mut self) {
        bump(&self.io.stats.post_refused, 1);
        self.lose();
    }

    fn lose(&mut self) {
        if !self.io.dead {
            self.io.dead = true;
            bump(&self.io.stats.conn_lost, 1);
            self.io.qp.disconnect();
        }
    }
}

/// What the general answer path needs besides the Call's transport header and the buffers
/// it writes: the connection's settings, the Call's pulled stream and its verdict so far.
struct General<'a> {
    /// What every answer takes.
    at: Answering<'a>,
    /// The reassembled Payload stream of a chunked or Long Call from its start
    /// (`answer::stream_area`).
    pull: &'a [u8],
    /// This end's receive size (its RDMA2_CONNPROP's Receive Buffer Size).
    recv_size: u32,
    /// The verdict's summary when the Call was judged as its pull started.
    judged: Option<CallSummary>,
    /// The version the message is judged in: the connection's, or version 2 for a message
    /// refused while the version was open (`RecvSlot::open_v2`).
    wire: Wire,
}

/// What every answer to a Call on a connection takes beside the Call and its buffers, for
/// the fast paths and the general one alike.
#[derive(Clone, Copy)]
struct Answering<'a> {
    /// The credit grant the reply advertises (RFC 8166 §3.3.1).
    grant: u32,
    /// The largest reply that may be sent inline (RFC 8166 §3.3.2).
    threshold: u32,
    /// Whether a reply may invalidate the Call's rkey (Send With Invalidate, RFC 8797 §4.1).
    swi: bool,
    /// The procedures.
    dispatch: &'a Dispatch,
}

impl<'a> Answering<'a> {
    /// A connection's, from its fields (a borrow of these alone, beside the buffers the
    /// answer writes).
    fn of(credits: &ResponderCredits, n: &Negotiation, dispatch: &'a Dispatch) -> Answering<'a> {
        Answering {
            grant: credits.grant(),
            threshold: n.reply_threshold(),
            swi: n.remote_invalidation(),
            dispatch,
        }
    }
}

#[cfg(test)]
mod tests;
