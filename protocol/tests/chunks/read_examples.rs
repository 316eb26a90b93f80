//! Read chunks: the RFC's examples (RFC 8166 §3.4.5, §3.5.3), and the plan's `locate` and
//! `reassemble` checks.

use rpcrdma_proto::chunks::{ChunkError, ChunkErrorClass, ReadChunk, ReassembleError};

use super::{
    chunk_piece, encode, inline_bytes, inline_piece, pattern_fetch, pieces, plan, rs, seg_bytes,
    view,
};

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
