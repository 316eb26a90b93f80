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

mod call;
mod complete;
mod large;
mod recovery;
mod reverse;
mod submit;
mod version;
mod windows;
mod written;

pub use call::{CallArgs, CancelError, Completion, Reply, RpcError, SubmitError};
pub use reverse::MAX_REVERSE_SERVED;
pub use version::forget_version_1_servers;

#[allow(unused_imports)]
use complete::*;
use submit::*;
use windows::*;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_proto::chunks::{self, ReturnedForm};
use rpcrdma_proto::header::{Chunks, RdmaError, ReadSegment, Segment, MIN_HEADER_LEN};
use rpcrdma_proto::plan::{self, CallForm, CallShape, DdpItem, Forced, PlanError, Thresholds};
use rpcrdma_proto::private_data::ConnEnd;
use rpcrdma_proto::rpc::{
    CallHeader, OpaqueAuth, ReplyHeader, AUTH_NONE, AUTH_NONE_ACCEPTED_LEN, AUTH_NONE_CALL_LEN,
    MAX_AUTH_BYTES,
};
use rpcrdma_proto::verdict;
use rpcrdma_proto::xdr::pad4;

use crate::conn::{
    self, send_payload, view, ConnConfig, ConnError, Negotiation, Registration, RequesterCredits,
    SendQueue, Wire, SPARE_RECVS,
};
use crate::dispatch::MAX_BULK_RESULTS;
use crate::fabric::{
    Access, CompletionQueue, Device, MemoryRegion, MemoryWindow, MwBind, Payload, ProtectionDomain,
    Provider, QpCaps, QpInit, QueuePair, SendOp, SendWr, Sge, Wc, WcStatus,
};
use crate::pool::{Buf, BufferPool};
use crate::stats::{bump, Counters, Snapshot};
use crate::wrid::{self, Kind};
use large::LargeBufs;

/// Bits of the XID that name the pending-table slot: as few as the credits need (at least
/// one), so that each slot's generation, above them, takes the rest (RFC 5531 §9: a
/// server's duplicate request cache tells Calls apart by XID, so they should not repeat
/// soon). With 128 credits a slot's XIDs repeat after 2^25 of its Calls, 2^32 Calls of the
/// client in all, as a 32-bit counter's would.
fn slot_bits(credits: u32) -> u32 {
    (32 - credits.saturating_sub(1).leading_zeros()).max(1)
}

/// A generation to start every slot at, different for each client (clock and process id),
/// so that a restarted client does not send its predecessor's XIDs again.
fn first_generation() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| {
            d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(13)
        });
    static CLIENTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CLIENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    t ^ std::process::id().rotate_left(7) ^ n.wrapping_mul(0x9e37_79b9)
}
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

/// Where the Call of a pending-table slot ([`CallSlot`]) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CallState {
    /// No Call: the slot is among the free ones ([`FreeSlots`]).
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

/// What a slot's Call completes with: its reply (the usual case, until something else is
/// decided), or an error already decided (timed out, cancelled, refused by the peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CallOutcome {
    Reply,
    Error(RpcError),
}

/// One slot of the pending table, one per credit: a Call from its submission to its
/// completion, with the buffers and windows it is sent from and its reply lands in.
///
/// Laid out as declared (`repr(C)`): what a Short RPC's submission and reply read and
/// write comes first, in the slot's first lines (the compiler's order spread it over seven
/// of this 5.5 KiB slot's lines, each a miss when many connections take turns); the
/// chunk lists last. The buffers and windows drop in the same order as before.
#[repr(C)]
struct CallSlot<P: Provider> {
    state: CallState,
    /// A late reply to this RPC, given up (timed out or cancelled), came while its windows
    /// were being invalidated: its credit (`grant`) comes back when they are.
    answered: bool,
    has_reply_chunk: bool,
    outcome: CallOutcome,
    xid: u32,
    /// The generation of the slot's last XID (the bits above the slot's).
    gen: u32,
    /// Bytes of the Call's Send (transport header + inline payload), kept for a retransmit.
    send_len: u32,
    recv_len: u32,
    reply_off: u32,
    tag: u64,
    n_writes: usize,
    reply_n: usize,
    recv_idx: Option<u32>,
    grant: Option<u32>,
    /// rkeys of windows bound for this RPC and not yet invalidated.
    bound: [Option<u32>; 2],
    /// When the RPC times out; `None` until the first timeout check after the submission
    /// stamps it (submitting reads no clock), so an RPC never times out early.
    deadline: Option<Instant>,
    timeout: Duration,
    /// When a timeout check first found the slot waiting for its Local Invalidates
    /// (`None` until then, and again each time they are posted): a send queue that has
    /// not retired them within `recovery::invalidate_limit` is stuck.
    invalidating_since: Option<Instant>,
    /// When the connection is taken as silent if no reply has come (retransmission on:
    /// [`RetransmitPolicy::reply_timeout`](crate::conn::RetransmitPolicy)); `None` until the
    /// first timeout check after each sending stamps it.
    reply_due: Option<Instant>,
    send: Buf<P>,
    /// The argument buffer: the slot's own, or a shared large one for this RPC (then its
    /// own waits in `parked[0]`).
    arg: Buf<P>,
    /// The result buffer: the slot's own, or a shared large one (its own in `parked[1]`).
    res: Buf<P>,
    /// The slot's own argument and result buffers while large ones stand in for them.
    parked: [Option<Buf<P>>; 2],
    mw_arg: Option<P::Mw>,
    mw_res: Option<P::Mw>,
    write_n: [usize; MAX_WRITE_CHUNKS],
    write_off: [u32; MAX_WRITE_CHUNKS],
    writes: [[Segment; MAX_SEGMENTS]; MAX_WRITE_CHUNKS],
    reply: [Segment; MAX_SEGMENTS],
}

/// Puts a large buffer in place of the slot's own argument (`k` 0) or result (`k` 1)
/// buffer when the RPC needs more than `own` holds: `Ok(false)` when it fits, `Err` when
/// every large buffer there may be is taken ([`LargeBufs::take`]).
fn take_large<P: Provider>(
    large: Option<&mut LargeBufs<P>>,
    pd: &P::Pd,
    stats: &Counters,
    slot: &mut CallSlot<P>,
    k: usize,
    used: usize,
) -> Result<bool, SubmitError> {
    let buf = if k == 0 { &mut slot.arg } else { &mut slot.res };
    if used <= buf.size() {
        return Ok(false);
    }
    let big = large.ok_or(SubmitError::TooLarge(None))?.take(pd, stats)?;
    slot.parked[k] = Some(core::mem::replace(buf, big));
    Ok(true)
}

/// The free slots of the pending table, and the large bulk buffers the connection's RPCs
/// share (none when every credit's own buffers are of the largest size). A slot goes back
/// only through [`FreeSlots::put`], which gives its large buffers back first.
struct FreeSlots<P: Provider> {
    /// Indexes of the free slots (a stack: the most recently freed is used first).
    indexes: Vec<u32>,
    large: Option<LargeBufs<P>>,
}

impl<P: Provider> FreeSlots<P> {
    /// A free slot, if any.
    #[inline]
    fn pop(&mut self) -> Option<u32> {
        self.indexes.pop()
    }

    /// Whether no slot is free.
    #[inline]
    fn is_empty(&self) -> bool {
        self.indexes.is_empty()
    }

    /// Slot `idx` is free again: its large buffers go back, its own return.
    #[inline]
    fn put(&mut self, idx: u32, slot: &mut CallSlot<P>) {
        unpark(self.large.as_ref(), slot);
        self.indexes.push(idx);
    }
}

/// The provider refused to post a work request: counted (`post_refused`), and the
/// connection ended, so that the next poll completes what is pending (or reconnects), as
/// the responder's `refused` does.
#[cold]
fn end_refused<P: Provider>(stats: &Counters, qp: &mut P::Qp) {
    bump(&stats.post_refused, 1);
    qp.disconnect();
}

/// Gives the slot's large buffers back and puts its own in place again: done whenever a
/// slot becomes free (nothing of its last RPC is exposed any longer).
#[inline(always)]
fn unpark<P: Provider>(large: Option<&LargeBufs<P>>, slot: &mut CallSlot<P>) {
    if slot.parked[0].is_some() || slot.parked[1].is_some() {
        unpark_parked(large, slot);
    }
}

/// [`unpark`] of a slot holding large buffers.
#[inline(never)]
fn unpark_parked<P: Provider>(large: Option<&LargeBufs<P>>, slot: &mut CallSlot<P>) {
    for k in 0..2 {
        if let Some(own) = slot.parked[k].take() {
            let buf = if k == 0 { &mut slot.arg } else { &mut slot.res };
            let big = core::mem::replace(buf, own);
            match large {
                Some(l) => l.give_back(big),
                None => drop(big),
            }
        }
    }
}

impl<P: Provider> CallSlot<P> {
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
        self.state = CallState::Sent;
        self.reply_due = None;
        self.recv_idx = None;
        self.grant = None;
        self.outcome = CallOutcome::Reply;
        self.answered = false;
    }

    /// The error of an RPC the requester gave up on (timed out or cancelled) before its
    /// reply came: it is reported, and the slot keeps its credit until a late reply (RFC
    /// 8166 §3.3.1) or a new connection.
    #[inline]
    fn given_up(&self) -> Option<RpcError> {
        match self.outcome {
            CallOutcome::Error(e @ (RpcError::Timeout | RpcError::Cancelled)) => Some(e),
            _ => None,
        }
    }

    /// Whether [`Client::cancel`] may cancel this slot's RPC `xid`: sent and waiting for
    /// its reply, or waiting to be sent again after a loss.
    #[inline]
    fn cancellable(&self, xid: u32) -> bool {
        self.xid == xid
            && self.outcome == CallOutcome::Reply
            && matches!(self.state, CallState::Sent | CallState::Resend)
    }

    /// The Write chunks the Call provided, as the checks of a Reply take them (the first
    /// `n_writes`).
    fn provided(&self) -> [&[Segment]; MAX_WRITE_CHUNKS] {
        let mut prov: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
        for (c, p) in prov.iter_mut().enumerate().take(self.n_writes) {
            *p = &self.writes[c][..self.write_n[c]];
        }
        prov
    }

    /// Whether a Short Reply without chunks (`verdict::short_reply`) with `xid` completes
    /// this RPC on the fast path: the slot waits for exactly this XID (`Sent`; a `Zombie`'s
    /// late reply only returns its credit), and its Call provided no Write chunk and no
    /// Reply chunk (so the empty lists returned are what CHECKLIST G-4 and G-17 accept and
    /// the whole reply is inline, RFC 8166 §3.5.1, §4.3) and left no window bound but the
    /// one the Reply's Send invalidated, `inv` (nothing to invalidate before completing,
    /// §4.4.1; RFC 8797 §4.1: a Call whose argument went in a Read chunk). Anything else
    /// takes the general path.
    #[inline]
    fn takes_short_reply(&self, xid: u32, inv: Option<u32>) -> bool {
        self.xid == xid
            && self.state == CallState::Sent
            && self.n_writes == 0
            && !self.has_reply_chunk
            && self.bound.iter().all(|b| b.is_none() || *b == inv)
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
///
/// Laid out as declared (`repr(C)`): after the queue pair and completion queue, the scalars
/// and small vectors every RPC reads and writes, together in a few lines (the compiler's
/// order spread them over nine, each a miss when many connections take turns); then the
/// buffers and the rarer state. Fields drop in the order they always did: the queue pair
/// first, the buffers before the pools they come from, the pools last.
#[repr(C)]
pub struct Client<P: Provider> {
    qp: Option<P::Qp>,
    cq: P::Cq,
    slot_mask: u32,
    /// Bits of the XID that name the slot ([`slot_bits`]), and their mask.
    slot_bits: u32,
    polls: u32,
    idle_polls: u32,
    /// Slots in `CallState::Resend`.
    resend_n: u32,
    /// Inline size asked of each queue pair ([`ConnConfig::inline_sends`] within the
    /// device's limit), and the one the current queue pair granted: Calls of at most
    /// `inline_max` bytes are posted inline.
    inline_cap: u32,
    inline_max: u32,
    /// The next reply's landing was prefetched since the last completion (`watch_next_recv`).
    watched: bool,
    dead: bool,
    /// The loss was asked for ([`Client::disconnect`]): no retransmission.
    closing: bool,
    /// Short Calls' Sends held back by [`Client::cork`], in submission order.
    corked: bool,
    /// The version the connection speaks (a copy of `negotiation.wire`, read on every
    /// submission).
    wire: Wire,
    n_queued: usize,
    /// `bytes_received` and `rpcs` of the completions of the current poll, published to
    /// `stats` with one store each when the batch is done (see [`Client::publish_batch`]).
    batch: [u64; 2],
    credits: RequesterCredits,
    sq: SendQueue,
    reposts: Vec<u32>,
    /// Slots of RPCs cancelled with nothing to invalidate, completed at the next poll (at
    /// most one entry per slot: room for all is made at connection time).
    cancelled: Vec<u32>,
    /// Receive completions polled while the version 2 opening finished (reverse Calls
    /// that followed the server's answer at once): handled by the next poll.
    early: Vec<Wc>,
    stats: Arc<Counters>,
    wc: [Wc; POLL_BATCH],
    pd: P::Pd,
    addr: P::Addr,
    recv: Box<[Buf<P>]>,
    slots: Box<[CallSlot<P>]>,
    negotiation: Negotiation,
    config: ConnConfig,
    /// `Some` while reconnecting automatically after a loss.
    recovery: Option<Recovery>,
    /// Scratch for the read list of the Call being submitted (kept here so that a submission
    /// does not clear a few kilobytes of stack).
    reads: Box<[ReadSegment; MAX_READ_SEGMENTS]>,
    queued: [Queued; CORK_MAX],
    /// The control buffer: the version 2 opening RDMA2_CONNPROP is sent from it.
    ctl: Buf<P>,
    /// Reverse-direction Calls served (version 2), with their Reply buffers.
    serving: Option<reverse::Serving<P>>,
    /// The free slots and the large bulk buffers (declared after `slots`: the large
    /// buffers' pool is dropped after the slots that may hold some).
    free: FreeSlots<P>,
    _pools: [BufferPool<P>; 5],
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

impl<P: Provider> core::fmt::Debug for Client<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Client")
            .field("negotiation", &self.negotiation)
            .field("credits", &self.credits)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
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
        Self::connect_with(device, addr, config, None)
    }

    fn connect_with(
        device: &P::Device,
        addr: &P::Addr,
        config: ConnConfig,
        reverse: Option<Arc<crate::dispatch::Dispatch>>,
    ) -> Result<Client<P>, ConnError> {
        config.validate()?;
        let n = config.credits;
        // Receives: one per credit, one per reverse Call served at once (version 2), and the
        // spare ones that let a reply's receive go back after the next Call
        // ([`conn::SPARE_RECVS`]).
        let nrev = Self::reverse_receives(&config, reverse.is_some());
        let nrecv = n + nrev + SPARE_RECVS;
        let pd = device.alloc_pd()?;
        let sq_depth = 8 * n + 16 + nrev;
        let cq = device.create_cq(sq_depth + nrecv + 16)?;
        let remote = chunk_access(config.registration);
        let (recv_pool, recv) =
            conn::pool_taken(&pd, config.recv_size as usize, nrecv, Access::LOCAL_WRITE)?;
        let serving = match reverse {
            Some(d) if nrev > 0 => Some(reverse::Serving::new(&pd, d, nrev, config.send_size)?),
            _ => None,
        };
        let (send_pool, sends) =
            conn::pool_taken(&pd, config.send_size as usize, n, Access::LOCAL_WRITE)?;
        let (ctl_pool, ctl) = conn::pool_taken(&pd, 1024, 1, Access::LOCAL_WRITE)?;
        let own = config.slot_bulk() as usize;
        let (arg_pool, args) = conn::pool_taken(&pd, own, n, remote)?;
        let (res_pool, ress) = conn::pool_taken(&pd, own, n, remote)?;
        let large = LargeBufs::new(&pd, &config, remote)?;
        let pools = [recv_pool, send_pool, arg_pool, res_pool, ctl_pool];
        // Rebound after the pools, so that on an early return the buffers drop first: a pool
        // dropped with buffers still out leaks its memory on purpose.
        let recv = recv;
        let ctl = ctl.into_vec().pop().ok_or(ConnError::Config("pool"))?;
        let slots = call_slots(&pd, n, config.registration, sends, args, ress)?;
        let mut client = Client {
            qp: None,
            cq,
            pd,
            addr: addr.clone(),
            recv,
            slots,
            reposts: Vec::with_capacity(nrecv as usize),
            cancelled: Vec::with_capacity(n as usize),
            sq: SendQueue::new(sq_depth, (sq_depth / 4).max(1)),
            credits: RequesterCredits::new(n),
            negotiation: Negotiation::complete(
                ConnEnd::Client,
                Negotiation::advertise(&config),
                &[],
            ),
            config,
            stats: Arc::new(Counters::default()),
            slot_bits: slot_bits(n),
            slot_mask: (1u32 << slot_bits(n)) - 1,
            batch: [0; 2],
            polls: 0,
            idle_polls: 0,
            watched: false,
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
            wire: Wire::V1,
            ctl,
            serving,
            early: Vec::with_capacity(nrecv as usize),
            free: FreeSlots {
                indexes: (0..n).rev().collect(),
                large,
            },
            _pools: pools,
        };
        client.establish(config.connect_timeout)?;
        Ok(client)
    }

    fn establish(&mut self, timeout: Duration) -> Result<(), ConnError> {
        let n = self.config.credits;
        let nrecv = self.recv.len() as u32;
        let caps = QpCaps {
            max_send_wr: 8 * n + 16 + (nrecv - n),
            max_recv_wr: nrecv,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: self.inline_cap,
        };
        let local = Negotiation::advertise(&self.config);
        let init = QpInit {
            ack_timeout: self.config.ack_timeout,
            ..QpInit::new(&self.cq, &self.cq, caps)
        };
        let recv = &self.recv;
        let (qp, peer) = P::connect(&self.pd, &self.addr, init, &local.encode(), timeout, |qp| {
            conn::post_all_recvs::<P>(qp, recv)
        })?;
        self.negotiation = Negotiation::complete(ConnEnd::Client, local, peer.as_bytes());
        self.inline_max = qp.caps().max_inline_data.min(self.inline_cap);
        self.qp = Some(qp);
        self.sq.reset();
        self.credits.reset();
        // Every receive buffer was just posted: none may be posted twice.
        self.reposts.clear();
        self.dead = false;
        self.choose_version(timeout)
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
        if self.config.registration != Registration::Persistent {
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

    /// The protection domain of the client's memory (tests expose memory of their own in
    /// it to a responder).
    #[cfg(test)]
    pub(crate) fn pd(&self) -> &P::Pd {
        &self.pd
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
        self._pools.iter().map(BufferPool::bytes).sum::<u64>()
            + self.free.large.as_ref().map_or(0, LargeBufs::bytes)
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
    pub fn inject_loss(&mut self) {
        if let Some(qp) = self.qp.as_mut() {
            qp.disconnect();
        }
    }
}

/// The access the memory of a Call's chunks is registered with: bound to windows, exposed
/// by the regions' own keys, or both (`Registration`).
fn chunk_access(registration: Registration) -> Access {
    match registration {
        Registration::Windows => Access::LOCAL_WRITE | Access::MW_BIND,
        Registration::Persistent => {
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
        }
        Registration::Mixed => {
            Access::LOCAL_WRITE | Access::MW_BIND | Access::REMOTE_READ | Access::REMOTE_WRITE
        }
    }
}

/// The pending table of a new connection: `n` free slots, each with a send buffer from
/// `sends`, its argument and result buffers from `args` and `ress` and, unless
/// `registration` is persistent, the two windows that expose them.
fn call_slots<P: Provider>(
    pd: &P::Pd,
    n: u32,
    registration: Registration,
    sends: Box<[Buf<P>]>,
    args: Box<[Buf<P>]>,
    ress: Box<[Buf<P>]>,
) -> Result<Box<[CallSlot<P>]>, ConnError> {
    let mut sends = sends.into_vec().into_iter();
    let mut args = args.into_vec().into_iter();
    let mut ress = ress.into_vec().into_iter();
    let mut slots = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (mw_arg, mw_res) = match registration {
            Registration::Windows | Registration::Mixed => {
                (Some(pd.alloc_mw()?), Some(pd.alloc_mw()?))
            }
            Registration::Persistent => (None, None),
        };
        slots.push(CallSlot {
            state: CallState::Free,
            xid: 0,
            gen: first_generation(),
            tag: 0,
            deadline: None,
            timeout: Duration::ZERO,
            invalidating_since: None,
            reply_due: None,
            send: sends.next().ok_or(ConnError::Config("pool"))?,
            arg: args.next().ok_or(ConnError::Config("pool"))?,
            res: ress.next().ok_or(ConnError::Config("pool"))?,
            parked: [None, None],
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
            outcome: CallOutcome::Reply,
            send_len: 0,
        });
    }
    Ok(slots.into_boxed_slice())
}

#[cfg(test)]
mod tests;
