//! The fast paths for messages whose only chunks are Write chunks: a Call (an RDMA_MSG with
//! an empty Read list, a Write list of non-empty chunks and no Reply chunk), which is how an
//! NFS READ (RFC 8267 §4.2) or any procedure with a DDP-eligible result arrives when its
//! result does not fit inline, and the Reply that answers it (the Write list echoed).

use super::{ShortCall, ShortReply};
use crate::header::{Proc, WriteList, RPCRDMA_VERSION};
use crate::rpc::{CallHeader, ReplyHeader};
use crate::xdr::{be32_at, fixed_at, XdrReader};

/// Where the Write list starts in a version 1 header: after `rdma_xid`, `rdma_vers`,
/// `rdma_credit`, `rdma_proc` and the empty Read list's zero.
const WRITE_LIST_AT: usize = 20;

/// A Call accepted by [`write_call`]: what a responder needs to answer it, borrowed from
/// the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteCall<'a> {
    /// `rdma_xid`, equal to the RPC XID.
    pub xid: u32,
    /// `rdma_credit`: the credits the requester asks for (RFC 8166 §3.3).
    pub credit: u32,
    /// The Write list: at least one chunk, each of at least one segment.
    pub writes: WriteList<'a>,
    /// The transport header's length: where the Payload stream starts.
    pub header_len: usize,
    /// The RPC Call header.
    pub call: CallHeader<'a>,
    /// The length of the encoded RPC Call header.
    pub call_len: usize,
    /// The procedure's arguments: the rest of the Payload stream.
    pub args: &'a [u8],
}

/// Accepts a version 1 RDMA_MSG Call with an empty Read list, a Write list whose every
/// chunk has at least one segment, and no Reply chunk, with the checks
/// [`judge_call_full`](super::judge_call_full) makes on such a message: its chunk lists
/// decode (RFC 8166 §4.5.2), no segment wraps past 2^64 and no chunk passes 2^32 − 1
/// bytes (§3.4.3, §3.4.6), an RPC message follows whose XID is `rdma_xid` (§4.2.1,
/// CHECKLIST G-9), and its Call header decodes.
///
/// `Some` exactly when `judge_call_full` accepts the message and it has that shape, with
/// the same XID, credit, Write list and call (property tests in `tests/verdict.rs`);
/// `None` decides nothing: judge the message with [`judge_call`](super::judge_call).
#[inline]
pub fn write_call(buf: &[u8]) -> Option<WriteCall<'_>> {
    let (xid, credit, writes, header_len) = write_list_message(buf)?;
    if writes.iter().any(|c| c.is_empty()) {
        return None;
    }
    // The Payload stream as a Short Call's, its RPC XID `rdma_xid`.
    let sc = ShortCall::from_payload(xid, credit, &buf[header_len..])?;
    (sc.call.xid == xid).then_some(WriteCall {
        xid,
        credit,
        writes,
        header_len,
        call: sc.call,
        call_len: sc.call_len,
        args: sc.args,
    })
}

/// A Reply accepted by [`write_reply`]: what a requester needs to complete its RPC,
/// borrowed from the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteReply<'a> {
    /// `rdma_xid`, equal to the RPC XID.
    pub xid: u32,
    /// `rdma_credit`: the responder's grant (RFC 8166 §3.3).
    pub credit: u32,
    /// The Write list as returned: at least one chunk (the requester checks it against what
    /// its Call provided, CHECKLIST G-4, G-17).
    pub writes: WriteList<'a>,
    /// The RPC Reply header.
    pub reply: ReplyHeader<'a>,
    /// The length of the encoded RPC Reply header.
    pub reply_len: usize,
    /// The results: the rest of the Payload stream.
    pub results: &'a [u8],
}

/// Accepts a version 1 RDMA_MSG Reply with an empty Read list, a Write list and no Reply
/// chunk, with the checks [`judge_reply_full`](super::judge_reply_full) makes on such a
/// message: its chunk lists decode, no segment wraps past 2^64 and no chunk passes
/// 2^32 − 1 bytes (RFC 8166 §4.5), an RPC message follows whose XID is `rdma_xid` (§4.2.1,
/// CHECKLIST G-9), and its Reply header decodes.
///
/// `Some` exactly when `judge_reply_full` accepts the message and it has that shape, with
/// the same XID, credit, Write list and reply (property tests in `tests/verdict.rs`);
/// `None` decides nothing: judge the message with [`judge_reply`](super::judge_reply).
#[inline]
pub fn write_reply(buf: &[u8]) -> Option<WriteReply<'_>> {
    let (xid, credit, writes, header_len) = write_list_message(buf)?;
    // The Payload stream as a Short Reply's, its RPC XID `rdma_xid`.
    let sr = ShortReply::from_payload(xid, credit, &buf[header_len..])?;
    (sr.reply.xid == xid).then_some(WriteReply {
        xid,
        credit,
        writes,
        reply: sr.reply,
        reply_len: sr.reply_len,
        results: sr.results,
    })
}

/// [`write_list_message`]'s result for the commonest such header, an NFS READ's (RFC 8267
/// §4.2): a Write list of one chunk of one segment that does not wrap past 2^64, then no
/// Reply chunk, read from its fixed words (the prefix is checked by the caller). `None`
/// for any other header, which the general walk then decides.
#[inline(always)]
fn one_segment_list(buf: &[u8]) -> Option<(u32, u32, WriteList<'_>, usize)> {
    const LEN: usize = WRITE_LIST_AT + 32;
    let w: &[u8; LEN] = fixed_at(buf, 0)?;
    let word = |i: usize| be32_at(w, 4 * i);
    const AT: usize = WRITE_LIST_AT / 4;
    // `1 1 H L O O`, the list's terminator, no Reply chunk.
    if word(AT + 1) != 1 || word(AT + 6) != 0 || word(AT + 7) != 0 {
        return None;
    }
    let offset = u64::from(word(AT + 4)) << 32 | u64::from(word(AT + 5));
    offset.checked_add(u64::from(word(AT + 3)))?;
    let writes = WriteList::of_one_segment(&w[WRITE_LIST_AT..WRITE_LIST_AT + 24]);
    Some((word(0), word(2), writes, LEN))
}

/// The transport header both fast paths read: version 1, RDMA_MSG, an empty Read list, a
/// Write list that decodes with no segment wrapping past 2^64 and no chunk past 2^32 − 1
/// bytes, no Reply chunk: `(xid, credit, writes, header_len)`.
#[inline(always)]
fn write_list_message(buf: &[u8]) -> Option<(u32, u32, WriteList<'_>, usize)> {
    let w: &[u8; WRITE_LIST_AT + 4] = buf.get(..WRITE_LIST_AT + 4)?.try_into().ok()?;
    let fixed = |i: usize| u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
    if fixed(1) != RPCRDMA_VERSION
        || fixed(3) != Proc::Msg.to_u32()
        || fixed(4) != 0
        || fixed(5) != 1
    {
        return None;
    }
    if let Some(one) = one_segment_list(buf) {
        return Some(one);
    }
    let mut r = XdrReader::at(buf, WRITE_LIST_AT);
    let writes = WriteList::parse(&mut r).ok()?;
    // The Reply chunk: absent.
    if r.u32().ok()? != 0 {
        return None;
    }
    // One pass over each chunk: no segment wraps, and the lengths sum within 2^32 - 1.
    let fits = |c: crate::header::Segments<'_>| {
        let mut total = 0u64;
        for s in c.iter() {
            if s.end().is_none() {
                return false;
            }
            total += u64::from(s.length);
        }
        total <= u64::from(u32::MAX)
    };
    if !writes.iter().all(fits) {
        return None;
    }
    Some((fixed(0), fixed(2), writes, r.position()))
}
