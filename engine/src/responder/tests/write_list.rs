//! The Write-list fast path (`written::answer`) against the general path.

use super::*;

/// The Write-list fast path's answer to `call` (in ring slot 0), `None` when it declines.
fn fast_written(s: &mut ServerConn<Soft>, call: &[u8], grant: u32) -> Option<Observed> {
    let wc = verdict::write_call(call)?;
    observe(s, 0, |s| {
        let at = Answering {
            grant,
            ..Answering::of(&s.credits, &s.negotiation, &s.dispatch)
        };
        written::answer(
            &mut s.io,
            &mut s.ring[0],
            call,
            &wc,
            &at,
            &mut s.bulk[0],
            &mut HandlerContext::handler(s.id),
        )
    })
}

/// An RDMA_MSG Call with `chunks`, then the RPC Call header and `args`.
fn chunked_call(xid: u32, chunks: Chunks<'_>, rpc: CallHeader<'_>, args: &[u8]) -> Vec<u8> {
    let h = Header::msg(xid, 8, chunks);
    let mut m = vec![0u8; h.encoded_len() + rpc.encoded_len()];
    let n = h.encode(&mut m).unwrap();
    rpc.encode(&mut m[n..]).unwrap();
    m.extend_from_slice(args);
    m
}

/// Calls whose only chunks are Write chunks (one or two, one to three segments, long
/// enough or not for their results), every outcome, results of several lengths: the fast
/// path takes each and gives the general path's bytes, length, invalidation, counters and
/// RDMA Writes (the data the client's memory receives).
#[test]
fn write_list_path_answers_as_the_general_path() {
    use crate::fabric::{MemoryRegion, ProtectionDomain};
    use rpcrdma_proto::header::Segment;
    let (client, mut s) = server();
    const MEM: usize = 1 << 16;
    let access = crate::fabric::Access::LOCAL_WRITE | crate::fabric::Access::REMOTE_WRITE;
    let mem = client.pd().alloc_region(MEM, access).expect("region");
    let (base, rkey) = (mem.addr(), mem.rkey());
    let seg = |off: u64, len: u32| Segment::new(rkey, len, base + off);
    // Chunk shapes: one segment; three (5, 100 and 4,000 bytes); one of 10 bytes, shorter
    // than most results.
    let one = [seg(0, 8192)];
    let three = [seg(8192, 5), seg(9000, 100), seg(12000, 4000)];
    let short = [seg(20000, 10)];
    let second = [seg(30000, 2000)];
    let lists: [&[&[Segment]]; 4] = [&[&one], &[&three], &[&short], &[&one, &second]];
    let (mut taken, mut refused, mut data_seen) = (0, 0, false);
    for (l, writes) in lists.iter().enumerate() {
        for proc_num in [BULKY, TWO_BULKY] {
            for outcome in 0u32..5 {
                for (len, n, n2) in [
                    (0u32, 0u32, 0u32),
                    (4, 1, 3),
                    (12, 9, 0),
                    (64, 4106, 1500),
                    (8, 0, 2001),
                ] {
                    let xid = 0x900 + taken;
                    let rpc =
                        CallHeader::new(xid, PROG, 1, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE);
                    let args: Vec<u8> = [outcome, len, n, n2]
                        .iter()
                        .flat_map(|w| w.to_be_bytes())
                        .collect();
                    let chunks = Chunks {
                        reads: &[],
                        writes,
                        reply: None,
                    };
                    let call = chunked_call(xid, chunks, rpc, &args);
                    mem.write_at(0, &[0u8; MEM]);
                    let f = fast_written(&mut s, &call, 8);
                    let mut fast_mem = vec![0u8; MEM];
                    mem.read_at(0, &mut fast_mem);
                    mem.write_at(0, &[0u8; MEM]);
                    let g = general(&mut s, &call, 8);
                    let mut general_mem = vec![0u8; MEM];
                    mem.read_at(0, &mut general_mem);
                    // Retire the RDMA Writes' send-queue slots.
                    s.poll();
                    let what = format!("list {l} proc {proc_num} outcome {outcome} {len}/{n}/{n2}");
                    // Two results with one chunk: the second would go inline.
                    if proc_num == TWO_BULKY && writes.len() == 1 {
                        assert!(f.is_none(), "{what}: declined");
                        continue;
                    }
                    let f = f.unwrap_or_else(|| panic!("{what}: taken by the fast path"));
                    assert_eq!(f, g, "{what}");
                    assert!(fast_mem == general_mem, "{what}: the same RDMA Writes");
                    taken += 1;
                    data_seen |= fast_mem.iter().any(|&b| b != 0);
                    // A refusal: RDMA_ERROR, proc 4.
                    if f.1.get(12..16) == Some(&4u32.to_be_bytes()[..]) {
                        refused += 1;
                    }
                }
            }
        }
    }
    // 4 shapes × 5 outcomes × 5 sizes for BULKY, the two-chunk shape for TWO_BULKY.
    assert_eq!(taken, 125);
    // A result one byte longer than its chunk is refused (ERR_CHUNK), on SUCCESS only: the
    // 4,106 bytes in the 10-byte and the 4,105-byte chunks, the second result's 2,001
    // bytes in the 2,000-byte second chunk. The 9 bytes fit the 10-byte chunk. And
    // TWO_BULKY's 4,106 and 1,500 bytes do not fit together in the slot's own bulk buffer
    // (an inline reply's size: these paths are called here without the shared buffers
    // `answer` would reserve for such chunks), whatever the handler returns after
    // `push_bulk` refused: too long for what the Call provided (5 outcomes).
    assert_eq!(refused, 3 + 5);
    assert!(data_seen, "results reached the client's memory");
}

/// What the Write-list fast path leaves to the general path: version 2, a Read list, a
/// Reply chunk, an empty or over-long chunk, too many chunks, results that may pass the
/// reply threshold, a procedure not registered, an XID that does not match.
#[test]
fn write_list_path_declines_what_it_does_not_answer() {
    use rpcrdma_proto::header::{ReadSegment, Segment};
    let (_client, mut s) = server();
    let seg = Segment::new(0x77, 4096, 0x10_0000);
    let args: Vec<u8> = [0u32, 8, 16, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    let rpc = |proc_num| CallHeader::new(5, PROG, 1, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let with = |writes: &[&[Segment]], reply: Option<&[Segment]>, reads: &[ReadSegment], p| {
        chunked_call(
            5,
            Chunks {
                reads,
                writes,
                reply,
            },
            rpc(p),
            &args,
        )
    };
    let many: Vec<Segment> = vec![seg; reply::MAX_SEGMENTS + 1];
    let single = [seg];
    let nine: Vec<&[Segment]> = vec![&single[..]; reply::MAX_WRITE_CHUNKS + 1];
    let read = [ReadSegment::new(100, 0x55, 16, 0x2000)];
    let ok = with(&[&[seg]], None, &[], BULKY);
    let mut wrong_xid = ok.clone();
    let at = ok.len() - args.len() - 40;
    wrong_xid[at + 3] ^= 1;
    let cases = [
        with(&[&[seg]], Some(&[seg]), &[], BULKY),
        with(&[&[seg]], None, &read, BULKY),
        with(&[&[]], None, &[], BULKY),
        with(&[&many], None, &[], BULKY),
        with(&nine, None, &[], BULKY),
        with(&[&[seg]], None, &[], HUGE),
        with(&[&[seg]], None, &[], 99),
        with(&[], None, &[], BULKY),
        wrong_xid,
    ];
    for (k, m) in cases.iter().enumerate() {
        assert!(fast_written(&mut s, m, 4).is_none(), "case {k}");
    }
    s.io.wire = Wire::V2;
    assert!(fast_written(&mut s, &ok, 4).is_none(), "version 2");
    s.io.wire = Wire::V1;
    // The same Call in version 1 is taken (its Write goes to an rkey the client never
    // registered: the connection fails, after the answer was built).
    assert!(fast_written(&mut s, &ok, 4).is_some());
}
