//! Hand-built RPC-over-RDMA messages and the checks of what a responder answers them,
//! shared by the in-process hostile-peer tests (`engine/tests/rpc_hostile.rs`, through
//! `raw`) and the ones against a `rpcrdma serve` process (`tools/tests/serve_hostile/`,
//! which includes this file by path).
#![allow(dead_code)]

use rpcrdma_engine::program::{NULL, PROG, VERS};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, Proc};
use rpcrdma_proto::rpc::{
    AcceptStat, CallHeader, OpaqueAuth, RejectedReply, ReplyBody, ReplyHeader,
};
use rpcrdma_proto::verdict::Action;

/// A plain RPC Call header (AUTH_NONE) with explicit program fields.
pub fn call_header_of(xid: u32, rpcvers: u32, prog: u32, vers: u32, proc_num: u32) -> Vec<u8> {
    let mut h = CallHeader::new(
        xid,
        prog,
        vers,
        proc_num,
        OpaqueAuth::NONE,
        OpaqueAuth::NONE,
    );
    h.rpcvers = rpcvers;
    let mut v = vec![0; h.encoded_len()];
    h.encode(&mut v).unwrap();
    v
}

/// An RPC Call header (AUTH_NONE) for `proc_num` of the test program.
pub fn call_header(xid: u32, proc_num: u32) -> Vec<u8> {
    call_header_of(xid, 2, PROG, VERS, proc_num)
}

/// A transport header followed by `payload`.
pub fn message(h: &Header<'_>, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0; h.encoded_len()];
    h.encode(&mut v).unwrap();
    v.extend_from_slice(payload);
    v
}

/// RDMA_MSG with `chunks` and the RPC Call of `proc_num` with `args`.
pub fn msg_call(xid: u32, chunks: Chunks<'_>, proc_num: u32, args: &[u8]) -> Vec<u8> {
    let mut payload = call_header(xid, proc_num);
    payload.extend_from_slice(args);
    message(&Header::msg(xid, 32, chunks), &payload)
}

/// RDMA_NOMSG with `chunks` (a Long Call's header: its payload is in a Read chunk).
pub fn nomsg(xid: u32, chunks: Chunks<'_>) -> Vec<u8> {
    message(&Header::nomsg(xid, 32, chunks), &[])
}

/// A well-formed Short NULL Call.
pub fn null_call(xid: u32) -> Vec<u8> {
    msg_call(xid, Chunks::NONE, NULL, &[])
}

/// Two XDR words: the arguments of the program's READ and WRITE (seed, length).
pub fn words(a: u32, b: u32) -> Vec<u8> {
    [a.to_be_bytes(), b.to_be_bytes()].concat()
}

/// Position of WRITE's DDP-eligible data: the 40-byte call header, the seed, the length.
pub const WRITE_DATA_POS: u32 = 48;

/// The RPC reply in a received RDMA_MSG (panics if it is not one).
pub fn rpc_reply(m: &[u8]) -> ReplyHeader<'_> {
    let h = HeaderView::parse(m).expect("reply transport header");
    ReplyHeader::parse(h.payload()).expect("RPC reply").0
}

/// The big-endian word at byte `at` of `b`.
pub fn w(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// Overwrites the big-endian word at byte `at` of `v`.
pub fn set_word(v: &mut [u8], at: usize, x: u32) {
    v[at..at + 4].copy_from_slice(&x.to_be_bytes());
}

/// What a responder must answer a message with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expect {
    /// Nothing comes back.
    Discard,
    /// RDMA_ERROR / ERR_VERS 1..1 echoing the XID and the version sent (28 bytes).
    ErrVers,
    /// RDMA_ERROR / ERR_CHUNK echoing the XID and the version sent (20 bytes).
    ErrChunk,
    /// An RDMA_MSG RPC reply with this accept status.
    Accepted(AcceptStat),
    /// An RPC_MISMATCH denial (2..2).
    RpcMismatch,
}

impl Expect {
    /// The transport verdict of RFC 8166 §4.5 for this answer (`None`: the RPC layer's).
    pub fn action(self) -> Option<Action> {
        match self {
            Expect::Discard => Some(Action::Discard),
            Expect::ErrVers => Some(Action::ErrVers { low: 1, high: 1 }),
            Expect::ErrChunk => Some(Action::ErrChunk),
            Expect::Accepted(AcceptStat::GarbageArgs) => Some(Action::GarbageArgs),
            _ => None,
        }
    }

    /// The answer a transport verdict calls for (`None` for `Process`).
    pub fn from_action(a: Action) -> Option<Expect> {
        match a {
            Action::Discard => Some(Expect::Discard),
            Action::ErrVers { .. } => Some(Expect::ErrVers),
            Action::ErrChunk => Some(Expect::ErrChunk),
            Action::GarbageArgs => Some(Expect::Accepted(AcceptStat::GarbageArgs)),
            Action::Process => None,
        }
    }
}

/// Checks the exact reply `m` to `sent` against `e` (RFC 8166 §4.5, §4.5.1; CHECKLIST G-2,
/// G-15: the XID and version echoed, the current grant).
pub fn check_reply(name: &str, m: &[u8], sent: &[u8], grant: u32, e: Expect) {
    let xid = if sent.len() >= 4 { w(sent, 0) } else { 0 };
    assert!(m.len() >= 4, "{name}: reply of {} bytes", m.len());
    assert_eq!(w(m, 0), xid, "{name}: XID echoed");
    match e {
        Expect::ErrVers => {
            assert_eq!(m.len(), 28, "{name}: ERR_VERS is 28 bytes: {m:02x?}");
            assert_eq!(
                [w(m, 4), w(m, 8), w(m, 12), w(m, 16), w(m, 20), w(m, 24)],
                [w(sent, 4), grant, 4, 1, 1, 1],
                "{name}: RDMA_ERROR ERR_VERS 1..1, version echoed, grant"
            );
        }
        Expect::ErrChunk => {
            assert_eq!(m.len(), 20, "{name}: ERR_CHUNK is 20 bytes: {m:02x?}");
            assert_eq!(
                [w(m, 4), w(m, 8), w(m, 12), w(m, 16)],
                [w(sent, 4), grant, 4, 2],
                "{name}: RDMA_ERROR ERR_CHUNK, version echoed, grant"
            );
        }
        Expect::Accepted(stat) => {
            let h = HeaderView::parse(m).unwrap();
            assert_eq!(h.proc(), Proc::Msg, "{name}: RDMA_MSG");
            assert_eq!(h.credit(), grant, "{name}: grant");
            let r = rpc_reply(m);
            assert_eq!(r.xid, xid, "{name}");
            assert_eq!(r.accept_stat(), Some(stat), "{name}: {r:?}");
        }
        Expect::RpcMismatch => {
            let r = rpc_reply(m);
            assert_eq!(
                r.body,
                ReplyBody::Denied(RejectedReply::RpcMismatch { low: 2, high: 2 }),
                "{name}"
            );
        }
        Expect::Discard => panic!("{name}: a reply to a discarded message: {m:02x?}"),
    }
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// A word biased toward boundary values.
    pub fn word(&mut self) -> u32 {
        const VALS: [u32; 13] = [
            0,
            1,
            2,
            3,
            4,
            8,
            40,
            44,
            48,
            64,
            4096,
            0x7fff_ffff,
            u32::MAX,
        ];
        if self.below(3) == 0 {
            self.next() as u32
        } else {
            VALS[self.below(VALS.len() as u64) as usize]
        }
    }
}
