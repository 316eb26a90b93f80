//! Property tests of the transport header codec: encode → decode → encode is the identity for
//! every valid header, and decoding arbitrary bytes never panics.

use proptest::prelude::*;
use rpcrdma_proto::header::{
    Body, Chunks, Header, HeaderView, Proc, RdmaError, ReadSegment, Segment,
};

fn segment() -> impl Strategy<Value = Segment> {
    (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(h, l, o)| Segment::new(h, l, o))
}

#[derive(Debug, Clone)]
struct Owned {
    xid: u32,
    credit: u32,
    proc: u8,
    reads: Vec<ReadSegment>,
    writes: Vec<Vec<Segment>>,
    reply: Option<Vec<Segment>>,
    err: RdmaError,
    payload: Vec<u8>,
}

fn owned() -> impl Strategy<Value = Owned> {
    (
        any::<u32>(),
        any::<u32>(),
        0u8..5,
        prop::collection::vec((any::<u32>(), segment()), 0..6),
        prop::collection::vec(prop::collection::vec(segment(), 0..4), 0..4),
        prop::option::of(prop::collection::vec(segment(), 0..4)),
        prop_oneof![
            Just(RdmaError::Chunk),
            (any::<u32>(), any::<u32>()).prop_map(|(low, high)| RdmaError::Vers { low, high })
        ],
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(
            |(xid, credit, proc, reads, writes, reply, err, payload)| Owned {
                xid,
                credit,
                proc,
                reads: reads
                    .into_iter()
                    .map(|(p, s)| ReadSegment {
                        position: p,
                        segment: s,
                    })
                    .collect(),
                writes,
                reply,
                err,
                payload,
            },
        )
}

fn encode_owned(o: &Owned) -> Vec<u8> {
    let writes: Vec<&[Segment]> = o.writes.iter().map(|c| c.as_slice()).collect();
    let chunks = Chunks {
        reads: &o.reads,
        writes: &writes,
        reply: o.reply.as_deref(),
    };
    let body = match o.proc {
        0 => Body::Msg(chunks),
        1 => Body::NoMsg(chunks),
        2 => Body::Msgp {
            align: o.xid ^ 1,
            thresh: o.credit ^ 1,
            chunks,
        },
        3 => Body::Done,
        _ => Body::Error(o.err),
    };
    let h = Header {
        xid: o.xid,
        vers: 1,
        credit: o.credit,
        body,
    };
    let mut buf = vec![0u8; h.encoded_len()];
    h.encode(&mut buf).unwrap();
    buf
}

/// Rebuilds an owned description from a decoded view (test-only allocation).
fn from_view(v: &HeaderView<'_>, proc: u8, err: RdmaError) -> Owned {
    Owned {
        xid: v.xid(),
        credit: v.credit(),
        proc,
        reads: v.read_list().iter().collect(),
        writes: v.write_list().iter().map(|c| c.iter().collect()).collect(),
        reply: v.reply_chunk().map(|c| c.iter().collect()),
        err: v.error().unwrap_or(err),
        payload: vec![],
    }
}

proptest! {
    #[test]
    fn encode_decode_encode_is_identity(o in owned()) {
        let bytes = encode_owned(&o);
        let mut msg = bytes.clone();
        let carries_payload = matches!(o.proc, 0 | 2);
        if carries_payload {
            msg.extend_from_slice(&o.payload);
        }
        let v = HeaderView::parse(&msg).unwrap();
        prop_assert_eq!(v.header_len(), bytes.len());
        prop_assert_eq!(v.proc().to_u32(), o.proc as u32);
        if carries_payload {
            prop_assert_eq!(v.payload(), &o.payload[..]);
        }
        let back = from_view(&v, o.proc, o.err);
        if matches!(v.proc(), Proc::Msg | Proc::NoMsg | Proc::Msgp) {
            prop_assert_eq!(&back.reads, &o.reads);
            prop_assert_eq!(&back.writes, &o.writes);
            prop_assert_eq!(&back.reply, &o.reply);
        }
        let again = encode_owned(&back);
        prop_assert_eq!(again, bytes);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(v) = HeaderView::parse(&bytes) {
            // Walking everything the view exposes stays in bounds.
            let n = v.read_list().iter().count() + v.write_list().iter().map(|c| c.iter().count()).sum::<usize>();
            prop_assert!(n * 16 <= bytes.len());
            prop_assert!(v.header_len() <= bytes.len());
            let _ = v.payload();
        }
    }

    #[test]
    fn structured_noise_never_panics(words in prop::collection::vec(prop_oneof![Just(0u32), Just(1), Just(2), Just(4), Just(u32::MAX), any::<u32>()], 0..48)) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let _ = HeaderView::parse(&bytes);
    }

    /// `v2::encode_message_header`, the engines' direct encoder, writes the bytes of the
    /// reference encoders (`Header::encode`, `v2::Header::encode`) for every list shape, both
    /// versions, both forms, and refuses a buffer one byte short as they do.
    #[test]
    fn the_direct_message_encoder_matches_the_reference(
        o in owned(),
        v2 in any::<bool>(),
        nomsg in any::<bool>(),
        response in any::<bool>(),
        inv in any::<u32>(),
    ) {
        use rpcrdma_proto::v2::{encode_message_header, MessageFields, Wire, RPCRDMA_VERSION_TWO};
        use rpcrdma_proto::v2;
        let writes: Vec<&[Segment]> = o.writes.iter().map(|c| c.as_slice()).collect();
        let chunks = Chunks {
            reads: &o.reads,
            writes: &writes,
            reply: o.reply.as_deref(),
        };
        let (wire, reference) = if v2 {
            let h = v2::Header {
                xid: o.xid,
                vers: RPCRDMA_VERSION_TWO,
                credit: o.credit,
                flags: if response { rpcrdma_proto::v2::flags::RESPONSE } else { 0 },
                body: if nomsg {
                    v2::Body::NoMsg { inv_handle: inv, chunks }
                } else {
                    v2::Body::Msg { inv_handle: inv, chunks }
                },
            };
            let mut b = vec![0u8; 2048];
            let n = h.encode(&mut b).unwrap();
            b.truncate(n);
            (Wire::V2, b)
        } else {
            let h = if nomsg {
                Header::nomsg(o.xid, o.credit, chunks)
            } else {
                Header::msg(o.xid, o.credit, chunks)
            };
            let mut b = vec![0u8; 2048];
            let n = h.encode(&mut b).unwrap();
            b.truncate(n);
            (Wire::V1, b)
        };
        let inv = if v2 { inv } else { 0 };
        let mut out = vec![0xa5u8; reference.len() + 8];
        let fields = MessageFields {
            xid: o.xid,
            credit: o.credit,
            nomsg,
            response,
            inv_handle: inv,
        };
        let n = encode_message_header(wire, &mut out, fields, chunks).unwrap();
        prop_assert_eq!(&out[..n], &reference[..]);
        prop_assert!(out[n..].iter().all(|&b| b == 0xa5), "nothing written past the header");
        let mut short = vec![0u8; reference.len() - 1];
        prop_assert!(
            encode_message_header(wire, &mut short, fields, chunks).is_err()
        );
    }

    /// The same for the shapes the direct encoder writes without walking the lists (one
    /// Write chunk of one segment, or one Read segment, and nothing else: an NFS READ's and
    /// WRITE's Calls), which `owned` seldom makes.
    #[test]
    fn the_direct_encoder_matches_for_one_segment(
        xid in any::<u32>(),
        credit in any::<u32>(),
        handle in any::<u32>(),
        length in any::<u32>(),
        offset in any::<u64>(),
        position in any::<u32>(),
        read in any::<bool>(),
        v2 in any::<bool>(),
        nomsg in any::<bool>(),
        inv in any::<u32>(),
    ) {
        use rpcrdma_proto::v2::{encode_message_header, MessageFields, Wire, RPCRDMA_VERSION_TWO};
        use rpcrdma_proto::v2;
        let seg = [Segment { handle, length, offset }];
        let one_write: [&[Segment]; 1] = [&seg];
        let one_read = [ReadSegment { position, segment: seg[0] }];
        let chunks = if read {
            Chunks { reads: &one_read, writes: &[], reply: None }
        } else {
            Chunks { reads: &[], writes: &one_write, reply: None }
        };
        let mut reference = vec![0u8; 256];
        let n = if v2 {
            let body = if nomsg {
                v2::Body::NoMsg { inv_handle: inv, chunks }
            } else {
                v2::Body::Msg { inv_handle: inv, chunks }
            };
            v2::Header { xid, vers: RPCRDMA_VERSION_TWO, credit, flags: 0, body }
                .encode(&mut reference)
                .unwrap()
        } else if nomsg {
            Header::nomsg(xid, credit, chunks).encode(&mut reference).unwrap()
        } else {
            Header::msg(xid, credit, chunks).encode(&mut reference).unwrap()
        };
        reference.truncate(n);
        let wire = if v2 { Wire::V2 } else { Wire::V1 };
        let fields = MessageFields {
            xid,
            credit,
            nomsg,
            response: false,
            inv_handle: if v2 { inv } else { 0 },
        };
        let mut out = vec![0xa5u8; n + 8];
        let m = encode_message_header(wire, &mut out, fields, chunks).unwrap();
        prop_assert_eq!(&out[..m], &reference[..]);
        prop_assert!(out[m..].iter().all(|&b| b == 0xa5));
        prop_assert!(encode_message_header(wire, &mut out[..n - 1], fields, chunks).is_err());
    }
}
