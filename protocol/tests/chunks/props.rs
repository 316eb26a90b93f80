//! Property tests: reassembly of generated reductions, `ReadPlan` on arbitrary lists, the direct
//! Write-list echo against the encoder.

use proptest::prelude::*;
use rpcrdma_proto::chunks::{echo_lengths, echo_write_list, Piece, ReadLimits, ReadPlan};
use rpcrdma_proto::header::{HeaderView, ReadSegment, Segment};

use super::{encode, view};

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

    /// A list of one segment: `ReadPlan::one_chunk` plans exactly the ones at a Position
    /// other than zero that `new` accepts, and makes the same plan, whatever the limits.
    #[test]
    fn one_chunk_plans_as_new_does(
        position in prop_oneof![
            Just(0u32),
            (0u32..40).prop_map(|k| 4 * k),
            0u32..160,
            any::<u32>(),
            Just(u32::MAX - 3),
        ],
        length in prop_oneof![0u32..24, any::<u32>(), Just(u32::MAX), Just(u32::MAX - 2)],
        offset in prop_oneof![0u64..4096, any::<u64>(), Just(u64::MAX - 7)],
        inline_len in prop_oneof![0usize..160, any::<u32>().prop_map(|v| v as usize)],
        max_chunks in prop_oneof![Just(ReadLimits::DEFAULT_MAX_CHUNKS), 0usize..3],
        max_stream_len in prop_oneof![Just(u32::MAX), 0u32..256, any::<u32>()],
    ) {
        let list = [ReadSegment::new(position, 7, length, offset)];
        let buf = encode(&list, &[], None);
        let v = view(&buf);
        let limits = ReadLimits { max_chunks, max_stream_len };
        let planned = ReadPlan::new(inline_len, v.read_list(), limits).ok();
        let one = ReadPlan::one_chunk(inline_len, v.read_list(), limits);
        prop_assert_eq!(one, planned.filter(|_| position != 0));
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
