//! Calls whose Payload stream was pulled: resumed from their summary, answered bare by
//! `reply::short_pulled`, laid out at their source's alignment.

use super::*;

/// A chunked or Long Call answered from the summary its pull left (`RecvSlot::judged`) gets
/// the answer it gets when judged again.
#[test]
fn resumed_chunked_calls_are_answered_as_judged_ones() {
    use rpcrdma_proto::header::{ReadSegment, Segment};
    let (_client, mut s) = server();
    let xid = 0x77;
    let rpc = CallHeader::new(xid, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut head = vec![0u8; 40];
    rpc.encode(&mut head).unwrap();
    // Arguments: SUCCESS, 16 bytes of results, then a 100-byte opaque in a Read chunk.
    for w in [0u32, 16, 100] {
        head.extend_from_slice(&w.to_be_bytes());
    }
    let mut stream = head.clone();
    stream.extend_from_slice(&[0xab; 100]);
    stream.extend_from_slice(&[0; 4]);
    let chunk = [ReadSegment::new(52, 0x1234, 100, 0x1000)];
    let p0 = [ReadSegment::new(0, 0x1234, stream.len() as u32, 0x1000)];
    let reply = [Segment::new(0x99, 4096, 0x8000)];
    let chunked = |reply: Option<&[Segment]>| {
        let chunks = Chunks {
            reads: &chunk,
            writes: &[],
            reply,
        };
        let h = Header::msg(xid, 3, chunks);
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        m.extend_from_slice(&head);
        m
    };
    let long = {
        let chunks = Chunks {
            reads: &p0,
            writes: &[],
            reply: Some(&reply),
        };
        let h = Header::nomsg(xid, 3, chunks);
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        m
    };
    // The rkey to invalidate: the Reply chunk's, else the Read list's (RFC 8797 §4.1).
    for (call, rkey) in [
        (chunked(None), 0x1234),
        (chunked(Some(&reply)), 0x99),
        (long, 0x99),
    ] {
        let summary = verdict::judge_call(&call).expect("accepted").summary();
        view::bytes_mut(&mut s.pull[0])[..stream.len()].copy_from_slice(&stream);
        let mut answers = Vec::new();
        for judged in [None, Some(summary)] {
            s.io.tally = Tally::default();
            let g = General {
                at: Answering {
                    grant: 5,
                    swi: true,
                    ..Answering::of(&s.credits, &s.negotiation, &s.dispatch)
                },
                pull: stream_area(&s.pull[0], 0),
                recv_size: 4096,
                judged,
                wire: s.io.wire,
            };
            let built = answer_general(
                &mut s.io,
                &mut s.ring[2],
                &call,
                &mut s.bulk[0],
                &g,
                &mut s.echo,
                &mut HandlerContext::handler(s.id),
            );
            let (b, bytes) = sent(&built, &s.ring[2]);
            answers.push((b, bytes, core::mem::take(&mut s.io.tally)));
        }
        assert_eq!(answers[0], answers[1]);
        // A reply carrying the 16 bytes of results, invalidating the Call's rkey.
        let (len, inv) = answers[0].0.expect("a reply");
        assert!(len >= 28 + 24 + 16);
        assert_eq!(inv, Some(rkey));
    }
}

/// The Short-reply fast path's answer (in ring slot 0) to the pulled Call `call`, whose
/// stream is the first `len` bytes of pull buffer 0, invalidating `inv`; `None` when it
/// declines.
fn fast_pulled(
    s: &mut ServerConn<Soft>,
    call: &[u8],
    len: usize,
    inv: Option<u32>,
) -> Option<Observed> {
    observe(s, 0, |s| {
        let at = Answering {
            grant: 5,
            ..Answering::of(&s.credits, &s.negotiation, &s.dispatch)
        };
        reply::short_pulled(
            &mut s.io,
            &mut s.ring[0],
            reply::PulledCall {
                call,
                stream: view::bytes(&s.pull[0], len),
                inv,
            },
            &at,
            &mut s.bulk[0],
            &mut HandlerContext::handler(s.id),
        )
    })
}

/// A pulled Call (a Read chunk, or a Long Call's Position-Zero chunk) without Write list
/// or Reply chunk: the Short-reply fast path answers it from the pull buffer with the
/// general path's bytes, length, invalidation (its first Read handle, when both ends set
/// R) and counters, for every outcome, results and inline DDP results up to past the
/// threshold; it declines a stream whose RPC XID is another.
#[test]
fn pulled_calls_without_write_or_reply_chunks_answer_as_the_general_path() {
    use rpcrdma_proto::header::ReadSegment;
    let (_client, mut s) = server();
    let threshold = s.negotiation.reply_threshold();
    let mut taken = 0;
    let mut refused = 0;
    for swi in [false, true] {
        for long in [false, true] {
            for (proc_num, outcome, len, n) in [ECHOISH, BULKY]
                .into_iter()
                .flat_map(|p| (0u32..5).map(move |o| (p, o)))
                .flat_map(|(p, o)| {
                    [(0u32, 0u32), (12, 5), (64, threshold - 100), (4, 70_000)]
                        .map(|(l, n)| (p, o, l, n))
                })
            {
                let xid = 0x3300 + taken;
                let rpc =
                    CallHeader::new(xid, PROG, 1, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE);
                let mut stream = vec![0u8; rpc.encoded_len()];
                rpc.encode(&mut stream).unwrap();
                for w in [outcome, len, n, 100] {
                    stream.extend_from_slice(&w.to_be_bytes());
                }
                let at = stream.len() as u32;
                stream.extend_from_slice(&[0xab; 100]);
                let (header, chunk) = if long {
                    let p0 = [ReadSegment::new(0, 0x4321, stream.len() as u32, 0x1000)];
                    let h = Header::nomsg(
                        xid,
                        3,
                        Chunks {
                            reads: &p0,
                            writes: &[],
                            reply: None,
                        },
                    );
                    let mut m = vec![0u8; h.encoded_len()];
                    h.encode(&mut m).unwrap();
                    (m, 0x4321)
                } else {
                    let rs = [ReadSegment::new(at, 0x1234, 100, 0x1000)];
                    let h = Header::msg(
                        xid,
                        3,
                        Chunks {
                            reads: &rs,
                            writes: &[],
                            reply: None,
                        },
                    );
                    let mut m = vec![0u8; h.encoded_len()];
                    h.encode(&mut m).unwrap();
                    m.extend_from_slice(&stream[..at as usize]);
                    (m, 0x1234)
                };
                let summary = verdict::judge_call(&header).expect("accepted").summary();
                view::bytes_mut(&mut s.pull[0])[..stream.len()].copy_from_slice(&stream);
                // The fast path in ring slot 0; the general path, resumed from the
                // summary, in ring slot 1.
                let inv = swi.then_some(chunk);
                let f = fast_pulled(&mut s, &header, stream.len(), inv)
                    .expect("taken by the fast path");
                let g = general_as(&mut s, &header, 5, swi, Some(summary));
                let what =
                    format!("swi {swi} long {long} proc {proc_num} outcome {outcome} {len}/{n}");
                assert_eq!(f, g, "{what}");
                if f.1.get(12..16) == Some(&4u32.to_be_bytes()[..]) {
                    refused += 1;
                } else {
                    assert_eq!(f.0.map(|(_, inv)| inv), Some(inv), "{what}");
                }
                taken += 1;
            }
        }
    }
    assert_eq!(taken, 160);
    // BULKY's DDP result inline past the threshold (64 bytes of results, then the
    // threshold less 100), on SUCCESS, in each of the four configurations; and its 70,000
    // bytes, which the bulk buffer cannot hold, whatever the handler returns after
    // `push_bulk` refused them (5 outcomes × 4 configurations): too long for a Call that
    // provided no Write or Reply chunk (ERR_CHUNK).
    assert_eq!(refused, 4 + 20);
    // Another XID inside the pulled stream: left to the general path (ERR_CHUNK).
    let rpc = CallHeader::new(9, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut stream = vec![0u8; rpc.encoded_len()];
    rpc.encode(&mut stream).unwrap();
    stream.extend_from_slice(&[0; 8]);
    let p0 = [ReadSegment::new(0, 0x4321, stream.len() as u32, 0x1000)];
    let h = Header::nomsg(
        10,
        3,
        Chunks {
            reads: &p0,
            writes: &[],
            reply: None,
        },
    );
    let mut header = vec![0u8; h.encoded_len()];
    h.encode(&mut header).unwrap();
    view::bytes_mut(&mut s.pull[0])[..stream.len()].copy_from_slice(&stream);
    let declined = fast_pulled(&mut s, &header, stream.len(), None);
    assert!(declined.is_none());
}

#[test]
fn a_pulled_chunk_lands_where_its_source_is_in_a_cache_line() {
    let cfg = ConnConfig::default();
    let (mut c, mut s) = dressed(
        crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("soft pair"),
    );
    let mut shifted = 0;
    for seed in 1..6 {
        assert!(
            pulled_write(&mut c, &mut s, seed),
            "Call {seed}'s data intact"
        );
        let r = s.hot_pull.expect("a pulled Call was answered") as usize;
        let slot = &s.slots[r];
        let op = s.read_lists.get(r, 0);
        let dst = s.pull[r].addr() + u64::from(slot.shift + op.dst);
        assert_eq!(
            dst % 64,
            op.remote.addr % 64,
            "Call {seed}: same offset in a line"
        );
        shifted += u32::from(slot.shift != 0);
    }
    // The chunk's XDR position is not a multiple of 64 (it follows the Call's header): the
    // stream had to move for it.
    assert!(shifted > 0);
}

#[test]
fn the_shift_follows_the_largest_chunk_and_keeps_xdr_alignment() {
    use rpcrdma_proto::header::ReadSegment;
    let xid = 0x78;
    let rpc = CallHeader::new(xid, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut head = vec![0u8; 40];
    rpc.encode(&mut head).unwrap();
    head.extend_from_slice(&[0; 12]);
    let shift_of = |reads: &[ReadSegment], long: bool| {
        let chunks = Chunks {
            reads,
            writes: &[],
            reply: None,
        };
        let h = if long {
            Header::nomsg(xid, 3, chunks)
        } else {
            Header::msg(xid, 3, chunks)
        };
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        if !long {
            m.extend_from_slice(&head);
        }
        let Ok(call) = version::judged(&m, None, Wire::V1) else {
            panic!("refused: {reads:?} long {long}")
        };
        super::pull::align_shift(&call.plan)
    };
    // One chunk at XDR position 52 read from an address 20 past a line: the stream starts
    // 32 bytes in, so that the chunk lands at 32 + 52 = 84 = 64 + 20.
    assert_eq!(
        shift_of(&[ReadSegment::new(52, 1, 3000, 0x2000 + 20)], false),
        Some(32)
    );
    // Two chunks: the larger (the second) decides, whatever the first's source.
    let two = [
        ReadSegment::new(44, 1, 100, 0x1000 + 8),
        ReadSegment::new(44 + 100 + 8, 1, 3000, 0x2000),
    ];
    // Positions are in the stream with the chunks in place: the second chunk lands after
    // the first's 100 bytes (no pad) and the 8 inline bytes that follow it.
    let at = 44 + 100 + 8;
    assert_eq!(shift_of(&two, false), Some((64 - at % 64) % 64));
    // A source address not a multiple of 4 is met to within 4 bytes: the shift stays a
    // multiple of 4.
    let odd = shift_of(&[ReadSegment::new(52, 1, 3000, 0x2000 + 23)], false).unwrap();
    assert_eq!(odd % 4, 0);
    assert_eq!((odd + 52) % 64, 20);
    // A Long Call: its Position-Zero chunk lands at the tail of the stream (here the whole
    // of it), so the stream's start is met to the source's offset in its line.
    assert_eq!(
        shift_of(&[ReadSegment::new(0, 1, 200, 0x3000 + 36)], true),
        Some(36)
    );
    // Nothing to read: no shift.
    assert_eq!(shift_of(&[], false), None);
}
