//! The backward direction of version 1 (RFC 8167): a server calling its client on the
//! client's own connection, as NFSv4.1 callbacks do.
//!
//! Version 1 has no header flag for the direction: the receiver tells a backward message
//! from a forward one by the `msg_type` of the RPC message after the transport header
//! (RFC 8167 §3.2, §5). A requester that serves backward Calls takes an RPC CALL for one;
//! a responder that made backward Calls takes an RPC REPLY (or an RDMA_ERROR naming one of
//! its XIDs) for the answer to one.
//!
//! Backward messages are inline: RDMA_MSG with all three chunk lists empty (RFC 8167 §5.1,
//! §5.2). The Linux client and server recognise them by exactly that form with the RPC XID
//! equal to `rdma_xid`, and so does this module. No upper-layer binding in use makes an
//! item of a backward message DDP-eligible (RFC 8167 §7; NFSv4.1's backchannel has none,
//! RFC 8267), so a backward Call that brings chunks is one the client cannot process: it is
//! answered RDMA_ERROR / ERR_CHUNK, as RFC 8166 §4.5.2 has a responder answer chunks it
//! cannot handle.
//!
//! These tests run only on messages the forward verdicts refused ([`judge_reply_full`] at a
//! requester, [`judge_call_full`] at a responder): a forward message never reaches them, and
//! a node without a backward direction never calls them.

use super::*;
use crate::rpc::{CALL, REPLY};

/// A backward-direction message received by a requester that serves them
/// ([`backward_call`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackwardCall<'a> {
    /// A backward Call to serve: RDMA_MSG without chunks, RPC XID equal to `rdma_xid`
    /// (its `credit` is the backward credits the server asks for, RFC 8167 §4.1).
    Call(ShortCall<'a>),
    /// A backward Call not served: the verdict says what answers it (ERR_CHUNK for chunks,
    /// GARBAGE_ARGS for an RPC Call header that does not decode), about `xid`.
    Refused {
        /// `rdma_xid` of the Call.
        xid: u32,
        /// What answers it.
        verdict: Verdict,
    },
}

/// An answer to one of a responder's backward Calls ([`backward_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackwardReply<'a> {
    /// RDMA_MSG without chunks carrying an RPC Reply (its `credit` is the backward credits
    /// the client grants, RFC 8167 §4.1).
    Reply(ShortReply<'a>),
    /// RDMA_ERROR about the Call `xid` (RFC 8166 §4.5).
    Error {
        /// `rdma_xid`: the backward Call's XID.
        xid: u32,
        /// The error.
        err: RdmaError,
    },
    /// An RPC REPLY this module cannot take (chunks, or a Reply header that does not
    /// decode): dropped, with the rule.
    Discard(Verdict),
}

/// Whether the version 1 message `buf`, received by a requester that serves backward
/// Calls, is a backward Call (RFC 8167 §5): `None` when it is not (judge it as a forward
/// Reply). A message whose Read list is not empty is one (a Reply never has one, RFC 8166
/// §4.3.1): it needs chunks, so it is refused with ERR_CHUNK, as is an RDMA_MSG whose RPC
/// message is a CALL beside any list.
pub fn backward_call(buf: &[u8]) -> Option<BackwardCall<'_>> {
    if buf.len() < MIN_HEADER_LEN || word(buf, 4) != RPCRDMA_VERSION {
        return None;
    }
    let xid = word(buf, 0);
    let header = HeaderView::parse(buf).ok()?;
    let chunk = || BackwardCall::Refused {
        xid,
        verdict: Verdict::new(
            Action::ErrChunk,
            "a backward-direction Call with chunks: no upper-layer binding in use makes a \
             backward item DDP-eligible (RFC 8167 §7), so the client cannot process them and \
             answers ERR_CHUNK (RFC 8166 §4.5.2)",
        ),
    };
    match header.proc() {
        Proc::Msg => {}
        Proc::NoMsg if !header.read_list().is_empty() => return Some(chunk()),
        _ => return None,
    }
    let (payload, bare) = rpc_payload(&header, xid, CALL)?;
    if !bare {
        return Some(chunk());
    }
    Some(
        match ShortCall::from_payload(xid, header.credit(), payload) {
            Some(call) => BackwardCall::Call(call),
            None => BackwardCall::Refused {
                xid,
                verdict: Verdict::new(
                    Action::GarbageArgs,
                    "a backward-direction Call whose RPC Call header does not decode: reply \
                 GARBAGE_ARGS (RFC 8166 §4.5.2, applied to the backward responder)",
                ),
            },
        },
    )
}

/// Whether the version 1 message `buf`, received by a responder with backward Calls
/// outstanding, answers one (RFC 8167 §5.2): `None` when it is not an answer (judge it as a
/// forward Call). An RDMA_ERROR is one (a responder receives no other, RFC 8166 §4.5): the
/// caller matches its XID against its Calls.
pub fn backward_reply(buf: &[u8]) -> Option<BackwardReply<'_>> {
    if buf.len() < FIXED_PREFIX_LEN {
        return None;
    }
    let xid = word(buf, 0);
    if word(buf, 12) == Proc::Error.to_u32() {
        let header = HeaderView::parse(buf).ok()?;
        return header.error().map(|err| BackwardReply::Error { xid, err });
    }
    if buf.len() < MIN_HEADER_LEN || word(buf, 4) != RPCRDMA_VERSION {
        return None;
    }
    let header = HeaderView::parse(buf).ok()?;
    if header.proc() != Proc::Msg {
        return None;
    }
    let (payload, bare) = rpc_payload(&header, xid, REPLY)?;
    if !bare {
        return Some(BackwardReply::Discard(Verdict::new(
            Action::Discard,
            "a backward-direction Reply with chunks: backward messages are inline (RFC 8167 \
             §5.2, §7), and no Call of this end offered any: discard",
        )));
    }
    Some(
        match ShortReply::from_payload(xid, header.credit(), payload) {
            Some(reply) => BackwardReply::Reply(reply),
            None => BackwardReply::Discard(Verdict::new(
                Action::Discard,
                "a backward-direction Reply whose RPC Reply header does not decode: the requester \
             can only discard it (RFC 8166 §4.5, §6.1)",
            )),
        },
    )
}

/// The Payload stream after `header` when it starts an RPC message of `msg_type` whose XID
/// is `xid` (RFC 8167 §5: the direction is the RPC message's), and whether the header has
/// no chunk at all.
fn rpc_payload<'a>(header: &HeaderView<'a>, xid: u32, msg_type: u32) -> Option<(&'a [u8], bool)> {
    let payload = header.payload();
    if payload.len() < 8 || word(payload, 4) != msg_type || word(payload, 0) != xid {
        return None;
    }
    let bare = header.read_list().is_empty()
        && header.write_list().is_empty()
        && header.reply_chunk().is_none();
    Some((payload, bare))
}
