//! Tests of the RPC message headers (RFC 5531 §9, appendix A): the shared fixtures here,
//! the tests by concern in the submodules.

use super::*;
use crate::error::{DecodeError, EncodeError};

mod direct;
mod malformed;
mod roundtrip;
mod vectors;

/// Big-endian bytes of a sequence of XDR words.
fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn encode_vec(f: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>) -> Vec<u8> {
    let mut buf = vec![0xAAu8; 1024];
    let n = f(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// NFSv3 NULL (program 100003, version 3, procedure 0) with AUTH_NONE credential and
/// verifier (RFC 5531 §9, §10.1; RFC 1813 §3.3.0).
const NULL_CALL: [u32; 10] = [
    0x1234_5678, // xid
    0x0000_0000, // mtype CALL
    0x0000_0002, // rpcvers
    0x0001_86a3, // prog 100003
    0x0000_0003, // vers
    0x0000_0000, // proc NULL
    0x0000_0000, // cred.flavor AUTH_NONE
    0x0000_0000, // cred.body length
    0x0000_0000, // verf.flavor AUTH_NONE
    0x0000_0000, // verf.body length
];

/// `authsys_parms` (RFC 5531 appendix A): stamp, "client", uid 1000, gid 100, gids 10, 100.
const SYS_BODY: [u32; 9] = [
    0x6a3b_1c2d, // stamp
    0x0000_0006, // machinename length
    0x636c_6965, // "clie"
    0x6e74_0000, // "nt" + 2 bytes of padding
    0x0000_03e8, // uid 1000
    0x0000_0064, // gid 100
    0x0000_0002, // gids count
    0x0000_000a, // gids[0] = 10
    0x0000_0064, // gids[1] = 100
];

/// NFSv3 GETATTR (procedure 1) with the AUTH_SYS credential above and an AUTH_NONE verifier.
const SYS_CALL: [u32; 19] = [
    0xdead_beef, // xid
    0x0000_0000, // CALL
    0x0000_0002, // rpcvers
    0x0001_86a3, // prog 100003
    0x0000_0003, // vers
    0x0000_0001, // proc GETATTR
    0x0000_0001, // cred.flavor AUTH_SYS
    0x0000_0024, // cred.body length 36
    0x6a3b_1c2d,
    0x0000_0006,
    0x636c_6965,
    0x6e74_0000,
    0x0000_03e8,
    0x0000_0064,
    0x0000_0002,
    0x0000_000a,
    0x0000_0064,
    0x0000_0000, // verf.flavor AUTH_NONE
    0x0000_0000, // verf.body length
];

const SYS_GIDS: [u32; 2] = [10, 100];

fn sys_cred() -> AuthSys<'static> {
    AuthSys {
        stamp: 0x6a3b_1c2d,
        machinename: b"client",
        uid: 1000,
        gid: 100,
        gids: Gids::new(&SYS_GIDS).unwrap(),
    }
}

/// Every reply status with its exact encoding and its RFC names.
fn reply_vectors() -> Vec<(ReplyHeader<'static>, Vec<u32>, &'static str, &'static str)> {
    // xid, REPLY, then reply_stat and its arm.
    let acc = |stat: u32| vec![7, 1, 0, 0, 0, stat];
    vec![
        (
            ReplyHeader::accepted_success(7),
            acc(0),
            "MSG_ACCEPTED",
            "SUCCESS",
        ),
        (
            ReplyHeader::prog_unavail(7),
            acc(1),
            "MSG_ACCEPTED",
            "PROG_UNAVAIL",
        ),
        (
            ReplyHeader::prog_mismatch(7, 2, 4),
            vec![7, 1, 0, 0, 0, 2, 2, 4],
            "MSG_ACCEPTED",
            "PROG_MISMATCH",
        ),
        (
            ReplyHeader::proc_unavail(7),
            acc(3),
            "MSG_ACCEPTED",
            "PROC_UNAVAIL",
        ),
        (
            ReplyHeader::garbage_args(7),
            acc(4),
            "MSG_ACCEPTED",
            "GARBAGE_ARGS",
        ),
        (
            ReplyHeader::system_err(7),
            acc(5),
            "MSG_ACCEPTED",
            "SYSTEM_ERR",
        ),
        (
            ReplyHeader::rpc_mismatch(7, 2, 2),
            vec![7, 1, 1, 0, 2, 2],
            "MSG_DENIED",
            "RPC_MISMATCH",
        ),
        (
            ReplyHeader::auth_error(7, AuthStat::AUTH_BADCRED),
            vec![7, 1, 1, 1, 1],
            "MSG_DENIED",
            "AUTH_ERROR",
        ),
        (
            ReplyHeader::auth_error(7, AuthStat::RPCSEC_GSS_CTXPROBLEM),
            vec![7, 1, 1, 1, 14],
            "MSG_DENIED",
            "AUTH_ERROR",
        ),
    ]
}

fn stat_name(r: &ReplyHeader<'_>) -> &'static str {
    match r.body {
        ReplyBody::Accepted { stat, .. } => stat.name(),
        ReplyBody::Denied(rej) => rej.name(),
    }
}

/// A reply built from generated parts: `kind` picks the status.
fn make_reply(kind: u8, xid: u32, a: u32, b: u32, verf: OpaqueAuth<'_>) -> ReplyHeader<'_> {
    let stat = match kind {
        0 => AcceptStat::Success,
        1 => AcceptStat::ProgUnavail,
        2 => AcceptStat::ProgMismatch { low: a, high: b },
        3 => AcceptStat::ProcUnavail,
        4 => AcceptStat::GarbageArgs,
        5 => AcceptStat::SystemErr,
        6 => return ReplyHeader::rpc_mismatch(xid, a, b),
        _ => return ReplyHeader::auth_error(xid, AuthStat(a)),
    };
    ReplyHeader::accepted(xid, verf, stat)
}
