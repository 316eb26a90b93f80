//! Write chunks and the Reply chunk, Responder side (§3.4.6, §4.3.2, §3.5.3).

use rpcrdma_proto::chunks::{
    echo_lengths, match_results, place_reply, place_write, ChunkError, ChunkErrorClass, Placement,
    ResultTarget,
};
use rpcrdma_proto::header::Segment;

use super::{encode, seg, view};

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
