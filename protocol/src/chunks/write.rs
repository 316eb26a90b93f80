//! The Responder building a Reply: which DDP-eligible result goes into which Write chunk
//! (RFC 8166 §4.3.2.1), where its bytes go in a Write chunk or the Reply chunk (§3.4.6, §3.5.3),
//! and what to echo in the Reply header (§3.4.6, §4.3.2.2, §4.3.2.3).

use super::error::ChunkError;
use crate::header::{Segment, Segments, WriteList, WriteListIter, SEGMENT_LEN};
use core::ops::Range;

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

/// Writes at the start of `out` the entries of the Write list a Reply echoes (RFC 8166
/// §3.4.6, §4.3.2.2): for each chunk of the Call's `writes`, its discriminator, its segment
/// count, and each segment with its handle and offset and, as its length, the bytes written
/// into it when `written[k]` bytes went into chunk `k` (filling in array order; a chunk
/// past `written` is unused, every length zero). The list's terminating zero is not
/// written. Returns the bytes written: `writes.encoded_len() - 4`.
///
/// The bytes the header encoder writes for the segments [`echo_lengths`] gives (tested in
/// `tests/chunks/props.rs`), without building them first: the responder's fast path for Calls
/// whose only chunks are Write chunks. `None`, with `out` unspecified, when `out` is
/// shorter than the entries or a chunk is shorter than what was written into it.
pub fn echo_write_list(writes: WriteList<'_>, written: &[u32], out: &mut [u8]) -> Option<usize> {
    let entries = writes.entries();
    let len = entries.len();
    let out = out.get_mut(..len)?;
    // The discriminators, counts, handles and offsets as the Call gave them; then each
    // segment's length (its second word) set to the bytes written into it.
    out.copy_from_slice(entries);
    let mut at = 0;
    for (k, chunk) in writes.iter().enumerate() {
        let mut left = written.get(k).copied().unwrap_or(0);
        if u64::from(left) > chunk.total_len() {
            return None;
        }
        // The chunk's discriminator and segment count.
        at += 8;
        for s in chunk.iter() {
            let length = s.length.min(left);
            left -= length;
            out[at + 4..at + 8].copy_from_slice(&length.to_be_bytes());
            at += SEGMENT_LEN;
        }
    }
    Some(len)
}
