//! The version of a connection to `rpcrdma serve` (which takes either, `--version auto`):
//! a first message with `rdma_vers` 2 that does not decode as version 2 decides nothing
//! (\[V2\] §5.3.3, §7).

use rpcrdma_engine::fabric::WcStatus;
use rpcrdma_engine::program::{NULL, PROG, VERS};
use rpcrdma_proto::header::{Chunks, HeaderView};
use rpcrdma_proto::rpc::ReplyHeader;
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::Htype;

use crate::serve_common::msg::*;
use crate::serve_common::{hex, serial, RawConn};

use super::{raw_connect, Server};

/// A Short version 2 NULL Call (RDMA2_MSG, no flags, no chunks).
fn v2_null(xid: u32) -> Vec<u8> {
    let h = v2::Header::call(xid, 32, 0, Chunks::NONE, false);
    let mut m = vec![0; h.encoded_len()];
    h.encode(&mut m).unwrap();
    m.extend_from_slice(&call_header_of(xid, 2, PROG, VERS, NULL));
    m
}

/// What a hostile peer sent as its first message: a version 1 NULL Call's layout with
/// `rdma_vers` 2, which does not decode as version 2 (its RPC XID stands where version 2
/// reads a list discriminator).
fn v1_layout_as_v2(xid: u32) -> Vec<u8> {
    let mut m = null_call(xid);
    set_word(&mut m, 4, 2);
    m
}

/// Sends the hostile first message on `c` and checks its answer: RDMA2_ERROR
/// RDMA2_ERR_BAD_XDR with its XID and version echoed and RPCRDMA2_F_RESPONSE (\[V2\]
/// §5.3.3).
fn refused_in_version_2(c: &mut RawConn, xid: u32, what: &str) {
    let m = v1_layout_as_v2(xid);
    assert_eq!(c.send(&m, what), WcStatus::Success, "{what}: sent");
    let back = c.expect(what);
    let h =
        v2::HeaderView::parse(&back).unwrap_or_else(|e| panic!("{what}: {e:?}: {}", hex(&back)));
    assert_eq!(
        (h.xid(), h.vers(), h.htype(), h.is_response(), h.error()),
        (xid, 2, Htype::Error, true, Some(v2::RdmaError::BadXdr)),
        "{what}: {}",
        hex(&back)
    );
}

/// On a fresh connection, a version 1 layout with `rdma_vers` 2 first gets RDMA2_ERR_BAD_XDR
/// and leaves the version open: (a) a valid version 1 NULL then gets its version 1 reply,
/// with its XID; (b) on another connection, a valid version 2 NULL gets its version 2
/// reply. Each valid message then decides its connection's version (the other version is
/// answered ERR_VERS naming the one decided). Linux's svcrdma keeps such a connection usable
/// too (it answers ERR_VERS 1..1, taking version 1 only).
#[test]
fn an_undecodable_version_2_first_message_decides_nothing() {
    let _serial = serial();
    let srv = Server::start("versions", &[]);

    // (a) then version 1.
    let what = "garbage with rdma_vers 2, then a version 1 NULL";
    let mut c = raw_connect(&srv.soft_addr(), 8);
    refused_in_version_2(&mut c, 0x700, what);
    let back = c.null_ok(0x701, what);
    let h = HeaderView::parse(&back).unwrap();
    assert_eq!((h.xid(), h.vers()), (0x701, 1), "{what}: {}", hex(&back));
    // Decided: version 2 now gets ERR_VERS 1..1 in version 1's layout (RFC 8166 §4.5.1).
    assert_eq!(c.send(&v2_null(0x702), what), WcStatus::Success);
    let back = c.expect(what);
    assert_eq!(
        (0..7).map(|k| w(&back, 4 * k)).collect::<Vec<_>>(),
        [0x702, 2, w(&back, 8), 4, 1, 1, 1],
        "{what}: ERR_VERS 1..1: {}",
        hex(&back)
    );
    c.null_ok(0x703, what);
    drop(c);

    // (b) then version 2.
    let what = "garbage with rdma_vers 2, then a version 2 NULL";
    let mut c = raw_connect(&srv.soft_addr(), 8);
    refused_in_version_2(&mut c, 0x710, what);
    assert_eq!(c.send(&v2_null(0x711), what), WcStatus::Success);
    let back = c.expect(what);
    let h = v2::HeaderView::parse(&back).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    assert_eq!(
        (h.xid(), h.vers(), h.htype(), h.is_response()),
        (0x711, 2, Htype::Msg, true),
        "{what}: {}",
        hex(&back)
    );
    let (r, _) = ReplyHeader::parse(h.payload()).expect("RPC reply");
    assert!(r.xid == 0x711 && r.is_success(), "{what}: {r:?}");
    // Decided: version 1 now gets ERR_VERS 2..2 ([V2] §7.3).
    assert_eq!(c.send(&null_call(0x712), what), WcStatus::Success);
    let back = c.expect(what);
    assert_eq!(
        (0..7).map(|k| w(&back, 4 * k)).collect::<Vec<_>>(),
        [0x712, 1, w(&back, 8), 4, 1, 2, 2],
        "{what}: ERR_VERS 2..2: {}",
        hex(&back)
    );
    drop(c);

    let counters = srv.finish("versions");
    assert_eq!(counters["errors"]["rdma2_errors"], 2, "{counters}");
    assert_eq!(counters["errors"]["err_vers"], 2, "{counters}");
}
