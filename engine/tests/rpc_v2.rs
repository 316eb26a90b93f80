//! RPC-over-RDMA version 2 ([V2], draft-cel-nfsv4-rpcrdma-version-two-09) between the
//! engine's own peers on the soft fabric: negotiation per connection (§7: RDMA2_CONNPROP
//! first, fallback to version 1 on ERR_VERS, remembered per server), every message form
//! with data verified, per-RPC remote invalidation through `rdma_inv_handle` (§3.3), the
//! precise RDMA2_ERRORs, and hostile version 2 headers against the responder.

mod common;
mod raw;

use std::time::{Duration, Instant};

use common::*;
use raw::*;
use rpcrdma_engine::conn::{ConnConfig, ConnError, Registration, Version, Wire};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::{Provider, WcStatus};
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::requester::{CallArgs, Client, RpcError};
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, RdmaError, Segment};
use rpcrdma_proto::rpc::ReplyHeader;
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::props::Property;
use rpcrdma_proto::v2::Htype;

fn cfg(version: Version) -> ConnConfig {
    ConnConfig {
        version,
        ..ConnConfig::default()
    }
}

fn pair(client: ConnConfig, server: ConnConfig) -> (Client<Soft>, ServerConn<Soft>) {
    let (mut srv, addr) = soft_server(dispatch(), server).expect("listen");
    connect_to(&mut srv, &addr, client).expect("connect")
}

/// Every form of Call and Reply, each checked byte for byte; returns nothing, panics on a
/// wrong answer.
fn every_form(c: &mut Client<Soft>, s: &mut ServerConn<Soft>) {
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    for _ in 0..5 {
        assert!(call(c, s, &null, |x| x.result.unwrap().is_success()));
    }
    // ECHO: Short, then Long Call with Long Reply.
    for len in [100usize, 3000, 20_000] {
        let payload = pattern(len as u32, len);
        let args = opaque(&payload);
        let a = CallArgs::new(PROG, VERS, ECHO, &args, (args.len() + 4) as u32);
        let echoed = call(c, s, &a, |x| x.result.unwrap().results.to_vec());
        assert_eq!(echoed, args, "echo of {len}");
    }
    // WRITE: data through a Read chunk (and inline when small).
    for len in [200usize, 70_000, 1 << 20] {
        let data = pattern(len as u32, len);
        let seed = (len as u32).to_be_bytes();
        let mut a = CallArgs::new(PROG, VERS, WRITE, &seed, 8);
        a.bulk_arg = Some(&data);
        let (ok, n) = call(c, s, &a, |x| {
            let r = x.result.expect("reply");
            (r.results[3], word(r.results, 4).unwrap())
        });
        assert_eq!((ok, n as usize), (1, len), "write of {len}");
    }
    // READ: the result through a Write chunk.
    for len in [64usize, 65_536, 1 << 20] {
        let args = encode_words(len as u32, 9);
        let want = [len as u32];
        let mut a = CallArgs::new(PROG, VERS, READ, &args, 4);
        a.bulk_results = &want;
        let good = call(c, s, &a, |x| {
            let r = x.result.expect("reply");
            r.bulk()[0].len() == len && is_pattern(9, r.bulk()[0])
        });
        assert!(good, "read of {len}");
    }
}

use rpcrdma_engine::program::{encode_words, is_pattern};

#[test]
fn version_2_carries_every_form_with_per_rpc_invalidation() {
    for reg in [Registration::Windows, Registration::Persistent] {
        let c2 = ConnConfig {
            registration: reg,
            ..cfg(Version::V2)
        };
        let (mut c, mut s) = pair(c2, cfg(Version::Auto));
        assert_eq!(c.negotiation().wire(), Wire::V2);
        assert_eq!(s.negotiation().wire(), Wire::V2);
        // Version 2's default threshold, the Receive Buffer Size each end sent.
        assert_eq!(c.negotiation().call_threshold(), 4096);
        assert_eq!(s.negotiation().reply_threshold(), 4096);
        every_form(&mut c, &mut s);
        let (cs, ss) = (c.snapshot(), s.snapshot());
        assert_eq!((cs.connprops_sent, ss.connprops_received), (1, 1));
        assert_eq!((ss.connprops_sent, cs.v2_connections), (1, 1));
        assert!(ss.short_calls > 0 && ss.chunked_calls > 0 && ss.long_calls > 0);
        assert!(ss.long_replies > 0 && ss.write_chunks > 0);
        assert_eq!(
            ss.err_chunk + ss.rdma2_errors + ss.discards + ss.err_vers,
            0
        );
        match reg {
            // Each RPC with chunks names its result window (or its argument window) in
            // rdma_inv_handle; the responder invalidates exactly that one.
            Registration::Windows => {
                assert!(ss.remote_invalidations > 0);
                assert_eq!(cs.remote_invalidations, ss.remote_invalidations);
            }
            // Regions are never named: no Send With Invalidate.
            Registration::Persistent | Registration::Mixed => {
                assert_eq!(ss.remote_invalidations + cs.remote_invalidations, 0);
                assert_eq!(cs.local_invalidations, 0);
            }
        }
    }
}

#[test]
fn remote_invalidation_refused_by_the_responder_leaves_local_invalidation() {
    let (mut c, mut s) = pair(
        cfg(Version::V2),
        ConnConfig {
            remote_invalidation: false,
            ..cfg(Version::Auto)
        },
    );
    every_form(&mut c, &mut s);
    let (cs, ss) = (c.snapshot(), s.snapshot());
    assert_eq!(ss.remote_invalidations, 0);
    assert!(cs.local_invalidations > 0);
}

#[test]
fn version_1_client_on_an_auto_server_stays_version_1() {
    let (mut c, mut s) = pair(cfg(Version::V1), cfg(Version::Auto));
    every_form(&mut c, &mut s);
    assert_eq!(s.negotiation().wire(), Wire::V1);
    assert_eq!(s.snapshot().connprops_received, 0);
    assert_eq!(s.snapshot().v2_connections, 0);
}

#[test]
fn auto_client_falls_back_on_a_version_1_server_and_remembers_it() {
    let (mut srv, addr) = soft_server(dispatch(), cfg(Version::V1)).unwrap();
    let (mut c, mut s) = connect_to(&mut srv, &addr, cfg(Version::Auto)).unwrap();
    assert_eq!(c.negotiation().wire(), Wire::V1);
    let cs = c.snapshot();
    assert_eq!((cs.connprops_sent, cs.version_fallbacks), (1, 1));
    // The server answered ERR_VERS 1..1 to the opening and serves version 1 on the same
    // connection.
    assert_eq!(s.snapshot().err_vers, 1);
    every_form(&mut c, &mut s);
    // A second connection to the same server starts in version 1 at once (§7.2).
    let (c2, _s2) = connect_to(&mut srv, &addr, cfg(Version::Auto)).unwrap();
    assert_eq!(c2.snapshot().connprops_sent, 0);
    assert_eq!(c2.negotiation().wire(), Wire::V1);
}

#[test]
fn version_2_client_refuses_a_version_1_server() {
    let (mut srv, addr) = soft_server(dispatch(), cfg(Version::V1)).unwrap();
    match connect_to(&mut srv, &addr, cfg(Version::V2)) {
        Err(ConnError::Version { low: 1, high: 1 }) => {}
        other => panic!("expected ConnError::Version, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn version_1_client_on_a_version_2_server_gets_err_vers() {
    let (mut c, mut s) = pair(cfg(Version::V1), cfg(Version::V2));
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let r = call(&mut c, &mut s, &null, |x| x.result.err());
    assert_eq!(r, Some(RpcError::ErrVers { low: 2, high: 2 }));
}

#[test]
fn auto_client_on_auto_server_speaks_version_2() {
    // (Each test's server has an address of its own: none is remembered as version 1.)
    let (mut c, mut s) = pair(cfg(Version::Auto), cfg(Version::Auto));
    assert_eq!(c.negotiation().wire(), Wire::V2);
    every_form(&mut c, &mut s);
}

/// Precise errors: a Write chunk too short for its result is RDMA2_ERR_WRITE_RESOURCE with
/// the 1-based chunk index and the bytes needed; a reply too large for the threshold
/// without a Reply chunk is RDMA2_ERR_REPLY_RESOURCE (version 1 can only say ERR_CHUNK).
#[test]
fn precise_errors_reach_the_requester() {
    let (mut srv, addr) = soft_server(dispatch(), cfg(Version::Auto)).unwrap();
    let (mut raw, mut s) = raw_connect(&mut srv, &addr);
    open_raw_v2(&mut raw, &mut s);
    let data = raw.ends.data_at(0);
    // READ of 5000 bytes into a 1000-byte Write chunk.
    let seg = [Segment::new(data.rkey, 1000, data.addr)];
    let writes: [&[Segment]; 1] = [&seg];
    let chunks = Chunks {
        writes: &writes,
        ..Chunks::NONE
    };
    let mut args = call_header_of(0x50, 2, PROG, VERS, READ);
    args.extend_from_slice(&encode_words(5000, 1));
    let m = v2_msg(0x50, 0, chunks, &args);
    raw.send(&m);
    let back = raw.expect(&mut s);
    let h = v2::HeaderView::parse(&back).expect("RDMA2_ERROR");
    assert_eq!(h.xid(), 0x50);
    assert!(h.is_response());
    assert_eq!(
        h.error(),
        Some(v2::RdmaError::WriteResource {
            chunk_index: 1,
            length_needed: 5000
        })
    );
    // READ of 5000 bytes without a Write chunk or a Reply chunk: inline, the reply cannot
    // fit 4096 bytes.
    let mut args = call_header_of(0x51, 2, PROG, VERS, READ);
    args.extend_from_slice(&encode_words(5000, 1));
    raw.send(&v2_msg(0x51, 0, Chunks::NONE, &args));
    let back = raw.expect(&mut s);
    let h = v2::HeaderView::parse(&back).expect("RDMA2_ERROR");
    assert!(
        matches!(h.error(), Some(v2::RdmaError::ReplyResource { .. })),
        "{h:?}"
    );
    // The connection still serves.
    let null = call_header_of(0x52, 2, PROG, VERS, NULL);
    raw.send(&v2_msg(0x52, 0, Chunks::NONE, &null));
    let back = raw.expect(&mut s);
    let h = v2::HeaderView::parse(&back).expect("reply");
    assert_eq!(
        (h.xid(), h.htype(), h.is_response()),
        (0x52, Htype::Msg, true)
    );
    assert_eq!(s.snapshot().rdma2_errors, 2);
}

/// Hostile version 2 headers: each gets the draft's answer (or none) and the connection
/// keeps serving.
#[test]
fn hostile_version_2_headers_get_the_drafts_errors() {
    let (mut srv, addr) = soft_server(dispatch(), cfg(Version::Auto)).unwrap();
    let (mut raw, mut s) = raw_connect(&mut srv, &addr);
    open_raw_v2(&mut raw, &mut s);
    let null = |xid| {
        v2_msg(
            xid,
            0,
            Chunks::NONE,
            &call_header_of(xid, 2, PROG, VERS, NULL),
        )
    };
    let mut cases: Vec<(&str, Vec<u8>, Option<v2::RdmaError>)> = Vec::new();
    let mut flags = null(0x60);
    flags[16..20].copy_from_slice(&0x8000_0000u32.to_be_bytes());
    cases.push(("reserved flag bit", flags, Some(v2::RdmaError::BadXdr)));
    let mut htype = null(0x61);
    htype[12..16].copy_from_slice(&9u32.to_be_bytes());
    cases.push(("unknown htype 9", htype, Some(v2::RdmaError::InvalHtype)));
    let mut inv = null(0x62);
    inv[20..24].copy_from_slice(&0x1234u32.to_be_bytes());
    cases.push((
        "inv_handle naming no handle",
        inv,
        Some(v2::RdmaError::BadXdr),
    ));
    // RDMA2_CONNPROP whose one property claims 2^31 bytes.
    let mut over = Vec::new();
    for w in [0x63u32, 2, 32, 5, 0, 1, 1, 0x8000_0000] {
        over.extend_from_slice(&w.to_be_bytes());
    }
    cases.push((
        "property list overrunning",
        over,
        Some(v2::RdmaError::BadXdr),
    ));
    // A known property of the wrong size.
    let mut bad = Vec::new();
    for w in [0x64u32, 2, 32, 5, 0, 1, 1, 2, 0] {
        bad.extend_from_slice(&w.to_be_bytes());
    }
    cases.push((
        "receive buffer size of 2 bytes",
        bad,
        Some(v2::RdmaError::BadXdr),
    ));
    // Truncated chunk lists.
    let t = null(0x65)[..30].to_vec();
    cases.push(("lists cut short", t, Some(v2::RdmaError::BadXdr)));
    // An RDMA2_ERROR sent to a responder: never answered.
    let e = v2::Header::error(0x66, 2, 32, v2::RdmaError::System);
    let mut eb = vec![0; e.encoded_len()];
    e.encode(&mut eb).unwrap();
    cases.push(("RDMA2_ERROR at a responder", eb, None));
    // A response (RPCRDMA2_F_RESPONSE) to a responder that made no reverse Call.
    let mut resp = null(0x67);
    resp[16..20].copy_from_slice(&1u32.to_be_bytes());
    cases.push(("a response nobody asked for", resp, None));
    for (name, m, want) in cases {
        let before = s.snapshot();
        raw.send(&m);
        match want {
            Some(err) => {
                let back = raw.expect(&mut s);
                let h = v2::HeaderView::parse(&back).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(h.error(), Some(err), "{name}");
                assert!(h.is_response(), "{name}");
                assert_eq!(
                    h.xid(),
                    u32::from_be_bytes(m[..4].try_into().unwrap()),
                    "{name}"
                );
            }
            None => {
                raw.expect_nothing(&mut s);
                assert_eq!(s.snapshot().discards, before.discards + 1, "{name}");
            }
        }
        assert!(!s.is_dead(), "{name}: connection survives");
        let xid = 0x70;
        raw.send(&null(xid));
        let back = raw.expect(&mut s);
        assert_eq!(
            v2::HeaderView::parse(&back).map(|h| h.xid()).ok(),
            Some(xid),
            "{name}"
        );
    }
}

/// A first message with `rdma_vers` 2 that does not decode as version 2 decides nothing on
/// an open (`Version::Auto`) connection (\[V2\] §5.3.3, §7): it gets the RDMA2_ERROR that
/// version 2's verdict gives it (or nothing, for a malformed response) without the
/// connection switching, so that a valid version 1 NULL after it is answered in version 1,
/// a valid version 2 one in version 2; that valid message then decides the version, as a
/// first valid message does.
#[test]
fn an_undecodable_version_2_first_message_decides_nothing() {
    let (mut srv, addr) = soft_server(dispatch(), cfg(Version::Auto)).unwrap();
    let v2_null = |xid| {
        v2_msg(
            xid,
            0,
            Chunks::NONE,
            &call_header_of(xid, 2, PROG, VERS, NULL),
        )
    };
    let mut cases: Vec<(&str, Vec<u8>, Option<v2::RdmaError>)> = Vec::new();
    // What a hostile peer sent: version 1's layout with rdma_vers 2.
    let mut v1_layout = null_call(0x80);
    set_word(&mut v1_layout, 4, 2);
    cases.push((
        "version 1 layout with rdma_vers 2",
        v1_layout,
        Some(v2::RdmaError::BadXdr),
    ));
    let mut flags = v2_null(0x81);
    set_word(&mut flags, 16, 0x8000_0000);
    cases.push(("reserved flag bit", flags, Some(v2::RdmaError::BadXdr)));
    let mut htype = v2_null(0x82);
    set_word(&mut htype, 12, 9);
    cases.push(("unknown htype 9", htype, Some(v2::RdmaError::InvalHtype)));
    let mut bad = Vec::new();
    for w in [0x83u32, 2, 32, 5, 0, 1, 1, 2, 0] {
        bad.extend_from_slice(&w.to_be_bytes());
    }
    cases.push((
        "RDMA2_CONNPROP with a 2-byte receive buffer size",
        bad,
        Some(v2::RdmaError::BadXdr),
    ));
    // Its header parses, but the verdict finds it malformed.
    let mut xid = v2_null(0x84);
    set_word(&mut xid, 28, 0x999);
    cases.push(("RPC XID ≠ rdma_xid", xid, Some(v2::RdmaError::BadXdr)));
    // Version 1's layout with rdma_vers 2 and RPCRDMA2_F_RESPONSE where its read list is:
    // a malformed response, dropped.
    let mut response = null_call(0x85);
    set_word(&mut response, 4, 2);
    set_word(&mut response, 16, 1);
    cases.push(("malformed response", response, None));
    for (name, m, err) in &cases {
        for then_v2 in [false, true] {
            let what = format!("{name}, then version {}", if then_v2 { 2 } else { 1 });
            let (mut raw, mut s) = raw_connect(&mut srv, &addr);
            raw.send(m);
            match err {
                Some(err) => {
                    let back = raw.expect(&mut s);
                    let h =
                        v2::HeaderView::parse(&back).unwrap_or_else(|e| panic!("{what}: {e:?}"));
                    assert_eq!(
                        (h.xid(), h.vers(), h.htype(), h.is_response(), h.error()),
                        (w(m, 0), 2, Htype::Error, true, Some(*err)),
                        "{what}"
                    );
                    assert_eq!(s.snapshot().rdma2_errors, 1, "{what}");
                }
                None => {
                    raw.expect_nothing(&mut s);
                    assert_eq!(s.snapshot().discards, 1, "{what}");
                }
            }
            assert_eq!(s.negotiation().wire(), Wire::V1, "{what}: still open");
            assert_eq!(s.snapshot().v2_connections, 0, "{what}");
            let xid = 0x90;
            if then_v2 {
                raw.send(&v2_null(xid));
                let back = raw.expect(&mut s);
                let h = v2::HeaderView::parse(&back).unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!(
                    (h.xid(), h.vers(), h.htype(), h.is_response()),
                    (xid, 2, Htype::Msg, true),
                    "{what}"
                );
                let (r, _) = ReplyHeader::parse(h.payload()).expect("RPC reply");
                assert!(r.xid == xid && r.is_success(), "{what}: {r:?}");
                assert_eq!(s.negotiation().wire(), Wire::V2, "{what}");
                assert_eq!(s.snapshot().v2_connections, 1, "{what}");
                // Decided: a version 1 Call now gets ERR_VERS 2..2 (§7.3).
                raw.send(&null_call(0x91));
                let back = raw.expect(&mut s);
                assert_eq!(
                    [w(&back, 0), w(&back, 4), w(&back, 12), w(&back, 16)],
                    [0x91, 1, 4, 1],
                    "{what}: ERR_VERS"
                );
                assert_eq!([w(&back, 20), w(&back, 24)], [2, 2], "{what}: 2..2");
            } else {
                raw.send(&null_call(xid));
                let back = raw.expect(&mut s);
                let h = HeaderView::parse(&back).unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!((h.xid(), h.vers()), (xid, 1), "{what}");
                let r = rpc_reply(&back);
                assert!(r.xid == xid && r.is_success(), "{what}: {r:?}");
                assert_eq!(s.negotiation().wire(), Wire::V1, "{what}");
                // Decided: a version 2 Call now gets ERR_VERS 1..1 (RFC 8166 §4.5.1).
                raw.send(&v2_null(0x91));
                let back = raw.expect(&mut s);
                assert_eq!(
                    [w(&back, 0), w(&back, 4), w(&back, 12), w(&back, 16)],
                    [0x91, 2, 4, 1],
                    "{what}: ERR_VERS"
                );
                assert_eq!([w(&back, 20), w(&back, 24)], [1, 1], "{what}: 1..1");
                assert_eq!(s.snapshot().v2_connections, 0, "{what}");
            }
            assert!(!s.is_dead(), "{what}");
        }
    }
}

/// Nor does such a message move the requester: its version is decided only by a decoded
/// answer to its opening RDMA2_CONNPROP, with that XID (\[V2\] §7.1, §7.2), so garbage with
/// `rdma_vers` 2 and the opening's XID ahead of the answer is set aside for the first poll
/// (and dropped there), and the server's RDMA2_CONNPROP, or ERR_VERS 1..1, after it decides
/// as usual; a NULL RPC then goes in the version decided.
#[test]
fn an_undecodable_version_2_message_before_the_opening_answer_decides_nothing() {
    for v2_server in [true, false] {
        let mut rs = RawServer::listen();
        let a = rs.addr.clone();
        let t = std::thread::spawn(move || {
            let device = Soft::open_device(None).unwrap();
            Client::<Soft>::connect(&device, &a, cfg(Version::Auto)).map_err(|e| e.to_string())
        });
        let (mut e, _) = rs.accept(false);
        let deadline = Instant::now() + Duration::from_secs(5);
        let opening = loop {
            e.poll();
            if let Some(m) = e.received.pop_front() {
                break m;
            }
            assert!(Instant::now() < deadline, "no opening in 5 s");
        };
        let oh = v2::HeaderView::parse(&opening).expect("RDMA2_CONNPROP");
        assert_eq!(oh.htype(), Htype::ConnProp);
        let xid = oh.xid();
        let mut garbage = null_call(xid);
        set_word(&mut garbage, 4, 2);
        assert_eq!(e.send(&garbage), WcStatus::Success);
        let answer = if v2_server {
            let props = [Property::RecvBufSize(Some(4096))];
            let h = v2::Header {
                flags: rpcrdma_proto::v2::flags::RESPONSE,
                ..v2::Header::connprop(xid, 32, &props)
            };
            let mut m = vec![0; h.encoded_len()];
            h.encode(&mut m).unwrap();
            m
        } else {
            message(
                &Header::error(xid, 2, 32, RdmaError::Vers { low: 1, high: 1 }),
                &[],
            )
        };
        assert_eq!(e.send(&answer), WcStatus::Success);
        let mut c = t.join().unwrap().expect("connect");
        let (wire, vers) = if v2_server {
            (Wire::V2, 2)
        } else {
            (Wire::V1, 1)
        };
        assert_eq!(c.negotiation().wire(), wire, "v2 server {v2_server}");
        c.submit(&CallArgs::new(PROG, VERS, NULL, &[], 0), 7)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let call = loop {
            e.poll();
            if let Some(m) = e.received.pop_front() {
                break m;
            }
            c.poll_completions(|x| panic!("unexpected completion {}", x.xid));
            assert!(Instant::now() < deadline, "no Call in 5 s");
        };
        assert_eq!(w(&call, 4), vers, "the Call's version");
        let cxid = w(&call, 0);
        let rh = ReplyHeader::accepted_success(cxid);
        let mut rpc = vec![0; rh.encoded_len()];
        rh.encode(&mut rpc).unwrap();
        let reply = if v2_server {
            let h = v2::Header::reply(cxid, 32, Chunks::NONE, false);
            let mut m = vec![0; h.encoded_len()];
            h.encode(&mut m).unwrap();
            m.extend_from_slice(&rpc);
            m
        } else {
            message(&Header::msg(cxid, 32, Chunks::NONE), &rpc)
        };
        assert_eq!(e.send(&reply), WcStatus::Success);
        let mut done = false;
        while !done {
            c.poll_completions(|x| {
                assert_eq!(x.tag, 7);
                assert!(x.result.unwrap().is_success());
                done = true;
            });
            assert!(Instant::now() < deadline, "no reply to the NULL RPC");
        }
        let cs = c.snapshot();
        assert_eq!(cs.discards, 1, "the garbage, dropped at the first poll");
        assert_eq!(cs.v2_connections, u64::from(v2_server));
    }
}

/// A raw requester connected to a fresh connection of `srv`.
fn raw_connect(srv: &mut Server<Soft>, addr: &SoftAddr) -> (RawClient, ServerConn<Soft>) {
    let a = addr.clone();
    let t = std::thread::spawn(move || RawClient::connect(&a, 64));
    let conn = srv.accept(Duration::from_secs(5)).expect("accept");
    (t.join().expect("raw connect"), conn)
}

/// The raw requester's opening RDMA2_CONNPROP, answered by the server's.
fn open_raw_v2(raw: &mut RawClient, s: &mut ServerConn<Soft>) {
    let props = [Property::RecvBufSize(Some(4096))];
    let h = v2::Header::connprop(0x40, 32, &props);
    let mut m = vec![0; h.encoded_len()];
    h.encode(&mut m).unwrap();
    raw.send(&m);
    let back = raw.expect(s);
    let h = v2::HeaderView::parse(&back).expect("CONNPROP");
    assert_eq!(
        (h.xid(), h.htype(), h.is_response()),
        (0x40, Htype::ConnProp, true)
    );
    match h.body() {
        v2::ViewBody::ConnProp(p) => assert_eq!(p.recv_buf_size(), Some(4096)),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.negotiation().wire(), Wire::V2);
}

/// An RDMA2_MSG Call with `chunks` and the RPC message `payload`.
fn v2_msg(xid: u32, inv: u32, chunks: Chunks<'_>, payload: &[u8]) -> Vec<u8> {
    let h = v2::Header::call(xid, 32, inv, chunks, false);
    let mut m = vec![0; h.encoded_len()];
    h.encode(&mut m).unwrap();
    m.extend_from_slice(payload);
    m
}

/// Reverse-direction Calls ([V2] §3.2) interleaved with forward Calls under load
/// (`common::reverse::under_load`).
#[test]
fn reverse_calls_interleave_with_forward_calls_without_credit_overrun() {
    common::reverse::under_load(Version::Auto, Version::V2, Wire::V2);
}

#[test]
fn reverse_calls_need_a_decided_version_and_a_client_that_takes_them() {
    use rpcrdma_engine::responder::ReverseCallError;
    let srv_cfg = ConnConfig {
        reverse_credits: 2,
        ..cfg(Version::Auto)
    };
    // An open server before the client's first message: the version is not known yet.
    let (mut srv, addr) = soft_server(dispatch(), srv_cfg).unwrap();
    let a = addr.clone();
    let t = std::thread::spawn(move || {
        let device = Soft::open_device(None).unwrap();
        Client::<Soft>::connect(&device, &a, cfg(Version::V1)).unwrap()
    });
    let mut s = srv.accept(Duration::from_secs(5)).unwrap();
    let _c = t.join().unwrap();
    assert_eq!(
        s.call_reverse(PROG, VERS, NULL, &[], 0),
        Err(ReverseCallError::VersionUndecided)
    );
    // A version 2 client without a table says RDMA2_RVREQSUP_NONE.
    let (_c, mut s) = pair(cfg(Version::V2), srv_cfg);
    assert_eq!(
        s.call_reverse(PROG, VERS, NULL, &[], 0),
        Err(ReverseCallError::NotSupported)
    );
}

/// Persistent and per-RPC registrations mixed on one connection (Registration::Mixed):
/// on version 2 only windowed RPCs name a handle in rdma_inv_handle, so the responder
/// invalidates exactly those ([V2] §3.3, §8.4); on version 1 remote invalidation is not
/// offered and the windows are invalidated locally. Data checked both ways.
#[test]
fn persistent_and_per_rpc_registrations_mix_on_one_connection() {
    for version in [Version::V2, Version::V1] {
        let ccfg = ConnConfig {
            registration: Registration::Mixed,
            ..cfg(version)
        };
        let (mut c, mut s) = pair(ccfg, cfg(Version::Auto));
        let mut windowed = 0;
        for i in 0..40u32 {
            let persistent = i % 2 == 0;
            windowed += u64::from(!persistent);
            let len = 4096 + 1000 * i as usize;
            if i % 4 < 2 {
                let data = pattern(len as u32, len);
                let seed = (len as u32).to_be_bytes();
                let mut a = CallArgs::new(PROG, VERS, WRITE, &seed, 8);
                a.bulk_arg = Some(&data);
                a.persistent = persistent;
                let ok = call(&mut c, &mut s, &a, |x| x.result.expect("reply").results[3]);
                assert_eq!(ok, 1, "write {i}");
            } else {
                let args = encode_words(len as u32, i);
                let want = [len as u32];
                let mut a = CallArgs::new(PROG, VERS, READ, &args, 4);
                a.bulk_results = &want;
                a.persistent = persistent;
                let good = call(&mut c, &mut s, &a, |x| {
                    is_pattern(i, x.result.unwrap().bulk()[0])
                });
                assert!(good, "read {i}");
            }
        }
        let (cs, ss) = (c.snapshot(), s.snapshot());
        assert_eq!(
            cs.registrations, windowed,
            "{version:?}: one window per windowed RPC"
        );
        match version {
            Version::V2 => {
                assert_eq!(ss.remote_invalidations, windowed);
                assert_eq!(cs.remote_invalidations, windowed);
                assert_eq!(cs.local_invalidations, 0);
            }
            _ => {
                assert!(!c.negotiation().remote_invalidation());
                assert_eq!(ss.remote_invalidations, 0);
                assert_eq!(cs.local_invalidations, windowed);
            }
        }
    }
}
