//! The receive-path decision (RFC 8166 §4.5, §4.6): what a responder does with a Call it
//! received, or a requester with a Reply, decided from the bytes alone.
//!
//! The checks run in the order RFC 8166 §4.5 implies: the 28-byte minimum, the version, the
//! procedure, the header's XDR and its chunk lists, then the Payload stream against the chunks.
//! Where the documents are silent or conflict the decisions of `CHECKLIST.md` section G are
//! followed; each is named where it is applied. `docs/ARCHITECTURE.md` lists them.
//!
//! The common case, a Short RDMA_MSG without any chunk, is accepted by a fast path
//! ([`accept_short_call`], [`accept_short_reply`]) that makes the same checks from the fixed
//! words; [`judge_call`] and [`judge_reply`] try it first and fall back to the full verdicts
//! ([`judge_call_full`], [`judge_reply_full`]) for everything else. Both paths give the same
//! result on every input (property tests in `tests/verdict.rs`).

use crate::chunks::{ChunkError, ChunkErrorClass, ReadLimits, ReadPlan};
use crate::header::{
    HeaderError, HeaderView, Proc, RdmaError, ReadList, Segments, FIXED_PREFIX_LEN, MIN_HEADER_LEN,
    RPCRDMA_VERSION,
};
use crate::rpc::{CallHeader, ReplyHeader, RpcMessage};
use crate::xdr::XdrReader;

mod backward;
mod pulled;
mod short;
mod written;
pub use backward::{backward_call, backward_reply, BackwardCall, BackwardReply};
pub use pulled::pulled_call;
pub use short::{short_call, short_reply, ShortCall, ShortReply};
pub use written::{write_call, write_reply, WriteCall, WriteReply};

/// Which end of the connection received the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The server side: it receives Calls.
    Responder,
    /// The client side: it receives Replies.
    Requester,
}

/// What the receiver must do with the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Hand the message to the RPC layer (or, for an RDMA_ERROR at a requester, complete the RPC
    /// with the error).
    Process,
    /// Reply RDMA_ERROR / ERR_VERS with the inclusive range of supported versions (§4.5.1).
    ErrVers {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// Reply RDMA_ERROR / ERR_CHUNK (§4.5.2).
    ErrChunk,
    /// Reply with an RPC Reply whose status is GARBAGE_ARGS, using RDMA_MSG (§4.5.2).
    GarbageArgs,
    /// Drop the message without any reply.
    Discard,
}

impl Action {
    /// The snake_case name used by `rpcrdma decode`.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Process => "process",
            Action::ErrVers { .. } => "err_vers",
            Action::ErrChunk => "err_chunk",
            Action::GarbageArgs => "garbage_args",
            Action::Discard => "discard",
        }
    }
}

/// The decision with the rule it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// What to do.
    pub action: Action,
    /// One sentence naming the rule and its RFC section.
    pub reason: &'static str,
}

impl Verdict {
    const fn new(action: Action, reason: &'static str) -> Self {
        Verdict { action, reason }
    }

    /// The RDMA_ERROR body to send, for the two error verdicts.
    pub fn rdma_error(&self) -> Option<RdmaError> {
        match self.action {
            Action::ErrVers { low, high } => Some(RdmaError::Vers { low, high }),
            Action::ErrChunk => Some(RdmaError::Chunk),
            _ => None,
        }
    }
}

/// A Call that passed every transport check, with what the responder needs to go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedCall<'a> {
    /// The decoded transport header.
    pub header: HeaderView<'a>,
    /// How the unreduced Payload stream is put together from the inline bytes and Read chunks.
    pub plan: ReadPlan<'a>,
    /// The RPC Call header and its length, when it travels inline (RDMA_MSG); `None` for a Long
    /// Call, whose header arrives with the Position-Zero Read chunk.
    pub call: Option<(CallHeader<'a>, usize)>,
}

impl AcceptedCall<'_> {
    /// What the verdict learned, without borrowing the message: [`resume_call`] rebuilds this
    /// accepted Call from it and the same bytes without judging them again.
    pub fn summary(&self) -> CallSummary {
        CallSummary {
            len: self.header.bytes().len(),
            header_len: self.header.header_len(),
            plan: self.plan.summary(),
            call_len: self.call.map(|(_, n)| n),
        }
    }
}

/// What [`judge_call`] learned about a Call it accepted, kept by a responder between the
/// phases of one chunked or Long Call (pulling the chunks, then answering) so that the
/// later phases need not judge the message again: see [`resume_call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSummary {
    len: usize,
    header_len: usize,
    plan: crate::chunks::PlanSummary,
    call_len: Option<usize>,
}

/// The [`AcceptedCall`] that [`judge_call`] returned for `buf`, rebuilt from its
/// [`summary`](AcceptedCall::summary): the transport header decoded again (its lists are
/// views into `buf`), the read plan resumed without its validation passes (RFC 8166 §3.4.5
/// checks already made), the inline RPC Call header (if any) decoded again.
///
/// `buf` must hold the bytes that were judged (the receive buffer is not reposted between
/// the phases). `None` when they visibly are not (another length, header length or number
/// of read segments): the caller judges `buf` with [`judge_call`] instead. On other bytes of
/// the same shape the result describes the old message, but nothing reads outside `buf`.
pub fn resume_call<'a>(buf: &'a [u8], s: &CallSummary) -> Option<AcceptedCall<'a>> {
    if buf.len() != s.len {
        return None;
    }
    // Either version: a version 2 Call's lists are read the same way.
    let header = HeaderView::parse_any(buf).ok()?;
    if header.header_len() != s.header_len {
        return None;
    }
    let plan = ReadPlan::resume(header.read_list(), s.plan)?;
    let call = match s.call_len {
        None => None,
        Some(n) => match CallHeader::parse(header.payload()) {
            Ok((c, len)) if len == n => Some((c, len)),
            _ => return None,
        },
    };
    Some(AcceptedCall { header, plan, call })
}

/// A Reply (or RDMA_ERROR) that passed every transport check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptedReply<'a> {
    /// The decoded transport header.
    pub header: HeaderView<'a>,
    /// The RPC Reply header and its length, when it travels inline (RDMA_MSG).
    pub reply: Option<(ReplyHeader<'a>, usize)>,
}

/// Messages shorter than the minimal header (RFC 8166 §4.5).
const TOO_SHORT: Verdict = Verdict::new(
    Action::Discard,
    "shorter than the 28-byte minimal header, so the XID cannot be trusted: silently discard \
     before any parsing (RFC 8166 §4.5)",
);

/// RDMA_DONE, at either side (RFC 8166 §4.6.2).
const DONE: Verdict = Verdict::new(
    Action::Discard,
    "RDMA_DONE is no longer supported: receivers MUST silently discard it (RFC 8166 §4.6.2)",
);

const LIMITS: ReadLimits = ReadLimits {
    max_chunks: ReadLimits::DEFAULT_MAX_CHUNKS,
    max_stream_len: u32::MAX,
};

/// Judges a received message as `role` would.
pub fn judge(buf: &[u8], role: Role) -> Verdict {
    match role {
        Role::Responder => match judge_call(buf) {
            Ok(_) => Verdict::new(
                Action::Process,
                "valid RPC-over-RDMA version 1 Call (RFC 8166 §4): hand it to the RPC layer",
            ),
            Err(v) => v,
        },
        Role::Requester => match judge_reply(buf) {
            Ok(reply) => reply_process_reason(reply.header.error()),
            Err(v) => v,
        },
    }
}

/// The `Process` verdict for an accepted Reply, or for an RDMA_ERROR carrying `error`.
fn reply_process_reason(error: Option<RdmaError>) -> Verdict {
    let reason = match error {
        Some(RdmaError::Vers { .. }) => {
            "RDMA_ERROR ERR_VERS: the responder does not support this version; complete the RPC \
             with a permanent error (RFC 8166 §4.5, §4.5.1)"
        }
        Some(RdmaError::Chunk) => {
            "RDMA_ERROR ERR_CHUNK: the responder could not parse the Call's header; complete the \
             RPC with a permanent error (RFC 8166 §4.5, §4.5.2)"
        }
        None => "valid RPC-over-RDMA version 1 Reply (RFC 8166 §4): complete the matching RPC",
    };
    Verdict::new(Action::Process, reason)
}

/// Responder side (RFC 8166 §4.5): checks a received Call and returns what the responder needs
/// to process it, or the verdict that replaces processing.
///
/// A Short Call without chunks is accepted by [`accept_short_call`]; every other message is
/// judged by [`judge_call_full`]. The result is the same as [`judge_call_full`]'s.
#[inline]
pub fn judge_call(buf: &[u8]) -> Result<AcceptedCall<'_>, Verdict> {
    match accept_short_call(buf) {
        Some(call) => Ok(call),
        None => judge_call_full(buf),
    }
}

/// The fast path of [`judge_call`]: accepts a Short RDMA_MSG Call whose read list, write list
/// and reply chunk are all absent, with exactly the checks [`judge_call_full`] makes on such a
/// message: at least 28 bytes, version 1, RDMA_MSG and three zero list discriminators (the
/// fixed words, RFC 8166 §4.5), an RPC message after the header whose XID is `rdma_xid`
/// (§4.2.1, CHECKLIST G-9), a Payload stream a 32-bit Position can describe, and an RPC Call
/// header that decodes (§4.5.2).
///
/// `Some` holds what [`judge_call_full`] would accept, field for field; `None` decides
/// nothing (any other message, or one of these checks failed), and the caller goes on with
/// [`judge_call_full`], which gives the verdict.
#[inline]
pub fn accept_short_call(buf: &[u8]) -> Option<AcceptedCall<'_>> {
    let short = short_call(buf)?;
    // The fixed words were checked by `short_call`.
    let header = HeaderView::parse_bare_msg(buf)?;
    // Empty read list: the plan is the inline payload alone (its length checked as for any
    // Call).
    let plan = ReadPlan::new(header.payload().len(), header.read_list(), LIMITS).ok()?;
    Some(AcceptedCall {
        header,
        plan,
        call: Some((short.call, short.call_len)),
    })
}

/// The full responder-side verdict (RFC 8166 §4.5) for any message: the reference
/// [`judge_call`] falls back on.
pub fn judge_call_full(buf: &[u8]) -> Result<AcceptedCall<'_>, Verdict> {
    use Action::*;
    let header = call_header(buf)?;
    if let Some(v) = check_segments(&header, ErrChunk) {
        return Err(v);
    }
    let reads = header.read_list();
    check_call_form(&header, reads)?;
    let plan =
        ReadPlan::new(header.payload().len(), reads, LIMITS).map_err(|e| match e.class() {
            ChunkErrorClass::ErrChunk => Verdict::new(ErrChunk, chunk_reason(&e)),
            ChunkErrorClass::GarbageArgs => Verdict::new(GarbageArgs, chunk_reason(&e)),
        })?;
    let call = rpc_call(&header, reads)?;
    Ok(AcceptedCall { header, plan, call })
}

/// Phase one of [`judge_call_full`]: the transport header of the Call `buf`, decoded, of
/// version 1 and of a type a Call may have (RDMA_MSG or RDMA_NOMSG).
#[inline(always)]
fn call_header(buf: &[u8]) -> Result<HeaderView<'_>, Verdict> {
    use Action::*;
    if buf.len() < MIN_HEADER_LEN {
        return Err(TOO_SHORT);
    }
    let vers = word(buf, 4);
    let proc_raw = word(buf, 12);
    if proc_raw == Proc::Error.to_u32() {
        return Err(Verdict::new(
            Discard,
            "a responder MUST silently discard RDMA_ERROR (RFC 8166 §4.2.4, §4.5)",
        ));
    }
    if vers != RPCRDMA_VERSION {
        return Err(Verdict::new(
            ErrVers {
                low: RPCRDMA_VERSION,
                high: RPCRDMA_VERSION,
            },
            "unsupported rdma_vers: reply RDMA_ERROR ERR_VERS with the supported range 1..1 \
             (RFC 8166 §4.5.1)",
        ));
    }
    let header =
        match HeaderView::parse(buf) {
            Ok(h) => h,
            Err(HeaderError::UnknownProc { .. }) => return Err(Verdict::new(
                ErrChunk,
                "invalid rdma_proc value is an XDR error: reply RDMA_ERROR ERR_CHUNK (RFC 8166 \
                 §4.5.2)",
            )),
            Err(HeaderError::Truncated(_)) => {
                return Err(Verdict::new(
                    ErrChunk,
                    "the chunk lists run past the end of the message, an XDR error: reply \
                 RDMA_ERROR ERR_CHUNK (RFC 8166 §4.5.2)",
                ))
            }
            Err(HeaderError::Malformed(_)) => {
                return Err(Verdict::new(
                    ErrChunk,
                    "the chunk lists do not decode (a discriminator other than 0 or 1, or a count \
                 larger than the message), an XDR error: reply RDMA_ERROR ERR_CHUNK (RFC 8166 \
                 §4.5.2)",
                ))
            }
            Err(HeaderError::UnsupportedVersion { .. }) => unreachable!("version checked above"),
        };
    match header.proc() {
        Proc::Done => return Err(DONE),
        Proc::Msgp => {
            return Err(Verdict::new(
                ErrChunk,
                "RDMA_MSGP is no longer supported: responders SHOULD reply RDMA_ERROR ERR_CHUNK \
                 (RFC 8166 §4.6.1)",
            ))
        }
        Proc::Error => unreachable!("discarded above"),
        Proc::Msg | Proc::NoMsg => {}
    }
    Ok(header)
}

/// Phase two of [`judge_call_full`]: the Call's type against its Read list `reads` (an
/// RDMA_NOMSG's Position-Zero chunk, an RDMA_MSG's inline RPC message and its XID).
#[inline(always)]
fn check_call_form(header: &HeaderView<'_>, reads: ReadList<'_>) -> Result<(), Verdict> {
    use Action::*;
    if header.proc() == Proc::NoMsg {
        if reads.is_empty() && header.write_list().is_empty() && header.reply_chunk().is_none() {
            return Err(Verdict::new(
                ErrChunk,
                "RDMA_NOMSG with the Read list, Write list and Reply chunk all absent is an XDR \
                 error: reply RDMA_ERROR ERR_CHUNK (RFC 8166 §4.5.2)",
            ));
        }
        if !reads.iter().any(|s| s.position == 0) {
            return Err(Verdict::new(
                ErrChunk,
                "an RDMA_NOMSG Call must carry its Payload stream in a Position-Zero Read chunk, \
                 and this one has none: reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.5.3, §4.2.4, \
                 §4.5.2)",
            ));
        }
    } else {
        if reads.iter().any(|s| s.position == 0) {
            return Err(Verdict::new(
                ErrChunk,
                "RDMA_MSG combined with a Position-Zero Read chunk is ambiguous (two items at \
                 Position zero): reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.4.5, §4.5.2; \
                 CHECKLIST G-7)",
            ));
        }
        let payload = header.payload();
        if payload.len() < 4 {
            return Err(Verdict::new(
                ErrChunk,
                "RDMA_MSG without an RPC message after the header (the Payload stream always \
                 begins with the XID): reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.2, §4.5.2)",
            ));
        }
        if word(payload, 0) != header.xid() {
            return Err(Verdict::new(
                ErrChunk,
                "rdma_xid differs from the XID of the RPC message, an XDR error: reply \
                 RDMA_ERROR ERR_CHUNK (RFC 8166 §4.2.1, §4.5.2; CHECKLIST G-9)",
            ));
        }
    }
    Ok(())
}

/// Phase three of [`judge_call_full`]: an RDMA_MSG's RPC Call header, decoded, with its
/// length, no Read chunk lying inside it; `None` for an RDMA_NOMSG (its Call is in the
/// Position-Zero chunk, not pulled yet).
#[inline(always)]
fn rpc_call<'a>(
    header: &HeaderView<'a>,
    reads: ReadList<'a>,
) -> Result<Option<(CallHeader<'a>, usize)>, Verdict> {
    use Action::*;
    Ok(if header.proc() == Proc::Msg {
        let payload = header.payload();
        match RpcMessage::parse(payload) {
            Ok((RpcMessage::Call(c), len)) => {
                if reads.iter().any(|s| (s.position as usize) < len) {
                    return Err(Verdict::new(
                        GarbageArgs,
                        "a Read chunk lies inside the RPC Call header, which is never \
                         DDP-eligible: reply GARBAGE_ARGS (RFC 8166 §3.4.2, §6.1, §4.5.2; \
                         CHECKLIST G-14)",
                    ));
                }
                Some((c, len))
            }
            Ok((RpcMessage::Reply(_), _)) => {
                return Err(Verdict::new(
                    Discard,
                    "the RPC message is a Reply, not a Call; without the backward-direction \
                     conventions of RFC 8167 a responder has no Call it answers: discard \
                     (RFC 8166 §4, CHECKLIST A.13)",
                ))
            }
            Err(_) => {
                return Err(Verdict::new(
                    GarbageArgs,
                    "the transport header is valid but the RPC Call header in the Payload \
                     stream does not decode: reply GARBAGE_ARGS (RFC 8166 §4.5.2)",
                ))
            }
        }
    } else {
        None
    })
}

/// Whether a received Call, once accepted, has Read chunks to pull before it can be answered:
/// exactly `judge_call(buf).is_ok_and(|c| c.plan.chunk_count() > 0)`, answered from two words
/// for an RDMA_MSG whose read list is empty (the Short Call, whatever else it holds: if it is
/// accepted it has no chunk, and if it is not it is answered without pulling).
pub fn call_has_chunks(buf: &[u8]) -> bool {
    !msg_without_reads(buf) && judge_call(buf).is_ok_and(|c| c.plan.chunk_count() > 0)
}

/// The two-word test of [`call_has_chunks`]: an RDMA_MSG whose read list is empty. Such a
/// Call has nothing to pull whatever its verdict; any other Call is judged (once) to learn
/// whether it has.
#[inline]
pub fn msg_without_reads(buf: &[u8]) -> bool {
    buf.len() >= FIXED_PREFIX_LEN + 4
        && word(buf, 12) == Proc::Msg.to_u32()
        && word(buf, FIXED_PREFIX_LEN) == 0
}

/// Requester side (RFC 8166 §4.5): checks a received Reply or RDMA_ERROR; every failure is a
/// silent discard.
///
/// A Short Reply without chunks is accepted by [`accept_short_reply`]; every other message is
/// judged by [`judge_reply_full`]. The result is the same as [`judge_reply_full`]'s.
#[inline]
pub fn judge_reply(buf: &[u8]) -> Result<AcceptedReply<'_>, Verdict> {
    match accept_short_reply(buf) {
        Some(reply) => Ok(reply),
        None => judge_reply_full(buf),
    }
}

/// The fast path of [`judge_reply`]: accepts a Short RDMA_MSG Reply whose read list, write
/// list and reply chunk are all absent, with exactly the checks [`judge_reply_full`] makes on
/// such a message: at least 28 bytes, version 1, RDMA_MSG and three zero list discriminators
/// (the fixed words, RFC 8166 §4.5; the empty read list of §4.3.1 and the absent Reply chunk
/// of G-7 follow), an RPC message after the header whose XID is `rdma_xid` (§4.2.1, G-9),
/// and an RPC Reply header that decodes (§4.5, §6.1).
///
/// `Some` holds what [`judge_reply_full`] would accept, field for field; `None` decides
/// nothing, and the caller goes on with [`judge_reply_full`].
#[inline]
pub fn accept_short_reply(buf: &[u8]) -> Option<AcceptedReply<'_>> {
    let short = short_reply(buf)?;
    // The fixed words were checked by `short_reply`.
    let header = HeaderView::parse_bare_msg(buf)?;
    Some(AcceptedReply {
        header,
        reply: Some((short.reply, short.reply_len)),
    })
}

/// The full requester-side verdict (RFC 8166 §4.5) for any message: the reference
/// [`judge_reply`] falls back on.
pub fn judge_reply_full(buf: &[u8]) -> Result<AcceptedReply<'_>, Verdict> {
    use Action::*;
    if buf.len() < FIXED_PREFIX_LEN {
        return Err(TOO_SHORT);
    }
    let vers = word(buf, 4);
    let proc_raw = word(buf, 12);
    if proc_raw == Proc::Error.to_u32() {
        // RDMA_ERROR's layout is fixed for all versions; ERR_CHUNK is 20 bytes (CHECKLIST G-1)
        // and ERR_VERS echoes the Call's version, which the requester ignores (G-2).
        return match HeaderView::parse(buf) {
            Ok(header) => Ok(AcceptedReply {
                header,
                reply: None,
            }),
            Err(_) => Err(Verdict::new(
                Discard,
                "an RDMA_ERROR that cannot be decoded (unknown rdma_err, or too short for its \
                 body) MUST be silently discarded (RFC 8166 §4.5; CHECKLIST G-1)",
            )),
        };
    }
    if buf.len() < MIN_HEADER_LEN {
        return Err(TOO_SHORT);
    }
    if vers != RPCRDMA_VERSION {
        return Err(Verdict::new(
            Discard,
            "a Reply with an unsupported rdma_vers is a header error: a requester MUST silently \
             discard it (RFC 8166 §4.5)",
        ));
    }
    let header = match HeaderView::parse(buf) {
        Ok(h) => h,
        Err(HeaderError::UnknownProc { .. }) => {
            return Err(Verdict::new(
                Discard,
                "invalid rdma_proc in a Reply: a requester MUST silently discard it (RFC 8166 \
                 §4.5, §4.5.2)",
            ))
        }
        Err(_) => {
            return Err(Verdict::new(
                Discard,
                "the Reply's chunk lists do not decode: a requester MUST silently discard it \
                 (RFC 8166 §4.5)",
            ))
        }
    };
    match header.proc() {
        Proc::Done => return Err(DONE),
        Proc::Msgp => {
            return Err(Verdict::new(
                Discard,
                "RDMA_MSGP is no longer supported: requesters MUST silently discard it (RFC \
                 8166 §4.6.1)",
            ))
        }
        Proc::Error => unreachable!("handled above"),
        Proc::Msg | Proc::NoMsg => {}
    }
    if let Some(v) = check_segments(&header, Discard) {
        return Err(v);
    }
    if !header.read_list().is_empty() {
        return Err(Verdict::new(
            Discard,
            "responders MUST leave the Read list empty in all replies: discard (RFC 8166 \
             §4.3.1, §4.5)",
        ));
    }
    if header.proc() == Proc::NoMsg {
        if header.reply_chunk().is_none() {
            return Err(Verdict::new(
                Discard,
                "an RDMA_NOMSG Reply must carry its Payload stream in the Reply chunk, and this \
                 one has none: discard (RFC 8166 §3.5.3, §4.2.4, §4.5)",
            ));
        }
        return Ok(AcceptedReply {
            header,
            reply: None,
        });
    }
    if header.reply_chunk().is_some_and(|c| c.total_len() > 0) {
        return Err(Verdict::new(
            Discard,
            "RDMA_MSG Reply whose Reply chunk holds data is ambiguous (the Payload stream would \
             be in two places): discard (RFC 8166 §3.5.3; CHECKLIST G-7, G-16)",
        ));
    }
    if !xid_matches(&header) {
        return Err(Verdict::new(
            Discard,
            "rdma_xid differs from the XID of the RPC message (or there is none): a requester \
             MUST silently discard the Reply (RFC 8166 §4.2.1, §4.5; CHECKLIST G-9)",
        ));
    }
    match RpcMessage::parse(header.payload()) {
        Ok((RpcMessage::Reply(r), len)) => Ok(AcceptedReply {
            reply: Some((r, len)),
            header,
        }),
        Ok((RpcMessage::Call(_), _)) => Err(Verdict::new(
            Discard,
            "the RPC message is a Call, not a Reply; without the backward-direction \
             conventions of RFC 8167 a requester serves no Calls: discard (RFC 8166 §4, \
             CHECKLIST A.13)",
        )),
        Err(_) => Err(Verdict::new(
            Discard,
            "the RPC Reply header in the Payload stream does not decode: a requester can only \
             discard it (RFC 8166 §4.5, §6.1)",
        )),
    }
}

/// Checks every segment of every list for an address range that wraps past 2^64, and every
/// Write and Reply chunk for a total length past 2^32 − 1 (a chunk carries one XDR item, whose
/// length is a 32-bit quantity). Read chunks are checked by [`ReadPlan`].
fn check_segments(h: &HeaderView<'_>, action: Action) -> Option<Verdict> {
    let wraps = h.read_list().iter().any(|s| s.segment.end().is_none())
        || h.write_list()
            .iter()
            .any(|c| c.iter().any(|s| s.end().is_none()))
        || h.reply_chunk()
            .is_some_and(|c| c.iter().any(|s| s.end().is_none()));
    if wraps {
        return Some(Verdict::new(
            action,
            "a segment's offset plus length wraps past 2^64, so it names no memory: the chunk \
             lists are invalid (RFC 8166 §3.4.3, §4.5.2)",
        ));
    }
    let too_long = |c: Segments<'_>| c.total_len() > u32::MAX as u64;
    if h.write_list().iter().any(too_long) || h.reply_chunk().is_some_and(too_long) {
        return Some(Verdict::new(
            action,
            "a Write or Reply chunk's segment lengths sum past 2^32 − 1 bytes, more than any \
             XDR item can hold: the chunk lists are invalid (RFC 8166 §3.4.6, §4.5.2)",
        ));
    }
    None
}

/// The sentence for a read-list error found in a received Call.
fn chunk_reason(e: &ChunkError) -> &'static str {
    match e {
        ChunkError::MisalignedPosition { .. } => {
            "a Read chunk Position is not a multiple of four, which the chunk lists themselves \
             forbid: reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.4.5, §4.5.2)"
        }
        ChunkError::NonAdjacentPosition { .. } => {
            "read segments sharing a Position are separated by another Position, so the Read \
             chunk is ambiguous: reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.4.5, §4.5.2; \
             CHECKLIST G-8)"
        }
        ChunkError::SegmentWraps { .. } => {
            "a segment's offset plus length wraps past 2^64, so it names no memory: the chunk \
             lists are invalid, reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.4.3, §4.5.2)"
        }
        ChunkError::ChunkTooLong { .. } | ChunkError::StreamTooLong { .. } => {
            "the Read chunk lengths sum past 2^32 − 1 bytes, more than one XDR item or a 32-bit \
             Position can describe: reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.4.4, §4.5.2)"
        }
        ChunkError::TooManyChunks { .. } => {
            "the read list has more distinct Positions than this responder accepts: reply \
             RDMA_ERROR ERR_CHUNK (RFC 8166 §4.5.2, §8.1.4)"
        }
        ChunkError::PositionZeroWithInline { .. } => {
            "a Position-Zero Read chunk together with an inline Payload stream is ambiguous: \
             reply RDMA_ERROR ERR_CHUNK (RFC 8166 §3.4.5, §4.5.2; CHECKLIST G-7)"
        }
        ChunkError::PositionOutOfRange { .. } => {
            "a Read chunk Position lies beyond the Payload stream the inline bytes can reach, a \
             mismatch between chunk offsets and the payload: reply GARBAGE_ARGS (RFC 8166 \
             §3.4.5, §4.5.2; CHECKLIST G-8)"
        }
        ChunkError::Overlap { .. } => {
            "a Read chunk starts inside the preceding chunk (its XDR pad included), a mismatch \
             between chunk sizes and the payload: reply GARBAGE_ARGS (RFC 8166 §3.4.5.2, \
             §4.5.2)"
        }
        ChunkError::WriteChunkTooSmall { .. }
        | ChunkError::ReplyChunkTooSmall { .. }
        | ChunkError::EchoBufferTooSmall { .. } => {
            "the provided chunks cannot hold the reply, so no RPC-level reply is possible: \
             RDMA_ERROR ERR_CHUNK (RFC 8166 §4.5.3)"
        }
    }
}

/// Whether the inline Payload stream begins with an RPC XID equal to `rdma_xid` (RFC 8166
/// §4.2.1; CHECKLIST G-9). An RPC message shorter than its XID never matches.
#[inline]
fn xid_matches(header: &HeaderView<'_>) -> bool {
    let payload = header.payload();
    payload.len() >= 4 && word(payload, 0) == header.xid()
}

#[inline]
fn word(b: &[u8], at: usize) -> u32 {
    let mut r = XdrReader::at(b, at);
    r.u32().unwrap_or(0)
}
