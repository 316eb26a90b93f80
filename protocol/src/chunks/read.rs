//! The Read side of a received Call: how its unreduced Payload stream is rebuilt from the
//! reduced stream and the Read chunks (RFC 8166 §3.4.4, §3.4.5, §3.5.3): [`ReadPlan`], its
//! [`ReadLimits`] and [`PlanSummary`], and the reassembly. The chunks themselves, and the scan
//! that finds one, are in `read_chunk`; the pieces the plan lays out in `pieces`.

use super::error::ChunkError;
use super::pieces::{Piece, Pieces};
use super::read_chunk::{scan, ReadChunk};
use crate::header::ReadList;
use crate::xdr::pad4_u64;
use core::fmt;
use core::ops::Range;

#[cfg(doc)]
use super::error::ChunkErrorClass;

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
/// its Read chunks (§3.4.5; see the [module documentation](super#the-unreduced-stream)).
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

    /// The plan [`new`](Self::new) makes of a read list of exactly one segment at a
    /// Position other than zero (an RDMA_MSG with one Read chunk: how an NFS WRITE's data
    /// arrives, RFC 8267 §4.3), without `new`'s passes over the list: `Some` exactly when
    /// `new` accepts such a list, with the same plan (property test in
    /// `tests/chunks/props.rs`); `None` for any other list or any error, which `new` then
    /// names.
    #[inline]
    pub fn one_chunk(inline_len: usize, reads: ReadList<'a>, limits: ReadLimits) -> Option<Self> {
        if reads.len() != 1 || limits.max_chunks == 0 {
            return None;
        }
        let rs = reads.get(0)?;
        let (p, len) = (rs.position, rs.segment.length);
        rs.segment.end()?;
        if p == 0 || p & 3 != 0 || p as usize > inline_len {
            return None;
        }
        // Checked in `new`'s order of effect: the chunk's end, then the whole stream.
        let end = p as u64 + pad4_u64(u64::from(len));
        let total = end + (inline_len - p as usize) as u64;
        if end > u64::from(limits.max_stream_len) || total > u64::from(limits.max_stream_len) {
            return None;
        }
        Some(ReadPlan {
            reads,
            inline_len,
            reduced_len: inline_len,
            total_len: total as u32,
            chunks: 1,
            position_zero: None,
            first_position: Some(p),
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
