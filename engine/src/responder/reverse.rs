//! Reverse-direction RPC at the responder: the server calls its client (callbacks) on the
//! client's own connection, inline messages only. On version 1 this is the backward
//! direction of RFC 8167; on version 2 the reverse direction of \[V2\] §3.2, §4.2.2, §8.2.
//!
//! - Credits: at most `reverse_credits` reverse Calls outstanding (the receives posted for
//!   their Replies, beyond the forward credits, so that Replies never take a receive a
//!   forward Call was granted, RFC 8167 §4.2.2), and at most what the client granted: one
//!   until its first Reply says more. Forward and reverse credits are counted apart: a
//!   Call's `rdma_credit` asks for reverse credits, a Reply's grants them (RFC 8167 §4.1;
//!   \[V2\] §3.2).
//! - Version 1: a reverse Call is RDMA_MSG with empty chunk lists and an XID of this end's;
//!   its Reply is told from a forward Call by the RPC message's `msg_type` (RFC 8167 §5).
//!   Nothing in version 1 says whether the client takes reverse Calls: the upper layer
//!   knows (NFSv4.1: a session whose back channel is bound to the connection), and a Call
//!   the client drops finishes with [`ReverseError::Timeout`].
//! - Version 2: a reverse Call is RDMA2_MSG with the flags clear; its Reply comes with
//!   RPCRDMA2_F_RESPONSE, which tells it from a forward Call without an XID lookup (§3.2).
//!   The client must have said it takes reverse Calls (Reverse Request Support INLINE or
//!   GENL in its RDMA2_CONNPROP; a client that sent none is taken at the default, INLINE,
//!   §4.2.2).
//! - A Call's Send is signaled: its buffer is reused only once it is retired. Nothing is
//!   retransmitted (RFC 8167 §4.3): a Call unanswered after `reverse_timeout` is given up,
//!   and a lost connection finishes every outstanding one.

use rpcrdma_proto::header::{Chunks, Header, MIN_HEADER_LEN};
use rpcrdma_proto::rpc::{AcceptStat, OpaqueAuth, ReplyBody};
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::props::ReverseRequests;
use rpcrdma_proto::v2::MIN_MSG_LEN;

use super::*;
use crate::conn::{PeerProps, Wire};

/// Most reverse Calls outstanding on one connection.
pub const MAX_REVERSE: u32 = 64;

/// The work request index of reverse Call `k`'s Send (above every ring index).
const REVERSE_INDEX: u32 = 1 << 19;

/// Why a reverse-direction Call was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReverseCallError {
    /// The connection's version is not decided yet (an open server before the client's
    /// first message): try again once it has sent one.
    VersionUndecided,
    /// The client takes no reverse Calls (Reverse Request Support NONE), or this end was
    /// configured without reverse credits.
    NotSupported,
    /// Every reverse credit is in use, or the send queue is full: take the replies
    /// ([`ServerConn::take_reverse`]) and poll, then try again.
    WouldBlock,
    /// The Call does not fit the client's Receive Buffer Size (inline only).
    TooLarge,
    /// Arguments that are not whole XDR units.
    Invalid,
    /// The connection is lost.
    Disconnected,
}

impl core::fmt::Display for ReverseCallError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for ReverseCallError {}

/// Why a reverse-direction Call has no results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReverseError {
    /// The client answered with an RPC error: its accept status, or `None` for a denial
    /// (RFC 5531 §9).
    Rpc(Option<AcceptStat>),
    /// The client answered RDMA2_ERROR (\[V2\] §5.3.3).
    Transport(v2::RdmaError),
    /// The client answered RDMA_ERROR (version 1, RFC 8166 §4.5): ERR_CHUNK, or ERR_VERS.
    TransportV1(RdmaError),
    /// No Reply came within `reverse_timeout` (RFC 8167 §4.3: nothing is retransmitted).
    Timeout,
    /// The connection was lost before the Reply came.
    ConnectionLost,
}

/// A finished reverse-direction Call, borrowed during [`ServerConn::take_reverse`]'s
/// callback.
#[derive(Debug)]
pub struct ReverseReply<'a> {
    /// The tag given to [`ServerConn::call_reverse`].
    pub tag: u64,
    /// Its XID.
    pub xid: u32,
    /// The results (SUCCESS), or why there are none.
    pub result: Result<&'a [u8], ReverseError>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RevState {
    Free,
    Sent,
    Done,
}

struct RevSlot {
    state: RevState,
    xid: u32,
    tag: u64,
    /// Send-queue number of its last Call's Send (signaled): the buffer is free again once
    /// it is retired.
    seq: u64,
    outcome: Result<(), ReverseError>,
    results: Vec<u8>,
    len: usize,
    /// When housekeeping first saw it outstanding (the timeout counts from there, so that
    /// sending a Call reads no clock).
    seen: Option<Instant>,
}

/// The reverse-direction state of one connection.
pub(super) struct Reverse<P: Provider> {
    slots: Vec<RevSlot>,
    bufs: Box<[Buf<P>]>,
    /// What the client granted (one until its first Reply).
    granted: u32,
    /// Reverse Calls sent and not yet taken back ([`ServerConn::take_reverse`]).
    pub(super) in_flight: u32,
    gen: u32,
    /// Declared last: its buffers above are dropped first.
    _pool: Option<BufferPool<P>>,
}

impl<P: Provider> Reverse<P> {
    /// Bytes registered for the reverse Calls' buffers.
    pub(super) fn registered_bytes(&self) -> u64 {
        self._pool.as_ref().map_or(0, BufferPool::bytes)
    }

    /// `count` reverse Calls of up to `send_size` bytes, results of up to `recv_size`.
    pub(super) fn new(
        pd: &P::Pd,
        count: u32,
        send_size: u32,
        recv_size: u32,
    ) -> Result<Reverse<P>, ConnError> {
        if count == 0 {
            return Ok(Reverse {
                slots: Vec::new(),
                bufs: Box::new([]),
                granted: 0,
                in_flight: 0,
                gen: 0,
                _pool: None,
            });
        }
        let (pool, bufs) = conn::pool_taken(pd, send_size as usize, count, Access::LOCAL_WRITE)?;
        let slots = (0..count)
            .map(|_| RevSlot {
                state: RevState::Free,
                xid: 0,
                tag: 0,
                seq: 0,
                outcome: Ok(()),
                results: vec![0; recv_size as usize],
                len: 0,
                seen: None,
            })
            .collect();
        Ok(Reverse {
            slots,
            bufs,
            granted: 1,
            in_flight: 0,
            gen: first_gen(),
            _pool: Some(pool),
        })
    }
}

/// A starting generation for reverse XIDs that differs between connections.
fn first_gen() -> u32 {
    static N: AtomicU64 = AtomicU64::new(0x5eed);
    (N.fetch_add(0x9e37_79b9, Ordering::Relaxed) as u32) ^ std::process::id()
}

impl<P: Provider> ServerConn<P> {
    /// Calls the client (reverse direction: RFC 8167 on version 1, \[V2\] §3.2 on version
    /// 2): sends `prog`/`vers`/`proc_num` with `args` (XDR, whole units) and an AUTH_NONE
    /// credential ([`call_reverse_as`](Self::call_reverse_as) takes another) inline, and
    /// returns its XID; the Reply is handed over by [`take_reverse`](Self::take_reverse)
    /// with `tag`. Never blocks.
    ///
    /// On version 1 nothing tells whether the client takes reverse Calls: call only a client
    /// the upper layer knows to (NFSv4.1: one whose session has its back channel on this
    /// connection). A Call the client drops finishes with [`ReverseError::Timeout`].
    pub fn call_reverse(
        &mut self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        args: &[u8],
        tag: u64,
    ) -> Result<u32, ReverseCallError> {
        self.call_reverse_as(prog, vers, proc_num, OpaqueAuth::NONE, args, tag)
    }

    /// [`call_reverse`](Self::call_reverse) with the credential `cred` (RFC 5531 §8.2):
    /// an NFSv4.1 client takes CB_COMPOUND only with the flavor its CREATE_SESSION named
    /// (the Linux client refuses AUTH_NONE for anything but CB_NULL).
    pub fn call_reverse_as(
        &mut self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        cred: OpaqueAuth<'_>,
        args: &[u8],
        tag: u64,
    ) -> Result<u32, ReverseCallError> {
        if self.io.dead {
            return Err(ReverseCallError::Disconnected);
        }
        let wire = self.reverse_wire()?;
        if self.reverse.slots.is_empty() {
            return Err(ReverseCallError::NotSupported);
        }
        // How much the client's receives take (RFC 8167: backward messages are inline;
        // RFC 8797 §4.2 gives version 1's size, RDMA2_CONNPROP version 2's).
        let (hlen, client_recv) = match wire {
            Wire::V1 => (MIN_HEADER_LEN, self.negotiation.negotiated.reply_threshold),
            Wire::V2 => {
                let peer: PeerProps = self.negotiation.peer;
                if peer.reverse == ReverseRequests::None {
                    return Err(ReverseCallError::NotSupported);
                }
                (MIN_MSG_LEN, peer.recv_size)
            }
        };
        if args.len() & 3 != 0 {
            return Err(ReverseCallError::Invalid);
        }
        let rpc_len =
            CallHeader::new(0, prog, vers, proc_num, cred, OpaqueAuth::NONE).encoded_len();
        let len = hlen + rpc_len + args.len();
        if len > client_recv as usize || len > self.reverse.bufs[0].size() {
            return Err(ReverseCallError::TooLarge);
        }
        let rev = &mut self.reverse;
        if rev.in_flight >= rev.granted
            || self.io.sq.room() < REPLY_WRS + 1 + self.sends.len() as u64
        {
            return Err(ReverseCallError::WouldBlock);
        }
        let sq = &self.io.sq;
        let Some(k) = rev
            .slots
            .iter()
            .position(|s| s.state == RevState::Free && sq.is_retired(s.seq))
        else {
            return Err(ReverseCallError::WouldBlock);
        };
        rev.gen = rev.gen.wrapping_add(1);
        let xid = (rev.gen << 6) | k as u32;
        // Asks for as many reverse credits as this end may use (RFC 8167 §4.1).
        let credit = rev.slots.len() as u32;
        let buf = view::bytes_mut(&mut rev.bufs[k]);
        let hl = match wire {
            Wire::V1 => Header::msg(xid, credit, Chunks::NONE).encode(buf),
            Wire::V2 => v2::Header::call(xid, credit, 0, Chunks::NONE, false).encode(buf),
        };
        let (Ok(hl), Ok(rl)) = (
            hl,
            CallHeader::new(xid, prog, vers, proc_num, cred, OpaqueAuth::NONE)
                .encode(&mut buf[hlen..]),
        ) else {
            return Err(ReverseCallError::TooLarge);
        };
        buf[hl + rl..hl + rl + args.len()].copy_from_slice(args);
        let (seq, _) = self.io.sq.post(true);
        let sge = rev.bufs[k].sge_span(0, len as u32);
        let payload = send_payload(&rev.bufs[k], &sge, self.io.inline_max);
        let wr = SendWr::<P>::new(
            wrid::pack(Kind::Send, REVERSE_INDEX + k as u32, seq),
            SendOp::Send,
            payload,
        )
        .signaled();
        if self.io.qp.post_send(&wr).is_err() {
            self.refused();
            return Err(ReverseCallError::Disconnected);
        }
        let slot = &mut rev.slots[k];
        (slot.state, slot.xid, slot.tag, slot.seq) = (RevState::Sent, xid, tag, seq);
        slot.seen = None;
        rev.in_flight += 1;
        bump(&self.io.stats.reverse_calls, 1);
        bump(&self.io.stats.bytes_sent, len as u64);
        Ok(xid)
    }

    /// The version reverse Calls go out in: version 1 once decided, version 2 once the
    /// client's first message has said so (its RDMA2_CONNPROP, or a version 2 Call; before
    /// that, a client still opening its connection would not know the Call for one).
    fn reverse_wire(&self) -> Result<Wire, ReverseCallError> {
        match self.mode {
            Mode::V1 => Ok(Wire::V1),
            Mode::V2 if self.io.wire == Wire::V2 && self.negotiation.wire() == Wire::V2 => {
                Ok(Wire::V2)
            }
            _ => Err(ReverseCallError::VersionUndecided),
        }
    }

    /// Gives up the reverse Calls outstanding longer than `reverse_timeout` at `now`
    /// ([`ReverseError::Timeout`]); a Reply that comes later is dropped. Called by
    /// [`housekeep`](Self::housekeep).
    pub(super) fn expire_reverse(&mut self, now: Instant) {
        let limit = self.config.reverse_timeout;
        for s in self.reverse.slots.iter_mut() {
            if s.state != RevState::Sent {
                continue;
            }
            match s.seen {
                None => s.seen = Some(now),
                Some(t) if now.saturating_duration_since(t) >= limit => {
                    s.outcome = Err(ReverseError::Timeout);
                    s.state = RevState::Done;
                    bump(&self.io.stats.reverse_timeouts, 1);
                }
                Some(_) => {}
            }
        }
    }

    /// Hands every finished reverse Call to `f` (results borrowed for the call) and frees
    /// its credit; on a lost connection the outstanding ones finish with
    /// [`ReverseError::ConnectionLost`]. Returns how many were handed over.
    pub fn take_reverse(&mut self, mut f: impl FnMut(ReverseReply<'_>)) -> usize {
        let dead = self.io.dead;
        let rev = &mut self.reverse;
        let mut n = 0;
        for s in rev.slots.iter_mut() {
            if s.state == RevState::Sent && dead {
                s.outcome = Err(ReverseError::ConnectionLost);
                s.state = RevState::Done;
            }
            if s.state != RevState::Done {
                continue;
            }
            f(ReverseReply {
                tag: s.tag,
                xid: s.xid,
                result: s.outcome.map(|()| &s.results[..s.len]),
            });
            s.state = RevState::Free;
            rev.in_flight -= 1;
            n += 1;
        }
        n
    }

    /// Reverse Calls sent and not yet taken back.
    pub fn reverse_in_flight(&self) -> u32 {
        self.reverse.in_flight
    }

    /// The client's reverse-direction grant as last heard.
    pub fn reverse_granted(&self) -> u32 {
        self.reverse.granted
    }

    /// The answer to one of this end's reverse Calls in receive `idx` (version 1: an RPC
    /// REPLY or an RDMA_ERROR, RFC 8167 §5; version 2: a message with
    /// RPCRDMA2_F_RESPONSE), noted for [`take_reverse`](Self::take_reverse); anything else is
    /// dropped. The receive goes back at the end of the poll.
    pub(super) fn on_reverse_reply(&mut self, idx: u32, wire: Wire) {
        let i = idx as usize;
        self.in_process -= 1;
        self.reposts.push(idx);
        let bytes = view::bytes(&self.recv[i], self.slots[i].byte_len as usize);
        let judged = match wire {
            Wire::V1 => judge_reply_v1(bytes),
            Wire::V2 => judge_reply_v2(bytes, !self.reverse.slots.is_empty()),
        };
        let Some((xid, outcome, grant)) = judged else {
            bump(&self.io.stats.discards, 1);
            return;
        };
        let rev = &mut self.reverse;
        let k = (xid & 63) as usize;
        let Some(slot) = rev
            .slots
            .get_mut(k)
            .filter(|s| s.state == RevState::Sent && s.xid == xid)
        else {
            bump(&self.io.stats.discards, 1);
            return;
        };
        match outcome {
            Ok(results) if results.len() <= slot.results.len() => {
                slot.results[..results.len()].copy_from_slice(results);
                slot.len = results.len();
                slot.outcome = Ok(());
            }
            Ok(_) => slot.outcome = Err(ReverseError::Rpc(Some(AcceptStat::SystemErr))),
            Err(e) => slot.outcome = Err(e),
        }
        slot.state = RevState::Done;
        slot.seen = None;
        if let Some(g) = grant {
            rev.granted = g.clamp(1, rev.slots.len() as u32);
        }
        bump(&self.io.stats.reverse_replies, 1);
    }
}

/// What a reverse Call's answer says, as [`ServerConn::on_reverse_reply`] records it: the
/// XID, the results (in the receive) or why there are none, and the client's grant (a
/// Reply's credit field; an error's is none, CHECKLIST G-15).
type Judged<'a> = (u32, Result<&'a [u8], ReverseError>, Option<u32>);

/// A version 1 answer to a reverse Call (RFC 8167 §5.2): `None` to drop it.
fn judge_reply_v1(bytes: &[u8]) -> Option<Judged<'_>> {
    match verdict::backward_reply(bytes)? {
        verdict::BackwardReply::Reply(r) => {
            Some((r.xid, results_of(&r.reply, r.results), Some(r.credit)))
        }
        verdict::BackwardReply::Error { xid, err } => {
            Some((xid, Err(ReverseError::TransportV1(err)), None))
        }
        verdict::BackwardReply::Discard(_) => None,
    }
}

/// A version 2 answer to a reverse Call (\[V2\] §3.2, §5.3.3): `None` to drop it.
fn judge_reply_v2(bytes: &[u8], reverse: bool) -> Option<Judged<'_>> {
    match v2::judge_reply(bytes, verdict::Role::Responder, reverse) {
        Ok(acc) => {
            // A Long Reply: no Reply chunk was offered, so it is not one of ours.
            let (rpc, len) = acc.reply?;
            let out = results_of(&rpc, &acc.header.payload()[len..]);
            Some((acc.header.xid(), out, Some(acc.header.credit())))
        }
        Err(v) => match v.action {
            v2::Action::PeerError(e) => Some((
                u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
                Err(ReverseError::Transport(e)),
                None,
            )),
            _ => None,
        },
    }
}

/// The results of an RPC Reply `rpc` followed by `rest`: `rest` for SUCCESS, the error
/// otherwise (RFC 5531 §9).
fn results_of<'a>(rpc: &ReplyHeader<'_>, rest: &'a [u8]) -> Result<&'a [u8], ReverseError> {
    match rpc.body {
        ReplyBody::Accepted {
            stat: AcceptStat::Success,
            ..
        } => Ok(rest),
        ReplyBody::Accepted { stat, .. } => Err(ReverseError::Rpc(Some(stat))),
        _ => Err(ReverseError::Rpc(None)),
    }
}
