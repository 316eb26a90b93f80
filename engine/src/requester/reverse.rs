//! Reverse-direction RPC at the requester: the client serves its server's Calls
//! (callbacks) from a [`Dispatch`] table, inline messages only. On version 1 this is the
//! backward direction of RFC 8167; on version 2 the reverse direction of \[V2\] §3.2,
//! §4.2.2 (RDMA2_RVREQSUP_INLINE, advertised in the client's RDMA2_CONNPROP).
//!
//! A reverse Call arrives in one of the `reverse_credits` receives the client posts beyond
//! its forward credits (RFC 8167 §4.2.1). Version 1 tells it from a forward Reply by the
//! RPC `msg_type` of a message the reply verdict refused (`verdict::backward_call`, RFC 8167
//! §5); version 2 by RPCRDMA2_F_RESPONSE being clear. Its handler runs at once, within
//! the poll; the Reply — RDMA_MSG (version 1, RFC 8167 §5.2) or RDMA2_MSG with the flag set
//! — carries the reverse grant (`reverse_credits`) in `rdma_credit` (RFC 8167 §4.1) and is
//! built in one of as many send buffers and posted signaled: the buffer is reused once the
//! Send is retired. A Call that finds every buffer still in flight waits, its receive
//! held, for a later poll. A Call with chunks is refused: ERR_CHUNK on version 1 (no
//! upper-layer binding makes a backward item DDP-eligible, RFC 8167 §7; RFC 8166 §4.5.2),
//! RDMA2_ERR_READ_CHUNKS 0 for Read chunks and RDMA2_ERR_REPLY_RESOURCE for Write or Reply
//! chunks on version 2 (\[V2\] §5.3.3); a deferring handler is answered SYSTEM_ERR (a
//! callback has no one to complete it later).

use std::collections::VecDeque;
use std::sync::Arc;

use rpcrdma_proto::header::{Chunks, Header, MIN_HEADER_LEN, RPCRDMA_VERSION};
use rpcrdma_proto::rpc::{AcceptStat, ReplyHeader};
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::MIN_MSG_LEN;
use rpcrdma_proto::verdict;
use rpcrdma_proto::verdict::Role as VRole;

use super::*;
use crate::dispatch::{Deferred, Dispatch, Lookup, Outcome as HOutcome, Request, Response};

/// Most reverse Calls a client serves at once.
pub const MAX_REVERSE_SERVED: u32 = 64;

/// The work request index of reverse Reply buffer `k`'s Send (above every slot index).
const REVERSE_INDEX: u32 = 1 << 19;

/// Bytes of an accepted RPC Reply header with an AUTH_NONE verifier (RFC 5531 §9).
const ACCEPTED_LEN: usize = 24;

/// What a client that serves reverse Calls holds.
pub(super) struct Serving<P: Provider> {
    dispatch: Arc<Dispatch>,
    bufs: Box<[Buf<P>]>,
    /// Send-queue number of each buffer's last Reply (0: never used).
    seqs: Vec<u64>,
    /// Receives (index, message length) holding reverse Calls not yet answered (every
    /// buffer was in flight), in arrival order.
    waiting: VecDeque<(u32, u32)>,
    /// Declared last: its buffers are dropped first.
    _pool: BufferPool<P>,
}

impl<P: Provider> Serving<P> {
    pub(super) fn new(
        pd: &P::Pd,
        dispatch: Arc<Dispatch>,
        count: u32,
        send_size: u32,
    ) -> Result<Serving<P>, ConnError> {
        let (pool, bufs) = conn::pool_taken(pd, send_size as usize, count, Access::LOCAL_WRITE)?;
        Ok(Serving {
            dispatch,
            bufs,
            seqs: vec![0; count as usize],
            waiting: VecDeque::with_capacity(count as usize),
            _pool: pool,
        })
    }
}

impl<P: Provider> Client<P> {
    /// Connects as [`connect`](Self::connect) does, and serves the server's reverse-direction
    /// Calls from `dispatch` (version 1: RFC 8167's backward direction; version 2: \[V2\]
    /// §3.2): at most `config.reverse_credits` at once (at least 1), inline only. Handlers
    /// run within [`poll_completions`](Self::poll_completions).
    pub fn connect_serving(
        device: &P::Device,
        addr: &P::Addr,
        config: ConnConfig,
        dispatch: Arc<Dispatch>,
    ) -> Result<Client<P>, ConnError> {
        Self::connect_with(device, addr, config, Some(dispatch))
    }

    /// The reverse Calls to take at once (receives posted beyond the forward credits, RFC
    /// 8167 §4.2.1; \[V2\] §3.2): none without a table.
    pub(super) fn reverse_receives(config: &ConnConfig, serving: bool) -> u32 {
        if serving {
            config.reverse_credits.clamp(1, MAX_REVERSE_SERVED)
        } else {
            0
        }
    }

    /// Whether reverse Calls wait for a Reply buffer.
    #[inline]
    pub(super) fn reverse_waiting(&self) -> bool {
        self.serving.as_ref().is_some_and(|s| !s.waiting.is_empty())
    }

    /// Answers the reverse Calls that waited for a Reply buffer, while buffers allow.
    #[cold]
    pub(super) fn retry_reverse(&mut self) {
        // Each waiting Call is tried once, in order; one still without a buffer goes back
        // to the end of the queue.
        let n = self.serving.as_ref().map_or(0, |s| s.waiting.len());
        for _ in 0..n {
            let Some((r, len)) = self.serving.as_mut().and_then(|s| s.waiting.pop_front()) else {
                return;
            };
            self.serve_reverse(r, len);
        }
    }

    /// Serves the reverse Call of `len` bytes in receive `ridx`: its Reply (or RDMA2_ERROR)
    /// posted, the receive queued for reposting; or, with every Reply buffer in flight,
    /// held for a later poll.
    pub(super) fn serve_reverse(&mut self, ridx: u32, len: u32) {
        let Some(s) = self.serving.as_mut() else {
            bump(&self.stats.discards, 1);
            self.reposts.push(ridx);
            return;
        };
        let sq = &self.sq;
        let Some(k) = s.seqs.iter().position(|&q| sq.is_retired(q)) else {
            s.waiting.push_back((ridx, len));
            return;
        };
        let grant = s.bufs.len() as u32;
        let bytes = view::bytes(&self.recv[ridx as usize], len as usize);
        let out = view::bytes_mut(&mut s.bufs[k]);
        let built = build_reverse_reply(self.wire, &s.dispatch, bytes, out, grant);
        // The receive goes back before the Reply leaves: the server may send its next
        // reverse Call as soon as the Reply arrives (as RFC 8166 §3.3.1 has a responder
        // repost before replying).
        self.reposts.push(ridx);
        self.repost();
        let Some(n) = built else {
            bump(&self.stats.discards, 1);
            return;
        };
        let Some(s) = self.serving.as_mut() else {
            return;
        };
        let Some(qp) = self.qp.as_mut() else { return };
        let (seq, _) = self.sq.post(true);
        let sge = s.bufs[k].sge_span(0, n as u32);
        let payload = send_payload(&s.bufs[k], &sge, self.inline_max);
        let wr = SendWr::<P>::new(
            wrid::pack(Kind::Send, REVERSE_INDEX + k as u32, seq),
            SendOp::Send,
            payload,
        )
        .signaled();
        if qp.post_send(&wr).is_err() {
            end_refused::<P>(&self.stats, qp);
            return;
        }
        s.seqs[k] = seq;
        bump(&self.stats.reverse_calls, 1);
        bump(&self.stats.reverse_replies, 1);
        bump(&self.stats.bytes_sent, n as u64);
    }
}

/// The answer to the reverse Call `call` received on a connection speaking `wire`, built
/// in `out`: its length, or `None` to drop it.
fn build_reverse_reply(
    wire: Wire,
    dispatch: &Dispatch,
    call: &[u8],
    out: &mut [u8],
    grant: u32,
) -> Option<usize> {
    let (xid, c, args) = match wire {
        Wire::V1 => match verdict::backward_call(call)? {
            verdict::BackwardCall::Call(sc) => (sc.xid, sc.call, sc.args),
            verdict::BackwardCall::Refused { xid, verdict } => {
                return match verdict.rdma_error() {
                    Some(e) => Header::error(xid, RPCRDMA_VERSION, grant, e)
                        .encode(out)
                        .ok(),
                    None => reply_only(wire, out, xid, grant, ReplyHeader::garbage_args(xid)),
                };
            }
        },
        Wire::V2 => match judge_v2(call, out, grant)? {
            Ok(accepted) => accepted,
            Err(n) => return Some(n),
        },
    };
    if !c.is_rpc_v2() {
        return reply_only(wire, out, xid, grant, ReplyHeader::rpc_mismatch(xid, 2, 2));
    }
    let refuse = |out: &mut [u8], rpc| reply_only(wire, out, xid, grant, rpc);
    let entry = match dispatch.lookup(c.prog, c.vers, c.proc_num) {
        Lookup::Found(e) => e,
        Lookup::ProgUnavail => return refuse(out, ReplyHeader::prog_unavail(xid)),
        Lookup::ProgMismatch { low, high } => {
            return refuse(out, ReplyHeader::prog_mismatch(xid, low, high))
        }
        Lookup::ProcUnavail => return refuse(out, ReplyHeader::proc_unavail(xid)),
    };
    let req = Request {
        xid,
        prog: c.prog,
        vers: c.vers,
        proc_num: c.proc_num,
        cred: c.cred,
        args,
    };
    let at = header_len(wire) + ACCEPTED_LEN;
    let room = out.len().checked_sub(at)?;
    let max = (entry.spec.max_results as usize).min(room) & !3;
    let ticket = Deferred {
        conn: 0,
        slot: u32::MAX,
        gen: 0,
    };
    let mut no_bulk = [0u8; 0];
    let mut resp = Response::new(ticket, None, &mut out[at..at + max], &mut no_bulk, 0);
    let outcome = (entry.handler)(&req, &mut resp);
    let results = resp.results_len();
    let rpc = match outcome {
        HOutcome::Success => ReplyHeader::accepted_success(xid),
        HOutcome::GarbageArgs => ReplyHeader::garbage_args(xid),
        HOutcome::AuthError(a) => ReplyHeader::auth_error(xid, a),
        HOutcome::SystemErr | HOutcome::Deferred => ReplyHeader::system_err(xid),
    };
    let success = matches!(
        rpc.body,
        rpcrdma_proto::rpc::ReplyBody::Accepted {
            stat: AcceptStat::Success,
            ..
        }
    );
    let n = reply_only(wire, out, xid, grant, rpc)?;
    Some(if success { at + results } else { n })
}

/// Version 2's verdict on the reverse Call `call`: its XID, RPC Call header and arguments;
/// `Err(n)` when it is refused with the `n` bytes written in `out` (RDMA2_ERROR for chunks,
/// \[V2\] §5.3.3; GARBAGE_ARGS); `None` to drop it.
#[allow(clippy::type_complexity)]
fn judge_v2<'a>(
    call: &'a [u8],
    out: &mut [u8],
    grant: u32,
) -> Option<Result<(u32, rpcrdma_proto::rpc::CallHeader<'a>, &'a [u8]), usize>> {
    let xid = u32::from_be_bytes(call.get(..4)?.try_into().ok()?);
    let refuse = |out: &mut [u8], e: v2::RdmaError| {
        v2::Header::error(xid, rpcrdma_proto::v2::RPCRDMA_VERSION_TWO, grant, e)
            .encode(out)
            .ok()
            .map(Err)
    };
    let accepted = match v2::judge_call(call, VRole::Requester, true) {
        Ok(a) => a,
        Err(v) => {
            return match v.action {
                v2::Action::Error(e) => refuse(out, e),
                v2::Action::GarbageArgs => {
                    reply_only(Wire::V2, out, xid, grant, ReplyHeader::garbage_args(xid)).map(Err)
                }
                _ => None,
            }
        }
    };
    let h = accepted.header;
    if !h.read_list().is_empty() {
        return refuse(out, v2::RdmaError::ReadChunks { max_chunks: 0 });
    }
    if !h.write_list().is_empty() || h.reply_chunk().is_some() {
        return refuse(out, v2::RdmaError::ReplyResource { length_needed: 0 });
    }
    let Some((c, clen)) = accepted.call else {
        return refuse(out, v2::RdmaError::BadXdr);
    };
    Some(Ok((xid, c, &h.payload()[clen..])))
}

/// Bytes of the transport header of a reverse Reply without chunks in `wire`.
fn header_len(wire: Wire) -> usize {
    match wire {
        Wire::V1 => MIN_HEADER_LEN,
        Wire::V2 => MIN_MSG_LEN,
    }
}

/// A Reply carrying the RPC Reply header `rpc` (no results yet) in `out`, under the
/// transport header of `wire` (version 1: RDMA_MSG, RFC 8167 §5.2; version 2: RDMA2_MSG
/// with RPCRDMA2_F_RESPONSE, \[V2\] §3.2) with the grant `grant`: the length written.
fn reply_only(
    wire: Wire,
    out: &mut [u8],
    xid: u32,
    grant: u32,
    rpc: ReplyHeader<'_>,
) -> Option<usize> {
    let h = match wire {
        Wire::V1 => Header::msg(xid, grant, Chunks::NONE).encode(out).ok()?,
        Wire::V2 => v2::Header::reply(xid, grant, Chunks::NONE, false)
            .encode(out)
            .ok()?,
    };
    let r = rpc.encode(&mut out[h..]).ok()?;
    Some(h + r)
}
