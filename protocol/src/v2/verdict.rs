//! The version 2 receive-path decision, from the bytes alone, for either end of a
//! connection (\[V2\] §3.2, §5.2, §5.3, §7; RFC 8166 §4.5 for what version 2 keeps).
//!
//! In version 2 both ends may be requester and responder (reverse-direction RPC), so the
//! decision starts from RPCRDMA2_F_RESPONSE: set, the message answers one of the receiver's
//! (a Reply, or an error about its Call); clear, it is a Call to the receiver (or its
//! transport properties). A receiver answers with RDMA2_ERROR only a message that was not
//! itself a response ("MUST NOT be transmitted by a requester", \[V2\] §5.3.3), and never an
//! RDMA2_ERROR.

use super::{HeaderError, HeaderView, Htype, RdmaError, MIN_MSG_LEN, RPCRDMA_VERSION_TWO};
use crate::chunks::{ChunkErrorClass, ReadLimits, ReadPlan};
use crate::header::{Segments, RPCRDMA_VERSION};
use crate::rpc::RpcMessage;
use crate::verdict::{AcceptedCall, AcceptedReply, Role};

/// What the receiver does with a version 2 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A Call to this end: run it (at a responder; at a requester, a reverse-direction Call
    /// when it takes them).
    Call,
    /// A Reply to one of this end's Calls: complete that RPC.
    Reply,
    /// The peer's transport properties (RDMA2_CONNPROP): note them.
    Properties,
    /// The peer reports an error about this end's message `rdma_xid`: complete that RPC
    /// with it (or, for RDMA2_ERR_VERS, fall back; see [`Action::FallBack`]).
    PeerError(RdmaError),
    /// The peer speaks only versions `low..=high`, without 2 (\[V2\] §7.2): continue the
    /// connection in version 1 and remember the server.
    FallBack {
        /// Lowest version the peer supports.
        low: u32,
        /// Highest.
        high: u32,
    },
    /// Answer the message with RDMA2_ERROR carrying this error.
    Error(RdmaError),
    /// Answer the Call with an RPC GARBAGE_ARGS reply: its header is valid but does not
    /// match its Payload stream (RFC 8166 §4.5.2, kept by version 2).
    GarbageArgs,
    /// Drop the message without an answer.
    Discard,
}

impl Action {
    /// The snake_case name `rpcrdma decode` prints.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Call => "call",
            Action::Reply => "reply",
            Action::Properties => "properties",
            Action::PeerError(_) => "peer_error",
            Action::FallBack { .. } => "fall_back",
            Action::Error(_) => "rdma2_error",
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
    /// One sentence naming the rule and its section.
    pub reason: &'static str,
}

const fn v(action: Action, reason: &'static str) -> Verdict {
    Verdict { action, reason }
}

/// The versions a version 2 responder supports (it accepts either per connection).
pub const SUPPORTED: (u32, u32) = (RPCRDMA_VERSION, RPCRDMA_VERSION_TWO);

const LIMITS: ReadLimits = ReadLimits {
    max_chunks: ReadLimits::DEFAULT_MAX_CHUNKS,
    max_stream_len: u32::MAX,
};

/// Judges `buf` at the `role` end of a version 2 connection; `reverse` says whether this
/// end takes part in reverse-direction RPC (a server that calls its client, a client that
/// serves its server's Calls).
pub fn judge(buf: &[u8], role: Role, reverse: bool) -> Verdict {
    match judge2_full(buf, role, reverse) {
        Ok((_, reason)) => v(Action::Call, reason),
        Err(verdict) => verdict,
    }
}

/// [`judge`] with the accepted Call itself when the verdict is [`Action::Call`] (and the
/// reason of that verdict): one pass over the message for [`judge`] and [`judge_call`].
fn judge2_full(
    buf: &[u8],
    role: Role,
    reverse: bool,
) -> Result<(AcceptedCall<'_>, &'static str), Verdict> {
    use Action::*;
    // The flags word decides who may be answered with an error: a response never is.
    let response = buf
        .get(16..20)
        .is_some_and(|w| w[3] & super::flags::RESPONSE as u8 != 0);
    let answer = |e: RdmaError, why| {
        if response {
            v(
                Discard,
                "a malformed response is dropped: RDMA2_ERROR never answers a response \
                 ([V2] §5.3.3)",
            )
        } else {
            v(Error(e), why)
        }
    };
    if buf.len() < 16 {
        return Err(v(
            Discard,
            "shorter than the four words every version shares: nothing to answer ([V2] §3.1)",
        ));
    }
    let h = match HeaderView::parse(buf) {
        Ok(h) => h,
        Err(HeaderError::NotVersion2 { .. }) => {
            return Err(answer(
                RdmaError::Vers {
                    low: SUPPORTED.0,
                    high: SUPPORTED.1,
                },
                "unsupported rdma_vers: RDMA2_ERR_VERS with the supported range 1..2 ([V2] \
                 §5.3.3, §7)",
            ))
        }
        Err(HeaderError::UnknownHtype { .. }) => {
            return Err(answer(
                RdmaError::InvalHtype,
                "unknown rdma_htype: RDMA2_ERR_INVAL_HTYPE ([V2] §5.2, §5.3.3)",
            ))
        }
        Err(HeaderError::ReservedFlags { .. }) => {
            return Err(answer(
                RdmaError::BadXdr,
                "reserved rdma_flags bits set, which senders MUST clear: RDMA2_ERR_BAD_XDR \
                 ([V2] §3.2, §9.4)",
            ))
        }
        Err(HeaderError::Props(_)) => {
            return Err(answer(
                RdmaError::BadXdr,
                "a known transport property's value does not fit its type: RDMA2_ERR_BAD_XDR \
                 ([V2] §4.1)",
            ))
        }
        Err(HeaderError::InvHandle { .. }) => {
            return Err(answer(
                RdmaError::BadXdr,
                "rdma_inv_handle names none of the header's handles: RDMA2_ERR_BAD_XDR ([V2] \
                 §3.3; CHECKLIST G-13 e)",
            ))
        }
        Err(HeaderError::Truncated(_) | HeaderError::Malformed(_)) => {
            return Err(answer(
                RdmaError::BadXdr,
                "the header does not decode (it runs past the message, or a discriminator or \
                 count is wrong): RDMA2_ERR_BAD_XDR ([V2] §5.3.3)",
            ))
        }
    };
    match h.htype() {
        Htype::ConnProp => Err(v(
            Properties,
            "RDMA2_CONNPROP: the peer's transport properties, unknown ones skipped ([V2] §4.1, \
             §5.3.4)",
        )),
        Htype::Error => Err(judge_error(&h)),
        Htype::Msg | Htype::NoMsg if h.is_response() => Err(judge_reply_parsed(&h, role, reverse)),
        Htype::Msg | Htype::NoMsg => judge_call_parsed(&h, role, reverse),
    }
}

fn judge_error(h: &HeaderView<'_>) -> Verdict {
    use Action::*;
    let Some(err) = h.error() else {
        return v(Discard, "never: an RDMA2_ERROR has an error");
    };
    if !h.is_response() && !h.is_v1_err_vers() {
        return v(
            Discard,
            "an RDMA2_ERROR without RPCRDMA2_F_RESPONSE names no XID of the receiver's; errors \
             are never answered ([V2] §3.2, §5.3.3)",
        );
    }
    match err {
        RdmaError::Vers { low, high } if !(low..=high).contains(&RPCRDMA_VERSION_TWO) => v(
            FallBack { low, high },
            "the peer does not speak version 2: continue in a version it supports and \
             remember it ([V2] §7.2)",
        ),
        e => v(
            PeerError(e),
            "the peer reports an error about this end's message: complete it with the error \
             ([V2] §5.3.3)",
        ),
    }
}

/// Segments that name no memory: the lists are unusable.
fn bad_segments(h: &HeaderView<'_>) -> bool {
    let too_long = |c: Segments<'_>| c.total_len() > u64::from(u32::MAX);
    h.read_list().iter().any(|s| s.segment.end().is_none())
        || h.write_list()
            .iter()
            .any(|c| c.iter().any(|s| s.end().is_none()) || too_long(c))
        || h.reply_chunk()
            .is_some_and(|c| c.iter().any(|s| s.end().is_none()) || too_long(c))
}

fn judge_call_parsed<'a>(
    h: &HeaderView<'a>,
    role: Role,
    reverse: bool,
) -> Result<(AcceptedCall<'a>, &'static str), Verdict> {
    use Action::*;
    if role == Role::Requester && !reverse {
        return Err(v(
            Discard,
            "a Call to a requester that takes no reverse-direction Calls (Reverse Request \
             Support NONE) is dropped ([V2] §4.2.2)",
        ));
    }
    if bad_segments(h) {
        return Err(v(
            Error(RdmaError::BadXdr),
            "a segment wraps past 2^64 or a chunk's lengths sum past 2^32 − 1: the chunk lists \
             are invalid, RDMA2_ERR_BAD_XDR (RFC 8166 §3.4.3, §4.5.2)",
        ));
    }
    let never = v(
        Discard,
        "never: an RDMA2_MSG or RDMA2_NOMSG has chunk lists",
    );
    let header = h.chunk_view().ok_or(never)?;
    let inline = h.payload();
    let plan = match ReadPlan::new(inline.len(), h.read_list(), LIMITS) {
        Ok(p) => p,
        Err(e) if e.class() == ChunkErrorClass::ErrChunk => {
            return Err(v(
                Error(RdmaError::BadXdr),
                "the read list is invalid in itself: RDMA2_ERR_BAD_XDR (RFC 8166 §3.4.5, \
                 §4.5.2)",
            ))
        }
        Err(_) => {
            return Err(v(
                GarbageArgs,
                "the read list does not fit the Payload stream: GARBAGE_ARGS (RFC 8166 §4.5.2)",
            ))
        }
    };
    if h.htype() == Htype::NoMsg {
        if !plan.is_long_call() {
            return Err(v(
                Error(RdmaError::BadXdr),
                "RDMA2_NOMSG Call without a Position-Zero Read chunk carries no Call: \
                 RDMA2_ERR_BAD_XDR ([V2] §5.3.2)",
            ));
        }
        let call = AcceptedCall {
            header,
            plan,
            call: None,
        };
        return Ok((
            call,
            "a Long Call: its RPC message is pulled from the Position-Zero Read chunk ([V2] \
             §5.3.2)",
        ));
    }
    if plan.is_long_call() {
        return Err(v(
            Error(RdmaError::BadXdr),
            "RDMA2_MSG with a Position-Zero Read chunk: the Call cannot be both inline and in \
             a chunk, RDMA2_ERR_BAD_XDR ([V2] §5.3.1)",
        ));
    }
    // The RPC Call header is inline, ahead of any Read chunk's data.
    let (c, len) =
        match RpcMessage::parse(inline) {
            Ok((RpcMessage::Call(c), len)) if c.xid == h.xid() => (c, len),
            Ok((RpcMessage::Call(_), _)) => {
                return Err(v(
                    Error(RdmaError::BadXdr),
                    "the RPC XID differs from rdma_xid: RDMA2_ERR_BAD_XDR (RFC 8166 §4.2.1; \
                 CHECKLIST G-9)",
                ))
            }
            Ok((RpcMessage::Reply(_), _)) => return Err(v(
                Discard,
                "an RPC Reply without RPCRDMA2_F_RESPONSE: its direction contradicts the flag, \
                 dropped ([V2] §3.2)",
            )),
            Err(_) => {
                return Err(v(
                    GarbageArgs,
                    "the inline RPC Call header does not decode: GARBAGE_ARGS (RFC 8166 §4.5.2)",
                ))
            }
        };
    if h.read_list().iter().any(|s| (s.position as usize) < len) {
        return Err(v(
            GarbageArgs,
            "a Read chunk lies inside the RPC Call header, which is never DDP-eligible: \
             GARBAGE_ARGS (RFC 8166 §3.4.2, §6.1, §4.5.2)",
        ));
    }
    let reason = if plan.chunk_count() > 0 {
        "a Call with Read chunks: the arguments are pulled before it runs (RFC 8166 §3.4.5)"
    } else {
        "a Short Call: run it ([V2] §5.3.1)"
    };
    let call = AcceptedCall {
        header,
        plan,
        call: Some((c, len)),
    };
    Ok((call, reason))
}

fn judge_reply_parsed(h: &HeaderView<'_>, role: Role, reverse: bool) -> Verdict {
    use Action::*;
    if role == Role::Responder && !reverse {
        return v(
            Discard,
            "a Reply at a responder that sends no reverse-direction Calls answers nothing: \
             dropped ([V2] §3.2)",
        );
    }
    if !h.read_list().is_empty() || bad_segments(h) {
        return v(
            Discard,
            "a Reply with a read list, or with segments that name no memory, is unusable; \
             responses are never answered with errors ([V2] §5.3.3)",
        );
    }
    if h.htype() == Htype::NoMsg {
        return match h.reply_chunk() {
            Some(_) => v(
                Reply,
                "a Long Reply: its RPC message is in the Reply chunk ([V2] §5.3.2)",
            ),
            None => v(
                Discard,
                "RDMA2_NOMSG Reply without a Reply chunk carries no Reply: dropped ([V2] §5.3.2)",
            ),
        };
    }
    match RpcMessage::parse(h.payload()) {
        Ok((RpcMessage::Reply(r), _)) if r.xid == h.xid() => {
            v(Reply, "a Short Reply: complete its RPC ([V2] §5.3.1)")
        }
        _ => v(
            Discard,
            "the inline message is not an RPC Reply with rdma_xid: dropped (RFC 8166 §4.2.1, \
             §4.5)",
        ),
    }
}

/// [`judge`] for a message that should be a Call, with what the receiver needs to run it:
/// the same [`AcceptedCall`] as version 1's `judge_call` (its header the version 2 lists as
/// a [`crate::header::HeaderView`] with `vers` 2, from which `inv_handle` is read), so that
/// pulling chunks, running the procedure and placing results are one code for both
/// versions. `Err` holds every other verdict (an error to answer, properties, a reply, a
/// discard).
pub fn judge_call(buf: &[u8], role: Role, reverse: bool) -> Result<AcceptedCall<'_>, Verdict> {
    judge2_full(buf, role, reverse).map(|(call, _)| call)
}

/// [`judge`] for a message that should be a Reply to one of the receiver's Calls, as
/// version 1's `judge_reply` gives it ([`AcceptedReply`], the header a version 2 view).
/// `Err` holds every other verdict: a peer's error, fallback, properties, a Call (reverse
/// direction), a discard.
pub fn judge_reply(buf: &[u8], role: Role, reverse: bool) -> Result<AcceptedReply<'_>, Verdict> {
    use Action::*;
    let verdict = judge(buf, role, reverse);
    if verdict.action != Reply {
        return Err(verdict);
    }
    let never = v(Discard, "never: a Reply judged valid decodes");
    let header = HeaderView::parse(buf)
        .ok()
        .and_then(|h| h.chunk_view())
        .ok_or(never)?;
    if header.proc() == crate::header::Proc::NoMsg {
        return Ok(AcceptedReply {
            header,
            reply: None,
        });
    }
    if header.reply_chunk().is_some_and(|c| c.total_len() > 0) {
        return Err(v(
            Discard,
            "RDMA2_MSG Reply whose Reply chunk holds data is ambiguous: dropped (RFC 8166 \
             §3.5.3; CHECKLIST G-7, G-16)",
        ));
    }
    match RpcMessage::parse(header.payload()) {
        Ok((RpcMessage::Reply(r), len)) if r.xid == header.xid() => Ok(AcceptedReply {
            reply: Some((r, len)),
            header,
        }),
        _ => Err(never),
    }
}

/// The fixed words of a bare version 2 RDMA2_MSG (\[V2\] §3.2, §3.3, §5.3.1): version 2,
/// RDMA2_MSG, `rdma_flags` exactly `flags`, `rdma_inv_handle` 0 and the three lists absent,
/// followed by an RPC XID equal to `rdma_xid` (CHECKLIST G-9): `(xid, credit, payload)`.
#[inline(always)]
fn bare_msg2(buf: &[u8], flags: u32) -> Option<(u32, u32, &[u8])> {
    let w: &[u8; MIN_MSG_LEN + 4] = buf.get(..MIN_MSG_LEN + 4)?.try_into().ok()?;
    let word = |i: usize| u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
    if word(1) != RPCRDMA_VERSION_TWO
        || word(3) != Htype::Msg.to_u32()
        || word(4) != flags
        || (word(5) | word(6) | word(7) | word(8)) != 0
        || word(9) != word(0)
    {
        return None;
    }
    Some((word(0), word(2), &buf[MIN_MSG_LEN..]))
}

/// The hot-path form of [`judge_call`] for a Short version 2 Call (RDMA2_MSG, flags clear,
/// no `rdma_inv_handle`, no chunk lists, an RPC Call header that decodes with the same
/// XID): what a responder needs to answer it, without building the header view or read
/// plan. `Some` exactly when [`judge_call`] accepts such a message with the same XID,
/// credit and call (property tests in `tests/v2.rs`); `None` decides nothing.
#[inline(always)]
pub fn short_call(buf: &[u8]) -> Option<crate::verdict::ShortCall<'_>> {
    let (xid, credit, payload) = bare_msg2(buf, 0)?;
    crate::verdict::ShortCall::from_payload(xid, credit, payload)
}

/// The hot-path form of [`judge_reply`] for a Short version 2 Reply (RDMA2_MSG with
/// RPCRDMA2_F_RESPONSE, no `rdma_inv_handle`, no chunk lists, an RPC Reply header that
/// decodes with the same XID). `Some` exactly when [`judge_reply`] accepts such a message
/// with the same XID, grant and reply; `None` decides nothing.
#[inline(always)]
pub fn short_reply(buf: &[u8]) -> Option<crate::verdict::ShortReply<'_>> {
    let (xid, credit, payload) = bare_msg2(buf, super::flags::RESPONSE)?;
    crate::verdict::ShortReply::from_payload(xid, credit, payload)
}
