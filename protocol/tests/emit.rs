//! The fast emitters (`rpcrdma_proto::emit`) write exactly what the general encoders write
//! for the same message, in either version (property tests).

use proptest::prelude::*;
use rpcrdma_proto::emit::*;
use rpcrdma_proto::header::{Chunks, Header};
use rpcrdma_proto::rpc::{AcceptStat, AuthStat, CallHeader, OpaqueAuth, ReplyHeader};
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::Wire;

/// The transport header the general encoder writes for a bare message in `wire`.
fn bare(wire: Wire, xid: u32, credit: u32, response: bool) -> Vec<u8> {
    let mut out = vec![0u8; 64];
    let n = match (wire, response) {
        (Wire::V1, _) => Header::msg(xid, credit, Chunks::default()).encode(&mut out),
        (Wire::V2, false) => {
            v2::Header::call(xid, credit, 0, Chunks::default(), false).encode(&mut out)
        }
        (Wire::V2, true) => {
            v2::Header::reply(xid, credit, Chunks::default(), false).encode(&mut out)
        }
    }
    .unwrap();
    assert_eq!(n, short_header_len(wire));
    out.truncate(n);
    out
}

fn emitted(words: &[u32], wire: Wire, response: bool) -> Vec<u8> {
    let mut out = vec![0u8; 128];
    let n = put_short_words(&mut out, words, wire, response);
    out.truncate(n);
    out
}

fn stat_of(k: u8) -> AcceptStat {
    [
        AcceptStat::Success,
        AcceptStat::ProgUnavail,
        AcceptStat::ProcUnavail,
        AcceptStat::GarbageArgs,
        AcceptStat::SystemErr,
    ][k as usize % 5]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn short_call_words_are_the_encoders_bytes(
        xid in any::<u32>(), credit in any::<u32>(), prog in any::<u32>(),
        vers in any::<u32>(), proc_num in any::<u32>(), v2 in any::<bool>(),
    ) {
        let wire = if v2 { Wire::V2 } else { Wire::V1 };
        let mut want = bare(wire, xid, credit, false);
        let mut rpc = vec![0u8; 64];
        let n = CallHeader::new(xid, prog, vers, proc_num, OpaqueAuth::NONE, OpaqueAuth::NONE)
            .encode(&mut rpc).unwrap();
        want.extend_from_slice(&rpc[..n]);
        let words = short_call_words(xid, credit, prog, vers, proc_num);
        prop_assert_eq!(emitted(&words, wire, false), want);
        // The call header alone, and where the credential starts.
        let mut got = vec![0u8; 68];
        let m = put_word_array(&mut got, call_header_words(xid, prog, vers, proc_num));
        prop_assert_eq!(&got[..m], &rpc[..n]);
        prop_assert_eq!(&words[SHORT_CALL_CRED_WORD..], &call_header_words(xid, prog, vers, proc_num)[6..]);
        // The array form writes what the slice form writes.
        let mut a = vec![0u8; 68];
        prop_assert_eq!(put_word_array(&mut a, words), put_words(&mut got, &words));
        prop_assert_eq!(&a[..], &got[..68]);
    }

    #[test]
    fn short_reply_words_are_the_encoders_bytes(
        xid in any::<u32>(), grant in any::<u32>(), k in any::<u8>(), v2 in any::<bool>(),
    ) {
        let wire = if v2 { Wire::V2 } else { Wire::V1 };
        let stat = stat_of(k);
        let mut want = bare(wire, xid, grant, true);
        let mut rpc = vec![0u8; 64];
        let n = ReplyHeader::accepted(xid, OpaqueAuth::NONE, stat).encode(&mut rpc).unwrap();
        want.extend_from_slice(&rpc[..n]);
        prop_assert_eq!(emitted(&short_reply_words(xid, grant, stat), wire, true), want);
    }

    #[test]
    fn short_denied_words_are_the_encoders_bytes(
        xid in any::<u32>(), grant in any::<u32>(), stat in 0u32..8, v2 in any::<bool>(),
    ) {
        let wire = if v2 { Wire::V2 } else { Wire::V1 };
        let stat = AuthStat(stat);
        let mut want = bare(wire, xid, grant, true);
        let mut rpc = vec![0u8; 64];
        let n = ReplyHeader::auth_error(xid, stat).encode(&mut rpc).unwrap();
        prop_assert_eq!(n, DENIED_REPLY_LEN);
        want.extend_from_slice(&rpc[..n]);
        prop_assert_eq!(emitted(&short_denied_words(xid, grant, stat), wire, true), want);
    }

    #[test]
    fn msg_reply_head_is_the_encoders_bytes(xid in any::<u32>(), grant in any::<u32>()) {
        let want = bare(Wire::V1, xid, grant, true);
        let mut got = vec![0u8; 20];
        put_word_array(&mut got, msg_reply_head(xid, grant));
        prop_assert_eq!(&got[..], &want[..20]);
    }
}
