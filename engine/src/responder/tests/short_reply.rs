//! The Short-reply fast path (`reply::short`) against the general path.

use super::*;

#[test]
fn fast_path_answers_byte_for_byte_as_the_general_path() {
    let (_client, mut s) = server();
    let sys_body = [0u8, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let creds = [OpaqueAuth::NONE, OpaqueAuth::new(AUTH_SYS, &sys_body)];
    let mut taken = 0;
    for (xid, credit, grant) in [(1, 1, 1), (0xdead_beef, 32, 17), (0x8000_0000, 0, 32)] {
        for cred in creds {
            for outcome in 0u32..5 {
                for len in [0u32, 4, 12, 100, 1024] {
                    let rpc = CallHeader::new(xid, PROG, 1, ECHOISH, cred, OpaqueAuth::NONE);
                    let args: Vec<u8> = [outcome, len]
                        .iter()
                        .flat_map(|w| w.to_be_bytes())
                        .collect();
                    let call = call_bytes(xid, credit, rpc, &args);
                    let f = fast(&mut s, &call, grant).expect("taken by the fast path");
                    let g = general(&mut s, &call, grant);
                    assert_eq!(f, g, "xid {xid:#x} outcome {outcome} len {len}");
                    // Results after the accepted header; an AUTH_ERROR header is 20 bytes.
                    let want = match outcome {
                        0 => 52 + len,
                        1 | 2 => 52,
                        _ => 48,
                    };
                    assert_eq!(f.0, Some((want, None)));
                    taken += 1;
                }
            }
        }
    }
    assert_eq!(taken, 150);
}

/// A procedure with a DDP-eligible result, called without a Write list: the result goes
/// inline after the results, or the reply is refused when that passes the threshold or
/// the buffer, as the general path does.
#[test]
fn fast_path_places_ddp_results_inline_as_the_general_path() {
    let (_client, mut s) = server();
    let threshold = s.negotiation.reply_threshold();
    let ring = s.ring[0].size() as u32;
    let mut refused = 0;
    for (wire, outcome) in [Wire::V1, Wire::V2]
        .into_iter()
        .flat_map(|w| [0u32, 1, 2, 3].map(|o| (w, o)))
    {
        // Version 2's header is 8 bytes longer, its refusals RDMA2_ERROR.
        s.io.wire = wire;
        let extra = wire.extra() as u32;
        for len in [0u32, 4, 64] {
            for n in [
                0,
                1,
                5,
                100,
                threshold - 120,
                threshold - 52,
                threshold,
                ring,
                70_000,
            ] {
                let xid = 0x51 + n;
                let rpc = CallHeader::new(xid, PROG, 1, BULKY, OpaqueAuth::NONE, OpaqueAuth::NONE);
                let args: Vec<u8> = [outcome, len, n]
                    .iter()
                    .flat_map(|w| w.to_be_bytes())
                    .collect();
                let call = call_bytes_in(wire, xid, 8, rpc, &args);
                let f = fast(&mut s, &call, 8).expect("taken by the fast path");
                let g = general(&mut s, &call, 8);
                assert_eq!(f, g, "{wire:?} outcome {outcome} results {len} bulk {n}");
                if outcome == 0 && n == 5 {
                    // The results, then the opaque: its length word and 5 bytes padded to 8.
                    assert_eq!(f.0, Some((52 + extra + len + 4 + 8, None)));
                    let at = (52 + extra + len) as usize;
                    assert_eq!(f.1[at..at + 4], 5u32.to_be_bytes());
                    assert_eq!(f.1[at + 9..at + 12], [0, 0, 0]);
                }
                // A refusal: RDMA_ERROR (ERR_CHUNK) or RDMA2_ERROR, proc 4 either way.
                if outcome == 0 && f.1.get(12..16) == Some(&4u32.to_be_bytes()[..]) {
                    refused += 1;
                }
            }
        }
    }
    // The larger results passed the threshold (or the buffer) and were refused.
    assert!(refused >= 18, "{refused} refused");
    s.io.wire = Wire::V1;
}

#[test]
fn fast_path_declines_what_it_does_not_answer() {
    let (_client, mut s) = server();
    let args: Vec<u8> = [0u32, 8].iter().flat_map(|w| w.to_be_bytes()).collect();
    let good = CallHeader::new(9, PROG, 1, ECHOISH, OpaqueAuth::NONE, OpaqueAuth::NONE);
    let mut cases = vec![
        // Unknown program, version, procedure; RPC version 3.
        call_bytes(9, 1, CallHeader { prog: 5, ..good }, &args),
        call_bytes(9, 1, CallHeader { vers: 2, ..good }, &args),
        call_bytes(
            9,
            1,
            CallHeader {
                proc_num: 77,
                ..good
            },
            &args,
        ),
        call_bytes(9, 1, CallHeader { rpcvers: 3, ..good }, &args),
        // Results that may not fit inline.
        call_bytes(
            9,
            1,
            CallHeader {
                proc_num: HUGE,
                ..good
            },
            &args,
        ),
    ];
    let ok = call_bytes(9, 1, good, &args);
    // XID mismatch, version 2, RDMA_NOMSG, a Write list, a truncated RPC header, a
    // credential over 400 bytes, a Reply instead of a Call.
    let mut m = ok.clone();
    m[31] = 8;
    cases.push(m);
    let mut m = ok.clone();
    m[7] = 2;
    cases.push(m);
    let mut m = ok.clone();
    m[15] = 1;
    cases.push(m);
    let mut m = ok.clone();
    m[23] = 1;
    cases.push(m);
    cases.push(ok[..60].to_vec());
    let mut m = ok.clone();
    m[28 + 28..28 + 32].copy_from_slice(&401u32.to_be_bytes());
    cases.push(m);
    let mut m = ok.clone();
    m[28 + 7] = 1;
    cases.push(m);
    for (k, m) in cases.iter().enumerate() {
        assert!(fast(&mut s, m, 4).is_none(), "case {k}");
        // The general path still answers them (or discards), as before.
        let _ = general(&mut s, m, 4);
    }
    assert!(fast(&mut s, &ok, 4).is_some());
}
