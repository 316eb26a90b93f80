//! The NFSv4.1 operations the probe sends and the callbacks it answers, in XDR (RFC 8881
//! §16 COMPOUND, §18 the forward operations, §20 the callback operations; RFC 5531 for
//! the RPC around them).

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};
use rpcrdma_proto::EncodeError;

/// NFSv4's program and version (RFC 8881 §16).
pub const NFS4_PROGRAM: u32 = 100_003;
/// NFSv4 is version 4 of the program, whatever the minor version.
pub const NFS_V4: u32 = 4;
/// COMPOUND's procedure number.
pub const NFSPROC4_COMPOUND: u32 = 1;
/// The callback program this client names in CREATE_SESSION (the Linux client's).
pub const CB_PROGRAM: u32 = 0x4000_0000;
/// The callback program's version (RFC 8881 §20).
pub const CB_VERSION: u32 = 1;
/// CB_NULL and CB_COMPOUND.
pub const CB_NULL: u32 = 0;
/// CB_COMPOUND's procedure number.
pub const CB_COMPOUND: u32 = 1;

pub use crate::nfs4common::op;

/// Callback operation numbers (RFC 8881 §20).
pub mod cb {
    pub const RECALL: u32 = 4;
    pub const SEQUENCE: u32 = 11;
}

pub use crate::nfs4common::status::OP_ILLEGAL as NFS4ERR_OP_ILLEGAL;
pub use crate::nfs4common::status::{GRACE as NFS4ERR_GRACE, OK as NFS4_OK};
/// OP_CB_ILLEGAL: the result's operation number for an unknown callback operation.
pub const OP_CB_ILLEGAL: u32 = 10044;
/// CREATE_SESSION4_FLAG_CONN_BACK_CHAN: the connection carries the back channel too.
pub const CONN_BACK_CHAN: u32 = 0x2;
/// OPEN4_SHARE_ACCESS_READ.
pub const SHARE_ACCESS_READ: u32 = 1;
/// OPEN4_SHARE_ACCESS_WANT_READ_DELEG (RFC 8881 §18.16.3).
pub const WANT_READ_DELEG: u32 = 0x0100;
/// OPEN_DELEGATE_READ.
pub const OPEN_DELEGATE_READ: u32 = 1;
/// OPEN_DELEGATE_WRITE.
pub const OPEN_DELEGATE_WRITE: u32 = 2;
/// OPEN_DELEGATE_NONE_EXT (§18.16.2): none, and why.
pub const OPEN_DELEGATE_NONE_EXT: u32 = 3;

/// A session's ID.
pub type SessionId = [u8; 16];
/// A stateid: `seqid` and the 12 `other` bytes, as sent.
pub type StateId = [u8; 16];

/// Writes one COMPOUND's arguments: the tag, minor version 1 and the operations `ops`
/// writes (their count first).
pub fn compound(
    out: &mut Vec<u8>,
    nops: u32,
    ops: impl FnOnce(&mut XdrWriter<'_>) -> Result<(), EncodeError>,
) {
    out.resize(4096, 0);
    let mut w = XdrWriter::new(out);
    let n = (|| {
        w.put_opaque_var(b"nfs4probe", 64)?;
        w.put_u32(1)?;
        w.put_u32(nops)?;
        ops(&mut w)?;
        Ok::<_, EncodeError>(w.position())
    })()
    .unwrap_or(0);
    out.truncate(n);
}

/// EXCHANGE_ID (§18.35) with owner `owner`, verifier `verifier`, no state protection.
pub fn exchange_id(w: &mut XdrWriter<'_>, verifier: u64, owner: &[u8]) -> Result<(), EncodeError> {
    w.put_u32(op::EXCHANGE_ID)?;
    w.put_u64(verifier)?;
    w.put_opaque_var(owner, 1024)?;
    w.put_u32(0)?; // eia_flags
    w.put_u32(0)?; // SP4_NONE
    w.put_u32(0) // no client implementation ID
}

pub use crate::nfs4common::Channel;

/// CREATE_SESSION (§18.36) for `clientid` at `sequence`, the back channel on this
/// connection (CONN_BACK_CHAN), callbacks to [`CB_PROGRAM`] with AUTH_NONE.
pub fn create_session(
    w: &mut XdrWriter<'_>,
    clientid: u64,
    sequence: u32,
    fore: &Channel,
    back: &Channel,
) -> Result<(), EncodeError> {
    w.put_u32(op::CREATE_SESSION)?;
    w.put_u64(clientid)?;
    w.put_u32(sequence)?;
    w.put_u32(CONN_BACK_CHAN)?;
    fore.put(w)?;
    back.put(w)?;
    w.put_u32(CB_PROGRAM)?;
    w.put_u32(1)?; // one callback_sec_parms4:
    w.put_u32(0) // AUTH_NONE
}

/// SEQUENCE (§18.46) on slot 0 of `session`.
pub fn sequence(w: &mut XdrWriter<'_>, session: &SessionId, seq: u32) -> Result<(), EncodeError> {
    w.put_u32(op::SEQUENCE)?;
    w.put_opaque_fixed(session)?;
    w.put_u32(seq)?;
    w.put_u32(0)?; // slot
    w.put_u32(0)?; // highest slot
    w.put_bool(false)
}

/// OPEN (§18.16) of `name` in the current directory for reading, without creating it,
/// asking for a read delegation.
pub fn open_read(
    w: &mut XdrWriter<'_>,
    clientid: u64,
    owner: &[u8],
    name: &[u8],
) -> Result<(), EncodeError> {
    w.put_u32(op::OPEN)?;
    w.put_u32(0)?; // seqid (unused in 4.1)
    w.put_u32(SHARE_ACCESS_READ | WANT_READ_DELEG)?;
    w.put_u32(0)?; // deny none
    w.put_u64(clientid)?;
    w.put_opaque_var(owner, 1024)?;
    w.put_u32(0)?; // OPEN4_NOCREATE
    w.put_u32(0)?; // CLAIM_NULL
    w.put_opaque_var(name, 255)
}

/// An operation whose only argument is a stateid (DELEGRETURN), or a seqid and a stateid
/// (CLOSE).
pub fn with_stateid(w: &mut XdrWriter<'_>, op: u32, stateid: &StateId) -> Result<(), EncodeError> {
    w.put_u32(op)?;
    if op == op::CLOSE {
        w.put_u32(0)?;
    }
    w.put_opaque_fixed(stateid)
}

/// The results of a COMPOUND, walked operation by operation.
pub struct Results<'a> {
    pub status: u32,
    r: XdrReader<'a>,
}

impl<'a> Results<'a> {
    /// The COMPOUND4res `results`: its status, the tag skipped, the count read.
    pub fn new(results: &'a [u8]) -> Option<Results<'a>> {
        let mut r = XdrReader::new(results);
        let status = r.u32().ok()?;
        r.opaque_var(1024).ok()?;
        r.u32().ok()?;
        Some(Results { status, r })
    }

    /// The next operation's result: its status and a reader at its body when NFS4_OK;
    /// `Err` with the status otherwise, or when `op` is not the operation found.
    pub fn next(&mut self, op: u32) -> Result<&mut XdrReader<'a>, String> {
        let whole = self.status;
        let early = || format!("the results end early (COMPOUND status {whole})");
        let got = self.r.u32().map_err(|_| early())?;
        let status = self.r.u32().map_err(|_| early())?;
        if got != op {
            return Err(format!("result of operation {got} where {op} was expected"));
        }
        if status != NFS4_OK {
            return Err(format!("operation {op}: status {status}"));
        }
        Ok(&mut self.r)
    }
}

/// Reads a stateid.
pub fn stateid(r: &mut XdrReader<'_>) -> Option<StateId> {
    r.opaque_fixed(16).ok()?.try_into().ok()
}

/// OPEN4resok: the open stateid and the read delegation's stateid, if one was granted.
pub fn open_result(r: &mut XdrReader<'_>) -> Option<(StateId, Option<StateId>)> {
    let open = stateid(r)?;
    r.skip(4 + 8 + 8 + 4).ok()?; // cinfo, rflags
    let words = r.array_len(4, 64).ok()?;
    r.skip(4 * words as usize).ok()?; // attrset
                                      // open_delegation4 (§18.16.2): the read delegation's stateid; the rest read past.
    let deleg = match r.u32().ok()? {
        OPEN_DELEGATE_READ => {
            let sid = stateid(r)?;
            r.bool().ok()?; // recall
            skip_ace(r)?;
            Some(sid)
        }
        OPEN_DELEGATE_WRITE => {
            stateid(r)?;
            r.bool().ok()?;
            match r.u32().ok()? {
                1 => r.skip(8).ok()?, // NFS_LIMIT_SIZE
                _ => r.skip(8).ok()?, // NFS_LIMIT_BLOCKS: two words
            }
            skip_ace(r)?;
            None
        }
        OPEN_DELEGATE_NONE_EXT => {
            // WND4_CONTENTION and WND4_RESOURCE carry a bool.
            if matches!(r.u32().ok()?, 1 | 2) {
                r.bool().ok()?;
            }
            None
        }
        _ => None,
    };
    Some((open, deleg))
}

/// Reads past an `nfsace4`: type, flags, mask, who.
fn skip_ace(r: &mut XdrReader<'_>) -> Option<()> {
    r.skip(12).ok()?;
    r.opaque_var(1024).ok().map(|_| ())
}

/// What a CB_COMPOUND asked and what was answered, for the counters.
#[derive(Default, Debug)]
pub struct CbSeen {
    pub sequences: u32,
    pub recalls: Vec<StateId>,
    pub unknown: u32,
}

/// Answers one CB_COMPOUND (§20.2): CB_SEQUENCE echoed (§20.9), CB_RECALL accepted and
/// noted (§20.2), any other operation NFS4ERR_OP_ILLEGAL, which ends the compound. The
/// bytes written into `out`, or `None` for arguments that do not decode.
pub fn answer_cb_compound(args: &[u8], out: &mut [u8], seen: &mut CbSeen) -> Option<usize> {
    let mut r = XdrReader::new(args);
    let tag = r.opaque_var(1024).ok()?;
    r.u32().ok()?; // minorversion
    r.u32().ok()?; // callback_ident
    let n = r.array_len(4, 64).ok()?;
    let mut w = XdrWriter::new(out);
    w.put_u32(NFS4_OK).ok()?; // patched below if an operation fails
    w.put_opaque_var(tag, 1024).ok()?;
    let count_at = w.position();
    w.put_u32(0).ok()?;
    let (mut done, mut status) = (0u32, NFS4_OK);
    for _ in 0..n {
        let opnum = r.u32().ok()?;
        done += 1;
        match opnum {
            cb::SEQUENCE | cb::RECALL => w.put_u32(opnum).ok()?,
            // OP_CB_ILLEGAL's result for an operation not known (§20.11).
            _ => w.put_u32(OP_CB_ILLEGAL).ok()?,
        }
        match opnum {
            cb::SEQUENCE => {
                let session = r.opaque_fixed(16).ok()?;
                let seq = r.u32().ok()?;
                let slot = r.u32().ok()?;
                let highest = r.u32().ok()?;
                r.bool().ok()?;
                let lists = r.array_len(20, 64).ok()?;
                for _ in 0..lists {
                    r.skip(16).ok()?;
                    let calls = r.array_len(8, 1024).ok()?;
                    r.skip(8 * calls as usize).ok()?;
                }
                w.put_u32(NFS4_OK).ok()?;
                w.put_opaque_fixed(session).ok()?;
                w.put_u32(seq).ok()?;
                w.put_u32(slot).ok()?;
                w.put_u32(highest).ok()?;
                w.put_u32(highest).ok()?;
                seen.sequences += 1;
            }
            cb::RECALL => {
                let sid = stateid(&mut r)?;
                r.bool().ok()?; // truncate
                r.opaque_var(128).ok()?; // fh
                w.put_u32(NFS4_OK).ok()?;
                seen.recalls.push(sid);
            }
            _ => {
                seen.unknown += 1;
                status = NFS4ERR_OP_ILLEGAL;
                w.put_u32(status).ok()?;
                break;
            }
        }
    }
    let len = w.position();
    out[..4].copy_from_slice(&status.to_be_bytes());
    out[count_at..count_at + 4].copy_from_slice(&done.to_be_bytes());
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::nfs4common::{compound_of, words};

    /// A CB_COMPOUND of `ops`: tag "tag", minor version 1, callback ident 7.
    fn cb_compound(ops: &[(u32, Vec<u8>)]) -> Vec<u8> {
        compound_of(b"tag", &[1, 7], ops)
    }

    #[test]
    fn cb_sequence_is_echoed_and_cb_recall_noted() {
        let session = [0xab; 16];
        let mut seq = session.to_vec();
        seq.extend(words(&[9, 0, 3, 0, 1])); // seq 9, slot 0, highest 3, no cache, one list
        seq.extend([0xcd; 16]); // its session
        seq.extend(words(&[1, 5, 2])); // one referring call: sequence 5, slot 2
        let sid = [0x11; 16];
        let mut recall = sid.to_vec();
        recall.extend(words(&[0, 4, 0xdead_beef])); // no truncate, a 4-byte handle
        let args = cb_compound(&[(cb::SEQUENCE, seq), (cb::RECALL, recall)]);
        let mut out = [0u8; 512];
        let mut seen = CbSeen::default();
        let n = answer_cb_compound(&args, &mut out, &mut seen).unwrap();
        let mut want = words(&[NFS4_OK, 3]);
        want.extend(b"tag\0");
        want.extend(words(&[2, cb::SEQUENCE, NFS4_OK]));
        want.extend(session);
        want.extend(words(&[9, 0, 3, 3, cb::RECALL, NFS4_OK]));
        assert_eq!(&out[..n], &want[..]);
        assert_eq!(
            (seen.sequences, seen.recalls, seen.unknown),
            (1, vec![sid], 0)
        );
    }

    #[test]
    fn an_unknown_callback_ends_the_compound_with_op_cb_illegal() {
        let args = cb_compound(&[(99, Vec::new()), (cb::RECALL, vec![0; 24])]);
        let mut out = [0u8; 512];
        let mut seen = CbSeen::default();
        let n = answer_cb_compound(&args, &mut out, &mut seen).unwrap();
        let mut want = words(&[NFS4ERR_OP_ILLEGAL, 3]);
        want.extend(b"tag\0");
        want.extend(words(&[1, OP_CB_ILLEGAL, NFS4ERR_OP_ILLEGAL]));
        assert_eq!(&out[..n], &want[..]);
        assert!(seen.recalls.is_empty());
        // Truncated arguments decode as nothing.
        assert_eq!(answer_cb_compound(&args[..10], &mut out, &mut seen), None);
    }
}
