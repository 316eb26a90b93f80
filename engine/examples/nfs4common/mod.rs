//! XDR that NFSv4.1's two examples share, the server (`nfs4d`) and the client
//! (`nfs4probe`): status codes, operation numbers, `channel_attrs4` (RFC 8881 §18.36),
//! and the builders their tests encode
//! COMPOUND and CB_COMPOUND arguments with. Included by path from each example.
#![allow(dead_code)]

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

/// NFSv4 status codes (RFC 8881 §15.1).
pub mod status {
    pub const OK: u32 = 0;
    pub const PERM: u32 = 1;
    pub const NOENT: u32 = 2;
    pub const IO: u32 = 5;
    pub const ACCESS: u32 = 13;
    pub const EXIST: u32 = 17;
    pub const XDEV: u32 = 18;
    pub const NOTDIR: u32 = 20;
    pub const ISDIR: u32 = 21;
    pub const INVAL: u32 = 22;
    pub const NAMETOOLONG: u32 = 63;
    pub const STALE: u32 = 70;
    pub const BADHANDLE: u32 = 10001;
    pub const BAD_COOKIE: u32 = 10003;
    pub const NOTSUPP: u32 = 10004;
    pub const TOOSMALL: u32 = 10005;
    pub const SERVERFAULT: u32 = 10006;
    pub const BADTYPE: u32 = 10007;
    pub const DELAY: u32 = 10008;
    pub const DENIED: u32 = 10010;
    pub const GRACE: u32 = 10013;
    pub const SHARE_DENIED: u32 = 10015;
    pub const NOFILEHANDLE: u32 = 10020;
    pub const MINOR_VERS_MISMATCH: u32 = 10021;
    pub const STALE_CLIENTID: u32 = 10022;
    pub const OLD_STATEID: u32 = 10024;
    pub const BAD_STATEID: u32 = 10025;
    pub const BAD_SEQID: u32 = 10026;
    pub const SYMLINK: u32 = 10029;
    pub const RESTOREFH: u32 = 10030;
    pub const ATTRNOTSUPP: u32 = 10032;
    pub const NO_GRACE: u32 = 10033;
    pub const RECLAIM_BAD: u32 = 10034;
    pub const BADXDR: u32 = 10036;
    pub const LOCKS_HELD: u32 = 10037;
    pub const OPENMODE: u32 = 10038;
    pub const BADOWNER: u32 = 10039;
    pub const BADNAME: u32 = 10041;
    pub const OP_ILLEGAL: u32 = 10044;
    pub const BADSESSION: u32 = 10052;
    pub const BADSLOT: u32 = 10053;
    pub const COMPLETE_ALREADY: u32 = 10054;
    pub const SEQ_MISORDERED: u32 = 10063;
    pub const SEQUENCE_POS: u32 = 10064;
    pub const RETRY_UNCACHED_REP: u32 = 10068;
    pub const TOO_MANY_OPS: u32 = 10070;
    pub const OP_NOT_IN_SESSION: u32 = 10071;
    pub const CLIENTID_BUSY: u32 = 10074;
    pub const WRONG_TYPE: u32 = 10083;
}

/// Operation numbers (RFC 8881 §18).
pub mod op {
    pub const ACCESS: u32 = 3;
    pub const CLOSE: u32 = 4;
    pub const COMMIT: u32 = 5;
    pub const CREATE: u32 = 6;
    pub const DELEGRETURN: u32 = 8;
    pub const GETATTR: u32 = 9;
    pub const GETFH: u32 = 10;
    pub const LINK: u32 = 11;
    pub const LOCK: u32 = 12;
    pub const LOCKT: u32 = 13;
    pub const LOCKU: u32 = 14;
    pub const LOOKUP: u32 = 15;
    pub const LOOKUPP: u32 = 16;
    pub const OPEN: u32 = 18;
    pub const OPEN_DOWNGRADE: u32 = 21;
    pub const PUTFH: u32 = 22;
    pub const PUTPUBFH: u32 = 23;
    pub const PUTROOTFH: u32 = 24;
    pub const READ: u32 = 25;
    pub const READDIR: u32 = 26;
    pub const READLINK: u32 = 27;
    pub const REMOVE: u32 = 28;
    pub const RENAME: u32 = 29;
    pub const RESTOREFH: u32 = 31;
    pub const SAVEFH: u32 = 32;
    pub const SECINFO: u32 = 33;
    pub const SETATTR: u32 = 34;
    pub const WRITE: u32 = 38;
    pub const BACKCHANNEL_CTL: u32 = 40;
    pub const BIND_CONN_TO_SESSION: u32 = 41;
    pub const EXCHANGE_ID: u32 = 42;
    pub const CREATE_SESSION: u32 = 43;
    pub const DESTROY_SESSION: u32 = 44;
    pub const FREE_STATEID: u32 = 45;
    pub const SECINFO_NO_NAME: u32 = 52;
    pub const SEQUENCE: u32 = 53;
    pub const TEST_STATEID: u32 = 55;
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
