//! One Read chunk of a received read list, [`ReadChunk`] (the run of consecutive read
//! segments sharing a Position, RFC 8166 §3.4.5), and the scan that finds one in a list.
//!
//! It is the floor under the rest of the Read side: the plan (`read`) and the iterator over
//! the pieces it lays out (`pieces`) both scan the list for chunks, so the scan is here and
//! `pieces` needs nothing from `read`.

use super::error::ChunkError;
use crate::header::ReadList;
use core::ops::Range;

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

/// One Read chunk found by [`scan`], and the next larger Position in the list.
pub(super) struct Scanned {
    pub(super) chunk: ReadChunk,
    pub(super) next: Option<u32>,
}

/// Collects the segments at `position` (which must occur in `reads`) in one pass, checking that
/// they are adjacent and that their lengths fit in 32 bits, and finds the smallest Position
/// greater than `position`.
pub(super) fn scan(reads: &ReadList<'_>, position: u32) -> Result<Scanned, ChunkError> {
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
