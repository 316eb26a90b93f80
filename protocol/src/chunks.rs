//! Chunks in operation: rebuilding a reduced Payload stream from its Read chunks, placing results
//! into Write chunks and the Reply chunk, and checking what a Responder returned (RFC 8166 §3.4,
//! §3.5.3, §4.3).
//!
//! Three parties use this module:
//!
//! * the **Responder receiving a Call** plans how the unreduced Payload stream is rebuilt from
//!   the inline payload and the Read chunks ([`ReadPlan`]);
//! * the **Responder building a Reply** decides which result goes into which Write chunk
//!   ([`match_results`]), where its bytes go ([`place_write`], [`place_reply`]) and what to echo
//!   in the Reply header ([`echo_lengths`]);
//! * the **Requester receiving a Reply** checks the echoed Write list and Reply chunk against
//!   what it provisioned ([`check_returned`], [`check_returned_write_list`],
//!   [`check_returned_reply`]).
//!
//! Nothing here allocates: plans borrow the decoded header views and iterate over them.
//!
//! # The unreduced stream
//!
//! Every Read chunk is the run of consecutive read segments that share a Position; its content is
//! the concatenation of those segments in list order, and its length is the sum of their lengths
//! (§3.4.4, §3.4.5). Positions are byte offsets in the unreduced Payload stream, which starts at
//! Position zero with the RPC XID (§3.4.5). Rebuilding walks the chunks in ascending Position:
//! the reduced stream (the inline payload) fills the gaps between chunks, and after a chunk of
//! length `L` at Position `P` it resumes at `P + roundup(L)`: the chunk's XDR roundup padding is
//! never in the inline buffer, whether or not the Requester put it in the chunk (§3.4.4.4,
//! §3.4.5.2; checklist D8). When the pad is not in the chunk, the rebuilt stream holds zeros in
//! its place; when it is, `L` is already a multiple of four.
//!
//! ## Position Zero
//!
//! A Read chunk at Position zero is a Long Call (§3.5.3): its content is the Call's Payload
//! stream, XDR padding included. This module treats it as the **reduced stream** of the Call, the
//! role the inline payload plays in an RDMA_MSG:
//!
//! * With no other chunk, the unreduced stream is the Position-Zero content itself.
//! * Other chunks (non-zero Positions) may accompany it (IMPL §3.5.1; checklist D5): they are
//!   reinserted into the Position-Zero content exactly as they would be into an inline payload.
//!   This is the Long Call whose body is still too large after its DDP-eligible items were
//!   reduced.
//! * A Position-Zero chunk together with an inline payload (an RDMA_MSG carrying a Position-Zero
//!   chunk) is rejected: two streams would start at Position zero (IMPL §3.6; decision G-7,
//!   ERR_CHUNK).
//!
//! # Error classes
//!
//! Every [`ChunkError`] names the answer a Responder gives to a Call that carries it
//! ([`ChunkError::class`]). RFC 8166 §4.5.2 distinguishes two cases:
//!
//! * errors in the chunk lists themselves, visible without looking at the payload (a misaligned
//!   Position, segments of one Position that are not adjacent, lengths or addresses that
//!   overflow, more chunks than the local limit, a Position-Zero chunk beside an inline payload)
//!   make the header unusable: RDMA_ERROR with ERR_CHUNK (§4.5.2, first paragraph;
//!   [`ChunkErrorClass::ErrChunk`]);
//! * errors only visible relative to the payload (a Position past the end of the stream that the
//!   reduced payload can reach, a chunk starting inside the preceding one) are "mismatches between
//!   chunk sizes or offsets and the contents of the Payload stream": the header is valid and the
//!   Responder answers with an RPC GARBAGE_ARGS reply sent as RDMA_MSG (§4.5.2, second paragraph;
//!   decision G-8; [`ChunkErrorClass::GarbageArgs`]).
//!
//! [`ReadPlan::new`] reports an ERR_CHUNK-class error in preference to a GARBAGE_ARGS-class one
//! when a list has both, so that the verdict does not depend on the order of the list.
//!
//! Errors found while building a Reply (a result larger than its Write chunk or the Reply chunk)
//! are Responder operational errors (§4.5.3): no RPC-level reply is possible for that XID, and the
//! Responder answers with ERR_CHUNK.

use crate::header::{ReadList, Segment, Segments, WriteList, WriteListIter};
use crate::xdr::pad4_u64;
use core::fmt;
use core::ops::Range;

/// Which answer a [`ChunkError`] found in a received Call calls for (RFC 8166 §4.5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkErrorClass {
    /// The chunk lists are malformed in themselves: the Responder replies RDMA_ERROR with
    /// ERR_CHUNK (§4.5.2, first paragraph).
    ErrChunk,
    /// The header is valid but does not match the Payload stream: the Responder replies with an
    /// RPC GARBAGE_ARGS using RDMA_MSG (§4.5.2, second paragraph).
    GarbageArgs,
}

/// Why a set of chunks cannot be used.
///
/// Segment indexes count from zero in the list or array the segment came from: the read list
/// for the Read side, the chunk's segment array for the Write side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkError {
    /// A read segment's Position is not a multiple of four (§3.4.5 MUST).
    MisalignedPosition {
        /// Index of the read segment.
        index: usize,
        /// The Position found.
        position: u32,
    },
    /// Read segments with the same Position are separated by a segment with another Position,
    /// so the chunk's content is ambiguous (§3.4.5; decision G-8).
    NonAdjacentPosition {
        /// The Position shared by the separated segments.
        position: u32,
        /// Index of the first segment that is not adjacent to the earlier ones.
        index: usize,
    },
    /// A segment's `offset + length` wraps past 2^64, so it names no real memory (§3.4.3).
    SegmentWraps {
        /// Index of the segment.
        index: usize,
        /// The segment.
        segment: Segment,
    },
    /// The lengths of a Read chunk's segments sum past `u32::MAX`; no XDR item is that long
    /// (§3.4.4).
    ChunkTooLong {
        /// The chunk's Position.
        position: u32,
        /// The sum of its segment lengths.
        len: u64,
    },
    /// The unreduced Payload stream would be longer than `max`: either past what a 32-bit
    /// Position can address, or past the local limit of [`ReadLimits::max_stream_len`]
    /// (§3.4.4, §8.1.4).
    StreamTooLong {
        /// The length reached (at least).
        len: u64,
        /// The largest length allowed.
        max: u32,
    },
    /// The read list has more distinct Positions than [`ReadLimits::max_chunks`] allows
    /// (§8.1.4; IMPL App. B #6).
    TooManyChunks {
        /// The limit.
        max: usize,
    },
    /// A Position-Zero Read chunk accompanies an inline payload (an RDMA_MSG Call): both would
    /// start at Position zero (IMPL §3.6; decision G-7).
    PositionZeroWithInline {
        /// Length of the inline payload.
        inline_len: usize,
    },
    /// A Read chunk's Position lies past the end of the stream that the reduced payload can
    /// reach: more inline bytes would be needed than are present (§3.4.5; decision G-8).
    PositionOutOfRange {
        /// The chunk's Position.
        position: u32,
        /// The largest Position at which a chunk could be reinserted.
        reachable: u64,
    },
    /// A Read chunk starts before the end of the preceding chunk, its XDR pad included
    /// (§3.4.4.4, §3.4.5.2).
    Overlap {
        /// The chunk's Position.
        position: u32,
        /// Where the preceding chunk ends, rounded up to a multiple of four.
        previous_end: u64,
    },
    /// A result is longer than the Write chunk provided for it (§3.4.6, §4.3.2.2 MUST).
    WriteChunkTooSmall {
        /// The result's length without XDR pad.
        needed: u64,
        /// The sum of the chunk's segment lengths.
        capacity: u64,
    },
    /// The Reply's Payload stream is longer than the Reply chunk (§4.5.3).
    ReplyChunkTooSmall {
        /// The Payload stream's length.
        needed: u64,
        /// The sum of the Reply chunk's segment lengths.
        capacity: u64,
    },
    /// The buffer given to [`echo_lengths`] holds fewer segments than the chunk.
    EchoBufferTooSmall {
        /// Segments in the chunk.
        needed: usize,
        /// Segments the buffer holds.
        available: usize,
    },
}

impl ChunkError {
    /// The answer this error calls for when found in a received Call (RFC 8166 §4.5.2; see the
    /// [module documentation](self#error-classes)).
    ///
    /// Only [`ChunkError::PositionOutOfRange`] and [`ChunkError::Overlap`] depend on the payload
    /// and are [`ChunkErrorClass::GarbageArgs`]; every other variant is
    /// [`ChunkErrorClass::ErrChunk`]. The Reply-side variants ([`ChunkError::WriteChunkTooSmall`],
    /// [`ChunkError::ReplyChunkTooSmall`], [`ChunkError::EchoBufferTooSmall`]) leave the
    /// Responder unable to send any RPC-level reply, which §4.5.3 answers with ERR_CHUNK.
    pub fn class(&self) -> ChunkErrorClass {
        match self {
            ChunkError::PositionOutOfRange { .. } | ChunkError::Overlap { .. } => {
                ChunkErrorClass::GarbageArgs
            }
            ChunkError::MisalignedPosition { .. }
            | ChunkError::NonAdjacentPosition { .. }
            | ChunkError::SegmentWraps { .. }
            | ChunkError::ChunkTooLong { .. }
            | ChunkError::StreamTooLong { .. }
            | ChunkError::TooManyChunks { .. }
            | ChunkError::PositionZeroWithInline { .. }
            | ChunkError::WriteChunkTooSmall { .. }
            | ChunkError::ReplyChunkTooSmall { .. }
            | ChunkError::EchoBufferTooSmall { .. } => ChunkErrorClass::ErrChunk,
        }
    }
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ChunkError::MisalignedPosition { index, position } => write!(
                f,
                "read segment {index} has Position {position}, not a multiple of four"
            ),
            ChunkError::NonAdjacentPosition { position, index } => write!(
                f,
                "read segment {index} shares Position {position} with earlier segments but is not adjacent to them"
            ),
            ChunkError::SegmentWraps { index, segment } => write!(
                f,
                "segment {index} (offset {:#x}, length {}) wraps past 2^64",
                segment.offset, segment.length
            ),
            ChunkError::ChunkTooLong { position, len } => {
                write!(f, "Read chunk at Position {position} is {len} bytes long")
            }
            ChunkError::StreamTooLong { len, max } => write!(
                f,
                "unreduced Payload stream of at least {len} bytes exceeds the maximum {max}"
            ),
            ChunkError::TooManyChunks { max } => {
                write!(f, "read list has more than {max} distinct Positions")
            }
            ChunkError::PositionZeroWithInline { inline_len } => write!(
                f,
                "Position-Zero Read chunk accompanies a {inline_len}-byte inline payload"
            ),
            ChunkError::PositionOutOfRange {
                position,
                reachable,
            } => write!(
                f,
                "Read chunk Position {position} is past the reachable end of the stream ({reachable})"
            ),
            ChunkError::Overlap {
                position,
                previous_end,
            } => write!(
                f,
                "Read chunk at Position {position} overlaps the preceding chunk, which ends at {previous_end}"
            ),
            ChunkError::WriteChunkTooSmall { needed, capacity } => write!(
                f,
                "result of {needed} bytes does not fit its {capacity}-byte Write chunk"
            ),
            ChunkError::ReplyChunkTooSmall { needed, capacity } => write!(
                f,
                "reply of {needed} bytes does not fit the {capacity}-byte Reply chunk"
            ),
            ChunkError::EchoBufferTooSmall { needed, available } => write!(
                f,
                "echo needs {needed} segments but the buffer holds {available}"
            ),
        }
    }
}

impl std::error::Error for ChunkError {}

/// Local limits applied while planning a received read list.
///
/// Planning costs one pass over the read list per distinct Position, so `max_chunks` also bounds
/// the work a hostile list can cause: at most `(max_chunks + 1) × segments` segment visits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadLimits {
    /// The largest number of distinct Positions (Read chunks, the Position-Zero chunk included)
    /// accepted in one read list. A ULB limit on Read list entries counts the same thing
    /// (IMPL §3.2; checklist D3).
    pub max_chunks: usize,
    /// The longest unreduced Payload stream accepted. A Responder "is not obliged to pull Read
    /// chunks that are unreasonably large" (§8.1.4); ULP limits such as NFS wsize are a natural
    /// bound (§3.4.4).
    pub max_stream_len: u32,
}

impl ReadLimits {
    /// The default limit on distinct Positions.
    pub const DEFAULT_MAX_CHUNKS: usize = 64;
}

impl Default for ReadLimits {
    /// 64 distinct Positions and streams up to `u32::MAX` bytes.
    fn default() -> Self {
        ReadLimits {
            max_chunks: Self::DEFAULT_MAX_CHUNKS,
            max_stream_len: u32::MAX,
        }
    }
}

/// One Read chunk: the run of consecutive read segments sharing a Position (§3.4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadChunk {
    /// The Position shared by the segments.
    pub position: u32,
    /// Index in the read list of the chunk's first segment.
    pub first_segment: usize,
    /// Number of segments; they are read-list entries `first_segment..first_segment + segments`.
    pub segments: usize,
    /// The chunk's length: the sum of its segment lengths.
    pub len: u32,
}

impl ReadChunk {
    /// The read-list indexes of the chunk's segments.
    pub fn segment_range(&self) -> Range<usize> {
        self.first_segment..self.first_segment + self.segments
    }

    /// The XDR roundup padding the rebuilt stream places after the chunk: `0` when the length is
    /// a multiple of four (for instance because the Requester included the pad, §3.4.5.2).
    pub fn pad(&self) -> u32 {
        pad_of(self.len)
    }
}

/// A piece of the unreduced Payload stream, in stream order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Piece {
    /// Bytes of the reduced stream: the inline payload or, in a Long Call, the content of the
    /// Position-Zero Read chunk ([`ReadPlan::reduced_len`]).
    Inline {
        /// The bytes' range in the reduced stream.
        src: Range<usize>,
        /// Their offset in the unreduced stream.
        dst: u32,
    },
    /// A Read chunk (never the Position-Zero chunk) followed by its XDR pad.
    Chunk {
        /// Index in the read list of the chunk's first segment.
        first_segment: usize,
        /// Number of segments.
        segments: usize,
        /// The chunk's length (sum of its segment lengths).
        len: u32,
        /// Its offset in the unreduced stream: the chunk's Position.
        dst: u32,
        /// Zero bytes that follow the chunk's content in the unreduced stream (0 to 3).
        pad: u32,
    },
}

impl Piece {
    /// Offset of the piece in the unreduced stream.
    pub fn dst(&self) -> u32 {
        match *self {
            Piece::Inline { dst, .. } | Piece::Chunk { dst, .. } => dst,
        }
    }

    /// Bytes the piece occupies in the unreduced stream, a chunk's pad included.
    pub fn span(&self) -> u32 {
        match self {
            Piece::Inline { src, .. } => (src.end - src.start) as u32,
            Piece::Chunk { len, pad, .. } => len + pad,
        }
    }

    /// The range the piece occupies in the unreduced stream.
    pub fn dst_range(&self) -> Range<u32> {
        self.dst()..self.dst() + self.span()
    }
}

/// What a [`ReadPlan`] learned about a read list, without borrowing it: kept between the
/// phases of pulling one Call's chunks so that [`ReadPlan::resume`] rebuilds the plan
/// without validating the list again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanSummary {
    segments: usize,
    inline_len: usize,
    reduced_len: usize,
    total_len: u32,
    chunks: usize,
    position_zero: Option<ReadChunk>,
    first_position: Option<u32>,
}

/// How the unreduced Payload stream of a received Call is rebuilt from its reduced stream and
/// its Read chunks (§3.4.5; see the [module documentation](self#the-unreduced-stream)).
///
/// A plan borrows the read list; it stores no per-chunk state and recomputes each chunk with a
/// pass over the list when asked, which the [`ReadLimits::max_chunks`] check made cheap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadPlan<'a> {
    reads: ReadList<'a>,
    inline_len: usize,
    reduced_len: usize,
    total_len: u32,
    chunks: usize,
    position_zero: Option<ReadChunk>,
    first_position: Option<u32>,
}

impl<'a> ReadPlan<'a> {
    /// Validates `reads` against an inline payload of `inline_len` bytes (0 for RDMA_NOMSG) and
    /// describes the unreduced stream.
    ///
    /// Positions may come in any order (decision G-8); segments of one Position must be adjacent.
    /// Errors of class [`ChunkErrorClass::ErrChunk`] take precedence over those of class
    /// [`ChunkErrorClass::GarbageArgs`]. Nothing is allocated; the work is bounded by
    /// `(limits.max_chunks + 1) × reads.len()` segment visits.
    pub fn new(
        inline_len: usize,
        reads: ReadList<'a>,
        limits: ReadLimits,
    ) -> Result<ReadPlan<'a>, ChunkError> {
        // Pass 1: what each segment says on its own, and the smallest Position.
        let mut min: Option<u32> = None;
        for (index, rs) in reads.iter().enumerate() {
            if rs.position & 3 != 0 {
                return Err(ChunkError::MisalignedPosition {
                    index,
                    position: rs.position,
                });
            }
            if rs.segment.end().is_none() {
                return Err(ChunkError::SegmentWraps {
                    index,
                    segment: rs.segment,
                });
            }
            min = Some(match min {
                Some(m) if m <= rs.position => m,
                _ => rs.position,
            });
        }

        // Pass 2: one scan per distinct Position, in ascending order. Payload-relative errors
        // are remembered and reported only if the lists are otherwise sound.
        let max = limits.max_stream_len;
        let mut deferred: Option<ChunkError> = None;
        let mut reduced_len = inline_len as u64;
        let mut position_zero = None;
        let mut first_position = None;
        let mut chunks = 0usize;
        // `dst`: unreduced bytes laid out so far; `src`: reduced bytes consumed so far.
        let mut dst: u64 = 0;
        let mut src: u64 = 0;
        let mut next = min;
        while let Some(position) = next {
            if chunks == limits.max_chunks {
                return Err(ChunkError::TooManyChunks {
                    max: limits.max_chunks,
                });
            }
            chunks += 1;
            let scanned = scan(&reads, position)?;
            next = scanned.next;
            let chunk = scanned.chunk;
            if position == 0 {
                if inline_len != 0 {
                    return Err(ChunkError::PositionZeroWithInline { inline_len });
                }
                reduced_len = chunk.len as u64;
                position_zero = Some(chunk);
                continue;
            }
            if first_position.is_none() {
                first_position = Some(position);
            }
            let end = position as u64 + pad4_u64(chunk.len as u64);
            if end > max as u64 {
                return Err(ChunkError::StreamTooLong { len: end, max });
            }
            if deferred.is_some() {
                continue;
            }
            let p = position as u64;
            if p < dst {
                deferred = Some(ChunkError::Overlap {
                    position,
                    previous_end: dst,
                });
                continue;
            }
            let reachable = dst + (reduced_len - src);
            if p > reachable {
                deferred = Some(ChunkError::PositionOutOfRange {
                    position,
                    reachable,
                });
                continue;
            }
            src += p - dst;
            dst = end;
        }
        if let Some(e) = deferred {
            return Err(e);
        }
        let total = dst + (reduced_len - src);
        if total > max as u64 {
            return Err(ChunkError::StreamTooLong { len: total, max });
        }
        Ok(ReadPlan {
            reads,
            inline_len,
            reduced_len: reduced_len as usize,
            total_len: total as u32,
            chunks,
            position_zero,
            first_position,
        })
    }

    /// What the plan learned, without the borrow of the read list: [`ReadPlan::resume`]
    /// rebuilds the plan from it without validating the list again.
    pub fn summary(&self) -> PlanSummary {
        PlanSummary {
            segments: self.reads.len(),
            inline_len: self.inline_len,
            reduced_len: self.reduced_len,
            total_len: self.total_len,
            chunks: self.chunks,
            position_zero: self.position_zero,
            first_position: self.first_position,
        }
    }

    /// The plan [`ReadPlan::new`] returned for `reads`, rebuilt from its
    /// [`summary`](Self::summary) without the validation passes.
    ///
    /// `reads` must be the read list the summary was made from (the same received bytes,
    /// decoded again); `None` when its length differs. Given another list of the same length
    /// the plan describes the old one: pieces may then name segments wrongly, but nothing
    /// reads outside `reads` (every access is checked).
    pub fn resume(reads: ReadList<'a>, s: PlanSummary) -> Option<ReadPlan<'a>> {
        (reads.len() == s.segments).then_some(ReadPlan {
            reads,
            inline_len: s.inline_len,
            reduced_len: s.reduced_len,
            total_len: s.total_len,
            chunks: s.chunks,
            position_zero: s.position_zero,
            first_position: s.first_position,
        })
    }

    /// The read list the plan describes; [`Piece::Chunk`] segment indexes refer to it.
    pub fn read_list(&self) -> ReadList<'a> {
        self.reads
    }

    /// Length of the unreduced Payload stream, every chunk's pad included.
    pub fn total_len(&self) -> u32 {
        self.total_len
    }

    /// Length of the inline payload the plan was made for.
    pub fn inline_len(&self) -> usize {
        self.inline_len
    }

    /// Length of the reduced stream: the inline payload, or in a Long Call the Position-Zero
    /// chunk's content.
    pub fn reduced_len(&self) -> usize {
        self.reduced_len
    }

    /// `true` for a Long Call: the Call's Payload stream travels in a Position-Zero Read chunk
    /// (§3.5.3).
    pub fn is_long_call(&self) -> bool {
        self.position_zero.is_some()
    }

    /// The Position-Zero Read chunk of a Long Call.
    pub fn position_zero(&self) -> Option<ReadChunk> {
        self.position_zero
    }

    /// Number of Read chunks (distinct Positions), the Position-Zero chunk included.
    pub fn chunk_count(&self) -> usize {
        self.chunks
    }

    /// The pieces of the unreduced stream in stream order. They tile `0..total_len()` without
    /// gaps, and their [`Piece::Inline`] sources tile `0..reduced_len()` in order.
    pub fn pieces(&self) -> Pieces<'a> {
        Pieces {
            reads: self.reads,
            reduced_len: self.reduced_len,
            next: self.first_position,
            pending: None,
            dst: 0,
            src: 0,
        }
    }

    /// The piece that holds byte `offset` of the unreduced stream, or `None` past its end.
    pub fn locate(&self, offset: u32) -> Option<Piece> {
        self.pieces().find(|p| p.dst_range().contains(&offset))
    }

    /// Rebuilds the unreduced stream into `out` and returns its length.
    ///
    /// `inline` is the inline payload (empty for a Long Call). `fetch(i, buf)` must fill `buf`
    /// with the content of read segment `i`; `buf` is exactly as long as the segment and `fetch`
    /// is not called for empty segments. Chunk pads are written as zeros.
    ///
    /// A Long Call is rebuilt in place: the Position-Zero content is fetched into the tail of
    /// `out` and moved forward as the other chunks are inserted, so no scratch buffer is needed.
    pub fn reassemble<F>(
        &self,
        inline: &[u8],
        mut fetch: F,
        out: &mut [u8],
    ) -> Result<usize, ReassembleError>
    where
        F: FnMut(usize, &mut [u8]),
    {
        if inline.len() != self.inline_len {
            return Err(ReassembleError::InlineLength {
                expected: self.inline_len,
                actual: inline.len(),
            });
        }
        let total = self.total_len as usize;
        if out.len() < total {
            return Err(ReassembleError::OutputTooSmall {
                needed: total,
                available: out.len(),
            });
        }
        let out = &mut out[..total];
        // Where the reduced stream sits while the pieces are laid out.
        let base = match self.position_zero {
            Some(p0) => {
                let base = total - p0.len as usize;
                self.fetch_segments(p0.segment_range(), &mut fetch, &mut out[base..]);
                Some(base)
            }
            None => None,
        };
        for piece in self.pieces() {
            match piece {
                Piece::Inline { src, dst } => {
                    let dst = dst as usize;
                    match base {
                        // `base` is the room the inserted chunks take (the sum of their
                        // padded lengths), so reduced byte `r` sits at `base + r` and belongs
                        // at `r` plus the room of the chunks before it, which is at most
                        // `base + r`: every move is forward, and everything written up to the
                        // next piece (this piece, then the chunks that follow it) ends at or
                        // before `base + src.end`, where the bytes still to move begin.
                        Some(base) => out.copy_within(base + src.start..base + src.end, dst),
                        None => out[dst..dst + src.len()].copy_from_slice(&inline[src]),
                    }
                }
                Piece::Chunk {
                    first_segment,
                    segments,
                    len,
                    dst,
                    pad,
                } => {
                    let at = dst as usize;
                    let end = at + len as usize;
                    self.fetch_segments(
                        first_segment..first_segment + segments,
                        &mut fetch,
                        &mut out[at..end],
                    );
                    out[end..end + pad as usize].fill(0);
                }
            }
        }
        Ok(total)
    }

    fn fetch_segments<F>(&self, range: Range<usize>, fetch: &mut F, out: &mut [u8])
    where
        F: FnMut(usize, &mut [u8]),
    {
        let mut at = 0usize;
        for i in range {
            if let Some(rs) = self.reads.get(i) {
                let n = rs.segment.length as usize;
                if n != 0 {
                    fetch(i, &mut out[at..at + n]);
                }
                at += n;
            }
        }
    }
}

/// Why [`ReadPlan::reassemble`] could not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReassembleError {
    /// The inline payload is not the length the plan was made for.
    InlineLength {
        /// The plan's inline length.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// The output buffer is shorter than the unreduced stream.
    OutputTooSmall {
        /// The unreduced stream's length.
        needed: usize,
        /// The buffer's length.
        available: usize,
    },
}

impl fmt::Display for ReassembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReassembleError::InlineLength { expected, actual } => write!(
                f,
                "inline payload is {actual} bytes but the plan was made for {expected}"
            ),
            ReassembleError::OutputTooSmall { needed, available } => write!(
                f,
                "unreduced stream needs {needed} bytes but the buffer holds {available}"
            ),
        }
    }
}

impl std::error::Error for ReassembleError {}

/// Iterator over the [`Piece`]s of a [`ReadPlan`], in stream order.
#[derive(Clone, Debug)]
pub struct Pieces<'a> {
    reads: ReadList<'a>,
    reduced_len: usize,
    /// Position of the next chunk to lay out (never zero).
    next: Option<u32>,
    /// A chunk whose preceding inline gap was just returned.
    pending: Option<ReadChunk>,
    dst: u32,
    src: usize,
}

impl Pieces<'_> {
    fn chunk_piece(&mut self, c: ReadChunk) -> Piece {
        let pad = c.pad();
        // The plan checked that `position + len + pad` fits in 32 bits.
        self.dst = c.position + c.len + pad;
        Piece::Chunk {
            first_segment: c.first_segment,
            segments: c.segments,
            len: c.len,
            dst: c.position,
            pad,
        }
    }
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if let Some(c) = self.pending.take() {
            return Some(self.chunk_piece(c));
        }
        if let Some(position) = self.next {
            // The plan validated the list, so the scan cannot fail.
            let scanned = scan(&self.reads, position).ok()?;
            self.next = scanned.next;
            if position > self.dst {
                let gap = (position - self.dst) as usize;
                let piece = Piece::Inline {
                    src: self.src..self.src + gap,
                    dst: self.dst,
                };
                self.src += gap;
                self.dst = position;
                self.pending = Some(scanned.chunk);
                return Some(piece);
            }
            return Some(self.chunk_piece(scanned.chunk));
        }
        if self.src < self.reduced_len {
            let piece = Piece::Inline {
                src: self.src..self.reduced_len,
                dst: self.dst,
            };
            self.dst += (self.reduced_len - self.src) as u32;
            self.src = self.reduced_len;
            return Some(piece);
        }
        None
    }
}

/// One Read chunk found by [`scan`], and the next larger Position in the list.
struct Scanned {
    chunk: ReadChunk,
    next: Option<u32>,
}

/// Collects the segments at `position` (which must occur in `reads`) in one pass, checking that
/// they are adjacent and that their lengths fit in 32 bits, and finds the smallest Position
/// greater than `position`.
fn scan(reads: &ReadList<'_>, position: u32) -> Result<Scanned, ChunkError> {
    let mut first: Option<usize> = None;
    let mut segments = 0usize;
    let mut len = 0u64;
    let mut in_run = false;
    let mut next: Option<u32> = None;
    for (index, rs) in reads.iter().enumerate() {
        if rs.position == position {
            if first.is_none() {
                first = Some(index);
            } else if !in_run {
                return Err(ChunkError::NonAdjacentPosition { position, index });
            }
            in_run = true;
            segments += 1;
            len += rs.segment.length as u64;
        } else {
            in_run = false;
            if rs.position > position {
                next = Some(match next {
                    Some(n) if n <= rs.position => n,
                    _ => rs.position,
                });
            }
        }
    }
    let len = u32::try_from(len).map_err(|_| ChunkError::ChunkTooLong { position, len })?;
    Ok(Scanned {
        chunk: ReadChunk {
            position,
            first_segment: first.unwrap_or(0),
            segments,
            len,
        },
        next,
    })
}

#[inline]
fn pad_of(len: u32) -> u32 {
    (4 - (len % 4)) % 4
}

// ---------------------------------------------------------------------------------------------
// Responder: Write chunks and the Reply chunk.
// ---------------------------------------------------------------------------------------------

/// Where a DDP-eligible result goes (RFC 8166 §4.3.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultTarget<'a> {
    /// Into Write chunk `index` of the Call's Write list, and out of the reply's Payload stream.
    Chunk {
        /// The chunk's index in the Write list.
        index: usize,
        /// The chunk.
        chunk: Segments<'a>,
    },
    /// Inline, because Write chunk `index` is empty (count zero): the Requester asked for this
    /// result inline, and the Reply echoes the empty chunk (§4.3.2.3 MUST).
    InlineEmptyChunk {
        /// The empty chunk's index in the Write list.
        index: usize,
    },
    /// Inline, because the Write list has no chunk left for it (§4.3.2.1). If the reply is then
    /// too large it becomes a Long Reply (checklist D12).
    InlineNoChunk,
}

/// Pairs the DDP-eligible results of a reply with the Call's Write chunks: the i-th result goes
/// to the i-th Write chunk, until results or chunks run out (§4.3.2.1).
///
/// Yields one [`ResultTarget`] per result, in result order. [`ResultMatch::unused`] tells which
/// trailing Write chunks receive no result.
pub fn match_results(write_list: WriteList<'_>, n_results: usize) -> ResultMatch<'_> {
    let chunks = write_list.len();
    ResultMatch {
        chunks: write_list.iter(),
        index: 0,
        results: n_results,
        unused: n_results.min(chunks)..chunks,
    }
}

/// Iterator returned by [`match_results`].
#[derive(Clone, Debug)]
pub struct ResultMatch<'a> {
    chunks: WriteListIter<'a>,
    index: usize,
    results: usize,
    unused: Range<usize>,
}

impl ResultMatch<'_> {
    /// Indexes of the Write chunks that receive no result. The Reply echoes each of them with
    /// `echo_lengths(chunk, 0, ..)`: a non-empty one keeps its segment count with every length
    /// zero (an unused Write chunk, §4.3.2.2 MUST), an empty one stays empty (§4.3.2.3).
    pub fn unused(&self) -> Range<usize> {
        self.unused.clone()
    }
}

impl<'a> Iterator for ResultMatch<'a> {
    type Item = ResultTarget<'a>;

    fn next(&mut self) -> Option<ResultTarget<'a>> {
        if self.index >= self.results {
            return None;
        }
        let index = self.index;
        self.index += 1;
        Some(match self.chunks.next() {
            Some(chunk) if chunk.is_empty() => ResultTarget::InlineEmptyChunk { index },
            Some(chunk) => ResultTarget::Chunk { index, chunk },
            None => ResultTarget::InlineNoChunk,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.results - self.index;
        (n, Some(n))
    }
}

impl ExactSizeIterator for ResultMatch<'_> {}

/// Where the bytes of one item go in a Write chunk or the Reply chunk: the chunk is filled
/// contiguously, in segment array order, until the item has been written (§3.4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkFill<'a> {
    chunk: Segments<'a>,
    len: u32,
}

/// Plans writing a DDP-eligible result of `len` bytes into a Write chunk.
///
/// `len` is the result's encoded length **without** its XDR roundup padding: a Responder MUST
/// NOT write the pad, even into space the Requester provided for it (§3.4.6.2). Fails with
/// [`ChunkError::WriteChunkTooSmall`] when the chunk is shorter than `len`, and with
/// [`ChunkError::SegmentWraps`] when a segment of the chunk wraps past 2^64.
pub fn place_write(chunk: Segments<'_>, len: u32) -> Result<ChunkFill<'_>, ChunkError> {
    fill(chunk, len, |needed, capacity| {
        ChunkError::WriteChunkTooSmall { needed, capacity }
    })
}

/// Plans writing a Long Reply's Payload stream of `payload_len` bytes into the Reply chunk.
///
/// Unlike a Write chunk, the Reply chunk carries a Payload stream, so its content includes every
/// XDR pad (§3.5.3 MUST; checklist D10): `payload_len` is the whole (reduced) stream. Fails with
/// [`ChunkError::ReplyChunkTooSmall`] when the chunk is shorter (§4.5.3).
pub fn place_reply(
    reply_chunk: Segments<'_>,
    payload_len: u32,
) -> Result<ChunkFill<'_>, ChunkError> {
    fill(reply_chunk, payload_len, |needed, capacity| {
        ChunkError::ReplyChunkTooSmall { needed, capacity }
    })
}

/// The shared checks of [`place_write`] and [`place_reply`]: no segment wraps, and the chunk
/// holds `len` bytes (`too_small(needed, capacity)` otherwise).
fn fill(
    chunk: Segments<'_>,
    len: u32,
    too_small: fn(u64, u64) -> ChunkError,
) -> Result<ChunkFill<'_>, ChunkError> {
    check_wraps(&chunk)?;
    check_capacity(&chunk, len, too_small)?;
    Ok(ChunkFill { chunk, len })
}

/// Fails with `too_small(needed, capacity)` when the segments of `chunk` sum to fewer than `len`
/// bytes.
fn check_capacity(
    chunk: &Segments<'_>,
    len: u32,
    too_small: fn(u64, u64) -> ChunkError,
) -> Result<(), ChunkError> {
    let capacity = chunk.total_len();
    if len as u64 > capacity {
        return Err(too_small(len as u64, capacity));
    }
    Ok(())
}

impl<'a> ChunkFill<'a> {
    /// The chunk being filled.
    pub fn chunk(&self) -> Segments<'a> {
        self.chunk
    }

    /// Bytes written into the chunk.
    pub fn written(&self) -> u32 {
        self.len
    }

    /// The RDMA Writes to post, in segment array order: segments that receive no byte are
    /// skipped.
    pub fn placements(&self) -> Placements<'a> {
        Placements {
            segs: self.chunk,
            index: 0,
            src: 0,
            left: self.len,
        }
    }

    /// Writes into `out` the segments the Reply header echoes for this chunk: the same count,
    /// handles and offsets, each length set to the bytes written into that segment (§3.4.6 MUST,
    /// §4.3.3 MUST).
    pub fn echo<'o>(&self, out: &'o mut [Segment]) -> Result<&'o [Segment], ChunkError> {
        echo_into(self.chunk, self.len, out)
    }
}

/// One RDMA Write of a [`ChunkFill`]: bytes `src_offset..src_offset + len` of the item go to the
/// start of segment `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    /// Index of the segment in the chunk's array.
    pub index: usize,
    /// The segment as provisioned (its handle and offset address the target memory).
    pub segment: Segment,
    /// Offset in the item of the first byte to write.
    pub src_offset: u32,
    /// Bytes to write (at least 1, at most `segment.length`).
    pub len: u32,
}

/// Iterator over the [`Placement`]s of a [`ChunkFill`].
#[derive(Clone, Debug)]
pub struct Placements<'a> {
    segs: Segments<'a>,
    index: usize,
    src: u32,
    left: u32,
}

impl Iterator for Placements<'_> {
    type Item = Placement;

    fn next(&mut self) -> Option<Placement> {
        while self.left != 0 {
            let segment = self.segs.get(self.index)?;
            let index = self.index;
            self.index += 1;
            let len = segment.length.min(self.left);
            if len == 0 {
                continue;
            }
            let placement = Placement {
                index,
                segment,
                src_offset: self.src,
                len,
            };
            self.src += len;
            self.left -= len;
            return Some(placement);
        }
        None
    }
}

/// Writes into `out` the segments to echo in the Reply header for a Write chunk (or the Reply
/// chunk) into which `written` bytes were placed, and returns them.
///
/// The segment count, handles and offsets are copied; each length becomes the bytes written into
/// that segment, filling in array order (§3.4.6 MUST). With `written == 0` a non-empty chunk comes
/// back as an unused Write chunk, with the same count and every length zero (§4.3.2.2 MUST), and
/// an empty chunk comes back empty (§4.3.2.3 MUST). An unused Reply chunk is echoed the same way
/// (decision G-16).
///
/// Fails with [`ChunkError::WriteChunkTooSmall`] when `written` exceeds the chunk and with
/// [`ChunkError::EchoBufferTooSmall`] when `out` holds fewer segments than the chunk.
pub fn echo_lengths<'o>(
    chunk: Segments<'_>,
    written: u32,
    out: &'o mut [Segment],
) -> Result<&'o [Segment], ChunkError> {
    check_capacity(&chunk, written, |needed, capacity| {
        ChunkError::WriteChunkTooSmall { needed, capacity }
    })?;
    echo_into(chunk, written, out)
}

/// [`echo_lengths`] once the capacity is known to suffice.
fn echo_into<'o>(
    chunk: Segments<'_>,
    written: u32,
    out: &'o mut [Segment],
) -> Result<&'o [Segment], ChunkError> {
    let n = chunk.len();
    if out.len() < n {
        return Err(ChunkError::EchoBufferTooSmall {
            needed: n,
            available: out.len(),
        });
    }
    let mut left = written;
    for (slot, s) in out.iter_mut().zip(chunk.iter()) {
        let length = s.length.min(left);
        left -= length;
        *slot = Segment { length, ..s };
    }
    Ok(&out[..n])
}

fn check_wraps(chunk: &Segments<'_>) -> Result<(), ChunkError> {
    match chunk.iter().enumerate().find(|(_, s)| s.end().is_none()) {
        Some((index, segment)) => Err(ChunkError::SegmentWraps { index, segment }),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Requester: checking the Write list and Reply chunk of a received Reply.
// ---------------------------------------------------------------------------------------------

/// Why the Write list or Reply chunk echoed in a Reply does not match what the Call provisioned.
///
/// These are errors in a Reply's header or in its use of chunks: the Requester silently discards
/// the Reply (RFC 8166 §4.5) and never exposes bytes that were not written. `chunk` is the Write
/// chunk's index in the Write list; it is 0 for the Reply chunk and for a chunk checked alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnedError {
    /// The Reply's Write list holds more chunks than the Call provided.
    ExtraChunks {
        /// Chunks the Call provided.
        provisioned: usize,
        /// Chunks the Reply holds.
        returned: usize,
    },
    /// The Reply carries a Reply chunk although the Call provided none.
    UnexpectedReplyChunk,
    /// A returned chunk's segment count differs from the provisioned one (and is not the legacy
    /// count zero, decision G-17).
    SegmentCount {
        /// Index of the chunk.
        chunk: usize,
        /// Segments provisioned.
        provisioned: usize,
        /// Segments returned.
        returned: usize,
    },
    /// A returned segment length exceeds the provisioned length: never trusted (decision G-17).
    TooLong {
        /// Index of the chunk.
        chunk: usize,
        /// Index of the segment.
        segment: usize,
        /// Length provisioned.
        provisioned: u32,
        /// Length returned.
        returned: u32,
    },
    /// The bytes returned in a chunk do not match the length of the item the Reply's XDR gives
    /// for it: fewer than the item, or more than the item rounded up to four (decision G-4).
    ItemLength {
        /// The item's encoded length, from the Reply's Payload stream.
        item_len: u32,
        /// The bytes the chunk returned.
        returned: u64,
    },
}

impl fmt::Display for ReturnedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReturnedError::ExtraChunks {
                provisioned,
                returned,
            } => write!(
                f,
                "reply returns {returned} Write chunks but the call provided {provisioned}"
            ),
            ReturnedError::UnexpectedReplyChunk => {
                write!(f, "reply returns a Reply chunk the call did not provide")
            }
            ReturnedError::SegmentCount {
                chunk,
                provisioned,
                returned,
            } => write!(
                f,
                "chunk {chunk} returns {returned} segments but {provisioned} were provisioned"
            ),
            ReturnedError::TooLong {
                chunk,
                segment,
                provisioned,
                returned,
            } => write!(
                f,
                "chunk {chunk} segment {segment} returns {returned} bytes but {provisioned} were provisioned"
            ),
            ReturnedError::ItemLength { item_len, returned } => write!(
                f,
                "chunk returns {returned} bytes for an item of {item_len} bytes"
            ),
        }
    }
}

impl std::error::Error for ReturnedError {}

/// The shape of a chunk returned in a Reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReturnedForm {
    /// Some bytes were returned.
    Filled,
    /// No byte was returned: the provisioned count with every length zero (§4.3.2.2), or the
    /// legacy count zero for a non-empty provisioned chunk (IMPL §3.9; decision G-17).
    Unused,
    /// The chunk was provisioned empty and returned empty (§4.3.2.3).
    Empty,
    /// The Reply does not return the chunk: its Write list stops early, or it omits the Reply
    /// chunk (decisions G-16, G-17). Treated as returning no byte.
    Absent,
}

/// A returned chunk that passed [`check_returned`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReturnedChunk {
    /// Its shape.
    pub form: ReturnedForm,
    /// Bytes returned: the sum of the returned segment lengths.
    pub total: u64,
}

impl ReturnedChunk {
    /// Checks the returned bytes against the item's encoded length `item_len` read from the
    /// Reply's Payload stream and returns the bytes to expose: `item_len`.
    ///
    /// RFC 8166 requires the returned length to equal the item's (§3.4.6.2); RFC 5666 Responders
    /// add the roundup, so up to `roundup(item_len)` is tolerated (decision G-4). The pad bytes
    /// are never exposed (§2.2.4.2).
    pub fn item_len(&self, item_len: u32) -> Result<u32, ReturnedError> {
        let len = item_len as u64;
        if self.total < len || self.total > pad4_u64(len) {
            return Err(ReturnedError::ItemLength {
                item_len,
                returned: self.total,
            });
        }
        Ok(item_len)
    }
}

/// Checks one chunk echoed in a Reply against the segments the Call provisioned for it.
///
/// The returned count must equal the provisioned one, except that a legacy count of zero stands
/// for an unused chunk (IMPL §3.9; decision G-17); no returned segment may be longer than its
/// provisioned segment (decision G-17). Handles and offsets are not compared: the Requester
/// addresses its memory with its own copy of the segments and trusts only the lengths.
/// Errors name chunk 0; [`check_returned_write_list`] names the chunk's index.
pub fn check_returned(
    provisioned: &[Segment],
    returned: Segments<'_>,
) -> Result<ReturnedChunk, ReturnedError> {
    check_chunk(0, provisioned, returned)
}

fn check_chunk(
    chunk: usize,
    provisioned: &[Segment],
    returned: Segments<'_>,
) -> Result<ReturnedChunk, ReturnedError> {
    if returned.is_empty() {
        let form = if provisioned.is_empty() {
            ReturnedForm::Empty
        } else {
            ReturnedForm::Unused
        };
        return Ok(ReturnedChunk { form, total: 0 });
    }
    if returned.len() != provisioned.len() {
        return Err(ReturnedError::SegmentCount {
            chunk,
            provisioned: provisioned.len(),
            returned: returned.len(),
        });
    }
    let mut total = 0u64;
    for (segment, (r, p)) in returned.iter().zip(provisioned).enumerate() {
        if r.length > p.length {
            return Err(ReturnedError::TooLong {
                chunk,
                segment,
                provisioned: p.length,
                returned: r.length,
            });
        }
        total += r.length as u64;
    }
    let form = if total == 0 {
        ReturnedForm::Unused
    } else {
        ReturnedForm::Filled
    };
    Ok(ReturnedChunk { form, total })
}

/// Checks the Reply chunk slot of a Reply against the Reply chunk the Call provided.
///
/// A provided Reply chunk may come back echoed or absent (decision G-16); one that was not
/// provided must not come back. For a Long Reply, `total` is the length of the Payload stream in
/// the chunk.
pub fn check_returned_reply(
    provisioned: Option<&[Segment]>,
    returned: Option<Segments<'_>>,
) -> Result<ReturnedChunk, ReturnedError> {
    match (provisioned, returned) {
        (_, None) => Ok(ReturnedChunk {
            form: ReturnedForm::Absent,
            total: 0,
        }),
        (None, Some(_)) => Err(ReturnedError::UnexpectedReplyChunk),
        (Some(p), Some(r)) => check_chunk(0, p, r),
    }
}

/// Checks every chunk of a Reply's Write list against the Write chunks the Call provided.
///
/// The Reply must not return more chunks than were provided; a shorter list is tolerated, the
/// missing chunks being [`ReturnedForm::Absent`] (decision G-17). Each returned chunk is checked
/// as by [`check_returned`].
pub fn check_returned_write_list<'p, 'a>(
    provisioned: &'p [&'p [Segment]],
    returned: WriteList<'a>,
) -> Result<ReturnedList<'p, 'a>, ReturnedError> {
    if returned.len() > provisioned.len() {
        return Err(ReturnedError::ExtraChunks {
            provisioned: provisioned.len(),
            returned: returned.len(),
        });
    }
    for (i, (r, p)) in returned.iter().zip(provisioned).enumerate() {
        check_chunk(i, p, r)?;
    }
    Ok(ReturnedList {
        provisioned,
        returned,
    })
}

/// A Reply's Write list that passed [`check_returned_write_list`].
#[derive(Clone, Copy, Debug)]
pub struct ReturnedList<'p, 'a> {
    provisioned: &'p [&'p [Segment]],
    returned: WriteList<'a>,
}

impl ReturnedList<'_, '_> {
    /// Number of Write chunks the Call provided.
    pub fn provisioned(&self) -> usize {
        self.provisioned.len()
    }

    /// The returned form and length of Write chunk `i`, or `None` when the Call provided fewer
    /// chunks.
    pub fn get(&self, i: usize) -> Option<ReturnedChunk> {
        let p = self.provisioned.get(i)?;
        match self.returned.iter().nth(i) {
            Some(r) => check_chunk(i, p, r).ok(),
            None => Some(ReturnedChunk {
                form: ReturnedForm::Absent,
                total: 0,
            }),
        }
    }
}
