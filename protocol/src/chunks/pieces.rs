//! The pieces of an unreduced Payload stream in stream order: inline bytes of the reduced
//! stream and Read chunks with their XDR pads (RFC 8166 §3.4.4.4, §3.4.5.2), and the iterator
//! that lays them out.

use super::read_chunk::{scan, ReadChunk};
use crate::header::ReadList;
use core::ops::Range;

#[cfg(doc)]
use super::ReadPlan;

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

/// Iterator over the [`Piece`]s of a [`ReadPlan`], in stream order.
#[derive(Clone, Debug)]
pub struct Pieces<'a> {
    pub(super) reads: ReadList<'a>,
    pub(super) reduced_len: usize,
    /// Position of the next chunk to lay out (never zero).
    pub(super) next: Option<u32>,
    /// A chunk whose preceding inline gap was just returned.
    pub(super) pending: Option<ReadChunk>,
    pub(super) dst: u32,
    pub(super) src: usize,
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
