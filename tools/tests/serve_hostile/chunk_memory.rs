//! Chunks naming memory the server cannot use: ERR_CHUNK where found before any RDMA
//! operation, a torn-down connection where only the RDMA operation finds it, GARBAGE_ARGS for
//! Read chunks too short or too long for their argument.

use rpcrdma_engine::fabric::{MemoryRegion, WcStatus};
use rpcrdma_engine::program::{MULTI, READ, WRITE};
use rpcrdma_proto::header::{Chunks, HeaderView, ReadSegment, Segment};
use rpcrdma_proto::rpc::AcceptStat;

use crate::serve_common::msg::*;
use crate::serve_common::serial;

use super::{exchange, raw_connect, Server, DATA_LEN};

/// Chunks naming memory the server cannot use. Found before any RDMA operation (a Write or
/// Reply chunk too small, no Reply chunk for a long reply, a Read chunk larger than the
/// server pulls): ERR_CHUNK, and the connection keeps serving (§4.5.3, §8.1.4). Found only
/// by the RDMA operation (a bogus rkey, a segment past the end of the region): that
/// connection is torn down without a reply, other connections go on. Too-short and
/// too-long Read chunks for the argument they carry: GARBAGE_ARGS.
#[test]
fn chunks_naming_bogus_or_short_memory() {
    let _serial = serial();
    let mut srv = Server::start("chunks", &[]);
    let addr = srv.soft_addr();
    let mut good = raw_connect(&addr, 8);
    let mut c = raw_connect(&addr, 32);
    let grant = HeaderView::parse(&c.null_ok(1, "chunks")).unwrap().credit();
    let d = c.data_at(0);
    c.data.write_at(0, &[0x5a; 4096]);
    let small_w = [Segment::new(d.rkey, 100, d.addr)];
    let small_r = [Segment::new(d.rkey, 100, d.addr + 4096)];
    let huge = [ReadSegment::new(
        WRITE_DATA_POS,
        d.rkey,
        0x7fff_0000,
        d.addr,
    )];
    let short = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 16, d.addr)];
    let zero = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 0, d.addr)];
    let long = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 256, d.addr)];
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        (
            "Write chunk smaller than the result",
            msg_call(
                10,
                Chunks {
                    writes: &[&small_w],
                    ..Chunks::NONE
                },
                READ,
                &words(5000, 1),
            ),
            Expect::ErrChunk,
        ),
        (
            "Reply chunk smaller than the reply",
            msg_call(
                11,
                Chunks {
                    reply: Some(&small_r),
                    ..Chunks::NONE
                },
                READ,
                &words(5000, 1),
            ),
            Expect::ErrChunk,
        ),
        (
            "reply over the threshold without a Reply chunk",
            msg_call(12, Chunks::NONE, READ, &words(5000, 1)),
            Expect::ErrChunk,
        ),
        (
            "Read chunk larger than the server pulls",
            msg_call(
                13,
                Chunks {
                    reads: &huge,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 0x7fff_0000),
            ),
            Expect::ErrChunk,
        ),
        (
            "Read chunk shorter than its opaque (16 of 64 bytes)",
            msg_call(
                14,
                Chunks {
                    reads: &short,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 64),
            ),
            Expect::Accepted(AcceptStat::GarbageArgs),
        ),
        (
            "empty Read segment for a 64-byte opaque",
            msg_call(
                15,
                Chunks {
                    reads: &zero,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 64),
            ),
            Expect::Accepted(AcceptStat::GarbageArgs),
        ),
        (
            "READ of 2^32-1 bytes (more than the server's bulk buffer)",
            msg_call(16, Chunks::NONE, READ, &words(u32::MAX, 1)),
            Expect::Accepted(AcceptStat::SystemErr),
        ),
        (
            "MULTI of 2^32-1 results",
            msg_call(18, Chunks::NONE, MULTI, &words(u32::MAX, 0)),
            Expect::Accepted(AcceptStat::SystemErr),
        ),
    ];
    for (i, (name, m, e)) in cases.iter().enumerate() {
        exchange(&mut c, name, m, grant, *e, 100 + i as u32);
        srv.assert_alive(name);
    }
    // A Read chunk longer than its opaque: the opaque is what counts (extra bytes are the
    // chunk's business, §3.4.5.2 allows at most the XDR pad, and more is garbage or served).
    assert_eq!(
        c.send(
            &msg_call(
                17,
                Chunks {
                    reads: &long,
                    ..Chunks::NONE
                },
                WRITE,
                &words(1, 64)
            ),
            "Read chunk longer than its opaque"
        ),
        WcStatus::Success
    );
    let r = c.expect("Read chunk longer than its opaque");
    assert_eq!(w(&r, 0), 17);
    c.null_ok(200, "chunks");

    // Found only by the RDMA operation: one fresh connection per case.
    for case in 0..7 {
        let mut c = raw_connect(&addr, 16);
        c.null_ok(1, "chunks: fresh connection");
        let d = c.data_at(0);
        let end = d.addr + DATA_LEN as u64;
        let bogus = d.rkey ^ 0x5a00;
        let rd = |rkey: u32, at: u64| [ReadSegment::new(WRITE_DATA_POS, rkey, 64, at)];
        let wr = |rkey: u32, at: u64| [Segment::new(rkey, 4096, at)];
        let (name, m) = match case {
            0 => (
                "Read chunk naming a bogus rkey",
                msg_call(
                    2,
                    Chunks {
                        reads: &rd(bogus, d.addr),
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                ),
            ),
            1 => (
                "Read segment past the end of the region",
                msg_call(
                    2,
                    Chunks {
                        reads: &rd(d.rkey, end - 32),
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                ),
            ),
            2 => (
                "Write chunk naming a bogus rkey",
                msg_call(
                    2,
                    Chunks {
                        writes: &[&wr(0xdead_be00, d.addr)],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(4096, 1),
                ),
            ),
            3 => (
                "Write segment past the end of the region",
                msg_call(
                    2,
                    Chunks {
                        writes: &[&wr(d.rkey, end - 100)],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(4096, 1),
                ),
            ),
            4 => (
                "Reply chunk naming a bogus rkey",
                msg_call(
                    2,
                    Chunks {
                        reply: Some(&[Segment::new(bogus, 16384, d.addr)]),
                        ..Chunks::NONE
                    },
                    READ,
                    &words(5000, 1),
                ),
            ),
            5 => (
                "Long Call whose Position-Zero chunk names a bogus rkey",
                nomsg(
                    2,
                    Chunks {
                        reads: &[ReadSegment::new(0, bogus, 64, d.addr)],
                        ..Chunks::NONE
                    },
                ),
            ),
            _ => (
                "Read segment at address 2^63, valid rkey",
                msg_call(
                    2,
                    Chunks {
                        reads: &rd(d.rkey, 1 << 63),
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(1, 64),
                ),
            ),
        };
        assert_eq!(c.send(&m, name), WcStatus::Success, "{name}");
        c.expect_torn_down(name);
        srv.assert_alive(name);
        good.null_ok(1000 + case, name);
    }
    drop(c);
    drop(good);
    let counters = srv.finish("chunks");
    assert!(
        counters["errors"]["conn_lost"].as_u64().unwrap() >= 7,
        "{counters}"
    );
}
