//! The Short fast paths' leanest forms: a bare RDMA_MSG (version 1, three empty lists, the
//! RPC XID equal to `rdma_xid`) read from one 32-byte load into a [`ShortCall`] or a
//! [`ShortReply`] — only what the engines' hot paths need, without the header view and
//! read plan of [`accept_short_call`] / [`accept_short_reply`], which they match.

use super::*;

/// A Short RDMA_MSG Call without any chunk, accepted by [`short_call`]: what a responder
/// needs to answer it, borrowed from the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortCall<'a> {
    /// `rdma_xid`, equal to the RPC XID.
    pub xid: u32,
    /// `rdma_credit`: the credits the requester asks for (RFC 8166 §3.3).
    pub credit: u32,
    /// The RPC Call header.
    pub call: CallHeader<'a>,
    /// The length of the encoded RPC Call header: where the arguments start in the Payload
    /// stream.
    pub call_len: usize,
    /// The procedure's arguments: the rest of the Payload stream.
    pub args: &'a [u8],
}

/// A Short RDMA_MSG Reply without any chunk, accepted by [`short_reply`]: what a requester
/// needs to complete the RPC, borrowed from the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortReply<'a> {
    /// `rdma_xid`, equal to the RPC XID.
    pub xid: u32,
    /// `rdma_credit`: the responder's grant (RFC 8166 §3.3).
    pub credit: u32,
    /// The RPC Reply header.
    pub reply: ReplyHeader<'a>,
    /// The length of the encoded RPC Reply header: where the results start in the Payload
    /// stream.
    pub reply_len: usize,
    /// The results (for SUCCESS; whatever follows the header otherwise): the rest of the
    /// Payload stream.
    pub results: &'a [u8],
}

/// The fixed words of a bare RDMA_MSG (RFC 8166 §4.2, §4.7: version 1, RDMA_MSG, three zero
/// list discriminators) followed by an RPC XID equal to `rdma_xid` (§4.2.1, CHECKLIST G-9):
/// `(xid, credit, payload)`, or `None`. The same test as [`HeaderView::parse_bare_msg`]
/// followed by [`xid_matches`], from one 32-byte load.
#[inline(always)]
fn bare_msg(buf: &[u8]) -> Option<(u32, u32, &[u8])> {
    let w: &[u8; MIN_HEADER_LEN + 4] = buf.get(..MIN_HEADER_LEN + 4)?.try_into().ok()?;
    let word = |i: usize| u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
    if word(1) != RPCRDMA_VERSION
        || word(3) != Proc::Msg.to_u32()
        || (word(4) | word(5) | word(6)) != 0
        || word(7) != word(0)
    {
        return None;
    }
    Some((word(0), word(2), &buf[MIN_HEADER_LEN..]))
}

/// The leanest form of [`accept_short_call`], for a responder's hot path: the same checks
/// (fixed words, XID match, a Payload stream a 32-bit Position can describe, an RPC Call
/// header that decodes, RFC 8166 §4.5, §4.2.1, §4.5.2), the same answer, but only the parts
/// a Short Call has, without building the header view and the read plan. `Some` exactly
/// when [`accept_short_call`] is `Some`, with its XID, credit and call (property tests in
/// `tests/verdict.rs`); `None` decides nothing (judge the message with [`judge_call`]).
#[inline(always)]
pub fn short_call(buf: &[u8]) -> Option<ShortCall<'_>> {
    let (xid, credit, payload) = bare_msg(buf)?;
    ShortCall::from_payload(xid, credit, payload)
}

impl<'a> ShortCall<'a> {
    /// The Short Call whose Payload stream (after its transport header, version 1's or
    /// 2's, or reassembled from Read chunks) is `payload`: a stream a 32-bit Position can
    /// describe and an RPC Call header that decodes (RFC 8166 §4.5.2). The RPC XID is not
    /// compared with `xid`: the caller does, where it has not already.
    #[inline(always)]
    pub fn from_payload(xid: u32, credit: u32, payload: &'a [u8]) -> Option<Self> {
        if payload.len() as u64 > u64::from(LIMITS.max_stream_len) {
            return None;
        }
        // The direct decoder alone: it accepts exactly what the reference decoder accepts,
        // and without the fallback's call the header stays in registers (merged with the
        // fallback's result, it went through the stack, in stores too narrow to forward to
        // the wide loads that copy it on).
        let (call, call_len) = CallHeader::parse_direct(payload)?;
        Some(ShortCall {
            xid,
            credit,
            call,
            call_len,
            args: &payload[call_len..],
        })
    }
}

/// The leanest form of [`accept_short_reply`], for a requester's hot path: the same checks
/// (fixed words, XID match, an RPC Reply header that decodes, RFC 8166 §4.5, §4.2.1, §6.1)
/// without building the header view. `Some` exactly when [`accept_short_reply`] is `Some`,
/// with its XID, credit and reply (property tests in `tests/verdict.rs`); `None` decides
/// nothing (judge the message with [`judge_reply`]).
#[inline(always)]
pub fn short_reply(buf: &[u8]) -> Option<ShortReply<'_>> {
    let (xid, credit, payload) = bare_msg(buf)?;
    ShortReply::from_payload(xid, credit, payload)
}

impl<'a> ShortReply<'a> {
    /// The Short Reply whose Payload stream (after its transport header, version 1's or
    /// 2's) is `payload`: an RPC Reply header that decodes.
    #[inline(always)]
    pub(crate) fn from_payload(xid: u32, credit: u32, payload: &'a [u8]) -> Option<Self> {
        // The direct decoder alone, as for a Short Call.
        let (reply, reply_len) = ReplyHeader::parse_direct(payload)?;
        Some(ShortReply {
            xid,
            credit,
            reply,
            reply_len,
            results: &payload[reply_len..],
        })
    }
}
