//! Read chunks: hostile lists (ERR_CHUNK and GARBAGE_ARGS, limits, error precedence).

use rpcrdma_proto::chunks::{ChunkError, ChunkErrorClass, ReadLimits, ReadPlan};
use rpcrdma_proto::header::{ReadSegment, Segment};

use super::{
    chunk_piece, encode, inline_bytes, inline_piece, pattern_fetch, pieces, plan, rs, seg_bytes,
    view,
};

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
