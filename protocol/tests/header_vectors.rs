//! Byte-exact vectors for every procedure and list shape, written by hand from RFC 8166 §4.1.2
//! and §4.7 (the hex words below are the XDR, four octets each).

mod common;

use common::*;

use rpcrdma_proto::header::{
    Body, Chunks, Header, HeaderError, HeaderView, Proc, RdmaError, ReadSegment, Segment,
};
use rpcrdma_proto::DecodeError;

fn encode(h: &Header<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; h.encoded_len()];
    assert_eq!(h.encode(&mut buf).unwrap(), buf.len());
    // Exactly the computed size: one byte less is refused.
    let mut short = vec![0u8; h.encoded_len() - 1];
    assert!(h.encode(&mut short).is_err());
    buf
}

#[test]
fn minimal_rdma_msg_call_is_28_bytes() {
    // CHECKLIST A.3 worked example: XID 0x12345678, 32 credits requested, no chunks.
    let h = Header::msg(0x1234_5678, 32, Chunks::NONE);
    let want = hex("12345678 00000001 00000020 00000000 00000000 00000000 00000000");
    assert_eq!(encode(&h), want);
    assert_eq!(h.encoded_len(), 28);
    let mut msg = want.clone();
    msg.extend(hex("12345678 00000000"));
    let v = HeaderView::parse(&msg).unwrap();
    assert_eq!(
        (v.xid(), v.vers(), v.credit(), v.proc()),
        (0x1234_5678, 1, 32, Proc::Msg)
    );
    assert!(v.read_list().is_empty() && v.write_list().is_empty());
    assert!(v.reply_chunk().is_none());
    assert_eq!(v.header_len(), 28);
    assert_eq!(v.payload(), &hex("12345678 00000000")[..]);
}

#[test]
fn read_list_of_two_chunks() {
    // "1 PHLOO 1 PHLOO 1 PHLOO 0": two segments at position 100, one at 200.
    let reads = [
        ReadSegment::new(100, 0xaa, 0x1000, 0x0000_0001_0000_0000),
        ReadSegment::new(100, 0xbb, 0x10, 0x2000),
        ReadSegment::new(200, 0xcc, 3, 0xffff_ffff_ffff_fff0),
    ];
    let h = Header::msg(
        9,
        1,
        Chunks {
            reads: &reads,
            writes: &[],
            reply: None,
        },
    );
    let want = hex("00000009 00000001 00000001 00000000
         00000001 00000064 000000aa 00001000 00000001 00000000
         00000001 00000064 000000bb 00000010 00000000 00002000
         00000001 000000c8 000000cc 00000003 ffffffff fffffff0
         00000000
         00000000
         00000000");
    assert_eq!(encode(&h), want);
    assert_eq!(h.encoded_len(), 28 + 3 * 24);
    let v = HeaderView::parse(&want).unwrap();
    let got: Vec<_> = v.read_list().iter().collect();
    assert_eq!(got, reads);
    assert_eq!(v.read_list().len(), 3);
    assert_eq!(v.payload(), &[] as &[u8]);
}

#[test]
fn write_list_with_two_chunks_and_reply_chunk() {
    // RFC 8166 §4.7 example shapes: "1 3 HLOO HLOO HLOO 1 2 HLOO HLOO 0" and "1 2 HLOO HLOO".
    let c0 = [
        Segment::new(1, 0x100, 0x10),
        Segment::new(2, 0x200, 0x20),
        Segment::new(3, 0x300, 0x30),
    ];
    let c1 = [Segment::new(4, 0x400, 0x40), Segment::new(5, 0x500, 0x50)];
    let writes: [&[Segment]; 2] = [&c0, &c1];
    let reply = [Segment::new(6, 0x600, 0x60), Segment::new(7, 0x700, 0x70)];
    let h = Header::nomsg(
        0xdead_beef,
        64,
        Chunks {
            reads: &[],
            writes: &writes,
            reply: Some(&reply),
        },
    );
    let want = hex("deadbeef 00000001 00000040 00000001
         00000000
         00000001 00000003
           00000001 00000100 00000000 00000010
           00000002 00000200 00000000 00000020
           00000003 00000300 00000000 00000030
         00000001 00000002
           00000004 00000400 00000000 00000040
           00000005 00000500 00000000 00000050
         00000000
         00000001 00000002
           00000006 00000600 00000000 00000060
           00000007 00000700 00000000 00000070");
    assert_eq!(encode(&h), want);
    assert_eq!(h.encoded_len(), 16 + 4 + (8 + 48) + (8 + 32) + 4 + (8 + 32));
    let v = HeaderView::parse(&want).unwrap();
    assert_eq!(v.proc(), Proc::NoMsg);
    let chunks: Vec<Vec<Segment>> = v.write_list().iter().map(|c| c.iter().collect()).collect();
    assert_eq!(chunks, vec![c0.to_vec(), c1.to_vec()]);
    let r: Vec<_> = v.reply_chunk().unwrap().iter().collect();
    assert_eq!(r, reply);
    assert_eq!(v.write_list().iter().next().unwrap().total_len(), 0x600);
}

#[test]
fn empty_write_chunk_and_empty_reply_chunk() {
    // An empty Write chunk (count 0, RFC 8166 §4.3.2.3) and a present Reply chunk of 0 segments.
    let writes: [&[Segment]; 1] = [&[]];
    let h = Header::msg(
        1,
        2,
        Chunks {
            reads: &[],
            writes: &writes,
            reply: Some(&[]),
        },
    );
    let want = hex(
        "00000001 00000001 00000002 00000000 00000000 00000001 00000000 00000000 00000001 00000000",
    );
    assert_eq!(encode(&h), want);
    let v = HeaderView::parse(&want).unwrap();
    assert_eq!(v.write_list().len(), 1);
    assert!(v.write_list().iter().next().unwrap().is_empty());
    assert!(v.reply_chunk().unwrap().is_empty());
}

#[test]
fn rdma_error_err_vers_and_err_chunk() {
    // CHECKLIST A.3: ERR_VERS echoes the failing version (RFC 8166 §4.5); 28 and 20 bytes.
    let h = Header::error(0x0a0b_0c0d, 2, 32, RdmaError::Vers { low: 1, high: 1 });
    let want = hex("0a0b0c0d 00000002 00000020 00000004 00000001 00000001 00000001");
    assert_eq!(encode(&h), want);
    let v = HeaderView::parse(&want).unwrap();
    assert_eq!(v.error(), Some(RdmaError::Vers { low: 1, high: 1 }));
    assert_eq!(v.vers(), 2);
    assert_eq!(v.header_len(), 28);

    let h = Header::error(0x55, 1, 5, RdmaError::Chunk);
    let want = hex("00000055 00000001 00000005 00000004 00000002");
    assert_eq!(encode(&h), want);
    assert_eq!(
        HeaderView::parse(&want).unwrap().error(),
        Some(RdmaError::Chunk)
    );
}

#[test]
fn deprecated_msgp_and_done() {
    let h = Header {
        xid: 3,
        vers: 1,
        credit: 1,
        body: Body::Msgp {
            align: 64,
            thresh: 1024,
            chunks: Chunks::NONE,
        },
    };
    let want =
        hex("00000003 00000001 00000001 00000002 00000040 00000400 00000000 00000000 00000000");
    assert_eq!(encode(&h), want);
    let v = HeaderView::parse(&want).unwrap();
    assert_eq!((v.proc(), v.padded()), (Proc::Msgp, Some((64, 1024))));

    let h = Header {
        xid: 4,
        vers: 1,
        credit: 1,
        body: Body::Done,
    };
    let want = hex("00000004 00000001 00000001 00000003");
    assert_eq!(encode(&h), want);
    assert_eq!(HeaderView::parse(&want).unwrap().proc(), Proc::Done);
}

#[test]
fn hostile_headers_are_typed_errors() {
    // Unknown procedure.
    let m = hex("00000001 00000001 00000001 00000005 00000000 00000000 00000000");
    assert_eq!(
        HeaderView::parse(&m),
        Err(HeaderError::UnknownProc { proc_raw: 5 })
    );
    // Version 2 body is not decoded.
    let m = hex("00000001 00000002 00000001 00000000 00000000 00000000 00000000");
    assert_eq!(
        HeaderView::parse(&m),
        Err(HeaderError::UnsupportedVersion { vers: 2 })
    );
    // A read-list discriminator of 2 (bool must be 0 or 1).
    let m = hex("00000001 00000001 00000001 00000000 00000002 00000000 00000000");
    assert_eq!(
        HeaderView::parse(&m),
        Err(HeaderError::Malformed(DecodeError::InvalidBool {
            offset: 16,
            value: 2
        }))
    );
    // A write chunk claiming 0xffffffff segments in a small buffer: rejected by the count check.
    let m = hex("00000001 00000001 00000001 00000000 00000000 00000001 ffffffff 00000000");
    assert!(matches!(
        HeaderView::parse(&m),
        Err(HeaderError::Malformed(DecodeError::CountTooLarge {
            count: u32::MAX,
            ..
        }))
    ));
    // A million-segment reply chunk claim in 40 bytes.
    let m = hex(
        "00000001 00000001 00000001 00000001 00000000 00000000 00000001 000f4240 00000000 00000000",
    );
    assert!(matches!(
        HeaderView::parse(&m),
        Err(HeaderError::Malformed(DecodeError::CountTooLarge {
            count: 1_000_000,
            ..
        }))
    ));
    // Truncation at every length of a valid header is an error, never a panic.
    let c0 = [Segment::new(1, 2, 3)];
    let writes: [&[Segment]; 1] = [&c0];
    let reads = [ReadSegment::new(0, 1, 2, 3)];
    let h = Header::nomsg(
        1,
        1,
        Chunks {
            reads: &reads,
            writes: &writes,
            reply: Some(&c0),
        },
    );
    let full = encode(&h);
    for n in 0..full.len() {
        assert!(
            HeaderView::parse(&full[..n]).is_err(),
            "prefix of {n} bytes"
        );
    }
    assert!(HeaderView::parse(&full).is_ok());
}
