//! XDR that NFSv4.1's two examples share, the server (`nfs4d`) and the client
//! (`nfs4probe`): status codes, operation numbers, `channel_attrs4` (RFC 8881 §18.36),
//! and the builders their tests encode
//! COMPOUND and CB_COMPOUND arguments with. Included by path from each example.
#![allow(dead_code)]

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

/// NFSv4 status codes (RFC 8881 §15.1).
pub mod status {
    pub const OK: u32 = 0;
    pub const INVAL: u32 = 22;
    pub const NOTSUPP: u32 = 10004;
    pub const GRACE: u32 = 10013;
    pub const MINOR_VERS_MISMATCH: u32 = 10021;
    pub const STALE_CLIENTID: u32 = 10022;
    pub const BADXDR: u32 = 10036;
    pub const OP_ILLEGAL: u32 = 10044;
    pub const BADSESSION: u32 = 10052;
    pub const BADSLOT: u32 = 10053;
    pub const SEQ_MISORDERED: u32 = 10063;
    pub const SEQUENCE_POS: u32 = 10064;
    pub const RETRY_UNCACHED_REP: u32 = 10068;
    pub const OP_NOT_IN_SESSION: u32 = 10071;
    pub const CLIENTID_BUSY: u32 = 10074;
}

/// Operation numbers (RFC 8881 §18).
pub mod op {
    pub const CLOSE: u32 = 4;
    pub const DELEGRETURN: u32 = 8;
    pub const GETFH: u32 = 10;
    pub const OPEN: u32 = 18;
    pub const PUTFH: u32 = 22;
    pub const PUTROOTFH: u32 = 24;
    pub const EXCHANGE_ID: u32 = 42;
    pub const CREATE_SESSION: u32 = 43;
    pub const DESTROY_SESSION: u32 = 44;
    pub const SEQUENCE: u32 = 53;
    pub const DESTROY_CLIENTID: u32 = 57;
    pub const RECLAIM_COMPLETE: u32 = 58;
    /// The lowest and highest operation numbers of minor versions 1 and 2 (RFC 7862 adds
    /// up to 76): others are OP_ILLEGAL.
    pub const FIRST: u32 = 3;
    pub const LAST: u32 = 76;
    /// OP_ILLEGAL, the result's operation number for one outside them.
    pub const ILLEGAL: u32 = 10044;
}
use rpcrdma_proto::EncodeError;

/// One `channel_attrs4` (§18.36.3), without an RDMA IRD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Channel {
    pub max_request: u32,
    pub max_response: u32,
    pub max_response_cached: u32,
    pub max_operations: u32,
    pub max_requests: u32,
}

impl Channel {
    /// Reads one `channel_attrs4`: `None` when it does not decode.
    pub fn read(r: &mut XdrReader<'_>) -> Option<Channel> {
        r.u32().ok()?; // header padding
        let c = Channel {
            max_request: r.u32().ok()?,
            max_response: r.u32().ok()?,
            max_response_cached: r.u32().ok()?,
            max_operations: r.u32().ok()?,
            max_requests: r.u32().ok()?,
        };
        let ird = r.array_len(4, 1).ok()?;
        r.skip(4 * ird as usize).ok()?;
        Some(c)
    }

    /// Writes it, with no header padding and no RDMA IRD.
    pub fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(0)?;
        w.put_u32(self.max_request)?;
        w.put_u32(self.max_response)?;
        w.put_u32(self.max_response_cached)?;
        w.put_u32(self.max_operations)?;
        w.put_u32(self.max_requests)?;
        w.put_u32(0)
    }
}

/// Big-endian words, for tests.
pub fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A COMPOUND (or, with a callback ident in `head`, a CB_COMPOUND) for tests: the tag,
/// the words of `head` (minor version, and the callback ident), then `ops`, each an
/// operation number and its encoded arguments.
pub fn compound_of(tag: &[u8], head: &[u32], ops: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut v = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut v);
    w.put_opaque_var(tag, 64).unwrap();
    for &h in head {
        w.put_u32(h).unwrap();
    }
    w.put_u32(ops.len() as u32).unwrap();
    for (op, args) in ops {
        w.put_u32(*op).unwrap();
        w.put_raw(args).unwrap();
    }
    let n = w.position();
    v.truncate(n);
    v
}
