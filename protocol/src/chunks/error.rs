//! Why a set of chunks cannot be used ([`ChunkError`]), and which answer a Responder gives to a
//! Call that carries it ([`ChunkErrorClass`]: RDMA_ERROR with ERR_CHUNK or an RPC GARBAGE_ARGS
//! reply, RFC 8166 §4.5.2).

use crate::header::Segment;
use core::fmt;

#[cfg(doc)]
use super::{echo_lengths, ReadLimits};

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
    /// [module documentation](super#error-classes)).
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
