//! Fast emitters: the fixed words of the hot paths' messages, written word by word at fixed
//! offsets instead of through the general encoders, and byte-identical to them (property
//! tests in `tests/emit.rs` compare every emitter with [`Header::encode`],
//! [`v2::Header::encode`], [`CallHeader::encode`] and [`ReplyHeader::encode`]).
//!
//! The word arrays are handed over by value so that, inlined with their count known, each
//! word is stored from a register: read back from a stack array just written word by word,
//! they stalled the wide loads that copy them on (store forwarding fails across them).
//!
//! [`Header::encode`]: crate::header::Header::encode
//! [`v2::Header::encode`]: crate::v2::Header::encode
//! [`CallHeader::encode`]: crate::rpc::CallHeader::encode
//! [`ReplyHeader::encode`]: crate::rpc::ReplyHeader::encode

use crate::header::{Proc, MIN_HEADER_LEN, RPCRDMA_VERSION};
use crate::rpc::{AcceptStat, AuthStat};
use crate::v2::{flags, Htype, Wire, RPCRDMA_VERSION_TWO};

/// ONC RPC `msg_type` REPLY (RFC 5531 §9).
const REPLY: u32 = 1;
/// `reply_stat` MSG_ACCEPTED.
const MSG_ACCEPTED: u32 = 0;
/// `reply_stat` MSG_DENIED.
const MSG_DENIED: u32 = 1;
/// `reject_stat` AUTH_ERROR.
const AUTH_ERROR: u32 = 1;

/// Writes `words` big-endian at the start of `buf` and returns the bytes written.
///
/// # Panics
/// If `buf` is shorter than the words (callers size it first).
#[inline(always)]
pub fn put_word_array<const N: usize>(buf: &mut [u8], words: [u32; N]) -> usize {
    let out = &mut buf[..4 * N];
    let mut k = 0;
    while k < N {
        out[4 * k..4 * k + 4].copy_from_slice(&words[k].to_be_bytes());
        k += 1;
    }
    4 * N
}

/// Writes `words` big-endian at the start of `buf`; returns the bytes written (the slice
/// form of [`put_word_array`], for words whose count is not fixed).
///
/// # Panics
/// If `buf` is shorter than the words.
#[inline(always)]
pub fn put_words(buf: &mut [u8], words: &[u32]) -> usize {
    for (k, w) in words.iter().enumerate() {
        buf[4 * k..4 * k + 4].copy_from_slice(&w.to_be_bytes());
    }
    4 * words.len()
}

/// Bytes of an AUTH_ERROR RPC Reply header: xid, REPLY, MSG_DENIED, AUTH_ERROR and the
/// auth_stat (RFC 5531 §9).
pub const DENIED_REPLY_LEN: usize = 20;

/// The seven words of a bare version 1 RDMA_MSG header: `rdma_xid`, version 1, `credit`,
/// RDMA_MSG and the empty Read list, Write list and Reply chunk (RFC 8166 §4.2, §4.7). Every
/// Short message starts with them; the emitters below build on them.
#[inline(always)]
pub fn bare_msg_head(xid: u32, credit: u32) -> [u32; 7] {
    [xid, RPCRDMA_VERSION, credit, Proc::Msg.to_u32(), 0, 0, 0]
}

/// The words before the arguments of a version 1 Short Call without chunks: the bare
/// header ([`bare_msg_head`]), then the ONC RPC call header with AUTH_NONE credential and
/// verifier ([`call_header_words`], RFC 5531 §9). Words 13.. (the credential and verifier)
/// are replaced for another credential.
#[inline]
pub fn short_call_words(xid: u32, credit: u32, prog: u32, vers: u32, proc_num: u32) -> [u32; 17] {
    let [a, b, c, d, e, f, g] = bare_msg_head(xid, credit);
    let [x, call, rpcvers, p, v, n, cf, cl, vf, vl] = call_header_words(xid, prog, vers, proc_num);
    [
        a, b, c, d, e, f, g, x, call, rpcvers, p, v, n, cf, cl, vf, vl,
    ]
}

/// Where a Short Call's credential starts among [`short_call_words`].
pub const SHORT_CALL_CRED_WORD: usize = 13;

/// The ONC RPC call header with AUTH_NONE credential and verifier (RFC 5531 §9): `xid`,
/// CALL, RPC version 2, the program, version and procedure, then the credential and the
/// verifier, each a flavor and an empty body.
#[inline]
pub fn call_header_words(xid: u32, prog: u32, vers: u32, proc_num: u32) -> [u32; 10] {
    [xid, 0, 2, prog, vers, proc_num, 0, 0, 0, 0]
}

/// The words of a version 1 Short Reply without chunks before its results: the bare header
/// ([`bare_msg_head`]: the Call had no Write list and no Reply chunk to echo, RFC 8166
/// §4.3.2), then the accepted RPC Reply header with the AUTH_NONE verifier and `stat` (RFC
/// 5531 §9, §10.1).
#[inline]
pub fn short_reply_words(xid: u32, grant: u32, stat: AcceptStat) -> [u32; 13] {
    let [a, b, c, d, e, f, g] = bare_msg_head(xid, grant);
    // The AUTH_NONE verifier: its flavor and an empty body.
    [
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        xid,
        REPLY,
        MSG_ACCEPTED,
        0,
        0,
        stat.code(),
    ]
}

/// The words of a version 1 Short Reply that refuses the Call's credential: the bare header
/// ([`bare_msg_head`]), then MSG_DENIED / AUTH_ERROR with `stat` (RFC 5531 §9).
#[inline]
pub fn short_denied_words(xid: u32, grant: u32, stat: AuthStat) -> [u32; 12] {
    let [a, b, c, d, e, f, g] = bare_msg_head(xid, grant);
    [
        a, b, c, d, e, f, g, xid, REPLY, MSG_DENIED, AUTH_ERROR, stat.0,
    ]
}

/// The five words a version 1 RDMA_MSG Reply starts with: the first five of
/// [`bare_msg_head`] (up to the empty Read list, RFC 8166 §4.2); the Write list follows.
#[inline]
pub fn msg_reply_head(xid: u32, grant: u32) -> [u32; 5] {
    let [a, b, c, d, e, ..] = bare_msg_head(xid, grant);
    [a, b, c, d, e]
}

/// Writes the words of a Short message made in version 1's layout (`words`: a Short Call's
/// or Reply's, starting with `rdma_xid`, version, credit, RDMA_MSG and the three empty lists)
/// at the start of `out` in `wire`'s layout: version 1's as they are; version 2's as an
/// RDMA2_MSG (\[V2\] §3.2, §3.3) — version 2, `rdma_flags` (`response`: RPCRDMA2_F_RESPONSE)
/// and `rdma_inv_handle` 0 after the first four words — with the words from the lists on 8
/// bytes further. Returns the bytes written.
///
/// # Panics
/// If `words` has fewer than four words or `out` is too short.
#[inline(always)]
pub fn put_short_words(out: &mut [u8], words: &[u32], wire: Wire, response: bool) -> usize {
    match wire {
        Wire::V1 => put_words(out, words),
        Wire::V2 => {
            let f = if response { flags::RESPONSE } else { 0 };
            let prefix = [
                words[0],
                RPCRDMA_VERSION_TWO,
                words[2],
                Htype::Msg.to_u32(),
                f,
                0,
            ];
            let n = put_word_array(out, prefix);
            n + put_words(&mut out[n..], &words[4..])
        }
    }
}

/// The transport header's length of a Short message in `wire` (28 bytes in version 1, 36
/// in version 2).
#[inline]
pub const fn short_header_len(wire: Wire) -> usize {
    MIN_HEADER_LEN + wire.extra()
}
