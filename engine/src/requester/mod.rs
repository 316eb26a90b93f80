//! The requester (client side): XIDs, a fixed-size pending table, credits (RFC 8166 §3.3),
//! every Call form (Short, Read chunks, Position-Zero Long Call; Write chunks and a Reply
//! chunk for the reply, §3.5, §4.3), per-RPC memory windows invalidated before the RPC
//! completes (§4.4.1, §8.1.3) — skipped for the window the reply's Send With Invalidate
//! already invalidated (RFC 8797 §4.1) — or persistent registration, timeouts and
//! [`Client::cancel`] (an RPC given up either way is invalidated before it completes).
//!
//! The interface is non-blocking: [`Client::submit`] sends a Call if a credit allows,
//! [`Client::poll_completions`] makes progress and hands each finished RPC to a callback as
//! a [`Completion`] borrowing the receive and result buffers (zero copy); the buffers are
//! reused when the callback returns. [`Client::call`] is the blocking convenience on top.
//!
//! After a lost connection the memory of every pending RPC is made unreachable first (its
//! windows are deallocated, RFC 8166 §4.4.1, §8.1.3). Then, by default, the pending RPCs
//! complete with [`RpcError::ConnectionLost`] and [`Client::reconnect`] establishes a new
//! connection (fresh credits, fresh RFC 8797 exchange, fresh windows) on which the caller
//! submits again under new XIDs. With a [`RetransmitPolicy`](crate::conn::RetransmitPolicy)
//! in [`ConnConfig::retransmit`] the requester does it itself: the pending RPCs stay pending
//! (state `Resend`; their Call bytes are still in the slot's send and argument buffers),
//! [`Client::poll_completions`] reconnects (one attempt per poll at most, each bounded by
//! the policy's `attempt_timeout` and the earliest pending deadline; polls during the
//! backoff return at once) and re-sends each Call with the SAME XID (RFC 5531 §9: a
//! duplicate-request cache recognises it), freshly bound windows whose new rkeys go into a
//! re-encoded transport header, and the new connection's credits, which start at one
//! (§3.3.3). Every RPC keeps its deadline (`Timeout` when it passes, connected or not);
//! when the attempts run out the pending RPCs complete with `ConnectionLost`. Allocation
//! happens only while reconnecting (the new queue pair and windows), never per retransmit.

#![deny(unsafe_code)]
// Indexes run over parallel fixed arrays (segments, echoes, work requests).
#![allow(clippy::needless_range_loop)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_proto::chunks::{self, ReturnedForm};
use rpcrdma_proto::header::{
    Chunks, Header, RdmaError, ReadSegment, Segment, MIN_HEADER_LEN, RPCRDMA_VERSION,
};
use rpcrdma_proto::plan::{self, CallForm, CallShape, DdpItem, Forced, PlanError, Thresholds};
use rpcrdma_proto::private_data::Role;
use rpcrdma_proto::rpc::{
    CallHeader, OpaqueAuth, ReplyHeader, AUTH_NONE, AUTH_NONE_ACCEPTED_LEN, AUTH_NONE_CALL_LEN,
    MAX_AUTH_BYTES,
};
use rpcrdma_proto::verdict;
use rpcrdma_proto::xdr::pad4;

use crate::conn::wrid::{self, Kind};
use crate::conn::{
    self, send_payload, view, ConnConfig, ConnError, Negotiation, Registration, RequesterCredits,
    SendQueue,
};
use crate::dispatch::MAX_BULK_RESULTS;
use crate::fabric::{
    Access, CompletionQueue, Device, MemoryRegion, MemoryWindow, MwBind, Payload, ProtectionDomain,
    Provider, QpCaps, QpInit, QueuePair, SendOp, SendWr, Sge, Wc, WcStatus,
};
use crate::pool::{Buf, BufferPool};
use crate::stats::{bump, Counters, Snapshot};

/// Encodes the transport header of the Call in `slot` (its Read segments `reads`, the Write
/// chunks and Reply chunk kept in the slot) at the start of its send buffer; false unless it
/// is exactly `len` bytes, the length its payload was laid out for.
fn encode_call_header<P: Provider>(
    slot: &mut Slot<P>,
    reads: &[ReadSegment],
    xid: u32,
    credit: u32,
    nomsg: bool,
    len: usize,
) -> bool {
    let mut writes: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for c in 0..slot.n_writes {
        writes[c] = &slot.writes[c][..slot.write_n[c]];
    }
    let chunks = Chunks {
        reads,
        writes: &writes[..slot.n_writes],
        reply: slot.has_reply_chunk.then(|| &slot.reply[..slot.reply_n]),
    };
    let header = if nomsg {
        Header::nomsg(xid, credit, chunks)
    } else {
        Header::msg(xid, credit, chunks)
    };
    let sendbuf = view::bytes_mut(&mut slot.send);
    sendbuf.len() >= len && header.encode(&mut sendbuf[..len]) == Ok(len)
}

/// Bits of the XID that name the pending-table slot.
const SLOT_BITS: u32 = 12;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
/// Most Write chunks per Call.
pub const MAX_WRITE_CHUNKS: usize = MAX_BULK_RESULTS;
/// Most segments per chunk.
pub const MAX_SEGMENTS: usize = 64;
/// Most read segments per Call.
pub const MAX_READ_SEGMENTS: usize = 128;
const POLL_BATCH: usize = 32;
/// Size of an RPC Call header with AUTH_NONE credential and verifier.
const CALL_HEADER_LEN: usize = AUTH_NONE_CALL_LEN;
/// An RDMA_MSG header with three empty lists (RFC 8166 §4.7: 28 bytes).
const BARE_MSG_LEN: usize = MIN_HEADER_LEN;
/// Size of an accepted RPC Reply header with an AUTH_NONE verifier.
const REPLY_HEADER_LEN: u32 = AUTH_NONE_ACCEPTED_LEN as u32;

/// Where the credential starts in [`short_call_prefix`]'s words (after the procedure
/// number): a Call with another credential takes the words before it.
const SHORT_CRED_WORD: usize = 13;

/// The words of a Short Call without chunks before its arguments: RDMA_MSG, version 1, empty
/// Read list, Write list and Reply chunk (RFC 8166 §4.2, §4.7), then the ONC RPC call header
/// with AUTH_NONE credential and verifier (RFC 5531 §9). What `Header::msg(..).encode` and
/// `CallHeader::encode` write for it (tested below).
#[inline]
fn short_call_prefix(xid: u32, credit: u32, prog: u32, vers: u32, proc_num: u32) -> [u32; 17] {
    [
        xid,
        RPCRDMA_VERSION,
        credit,
        0,
        0,
        0,
        0,
        xid,
        0,
        2,
        prog,
        vers,
        proc_num,
        0,
        0,
        0,
        0,
    ]
}

/// Writes `words` big-endian at the start of `buf`; returns the bytes written.
#[inline(always)]
fn put_words(buf: &mut [u8], words: &[u32]) -> usize {
    for (k, w) in words.iter().enumerate() {
        buf[4 * k..4 * k + 4].copy_from_slice(&w.to_be_bytes());
    }
    4 * words.len()
}

/// One RPC to send.
#[derive(Clone, Copy, Debug)]
pub struct CallArgs<'a> {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
    /// XDR-encoded arguments (a multiple of 4 bytes), before the DDP-eligible argument.
    pub args: &'a [u8],
    /// The DDP-eligible argument: an opaque that ends the arguments. Sent in a Read chunk
    /// when the Call would not fit inline otherwise.
    pub bulk_arg: Option<&'a [u8]>,
    /// One Write chunk per DDP-eligible result, with the result's largest length; 0 asks for
    /// the result inline (an empty Write chunk, RFC 8166 §4.3.2.3).
    pub bulk_results: &'a [u32],
    /// Largest inline results (not counting the DDP-eligible results' data).
    pub max_results: u32,
    /// How long to wait for the reply.
    pub timeout: Duration,
    /// The credential (RFC 5531 §8.2, §9): AUTH_NONE by default; AUTH_SYS (its body made
    /// with [`AuthSys::encode`](rpcrdma_proto::rpc::AuthSys::encode)) or any other flavor
    /// with a body of at most 400 bytes. The verifier sent is AUTH_NONE.
    pub cred: OpaqueAuth<'a>,
    /// Forms to use where smaller ones would fit (a Chunked or Long Call, a Reply chunk):
    /// none by default, the thresholds decide (RFC 8166 §3.5).
    pub forced: Forced,
}

impl<'a> CallArgs<'a> {
    /// A Call with inline arguments only, results of at most `max_results` bytes, an
    /// AUTH_NONE credential and a 5-second timeout.
    pub fn new(prog: u32, vers: u32, proc_num: u32, args: &'a [u8], max_results: u32) -> Self {
        CallArgs {
            prog,
            vers,
            proc_num,
            args,
            bulk_arg: None,
            bulk_results: &[],
            max_results,
            timeout: Duration::from_secs(5),
            cred: OpaqueAuth::NONE,
            forced: Forced {
                min_form: None,
                reply_chunk: false,
            },
        }
    }
}

/// Why an RPC did not produce a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcError {
    /// No reply in time; the RPC's memory was invalidated before this was reported.
    Timeout,
    /// Cancelled by [`Client::cancel`]; the RPC's memory was invalidated before this was
    /// reported.
    Cancelled,
    /// The connection was lost (with retransmission: and could not be re-established in
    /// the policy's attempts); the RPC's memory is unreachable.
    ConnectionLost,
    /// The responder answered RDMA_ERROR / ERR_VERS with its supported range.
    ErrVers {
        /// Lowest version.
        low: u32,
        /// Highest version.
        high: u32,
    },
    /// The responder answered RDMA_ERROR / ERR_CHUNK.
    ErrChunk,
    /// A Long Reply whose RPC header does not decode.
    BadReply,
}

impl core::fmt::Display for RpcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for RpcError {}

/// Why a Call could not be submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// No credit (or send-queue room) now, or reconnecting after a loss with
    /// retransmission on: poll and retry.
    WouldBlock,
    /// The Call does not fit any form, or the buffers (RFC 8166 §3.5).
    TooLarge(Option<PlanError>),
    /// Arguments that are not whole XDR units, or more chunks or segments than supported.
    Invalid(&'static str),
    /// The connection is lost (and, with retransmission, the attempts ran out);
    /// [`Client::reconnect`].
    Disconnected,
}

impl core::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for SubmitError {}

/// Why [`Client::cancel`] cancelled nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelError {
    /// No RPC with this XID waits for its reply: it was never submitted on this client, it
    /// has completed, or its completion is already under way (its reply, error or timeout
    /// is in hand, or it was cancelled before).
    NotPending,
}

impl core::fmt::Display for CancelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for CancelError {}

/// A reply, borrowed from the receive buffer (Short Reply) or the Reply chunk (Long Reply)
/// and the Write chunks; valid during the completion callback only.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    /// The RPC reply header (status).
    pub rpc: ReplyHeader<'a>,
    /// The results as received: every result inline, except that a DDP-eligible result
    /// placed in a Write chunk is represented by its opaque length word only.
    pub results: &'a [u8],
    bulk: [&'a [u8]; MAX_WRITE_CHUNKS],
    n_bulk: usize,
}

impl<'a> Reply<'a> {
    /// The DDP-eligible results received through Write chunks, one per chunk provided
    /// (empty for an unused or empty chunk).
    pub fn bulk(&self) -> &[&'a [u8]] {
        &self.bulk[..self.n_bulk]
    }

    /// Whether the RPC succeeded (MSG_ACCEPTED / SUCCESS).
    pub fn is_success(&self) -> bool {
        self.rpc.is_success()
    }
}

/// A finished RPC.
#[derive(Debug)]
pub struct Completion<'a> {
    /// The tag given to [`Client::submit`].
    pub tag: u64,
    /// The XID it used.
    pub xid: u32,
    /// The reply or why there is none.
    pub result: Result<Reply<'a>, RpcError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    /// Sent, waiting for the reply.
    Sent,
    /// Reply (or timeout) in hand, Local Invalidates outstanding.
    Invalidating,
    /// Timed out and reported; holds its credit until a late reply or a new connection
    /// (made when zombies hold every credit).
    Zombie,
    /// Pending across a lost connection (retransmission on): no window, no credit; sent
    /// again with the same XID once a new connection and a credit allow.
    Resend,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Reply,
    Error(RpcError),
}

struct Slot<P: Provider> {
    state: State,
    xid: u32,
    tag: u64,
    /// When the RPC times out; `None` until the first timeout check after the submission
    /// stamps it (submitting reads no clock), so an RPC never times out early.
    deadline: Option<Instant>,
    timeout: Duration,
    send: Buf<P>,
    arg: Buf<P>,
    res: Buf<P>,
    mw_arg: Option<P::Mw>,
    mw_res: Option<P::Mw>,
    /// rkeys of windows bound for this RPC and not yet invalidated.
    bound: [Option<u32>; 2],
    writes: [[Segment; MAX_SEGMENTS]; MAX_WRITE_CHUNKS],
    write_n: [usize; MAX_WRITE_CHUNKS],
    write_off: [u32; MAX_WRITE_CHUNKS],
    n_writes: usize,
    reply: [Segment; MAX_SEGMENTS],
    reply_n: usize,
    reply_off: u32,
    has_reply_chunk: bool,
    recv_idx: Option<u32>,
    recv_len: u32,
    grant: Option<u32>,
    outcome: Outcome,
    /// A late reply to this RPC, given up (timed out or cancelled), came while its windows
    /// were being invalidated: its credit (`grant`) comes back when they are.
    answered: bool,
    /// Bytes of the Call's Send (transport header + inline payload), kept for a retransmit.
    send_len: u32,
}

impl<P: Provider> Slot<P> {
    /// Forgets the chunks and windows of the slot's previous Call: the state of a Call that
    /// has none (a Short Call).
    #[inline]
    fn clear_chunks(&mut self) {
        self.bound = [None; 2];
        self.n_writes = 0;
        self.has_reply_chunk = false;
        self.reply_n = 0;
        self.reply_off = 0;
    }

    /// Marks the slot in flight with the Call `xid` for `tag`: waiting for its reply, no
    /// deadline yet (the first timeout check stamps it), no receive, no grant.
    #[inline]
    fn arm(&mut self, xid: u32, tag: u64, timeout: Duration, send_len: u32) {
        self.xid = xid;
        self.tag = tag;
        self.deadline = None;
        self.timeout = timeout;
        self.send_len = send_len;
        self.await_reply();
    }

    /// Marks the slot's Call sent (again): waiting for its reply, no receive, no grant.
    #[inline]
    fn await_reply(&mut self) {
        self.state = State::Sent;
        self.recv_idx = None;
        self.grant = None;
        self.outcome = Outcome::Reply;
        self.answered = false;
    }

    /// The error of an RPC the requester gave up on (timed out or cancelled) before its
    /// reply came: it is reported, and the slot keeps its credit until a late reply (RFC
    /// 8166 §3.3.1) or a new connection.
    #[inline]
    fn given_up(&self) -> Option<RpcError> {
        match self.outcome {
            Outcome::Error(e @ (RpcError::Timeout | RpcError::Cancelled)) => Some(e),
            _ => None,
        }
    }

    /// Whether [`Client::cancel`] may cancel this slot's RPC `xid`: sent and waiting for
    /// its reply, or waiting to be sent again after a loss.
    #[inline]
    fn cancellable(&self, xid: u32) -> bool {
        self.xid == xid
            && self.outcome == Outcome::Reply
            && matches!(self.state, State::Sent | State::Resend)
    }

    /// Whether a Short Reply without chunks (`verdict::short_reply`) with `xid` completes
    /// this RPC on the fast path: the slot waits for exactly this XID (`Sent`; a `Zombie`'s
    /// late reply only returns its credit), and its Call provided no Write chunk and no
    /// Reply chunk (so the empty lists returned are what CHECKLIST G-4 and G-17 accept and
    /// the whole reply is inline, RFC 8166 §3.5.1, §4.3) and left no window bound (nothing to
    /// invalidate before completing, §4.4.1). Anything else takes the general path.
    #[inline]
    fn takes_short_reply(&self, xid: u32) -> bool {
        self.xid == xid
            && self.state == State::Sent
            && self.n_writes == 0
            && !self.has_reply_chunk
            && self.bound == [None, None]
    }
}

/// Reconnection in progress after a loss with retransmission on.
#[derive(Clone, Copy, Debug)]
struct Recovery {
    /// Failed attempts so far.
    attempts: u32,
    /// No attempt before this.
    next_at: Instant,
}

/// Why a retransmission did not go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retransmit {
    /// The queue pair refused a post: the new connection is lost too.
    Post,
    /// The Call kept in the send buffer does not decode (never expected).
    Corrupt,
}

/// One client connection. When it is lost, the pending RPCs' memory is made unreachable
/// first; then they complete with [`RpcError::ConnectionLost`], or — with
/// [`ConnConfig::retransmit`] — are sent again, same XIDs, on a new connection the client
/// establishes itself (see the module docs).
pub struct Client<P: Provider> {
    qp: Option<P::Qp>,
    cq: P::Cq,
    pd: P::Pd,
    addr: P::Addr,
    recv: Box<[Buf<P>]>,
    slots: Box<[Slot<P>]>,
    free: Vec<u32>,
    reposts: Vec<u32>,
    sq: SendQueue,
    credits: RequesterCredits,
    negotiation: Negotiation,
    config: ConnConfig,
    stats: Arc<Counters>,
    /// `bytes_received` and `rpcs` of the completions of the current poll, published to
    /// `stats` with one store each when the batch is done (see [`Client::publish_batch`]).
    batch: [u64; 2],
    next_gen: u32,
    polls: u32,
    idle_polls: u32,
    dead: bool,
    /// Slots in `State::Resend`.
    resend_n: u32,
    /// Inline size asked of each queue pair ([`ConnConfig::inline_sends`] within the
    /// device's limit), and the one the current queue pair granted: Calls of at most
    /// `inline_max` bytes are posted inline.
    inline_cap: u32,
    inline_max: u32,
    /// Slots of RPCs cancelled with nothing to invalidate, completed at the next poll (at
    /// most one entry per slot: room for all is made at connection time).
    cancelled: Vec<u32>,
    /// `Some` while reconnecting automatically after a loss.
    recovery: Option<Recovery>,
    /// The loss was asked for ([`Client::disconnect`]): no retransmission.
    closing: bool,
    wc: [Wc; POLL_BATCH],
    /// Scratch for the read list of the Call being submitted (kept here so that a submission
    /// does not clear a few kilobytes of stack).
    reads: Box<[ReadSegment; MAX_READ_SEGMENTS]>,
    /// Short Calls' Sends held back by [`Client::cork`], in submission order.
    corked: bool,
    queued: [Queued; CORK_MAX],
    n_queued: usize,
    _pools: [BufferPool<P>; 4],
}

/// Most Sends held back while corked; one more posts them first.
const CORK_MAX: usize = 32;

/// A Send held back while corked: its slot, its send-queue number and signaling, and the
/// bytes to send. Flat fields, each stored on its own: built whole, the value went through
/// the stack and was copied in with wide loads spanning narrower stores, which cannot be
/// forwarded (perf: over half of `post_call`'s samples sat on that copy).
#[derive(Clone, Copy, Debug, Default)]
struct Queued {
    seq: u64,
    sge: Sge,
    idx: u32,
    signaled: bool,
}

/// The Send of the Call in slot `idx`, numbered and signaled as the send queue's `post`
/// said (`SendQueue::post`).
#[inline]
fn call_send<P: Provider>(
    idx: u32,
    (seq, signaled): (u64, bool),
    payload: Payload<'_>,
) -> SendWr<'_, P> {
    let wr = SendWr::new(
        wrid::pack(Kind::Send, idx, if signaled { seq } else { 0 }),
        SendOp::Send,
        payload,
    );
    if signaled {
        wr.signaled()
    } else {
        wr
    }
}

impl<P: Provider> core::fmt::Debug for Client<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Client")
            .field("negotiation", &self.negotiation)
            .field("credits", &self.credits)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

fn segs_needed(len: u32, max: u32) -> u32 {
    len.div_ceil(max).max(1)
}

impl<P: Provider> Client<P> {
    /// Connects to the responder at `addr`: allocates the connection's domain, queues,
    /// pending table and buffers, posts the reply receives, and does the RFC 8797
    /// exchange.
    pub fn connect(
        device: &P::Device,
        addr: &P::Addr,
        config: ConnConfig,
    ) -> Result<Client<P>, ConnError> {
        config.validate()?;
        let n = config.credits;
        let pd = device.alloc_pd()?;
        let sq_depth = 8 * n + 16;
        let cq = device.create_cq(sq_depth + n + 16)?;
        let remote = match config.registration {
            Registration::Windows => Access::LOCAL_WRITE | Access::MW_BIND,
            Registration::Persistent => {
                Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
            }
        };
        let (recv_pool, recv) =
            conn::pool_taken(&pd, config.recv_size as usize, n, Access::LOCAL_WRITE)?;
        let (send_pool, sends) =
            conn::pool_taken(&pd, config.send_size as usize, n, Access::LOCAL_WRITE)?;
        let (arg_pool, args) = conn::pool_taken(&pd, config.bulk_size as usize, n, remote)?;
        let (res_pool, ress) = conn::pool_taken(&pd, config.bulk_size as usize, n, remote)?;
        let pools = [recv_pool, send_pool, arg_pool, res_pool];
        // Rebound after the pools, so that on an early return the buffers drop first: a pool
        // dropped with buffers still out leaks its memory on purpose.
        let recv = recv;
        let mut sends = sends.into_vec().into_iter();
        let mut args = args.into_vec().into_iter();
        let mut ress = ress.into_vec().into_iter();
        let mut slots = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (mw_arg, mw_res) = match config.registration {
                Registration::Windows => (Some(pd.alloc_mw()?), Some(pd.alloc_mw()?)),
                Registration::Persistent => (None, None),
            };
            slots.push(Slot {
                state: State::Free,
                xid: 0,
                tag: 0,
                deadline: None,
                timeout: Duration::ZERO,
                send: sends.next().ok_or(ConnError::Config("pool"))?,
                arg: args.next().ok_or(ConnError::Config("pool"))?,
                res: ress.next().ok_or(ConnError::Config("pool"))?,
                mw_arg,
                mw_res,
                bound: [None; 2],
                writes: [[Segment::default(); MAX_SEGMENTS]; MAX_WRITE_CHUNKS],
                write_n: [0; MAX_WRITE_CHUNKS],
                write_off: [0; MAX_WRITE_CHUNKS],
                n_writes: 0,
                reply: [Segment::default(); MAX_SEGMENTS],
                reply_n: 0,
                reply_off: 0,
                has_reply_chunk: false,
                answered: false,
                recv_idx: None,
                recv_len: 0,
                grant: None,
                outcome: Outcome::Reply,
                send_len: 0,
            });
        }
        let mut client = Client {
            qp: None,
            cq,
            pd,
            addr: addr.clone(),
            recv,
            slots: slots.into_boxed_slice(),
            free: (0..n).rev().collect(),
            reposts: Vec::with_capacity(n as usize),
            cancelled: Vec::with_capacity(n as usize),
            sq: SendQueue::new(sq_depth, (sq_depth / 4).max(1)),
            credits: RequesterCredits::new(n),
            negotiation: Negotiation::complete(Role::Client, Negotiation::advertise(&config), &[]),
            config,
            stats: Arc::new(Counters::default()),
            next_gen: 1,
            batch: [0; 2],
            polls: 0,
            idle_polls: 0,
            dead: true,
            resend_n: 0,
            inline_cap: conn::inline_cap(&config, device.attr().max_inline_data),
            inline_max: 0,
            recovery: None,
            closing: false,
            wc: [Wc::default(); POLL_BATCH],
            reads: Box::new([ReadSegment::default(); MAX_READ_SEGMENTS]),
            corked: false,
            queued: [Queued::default(); CORK_MAX],
            n_queued: 0,
            _pools: pools,
        };
        client.establish(config.connect_timeout)?;
        Ok(client)
    }

    fn establish(&mut self, timeout: Duration) -> Result<(), ConnError> {
        let n = self.config.credits;
        let caps = QpCaps {
            max_send_wr: 8 * n + 16,
            max_recv_wr: n,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: self.inline_cap,
        };
        let local = Negotiation::advertise(&self.config);
        let init = QpInit::new(&self.cq, &self.cq, caps);
        let recv = &self.recv;
        let (qp, peer) = P::connect(&self.pd, &self.addr, init, &local.encode(), timeout, |qp| {
            conn::post_all_recvs::<P>(qp, recv)
        })?;
        self.negotiation = Negotiation::complete(Role::Client, local, peer.as_bytes());
        self.inline_max = qp.caps().max_inline_data.min(self.inline_cap);
        self.qp = Some(qp);
        self.sq.reset();
        self.credits.reset();
        // Every receive buffer was just posted: none may be posted twice.
        self.reposts.clear();
        self.dead = false;
        Ok(())
    }

    /// Establishes a new connection to the same address after a loss (waiting at most
    /// `connect_timeout`): new queue pair, fresh RFC 8797 exchange, credits back to one
    /// (RFC 8166 §3.3.3), fresh memory windows. Without retransmission the pending RPCs
    /// were completed with [`RpcError::ConnectionLost`] when the loss was noticed; with it
    /// this is the step [`poll_completions`](Self::poll_completions) takes by itself, and
    /// the RPCs still pending are sent again (same XIDs, new rkeys) from the next poll.
    pub fn reconnect(&mut self) -> Result<(), ConnError> {
        self.reconnect_within(self.config.connect_timeout)
    }

    fn reconnect_within(&mut self, timeout: Duration) -> Result<(), ConnError> {
        if !self.dead {
            return Ok(());
        }
        self.qp = None;
        // Drain completions of the old queue pair: their work request ids would name
        // receives and slots of the new one.
        while matches!(self.cq.poll(&mut self.wc), Ok(n) if n > 0) {}
        // Fresh windows (new rkeys); the old ones were deallocated when the loss was seen.
        // Windows left by a failed attempt were never exposed and are kept.
        if self.config.registration == Registration::Windows {
            for s in self.slots.iter_mut() {
                if s.mw_arg.is_none() {
                    s.mw_arg = Some(self.pd.alloc_mw()?);
                }
                if s.mw_res.is_none() {
                    s.mw_res = Some(self.pd.alloc_mw()?);
                }
            }
        }
        self.establish(timeout)?;
        self.recovery = None;
        self.closing = false;
        bump(&self.stats.reconnects, 1);
        Ok(())
    }

    /// What was negotiated with the responder.
    pub fn negotiation(&self) -> &Negotiation {
        &self.negotiation
    }

    /// The largest Call posted inline on the current connection ([`ConnConfig::inline_sends`]
    /// within what the device and the queue pair granted).
    pub fn inline_sends(&self) -> u32 {
        self.inline_max
    }

    /// Bytes of memory this connection registered for its buffers (receive, send or reply,
    /// and bulk buffers: every pool's buffers at their stride), the memory one more
    /// connection costs.
    pub fn registered_bytes(&self) -> u64 {
        self._pools
            .iter()
            .map(|p| u64::from(p.capacity()) * p.stride() as u64)
            .sum()
    }

    /// The credit state.
    pub fn credits(&self) -> RequesterCredits {
        self.credits
    }

    /// The counters, shared: readable from any thread.
    pub fn stats(&self) -> Arc<Counters> {
        Arc::clone(&self.stats)
    }

    /// A snapshot of the counters.
    pub fn snapshot(&self) -> Snapshot {
        self.stats.snapshot()
    }

    /// Whether the connection is lost.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// RPCs submitted and not yet completed (zombies of timed-out RPCs included, and RPCs
    /// waiting to be retransmitted on a new connection).
    pub fn in_flight(&self) -> u32 {
        self.credits.in_flight() + self.resend_n
    }

    /// Whether the requester is reconnecting by itself after a loss (retransmission on,
    /// attempts left): [`submit`](Self::submit) says `WouldBlock` meanwhile.
    pub fn is_reconnecting(&self) -> bool {
        self.recovery.is_some()
    }

    /// Ends the connection; pending RPCs complete with [`RpcError::ConnectionLost`] at the
    /// next poll, with or without a retransmission policy (an asked-for loss is not
    /// recovered from).
    pub fn disconnect(&mut self) {
        self.closing = true;
        if let Some(qp) = self.qp.as_mut() {
            qp.disconnect();
        }
    }

    /// Drops the connection as a failure would — fault injection for tests and for
    /// `rpcrdma bench rpc --disconnect-every`: the queue pair is disconnected, the next polls
    /// see the loss, and unlike [`disconnect`](Self::disconnect) a
    /// [`RetransmitPolicy`](crate::conn::RetransmitPolicy) applies (pending Calls are sent
    /// again on a new connection with their XIDs); without one they complete with
    /// [`RpcError::ConnectionLost`].
    pub fn sever(&mut self) {
        if let Some(qp) = self.qp.as_mut() {
            qp.disconnect();
        }
    }

    /// Sends a Call if a credit allows (RFC 8166 §3.3.1), choosing its form (§3.5) and
    /// exposing its chunk memory; returns its XID. Never blocks: without a credit it
    /// returns [`SubmitError::WouldBlock`].
    pub fn submit(&mut self, call: &CallArgs<'_>, tag: u64) -> Result<u32, SubmitError> {
        if self.dead {
            // While reconnecting by itself the requester will take Calls again: poll.
            return Err(if self.recovery.is_some() {
                SubmitError::WouldBlock
            } else {
                SubmitError::Disconnected
            });
        }
        if call.args.len() & 3 != 0 {
            return Err(SubmitError::Invalid("arguments must be whole XDR units"));
        }
        if call.bulk_results.len() > MAX_WRITE_CHUNKS {
            return Err(SubmitError::Invalid("too many DDP-eligible results"));
        }
        if call.cred.body.len() > MAX_AUTH_BYTES {
            return Err(SubmitError::Invalid("credential body over 400 bytes"));
        }
        if self.sq.room() < 8 || self.free.is_empty() || self.credits.available() == 0 {
            return Err(SubmitError::WouldBlock);
        }
        let max_seg = self.config.max_segment;
        // The Short Call without chunks (no DDP-eligible argument or result, no Reply chunk
        // needed): what `plan_call` chooses for it, decided here from the same sums (§3.5:
        // 28-byte header of three empty lists, Call and largest Reply within the thresholds).
        if call.bulk_arg.is_none_or(<[u8]>::is_empty)
            && call.bulk_results.is_empty()
            && max_seg != 0
            && matches!(call.forced.min_form, None | Some(CallForm::Short))
            && !call.forced.reply_chunk
        {
            let send_len =
                BARE_MSG_LEN + CALL_HEADER_LEN + pad4(call.cred.body.len()) + call.args.len();
            let max_reply =
                (BARE_MSG_LEN + REPLY_HEADER_LEN as usize) as u64 + u64::from(call.max_results);
            if send_len as u64 <= u64::from(self.negotiation.call_threshold())
                && max_reply <= u64::from(self.negotiation.reply_threshold())
                && send_len <= self.config.send_size as usize
            {
                return self.submit_short(call, tag, send_len);
            }
        }
        // Work requests go out in the order their send-queue numbers were given.
        self.post_queued();
        let bulk = call.bulk_arg.filter(|b| !b.is_empty());
        // The RPC call header with this credential (its body padded) and an AUTH_NONE
        // verifier.
        let call_header_len = CALL_HEADER_LEN + pad4(call.cred.body.len());
        let args_end = call_header_len + call.args.len();
        let call_len = args_end + bulk.map_or(0, |b| 4 + pad4(b.len()));
        let item = bulk.map(|b| DdpItem {
            offset: (args_end + 4) as u32,
            len: b.len() as u32,
            segments: segs_needed(b.len() as u32, max_seg),
        });
        let items = item.as_slice();
        let mut write_segs = [0u32; MAX_WRITE_CHUNKS];
        let mut max_reply = u64::from(REPLY_HEADER_LEN) + u64::from(call.max_results);
        for (i, &r) in call.bulk_results.iter().enumerate() {
            write_segs[i] = if r == 0 { 0 } else { segs_needed(r, max_seg) };
            max_reply += 4 + pad4(r as usize) as u64;
        }
        let reduced = REPLY_HEADER_LEN + call.max_results + 4 * call.bulk_results.len() as u32;
        let max_reply = u32::try_from(max_reply).map_err(|_| SubmitError::TooLarge(None))?;
        let shape = CallShape {
            call_len: call_len as u32,
            items,
            position_zero_segment_max: max_seg,
            write_chunks: &write_segs[..call.bulk_results.len()],
            max_reply_len: max_reply,
            max_reply_reduced_len: Some(reduced),
            reply_chunk_segments: segs_needed(max_reply, max_seg),
        };
        let thresholds = Thresholds {
            call: self.negotiation.call_threshold(),
            reply: self.negotiation.reply_threshold(),
        };
        let plan = plan::plan_call_forced(thresholds, &shape, call.forced)
            .map_err(|e| SubmitError::TooLarge(Some(e)))?;
        if plan.read_segments as usize > MAX_READ_SEGMENTS
            || write_segs.iter().any(|&n| n as usize > MAX_SEGMENTS)
            || (plan.reply_chunk && shape.reply_chunk_segments as usize > MAX_SEGMENTS)
        {
            return Err(SubmitError::Invalid("more segments than supported"));
        }
        let bulk_size = self.config.bulk_size as usize;
        // Where things go in the argument buffer (Read chunks) and the result buffer (Write
        // chunks, then the Reply chunk).
        let p0_len = plan.position_zero_len as usize;
        let item_off = (p0_len + 7) & !7;
        let arg_used = match plan.form {
            CallForm::Short => 0,
            CallForm::Chunked => bulk.map_or(0, |b| b.len()),
            CallForm::Long => item_off + bulk.map_or(0, |b| b.len()),
        };
        let mut res_used = 0usize;
        let mut write_off = [0u32; MAX_WRITE_CHUNKS];
        for (i, &r) in call.bulk_results.iter().enumerate() {
            write_off[i] = res_used as u32;
            res_used = (res_used + r as usize + 7) & !7;
        }
        let reply_off = res_used;
        if plan.reply_chunk {
            res_used += max_reply as usize;
        }
        if arg_used > bulk_size
            || res_used > bulk_size
            || plan.send_len() > self.config.send_size as usize
        {
            return Err(SubmitError::TooLarge(None));
        }

        let Some(idx) = self.free.pop() else {
            return Err(SubmitError::WouldBlock);
        };
        let i = idx as usize;
        let xid = self.next_xid(idx);
        let persistent = self.config.registration == Registration::Persistent;
        let slot = &mut self.slots[i];
        let rpc = CallHeader::new(
            xid,
            call.prog,
            call.vers,
            call.proc_num,
            call.cred,
            OpaqueAuth::NONE,
        );

        // The Payload stream: inline in the send buffer, and/or in the argument buffer.
        let hlen = plan.header_len;
        {
            let (stream_buf, at): (&mut [u8], usize) = match plan.form {
                CallForm::Short | CallForm::Chunked => (view::bytes_mut(&mut slot.send), hlen),
                CallForm::Long => (view::bytes_mut(&mut slot.arg), 0),
            };
            let s = &mut stream_buf[at..];
            if rpc.encode(s).is_err() {
                self.free.push(idx);
                return Err(SubmitError::Invalid("call header"));
            }
            s[call_header_len..args_end].copy_from_slice(call.args);
            if let Some(b) = bulk {
                s[args_end..args_end + 4].copy_from_slice(&(b.len() as u32).to_be_bytes());
                if plan.form == CallForm::Short {
                    let end = args_end + 4 + b.len();
                    s[args_end + 4..end].copy_from_slice(b);
                    s[end..args_end + 4 + pad4(b.len())].fill(0);
                }
            }
        }
        if let (Some(b), CallForm::Chunked | CallForm::Long) = (bulk, plan.form) {
            let off = if plan.form == CallForm::Long {
                item_off
            } else {
                0
            };
            view::bytes_mut(&mut slot.arg)[off..off + b.len()].copy_from_slice(b);
        }

        // Expose the memory: windows bound for this RPC, or the regions' own keys.
        let qp = self.qp.as_mut().ok_or(SubmitError::Disconnected)?;
        let arg_rkey;
        let res_rkey;
        slot.bound = [None; 2];
        if persistent {
            arg_rkey = slot.arg.region().rkey();
            res_rkey = slot.res.region().rkey();
        } else {
            // The argument span is read by the responder, the result span written.
            let spans = [
                (
                    arg_used,
                    slot.mw_arg.as_ref(),
                    &slot.arg,
                    Access::REMOTE_READ,
                ),
                (
                    res_used,
                    slot.mw_res.as_ref(),
                    &slot.res,
                    Access::REMOTE_WRITE,
                ),
            ];
            let mut bound = [None; 2];
            for (k, (used, mw, buf, access)) in spans.into_iter().enumerate() {
                let Some(mw) = mw.filter(|_| used > 0) else {
                    continue;
                };
                match bind_window::<P>(qp, &mut self.sq, mw, buf, used as u64, access, idx) {
                    Ok(rkey) => {
                        bound[k] = Some(rkey);
                        bump(&self.stats.registrations, 1);
                    }
                    Err(_) => {
                        // A refused post leaves the connection unusable: end it, so that the
                        // next poll completes what is pending (or reconnects).
                        qp.disconnect();
                        slot.bound = bound;
                        self.free.push(idx);
                        return Err(SubmitError::Disconnected);
                    }
                }
            }
            slot.bound = bound;
            arg_rkey = bound[0].unwrap_or(0);
            res_rkey = bound[1].unwrap_or(0);
        }

        // The chunk lists (RFC 8166 §3.4).
        let reads = &mut *self.reads;
        let mut nr = 0;
        let arg_addr = slot.arg.addr();
        let split = |pos: u32, base: u64, len: usize, out: &mut [ReadSegment], n: &mut usize| {
            let mut done = 0usize;
            while done < len {
                let l = (len - done).min(max_seg as usize);
                out[*n] = ReadSegment::new(pos, arg_rkey, l as u32, base + done as u64);
                *n += 1;
                done += l;
            }
        };
        if plan.form == CallForm::Long {
            split(0, arg_addr, p0_len, reads, &mut nr);
        }
        if let (Some(b), Some(it), CallForm::Chunked | CallForm::Long) = (bulk, item, plan.form) {
            let off = if plan.form == CallForm::Long {
                item_off
            } else {
                0
            };
            split(it.offset, arg_addr + off as u64, b.len(), reads, &mut nr);
        }
        let res_addr = slot.res.addr();
        slot.n_writes = call.bulk_results.len();
        for (c, &r) in call.bulk_results.iter().enumerate() {
            let mut n = 0;
            let mut done = 0usize;
            while done < r as usize {
                let l = (r as usize - done).min(max_seg as usize);
                slot.writes[c][n] = Segment::new(
                    res_rkey,
                    l as u32,
                    res_addr + (write_off[c] as usize + done) as u64,
                );
                n += 1;
                done += l;
            }
            slot.write_n[c] = n;
            slot.write_off[c] = write_off[c];
        }
        slot.has_reply_chunk = plan.reply_chunk;
        slot.reply_n = 0;
        slot.reply_off = reply_off as u32;
        if plan.reply_chunk {
            let mut done = 0usize;
            while done < max_reply as usize {
                let l = (max_reply as usize - done).min(max_seg as usize);
                slot.reply[slot.reply_n] =
                    Segment::new(res_rkey, l as u32, res_addr + (reply_off + done) as u64);
                slot.reply_n += 1;
                done += l;
            }
        }
        let nomsg = plan.form.proc() == rpcrdma_proto::header::Proc::NoMsg;
        let credit = self.credits.requested();
        if !encode_call_header(slot, &reads[..nr], xid, credit, nomsg, hlen) {
            self.free.push(idx);
            return Err(SubmitError::Invalid("header does not match its plan"));
        }
        let send_len = plan.send_len() as u32;
        self.post_call(idx, xid, tag, call.timeout, send_len, false)?;
        let st = &self.stats;
        if arg_used > 0 {
            bump(&st.bytes_read, arg_used as u64);
        }
        bump(
            match plan.form {
                CallForm::Short => &st.short_calls,
                CallForm::Chunked => &st.chunked_calls,
                CallForm::Long => &st.long_calls,
            },
            1,
        );
        Ok(xid)
    }

    /// The XID of the next Call in slot `idx`: the slot in the low bits, a generation above
    /// (so that a late reply to the slot's previous Call does not match).
    #[inline]
    fn next_xid(&mut self, idx: u32) -> u32 {
        let xid = (self.next_gen << SLOT_BITS) | idx;
        self.next_gen = self.next_gen.wrapping_add(1) & ((1 << (32 - SLOT_BITS)) - 1);
        xid
    }

    /// [`submit`](Self::submit) of a Short Call without chunks of `send_len` bytes (checked
    /// to fit): the transport header's seven words and the RPC call header written in place,
    /// no planning, no window.
    fn submit_short(
        &mut self,
        call: &CallArgs<'_>,
        tag: u64,
        send_len: usize,
    ) -> Result<u32, SubmitError> {
        let Some(idx) = self.free.pop() else {
            return Err(SubmitError::WouldBlock);
        };
        let i = idx as usize;
        let xid = self.next_xid(idx);
        let slot = &mut self.slots[i];
        let credit = self.credits.requested();
        let buf = &mut view::bytes_mut(&mut slot.send)[..send_len];
        let words = short_call_prefix(xid, credit, call.prog, call.vers, call.proc_num);
        // AUTH_NONE: every word fixed. Another credential: the words up to the procedure
        // number, then the credential (its length and padded body) and an AUTH_NONE verifier.
        // (Each branch writes a constant number of words, which the compiler unrolls.)
        let at = if call.cred.flavor == AUTH_NONE && call.cred.body.is_empty() {
            put_words(buf, &words)
        } else {
            let at = put_words(buf, &words[..SHORT_CRED_WORD]);
            let Ok(n) = call.cred.encode(&mut buf[at..]) else {
                self.free.push(idx);
                return Err(SubmitError::Invalid("credential"));
            };
            buf[at + n..at + n + 8].fill(0);
            at + n + 8
        };
        buf[at..].copy_from_slice(call.args);
        slot.clear_chunks();
        let send_len = send_len as u32;
        self.post_call(idx, xid, tag, call.timeout, send_len, self.corked)?;
        let st = &self.stats;
        bump(&st.short_calls, 1);
        Ok(xid)
    }

    /// Cancels the RPC `xid` (as [`submit`](Self::submit) returned it): it completes at
    /// the next [`poll_completions`](Self::poll_completions) — once and only once, like
    /// every RPC — with [`RpcError::Cancelled`], after the memory its Call exposed is
    /// unreachable: the windows still bound are invalidated with Local Invalidates first
    /// (RFC 8166 §4.4.1, §8.1.3), so a result buffer is never reused while the responder
    /// can still write it. The Call may already have reached the responder, which may still
    /// execute it: as for a timeout, the RPC keeps its credit until the late reply returns
    /// it (§3.3.1) or the connection is replaced, and the reply is then dropped. An RPC
    /// waiting to be sent again after a loss (retransmission on) exposes nothing and is not
    /// sent again. A Call still held back by [`cork`](Self::cork) is posted first (its
    /// credit is taken, so the responder's reply must find its slot).
    pub fn cancel(&mut self, xid: u32) -> Result<(), CancelError> {
        let i = (xid & SLOT_MASK) as usize;
        if !self.slots.get(i).is_some_and(|s| s.cancellable(xid)) {
            return Err(CancelError::NotPending);
        }
        self.post_queued();
        bump(&self.stats.cancels, 1);
        let s = &mut self.slots[i];
        s.outcome = Outcome::Error(RpcError::Cancelled);
        if s.state == State::Resend {
            self.cancelled.push(i as u32);
            return Ok(());
        }
        match self.post_invalidates(i as u32) {
            // Completed by the signaled Local Invalidate's completion (`on_completion`).
            Ok(true) => {}
            Ok(false) => self.cancelled.push(i as u32),
            // The connection is ended; the next poll completes the RPC with the loss.
            Err(()) => {
                if let Some(qp) = self.qp.as_mut() {
                    qp.disconnect();
                }
            }
        }
        Ok(())
    }

    /// Completes the RPCs [`cancel`](Self::cancel) left to the next poll: those that had
    /// no window to invalidate, and those waiting to be sent again.
    #[inline(never)]
    fn finish_cancelled<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        for k in 0..self.cancelled.len() {
            let idx = self.cancelled[k];
            let s = &mut self.slots[idx as usize];
            if s.outcome != Outcome::Error(RpcError::Cancelled) {
                continue;
            }
            match s.state {
                State::Invalidating => self.finish(idx, f),
                State::Resend => {
                    f(Completion {
                        tag: s.tag,
                        xid: s.xid,
                        result: Err(RpcError::Cancelled),
                    });
                    s.state = State::Free;
                    self.free.push(idx);
                    self.resend_n -= 1;
                }
                _ => {}
            }
        }
        self.cancelled.clear();
    }

    /// Holds back the Sends of the Short Calls submitted from now on, to post them together
    /// (one list: on the soft fabric one claim of the server's receives for all of them, on
    /// verbs one doorbell) at [`uncork`](Self::uncork), at the next
    /// [`poll_completions`](Self::poll_completions), before any other kind of Call, or when
    /// 32 are held. A run-to-completion caller corks, submits what is ready, and uncorks.
    pub fn cork(&mut self) {
        self.corked = true;
    }

    /// Posts the Sends held back since [`cork`](Self::cork) and stops holding them back.
    pub fn uncork(&mut self) {
        self.corked = false;
        self.post_queued();
    }

    /// Posts the held-back Sends as one list. They were accepted (their credits taken, their
    /// slots Sent): if the post fails the connection is ended, and the next poll completes
    /// them as any Call lost with it.
    #[inline]
    fn post_queued(&mut self) {
        if self.n_queued != 0 {
            self.post_held();
        }
    }

    /// [`post_queued`](Self::post_queued) with something held: kept out of line, so that the
    /// poll loop's check stays one compare.
    #[inline(never)]
    fn post_held(&mut self) {
        let n = self.n_queued;
        self.n_queued = 0;
        let Some(qp) = self.qp.as_mut() else {
            return;
        };
        let (slots, inline_max) = (&self.slots, self.inline_max);
        let posted = if let [q] = &self.queued[..n] {
            // One Send: one work request, without building (and zeroing) the 32-entry list
            // (measured: some 80 ns of a depth-1 round trip).
            let payload = send_payload(&slots[q.idx as usize].send, &q.sge, inline_max);
            qp.post_send(&call_send(q.idx, (q.seq, q.signaled), payload))
                .is_ok()
        } else {
            let mut wrs = [SendWr::<P>::send(0, &[]); CORK_MAX];
            for (wr, q) in wrs.iter_mut().zip(&self.queued[..n]) {
                let payload = send_payload(&slots[q.idx as usize].send, &q.sge, inline_max);
                *wr = call_send(q.idx, (q.seq, q.signaled), payload);
            }
            qp.post_send_list(&wrs[..n]).is_ok()
        };
        if !posted {
            qp.disconnect();
        }
    }

    /// Posts the Send of the Call built in slot `idx` (its first `send_len` bytes), takes
    /// its credit and marks the slot Sent; on failure the slot goes back to the free list.
    #[inline]
    fn post_call(
        &mut self,
        idx: u32,
        xid: u32,
        tag: u64,
        timeout: Duration,
        send_len: u32,
        hold: bool,
    ) -> Result<(), SubmitError> {
        if self.qp.is_none() {
            self.free.push(idx);
            return Err(SubmitError::Disconnected);
        }
        if hold && self.n_queued == CORK_MAX {
            self.post_queued();
        }
        let post = self.sq.post(false);
        let sge = self.slots[idx as usize].send.sge_span(0, send_len);
        if hold {
            let q = &mut self.queued[self.n_queued];
            (q.seq, q.signaled) = post;
            // Field by field, as for `Queued` itself.
            (q.sge.addr, q.sge.length, q.sge.lkey) = (sge.addr, sge.length, sge.lkey);
            q.idx = idx;
            self.n_queued += 1;
        } else {
            let payload = send_payload(&self.slots[idx as usize].send, &sge, self.inline_max);
            let wr = call_send(idx, post, payload);
            let posted = self.qp.as_mut().is_some_and(|qp| {
                let ok = qp.post_send(&wr).is_ok();
                if !ok {
                    // As for a refused bind: end the connection, the next poll notices.
                    qp.disconnect();
                }
                ok
            });
            if !posted {
                self.free.push(idx);
                return Err(SubmitError::Disconnected);
            }
        }
        self.credits.take();
        self.slots[idx as usize].arm(xid, tag, timeout, send_len);
        bump(&self.stats.calls, 1);
        bump(&self.stats.bytes_sent, u64::from(send_len));
        Ok(())
    }

    /// Makes progress — polls a batch of completions, matches replies to pending RPCs,
    /// invalidates their memory, checks timeouts — and hands every finished RPC to `f`.
    /// Returns the number of completions processed; 0 means idle. Never blocks, except
    /// while reconnecting after a loss with [`ConnConfig::retransmit`]: a poll then makes
    /// at most one connection attempt, bounded by the policy's `attempt_timeout` and the
    /// earliest pending deadline (polls during the backoff return at once), and re-sends
    /// the pending Calls the new connection's credits allow.
    pub fn poll_completions<F>(&mut self, mut f: F) -> usize
    where
        F: FnMut(Completion<'_>),
    {
        self.post_queued();
        if !self.cancelled.is_empty() {
            self.finish_cancelled(&mut f);
        }
        if self.dead {
            return self.recover(&mut f);
        }
        let n = match self.cq.poll(&mut self.wc) {
            Ok(n) => n,
            Err(_) => {
                self.lose(&mut f);
                return 0;
            }
        };
        if let Some(qp) = &self.qp {
            if n > 0 {
                // Most of them are replies whose receives go back at the end of this poll.
                qp.expect_recv_posts(n);
            } else {
                // Waiting for a reply: its message is read as soon as it completes.
                qp.watch_next_recv();
            }
        }
        for k in 0..n {
            let wc = self.wc[k];
            self.on_completion(&wc, &mut f);
            if self.dead {
                self.publish_batch();
                return k + 1;
            }
        }
        self.publish_batch();
        // Timeouts and the queue pair's state are looked at every 256th idle poll and every
        // 64th busy one: a clock reading or a device query (and a scan of the pending
        // table) per poll would slow the spin that notices replies; 256 idle polls take a
        // few microseconds, far below any timeout.
        let due = if n == 0 {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            self.idle_polls & 255 == 0
        } else {
            self.polls = self.polls.wrapping_add(1);
            self.polls & 63 == 0
        };
        if due {
            self.check_timeouts(&mut f);
            if self.zombies_hold_every_credit() {
                // Only late replies could free a credit, and none has come within the RPCs'
                // timeouts: this connection carries nothing more. A new one starts the
                // credit accounting over (RFC 8166 §3.3.3), as an ONC RPC transport
                // replaces its connection when RPCs time out.
                self.lose(&mut f);
                return n;
            }
            // A loss shows as flushed receives; the queue pair's state is looked at on the
            // same cadence as the clock (it is a query to the device: `ibv_query_qp`).
            if self
                .qp
                .as_ref()
                .is_some_and(|q| q.state() == crate::fabric::QpState::Err)
            {
                self.lose(&mut f);
                return n;
            }
        }
        if self.resend_n > 0 {
            self.resend(&mut f);
        }
        self.repost();
        n
    }

    /// Adds the counts of the batch just handled to the shared counters: one load and store
    /// per counter per poll instead of one per reply (readers see them at most one batch
    /// late; nothing in the requester reads them back).
    #[inline]
    fn publish_batch(&mut self) {
        let [received, rpcs] = core::mem::take(&mut self.batch);
        if received != 0 {
            bump(&self.stats.bytes_received, received);
        }
        if rpcs != 0 {
            bump(&self.stats.rpcs, rpcs);
        }
    }

    fn on_completion<F: FnMut(Completion<'_>)>(&mut self, wc: &Wc, f: &mut F) {
        let Some(kind) = wrid::kind(wc.wr_id) else {
            return;
        };
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushErr {
                bump(&self.stats.wc_errors, 1);
            }
            return self.lose(f);
        }
        let seq = wrid::seq(wc.wr_id);
        if seq != 0 {
            self.sq.retire(seq);
        }
        let idx = wrid::index(wc.wr_id);
        match kind {
            Kind::Recv => self.on_reply(idx, wc.byte_len, wc.invalidated_rkey, f),
            Kind::LocalInv => {
                let slot = &mut self.slots[idx as usize];
                if slot.state == State::Invalidating {
                    self.finish(idx, f);
                }
            }
            _ => {}
        }
    }

    fn on_reply<F: FnMut(Completion<'_>)>(
        &mut self,
        ridx: u32,
        len: u32,
        inv: Option<u32>,
        f: &mut F,
    ) {
        self.batch[0] += u64::from(len);
        let bytes = view::bytes(&self.recv[ridx as usize], len as usize);
        if let Some(short) = verdict::short_reply(bytes) {
            let i = (short.xid & SLOT_MASK) as usize;
            if let Some(slot) = self
                .slots
                .get_mut(i)
                .filter(|s| s.takes_short_reply(short.xid))
            {
                // The Short-reply fast path (see `Slot::takes_short_reply`): what the general
                // path below does for this reply, without judging it again, checking empty
                // lists against empty provisions, or re-deriving the results.
                slot.grant = Some(short.credit);
                slot.outcome = Outcome::Reply;
                bump(&self.stats.short_replies, 1);
                self.batch[1] += 1;
                f(Completion {
                    tag: slot.tag,
                    xid: slot.xid,
                    result: Ok(Reply {
                        rpc: short.reply,
                        results: short.results,
                        bulk: [&[]; MAX_WRITE_CHUNKS],
                        n_bulk: 0,
                    }),
                });
                self.reposts.push(ridx);
                self.credits.on_reply(Some(short.credit));
                slot.state = State::Free;
                slot.recv_idx = None;
                self.free.push(i as u32);
                return;
            }
        }
        self.on_reply_general(ridx, len, inv, f)
    }

    /// [`on_reply`](Self::on_reply) for any reply: judged in full, matched, its chunks
    /// checked against what the Call provided, its windows invalidated before completing.
    fn on_reply_general<F: FnMut(Completion<'_>)>(
        &mut self,
        ridx: u32,
        len: u32,
        inv: Option<u32>,
        f: &mut F,
    ) {
        let bytes = view::bytes(&self.recv[ridx as usize], len as usize);
        let acc = match verdict::judge_reply(bytes) {
            Ok(a) => a,
            Err(_) => {
                bump(&self.stats.discards, 1);
                self.reposts.push(ridx);
                return;
            }
        };
        let h = acc.header;
        let xid = h.xid();
        let i = (xid & SLOT_MASK) as usize;
        let matches = i < self.slots.len()
            && self.slots[i].xid == xid
            && match self.slots[i].state {
                State::Sent | State::Zombie => true,
                State::Invalidating => self.slots[i].given_up().is_some(),
                _ => false,
            };
        if !matches {
            bump(&self.stats.discards, 1);
            self.reposts.push(ridx);
            return;
        }
        let err = h.error();
        let slot = &mut self.slots[i];
        if slot.state == State::Zombie {
            // A late reply to an RPC already reported as timed out: its credit comes back.
            self.credits.on_reply(if err.is_some() {
                None
            } else {
                Some(h.credit())
            });
            slot.state = State::Free;
            self.free.push(i as u32);
            self.reposts.push(ridx);
            return;
        }
        if slot.state == State::Invalidating {
            // A late reply to an RPC given up (timed out or cancelled) whose windows are
            // still being invalidated: its credit comes back when they are (`finish`).
            slot.grant = if err.is_some() {
                None
            } else {
                Some(h.credit())
            };
            slot.answered = true;
            self.reposts.push(ridx);
            return;
        }
        let outcome = match err {
            Some(RdmaError::Vers { low, high }) => {
                bump(&self.stats.err_vers, 1);
                Outcome::Error(RpcError::ErrVers { low, high })
            }
            Some(RdmaError::Chunk) => {
                bump(&self.stats.err_chunk, 1);
                Outcome::Error(RpcError::ErrChunk)
            }
            None => {
                // Check what came back against what was provided (CHECKLIST G-4, G-17).
                let mut prov: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
                for c in 0..slot.n_writes {
                    prov[c] = &slot.writes[c][..slot.write_n[c]];
                }
                let wl_ok =
                    chunks::check_returned_write_list(&prov[..slot.n_writes], h.write_list())
                        .is_ok();
                let rc_ok = chunks::check_returned_reply(
                    slot.has_reply_chunk.then(|| &slot.reply[..slot.reply_n]),
                    h.reply_chunk(),
                )
                .is_ok();
                if !(wl_ok && rc_ok) {
                    bump(&self.stats.discards, 1);
                    self.reposts.push(ridx);
                    return;
                }
                Outcome::Reply
            }
        };
        slot.grant = if err.is_some() {
            None
        } else {
            Some(h.credit())
        };
        slot.recv_idx = Some(ridx);
        slot.recv_len = len;
        slot.outcome = outcome;
        if let Some(k) = inv {
            for b in slot.bound.iter_mut() {
                if *b == Some(k) {
                    *b = None;
                    bump(&self.stats.remote_invalidations, 1);
                }
            }
        }
        if slot.bound.iter().any(Option::is_some) {
            return self.invalidate(i as u32, f);
        }
        // Nothing left to invalidate: complete now, from the parse in hand (what `finish`
        // does, without judging the reply a second time).
        let result = match outcome {
            Outcome::Reply => {
                let r = deliver(slot, &acc, &self.stats);
                self.batch[1] += 1;
                r
            }
            Outcome::Error(e) => Err(e),
        };
        f(Completion {
            tag: slot.tag,
            xid: slot.xid,
            result,
        });
        self.reposts.push(ridx);
        self.credits.on_reply(slot.grant);
        slot.state = State::Free;
        slot.recv_idx = None;
        self.free.push(i as u32);
    }

    /// Posts Local Invalidates for the RPC's windows still bound (the last one signaled)
    /// and finishes the RPC when none is left (RFC 8166 §4.4.1, §8.1.3).
    fn invalidate<F: FnMut(Completion<'_>)>(&mut self, idx: u32, f: &mut F) {
        match self.post_invalidates(idx) {
            Ok(true) => {}
            Ok(false) => self.finish(idx, f),
            Err(()) => self.lose(f),
        }
    }

    /// Marks the slot `Invalidating` and posts Local Invalidates for its windows still
    /// bound, the last one signaled: true if it posted any (the RPC finishes when the last
    /// completes), false if none was bound; `Err` if the queue pair is gone or refused a
    /// post (the connection must be ended).
    fn post_invalidates(&mut self, idx: u32) -> Result<bool, ()> {
        let slot = &mut self.slots[idx as usize];
        // Before posting: a loss while posting then delivers the reply already in hand
        // (`lose`'s Invalidating arm) instead of sending the Call again.
        slot.state = State::Invalidating;
        let pending: [Option<u32>; 2] = slot.bound;
        let count = pending.iter().flatten().count();
        if count == 0 {
            return Ok(false);
        }
        let Some(qp) = self.qp.as_mut() else {
            return Err(());
        };
        let mut left = count;
        for rkey in pending.iter().flatten() {
            left -= 1;
            let (seq, _) = self.sq.post(left == 0);
            let mut wr = SendWr::local_inv(
                wrid::pack(Kind::LocalInv, idx, if left == 0 { seq } else { 0 }),
                *rkey,
            );
            if left == 0 {
                wr = wr.signaled();
            }
            if qp.post_send(&wr).is_err() {
                return Err(());
            }
            bump(&self.stats.local_invalidations, 1);
        }
        slot.bound = [None; 2];
        Ok(true)
    }

    /// Hands the finished RPC to `f`, then frees its receive buffer, slot and credit.
    fn finish<F: FnMut(Completion<'_>)>(&mut self, idx: u32, f: &mut F) {
        let i = idx as usize;
        let slot = &self.slots[i];
        let stats = &self.stats;
        match (slot.outcome, slot.recv_idx) {
            (Outcome::Error(e @ (RpcError::Timeout | RpcError::Cancelled)), _) => {
                f(Completion {
                    tag: slot.tag,
                    xid: slot.xid,
                    result: Err(e),
                });
                if !slot.answered {
                    // The reply may still come: the slot keeps its credit until then.
                    self.slots[i].state = State::Zombie;
                    return;
                }
            }
            (Outcome::Error(e), ridx) => {
                f(Completion {
                    tag: slot.tag,
                    xid: slot.xid,
                    result: Err(e),
                });
                if let Some(r) = ridx {
                    self.reposts.push(r);
                }
            }
            (Outcome::Reply, Some(ridx)) => {
                let bytes = view::bytes(&self.recv[ridx as usize], slot.recv_len as usize);
                let result = match verdict::judge_reply(bytes) {
                    Ok(acc) => deliver(slot, &acc, stats),
                    Err(_) => Err(RpcError::BadReply),
                };
                bump(&stats.rpcs, 1);
                f(Completion {
                    tag: slot.tag,
                    xid: slot.xid,
                    result,
                });
                self.reposts.push(ridx);
            }
            (Outcome::Reply, None) => {}
        }
        let grant = self.slots[i].grant;
        self.credits.on_reply(grant);
        self.slots[i].state = State::Free;
        self.slots[i].recv_idx = None;
        self.free.push(idx);
    }

    fn check_timeouts<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        if self.credits.in_flight() == 0 && self.resend_n == 0 {
            return;
        }
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if s.state == State::Resend {
                // Waiting for a credit on the new connection: no memory exposed.
                if s.deadline.is_some_and(|d| d <= now) {
                    self.expire_resend(i, f);
                }
                continue;
            }
            if s.state != State::Sent {
                continue;
            }
            let deadline = *s.deadline.get_or_insert_with(|| now + s.timeout);
            if deadline <= now {
                bump(&self.stats.timeouts, 1);
                s.outcome = Outcome::Error(RpcError::Timeout);
                s.recv_idx = None;
                self.invalidate(i as u32, f);
                if self.dead {
                    return;
                }
            }
        }
    }

    /// Whether every credit is held by an RPC already reported as timed out (a zombie,
    /// which keeps its credit until a late reply: the responder may still be working on
    /// it, RFC 8166 §3.3.1), so that no Call can be sent until one of them is answered.
    fn zombies_hold_every_credit(&self) -> bool {
        let held = self.credits.in_flight();
        held > 0
            && self.credits.available() == 0
            && self
                .slots
                .iter()
                .filter(|s| s.state == State::Zombie)
                .count()
                == held as usize
    }

    /// A `Resend` RPC whose deadline passed: nothing of it is exposed (no window bound on
    /// the new connection, the old ones deallocated), so `Timeout` is reported at once and
    /// the slot is free again.
    fn expire_resend<F: FnMut(Completion<'_>)>(&mut self, i: usize, f: &mut F) {
        let s = &mut self.slots[i];
        bump(&self.stats.timeouts, 1);
        f(Completion {
            tag: s.tag,
            xid: s.xid,
            result: Err(RpcError::Timeout),
        });
        s.state = State::Free;
        self.free.push(i as u32);
        self.resend_n -= 1;
    }

    /// Completes every `Resend` RPC with `err` (reconnection failed for good).
    fn abandon_resends<F: FnMut(Completion<'_>)>(&mut self, err: RpcError, f: &mut F) {
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if s.state == State::Resend {
                f(Completion {
                    tag: s.tag,
                    xid: s.xid,
                    result: Err(err),
                });
                s.state = State::Free;
                self.free.push(i as u32);
            }
        }
        self.resend_n = 0;
    }

    /// A poll while the connection is lost: with retransmission on, expires the pending
    /// RPCs whose deadline passed, then — unless in the backoff after a failed attempt —
    /// makes one connection attempt, bounded by the policy's `attempt_timeout` and the
    /// earliest pending deadline. On success the pending Calls are sent again (as credits
    /// allow); after `max_attempts` failures they complete with `ConnectionLost`.
    fn recover<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) -> usize {
        let (Some(rec), Some(policy)) = (self.recovery, self.config.retransmit) else {
            return 0;
        };
        let now = Instant::now();
        let mut earliest: Option<Instant> = None;
        let mut done = 0;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.state != State::Resend {
                continue;
            }
            match s.deadline {
                Some(d) if d > now => earliest = Some(earliest.map_or(d, |e| e.min(d))),
                _ => {
                    self.expire_resend(i, f);
                    done += 1;
                }
            }
        }
        if now < rec.next_at {
            return done;
        }
        let mut timeout = policy.attempt_timeout;
        if let Some(e) = earliest {
            timeout = timeout.min(e - now);
        }
        match self.reconnect_within(timeout.max(Duration::from_millis(1))) {
            Ok(()) => self.resend(f),
            Err(_) => {
                let attempts = rec.attempts + 1;
                if attempts >= policy.max_attempts {
                    self.recovery = None;
                    done += self.resend_n as usize;
                    self.abandon_resends(RpcError::ConnectionLost, f);
                } else {
                    self.recovery = Some(Recovery {
                        attempts,
                        next_at: Instant::now() + policy.backoff,
                    });
                }
            }
        }
        done
    }

    /// Sends `Resend` RPCs again on the new connection, earliest deadline first, while
    /// credits (from one on a new connection, RFC 8166 §3.3.3) and the send queue allow.
    fn resend<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        while self.resend_n > 0 && !self.dead && self.credits.available() > 0 && self.sq.room() >= 8
        {
            let mut next: Option<(usize, Option<Instant>)> = None;
            for (i, s) in self.slots.iter().enumerate() {
                if s.state != State::Resend {
                    continue;
                }
                let earlier = match next {
                    None => true,
                    Some((_, d)) => s.deadline < d,
                };
                if earlier {
                    next = Some((i, s.deadline));
                }
            }
            let Some((i, _)) = next else {
                self.resend_n = 0;
                return;
            };
            match self.retransmit(i as u32) {
                Ok(()) => {}
                Err(Retransmit::Post) => return self.lose(f),
                Err(Retransmit::Corrupt) => {
                    // The Call as first sent no longer decodes: never expected; report it
                    // rather than send something else under its XID.
                    let s = &mut self.slots[i];
                    f(Completion {
                        tag: s.tag,
                        xid: s.xid,
                        result: Err(RpcError::ConnectionLost),
                    });
                    s.state = State::Free;
                    s.bound = [None; 2];
                    self.free.push(i as u32);
                    self.resend_n -= 1;
                }
            }
        }
    }

    /// Sends slot `idx`'s Call again: the same XID and payload (still in the send and
    /// argument buffers), windows bound afresh over the same spans, and the transport
    /// header re-encoded in place with the new rkeys and the current credit request (its
    /// length does not depend on either).
    fn retransmit(&mut self, idx: u32) -> Result<(), Retransmit> {
        let i = idx as usize;
        let slot = &mut self.slots[i];
        let send_len = slot.send_len as usize;
        let arg_addr = slot.arg.addr();
        let res_addr = slot.res.addr();
        // The read list as first sent, and the spans of the buffers it exposed.
        let reads = &mut *self.reads;
        let mut nr = 0;
        let mut arg_end = 0u64;
        let (nomsg, old_hlen) = {
            let bytes = view::bytes(&slot.send, send_len);
            let h =
                rpcrdma_proto::header::HeaderView::parse(bytes).map_err(|_| Retransmit::Corrupt)?;
            for r in h.read_list().iter() {
                if nr == MAX_READ_SEGMENTS {
                    return Err(Retransmit::Corrupt);
                }
                let end = r.segment.offset + u64::from(r.segment.length);
                arg_end = arg_end.max(end.saturating_sub(arg_addr));
                reads[nr] = r;
                nr += 1;
            }
            let nomsg = h.proc() == rpcrdma_proto::header::Proc::NoMsg;
            (nomsg, send_len - h.payload().len())
        };
        let mut res_end = 0u64;
        for c in 0..slot.n_writes {
            for sg in &slot.writes[c][..slot.write_n[c]] {
                let end = sg.offset + u64::from(sg.length);
                res_end = res_end.max(end.saturating_sub(res_addr));
            }
        }
        if slot.has_reply_chunk {
            for sg in &slot.reply[..slot.reply_n] {
                let end = sg.offset + u64::from(sg.length);
                res_end = res_end.max(end.saturating_sub(res_addr));
            }
        }
        let qp = self.qp.as_mut().ok_or(Retransmit::Post)?;
        slot.bound = [None; 2];
        let mut rkeys = [0u32; 2];
        for k in 0..2 {
            let (end, buf, mw, access) = if k == 0 {
                (
                    arg_end,
                    &slot.arg,
                    slot.mw_arg.as_ref(),
                    Access::REMOTE_READ,
                )
            } else {
                (
                    res_end,
                    &slot.res,
                    slot.mw_res.as_ref(),
                    Access::REMOTE_WRITE,
                )
            };
            if end == 0 {
                continue;
            }
            let Some(mw) = mw else {
                rkeys[k] = buf.region().rkey();
                continue;
            };
            let rkey = bind_window::<P>(qp, &mut self.sq, mw, buf, end, access, idx)
                .map_err(|_| Retransmit::Post)?;
            slot.bound[k] = Some(rkey);
            rkeys[k] = rkey;
            bump(&self.stats.registrations, 1);
        }
        // The chunk lists with the new rkeys; the segments kept for checking the reply
        // (G-4, G-17) carry them too.
        for r in &mut reads[..nr] {
            r.segment.handle = rkeys[0];
        }
        for c in 0..slot.n_writes {
            for sg in &mut slot.writes[c][..slot.write_n[c]] {
                sg.handle = rkeys[1];
            }
        }
        for sg in &mut slot.reply[..slot.reply_n] {
            sg.handle = rkeys[1];
        }
        let credit = self.credits.requested();
        // Same shape, new rkeys: the header keeps its length, so the payload stays in place.
        if !encode_call_header(slot, &reads[..nr], slot.xid, credit, nomsg, old_hlen) {
            return Err(Retransmit::Corrupt);
        }
        let sge = slot.send.sge_span(0, send_len as u32);
        let payload = send_payload(&slot.send, &sge, self.inline_max);
        let wr = call_send(idx, self.sq.post(false), payload);
        qp.post_send(&wr).map_err(|_| Retransmit::Post)?;
        self.credits.take();
        // Its XID, tag and deadline are kept.
        slot.await_reply();
        self.resend_n -= 1;
        bump(&self.stats.retransmits, 1);
        bump(&self.stats.bytes_sent, send_len as u64);
        Ok(())
    }

    /// The connection is gone: windows are deallocated (so no peer can reach the memory),
    /// then every pending RPC completes with [`RpcError::ConnectionLost`] — or, with
    /// retransmission on, stays pending (`Resend`, its deadline kept) while the requester
    /// reconnects; an RPC whose reply was in hand (Local Invalidates outstanding) is
    /// delivered then, its memory being unreachable. Timed-out RPCs report `Timeout`.
    fn lose<F: FnMut(Completion<'_>)>(&mut self, f: &mut F) {
        if self.dead {
            return;
        }
        self.dead = true;
        bump(&self.stats.conn_lost, 1);
        if let Some(qp) = self.qp.as_mut() {
            qp.disconnect();
        }
        self.reposts.clear();
        let retransmit = self.config.retransmit.is_some() && !self.closing;
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            s.mw_arg = None;
            s.mw_res = None;
            s.bound = [None; 2];
            match s.state {
                State::Sent if retransmit => {
                    s.deadline.get_or_insert(now + s.timeout);
                    s.state = State::Resend;
                    self.resend_n += 1;
                    continue;
                }
                State::Resend if retransmit && s.given_up().is_none() => continue,
                State::Invalidating if retransmit => {
                    // The reply (or error, timeout or cancel) is in hand: deliver it.
                    self.finish(i as u32, f);
                }
                State::Sent | State::Invalidating | State::Resend => {
                    f(Completion {
                        tag: s.tag,
                        xid: s.xid,
                        result: Err(s.given_up().unwrap_or(RpcError::ConnectionLost)),
                    });
                    if s.state == State::Resend {
                        self.resend_n -= 1;
                    }
                }
                State::Zombie | State::Free => {}
            }
            let s = &mut self.slots[i];
            if s.state != State::Free {
                s.state = State::Free;
                self.free.push(i as u32);
            }
        }
        self.credits.reset();
        self.reposts.clear();
        // Every cancelled RPC was completed above.
        self.cancelled.clear();
        self.recovery = retransmit.then_some(Recovery {
            attempts: 0,
            next_at: now,
        });
    }

    fn repost(&mut self) {
        if self.reposts.is_empty() {
            return;
        }
        let Some(qp) = self.qp.as_mut() else { return };
        // A refused post means a lost connection, noticed by the next poll.
        let _ = conn::repost_recvs::<P>(qp, &self.recv, &self.reposts);
        self.reposts.clear();
    }

    /// Sends one RPC and waits for its reply, at most `call.timeout` (plus the time to get a
    /// credit, bounded by the same timeout); hands the reply to `f` and returns what it
    /// returns. Must not be mixed with RPCs submitted with [`submit`](Self::submit) and not
    /// yet completed (their completions would be dropped).
    pub fn call<R, F>(&mut self, call: &CallArgs<'_>, f: F) -> Result<R, RpcError>
    where
        F: FnOnce(Result<Reply<'_>, RpcError>) -> R,
    {
        const TAG: u64 = u64::MAX;
        let start = Instant::now();
        let hard = start + call.timeout + Duration::from_secs(1);
        let xid = loop {
            match self.submit(call, TAG) {
                Ok(xid) => break xid,
                Err(SubmitError::WouldBlock) => {
                    if Instant::now() > start + call.timeout {
                        return Err(RpcError::Timeout);
                    }
                    self.poll_completions(|_| {});
                }
                Err(SubmitError::Disconnected) => return Err(RpcError::ConnectionLost),
                Err(_) => return Err(RpcError::BadReply),
            }
        };
        let mut f = Some(f);
        let mut out = None;
        loop {
            let n = self.poll_completions(|c| {
                // The XID too: an earlier `call` that gave up may still have its RPC pending.
                if c.tag == TAG && c.xid == xid {
                    if let Some(f) = f.take() {
                        out = Some(f(c.result));
                    }
                }
            });
            if let Some(r) = out.take() {
                return Ok(r);
            }
            if self.dead && self.recovery.is_none() {
                return Err(RpcError::ConnectionLost);
            }
            if n == 0 {
                if Instant::now() > hard {
                    return Err(RpcError::Timeout);
                }
                std::hint::spin_loop();
            }
        }
    }
}

/// The reply of a finished RPC, borrowed from the receive buffer and the result buffer
/// (whose window was invalidated before this runs).
fn deliver<'a, P: Provider>(
    slot: &'a Slot<P>,
    acc: &verdict::AcceptedReply<'a>,
    stats: &Counters,
) -> Result<Reply<'a>, RpcError> {
    let h = acc.header;
    let (rpc, results) = match acc.reply {
        Some((rpc, len)) => {
            bump(&stats.short_replies, 1);
            (rpc, &h.payload()[len..])
        }
        None => {
            bump(&stats.long_replies, 1);
            let total = h.reply_chunk().map_or(0, |c| c.total_len()) as usize;
            let res = view::bytes(&slot.res, slot.reply_off as usize + total);
            let stream = &res[slot.reply_off as usize..];
            let (rpc, len) = ReplyHeader::parse(stream).map_err(|_| RpcError::BadReply)?;
            bump(&stats.bytes_written, total as u64);
            (rpc, &stream[len..])
        }
    };
    let mut bulk: [&[u8]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    let mut prov: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for c in 0..slot.n_writes {
        prov[c] = &slot.writes[c][..slot.write_n[c]];
    }
    if let Ok(list) = chunks::check_returned_write_list(&prov[..slot.n_writes], h.write_list()) {
        for (c, b) in bulk.iter_mut().enumerate().take(slot.n_writes) {
            if let Some(r) = list.get(c) {
                if r.form == ReturnedForm::Filled {
                    let off = slot.write_off[c] as usize;
                    let all = view::bytes(&slot.res, off + r.total as usize);
                    *b = &all[off..];
                    bump(&stats.bytes_written, r.total);
                    bump(&stats.write_chunks, 1);
                }
            }
        }
    }
    Ok(Reply {
        rpc,
        results,
        bulk,
        n_bulk: slot.n_writes,
    })
}

/// Binds `mw` over the first `len` bytes of `buf` with `access` (one BIND_MW work request,
/// signaled when the send queue asks for it) and returns the window's new rkey.
fn bind_window<P: Provider>(
    qp: &mut P::Qp,
    sq: &mut SendQueue,
    mw: &P::Mw,
    buf: &Buf<P>,
    len: u64,
    access: Access,
    idx: u32,
) -> Result<u32, crate::fabric::PostError> {
    let rkey = mw.next_rkey();
    let bind = MwBind {
        mw,
        rkey,
        mr: buf.region(),
        addr: buf.addr(),
        len,
        access,
    };
    let (seq, sig) = sq.post(false);
    let mut wr = SendWr::bind_mw(wrid::pack(Kind::Bind, idx, if sig { seq } else { 0 }), bind);
    if sig {
        wr = wr.signaled();
    }
    qp.post_send(&wr)?;
    Ok(rkey)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::soft::Soft;
    use rpcrdma_proto::rpc::{AcceptStat, AuthStat, RejectedReply};

    #[test]
    fn short_call_prefix_is_what_the_encoders_write() {
        for (xid, credit, prog, vers, proc_num) in [
            (1, 1, 400100, 1, 0),
            (0xffff_ffff, 32, 7, 3, 99),
            (0x1234_5678, 0, 0, 0, 0),
        ] {
            let mut want = [0u8; BARE_MSG_LEN + CALL_HEADER_LEN];
            let h = Header::msg(xid, credit, Chunks::default());
            assert_eq!(h.encode(&mut want), Ok(BARE_MSG_LEN));
            let rpc = CallHeader::new(
                xid,
                prog,
                vers,
                proc_num,
                OpaqueAuth::NONE,
                OpaqueAuth::NONE,
            );
            assert_eq!(rpc.encode(&mut want[BARE_MSG_LEN..]), Ok(CALL_HEADER_LEN));
            let mut got = [0u8; BARE_MSG_LEN + CALL_HEADER_LEN];
            for (k, w) in short_call_prefix(xid, credit, prog, vers, proc_num)
                .iter()
                .enumerate()
            {
                got[4 * k..4 * k + 4].copy_from_slice(&w.to_be_bytes());
            }
            assert_eq!(got, want);
        }
    }

    /// A Short Call with a credential other than AUTH_NONE, written word by word by
    /// `submit_short`, is what the encoders write for it: transport header, RPC call header
    /// with that credential and an AUTH_NONE verifier, then the arguments.
    #[test]
    fn short_calls_with_a_credential_are_what_the_encoders_write() {
        let dispatch = Arc::new(crate::dispatch::Dispatch::new());
        let cfg = ConnConfig::default();
        let (mut c, mut s) = crate::loopback::soft_pair(dispatch, cfg, cfg).unwrap();
        let gids = [4u32, 5];
        let sys = rpcrdma_proto::rpc::AuthSys {
            stamp: 9,
            machinename: b"host",
            uid: 7,
            gid: 8,
            gids: rpcrdma_proto::rpc::Gids::new(&gids).unwrap(),
        };
        let mut body = vec![0; sys.encoded_len()];
        sys.encode(&mut body).unwrap();
        let odd = [1u8, 2, 3, 4, 5];
        let args = [0u8, 0, 0, 3, 9, 9, 9, 9];
        for cred in [
            OpaqueAuth::new(rpcrdma_proto::rpc::AUTH_SYS, &body),
            OpaqueAuth::new(0x4000_0000, &odd),
            OpaqueAuth::new(AUTH_NONE, &odd),
        ] {
            let mut call = CallArgs::new(11, 2, 3, &args, 0);
            call.cred = cred;
            let before = c.snapshot().short_calls;
            let xid = c.submit(&call, 1).unwrap();
            assert_eq!(c.snapshot().short_calls, before + 1, "the Short path");
            let slot = &c.slots[(xid & SLOT_MASK) as usize];
            let got = view::bytes(&slot.send, slot.send_len as usize).to_vec();
            let rpc = CallHeader::new(xid, 11, 2, 3, cred, OpaqueAuth::NONE);
            let mut want = vec![0u8; BARE_MSG_LEN + rpc.encoded_len()];
            let credit = c.credits.requested();
            let h = Header::msg(xid, credit, Chunks::default());
            assert_eq!(h.encode(&mut want), Ok(BARE_MSG_LEN));
            rpc.encode(&mut want[BARE_MSG_LEN..]).unwrap();
            want.extend_from_slice(&args);
            assert_eq!(got, want, "{cred:?}");
            // The peer answers (PROG_UNAVAIL: nothing is registered), which frees the credit.
            let mut done = 0;
            for _ in 0..1_000_000 {
                s.poll();
                c.poll_completions(|_| done += 1);
                if done > 0 {
                    break;
                }
            }
            assert_eq!(done, 1, "no reply");
        }
    }

    /// The completions one reply produced: tag, XID, and the reply's header, results and
    /// bulk count, or the error.
    type Seen = Vec<(u64, u32, Result<(String, Vec<u8>, usize), RpcError>)>;

    /// What one reply did to a client: the completions it produced (the reply's header,
    /// results and bulk count, or the error), the counters, credits, free slots, receives
    /// to repost and every slot's state.
    #[derive(Debug, PartialEq)]
    struct Effect {
        completions: Seen,
        stats: Snapshot,
        batch: [u64; 2],
        credits: RequesterCredits,
        free: Vec<u32>,
        reposts: Vec<u32>,
        slots: Vec<(State, u32, Option<u32>, Outcome)>,
    }

    fn effect(c: &mut Client<Soft>, completions: Seen) -> Effect {
        let e = Effect {
            completions,
            stats: c.stats.snapshot(),
            batch: c.batch,
            credits: c.credits,
            free: c.free.clone(),
            reposts: c.reposts.clone(),
            slots: c
                .slots
                .iter()
                .map(|s| (s.state, s.xid, s.grant, s.outcome))
                .collect(),
        };
        c.reposts.clear();
        e
    }

    /// Hands `reply` to the client as if it arrived in receive buffer 0, through the fast
    /// path first (`fast`) or the general path alone.
    fn receive(c: &mut Client<Soft>, reply: &[u8], fast: bool) -> Effect {
        // The peer never sends in these tests, so nothing writes receive buffer 0.
        view::bytes_mut(&mut c.recv[0])[..reply.len()].copy_from_slice(reply);
        let mut seen = Vec::new();
        let mut f = |comp: Completion<'_>| {
            seen.push((
                comp.tag,
                comp.xid,
                comp.result
                    .map(|r| (format!("{:?}", r.rpc), r.results.to_vec(), r.bulk().len())),
            ))
        };
        if fast {
            c.on_reply(0, reply.len() as u32, None, &mut f);
        } else {
            // What `on_reply` counts before either path.
            c.batch[0] += reply.len() as u64;
            c.on_reply_general(0, reply.len() as u32, None, &mut f);
        }
        effect(c, seen)
    }

    /// A Short Reply: the 28-byte RDMA_MSG header then the RPC Reply header and `results`.
    fn short_reply(rdma_xid: u32, credit: u32, rpc: ReplyHeader<'_>, results: &[u8]) -> Vec<u8> {
        let mut m = vec![0u8; BARE_MSG_LEN + rpc.encoded_len()];
        Header::msg(rdma_xid, credit, Chunks::default())
            .encode(&mut m)
            .unwrap();
        rpc.encode(&mut m[BARE_MSG_LEN..]).unwrap();
        m.extend_from_slice(results);
        m
    }

    /// The replies to try against a pending Call with `xid`: every accepted and denied
    /// status, a verifier body, results, truncations, XID and list mismatches, RDMA_ERROR.
    fn replies(xid: u32, credit: u32) -> Vec<Vec<u8>> {
        let verf = [1u8, 2, 3, 4, 5];
        let none = OpaqueAuth::NONE;
        let mut out = Vec::new();
        let statuses = [
            ReplyHeader::accepted_success(xid),
            ReplyHeader::accepted(xid, OpaqueAuth::new(2, &verf), AcceptStat::Success),
            ReplyHeader::prog_unavail(xid),
            ReplyHeader::prog_mismatch(xid, 1, 3),
            ReplyHeader::proc_unavail(xid),
            ReplyHeader::garbage_args(xid),
            ReplyHeader::system_err(xid),
            ReplyHeader::rpc_mismatch(xid, 2, 2),
            ReplyHeader::auth_error(xid, AuthStat::AUTH_BADCRED),
            ReplyHeader::denied(xid, RejectedReply::AuthError(AuthStat(99))),
        ];
        for rpc in statuses {
            for results in [&[][..], &[0, 0, 0, 7], &[9; 40]] {
                let m = short_reply(xid, credit, rpc, results);
                // Whole, and cut at every length (the RPC header truncated, the results
                // shortened).
                for cut in 0..=m.len() {
                    out.push(m[..cut].to_vec());
                }
            }
        }
        let ok = short_reply(
            xid,
            credit,
            ReplyHeader::accepted(xid, none, AcceptStat::Success),
            &[1, 2, 3, 4],
        );
        // Another XID in the RPC header; another slot's XID in both; version 2; RDMA_NOMSG;
        // an unknown accept_stat; a Call instead of a Reply; a Write list returned.
        let mut m = ok.clone();
        m[BARE_MSG_LEN + 3] ^= 1;
        out.push(m);
        let mut m = ok.clone();
        m[3] ^= 1;
        m[BARE_MSG_LEN + 3] ^= 1;
        out.push(m);
        let mut m = ok.clone();
        m[7] = 2;
        out.push(m);
        let mut m = ok.clone();
        m[15] = 1;
        out.push(m);
        let mut m = ok.clone();
        m[BARE_MSG_LEN + 23] = 6;
        out.push(m);
        let mut m = ok.clone();
        m[BARE_MSG_LEN + 7] = 0;
        out.push(m);
        let mut m = ok.clone();
        m[23] = 1;
        out.push(m);
        // RDMA_ERROR ERR_CHUNK and ERR_VERS for this XID.
        for err in [RdmaError::Chunk, RdmaError::Vers { low: 1, high: 1 }] {
            let mut m = vec![0u8; 64];
            let n = Header::error(xid, 1, credit, err).encode(&mut m).unwrap();
            m.truncate(n);
            out.push(m);
        }
        // Single-byte changes of a SUCCESS reply with a verifier, at every offset.
        let v = short_reply(
            xid,
            credit,
            ReplyHeader::accepted(xid, OpaqueAuth::new(1, &verf), AcceptStat::Success),
            &[5; 8],
        );
        for at in 0..v.len() {
            for b in [0u8, 1, 2, 0xff] {
                let mut m = v.clone();
                m[at] = b;
                out.push(m);
            }
        }
        out
    }

    /// Puts a Short Call without chunks in flight in a free slot, as `submit_short` and
    /// `post_call` leave it, without sending it (the peer never answers in these tests).
    fn pending(c: &mut Client<Soft>, tag: u64) -> u32 {
        if let Some(s) = c.slots.iter().find(|s| s.state == State::Sent) {
            return s.xid;
        }
        let idx = c.free.pop().expect("a free slot");
        let xid = c.next_xid(idx);
        let slot = &mut c.slots[idx as usize];
        slot.clear_chunks();
        c.credits.take();
        slot.arm(xid, tag, Duration::from_secs(60), 0);
        xid
    }

    /// The requester's Short-reply fast path against its general path: two clients in the
    /// same state receive the same replies, one through `on_reply` (fast path first), one
    /// through the general path alone; every reply has the same effect on both (the same
    /// completion or discard, counters, credits and slots).
    #[test]
    fn short_reply_fast_path_agrees_with_the_general_path() {
        let dispatch = Arc::new(crate::dispatch::Dispatch::new());
        let cfg = ConnConfig::default();
        let (mut fast, _s1) = crate::loopback::soft_pair(Arc::clone(&dispatch), cfg, cfg).unwrap();
        let (mut general, _s2) = crate::loopback::soft_pair(dispatch, cfg, cfg).unwrap();
        let mut tag = 0;
        let mut fast_completions = 0;
        let mut checked = 0;
        for credit in [1u32, 32] {
            let mut xid = pending(&mut fast, tag);
            assert_eq!(pending(&mut general, tag), xid);
            let mut list = replies(xid, credit);
            for k in 0..list.len() {
                let m = &list[k];
                let taken = verdict::short_reply(m).is_some_and(|r| r.xid == xid);
                let a = receive(&mut fast, m, true);
                let b = receive(&mut general, m, false);
                assert_eq!(a, b, "reply {k}: {m:02x?}");
                checked += 1;
                if !a.completions.is_empty() {
                    fast_completions += usize::from(taken && a.completions[0].2.is_ok());
                    tag += 1;
                    xid = pending(&mut fast, tag);
                    assert_eq!(pending(&mut general, tag), xid);
                    list = replies(xid, credit);
                }
            }
        }
        assert!(
            checked > 2000 && fast_completions > 500,
            "{checked} {fast_completions}"
        );
    }
}
