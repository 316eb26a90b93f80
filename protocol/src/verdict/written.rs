//! The responder's fast path for a Call whose only chunks are Write chunks: an RDMA_MSG
//! with an empty Read list, a Write list of non-empty chunks and no Reply chunk. This is
//! how an NFS READ (RFC 8267 §4.2) or any procedure with a DDP-eligible result arrives
//! when its result does not fit inline.

use super::{word, LIMITS};
use crate::header::{Proc, WriteList, RPCRDMA_VERSION};
use crate::rpc::CallHeader;
use crate::xdr::XdrReader;

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
    let w: &[u8; WRITE_LIST_AT + 4] = buf.get(..WRITE_LIST_AT + 4)?.try_into().ok()?;
    let fixed = |i: usize| u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
    if fixed(1) != RPCRDMA_VERSION
        || fixed(3) != Proc::Msg.to_u32()
        || fixed(4) != 0
        || fixed(5) != 1
    {
        return None;
    }
    let mut r = XdrReader::at(buf, WRITE_LIST_AT);
    let writes = WriteList::parse(&mut r).ok()?;
    // The Reply chunk: absent.
    if r.u32().ok()? != 0 {
        return None;
    }
    let header_len = r.position();
    for c in writes.iter() {
        if c.is_empty()
            || c.iter().any(|s| s.end().is_none())
            || c.total_len() > u64::from(u32::MAX)
        {
            return None;
        }
    }
    let payload = &buf[header_len..];
    let xid = fixed(0);
    if payload.len() < 4
        || word(payload, 0) != xid
        || payload.len() as u64 > u64::from(LIMITS.max_stream_len)
    {
        return None;
    }
    // The direct decoder alone, as for a Short Call (it accepts what the reference accepts).
    let (call, call_len) = CallHeader::parse_direct(payload)?;
    Some(WriteCall {
        xid,
        credit: fixed(2),
        writes,
        header_len,
        call,
        call_len,
        args: &payload[call_len..],
    })
}
