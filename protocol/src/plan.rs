//! Choosing the form of a message to send: Short, Chunked or Long (RFC 8166 §3.5), and whether a
//! Call provides a Reply chunk (§4.3.3).
//!
//! A message is sent in one RDMA Send, so its Transport stream (the header, chunk lists
//! included) plus whatever Payload stream travels inline must fit the receiver's inline
//! threshold (§3.3.2, §4.2.4; IMPL §4.1, checklist D13). A message fits when that sum is **at
//! most** the threshold: the threshold is "the largest message size ... that can be conveyed"
//! (§3.3.2).
//!
//! Header sizes follow the XDR of §4.7 (checklist A.3):
//! `28 + 24·R + Σᵢ(8 + 16·nᵢ) + (reply chunk ? 4 + 16·m : 0)` for `R` read segments, Write
//! chunks of `nᵢ` segments and a Reply chunk of `m` segments — the same sizes
//! [`Chunks::encoded_len`](crate::header::Chunks::encoded_len) computes.
//!
//! Both planners are pure arithmetic on the sizes given; nothing is allocated.

use crate::header::{Proc, Segments, WriteList, FIXED_PREFIX_LEN};
use crate::xdr::pad4_u64;
use core::fmt;

/// The inline thresholds of a connection, in bytes (§3.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Thresholds {
    /// Largest message from Requester to Responder (the "call inline threshold").
    pub call: u32,
    /// Largest message from Responder to Requester (the "reply inline threshold").
    pub reply: u32,
}

impl Thresholds {
    /// The threshold every receiver supports, assumed in each direction when nothing else is
    /// known (§3.3.3 MUST).
    pub const MIN: u32 = 1024;
}

impl Default for Thresholds {
    /// 1024 bytes in each direction (§3.3.3).
    fn default() -> Self {
        Thresholds {
            call: Self::MIN,
            reply: Self::MIN,
        }
    }
}

/// A DDP-eligible argument item of a Call (§3.4.2), as the Requester would reduce it into a Read
/// chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DdpItem {
    /// Offset of the item's data in the unreduced Payload stream: the Read chunk's Position. A
    /// non-zero multiple of four (§3.4.5; Position zero is the RPC header, IMPL §3.6).
    pub offset: u32,
    /// Length of the item's data without its XDR pad. The pad is removed from the payload too
    /// (§3.4.4.4), so reducing the item shortens the payload by `roundup(len)`.
    pub len: u32,
    /// Read segments the chunk will use (at least 1).
    pub segments: u32,
}

/// What [`plan_call`] needs to know about a Call and its possible Reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallShape<'s> {
    /// Encoded length of the whole RPC Call message: the unreduced Payload stream.
    pub call_len: u32,
    /// The DDP-eligible argument items, in stream order and not overlapping (pads included).
    pub items: &'s [DdpItem],
    /// Longest read segment the Position-Zero chunk of a Long Call may use (a registration
    /// limit, IMPL §3.4); the chunk uses `ceil(len / position_zero_segment_max)` segments, at
    /// least one. `u32::MAX` for a single segment. Must not be zero.
    pub position_zero_segment_max: u32,
    /// Segment count of each Write chunk the Call carries for DDP-eligible results, in Write
    /// list order (0 for an empty Write chunk, §4.3.2.3). The Reply header echoes them all.
    pub write_chunks: &'s [u32],
    /// Largest possible RPC Reply message (Payload stream) with every result inline (§6.2).
    pub max_reply_len: u32,
    /// Largest possible Reply Payload stream after the Responder reduces DDP-eligible results
    /// into the Write chunks, or `None` when results will not be reduced. It is taken as given
    /// rather than derived from `max_reply_len`, because the largest reduced reply need not be
    /// the largest reply less its results (an error arm without DDP data may be longer). Ignored
    /// when no Write chunk has a segment.
    pub max_reply_reduced_len: Option<u32>,
    /// Segments a Reply chunk would use (at least 1 if one is needed).
    pub reply_chunk_segments: u32,
}

/// The form of a Call (§3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallForm {
    /// RDMA_MSG with the whole Payload stream inline and an empty Read list (§3.5.1).
    Short,
    /// RDMA_MSG with the DDP-eligible items reduced into Read chunks and the reduced Payload
    /// stream inline (§3.5.2).
    Chunked,
    /// RDMA_NOMSG with the Payload stream in a Position-Zero Read chunk (§3.5.3). If the Call has
    /// DDP-eligible items they stay reduced into their own Read chunks and the Position-Zero
    /// chunk carries the reduced stream (IMPL §3.5.1, checklist D5).
    Long,
}

impl CallForm {
    /// The procedure of the Call's header.
    pub fn proc(self) -> Proc {
        match self {
            CallForm::Short | CallForm::Chunked => Proc::Msg,
            CallForm::Long => Proc::NoMsg,
        }
    }
}

/// The result of [`plan_call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallPlan {
    /// The Call's form.
    pub form: CallForm,
    /// Exact length of the Call's transport header.
    pub header_len: usize,
    /// Payload bytes sent inline after the header: the whole Call (Short), the reduced Call
    /// (Chunked) or none (Long).
    pub inline_len: u32,
    /// Read segments in the Read list: the items' segments (Chunked, Long with items) plus the
    /// Position-Zero chunk's (Long).
    pub read_segments: u32,
    /// Length of the Position-Zero chunk (Long only, else 0): the reduced Call when it has
    /// items, the whole Call otherwise.
    pub position_zero_len: u32,
    /// Segments of the Position-Zero chunk (Long only, else 0).
    pub position_zero_segments: u32,
    /// Whether the Call provides a Reply chunk: required whenever the largest possible Reply,
    /// its header included, exceeds the reply threshold (§4.3.3 MUST).
    pub reply_chunk: bool,
}

impl CallPlan {
    /// Bytes of the Call's Send: header plus inline payload.
    pub fn send_len(&self) -> usize {
        self.header_len + self.inline_len as usize
    }
}

/// The form of a Reply (§3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyForm {
    /// RDMA_MSG with the (reduced) Payload stream inline.
    Short,
    /// RDMA_NOMSG with the Payload stream written into the Reply chunk (§3.5.3).
    Long,
}

impl ReplyForm {
    /// The procedure of the Reply's header.
    pub fn proc(self) -> Proc {
        match self {
            ReplyForm::Short => Proc::Msg,
            ReplyForm::Long => Proc::NoMsg,
        }
    }
}

/// The result of [`plan_reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplyPlan {
    /// The Reply's form.
    pub form: ReplyForm,
    /// Exact length of the Reply's transport header.
    pub header_len: usize,
    /// Payload bytes sent inline after the header (0 for a Long Reply).
    pub inline_len: u32,
}

impl ReplyPlan {
    /// Bytes of the Reply's Send: header plus inline payload.
    pub fn send_len(&self) -> usize {
        self.header_len + self.inline_len as usize
    }
}

/// Why no form of a message fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// A [`DdpItem`] is misplaced: its offset is zero or not a multiple of four, it needs no
    /// segment, it overlaps or shares the Position of the previous item, or it runs past the
    /// end of the Call.
    InvalidItem {
        /// Index of the item.
        index: usize,
    },
    /// [`CallShape::position_zero_segment_max`] is zero.
    ZeroSegmentLimit,
    /// A Reply chunk is required but [`CallShape::reply_chunk_segments`] is zero.
    EmptyReplyChunk,
    /// Even a Long Call's header does not fit the call threshold.
    CallHeaderTooLarge {
        /// The smallest header that would do.
        header_len: u64,
        /// The call threshold.
        threshold: u32,
    },
    /// Even the header of a Long Reply (echoing the Write list and the Reply chunk) does not fit
    /// the reply threshold, so no Reply could be sent.
    ReplyHeaderTooLarge {
        /// The header's length.
        header_len: u64,
        /// The reply threshold.
        threshold: u32,
    },
    /// The Reply does not fit inline and there is no Reply chunk, or the Reply chunk is too
    /// short for its Payload stream (§3.5.3, §4.5.3).
    ReplyTooLarge {
        /// Bytes a Short Reply would send.
        send_len: u64,
        /// The reply threshold.
        threshold: u32,
        /// Length of the Reply chunk, `None` when the Call provided none.
        reply_chunk_capacity: Option<u64>,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PlanError::InvalidItem { index } => write!(f, "DDP-eligible item {index} is misplaced"),
            PlanError::ZeroSegmentLimit => write!(f, "Position-Zero segment limit is zero"),
            PlanError::EmptyReplyChunk => {
                write!(f, "a Reply chunk is required but would have no segment")
            }
            PlanError::CallHeaderTooLarge {
                header_len,
                threshold,
            } => write!(
                f,
                "call header of {header_len} bytes exceeds the call threshold {threshold}"
            ),
            PlanError::ReplyHeaderTooLarge {
                header_len,
                threshold,
            } => write!(
                f,
                "reply header of {header_len} bytes exceeds the reply threshold {threshold}"
            ),
            PlanError::ReplyTooLarge {
                send_len,
                threshold,
                reply_chunk_capacity: None,
            } => write!(
                f,
                "reply of {send_len} bytes exceeds the reply threshold {threshold} and there is no Reply chunk"
            ),
            PlanError::ReplyTooLarge {
                send_len,
                threshold,
                reply_chunk_capacity: Some(cap),
            } => write!(
                f,
                "reply of {send_len} bytes exceeds the reply threshold {threshold} and the {cap}-byte Reply chunk"
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// Encoded size of a read list of `segments` read segments (§4.7).
fn read_list_len(segments: u64) -> u64 {
    4 + 24 * segments
}

/// Encoded size of a Write list with chunks of the given segment counts (§4.7).
fn write_list_len(chunks: &[u32]) -> u64 {
    4 + chunks.iter().map(|&n| 8 + 16 * n as u64).sum::<u64>()
}

/// Encoded size of the Reply chunk slot (§4.7).
fn reply_slot_len(segments: Option<u64>) -> u64 {
    match segments {
        None => 4,
        Some(m) => 8 + 16 * m,
    }
}

/// Chooses the form of a Call, its exact header length, and whether it provides a Reply chunk
/// (§3.5, §4.3.3; checklist A.8).
///
/// * **Short** when header plus the whole Call fit the call threshold (§3.5.1): the most
///   efficient form (checklist E1), chosen even when items could be reduced.
/// * Else **Chunked** when the Call has DDP-eligible items and header (with their Read chunks)
///   plus the reduced Call fit (§3.5.2).
/// * Else **Long** (§3.5.3 MUST): the Payload stream goes in a Position-Zero Read chunk. The
///   items, if any, keep their own Read chunks, so their data is still placed directly and the
///   Position-Zero chunk carries only the reduced stream (IMPL §3.5.1; checklist D5).
///
/// The Reply chunk is provided whenever the largest possible Reply — header included, which
/// echoes the Call's Write list (§3.4.6) and has an empty Read list (§4.3.1) — exceeds the
/// reply threshold (§4.3.3 MUST; DERIVED in checklist A.8). The Call's header then carries
/// that Reply chunk.
pub fn plan_call(thresholds: Thresholds, call: &CallShape<'_>) -> Result<CallPlan, PlanError> {
    plan_call_forced(thresholds, call, Forced::default())
}

/// Forms a requester may ask for where a smaller one would fit: to measure both sides of an
/// inline threshold at every size (`rpcrdma sweep --force-form`), or to exercise a peer.
/// Every forced form is valid RPC-over-RDMA: a Responder must accept a Chunked or Long Call
/// and a Reply chunk in any Call (RFC 8166 §3.5, §4.3.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Forced {
    /// The smallest form to use: `None` lets the thresholds decide; `Some(Chunked)` reduces
    /// the DDP-eligible items into Read chunks even when the whole Call fits inline (a Call
    /// without items stays Short); `Some(Long)` sends the Payload stream in a Position-Zero
    /// Read chunk whatever its size.
    pub min_form: Option<CallForm>,
    /// Provide a Reply chunk even when the largest Reply fits inline.
    pub reply_chunk: bool,
}

/// [`plan_call`], with the forms `forced` asks for where smaller ones would fit.
pub fn plan_call_forced(
    thresholds: Thresholds,
    call: &CallShape<'_>,
    forced: Forced,
) -> Result<CallPlan, PlanError> {
    if call.position_zero_segment_max == 0 {
        return Err(PlanError::ZeroSegmentLimit);
    }
    let call_len = call.call_len as u64;
    let mut reduced_by = 0u64;
    let mut item_segments = 0u64;
    let mut prev: Option<(u64, u64)> = None;
    for (index, item) in call.items.iter().enumerate() {
        let start = item.offset as u64;
        let end = start + pad4_u64(item.len as u64);
        let after_prev = match prev {
            Some((prev_start, prev_end)) => start > prev_start && start >= prev_end,
            None => true,
        };
        if start == 0 || start & 3 != 0 || item.segments == 0 || !after_prev || end > call_len {
            return Err(PlanError::InvalidItem { index });
        }
        prev = Some((start, end));
        reduced_by += end - start;
        item_segments += item.segments as u64;
    }
    let reduced_len = call_len - reduced_by;

    // The Reply: its header echoes the Write list; a Reply chunk is needed when the largest Reply
    // does not fit without one.
    let writes = write_list_len(call.write_chunks);
    let reduces = call.write_chunks.iter().any(|&n| n != 0);
    let max_reply = match call.max_reply_reduced_len {
        Some(r) if reduces => r.min(call.max_reply_len),
        _ => call.max_reply_len,
    } as u64;
    let reply_base = FIXED_PREFIX_LEN as u64 + read_list_len(0) + writes;
    let reply_chunk = forced.reply_chunk
        || reply_base + reply_slot_len(None) + max_reply > thresholds.reply as u64;
    let reply_slot = if reply_chunk {
        if call.reply_chunk_segments == 0 {
            return Err(PlanError::EmptyReplyChunk);
        }
        let slot = reply_slot_len(Some(call.reply_chunk_segments as u64));
        if reply_base + slot > thresholds.reply as u64 {
            return Err(PlanError::ReplyHeaderTooLarge {
                header_len: reply_base + slot,
                threshold: thresholds.reply,
            });
        }
        slot
    } else {
        reply_slot_len(None)
    };

    // The Call.
    let limit = thresholds.call as u64;
    let header = |read_segments: u64| {
        FIXED_PREFIX_LEN as u64 + read_list_len(read_segments) + writes + reply_slot
    };
    let plan =
        |form, header_len: u64, inline_len: u64, read_segments: u64, p0: (u64, u64)| CallPlan {
            form,
            header_len: header_len as usize,
            inline_len: inline_len as u32,
            read_segments: read_segments as u32,
            position_zero_len: p0.0 as u32,
            position_zero_segments: p0.1 as u32,
            reply_chunk,
        };
    let (short_ok, chunked_ok) = match forced.min_form {
        None | Some(CallForm::Short) => (true, true),
        Some(CallForm::Chunked) => (call.items.is_empty(), true),
        Some(CallForm::Long) => (false, false),
    };
    let short = header(0);
    if short_ok && short + call_len <= limit {
        return Ok(plan(CallForm::Short, short, call_len, 0, (0, 0)));
    }
    if chunked_ok && !call.items.is_empty() {
        let chunked = header(item_segments);
        if chunked + reduced_len <= limit {
            return Ok(plan(
                CallForm::Chunked,
                chunked,
                reduced_len,
                item_segments,
                (0, 0),
            ));
        }
    }
    let p0_len = reduced_len;
    let p0_segments = p0_len
        .div_ceil(call.position_zero_segment_max as u64)
        .max(1);
    let read_segments = item_segments + p0_segments;
    let long = header(read_segments);
    if long > limit {
        return Err(PlanError::CallHeaderTooLarge {
            header_len: long,
            threshold: thresholds.call,
        });
    }
    Ok(plan(
        CallForm::Long,
        long,
        0,
        read_segments,
        (p0_len, p0_segments),
    ))
}

/// Chooses the form of a Reply (§3.5.3, §4.3.3; checklist D15).
///
/// `payload_len` is the Reply's Payload stream after the DDP-eligible results were reduced into
/// the Write chunks; `write_list` and `reply_chunk` are the Call's, which the Reply header echoes
/// with the same segment counts (§3.4.6, §4.3.3). The Reply chunk is echoed even by a Short
/// Reply, with zero lengths (decision G-16), and a Reply never carries a Read list (§4.3.1 MUST).
///
/// * **Short** when header plus payload fit the reply threshold: the Responder MAY then leave
///   the Reply chunk unused (§4.3.3).
/// * Else **Long** when there is a Reply chunk long enough for the payload (§3.5.3 MUST).
/// * Else [`PlanError::ReplyTooLarge`] (the Responder answers ERR_CHUNK, §4.5.3), or
///   [`PlanError::ReplyHeaderTooLarge`] when even the Long Reply's header does not fit.
pub fn plan_reply(
    threshold: u32,
    payload_len: u32,
    write_list: WriteList<'_>,
    reply_chunk: Option<Segments<'_>>,
) -> Result<ReplyPlan, PlanError> {
    let reply_slot = reply_slot_len(reply_chunk.map(|c| c.len() as u64));
    let header_len =
        FIXED_PREFIX_LEN as u64 + read_list_len(0) + write_list.encoded_len() as u64 + reply_slot;
    let limit = threshold as u64;
    let send_len = header_len + payload_len as u64;
    if send_len <= limit {
        return Ok(ReplyPlan {
            form: ReplyForm::Short,
            header_len: header_len as usize,
            inline_len: payload_len,
        });
    }
    if header_len > limit {
        return Err(PlanError::ReplyHeaderTooLarge {
            header_len,
            threshold,
        });
    }
    match reply_chunk {
        Some(c) if c.total_len() >= payload_len as u64 => Ok(ReplyPlan {
            form: ReplyForm::Long,
            header_len: header_len as usize,
            inline_len: 0,
        }),
        other => Err(PlanError::ReplyTooLarge {
            send_len,
            threshold,
            reply_chunk_capacity: other.map(|c| c.total_len()),
        }),
    }
}
