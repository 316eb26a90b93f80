//! Tests of `rpcrdma_proto::chunks`: Read-chunk reassembly (RFC 8166 §3.4.5), Write-chunk and
//! Reply-chunk placement (§3.4.6, §4.3.2, §4.3.3) and Requester-side checks (G-4, G-16, G-17).

use proptest::prelude::*;
use rpcrdma_proto::chunks::{
    check_returned, check_returned_reply, check_returned_write_list, echo_lengths, echo_write_list,
    match_results, place_reply, place_write, ChunkError, ChunkErrorClass, Piece, Placement,
    ReadChunk, ReadLimits, ReadPlan, ReassembleError, ResultTarget, ReturnedChunk, ReturnedError,
    ReturnedForm,
};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, ReadSegment, Segment};

// ----- helpers --------------------------------------------------------------------------------

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

// ----- Read chunks: RFC examples ---------------------------------------------------------------

#[test]
fn no_read_list_is_the_inline_payload() {
    let buf = encode(&[], &[], None);
    let v = view(&buf);
    let p = plan(40, &v).unwrap();
    assert_eq!(p.total_len(), 40);
    assert!(!p.is_long_call());
    assert_eq!(p.chunk_count(), 0);
    assert_eq!(pieces(&p), vec![inline_piece(0..40, 0)]);
    let inline = inline_bytes(40);
    let mut out = [0u8; 40];
    assert_eq!(p.reassemble(&inline, |_, _| panic!(), &mut out), Ok(40));
    assert_eq!(&out[..], &inline[..]);

    let p = plan(0, &v).unwrap();
    assert_eq!(p.total_len(), 0);
    assert_eq!(pieces(&p), vec![]);
}

/// §3.4.5, §3.4.5.2: an NFSv3 WRITE. 100 bytes of RPC header and arguments, the data's 4-byte
/// count, then 4097 data bytes reduced at Position 104 without their 3-byte pad (SHOULD NOT
/// include it). The unreduced stream is 104 + 4097 + 3 = 4204 bytes.
#[test]
fn write_data_at_end_without_pad() {
    let buf = encode(&[rs(104, 0, 4097)], &[], None);
    let v = view(&buf);
    let p = plan(104, &v).unwrap();
    assert_eq!(p.total_len(), 4204);
    assert_eq!(p.chunk_count(), 1);
    assert_eq!(
        pieces(&p),
        vec![inline_piece(0..104, 0), chunk_piece(0, 1, 4097, 104, 3)]
    );
    let inline = inline_bytes(104);
    let mut log = Vec::new();
    let mut out = vec![0xEEu8; 4300];
    assert_eq!(
        p.reassemble(&inline, pattern_fetch(&mut log), &mut out),
        Ok(4204)
    );
    assert_eq!(log, vec![(0, 4097)]);
    assert_eq!(&out[..104], &inline[..]);
    assert_eq!(&out[104..4201], &seg_bytes(0, 4097)[..]);
    assert_eq!(&out[4201..4204], &[0, 0, 0], "the pad is rebuilt as zeros");
    assert_eq!(out[4204], 0xEE, "nothing is written past the stream");
}

/// §3.4.5.2: "The sender can increase the length of the chunk by adding another RDMA segment
/// containing only the roundup padding, or it can do so by extending the final RDMA segment".
/// Both give the same 4204-byte stream; the chunk has no pad of its own.
#[test]
fn write_data_with_pad_in_the_chunk() {
    // Pad as an extra segment.
    let buf = encode(&[rs(104, 0, 4097), rs(104, 1, 3)], &[], None);
    let v = view(&buf);
    let p = plan(104, &v).unwrap();
    assert_eq!(p.total_len(), 4204);
    assert_eq!(
        pieces(&p),
        vec![inline_piece(0..104, 0), chunk_piece(0, 2, 4100, 104, 0)]
    );
    let inline = inline_bytes(104);
    let mut out = vec![0u8; 4204];
    let data = seg_bytes(0, 4097);
    let fetch = |i: usize, b: &mut [u8]| match i {
        0 => b.copy_from_slice(&data),
        1 => b.fill(0),
        _ => panic!("segment {i}"),
    };
    assert_eq!(p.reassemble(&inline, fetch, &mut out), Ok(4204));
    assert_eq!(&out[104..4201], &data[..]);
    assert_eq!(&out[4201..], &[0, 0, 0]);

    // Pad by extending the final segment.
    let buf = encode(&[rs(104, 0, 4100)], &[], None);
    let v = view(&buf);
    let p = plan(104, &v).unwrap();
    assert_eq!(p.total_len(), 4204);
    assert_eq!(
        pieces(&p),
        vec![inline_piece(0..104, 0), chunk_piece(0, 1, 4100, 104, 0)]
    );
}

/// IMPL §3.7 / checklist D8: an NFSv4 WRITE in the middle of a COMPOUND. Inline content after
/// the chunk resumes at the next 4-aligned unreduced position; the chunk's pad is never in the
/// inline buffer. Inline: 64 bytes before the data, 12 after (a GETATTR); data: 5 bytes.
#[test]
fn inline_resumes_after_the_chunk_pad() {
    let buf = encode(&[rs(64, 0, 5)], &[], None);
    let v = view(&buf);
    let p = plan(76, &v).unwrap();
    assert_eq!(p.total_len(), 64 + 8 + 12);
    assert_eq!(
        pieces(&p),
        vec![
            inline_piece(0..64, 0),
            chunk_piece(0, 1, 5, 64, 3),
            inline_piece(64..76, 72),
        ]
    );
    let inline = inline_bytes(76);
    let mut out = [0xEEu8; 84];
    p.reassemble(&inline, |_, b| b.copy_from_slice(b"hello"), &mut out)
        .unwrap();
    let mut expected = inline[..64].to_vec();
    expected.extend_from_slice(b"hello\0\0\0");
    expected.extend_from_slice(&inline[64..]);
    assert_eq!(&out[..], &expected[..]);
}

/// §3.4.5: segments of one chunk are concatenated in list order; lengths need not be aligned.
#[test]
fn multi_segment_chunk_is_concatenated_in_list_order() {
    let buf = encode(&[rs(8, 0, 3), rs(8, 1, 5), rs(8, 2, 2)], &[], None);
    let v = view(&buf);
    let p = plan(12, &v).unwrap();
    assert_eq!(p.total_len(), 8 + 12 + 4);
    assert_eq!(
        pieces(&p),
        vec![
            inline_piece(0..8, 0),
            chunk_piece(0, 3, 10, 8, 2),
            inline_piece(8..12, 20),
        ]
    );
    let inline = inline_bytes(12);
    let mut log = Vec::new();
    let mut out = [0u8; 24];
    p.reassemble(&inline, pattern_fetch(&mut log), &mut out)
        .unwrap();
    assert_eq!(log, vec![(0, 3), (1, 5), (2, 2)]);
    let mut expected = inline[..8].to_vec();
    expected.extend(seg_bytes(0, 3));
    expected.extend(seg_bytes(1, 5));
    expected.extend(seg_bytes(2, 2));
    expected.extend([0, 0]);
    expected.extend_from_slice(&inline[8..]);
    assert_eq!(&out[..], &expected[..]);
}

/// G-8: Positions may come in any order; pieces come out in stream order and keep their list
/// indexes.
#[test]
fn positions_in_any_order() {
    let buf = encode(&[rs(40, 0, 8), rs(40, 1, 4), rs(8, 2, 4)], &[], None);
    let v = view(&buf);
    let p = plan(36, &v).unwrap();
    // inline 0..8 | chunk@8 (4) | inline 8..36 -> 12..40 | chunk@40 (12) | nothing left
    assert_eq!(p.total_len(), 52);
    assert_eq!(
        pieces(&p),
        vec![
            inline_piece(0..8, 0),
            chunk_piece(2, 1, 4, 8, 0),
            inline_piece(8..36, 12),
            chunk_piece(0, 2, 12, 40, 0),
        ]
    );
    let inline = inline_bytes(36);
    let mut out = [0u8; 52];
    let mut log = Vec::new();
    p.reassemble(&inline, pattern_fetch(&mut log), &mut out)
        .unwrap();
    assert_eq!(log, vec![(2, 4), (0, 8), (1, 4)]);
    assert_eq!(&out[12..40], &inline[8..36]);
}

/// Two chunks back to back (the second starts at the first's padded end) and a chunk at the very
/// end of the inline payload.
#[test]
fn adjacent_chunks_and_chunk_at_the_end() {
    let buf = encode(&[rs(8, 0, 5), rs(16, 1, 4), rs(28, 2, 1)], &[], None);
    let v = view(&buf);
    let p = plan(16, &v).unwrap();
    assert_eq!(
        pieces(&p),
        vec![
            inline_piece(0..8, 0),
            chunk_piece(0, 1, 5, 8, 3),
            chunk_piece(1, 1, 4, 16, 0),
            inline_piece(8..16, 20),
            chunk_piece(2, 1, 1, 28, 3),
        ]
    );
    assert_eq!(p.total_len(), 32);
}

/// A chunk of length zero (an empty opaque reduced) takes no room; the inline stream continues.
#[test]
fn zero_length_chunk() {
    let buf = encode(&[rs(8, 0, 0)], &[], None);
    let v = view(&buf);
    let p = plan(12, &v).unwrap();
    assert_eq!(p.total_len(), 12);
    assert_eq!(
        pieces(&p),
        vec![
            inline_piece(0..8, 0),
            chunk_piece(0, 1, 0, 8, 0),
            inline_piece(8..12, 8),
        ]
    );
    let mut out = [0u8; 12];
    let inline = inline_bytes(12);
    p.reassemble(
        &inline,
        |_, _| panic!("empty segments are not fetched"),
        &mut out,
    )
    .unwrap();
    assert_eq!(&out[..], &inline[..]);
}

/// §3.5.3, IMPL §3.4 (checklist D2, E10): a Long Call whose Position-Zero chunk has several
/// segments carries the whole Payload stream, XDR pads included.
#[test]
fn position_zero_multi_segment_long_call() {
    let buf = encode(&[rs(0, 0, 100), rs(0, 1, 60), rs(0, 2, 40)], &[], None);
    let v = view(&buf);
    let p = plan(0, &v).unwrap();
    assert!(p.is_long_call());
    assert_eq!(p.chunk_count(), 1);
    assert_eq!(p.total_len(), 200);
    assert_eq!(p.reduced_len(), 200);
    assert_eq!(
        p.position_zero(),
        Some(ReadChunk {
            position: 0,
            first_segment: 0,
            segments: 3,
            len: 200,
        })
    );
    assert_eq!(pieces(&p), vec![inline_piece(0..200, 0)]);
    let mut out = [0u8; 200];
    let mut log = Vec::new();
    assert_eq!(
        p.reassemble(&[], pattern_fetch(&mut log), &mut out),
        Ok(200)
    );
    assert_eq!(log, vec![(0, 100), (1, 60), (2, 40)]);
    let mut expected = seg_bytes(0, 100);
    expected.extend(seg_bytes(1, 60));
    expected.extend(seg_bytes(2, 40));
    assert_eq!(&out[..], &expected[..]);
}

/// IMPL §3.5.1 (checklist D5): a Long Call with a DDP chunk besides the Position-Zero chunk. The
/// Position-Zero content is the reduced stream; the chunk at Position 32 is reinserted into it.
#[test]
fn position_zero_with_another_chunk() {
    // The DDP chunk is listed first: any order (G-8).
    let buf = encode(&[rs(32, 0, 10), rs(0, 1, 20), rs(0, 2, 28)], &[], None);
    let v = view(&buf);
    let p = plan(0, &v).unwrap();
    assert!(p.is_long_call());
    assert_eq!(p.chunk_count(), 2);
    assert_eq!(p.reduced_len(), 48);
    assert_eq!(p.total_len(), 48 + 12);
    assert_eq!(
        pieces(&p),
        vec![
            inline_piece(0..32, 0),
            chunk_piece(0, 1, 10, 32, 2),
            inline_piece(32..48, 44),
        ]
    );
    let mut reduced = seg_bytes(1, 20);
    reduced.extend(seg_bytes(2, 28));
    let mut expected = reduced[..32].to_vec();
    expected.extend(seg_bytes(0, 10));
    expected.extend([0, 0]);
    expected.extend_from_slice(&reduced[32..]);
    let mut out = [0xEEu8; 64];
    let mut log = Vec::new();
    assert_eq!(p.reassemble(&[], pattern_fetch(&mut log), &mut out), Ok(60));
    assert_eq!(&out[..60], &expected[..]);
    assert_eq!(&out[60..], &[0xEE; 4]);
}

/// G-7 / IMPL §3.6: a Position-Zero chunk beside an inline payload (RDMA_MSG) is ERR_CHUNK.
#[test]
fn position_zero_with_inline_payload_is_err_chunk() {
    let buf = encode(&[rs(0, 0, 100)], &[], None);
    let v = view(&buf);
    let e = plan(28, &v).unwrap_err();
    assert_eq!(e, ChunkError::PositionZeroWithInline { inline_len: 28 });
    assert_eq!(e.class(), ChunkErrorClass::ErrChunk);
}

#[test]
fn locate_maps_offsets_to_pieces() {
    let buf = encode(&[rs(64, 0, 5)], &[], None);
    let v = view(&buf);
    let p = plan(76, &v).unwrap();
    assert_eq!(p.locate(0), Some(inline_piece(0..64, 0)));
    assert_eq!(p.locate(63), Some(inline_piece(0..64, 0)));
    assert_eq!(p.locate(64), Some(chunk_piece(0, 1, 5, 64, 3)));
    assert_eq!(p.locate(71), Some(chunk_piece(0, 1, 5, 64, 3)), "pad");
    assert_eq!(p.locate(72), Some(inline_piece(64..76, 72)));
    assert_eq!(p.locate(83), Some(inline_piece(64..76, 72)));
    assert_eq!(p.locate(84), None);
}

#[test]
fn reassemble_checks_its_buffers() {
    let buf = encode(&[rs(8, 0, 4)], &[], None);
    let v = view(&buf);
    let p = plan(8, &v).unwrap();
    let mut out = [0u8; 11];
    assert_eq!(
        p.reassemble(&[0; 7], |_, _| {}, &mut out),
        Err(ReassembleError::InlineLength {
            expected: 8,
            actual: 7
        })
    );
    assert_eq!(
        p.reassemble(&[0; 8], |_, _| {}, &mut out),
        Err(ReassembleError::OutputTooSmall {
            needed: 12,
            available: 11
        })
    );
}

// ----- Read chunks: hostile lists --------------------------------------------------------------

/// Plans `reads`, carried in an RDMA_MSG header, against `inline_len` inline bytes under
/// `limits`; `Ok` holds the length of the unreduced Payload stream.
fn plan_reads_with(
    inline_len: usize,
    reads: &[ReadSegment],
    limits: ReadLimits,
) -> Result<u32, ChunkError> {
    let buf = encode(reads, &[], None);
    ReadPlan::new(inline_len, view(&buf).read_list(), limits).map(|p| p.total_len())
}

/// [`plan_reads_with`] under the default limits.
fn plan_reads(inline_len: usize, reads: &[ReadSegment]) -> Result<u32, ChunkError> {
    plan_reads_with(inline_len, reads, ReadLimits::default())
}

/// Asserts that planning `reads` fails with `expected`, of class `class`.
fn assert_plan_err(
    inline_len: usize,
    reads: &[ReadSegment],
    expected: ChunkError,
    class: ChunkErrorClass,
) {
    let e = plan_reads(inline_len, reads).unwrap_err();
    assert_eq!(e, expected);
    assert_eq!(e.class(), class);
}

#[test]
fn misaligned_position_is_err_chunk() {
    assert_plan_err(
        64,
        &[rs(8, 0, 4), rs(6, 1, 4)],
        ChunkError::MisalignedPosition {
            index: 1,
            position: 6,
        },
        ChunkErrorClass::ErrChunk,
    );
}

/// A chunk that starts inside the preceding chunk's padded extent is a payload mismatch.
#[test]
fn overlapping_chunks_are_garbage_args() {
    // Chunk at 8 of 10 bytes ends at 8 + roundup(10) = 20; a chunk at 16 overlaps it.
    assert_plan_err(
        64,
        &[rs(8, 0, 10), rs(16, 1, 4)],
        ChunkError::Overlap {
            position: 16,
            previous_end: 20,
        },
        ChunkErrorClass::GarbageArgs,
    );
    // The pad counts: a chunk at 16 after a 5-byte chunk at 12 (padded end 20) overlaps too.
    assert_eq!(
        plan_reads(64, &[rs(12, 0, 5), rs(16, 1, 4)]),
        Err(ChunkError::Overlap {
            position: 16,
            previous_end: 20
        })
    );
    // At 20 it is fine.
    assert!(plan_reads(64, &[rs(12, 0, 5), rs(20, 1, 4)]).is_ok());
}

#[test]
fn position_past_the_stream_is_garbage_args() {
    // Inline 8 bytes: a chunk may sit at 8 (appended at the end) but not at 12.
    assert_eq!(plan_reads(8, &[rs(8, 0, 4)]), Ok(12));
    assert_plan_err(
        8,
        &[rs(12, 0, 4)],
        ChunkError::PositionOutOfRange {
            position: 12,
            reachable: 8,
        },
        ChunkErrorClass::GarbageArgs,
    );
    // Reachability accounts for earlier chunks: inline 8, chunk@4 (4 bytes) -> the stream can
    // reach 12; a second chunk at 16 is out of range.
    assert_eq!(
        plan_reads(8, &[rs(4, 0, 4), rs(16, 1, 4)]),
        Err(ChunkError::PositionOutOfRange {
            position: 16,
            reachable: 12
        })
    );
    // RDMA_NOMSG (no inline payload) with only a non-zero Position: nothing to insert it into.
    assert_eq!(
        plan_reads(0, &[rs(4, 0, 4)]),
        Err(ChunkError::PositionOutOfRange {
            position: 4,
            reachable: 0
        })
    );
}

#[test]
fn segment_wrapping_past_2_64_is_err_chunk() {
    let wraps = ReadSegment::new(8, 7, 4, u64::MAX - 2);
    assert_plan_err(
        64,
        &[rs(8, 0, 4), wraps],
        ChunkError::SegmentWraps {
            index: 1,
            segment: wraps.segment,
        },
        ChunkErrorClass::ErrChunk,
    );
    // Ending exactly at 2^64 - 1 does not wrap.
    assert!(plan_reads(64, &[ReadSegment::new(8, 7, 3, u64::MAX - 3)]).is_ok());
}

#[test]
fn chunk_lengths_summing_past_2_32_are_err_chunk() {
    assert_plan_err(
        64,
        &[rs(8, 0, 0x8000_0000), rs(8, 1, 0x8000_0000)],
        ChunkError::ChunkTooLong {
            position: 8,
            len: 1 << 32,
        },
        ChunkErrorClass::ErrChunk,
    );
    // A sum of u32::MAX fits a chunk, but Position 8 + roundup(u32::MAX) is past 2^32.
    assert_plan_err(
        64,
        &[rs(8, 0, 0x8000_0000), rs(8, 1, 0x7FFF_FFFF)],
        ChunkError::StreamTooLong {
            len: 8 + (1 << 32),
            max: u32::MAX,
        },
        ChunkErrorClass::ErrChunk,
    );
}

#[test]
fn unreduced_stream_past_u32_max_is_err_chunk() {
    // A chunk ending at 0xFFFF_FFF8, followed by 7 or 8 inline bytes.
    let buf = encode(&[rs(4, 0, 0xFFFF_FFF4)], &[], None);
    let v = view(&buf);
    let p = plan(11, &v).unwrap();
    assert_eq!(p.total_len(), u32::MAX);
    assert_eq!(
        pieces(&p),
        vec![
            inline_piece(0..4, 0),
            chunk_piece(0, 1, 0xFFFF_FFF4, 4, 0),
            inline_piece(4..11, 0xFFFF_FFF8),
        ]
    );
    let e = plan(12, &v).unwrap_err();
    assert_eq!(
        e,
        ChunkError::StreamTooLong {
            len: 1 << 32,
            max: u32::MAX
        }
    );
    assert_eq!(e.class(), ChunkErrorClass::ErrChunk);
}

#[test]
fn local_stream_limit() {
    let limits = ReadLimits {
        max_stream_len: 1000,
        ..ReadLimits::default()
    };
    assert_eq!(plan_reads_with(100, &[rs(100, 0, 900)], limits), Ok(1000));
    assert_eq!(
        plan_reads_with(101, &[rs(100, 0, 900)], limits),
        Err(ChunkError::StreamTooLong {
            len: 1001,
            max: 1000
        })
    );
    assert_eq!(
        plan_reads_with(100, &[rs(100, 0, 901)], limits),
        Err(ChunkError::StreamTooLong {
            len: 1004,
            max: 1000
        })
    );
}

/// Chunk `k` (of `n`) at Position 8k + 4 with 4 bytes; 4 inline bytes before each.
fn many_positions(n: u32) -> Vec<ReadSegment> {
    (0..n).map(|k| rs(8 * k + 4, k, 4)).collect()
}

#[test]
fn a_thousand_distinct_positions() {
    let buf = encode(&many_positions(1000), &[], None);
    let v = view(&buf);
    let e = plan(4000, &v).unwrap_err();
    assert_eq!(e, ChunkError::TooManyChunks { max: 64 });
    assert_eq!(e.class(), ChunkErrorClass::ErrChunk);

    // With a limit that admits them, the plan is exact.
    let limits = ReadLimits {
        max_chunks: 1000,
        ..ReadLimits::default()
    };
    let p = ReadPlan::new(4000, v.read_list(), limits).unwrap();
    assert_eq!(p.chunk_count(), 1000);
    assert_eq!(p.total_len(), 8000);
    let ps = pieces(&p);
    assert_eq!(ps.len(), 2000);
    assert_eq!(ps[1998], inline_piece(3996..4000, 7992));
    assert_eq!(ps[1999], chunk_piece(999, 1, 4, 7996, 0));
    let inline = inline_bytes(4000);
    let mut out = vec![0u8; 8000];
    let mut log = Vec::new();
    p.reassemble(&inline, pattern_fetch(&mut log), &mut out)
        .unwrap();
    assert_eq!(log.len(), 1000);
    assert_eq!(&out[7996..], &seg_bytes(999, 4)[..]);

    // In reverse list order too (positions in any order).
    let mut rev = many_positions(1000);
    rev.reverse();
    let buf = encode(&rev, &[], None);
    let v = view(&buf);
    let p = ReadPlan::new(4000, v.read_list(), limits).unwrap();
    assert_eq!(p.total_len(), 8000);
    assert_eq!(p.pieces().nth(1), Some(chunk_piece(999, 1, 4, 4, 0)));
}

#[test]
fn chunk_limit_boundary() {
    let limits = |max_chunks| ReadLimits {
        max_chunks,
        ..ReadLimits::default()
    };
    assert!(plan_reads_with(4 * 65, &many_positions(65), limits(65)).is_ok());
    assert_eq!(
        plan_reads_with(4 * 65, &many_positions(65), limits(64)),
        Err(ChunkError::TooManyChunks { max: 64 })
    );
    assert!(plan_reads(4 * 64, &many_positions(64)).is_ok());
    // A limit of zero refuses any read list but accepts an empty one.
    assert_eq!(
        plan_reads_with(8, &many_positions(64), limits(0)),
        Err(ChunkError::TooManyChunks { max: 0 })
    );
    assert!(plan_reads_with(8, &[], limits(0)).is_ok());
}

#[test]
fn non_adjacent_duplicate_positions_are_err_chunk() {
    assert_plan_err(
        64,
        &[rs(8, 0, 4), rs(16, 1, 4), rs(8, 2, 4)],
        ChunkError::NonAdjacentPosition {
            position: 8,
            index: 2,
        },
        ChunkErrorClass::ErrChunk,
    );
    // Position Zero too.
    assert_eq!(
        plan_reads(0, &[rs(0, 0, 4), rs(16, 1, 4), rs(0, 2, 4)]),
        Err(ChunkError::NonAdjacentPosition {
            position: 0,
            index: 2
        })
    );
}

/// ERR_CHUNK-class errors win over GARBAGE_ARGS-class ones, wherever they are in the list.
#[test]
fn header_errors_take_precedence_over_payload_errors() {
    // Overlap (16 inside 8..20), then a non-adjacent repeat of 24.
    let list = [
        rs(8, 0, 10),
        rs(16, 1, 4),
        rs(24, 2, 4),
        rs(28, 3, 4),
        rs(24, 4, 4),
    ];
    assert_eq!(
        plan_reads(64, &list),
        Err(ChunkError::NonAdjacentPosition {
            position: 24,
            index: 4
        })
    );
    // Out of range, then a chunk whose end passes 2^32.
    assert!(matches!(
        plan_reads(8, &[rs(400, 0, 4), rs(800, 1, u32::MAX)]),
        Err(ChunkError::StreamTooLong { .. })
    ));
    // Out of range, then too many chunks.
    assert_eq!(
        plan_reads(0, &many_positions(70)),
        Err(ChunkError::TooManyChunks { max: 64 })
    );
}

#[test]
fn error_classes() {
    use ChunkError::*;
    let s = Segment::default();
    let err_chunk = [
        MisalignedPosition {
            index: 0,
            position: 1,
        },
        NonAdjacentPosition {
            position: 0,
            index: 0,
        },
        SegmentWraps {
            index: 0,
            segment: s,
        },
        ChunkTooLong {
            position: 0,
            len: 0,
        },
        StreamTooLong { len: 0, max: 0 },
        TooManyChunks { max: 0 },
        PositionZeroWithInline { inline_len: 0 },
        WriteChunkTooSmall {
            needed: 0,
            capacity: 0,
        },
        ReplyChunkTooSmall {
            needed: 0,
            capacity: 0,
        },
        EchoBufferTooSmall {
            needed: 0,
            available: 0,
        },
    ];
    for e in err_chunk {
        assert_eq!(e.class(), ChunkErrorClass::ErrChunk, "{e:?}");
        assert!(!e.to_string().is_empty());
    }
    let garbage = [
        PositionOutOfRange {
            position: 0,
            reachable: 0,
        },
        Overlap {
            position: 0,
            previous_end: 0,
        },
    ];
    for e in garbage {
        assert_eq!(e.class(), ChunkErrorClass::GarbageArgs, "{e:?}");
        assert!(!e.to_string().is_empty());
    }
}

// ----- Write chunks and the Reply chunk (Responder) -------------------------------------------

/// §3.4.6: fill contiguously, in segment array order; echo each length as written.
#[test]
fn write_fill_across_segments() {
    let chunk = [seg(1, 100), seg(2, 50), seg(3, 200)];
    let buf = encode(&[], &[&chunk], None);
    let v = view(&buf);
    let c = v.write_list().iter().next().unwrap();
    let fill = place_write(c, 180).unwrap();
    assert_eq!(fill.written(), 180);
    let ps: Vec<Placement> = fill.placements().collect();
    assert_eq!(
        ps,
        vec![
            Placement {
                index: 0,
                segment: chunk[0],
                src_offset: 0,
                len: 100
            },
            Placement {
                index: 1,
                segment: chunk[1],
                src_offset: 100,
                len: 50
            },
            Placement {
                index: 2,
                segment: chunk[2],
                src_offset: 150,
                len: 30
            },
        ]
    );
    let mut out = [Segment::default(); 3];
    let echoed = fill.echo(&mut out).unwrap();
    assert_eq!(
        echoed,
        &[
            seg(1, 100),
            seg(2, 50),
            Segment::new(3, 30, chunk[2].offset)
        ]
    );
    let mut out2 = [Segment::default(); 4];
    assert_eq!(echo_lengths(c, 180, &mut out2).unwrap(), echoed);

    // Exactly full, and one byte too many.
    assert_eq!(place_write(c, 350).unwrap().placements().count(), 3);
    assert_eq!(
        place_write(c, 351),
        Err(ChunkError::WriteChunkTooSmall {
            needed: 351,
            capacity: 350
        })
    );
    assert_eq!(
        echo_lengths(c, 351, &mut out),
        Err(ChunkError::WriteChunkTooSmall {
            needed: 351,
            capacity: 350
        })
    );
    assert_eq!(
        echo_lengths(c, 1, &mut out[..2]),
        Err(ChunkError::EchoBufferTooSmall {
            needed: 3,
            available: 2
        })
    );
}

/// Segments of length zero, and those after the data ends, get no RDMA Write.
#[test]
fn write_fill_skips_empty_segments() {
    let chunk = [seg(1, 0), seg(2, 10), seg(3, 0), seg(4, 10), seg(5, 10)];
    let buf = encode(&[], &[&chunk], None);
    let v = view(&buf);
    let c = v.write_list().iter().next().unwrap();
    let fill = place_write(c, 15).unwrap();
    let ps: Vec<(usize, u32, u32)> = fill
        .placements()
        .map(|p| (p.index, p.src_offset, p.len))
        .collect();
    assert_eq!(ps, vec![(1, 0, 10), (3, 10, 5)]);
    let mut out = [Segment::default(); 5];
    let lens: Vec<u32> = fill
        .echo(&mut out)
        .unwrap()
        .iter()
        .map(|s| s.length)
        .collect();
    assert_eq!(lens, vec![0, 10, 0, 5, 0]);
}

/// §3.4.6.2: the Responder MUST NOT write the pad even when the Requester made room for it; the
/// echoed length is the item's length.
#[test]
fn write_fill_never_writes_the_pad() {
    let chunk = [seg(1, 8)];
    let buf = encode(&[], &[&chunk], None);
    let v = view(&buf);
    let c = v.write_list().iter().next().unwrap();
    let fill = place_write(c, 5).unwrap();
    assert_eq!(
        fill.placements().map(|p| p.len).collect::<Vec<_>>(),
        vec![5]
    );
    let mut out = [Segment::default(); 1];
    assert_eq!(fill.echo(&mut out).unwrap()[0].length, 5);
}

/// §4.3.2.2: an unused Write chunk is echoed with the same count and every length zero;
/// §4.3.2.3: an empty Write chunk is echoed empty.
#[test]
fn unused_and_empty_write_chunks() {
    let chunk = [seg(1, 100), seg(2, 50)];
    let buf = encode(&[], &[&chunk, &[]], None);
    let v = view(&buf);
    let mut it = v.write_list().iter();
    let (used, empty) = (it.next().unwrap(), it.next().unwrap());
    let mut out = [seg(9, 9); 2];
    assert_eq!(
        echo_lengths(used, 0, &mut out).unwrap(),
        &[
            Segment::new(1, 0, chunk[0].offset),
            Segment::new(2, 0, chunk[1].offset)
        ]
    );
    assert_eq!(place_write(used, 0).unwrap().placements().count(), 0);
    assert_eq!(echo_lengths(empty, 0, &mut out).unwrap(), &[]);
    assert_eq!(echo_lengths(empty, 0, &mut []).unwrap(), &[]);
    assert_eq!(
        place_write(empty, 1),
        Err(ChunkError::WriteChunkTooSmall {
            needed: 1,
            capacity: 0
        })
    );
}

#[test]
fn write_chunk_segment_wrapping_is_err_chunk() {
    let chunk = [seg(1, 10), Segment::new(2, 16, u64::MAX - 8)];
    let buf = encode(&[], &[&chunk], None);
    let v = view(&buf);
    let c = v.write_list().iter().next().unwrap();
    let e = place_write(c, 4).unwrap_err();
    assert_eq!(
        e,
        ChunkError::SegmentWraps {
            index: 1,
            segment: chunk[1]
        }
    );
    assert_eq!(e.class(), ChunkErrorClass::ErrChunk);
}

/// §4.3.2.1, §4.3.2.2, §4.3.2.3: the i-th result goes to the i-th chunk; an empty chunk sends
/// its result inline; results beyond the list go inline; chunks beyond the results are unused.
#[test]
fn results_are_matched_to_write_chunks_in_order() {
    let a = [seg(1, 4096), seg(2, 4096)];
    let c = [seg(3, 100)];
    let d = [seg(4, 100)];
    let buf = encode(&[], &[&a, &[], &c, &d], None);
    let v = view(&buf);
    let wl = v.write_list();
    let chunks: Vec<_> = wl.iter().collect();

    let m = match_results(wl, 2);
    assert_eq!(m.unused(), 2..4);
    assert_eq!(m.len(), 2);
    assert_eq!(
        m.collect::<Vec<_>>(),
        vec![
            ResultTarget::Chunk {
                index: 0,
                chunk: chunks[0]
            },
            ResultTarget::InlineEmptyChunk { index: 1 },
        ]
    );

    let m = match_results(wl, 5);
    assert_eq!(m.unused(), 4..4);
    assert_eq!(
        m.collect::<Vec<_>>(),
        vec![
            ResultTarget::Chunk {
                index: 0,
                chunk: chunks[0]
            },
            ResultTarget::InlineEmptyChunk { index: 1 },
            ResultTarget::Chunk {
                index: 2,
                chunk: chunks[2]
            },
            ResultTarget::Chunk {
                index: 3,
                chunk: chunks[3]
            },
            ResultTarget::InlineNoChunk,
        ]
    );

    // No result: every chunk is unused.
    let m = match_results(wl, 0);
    assert_eq!(m.unused(), 0..4);
    assert_eq!(m.count(), 0);

    // Empty Write list: every result inline.
    let buf = encode(&[], &[], None);
    let v = view(&buf);
    let m = match_results(v.write_list(), 1);
    assert_eq!(m.unused(), 0..0);
    assert_eq!(m.collect::<Vec<_>>(), vec![ResultTarget::InlineNoChunk]);
}

/// §3.5.3: the Reply chunk carries the whole reduced Payload stream, pads included.
#[test]
fn reply_chunk_placement() {
    let reply = [seg(7, 1024), seg(8, 1024)];
    let buf = encode(&[], &[], Some(&reply));
    let v = view(&buf);
    let r = v.reply_chunk().unwrap();
    let fill = place_reply(r, 2000).unwrap();
    assert_eq!(
        fill.placements()
            .map(|p| (p.index, p.src_offset, p.len))
            .collect::<Vec<_>>(),
        vec![(0, 0, 1024), (1, 1024, 976)]
    );
    let mut out = [Segment::default(); 2];
    assert_eq!(
        fill.echo(&mut out).unwrap(),
        &[seg(7, 1024), Segment::new(8, 976, reply[1].offset)]
    );
    assert_eq!(fill.chunk(), r);
    let e = place_reply(r, 2052).unwrap_err();
    assert_eq!(
        e,
        ChunkError::ReplyChunkTooSmall {
            needed: 2052,
            capacity: 2048
        }
    );
    assert_eq!(e.class(), ChunkErrorClass::ErrChunk);
    // An unused Reply chunk is echoed with zero lengths (G-16).
    assert!(echo_lengths(r, 0, &mut out)
        .unwrap()
        .iter()
        .all(|s| s.length == 0));
}

// ----- Requester: checking what the Reply returned --------------------------------------------

#[test]
fn returned_write_chunk_is_checked_against_provisioning() {
    let provisioned = [seg(1, 100), seg(2, 100)];
    let check = |lens: &[u32]| {
        let segs: Vec<Segment> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| seg(i as u32 + 1, l))
            .collect();
        let buf = encode(&[], &[&segs], None);
        let v = view(&buf);
        let c = v.write_list().iter().next().unwrap();
        check_returned(&provisioned, c)
    };
    assert_eq!(
        check(&[100, 30]),
        Ok(ReturnedChunk {
            form: ReturnedForm::Filled,
            total: 130
        })
    );
    assert_eq!(
        check(&[0, 0]),
        Ok(ReturnedChunk {
            form: ReturnedForm::Unused,
            total: 0
        })
    );
    // Legacy form: count zero for an unused chunk (G-17).
    assert_eq!(
        check(&[]),
        Ok(ReturnedChunk {
            form: ReturnedForm::Unused,
            total: 0
        })
    );
    // Longer than provisioned: never trusted (G-17).
    assert_eq!(
        check(&[100, 101]),
        Err(ReturnedError::TooLong {
            chunk: 0,
            segment: 1,
            provisioned: 100,
            returned: 101
        })
    );
    assert_eq!(
        check(&[10]),
        Err(ReturnedError::SegmentCount {
            chunk: 0,
            provisioned: 2,
            returned: 1
        })
    );
}

/// G-4: the returned length must be the item's; up to roundup(item) is tolerated.
#[test]
fn returned_length_against_item_length() {
    let r = |total| ReturnedChunk {
        form: ReturnedForm::Filled,
        total,
    };
    assert_eq!(r(126).item_len(126), Ok(126));
    assert_eq!(r(128).item_len(126), Ok(126), "RFC 5666 roundup");
    assert_eq!(
        r(129).item_len(126),
        Err(ReturnedError::ItemLength {
            item_len: 126,
            returned: 129
        })
    );
    assert_eq!(
        r(125).item_len(126),
        Err(ReturnedError::ItemLength {
            item_len: 126,
            returned: 125
        })
    );
    assert_eq!(r(128).item_len(128), Ok(128));
    assert!(r(132).item_len(128).is_err());
    assert_eq!(r(0).item_len(0), Ok(0));
    assert!(r(u32::MAX as u64 + 1).item_len(u32::MAX).is_ok());
}

#[test]
fn returned_write_list() {
    let a = [seg(1, 100)];
    let b = [seg(2, 50), seg(3, 50)];
    let provisioned: [&[Segment]; 3] = [&a, &[], &b];

    // Chunk 0 filled, chunk 1 empty, chunk 2 unused.
    let r0 = [seg(1, 60)];
    let r2 = [seg(2, 0), seg(3, 0)];
    let buf = encode(&[], &[&r0, &[], &r2], None);
    let v = view(&buf);
    let list = check_returned_write_list(&provisioned, v.write_list()).unwrap();
    assert_eq!(list.provisioned(), 3);
    assert_eq!(
        list.get(0),
        Some(ReturnedChunk {
            form: ReturnedForm::Filled,
            total: 60
        })
    );
    assert_eq!(list.get(1).unwrap().form, ReturnedForm::Empty);
    assert_eq!(list.get(2).unwrap().form, ReturnedForm::Unused);
    assert_eq!(list.get(3), None);

    // A shorter list is tolerated; the missing chunks are absent.
    let buf = encode(&[], &[&r0], None);
    let v = view(&buf);
    let list = check_returned_write_list(&provisioned, v.write_list()).unwrap();
    assert_eq!(list.get(2).unwrap().form, ReturnedForm::Absent);
    assert!(list.get(2).unwrap().item_len(1).is_err());

    // More chunks than provided.
    let buf = encode(&[], &[&r0, &[], &r2, &r0], None);
    let v = view(&buf);
    assert_eq!(
        check_returned_write_list(&provisioned, v.write_list()).unwrap_err(),
        ReturnedError::ExtraChunks {
            provisioned: 3,
            returned: 4
        }
    );

    // Errors name the chunk.
    let bad = [seg(2, 50), seg(3, 51)];
    let buf = encode(&[], &[&r0, &[], &bad], None);
    let v = view(&buf);
    assert_eq!(
        check_returned_write_list(&provisioned, v.write_list()).unwrap_err(),
        ReturnedError::TooLong {
            chunk: 2,
            segment: 1,
            provisioned: 50,
            returned: 51
        }
    );
    // A provisioned empty chunk that comes back with segments.
    let buf = encode(&[], &[&r0, &r0], None);
    let v = view(&buf);
    assert_eq!(
        check_returned_write_list(&provisioned, v.write_list()).unwrap_err(),
        ReturnedError::SegmentCount {
            chunk: 1,
            provisioned: 0,
            returned: 1
        }
    );
}

/// G-16: a provided Reply chunk may come back echoed or absent; an unprovided one may not.
#[test]
fn returned_reply_chunk() {
    let provisioned = [seg(7, 1024), seg(8, 1024)];
    let returned = [seg(7, 1024), seg(8, 500)];
    let buf = encode(&[], &[], Some(&returned));
    let v = view(&buf);
    assert_eq!(
        check_returned_reply(Some(&provisioned), v.reply_chunk()),
        Ok(ReturnedChunk {
            form: ReturnedForm::Filled,
            total: 1524
        })
    );
    assert_eq!(
        check_returned_reply(None, v.reply_chunk()),
        Err(ReturnedError::UnexpectedReplyChunk)
    );
    assert_eq!(
        check_returned_reply(Some(&provisioned), None).unwrap().form,
        ReturnedForm::Absent
    );
    assert_eq!(
        check_returned_reply(None, None).unwrap().form,
        ReturnedForm::Absent
    );
    let too_long = [seg(7, 1025), seg(8, 0)];
    let buf = encode(&[], &[], Some(&too_long));
    let v = view(&buf);
    assert!(matches!(
        check_returned_reply(Some(&provisioned), v.reply_chunk()),
        Err(ReturnedError::TooLong { segment: 0, .. })
    ));
    for e in [
        ReturnedError::UnexpectedReplyChunk,
        ReturnedError::ExtraChunks {
            provisioned: 1,
            returned: 2,
        },
    ] {
        assert!(!e.to_string().is_empty());
    }
}

// ----- property tests -------------------------------------------------------------------------

/// An XDR item of a generated Call.
#[derive(Clone, Debug)]
enum Item {
    /// A 4-byte word.
    Word(u32),
    /// Variable-length opaque data: count word, bytes, zero pad. `reduce` moves the bytes into a
    /// Read chunk, `with_pad` includes the pad in the chunk, `cuts` splits it into segments.
    Opaque {
        data: Vec<u8>,
        reduce: bool,
        with_pad: bool,
        cuts: Vec<usize>,
    },
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        any::<u32>().prop_map(Item::Word),
        (
            prop::collection::vec(any::<u8>(), 0..40),
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(0usize..48, 0..4),
        )
            .prop_map(|(data, reduce, with_pad, cuts)| Item::Opaque {
                data,
                reduce,
                with_pad,
                cuts,
            }),
    ]
}

/// Splits `bytes` into segments at the given cut points (sorted, clamped); always at least one.
fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0;
    for p in points {
        out.push(bytes[at..p].to_vec());
        at = p;
    }
    out.push(bytes[at..].to_vec());
    out
}

/// A generated Call: the unreduced stream, the reduced stream, and the Read chunks as
/// (Position, segment contents) in the order they will be listed.
struct Reduction {
    unreduced: Vec<u8>,
    reduced: Vec<u8>,
    chunks: Vec<GenChunk>,
}

/// A generated Read chunk: its Position and the contents of its segments.
type GenChunk = (u32, Vec<Vec<u8>>);

fn reduce(items: &[Item]) -> Reduction {
    let mut unreduced = Vec::new();
    let mut reduced = Vec::new();
    let mut chunks = Vec::new();
    for it in items {
        match it {
            Item::Word(w) => {
                unreduced.extend_from_slice(&w.to_be_bytes());
                reduced.extend_from_slice(&w.to_be_bytes());
            }
            Item::Opaque {
                data,
                reduce,
                with_pad,
                cuts,
            } => {
                let count = (data.len() as u32).to_be_bytes();
                unreduced.extend_from_slice(&count);
                reduced.extend_from_slice(&count);
                let position = unreduced.len() as u32;
                let pad = (4 - data.len() % 4) % 4;
                let mut padded = data.clone();
                padded.resize(data.len() + pad, 0);
                unreduced.extend_from_slice(&padded);
                if *reduce {
                    let content = if *with_pad { &padded[..] } else { &data[..] };
                    chunks.push((position, split(content, cuts)));
                } else {
                    reduced.extend_from_slice(&padded);
                }
            }
        }
    }
    Reduction {
        unreduced,
        reduced,
        chunks,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// For every valid reduction, reassembly reproduces the unreduced stream exactly: as an
    /// RDMA_MSG (reduced stream inline) and as a Long Call (reduced stream in a Position-Zero
    /// chunk beside the DDP chunks), with chunks listed in any order.
    #[test]
    fn reassembly_reproduces_the_unreduced_stream(
        items in prop::collection::vec(item(), 0..12),
        order in prop::collection::vec(any::<u32>(), 12),
        long in any::<bool>(),
        p0_cuts in prop::collection::vec(0usize..200, 0..4),
        p0_first in any::<bool>(),
    ) {
        let r = reduce(&items);
        let mut chunks = r.chunks.clone();
        // Shuffle the chunks' list order (segments of a chunk stay together).
        let mut keyed: Vec<(u32, GenChunk)> =
            chunks.drain(..).enumerate().map(|(i, c)| (order[i % order.len()], c)).collect();
        keyed.sort_by_key(|(k, _)| *k);
        let mut chunks: Vec<GenChunk> = keyed.into_iter().map(|(_, c)| c).collect();
        let inline: Vec<u8> = if long {
            let p0 = (0u32, split(&r.reduced, &p0_cuts));
            if p0_first { chunks.insert(0, p0) } else { chunks.push(p0) }
            Vec::new()
        } else {
            r.reduced.clone()
        };
        let mut list = Vec::new();
        let mut contents: Vec<Vec<u8>> = Vec::new();
        for (position, segs) in &chunks {
            for s in segs {
                let i = list.len() as u32;
                list.push(ReadSegment::new(*position, i, s.len() as u32, 0x1000 * i as u64));
                contents.push(s.clone());
            }
        }
        let buf = encode(&list, &[], None);
        let v = view(&buf);
        let limits = ReadLimits { max_chunks: 1000, ..ReadLimits::default() };
        let p = ReadPlan::new(inline.len(), v.read_list(), limits).unwrap();
        prop_assert_eq!(p.is_long_call(), long);
        prop_assert_eq!(p.total_len() as usize, r.unreduced.len());
        prop_assert_eq!(p.reduced_len(), r.reduced.len());
        let mut out = vec![0xA5u8; r.unreduced.len() + 8];
        let n = p.reassemble(&inline, |i, b| b.copy_from_slice(&contents[i]), &mut out).unwrap();
        prop_assert_eq!(n, r.unreduced.len());
        prop_assert_eq!(&out[..n], &r.unreduced[..]);
        prop_assert!(out[n..].iter().all(|&b| b == 0xA5));
    }

    /// ReadPlan never panics on arbitrary lists; whenever it accepts one, its pieces tile the
    /// unreduced stream, their inline sources tile the reduced stream, and reassembly works.
    #[test]
    fn read_plan_never_panics(
        raw in prop::collection::vec(
            (
                prop_oneof![
                    Just(0u32),
                    (0u32..16).prop_map(|k| 4 * k),
                    0u32..64,
                    any::<u32>(),
                    Just(u32::MAX - 3),
                ],
                prop_oneof![0u32..24, any::<u32>(), Just(u32::MAX), Just(0x8000_0000)],
                prop_oneof![0u64..4096, any::<u64>(), Just(u64::MAX - 7)],
            ),
            0..24,
        ),
        inline_len in prop_oneof![0usize..80, any::<u32>().prop_map(|v| v as usize)],
        max_chunks in 0usize..12,
        max_stream_len in prop_oneof![Just(u32::MAX), any::<u32>()],
    ) {
        let list: Vec<ReadSegment> = raw
            .iter()
            .enumerate()
            .map(|(i, &(p, l, o))| ReadSegment::new(p, i as u32, l, o))
            .collect();
        let buf = encode(&list, &[], None);
        let v = view(&buf);
        let limits = ReadLimits { max_chunks, max_stream_len };
        let Ok(p) = ReadPlan::new(inline_len, v.read_list(), limits) else {
            return Ok(());
        };
        prop_assert!(p.total_len() <= max_stream_len);
        prop_assert!(p.chunk_count() <= max_chunks);
        let mut dst = 0u64;
        let mut src = 0usize;
        for piece in p.pieces() {
            prop_assert_eq!(piece.dst() as u64, dst);
            if let Piece::Inline { src: ref s, .. } = piece {
                prop_assert_eq!(s.start, src);
                prop_assert!(s.end > s.start);
                src = s.end;
            }
            dst += piece.span() as u64;
        }
        prop_assert_eq!(dst, p.total_len() as u64);
        prop_assert_eq!(src, p.reduced_len());
        if p.total_len() <= 1 << 16 && p.inline_len() <= 1 << 16 {
            let inline = vec![7u8; p.inline_len()];
            let mut out = vec![0u8; p.total_len() as usize];
            let got = p.reassemble(&inline, |i, b| b.fill(i as u8), &mut out);
            prop_assert_eq!(got, Ok(p.total_len() as usize));
        }
    }

    /// `echo_write_list` writes the Write list entries the encoder writes for the segments
    /// `echo_lengths` gives, chunk by chunk (unused chunks: every length zero), and refuses
    /// a chunk said to hold more than it can, or an output too short.
    #[test]
    fn the_direct_write_list_echo_matches_the_encoder(
        writes in prop::collection::vec(
            prop::collection::vec(
                (any::<u32>(), prop_oneof![0u32..600, Just(0), any::<u32>()], any::<u64>()),
                0..5,
            ),
            1..5,
        ),
        fractions in prop::collection::vec((0u32..=100, any::<bool>()), 0..5),
    ) {
        let writes: Vec<Vec<Segment>> = writes
            .iter()
            .map(|c| c.iter().map(|&(h, l, o)| Segment::new(h, l, o)).collect())
            .collect();
        let slices: Vec<&[Segment]> = writes.iter().map(|c| c.as_slice()).collect();
        let call = encode(&[], &slices, None);
        let view = HeaderView::parse(&call).unwrap();
        let wl = view.write_list();
        // What each chunk was filled with: a fraction of its capacity, or one byte too many.
        let mut written = Vec::new();
        let mut over = false;
        for (c, &(pct, too_many)) in writes.iter().zip(&fractions) {
            let cap: u64 = c.iter().map(|s| u64::from(s.length)).sum();
            let n = (cap.min(u64::from(u32::MAX)) * u64::from(pct) / 100) as u32;
            if too_many && cap < u64::from(u32::MAX) {
                written.push(cap as u32 + 1);
                over = true;
            } else {
                written.push(n);
            }
        }
        let len = wl.encoded_len() - 4;
        let mut out = vec![0xa5u8; len + 4];
        let got = echo_write_list(wl, &written, &mut out);
        if over {
            prop_assert_eq!(got, None);
            return Ok(());
        }
        prop_assert_eq!(got, Some(len));
        prop_assert_eq!(&out[len..], &[0xa5u8; 4][..]);
        let mut echoes: Vec<Vec<Segment>> = Vec::new();
        for (k, c) in wl.iter().enumerate() {
            let mut e = vec![Segment::default(); c.len()];
            let n = echo_lengths(c, written.get(k).copied().unwrap_or(0), &mut e).unwrap().len();
            echoes.push(e[..n].to_vec());
        }
        let echo_slices: Vec<&[Segment]> = echoes.iter().map(|c| c.as_slice()).collect();
        let reply = encode(&[], &echo_slices, None);
        // The entries sit after the fixed words and the empty Read list's zero.
        prop_assert_eq!(&out[..len], &reply[20..20 + len]);
        prop_assert_eq!(echo_write_list(wl, &written, &mut out[..len - 1]), None);
    }
}
