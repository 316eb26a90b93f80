//! The direct decoders agree with the cursor-based reference decoders on every prefix of valid
//! headers, on mutated headers and on random bytes.

use super::*;
use proptest::prelude::*;

/// The direct decoders agree with the reference decoders on `bytes`: the same success or
/// the same typed error, for calls, replies and either.
fn check_direct_agrees(bytes: &[u8]) -> Result<(), TestCaseError> {
    prop_assert_eq!(CallHeader::parse(bytes), CallHeader::parse_reference(bytes));
    prop_assert_eq!(
        ReplyHeader::parse(bytes),
        ReplyHeader::parse_reference(bytes)
    );
    prop_assert_eq!(RpcMessage::parse(bytes), RpcMessage::parse_reference(bytes));
    // The direct decoders alone: `Some` exactly when the reference succeeds.
    prop_assert_eq!(
        CallHeader::parse_direct(bytes),
        CallHeader::parse_reference(bytes).ok()
    );
    prop_assert_eq!(
        ReplyHeader::parse_direct(bytes),
        ReplyHeader::parse_reference(bytes).ok()
    );
    Ok(())
}

/// Valid headers to mutate: calls with AUTH_NONE, AUTH_SYS and a 400-byte credential,
/// replies of every status, each followed by a few argument or result bytes.
fn direct_seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![words(&NULL_CALL), words(&SYS_CALL)];
    let big = [0x5au8; MAX_AUTH_BYTES];
    let call = CallHeader::new(
        7,
        1,
        2,
        3,
        OpaqueAuth::new(RPCSEC_GSS, &big),
        OpaqueAuth::new(1, &big[..5]),
    );
    seeds.push(encode_vec(|b| call.encode(b)));
    for kind in 0..8 {
        let verf = OpaqueAuth::new(AUTH_SHORT, &big[..kind as usize * 3]);
        let r = make_reply(kind, 0x42, 1, 3, verf);
        seeds.push(encode_vec(|b| r.encode(b)));
    }
    for s in &mut seeds {
        s.extend_from_slice(&[0, 0, 0, 9, 1, 2]);
    }
    seeds
}

#[test]
fn direct_decoders_agree_on_every_prefix_of_the_seeds() {
    for seed in direct_seeds() {
        for cut in 0..=seed.len() {
            check_direct_agrees(&seed[..cut]).unwrap();
        }
    }
    // Lengths just over the limit, and counts that would wrap an offset.
    for len in [401u32, 402, 403, 404, u32::MAX - 2, u32::MAX] {
        let mut call = words(&NULL_CALL);
        call[28..32].copy_from_slice(&len.to_be_bytes());
        call.resize(call.len() + 512, 0);
        check_direct_agrees(&call).unwrap();
        let mut call = words(&NULL_CALL);
        call[36..40].copy_from_slice(&len.to_be_bytes());
        call.resize(call.len() + 512, 0);
        check_direct_agrees(&call).unwrap();
        let mut reply = words(&[1, REPLY, MSG_ACCEPTED, 0, len, 0]);
        reply.resize(reply.len() + 512, 0);
        check_direct_agrees(&reply).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn direct_decoders_agree_on_mutated_headers(
        which in 0usize..11,
        edits in proptest::collection::vec(
            (0usize..64, prop_oneof![0u8..8, Just(0xffu8), any::<u8>()]), 0..4),
        cut in prop_oneof![Just(0usize), 0usize..64],
    ) {
        let mut m = direct_seeds()[which].clone();
        let len = m.len();
        for (at, v) in edits {
            m[at % len] = v;
        }
        m.truncate(len - cut.min(len));
        check_direct_agrees(&m)?;
    }

    #[test]
    fn direct_decoders_agree_on_random_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        check_direct_agrees(&bytes)?;
    }

    #[test]
    fn direct_decoders_agree_on_small_words(
        ws in proptest::collection::vec(
            prop_oneof![4 => 0u32..6, 1 => 0u32..40, 1 => 398u32..404, 1 => any::<u32>()],
            0..24,
        ),
        cut in 0usize..4,
    ) {
        let mut bytes = words(&ws);
        let keep = bytes.len().saturating_sub(cut);
        bytes.truncate(keep);
        check_direct_agrees(&bytes)?;
    }
}
