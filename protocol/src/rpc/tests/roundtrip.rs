//! Property tests: encoding then parsing any call, reply or AUTH_SYS body is the identity, and
//! parsing arbitrary bytes never panics.

use super::*;
use crate::xdr::pad4;
use proptest::prelude::*;

/// Checks what any successful parse must satisfy: the length is the encoded length, and
/// encoding then parsing again gives the same header.
fn check_parsed(msg: RpcMessage<'_>, len: usize, input_len: usize) {
    assert!(len <= input_len);
    assert_eq!(msg.encoded_len(), len);
    let mut buf = vec![0u8; len];
    assert_eq!(msg.encode(&mut buf), Ok(len));
    assert_eq!(RpcMessage::parse(&buf), Ok((msg, len)));
}

proptest! {
    #[test]
    fn call_encode_parse_encode_is_identity(
        xid in any::<u32>(),
        rpcvers in prop_oneof![Just(2u32), any::<u32>()],
        prog in any::<u32>(),
        vers in any::<u32>(),
        proc_num in any::<u32>(),
        cred_flavor in any::<u32>(),
        cred_body in proptest::collection::vec(any::<u8>(), 0..=MAX_AUTH_BYTES),
        verf_flavor in any::<u32>(),
        verf_body in proptest::collection::vec(any::<u8>(), 0..=MAX_AUTH_BYTES),
        args in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let call = CallHeader {
            xid,
            rpcvers,
            prog,
            vers,
            proc_num,
            cred: OpaqueAuth::new(cred_flavor, &cred_body),
            verf: OpaqueAuth::new(verf_flavor, &verf_body),
        };
        let n = call.encoded_len();
        prop_assert_eq!(n, 40 + pad4(cred_body.len()) + pad4(verf_body.len()));
        let mut buf = vec![0xAAu8; n + args.len()];
        prop_assert_eq!(call.encode(&mut buf), Ok(n));
        buf[n..].copy_from_slice(&args);
        let (parsed, len) = CallHeader::parse(&buf).unwrap();
        prop_assert_eq!(parsed, call);
        prop_assert_eq!(len, n);
        prop_assert_eq!(parsed.is_rpc_v2(), rpcvers == 2);
        prop_assert_eq!(RpcMessage::parse(&buf), Ok((RpcMessage::Call(call), n)));
        let mut again = vec![0u8; n];
        prop_assert_eq!(parsed.encode(&mut again), Ok(n));
        prop_assert_eq!(&again[..], &buf[..n]);
    }

    #[test]
    fn reply_encode_parse_encode_is_identity(
        kind in 0u8..8,
        xid in any::<u32>(),
        a in any::<u32>(),
        b in any::<u32>(),
        verf_flavor in any::<u32>(),
        verf_body in proptest::collection::vec(any::<u8>(), 0..=MAX_AUTH_BYTES),
        results in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let reply = make_reply(kind, xid, a, b, OpaqueAuth::new(verf_flavor, &verf_body));
        let n = reply.encoded_len();
        let mut buf = vec![0xAAu8; n + results.len()];
        prop_assert_eq!(reply.encode(&mut buf), Ok(n));
        buf[n..].copy_from_slice(&results);
        let (parsed, len) = ReplyHeader::parse(&buf).unwrap();
        prop_assert_eq!(parsed, reply);
        prop_assert_eq!(len, n);
        prop_assert_eq!(RpcMessage::parse(&buf), Ok((RpcMessage::Reply(reply), n)));
        let mut again = vec![0u8; n];
        prop_assert_eq!(parsed.encode(&mut again), Ok(n));
        prop_assert_eq!(&again[..], &buf[..n]);
        // Every strict prefix of the header is truncated.
        for cut in 0..n {
            let truncated = matches!(
                ReplyHeader::parse(&buf[..cut]),
                Err(DecodeError::Truncated { .. })
            );
            prop_assert!(truncated, "prefix of {} bytes", cut);
        }
    }

    #[test]
    fn auth_sys_encode_parse_encode_is_identity(
        stamp in any::<u32>(),
        machinename in proptest::collection::vec(any::<u8>(), 0..=MAX_MACHINENAME_LEN),
        uid in any::<u32>(),
        gid in any::<u32>(),
        gids in proptest::collection::vec(any::<u32>(), 0..=MAX_GIDS),
    ) {
        let sys = AuthSys {
            stamp,
            machinename: &machinename,
            uid,
            gid,
            gids: Gids::new(&gids).unwrap(),
        };
        let n = sys.encoded_len();
        let mut body = vec![0xAAu8; n];
        prop_assert_eq!(sys.encode(&mut body), Ok(n));
        let parsed = AuthSys::parse(&body).unwrap();
        prop_assert_eq!(parsed, sys);
        prop_assert_eq!(parsed.gids.iter().collect::<Vec<_>>(), gids.clone());
        let mut again = vec![0u8; n];
        prop_assert_eq!(parsed.encode(&mut again), Ok(n));
        prop_assert_eq!(&again, &body);

        // Carried in a call's credential.
        let call = CallHeader::new(1, 100_003, 3, 1, OpaqueAuth::new(AUTH_SYS, &body),
            OpaqueAuth::NONE);
        let mut msg = vec![0u8; call.encoded_len()];
        call.encode(&mut msg).unwrap();
        let (parsed_call, _) = CallHeader::parse(&msg).unwrap();
        prop_assert_eq!(parsed_call.cred.auth_sys(), Some(Ok(sys)));
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        if let Ok((msg, len)) = RpcMessage::parse(&bytes) {
            check_parsed(msg, len, bytes.len());
        }
        if let Ok((call, len)) = CallHeader::parse(&bytes) {
            check_parsed(RpcMessage::Call(call), len, bytes.len());
        }
        if let Ok((reply, len)) = ReplyHeader::parse(&bytes) {
            check_parsed(RpcMessage::Reply(reply), len, bytes.len());
        }
        if let Ok((auth, len)) = OpaqueAuth::parse(&bytes) {
            prop_assert_eq!(auth.encoded_len(), len);
            prop_assert!(auth.body.len() <= MAX_AUTH_BYTES);
        }
        if let Ok(sys) = AuthSys::parse(&bytes) {
            prop_assert_eq!(sys.encoded_len(), bytes.len());
            prop_assert!(sys.gids.len() <= MAX_GIDS);
            prop_assert!(sys.machinename.len() <= MAX_MACHINENAME_LEN);
        }
        let _ = RpcMessage::peek_xid(&bytes);
        let _ = RpcMessage::peek_msg_type(&bytes);
    }

    #[test]
    fn parsing_arbitrary_small_words_never_panics(
        ws in proptest::collection::vec(
            prop_oneof![4 => 0u32..4, 1 => 0u32..40, 1 => any::<u32>()],
            0..48,
        ),
        cut in 0usize..4,
    ) {
        // Small words hit the known discriminants and short lengths often; `cut` shifts the
        // end off the four-byte grid.
        let mut bytes = words(&ws);
        let keep = bytes.len().saturating_sub(cut);
        bytes.truncate(keep);
        if let Ok((msg, len)) = RpcMessage::parse(&bytes) {
            check_parsed(msg, len, bytes.len());
        }
        if let Ok(sys) = AuthSys::parse(&bytes) {
            prop_assert_eq!(sys.encoded_len(), bytes.len());
        }
    }

    #[test]
    fn mutated_auth_sys_call_never_panics(
        at in 0usize..19,
        value in prop_oneof![0u32..64, any::<u32>()],
        cut in prop_oneof![3 => Just(76usize), 1 => 0usize..76],
    ) {
        let mut ws = SYS_CALL;
        ws[at] = value;
        let bytes = words(&ws);
        let bytes = &bytes[..cut];
        if let Ok((msg, len)) = RpcMessage::parse(bytes) {
            check_parsed(msg, len, bytes.len());
            if let RpcMessage::Call(call) = msg {
                if let Some(Ok(sys)) = call.cred.auth_sys() {
                    prop_assert_eq!(sys.encoded_len(), call.cred.body.len());
                }
            }
        }
    }
}
