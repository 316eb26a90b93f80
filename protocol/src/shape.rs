//! One classification of each received message, in either version: the shape a receiver
//! acts on, decided once, the cheapest shape tested first.
//!
//! A responder's Call is [`CallShape::Short`] (no chunk: answered from the receive buffer),
//! [`CallShape::Written`] (a Write list and nothing else: results go out by RDMA Write),
//! [`CallShape::Pulled`] (Read chunks to pull before it runs), [`CallShape::Long`] (RDMA_NOMSG:
//! the whole Payload stream in a Position-Zero Read chunk, RFC 8166 §3.5.3),
//! [`CallShape::General`] (accepted, nothing to pull, but a Reply chunk or a list the fast
//! shapes do not take), or [`CallShape::Refused`] with the verdict that replaces running it
//! (RFC 8166 §4.5; \[V2\] §5.3.3).
//!
//! A requester's answer is [`ReplyShape::Short`], [`ReplyShape::Written`] (the Write list
//! echoed), [`ReplyShape::General`] (any other accepted reply: a Reply chunk, an RDMA_ERROR)
//! or [`ReplyShape::Refused`].
//!
//! The shapes agree with the full verdicts ([`judge_call_full`], [`v2::judge_call`],
//! [`judge_reply_full`], [`v2::judge_reply`]): a message is refused exactly when they refuse it,
//! with their verdict, and an accepted one carries what they accept (property tests in
//! `tests/verdict.rs` and `tests/v2.rs`).

use crate::header::Proc;
use crate::v2;
use crate::v2::{Wire, RPCRDMA_VERSION_TWO};
use crate::verdict::{
    judge_call, judge_call_full, judge_reply, judge_reply_full, pulled_call, short_call,
    short_reply, write_call, write_reply, AcceptedCall, AcceptedReply, Action, Role, ShortCall,
    ShortReply, Verdict, WriteCall, WriteReply,
};
use crate::xdr::word_at as word;

/// Why a message is not run or completed: version 1's verdict or version 2's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Version 1's verdict (RFC 8166 §4.5), also a version 1 message on a version 2
    /// connection (ERR_VERS 2..2, \[V2\] §7.3).
    V1(Verdict),
    /// Version 2's verdict (\[V2\] §5.3.3).
    V2(v2::Verdict),
}

/// The shape of a received Call at a responder ([`call_shape`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallShape<'a> {
    /// No chunk at all (RFC 8166 §3.5.1): everything is in the receive buffer.
    Short(ShortCall<'a>),
    /// An RDMA_MSG whose only chunks are Write chunks, each of at least one segment: how an
    /// NFS READ arrives (RFC 8267 §4.2).
    Written(WriteCall<'a>),
    /// An RDMA_MSG with Read chunks to pull before the Call can run (RFC 8166 §3.5.2).
    Pulled(AcceptedCall<'a>),
    /// A Long Call: RDMA_NOMSG, its Payload stream in a Position-Zero Read chunk (§3.5.3).
    Long(AcceptedCall<'a>),
    /// Accepted, nothing to pull, but not Short or Written: a Reply chunk, or a Write list
    /// with an empty chunk.
    General(AcceptedCall<'a>),
    /// Not run: the verdict says what replaces it (an error, GARBAGE_ARGS, a discard).
    Refused(Refusal),
}

/// [`CallShape`] without what it borrows: what a responder keeps of the shape while the Call
/// waits (for a pull, for send room).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallForm {
    /// [`CallShape::Short`].
    Short,
    /// [`CallShape::Written`].
    Written,
    /// [`CallShape::Pulled`].
    Pulled,
    /// [`CallShape::Long`].
    Long,
    /// [`CallShape::General`].
    General,
    /// [`CallShape::Refused`].
    Refused,
}

impl CallShape<'_> {
    /// The shape's form.
    pub fn form(&self) -> CallForm {
        match self {
            CallShape::Short(_) => CallForm::Short,
            CallShape::Written(_) => CallForm::Written,
            CallShape::Pulled(_) => CallForm::Pulled,
            CallShape::Long(_) => CallForm::Long,
            CallShape::General(_) => CallForm::General,
            CallShape::Refused(_) => CallForm::Refused,
        }
    }
}

/// The shape of the Call `buf` received on a connection speaking `wire`: Short tested
/// first (a bare header and an RPC Call header), then the Write list, then (version 1) one
/// Read chunk of one segment ([`pulled_call`]), then the full verdict
/// of the connection's version. A message in another version than the connection's is
/// refused: on a version 2 connection with ERR_VERS 2..2 (\[V2\] §7.3, the client "MUST NOT
/// change the version"); on a version 1 connection by version 1's verdict (ERR_VERS 1..1).
#[inline]
pub fn call_shape(buf: &[u8], wire: Wire) -> CallShape<'_> {
    let short = match wire {
        Wire::V1 => short_call(buf),
        Wire::V2 => v2::short_call(buf),
    };
    if let Some(sc) = short {
        return CallShape::Short(sc);
    }
    call_shape_chunked(buf, wire)
}

/// [`call_shape`] past the Short test.
#[inline(never)]
fn call_shape_chunked(buf: &[u8], wire: Wire) -> CallShape<'_> {
    if wire == Wire::V1 {
        if let Some(wc) = write_call(buf) {
            return CallShape::Written(wc);
        }
        if let Some(call) = pulled_call(buf) {
            return CallShape::Pulled(call);
        }
    }
    // Its Short test failed above: the full walk alone.
    let judged = judge_call_with(buf, wire, judge_call_full);
    match judged {
        Err(r) => CallShape::Refused(r),
        Ok(call) => accepted_call_shape(call),
    }
}

/// The full verdict on the Call `buf` in the connection's version `wire` (RFC 8166 §4.5;
/// \[V2\] §5.3.3): what [`call_shape`] decides its chunked shapes and refusals from, and
/// what a responder's general answer path reads. A message in another version than a
/// version 2 connection's is refused with ERR_VERS 2..2 (\[V2\] §7.3, the client "MUST NOT
/// change the version").
pub fn judge_call_in(buf: &[u8], wire: Wire) -> Result<AcceptedCall<'_>, Refusal> {
    // `judge_call`: a Short Call a fast path did not answer is accepted without the full
    // walk (the same verdict).
    judge_call_with(buf, wire, judge_call)
}

/// [`judge_call_in`] with `v1` as version 1's verdict (the full walk, or the one that
/// tries the Short fast path first: the same result).
#[inline(always)]
fn judge_call_with(
    buf: &[u8],
    wire: Wire,
    v1: fn(&[u8]) -> Result<AcceptedCall<'_>, Verdict>,
) -> Result<AcceptedCall<'_>, Refusal> {
    match wire {
        Wire::V1 => v1(buf).map_err(Refusal::V1),
        Wire::V2 if word(buf, 4) != Some(RPCRDMA_VERSION_TWO) => Err(Refusal::V1(Verdict {
            action: Action::ErrVers {
                low: RPCRDMA_VERSION_TWO,
                high: RPCRDMA_VERSION_TWO,
            },
            reason: "this connection speaks version 2: a Call in another version is refused \
                     with ERR_VERS 2..2 ([V2] §7.3)",
        })),
        Wire::V2 => v2::judge_call(buf, Role::Responder, false).map_err(Refusal::V2),
    }
}

/// The shape of a Call a full verdict accepted.
fn accepted_call_shape(call: AcceptedCall<'_>) -> CallShape<'_> {
    let h = &call.header;
    if call.plan.chunk_count() > 0 {
        return if h.proc() == Proc::NoMsg {
            CallShape::Long(call)
        } else {
            CallShape::Pulled(call)
        };
    }
    let (Some((rpc, call_len)), None) = (call.call, h.reply_chunk()) else {
        return CallShape::General(call);
    };
    let (xid, credit) = (h.xid(), h.credit());
    let args = &h.payload()[call_len..];
    let writes = h.write_list();
    if writes.is_empty() {
        return CallShape::Short(ShortCall {
            xid,
            credit,
            call: rpc,
            call_len,
            args,
        });
    }
    if writes.iter().any(|c| c.is_empty()) {
        return CallShape::General(call);
    }
    CallShape::Written(WriteCall {
        xid,
        credit,
        writes,
        header_len: h.header_len(),
        call: rpc,
        call_len,
        args,
    })
}

/// The shape of an answer received by a requester ([`reply_shape`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyShape<'a> {
    /// A bare RDMA_MSG Reply: no chunk (RFC 8166 §3.5.1).
    Short(ShortReply<'a>),
    /// An RDMA_MSG Reply whose only list is the Write list, echoed (§4.3.2).
    Written(WriteReply<'a>),
    /// Any other accepted answer: a Long Reply (Reply chunk), an RDMA_ERROR, a Reply with a
    /// Write list and a Reply chunk.
    General(AcceptedReply<'a>),
    /// Not a Reply to complete: the verdict says what it is (a discard; in version 2 also a
    /// peer's error, properties, a reverse-direction Call).
    Refused(Refusal),
}

/// The shape of the answer `buf` received on a connection speaking `wire`, Short tested
/// first; `reverse` as for [`v2::judge_reply`] (this end serves reverse-direction Calls).
#[inline]
pub fn reply_shape(buf: &[u8], wire: Wire, reverse: bool) -> ReplyShape<'_> {
    let short = match wire {
        Wire::V1 => short_reply(buf),
        Wire::V2 => v2::short_reply(buf),
    };
    if let Some(sr) = short {
        return ReplyShape::Short(sr);
    }
    reply_shape_chunked(buf, wire, reverse)
}

/// [`reply_shape`] past the Short test.
#[inline(never)]
fn reply_shape_chunked(buf: &[u8], wire: Wire, reverse: bool) -> ReplyShape<'_> {
    if wire == Wire::V1 {
        if let Some(wr) = write_reply(buf) {
            return ReplyShape::Written(wr);
        }
    }
    // Its Short test failed above: the full walk alone.
    match judge_reply_with(buf, wire, reverse, judge_reply_full) {
        Err(r) => ReplyShape::Refused(r),
        Ok(reply) => accepted_reply_shape(reply),
    }
}

/// The full verdict on the answer `buf` in the connection's version `wire` (RFC 8166 §4.5;
/// \[V2\] §5.3.3), `reverse` as for [`v2::judge_reply`]: what [`reply_shape`] decides its
/// other shapes and refusals from, and what a requester's general path reads.
pub fn judge_reply_in(buf: &[u8], wire: Wire, reverse: bool) -> Result<AcceptedReply<'_>, Refusal> {
    // `judge_reply`: a Short Reply a fast path did not complete is accepted without the
    // full walk (the same verdict).
    judge_reply_with(buf, wire, reverse, judge_reply)
}

/// [`judge_reply_in`] with `v1` as version 1's verdict (the full walk, or the one that
/// tries the Short fast path first: the same result).
#[inline(always)]
fn judge_reply_with(
    buf: &[u8],
    wire: Wire,
    reverse: bool,
    v1: fn(&[u8]) -> Result<AcceptedReply<'_>, Verdict>,
) -> Result<AcceptedReply<'_>, Refusal> {
    match wire {
        Wire::V1 => v1(buf).map_err(Refusal::V1),
        Wire::V2 => v2::judge_reply(buf, Role::Requester, reverse).map_err(Refusal::V2),
    }
}

/// The shape of an answer a full verdict accepted.
fn accepted_reply_shape(reply: AcceptedReply<'_>) -> ReplyShape<'_> {
    let h = &reply.header;
    let inline = match reply.reply {
        Some(r) if h.error().is_none() && h.reply_chunk().is_none() && h.read_list().is_empty() => {
            r
        }
        _ => return ReplyShape::General(reply),
    };
    let (rpc, reply_len) = inline;
    let (xid, credit) = (h.xid(), h.credit());
    let results = &h.payload()[reply_len..];
    let writes = h.write_list();
    if writes.is_empty() {
        ReplyShape::Short(ShortReply {
            xid,
            credit,
            reply: rpc,
            reply_len,
            results,
        })
    } else {
        ReplyShape::Written(WriteReply {
            xid,
            credit,
            writes,
            reply: rpc,
            reply_len,
            results,
        })
    }
}
