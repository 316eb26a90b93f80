//! Known answers: byte-exact encodings of calls, AUTH_SYS credentials and every reply status,
//! accessors, and the names and codes of RFC 5531 §9 and appendix A.

use super::*;
use core::hash::{Hash, Hasher};
use std::collections::hash_map::DefaultHasher;

#[test]
fn null_call_is_byte_exact() {
    let call = CallHeader::new(
        0x1234_5678,
        100_003,
        3,
        0,
        OpaqueAuth::NONE,
        OpaqueAuth::NONE,
    );
    let expected = words(&NULL_CALL);
    assert_eq!(call.encoded_len(), 40);
    assert_eq!(call.encoded_len(), MIN_CALL_LEN);
    assert_eq!(encode_vec(|b| call.encode(b)), expected);

    let (parsed, len) = CallHeader::parse(&expected).unwrap();
    assert_eq!(parsed, call);
    assert_eq!(len, 40);
    assert!(parsed.is_rpc_v2());
    assert_eq!(parsed.cred.flavor_name(), Some("AUTH_NONE"));
    assert_eq!(parsed.cred.auth_sys(), None);

    let (msg, len) = RpcMessage::parse(&expected).unwrap();
    assert_eq!(msg, RpcMessage::Call(call));
    assert_eq!(len, 40);
    assert_eq!(msg.name(), "CALL");
    assert_eq!(msg.msg_type(), CALL);
    assert_eq!(msg.xid(), 0x1234_5678);
    assert_eq!(msg.encoded_len(), 40);
    assert_eq!(encode_vec(|b| msg.encode(b)), expected);
}

#[test]
fn auth_sys_call_is_byte_exact() {
    let sys = sys_cred();
    let body = encode_vec(|b| sys.encode(b));
    assert_eq!(body, words(&SYS_BODY));
    assert_eq!(sys.encoded_len(), 36);

    let cred = OpaqueAuth::new(AUTH_SYS, &body);
    let call = CallHeader::new(0xdead_beef, 100_003, 3, 1, cred, OpaqueAuth::NONE);
    let expected = words(&SYS_CALL);
    assert_eq!(call.encoded_len(), 76);
    assert_eq!(encode_vec(|b| call.encode(b)), expected);

    // The arguments (an opaque file handle) follow the header.
    let mut msg = expected.clone();
    msg.extend_from_slice(&words(&[8, 0x0102_0304, 0x0506_0708]));
    let (parsed, len) = CallHeader::parse(&msg).unwrap();
    assert_eq!(len, 76);
    assert_eq!(parsed, call);
    assert_eq!(&msg[len..], &words(&[8, 0x0102_0304, 0x0506_0708])[..]);
    assert_eq!(parsed.cred.flavor, AUTH_SYS);
    assert_eq!(parsed.cred.body.len(), 36);
    assert_eq!(parsed.cred.flavor_name(), Some("AUTH_SYS"));

    let got = parsed.cred.auth_sys().unwrap().unwrap();
    assert_eq!(got, sys);
    assert_eq!(got.stamp, 0x6a3b_1c2d);
    assert_eq!(got.machinename, b"client");
    assert_eq!(got.uid, 1000);
    assert_eq!(got.gid, 100);
    assert_eq!(got.gids.len(), 2);
    assert!(!got.gids.is_empty());
    assert_eq!(got.gids.get(0), Some(10));
    assert_eq!(got.gids.get(1), Some(100));
    assert_eq!(got.gids.get(2), None);
    assert_eq!(got.gids.get(usize::MAX), None);
    let mut it = got.gids.iter();
    assert_eq!(it.len(), 2);
    assert_eq!(it.next(), Some(10));
    assert_eq!(it.len(), 1);
    assert_eq!(it.next(), Some(100));
    assert_eq!(it.next(), None);
    assert_eq!(it.next(), None);
    let mut sum = 0;
    for g in got.gids {
        sum += g;
    }
    assert_eq!(sum, 110);

    let (m, len) = RpcMessage::parse(&msg).unwrap();
    assert_eq!((m, len), (RpcMessage::Call(call), 76));
}

#[test]
fn every_reply_status_is_byte_exact() {
    for (reply, ws, reply_name, name) in reply_vectors() {
        let expected = words(&ws);
        assert_eq!(reply.encoded_len(), expected.len(), "{name}");
        assert_eq!(encode_vec(|b| reply.encode(b)), expected, "{name}");
        let (parsed, len) = ReplyHeader::parse(&expected).unwrap();
        assert_eq!(parsed, reply, "{name}");
        assert_eq!(len, expected.len(), "{name}");
        assert_eq!(parsed.body.name(), reply_name);
        assert_eq!(parsed.body.code(), ws[2]);
        assert_eq!(stat_name(&parsed), name);
        let (msg, len) = RpcMessage::parse(&expected).unwrap();
        assert_eq!(msg, RpcMessage::Reply(reply));
        assert_eq!(len, expected.len());
        assert_eq!(msg.name(), "REPLY");
        assert_eq!(msg.msg_type(), REPLY);
        assert_eq!(msg.xid(), 7);
    }
}

#[test]
fn reply_accessors_and_minimum_length() {
    let ok = ReplyHeader::accepted_success(1);
    assert!(ok.is_success());
    assert_eq!(ok.accept_stat(), Some(AcceptStat::Success));
    assert_eq!(ok.verf(), Some(OpaqueAuth::NONE));
    let bad = ReplyHeader::garbage_args(1);
    assert!(!bad.is_success());
    assert_eq!(bad.accept_stat(), Some(AcceptStat::GarbageArgs));
    let denied = ReplyHeader::auth_error(1, AuthStat::AUTH_TOOWEAK);
    assert!(!denied.is_success());
    assert_eq!(denied.accept_stat(), None);
    assert_eq!(denied.verf(), None);
    assert_eq!(denied.encoded_len(), MIN_REPLY_LEN);
    let shortest = reply_vectors()
        .iter()
        .map(|(r, ..)| r.encoded_len())
        .min()
        .unwrap();
    assert_eq!(shortest, MIN_REPLY_LEN);
}

#[test]
fn success_reply_with_gss_verifier_reports_where_results_start() {
    // A 5-byte verifier body is padded with three zero bytes.
    let verf = OpaqueAuth::new(RPCSEC_GSS, b"\x01\x02\x03\x04\x05");
    let reply = ReplyHeader::accepted(0x0a0b_0c0d, verf, AcceptStat::Success);
    let expected = words(&[
        0x0a0b_0c0d, // xid
        1,           // REPLY
        0,           // MSG_ACCEPTED
        6,           // verf.flavor RPCSEC_GSS
        5,           // verf.body length
        0x0102_0304,
        0x0500_0000,
        0, // SUCCESS
    ]);
    assert_eq!(reply.encoded_len(), 32);
    assert_eq!(encode_vec(|b| reply.encode(b)), expected);
    let mut msg = expected.clone();
    msg.extend_from_slice(&words(&[0xfeed_f00d]));
    let (parsed, len) = ReplyHeader::parse(&msg).unwrap();
    assert_eq!(parsed, reply);
    assert_eq!(len, 32);
    assert_eq!(&msg[len..], &[0xfe, 0xed, 0xf0, 0x0d]);
    assert_eq!(parsed.verf().unwrap().body, b"\x01\x02\x03\x04\x05");
    assert_eq!(parsed.verf().unwrap().flavor_name(), Some("RPCSEC_GSS"));
}

#[test]
fn names_and_codes_follow_rfc_5531() {
    let accept = [
        (AcceptStat::Success, 0, "SUCCESS"),
        (AcceptStat::ProgUnavail, 1, "PROG_UNAVAIL"),
        (
            AcceptStat::ProgMismatch { low: 1, high: 2 },
            2,
            "PROG_MISMATCH",
        ),
        (AcceptStat::ProcUnavail, 3, "PROC_UNAVAIL"),
        (AcceptStat::GarbageArgs, 4, "GARBAGE_ARGS"),
        (AcceptStat::SystemErr, 5, "SYSTEM_ERR"),
    ];
    for (s, code, name) in accept {
        assert_eq!(s.code(), code);
        assert_eq!(s.name(), name);
    }
    let rpc_mismatch = RejectedReply::RpcMismatch { low: 2, high: 2 };
    assert_eq!(rpc_mismatch.code(), 0);
    assert_eq!(rpc_mismatch.name(), "RPC_MISMATCH");
    let auth_error = RejectedReply::AuthError(AuthStat::AUTH_OK);
    assert_eq!(auth_error.code(), 1);
    assert_eq!(auth_error.name(), "AUTH_ERROR");

    let auth = [
        (AuthStat::AUTH_OK, 0, "AUTH_OK"),
        (AuthStat::AUTH_BADCRED, 1, "AUTH_BADCRED"),
        (AuthStat::AUTH_REJECTEDCRED, 2, "AUTH_REJECTEDCRED"),
        (AuthStat::AUTH_BADVERF, 3, "AUTH_BADVERF"),
        (AuthStat::AUTH_REJECTEDVERF, 4, "AUTH_REJECTEDVERF"),
        (AuthStat::AUTH_TOOWEAK, 5, "AUTH_TOOWEAK"),
        (AuthStat::AUTH_INVALIDRESP, 6, "AUTH_INVALIDRESP"),
        (AuthStat::AUTH_FAILED, 7, "AUTH_FAILED"),
        (AuthStat::AUTH_KERB_GENERIC, 8, "AUTH_KERB_GENERIC"),
        (AuthStat::AUTH_TIMEEXPIRE, 9, "AUTH_TIMEEXPIRE"),
        (AuthStat::AUTH_TKT_FILE, 10, "AUTH_TKT_FILE"),
        (AuthStat::AUTH_DECODE, 11, "AUTH_DECODE"),
        (AuthStat::AUTH_NET_ADDR, 12, "AUTH_NET_ADDR"),
        (
            AuthStat::RPCSEC_GSS_CREDPROBLEM,
            13,
            "RPCSEC_GSS_CREDPROBLEM",
        ),
        (AuthStat::RPCSEC_GSS_CTXPROBLEM, 14, "RPCSEC_GSS_CTXPROBLEM"),
    ];
    for (s, code, name) in auth {
        assert_eq!(s.0, code);
        assert_eq!(s.name(), Some(name));
        assert_eq!(AuthStat(code), s);
    }
    assert_eq!(AuthStat(15).name(), None);
    assert_eq!(AuthStat(u32::MAX).name(), None);

    assert_eq!(flavor_name(0), Some("AUTH_NONE"));
    assert_eq!(flavor_name(1), Some("AUTH_SYS"));
    assert_eq!(flavor_name(2), Some("AUTH_SHORT"));
    assert_eq!(flavor_name(3), Some("AUTH_DH"));
    assert_eq!(flavor_name(6), Some("RPCSEC_GSS"));
    assert_eq!(flavor_name(4), None);
    assert_eq!(flavor_name(390_003), None);
    assert_eq!(
        (AUTH_NONE, AUTH_SYS, AUTH_SHORT, AUTH_DH, RPCSEC_GSS),
        (0, 1, 2, 3, 6)
    );
    assert_eq!((CALL, REPLY, MSG_ACCEPTED, MSG_DENIED), (0, 1, 0, 1));
    assert_eq!((RPC_VERSION, MAX_AUTH_BYTES), (2, 400));
}

#[test]
fn peek_reads_only_the_prefix() {
    let msg = words(&SYS_CALL);
    assert_eq!(RpcMessage::peek_xid(&msg), Some(0xdead_beef));
    assert_eq!(RpcMessage::peek_xid(&msg[..4]), Some(0xdead_beef));
    assert_eq!(RpcMessage::peek_xid(&msg[..3]), None);
    assert_eq!(RpcMessage::peek_xid(&[]), None);
    assert_eq!(RpcMessage::peek_msg_type(&msg), Some(CALL));
    assert_eq!(RpcMessage::peek_msg_type(&words(&[9, 5])), Some(5));
    assert_eq!(RpcMessage::peek_msg_type(&msg[..7]), None);
    assert_eq!(RpcMessage::peek_msg_type(&msg[..2]), None);
}

#[test]
fn gids_compare_by_value_across_representations() {
    let wire = words(&SYS_BODY);
    let decoded = AuthSys::parse(&wire).unwrap();
    let built = sys_cred();
    assert_eq!(decoded.gids, built.gids);
    assert_ne!(decoded.gids, Gids::new(&[10]).unwrap());
    assert_ne!(decoded.gids, Gids::new(&[10, 101]).unwrap());
    let hash = |s: &AuthSys<'_>| {
        let mut h = DefaultHasher::new();
        s.hash(&mut h);
        h.finish()
    };
    assert_eq!(hash(&decoded), hash(&built));
    assert_eq!(format!("{:?}", decoded.gids), "[10, 100]");
    assert_eq!(format!("{:?}", Gids::EMPTY), "[]");
}
