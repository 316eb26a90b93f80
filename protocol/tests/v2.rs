//! RPC-over-RDMA version 2 (draft-cel-nfsv4-rpcrdma-version-two-09): headers written by hand
//! as hex words decode as the draft lays them out, every header type round-trips through the
//! encoder, hostile headers get the draft's errors, and no input makes the decoder or the
//! verdict panic (property tests).

mod common;

use common::*;

use proptest::prelude::*;
use rpcrdma_proto::header::{Chunks, ReadSegment, Segment};
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::props::{Property, ReverseRequests};
use rpcrdma_proto::v2::{flags, Htype, MIN_MSG_LEN, PREFIX_LEN};
use rpcrdma_proto::verdict::Role;

fn server(words: &str) -> v2::Action {
    v2::judge(&hex(words), Role::Responder, false).action
}

fn client(words: &str) -> v2::Action {
    v2::judge(&hex(words), Role::Requester, false).action
}

#[test]
fn a_short_call_and_its_reply() {
    // xid, vers 2, credit 32, RDMA2_MSG, flags 0, inv_handle 0, three empty lists.
    let call = format!(
        "00000042 00000002 00000020 00000000 00000000 00000000 00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    let b = hex(&call);
    let h = v2::HeaderView::parse(&b).unwrap();
    assert_eq!(
        (h.xid(), h.vers(), h.credit(), h.htype(), h.flags()),
        (0x42, 2, 32, Htype::Msg, 0)
    );
    assert_eq!(h.inv_handle(), Some(0));
    assert_eq!(h.header_len(), MIN_MSG_LEN);
    assert_eq!(h.payload().len(), 40);
    assert_eq!(server(&call), v2::Action::Call);
    // A client that takes no reverse-direction Calls drops it.
    assert_eq!(client(&call), v2::Action::Discard);
    assert_eq!(
        v2::judge(&b, Role::Requester, true).action,
        v2::Action::Call,
        "a reverse-direction Call"
    );

    // The Reply carries RPCRDMA2_F_RESPONSE.
    let reply = format!(
        "00000042 00000002 00000020 00000000 00000001 00000000 00000000 00000000 00000000 {}",
        success_reply("00000042")
    );
    assert!(v2::HeaderView::parse(&hex(&reply)).unwrap().is_response());
    assert_eq!(client(&reply), v2::Action::Reply);
    // A server that sent no reverse Call drops a Reply, and never answers it with an error.
    assert_eq!(server(&reply), v2::Action::Discard);
    // A Reply without the flag is a Call whose message contradicts it.
    let unflagged = reply.replacen(
        "00000000 00000001 00000000 00000000",
        "00000000 00000000 00000000 00000000",
        1,
    );
    assert_eq!(server(&unflagged), v2::Action::Discard);
}

#[test]
fn chunks_and_the_invalidation_handle() {
    // inv_handle 0xabc names the write chunk's segment.
    let m = "00000007 00000002 00000010 00000000 00000000 00000abc \
             00000000 \
             00000001 00000001 00000abc 00001000 00000000 10000000 00000000 \
             00000000";
    let mut words = m.to_string();
    words.push(' ');
    words.push_str(&null_call("00000007"));
    let b = hex(&words);
    let h = v2::HeaderView::parse(&b).unwrap();
    assert_eq!(h.inv_handle(), Some(0xabc));
    assert_eq!(h.write_list().len(), 1);
    assert_eq!(server(&words), v2::Action::Call);
    // A handle no segment carries: RDMA2_ERR_BAD_XDR (CHECKLIST G-13 e).
    let stray = words.replacen("00000abc", "00000abd", 1);
    assert_eq!(
        v2::HeaderView::parse(&hex(&stray)),
        Err(v2::HeaderError::InvHandle { handle: 0xabd })
    );
    assert_eq!(server(&stray), v2::Action::Error(v2::RdmaError::BadXdr));
}

#[test]
fn hostile_headers_get_the_drafts_errors() {
    let base = format!(
        "00000042 00000002 00000020 00000000 00000000 00000000 00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    // Reserved flag bits.
    let flagged = format!(
        "00000042 00000002 00000020 00000000 00000100 00000000 00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(server(&base), v2::Action::Call);
    assert!(matches!(
        v2::HeaderView::parse(&hex(&flagged)),
        Err(v2::HeaderError::ReservedFlags { flags: 0x100 })
    ));
    assert_eq!(server(&flagged), v2::Action::Error(v2::RdmaError::BadXdr));
    // Unknown header types (2 and 3, version 1's deprecated ones, included).
    for htype in ["00000002", "00000003", "00000009"] {
        let m = format!("00000042 00000002 00000020 {htype} 00000000");
        assert_eq!(
            server(&m),
            v2::Action::Error(v2::RdmaError::InvalHtype),
            "{htype}"
        );
        // Never answered when it says it is a response.
        let m = format!("00000042 00000002 00000020 {htype} 00000001");
        assert_eq!(client(&m), v2::Action::Discard, "{htype}");
    }
    // Lists that run past the message, and a bad discriminator.
    assert_eq!(
        server("00000042 00000002 00000020 00000000 00000000 00000000 00000001 00000000"),
        v2::Action::Error(v2::RdmaError::BadXdr)
    );
    assert_eq!(
        server("00000042 00000002 00000020 00000001 00000000 00000000 00000007 00000000 00000000"),
        v2::Action::Error(v2::RdmaError::BadXdr)
    );
    // Another version: RDMA2_ERR_VERS with the range 1..2.
    assert_eq!(
        server("00000042 00000003 00000020 00000000 00000000"),
        v2::Action::Error(v2::RdmaError::Vers { low: 1, high: 2 })
    );
    // Too short to answer.
    assert_eq!(server("00000042 00000002"), v2::Action::Discard);
    // A property list that overruns the message, and a bad known value.
    assert_eq!(
        server("00000001 00000002 00000001 00000005 00000000 00000002 00000009 00000010 aaaaaaaa"),
        v2::Action::Error(v2::RdmaError::BadXdr)
    );
    assert_eq!(
        server("00000001 00000002 00000001 00000005 00000000 00000001 00000002 00000004 00000007"),
        v2::Action::Error(v2::RdmaError::BadXdr)
    );
}

#[test]
fn connprop_with_known_and_unknown_properties() {
    // Receive Buffer Size 8192 (CHECKLIST C.1's example), an unknown property 99 with
    // three bytes, Reverse Request Support GENL.
    let m = "00000001 00000002 00000001 00000005 00000000 00000003 \
             00000001 00000004 00002000 \
             00000063 00000003 01020300 \
             00000002 00000004 00000002";
    let b = hex(m);
    let h = v2::HeaderView::parse(&b).unwrap();
    let p = h.props().unwrap();
    assert_eq!(p.len(), 3);
    assert_eq!(p.recv_buf_size(), Some(8192));
    assert_eq!(p.reverse_requests(), Some(ReverseRequests::General));
    assert_eq!(h.header_len(), b.len());
    assert_eq!(server(m), v2::Action::Properties);
    assert_eq!(client(m), v2::Action::Properties);
}

#[test]
fn errors_and_the_fall_back_to_version_1() {
    // What a version 1 server answers a version 2 Call with: RDMA_ERROR ERR_VERS 1..1 in
    // version 1's fixed layout, echoing vers 2 (RFC 8166 §4.5.1; CHECKLIST G-13 a).
    let v1 = "00000042 00000002 00000020 00000004 00000001 00000001 00000001";
    let b = hex(v1);
    let h = v2::HeaderView::parse(&b).unwrap();
    assert!(h.is_v1_err_vers());
    assert_eq!(h.error(), Some(v2::RdmaError::Vers { low: 1, high: 1 }));
    assert_eq!(client(v1), v2::Action::FallBack { low: 1, high: 1 });
    // A version 2 RDMA2_ERR_REPLY_RESOURCE: 28 bytes with word 4 = 1 too (the RESPONSE
    // flag), told apart by its code, one of those with a one-word arm.
    let e = "00000042 00000002 00000020 00000004 00000001 00000008 00010000";
    let b = hex(e);
    let h = v2::HeaderView::parse(&b).unwrap();
    assert_eq!(
        h.error(),
        Some(v2::RdmaError::ReplyResource {
            length_needed: 65536
        })
    );
    assert_eq!(
        client(e),
        v2::Action::PeerError(v2::RdmaError::ReplyResource {
            length_needed: 65536
        })
    );
    // An error without the RESPONSE flag names no XID of ours; errors are never answered.
    let e0 = "00000042 00000002 00000020 00000004 00000000 00000009";
    assert_eq!(client(e0), v2::Action::Discard);
    assert_eq!(server(e0), v2::Action::Discard);
    // An error code of an extension: the void arm.
    let ext = "00000042 00000002 00000020 00000004 00000001 00000064";
    assert_eq!(
        v2::HeaderView::parse(&hex(ext)).unwrap().error(),
        Some(v2::RdmaError::Other { code: 100 })
    );
}

#[test]
fn every_header_type_round_trips_through_the_encoder() {
    let reads = [ReadSegment::new(0, 7, 300, 0x1000)];
    let w0 = [Segment::new(9, 4096, 0x2000)];
    let writes: [&[Segment]; 1] = [&w0];
    let reply = [Segment::new(11, 1024, 0x3000)];
    let chunks = Chunks {
        reads: &reads,
        writes: &writes,
        reply: Some(&reply),
    };
    let props = [
        Property::RecvBufSize(Some(16384)),
        Property::ReverseRequests(Some(ReverseRequests::Inline)),
        Property::Unknown {
            id: 1234,
            data: b"xyz12",
        },
    ];
    let headers = [
        v2::Header::call(5, 32, 9, chunks, false),
        v2::Header::call(5, 32, 7, chunks, true),
        v2::Header::reply(6, 16, Chunks::NONE, false),
        v2::Header::error(
            7,
            2,
            16,
            v2::RdmaError::WriteResource {
                chunk_index: 1,
                length_needed: 8192,
            },
        ),
        v2::Header::error(7, 3, 16, v2::RdmaError::Vers { low: 1, high: 2 }),
        v2::Header::error(8, 2, 16, v2::RdmaError::System),
        v2::Header::connprop(1, 1, &props),
    ];
    for h in headers {
        let mut out = vec![0u8; h.encoded_len()];
        assert_eq!(h.encode(&mut out), Ok(out.len()));
        // Too small a buffer: refused, nothing written.
        let mut small = vec![0u8; h.encoded_len() - 1];
        assert!(h.encode(&mut small).is_err());
        if h.vers != 2 {
            continue;
        }
        let v = v2::HeaderView::parse(&out).unwrap_or_else(|e| panic!("{h:?}: {e}"));
        assert_eq!((v.xid(), v.credit(), v.flags()), (h.xid, h.credit, h.flags));
        assert_eq!(v.htype(), h.body.htype());
        assert_eq!(v.header_len(), out.len());
        match h.body {
            rpcrdma_proto::v2::Body::Msg { inv_handle, .. }
            | rpcrdma_proto::v2::Body::NoMsg { inv_handle, .. } => {
                assert_eq!(v.inv_handle(), Some(inv_handle));
                assert_eq!(v.read_list().iter().count(), h_reads(&h));
            }
            rpcrdma_proto::v2::Body::Error(e) => assert_eq!(v.error(), Some(e)),
            rpcrdma_proto::v2::Body::ConnProp(p) => {
                assert_eq!(v.props().unwrap().properties().collect::<Vec<_>>(), p)
            }
        }
    }
    // The reply's flag.
    let mut out = [0u8; 64];
    let n = v2::Header::reply(6, 16, Chunks::NONE, false)
        .encode(&mut out)
        .unwrap();
    assert_eq!(n, MIN_MSG_LEN);
    assert_eq!(&out[16..20], &flags::RESPONSE.to_be_bytes());
    assert_eq!(PREFIX_LEN, 20);
}

fn h_reads(h: &v2::Header<'_>) -> usize {
    match h.body {
        rpcrdma_proto::v2::Body::Msg { chunks, .. }
        | rpcrdma_proto::v2::Body::NoMsg { chunks, .. } => chunks.reads.len(),
        _ => 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// No input makes the decoder or the verdict panic, in either role.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = v2::HeaderView::parse(&bytes);
        for role in [Role::Responder, Role::Requester] {
            for reverse in [false, true] {
                let _ = v2::judge(&bytes, role, reverse);
            }
        }
    }

    /// Version 2 prefixes with random words after them: decoded or refused, never a panic,
    /// and an accepted header never claims more bytes than the message has.
    #[test]
    fn version_2_prefixes_with_random_bodies(
        htype in prop_oneof![Just(0u32), Just(1), Just(4), Just(5), any::<u32>()],
        flags in prop_oneof![Just(0u32), Just(1), any::<u32>()],
        body in proptest::collection::vec(
            prop_oneof![Just(0u32), Just(1), Just(2), 0u32..64, any::<u32>()], 0..24),
    ) {
        let mut bytes = Vec::new();
        for w in [0x42u32, 2, 32, htype, flags].into_iter().chain(body) {
            bytes.extend_from_slice(&w.to_be_bytes());
        }
        if let Ok(h) = v2::HeaderView::parse(&bytes) {
            prop_assert!(h.header_len() <= bytes.len());
            prop_assert_eq!(h.vers(), 2);
            prop_assert_eq!(h.flags() & !flags::KNOWN, 0);
        }
        let _ = v2::judge(&bytes, Role::Responder, true);
    }

    /// Encoded Calls with random chunks decode to what was encoded.
    #[test]
    fn encoded_calls_decode_to_their_fields(
        xid in any::<u32>(), credit in any::<u32>(),
        reads in proptest::collection::vec((0u32..1024, any::<u32>(), any::<u32>(), any::<u64>()), 0..4),
        writes in proptest::collection::vec(
            proptest::collection::vec((any::<u32>(), any::<u32>(), any::<u64>()), 0..3), 0..3),
        pick in any::<prop::sample::Index>(),
        external in any::<bool>(),
    ) {
        let reads: Vec<ReadSegment> = reads.iter().map(|&(p, h, l, o)| ReadSegment::new(p * 4, h, l, o)).collect();
        let writes: Vec<Vec<Segment>> = writes.iter().map(|c| c.iter().map(|&(h, l, o)| Segment::new(h, l, o)).collect()).collect();
        let wrefs: Vec<&[Segment]> = writes.iter().map(|c| c.as_slice()).collect();
        let handles: Vec<u32> = reads.iter().map(|r| r.segment.handle)
            .chain(writes.iter().flatten().map(|s| s.handle)).collect();
        let inv = if handles.is_empty() { 0 } else { handles[pick.index(handles.len())] };
        let h = v2::Header::call(xid, credit, inv, Chunks { reads: &reads, writes: &wrefs, reply: None }, external);
        let mut out = vec![0u8; h.encoded_len()];
        h.encode(&mut out).unwrap();
        let v = v2::HeaderView::parse(&out).unwrap();
        prop_assert_eq!(v.xid(), xid);
        prop_assert_eq!(v.credit(), credit);
        prop_assert_eq!(v.inv_handle(), Some(inv));
        prop_assert_eq!(v.read_list().iter().collect::<Vec<_>>(), reads);
        prop_assert_eq!(v.write_list().len(), writes.len());
        prop_assert_eq!(v.header_len(), out.len());
    }
}

/// A bare RDMA2_MSG (`flags`), an RPC message after it, then mutated at `at` by `delta`.
fn bare_v2(xid: u32, flags: u32, rpc: &[u8], mutate: Option<(usize, u8)>) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [xid, 2, 32, 0, flags, 0, 0, 0, 0] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    b.extend_from_slice(rpc);
    if let Some((at, d)) = mutate {
        let i = at % b.len();
        b[i] ^= d;
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// The Short-Call fast path accepts exactly the bare Calls `v2::judge_call` accepts, with
    /// the same XID, credit, call header and arguments; mutations included.
    #[test]
    fn short_call2_agrees_with_judge_call2(
        xid in any::<u32>(), prog in any::<u32>(), proc_num in 0u32..8,
        args in proptest::collection::vec(any::<u8>(), 0..12),
        mutate in proptest::option::of((any::<usize>(), 1u8..=255)),
    ) {
        use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth};
        use rpcrdma_proto::v2;
        let mut rpc = vec![0u8; 64];
        let n = CallHeader::new(xid, prog, 1, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE)
            .encode(&mut rpc).unwrap();
        rpc.truncate(n);
        rpc.extend_from_slice(&args[..args.len() & !3]);
        let m = bare_v2(xid, 0, &rpc, mutate);
        let fast = v2::short_call(&m);
        let full = v2::judge_call(&m, Role::Responder, false);
        let bare = m.len() >= 40 && m[12..16] == [0; 4] && m[16..36] == [0; 20] && m[4..8] == [0, 0, 0, 2];
        match (&fast, &full) {
            (Some(f), Ok(a)) => {
                prop_assert_eq!(f.xid, a.header.xid());
                prop_assert_eq!(f.credit, a.header.credit());
                prop_assert_eq!(Some((f.call, f.call_len)), a.call);
                prop_assert_eq!(f.args, &a.header.payload()[f.call_len..]);
            }
            (None, Ok(_)) => prop_assert!(!bare, "the fast path refused a bare Call v2::judge_call accepts"),
            (Some(_), Err(v)) => prop_assert!(false, "the fast path accepted what v2::judge_call refuses: {:?}", v),
            (None, Err(_)) => {}
        }
    }

    /// The same for Short Replies and `v2::judge_reply`.
    #[test]
    fn short_reply2_agrees_with_judge_reply2(
        xid in any::<u32>(), results in proptest::collection::vec(any::<u8>(), 0..12),
        mutate in proptest::option::of((any::<usize>(), 1u8..=255)),
    ) {
        use rpcrdma_proto::rpc::ReplyHeader;
        use rpcrdma_proto::v2;
        let mut rpc = vec![0u8; 64];
        let n = ReplyHeader::accepted_success(xid).encode(&mut rpc).unwrap();
        rpc.truncate(n);
        rpc.extend_from_slice(&results[..results.len() & !3]);
        let m = bare_v2(xid, 1, &rpc, mutate);
        let fast = v2::short_reply(&m);
        let full = v2::judge_reply(&m, Role::Requester, false);
        let bare = m.len() >= 40 && m[12..16] == [0; 4] && m[16..20] == [0, 0, 0, 1]
            && m[20..36] == [0; 16] && m[4..8] == [0, 0, 0, 2];
        match (&fast, &full) {
            (Some(f), Ok(a)) => {
                prop_assert_eq!(f.xid, a.header.xid());
                prop_assert_eq!(f.credit, a.header.credit());
                prop_assert_eq!(Some((f.reply, f.reply_len)), a.reply);
            }
            (None, Ok(_)) => prop_assert!(!bare, "the fast path refused a bare Reply v2::judge_reply accepts"),
            (Some(_), Err(v)) => prop_assert!(false, "the fast path accepted what v2::judge_reply refuses: {:?}", v),
            (None, Err(_)) => {}
        }
    }
}

/// The one classification (`shape::call_shape`, `shape::reply_shape`) of a message on a
/// version 2 connection agrees with version 2's full verdicts: refused exactly when they
/// refuse (a message in another version with ERR_VERS 2..2), with their verdict; otherwise
/// the shape the accepted message has, carrying what the verdict found.
fn check_shapes2(m: &[u8]) -> Result<(), TestCaseError> {
    use rpcrdma_proto::header::Proc;
    use rpcrdma_proto::shape::{call_shape, reply_shape, CallShape, Refusal, ReplyShape};
    use rpcrdma_proto::v2;
    use rpcrdma_proto::v2::Wire;
    use rpcrdma_proto::verdict::Action;
    let shape = call_shape(m, Wire::V2);
    let v2 = m.get(4..8) == Some(&2u32.to_be_bytes()[..]);
    match (v2::judge_call(m, Role::Responder, false), &shape) {
        (_, CallShape::Refused(Refusal::V1(v))) => {
            prop_assert!(!v2);
            prop_assert_eq!(v.action, Action::ErrVers { low: 2, high: 2 });
        }
        (Err(v), CallShape::Refused(Refusal::V2(r))) => prop_assert_eq!(v, *r),
        (Err(_), _) => prop_assert!(false, "a refused Call took a shape"),
        (Ok(_), CallShape::Refused(_)) => prop_assert!(false, "an accepted Call was refused"),
        (Ok(a), s) => {
            prop_assert!(v2);
            let h = &a.header;
            let chunked = a.plan.chunk_count() > 0;
            match s {
                CallShape::Short(sc) => {
                    prop_assert!(
                        !chunked && h.write_list().is_empty() && h.reply_chunk().is_none()
                    );
                    prop_assert_eq!((sc.xid, sc.credit), (h.xid(), h.credit()));
                    prop_assert_eq!(Some((sc.call, sc.call_len)), a.call);
                    prop_assert_eq!(sc.args, &h.payload()[sc.call_len..]);
                }
                CallShape::Written(w) => {
                    prop_assert!(!chunked && h.reply_chunk().is_none());
                    prop_assert_eq!(w.writes, h.write_list());
                    prop_assert!(w.writes.iter().all(|c| !c.is_empty()) && !w.writes.is_empty());
                    prop_assert_eq!(Some((w.call, w.call_len)), a.call);
                }
                CallShape::Pulled(c) => {
                    prop_assert_eq!(c, &a);
                    prop_assert!(chunked && h.proc() == Proc::Msg);
                }
                CallShape::Long(c) => {
                    prop_assert_eq!(c, &a);
                    prop_assert!(chunked && h.proc() == Proc::NoMsg);
                }
                CallShape::General(c) => {
                    prop_assert_eq!(c, &a);
                    prop_assert!(!chunked);
                }
                CallShape::Refused(_) => unreachable!(),
            }
        }
    }
    for reverse in [false, true] {
        let shape = reply_shape(m, Wire::V2, reverse);
        match (v2::judge_reply(m, Role::Requester, reverse), &shape) {
            (Err(v), ReplyShape::Refused(Refusal::V2(r))) => prop_assert_eq!(v, *r),
            (Err(_), _) => prop_assert!(false, "a refused answer took a shape"),
            (Ok(_), ReplyShape::Refused(_)) => prop_assert!(false, "an accepted Reply was refused"),
            (Ok(a), s) => {
                let h = &a.header;
                let bare_lists = h.read_list().is_empty() && h.reply_chunk().is_none();
                match s {
                    ReplyShape::Short(sr) => {
                        prop_assert!(bare_lists && h.write_list().is_empty());
                        prop_assert_eq!(Some((sr.reply, sr.reply_len)), a.reply);
                        prop_assert_eq!((sr.xid, sr.credit), (h.xid(), h.credit()));
                    }
                    ReplyShape::Written(w) => {
                        prop_assert!(bare_lists && !h.write_list().is_empty());
                        prop_assert_eq!(w.writes, h.write_list());
                        prop_assert_eq!(Some((w.reply, w.reply_len)), a.reply);
                    }
                    ReplyShape::General(r) => {
                        prop_assert_eq!(r, &a);
                        prop_assert!(a.reply.is_none() || !bare_lists || h.error().is_some());
                    }
                    ReplyShape::Refused(_) => unreachable!(),
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Version 2 Calls and Replies of every shape (chunks or none, inline or in a
    /// Position-Zero chunk, the RPC XID the transport's or another), some mutated, and
    /// random bytes: classified as the full verdicts judge them.
    #[test]
    fn shapes_agree_with_the_version_2_verdicts(
        xid in prop_oneof![Just(7u32), any::<u32>()],
        rpc_xid_same in any::<bool>(),
        reply in any::<bool>(),
        external in prop_oneof![4 => Just(false), 1 => Just(true)],
        reads in proptest::collection::vec((0u32..16, any::<u32>(), 1u32..4096, any::<u32>()), 0..3),
        writes in proptest::collection::vec(
            proptest::collection::vec((any::<u32>(), 1u32..4096, any::<u32>()), 0..3), 0..3),
        reply_chunk in proptest::option::of(
            proptest::collection::vec((any::<u32>(), 1u32..4096, any::<u32>()), 0..2)),
        mutate in proptest::option::of((any::<usize>(), 1u8..=255)),
        random in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth, ReplyHeader, AcceptStat};
        let reads: Vec<ReadSegment> =
            reads.iter().map(|&(p, h, l, o)| ReadSegment::new(p * 4, h, l, u64::from(o))).collect();
        let writes: Vec<Vec<Segment>> = writes.iter()
            .map(|c| c.iter().map(|&(h, l, o)| Segment::new(h, l, u64::from(o))).collect()).collect();
        let wrefs: Vec<&[Segment]> = writes.iter().map(|c| c.as_slice()).collect();
        let rc: Option<Vec<Segment>> = reply_chunk
            .map(|c| c.iter().map(|&(h, l, o)| Segment::new(h, l, u64::from(o))).collect());
        let chunks = Chunks { reads: &reads, writes: &wrefs, reply: rc.as_deref() };
        let h = if reply {
            v2::Header::reply(xid, 32, chunks, external)
        } else {
            v2::Header::call(xid, 32, 0, chunks, external)
        };
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        let rx = if rpc_xid_same { xid } else { xid ^ 1 };
        let mut rpc = vec![0u8; 128];
        let n = if reply {
            ReplyHeader::accepted(rx, OpaqueAuth::NONE, AcceptStat::Success).encode(&mut rpc).unwrap()
        } else {
            CallHeader::new(rx, 100003, 3, 0, OpaqueAuth::NONE, OpaqueAuth::NONE).encode(&mut rpc).unwrap()
        };
        if !external {
            m.extend_from_slice(&rpc[..n]);
        }
        if let Some((at, d)) = mutate {
            let i = at % m.len();
            m[i] ^= d;
        }
        check_shapes2(&m)?;
        check_shapes2(&random)?;
    }
}

/// Version 2 Calls of each shape are classified as such (the property test above compares
/// every classification with the full verdict; this one sees that each shape occurs).
#[test]
fn version_2_calls_take_each_shape() {
    use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth};
    use rpcrdma_proto::shape::{call_shape, CallForm};
    use rpcrdma_proto::v2::Wire;
    let mut rpc = vec![0u8; 64];
    let n = CallHeader::new(9, 100003, 3, 0, OpaqueAuth::NONE, OpaqueAuth::NONE)
        .encode(&mut rpc)
        .unwrap();
    let seg = [Segment::new(5, 512, 0x1000)];
    let reads = [ReadSegment::new(0, 6, 200, 0x2000)];
    let mid = [ReadSegment::new(n as u32, 6, 200, 0x2000)];
    let form = |reads: &[ReadSegment], writes: &[&[Segment]], reply, external| {
        let h = v2::Header::call(
            9,
            32,
            0,
            Chunks {
                reads,
                writes,
                reply,
            },
            external,
        );
        let mut m = vec![0u8; h.encoded_len()];
        h.encode(&mut m).unwrap();
        if !external {
            m.extend_from_slice(&rpc[..n]);
        }
        call_shape(&m, Wire::V2).form()
    };
    assert_eq!(form(&[], &[], None, false), CallForm::Short);
    assert_eq!(form(&[], &[&seg], None, false), CallForm::Written);
    assert_eq!(form(&mid, &[], None, false), CallForm::Pulled);
    assert_eq!(form(&reads, &[], None, true), CallForm::Long);
    assert_eq!(form(&[], &[], Some(&seg), false), CallForm::General);
    assert_eq!(
        call_shape(
            &hex(&format!(
                "00000009 00000001 00000020 00000000 00000000 00000000 00000000 {}",
                null_call("00000009")
            )),
            Wire::V2
        )
        .form(),
        CallForm::Refused
    );
}
