//! Tests of `rpcrdma_proto::chunks`: Read-chunk reassembly (RFC 8166 §3.4.5), Write-chunk and
//! Reply-chunk placement (§3.4.6, §4.3.2, §4.3.3) and Requester-side checks (G-4, G-16, G-17).
//!
//! By concern: `read_examples` (Read chunks: the RFC's examples), `read_hostile` (Read
//! chunks: hostile lists), `write_reply` (Write chunks and the Reply chunk, Responder side),
//! `returned` (Requester side: checking what the Reply returned), `props` (property tests);
//! the helpers they share are here.

mod props;
mod read_examples;
mod read_hostile;
mod returned;
mod write_reply;

use rpcrdma_proto::chunks::{ChunkError, Piece, ReadLimits, ReadPlan};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, ReadSegment, Segment};

/// Encodes an RDMA_MSG header carrying the given lists.
fn encode(reads: &[ReadSegment], writes: &[&[Segment]], reply: Option<&[Segment]>) -> Vec<u8> {
    let h = Header::msg(
        0x1234_5678,
        32,
        Chunks {
            reads,
            writes,
            reply,
        },
    );
    let mut buf = vec![0u8; h.encoded_len()];
    assert_eq!(h.encode(&mut buf).unwrap(), buf.len());
    buf
}

fn view(buf: &[u8]) -> HeaderView<'_> {
    HeaderView::parse(buf).unwrap()
}

/// A read segment whose handle is its intended list index, so fetches can be checked.
fn rs(position: u32, handle: u32, length: u32) -> ReadSegment {
    ReadSegment::new(position, handle, length, 0x1000 * handle as u64)
}

fn seg(handle: u32, length: u32) -> Segment {
    Segment::new(handle, length, 0x10_0000 * handle as u64)
}

/// Bytes `0..len` of a recognisable pattern for read segment `i`.
fn seg_bytes(i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (i as u8).wrapping_mul(31) ^ (k as u8))
        .collect()
}

/// A fetch callback serving `seg_bytes` and recording what was asked.
fn pattern_fetch(log: &mut Vec<(usize, usize)>) -> impl FnMut(usize, &mut [u8]) + '_ {
    move |i, buf| {
        log.push((i, buf.len()));
        buf.copy_from_slice(&seg_bytes(i, buf.len()));
    }
}

fn plan<'a>(inline_len: usize, v: &HeaderView<'a>) -> Result<ReadPlan<'a>, ChunkError> {
    ReadPlan::new(inline_len, v.read_list(), ReadLimits::default())
}

fn pieces(p: &ReadPlan<'_>) -> Vec<Piece> {
    p.pieces().collect()
}

fn inline_piece(src: std::ops::Range<usize>, dst: u32) -> Piece {
    Piece::Inline { src, dst }
}

fn chunk_piece(first_segment: usize, segments: usize, len: u32, dst: u32, pad: u32) -> Piece {
    Piece::Chunk {
        first_segment,
        segments,
        len,
        dst,
        pad,
    }
}

fn inline_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|k| 0x80 | (k as u8 & 0x7f)).collect()
}
