//! Malformed input: truncated headers and bodies, oversized fields (RFC 5531 §8.2, appendix A),
//! unknown discriminants (§9), trailing bytes, and encoders refusing what cannot be sent.

use super::*;
use crate::xdr::XdrReader;

#[test]
fn truncated_calls_fail_at_every_length() {
    for full in [words(&NULL_CALL), words(&SYS_CALL)] {
        for n in 0..full.len() {
            let cut = &full[..n];
            assert!(
                matches!(CallHeader::parse(cut), Err(DecodeError::Truncated { .. })),
                "call truncated to {n} bytes"
            );
            assert!(
                matches!(RpcMessage::parse(cut), Err(DecodeError::Truncated { .. })),
                "message truncated to {n} bytes"
            );
            assert!(ReplyHeader::parse(cut).is_err());
        }
        assert!(CallHeader::parse(&full).is_ok());
    }
    assert_eq!(
        CallHeader::parse(&[0, 0, 0]),
        Err(DecodeError::Truncated {
            offset: 0,
            needed: 4
        })
    );
    // Cut inside the AUTH_SYS body: the padded 36 bytes at offset 32 are not all there.
    assert_eq!(
        CallHeader::parse(&words(&SYS_CALL)[..40]),
        Err(DecodeError::Truncated {
            offset: 32,
            needed: 36
        })
    );
    // Cut before the verifier's length word.
    assert_eq!(
        CallHeader::parse(&words(&NULL_CALL)[..36]),
        Err(DecodeError::Truncated {
            offset: 36,
            needed: 4
        })
    );
}

#[test]
fn truncated_replies_fail_at_every_length() {
    for (reply, ws, ..) in reply_vectors() {
        let full = words(&ws);
        for n in 0..full.len() {
            let cut = &full[..n];
            assert!(
                matches!(ReplyHeader::parse(cut), Err(DecodeError::Truncated { .. })),
                "{reply:?} truncated to {n} bytes"
            );
            assert!(
                matches!(RpcMessage::parse(cut), Err(DecodeError::Truncated { .. })),
                "{reply:?} truncated to {n} bytes"
            );
        }
    }
}

#[test]
fn truncated_auth_sys_bodies_fail_at_every_length() {
    let body = words(&SYS_BODY);
    for n in 0..body.len() {
        let got = AuthSys::parse(&body[..n]);
        if n >= 28 {
            // The gids count (2, at offset 24) is checked against the words present.
            assert_eq!(
                got,
                Err(DecodeError::CountTooLarge {
                    offset: 24,
                    count: 2,
                    max: ((n - 28) / 4) as u32
                }),
                "body truncated to {n} bytes"
            );
        } else {
            assert!(
                matches!(got, Err(DecodeError::Truncated { .. })),
                "body truncated to {n} bytes"
            );
        }
    }
    assert_eq!(AuthSys::parse(&body), Ok(sys_cred()));
}

#[test]
fn opaque_auth_of_401_bytes_is_rejected() {
    // Call: cred.flavor at 24, its length at 28.
    let mut call = words(&NULL_CALL[..7]);
    call.extend_from_slice(&words(&[401]));
    call.extend_from_slice(&[0u8; 404]);
    call.extend_from_slice(&words(&[0, 0]));
    let err = DecodeError::CountTooLarge {
        offset: 28,
        count: 401,
        max: 400,
    };
    assert_eq!(CallHeader::parse(&call), Err(err));
    assert_eq!(RpcMessage::parse(&call), Err(err));
    // The maximum is checked before the bytes present.
    assert_eq!(CallHeader::parse(&call[..32]), Err(err));

    // Exactly 400 bytes is fine.
    let mut call = words(&NULL_CALL[..6]);
    call.extend_from_slice(&words(&[RPCSEC_GSS, 400]));
    call.extend_from_slice(&[0x5a; 400]);
    call.extend_from_slice(&words(&[0, 0]));
    let (parsed, len) = CallHeader::parse(&call).unwrap();
    assert_eq!(len, 440);
    assert_eq!(parsed.cred.body, &[0x5a; 400][..]);

    // Reply: verf.flavor at 12, its length at 16.
    let mut reply = words(&[7, REPLY, MSG_ACCEPTED, AUTH_SHORT, 401]);
    reply.extend_from_slice(&[0u8; 404]);
    reply.extend_from_slice(&words(&[0]));
    assert_eq!(
        ReplyHeader::parse(&reply),
        Err(DecodeError::CountTooLarge {
            offset: 16,
            count: 401,
            max: 400
        })
    );

    // On its own.
    assert_eq!(
        OpaqueAuth::parse(&words(&[AUTH_DH, 401])),
        Err(DecodeError::CountTooLarge {
            offset: 4,
            count: 401,
            max: 400
        })
    );
    assert_eq!(
        OpaqueAuth::parse(&words(&[AUTH_DH, 0xffff_ffff])),
        Err(DecodeError::CountTooLarge {
            offset: 4,
            count: 0xffff_ffff,
            max: 400
        })
    );
    let bytes = words(&[AUTH_DH, 3, 0x6162_6300, 99]);
    let (auth, len) = OpaqueAuth::parse(&bytes).unwrap();
    assert_eq!(auth, OpaqueAuth::new(AUTH_DH, b"abc"));
    assert_eq!(len, 12);
    assert_eq!(auth.encoded_len(), 12);
    assert_eq!(
        encode_vec(|b| auth.encode(b)),
        words(&[AUTH_DH, 3, 0x6162_6300])
    );
}

#[test]
fn gids_count_over_16_is_rejected() {
    let head = &SYS_BODY[..6]; // stamp, name, uid, gid: the count is at offset 24.
    let mut body = words(head);
    body.extend_from_slice(&words(&[17]));
    body.extend_from_slice(&words(&[5; 17]));
    assert_eq!(
        AuthSys::parse(&body),
        Err(DecodeError::CountTooLarge {
            offset: 24,
            count: 17,
            max: 16
        })
    );

    let mut body = words(head);
    body.extend_from_slice(&words(&[0xffff_ffff, 1, 2]));
    assert_eq!(
        AuthSys::parse(&body),
        Err(DecodeError::CountTooLarge {
            offset: 24,
            count: 0xffff_ffff,
            max: 2
        })
    );

    // 16 is the maximum.
    let mut body = words(head);
    body.extend_from_slice(&words(&[16]));
    body.extend_from_slice(&words(&[9; 16]));
    let sys = AuthSys::parse(&body).unwrap();
    assert_eq!(sys.gids.len(), 16);
    assert!(sys.gids.iter().all(|g| g == 9));

    // Through a whole call.
    let mut cred = words(head);
    cred.extend_from_slice(&words(&[17]));
    cred.extend_from_slice(&words(&[5; 17]));
    let call = CallHeader::new(
        1,
        2,
        3,
        4,
        OpaqueAuth::new(AUTH_SYS, &cred),
        OpaqueAuth::NONE,
    );
    let bytes = encode_vec(|b| call.encode(b));
    let (parsed, _) = CallHeader::parse(&bytes).unwrap();
    assert_eq!(
        parsed.cred.auth_sys(),
        Some(Err(DecodeError::CountTooLarge {
            offset: 24,
            count: 17,
            max: 16
        }))
    );
}

#[test]
fn machinename_over_255_is_rejected() {
    let mut body = words(&[1, 256]);
    body.extend_from_slice(&[b'a'; 256]);
    body.extend_from_slice(&words(&[0, 0, 0]));
    assert_eq!(
        AuthSys::parse(&body),
        Err(DecodeError::CountTooLarge {
            offset: 4,
            count: 256,
            max: 255
        })
    );
    let mut body = words(&[1, 255]);
    body.extend_from_slice(&[b'a'; 256]);
    body.extend_from_slice(&words(&[0, 0, 0]));
    let sys = AuthSys::parse(&body).unwrap();
    assert_eq!(sys.machinename, &[b'a'; 255][..]);
    assert_eq!(sys.encoded_len(), body.len());
}

#[test]
fn auth_sys_trailing_bytes_are_rejected() {
    let mut body = words(&SYS_BODY);
    body.extend_from_slice(&words(&[0]));
    assert_eq!(
        AuthSys::parse(&body),
        Err(DecodeError::CountTooLarge {
            offset: 36,
            count: 40,
            max: 36
        })
    );
    let mut body = words(&SYS_BODY);
    body.push(0);
    assert_eq!(
        AuthSys::parse(&body),
        Err(DecodeError::CountTooLarge {
            offset: 36,
            count: 37,
            max: 36
        })
    );
    // `decode` on a reader stops after the structure.
    let mut r = XdrReader::new(&body);
    assert_eq!(AuthSys::decode(&mut r), Ok(sys_cred()));
    assert_eq!(r.position(), 36);
}

#[test]
fn unknown_discriminants_are_rejected() {
    let mut msg = words(&NULL_CALL);
    msg[7] = 2; // mtype 2
    let err = DecodeError::InvalidDiscriminant {
        offset: 4,
        value: 2,
    };
    assert_eq!(RpcMessage::parse(&msg), Err(err));
    assert_eq!(CallHeader::parse(&msg), Err(err));
    assert_eq!(ReplyHeader::parse(&msg), Err(err));

    // A reply is not a call and vice versa.
    assert_eq!(
        CallHeader::parse(&words(&[7, 1, 0, 0, 0, 0])),
        Err(DecodeError::InvalidDiscriminant {
            offset: 4,
            value: 1
        })
    );
    assert_eq!(
        ReplyHeader::parse(&words(&NULL_CALL)),
        Err(DecodeError::InvalidDiscriminant {
            offset: 4,
            value: 0
        })
    );

    // reply_stat at 8.
    let reply = words(&[7, 1, 2, 0, 0, 0]);
    let err = DecodeError::InvalidDiscriminant {
        offset: 8,
        value: 2,
    };
    assert_eq!(ReplyHeader::parse(&reply), Err(err));
    assert_eq!(RpcMessage::parse(&reply), Err(err));

    // accept_stat at 20 after an AUTH_NONE verifier.
    for value in [6, 0xffff_ffff] {
        let reply = words(&[7, 1, 0, 0, 0, value]);
        assert_eq!(
            RpcMessage::parse(&reply),
            Err(DecodeError::InvalidDiscriminant { offset: 20, value })
        );
    }

    // reject_stat at 12.
    let reply = words(&[7, 1, 1, 2, 0, 0]);
    assert_eq!(
        ReplyHeader::parse(&reply),
        Err(DecodeError::InvalidDiscriminant {
            offset: 12,
            value: 2
        })
    );
}

#[test]
fn unknown_auth_stat_and_flavor_decode() {
    let reply = words(&[7, 1, 1, 1, 99]);
    let (parsed, len) = ReplyHeader::parse(&reply).unwrap();
    assert_eq!(len, 20);
    assert_eq!(parsed, ReplyHeader::auth_error(7, AuthStat(99)));
    match parsed.body {
        ReplyBody::Denied(RejectedReply::AuthError(s)) => assert_eq!(s.name(), None),
        other => panic!("unexpected body {other:?}"),
    }
    assert_eq!(encode_vec(|b| parsed.encode(b)), reply);

    // A flavor outside the RFC's enum is carried as an opaque body.
    let call = words(&[1, 0, 2, 3, 4, 5, 390_003, 4, 0xcafe_babe, 0, 0]);
    let (parsed, len) = CallHeader::parse(&call).unwrap();
    assert_eq!(len, 44);
    assert_eq!(parsed.cred.flavor, 390_003);
    assert_eq!(parsed.cred.flavor_name(), None);
    assert_eq!(parsed.cred.body, &[0xca, 0xfe, 0xba, 0xbe]);
    assert_eq!(parsed.cred.auth_sys(), None);
    assert_eq!(encode_vec(|b| parsed.encode(b)), call);
}

#[test]
fn rpcvers_other_than_2_is_parsed_for_rpc_mismatch() {
    let mut msg = words(&NULL_CALL);
    msg[11] = 3;
    let (parsed, len) = CallHeader::parse(&msg).unwrap();
    assert_eq!(len, 40);
    assert_eq!(parsed.rpcvers, 3);
    assert!(!parsed.is_rpc_v2());
    assert_eq!(encode_vec(|b| parsed.encode(b)), msg);
    let answer = ReplyHeader::rpc_mismatch(parsed.xid, RPC_VERSION, RPC_VERSION);
    assert_eq!(
        encode_vec(|b| answer.encode(b)),
        words(&[0x1234_5678, 1, 1, 0, 2, 2])
    );
}

#[test]
fn encoders_reject_oversized_fields_and_short_buffers() {
    let big = [0u8; 401];
    let too_long = EncodeError::TooLong { len: 401, max: 400 };
    let mut buf = [0u8; 1024];
    let auth = OpaqueAuth::new(RPCSEC_GSS, &big);
    assert_eq!(auth.encode(&mut buf), Err(too_long));
    let call = CallHeader::new(1, 2, 3, 4, auth, OpaqueAuth::NONE);
    assert_eq!(call.encode(&mut buf), Err(too_long));
    let call = CallHeader::new(1, 2, 3, 4, OpaqueAuth::NONE, auth);
    assert_eq!(call.encode(&mut buf), Err(too_long));
    let reply = ReplyHeader::accepted(1, auth, AcceptStat::Success);
    assert_eq!(reply.encode(&mut buf), Err(too_long));
    assert_eq!(RpcMessage::Reply(reply).encode(&mut buf), Err(too_long));

    // The size limit is reported even when the buffer is also too small.
    assert_eq!(auth.encode(&mut [0u8; 4]), Err(too_long));

    // A short buffer is left untouched.
    let call = CallHeader::new(1, 2, 3, 4, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut short = [0xAAu8; 39];
    assert_eq!(
        call.encode(&mut short),
        Err(EncodeError::BufferTooSmall {
            needed: 40,
            available: 39
        })
    );
    assert!(short.iter().all(|&b| b == 0xAA));
    let mut short = [0xAAu8; 23];
    assert_eq!(
        ReplyHeader::accepted_success(1).encode(&mut short),
        Err(EncodeError::BufferTooSmall {
            needed: 24,
            available: 23
        })
    );
    assert!(short.iter().all(|&b| b == 0xAA));
    assert_eq!(
        sys_cred().encode(&mut [0u8; 35]),
        Err(EncodeError::BufferTooSmall {
            needed: 36,
            available: 35
        })
    );

    // AUTH_SYS limits.
    let name = [b'x'; 256];
    let sys = AuthSys {
        machinename: &name,
        ..sys_cred()
    };
    assert_eq!(
        sys.encode(&mut buf),
        Err(EncodeError::TooLong { len: 256, max: 255 })
    );
    assert!(Gids::new(&[0; 17]).is_none());
    assert_eq!(Gids::new(&[0; 16]).map(|g| g.len()), Some(16));
    assert_eq!(Gids::new(&[]), Some(Gids::EMPTY));
    assert!(Gids::default().is_empty());
}
