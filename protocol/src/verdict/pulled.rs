//! The fast path for a Call with one Read chunk of one segment: an RDMA_MSG whose Read list
//! is one entry at a Position past the RPC Call header, with no Write list and no Reply
//! chunk. That is how an NFS WRITE arrives when its data does not fit inline (RFC 8267
//! §4.3), and how any procedure with one DDP-eligible argument does.

use super::{word, AcceptedCall, LIMITS};
use crate::chunks::ReadPlan;
use crate::header::HeaderView;
use crate::rpc::RpcMessage;

/// Accepts a version 1 RDMA_MSG Call whose Read list is one segment, whose Write list and
/// Reply chunk are absent, with the checks [`judge_call_full`](super::judge_call_full)
/// makes on such a message: the segment does not wrap past 2^64 (RFC 8166 §3.4.3), its
/// Position is a multiple of four, not zero (§3.4.5; CHECKLIST G-7) and within the inline
/// payload, the stream stays within the limits, an RPC message follows whose XID is
/// `rdma_xid` (§4.2.1, CHECKLIST G-9), its Call header decodes and the chunk does not lie
/// inside it (§3.4.2, CHECKLIST G-14).
///
/// `Some` exactly when `judge_call_full` accepts the message and it has that shape, with
/// the same accepted Call (property tests in `tests/verdict.rs`); `None` decides nothing:
/// judge the message with [`judge_call`](super::judge_call).
#[inline]
pub fn pulled_call(buf: &[u8]) -> Option<AcceptedCall<'_>> {
    let header = HeaderView::parse_one_read_msg(buf)?;
    let payload = header.payload();
    if payload.len() < 4 || word(payload, 0) != header.xid() {
        return None;
    }
    let reads = header.read_list();
    let plan = ReadPlan::one_chunk(payload.len(), reads, LIMITS)?;
    let (RpcMessage::Call(call), len) = RpcMessage::parse(payload).ok()? else {
        return None;
    };
    if (reads.get(0)?.position as usize) < len {
        return None;
    }
    Some(AcceptedCall {
        header,
        plan,
        call: Some((call, len)),
    })
}
