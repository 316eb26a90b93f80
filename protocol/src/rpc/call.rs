//! The header of a CALL message: `xid`, `mtype` = CALL and `call_body` (RFC 5531 §9), with
//! its credential and verifier (§8.2).

use super::auth::OpaqueAuth;
use super::direct::auth_body_at;
use super::wire::{bad_msg_type, encode_exact, read_prefix, MSG_PREFIX_LEN};
use super::{CALL, RPC_VERSION};
use crate::error::{DecodeError, EncodeError};
use crate::xdr::XdrReader;
use crate::xdr::{be32_at, fixed_at};

#[cfg(doc)]
use super::{ReplyHeader, MAX_AUTH_BYTES};

/// The header of a CALL message: `xid`, `mtype` = CALL and `call_body` (RFC 5531 §9).
///
/// The procedure's arguments follow the header; [`CallHeader::parse`] returns where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallHeader<'a> {
    /// `xid`: the transaction ID, echoed by the reply (RFC 5531 §9).
    pub xid: u32,
    /// `rpcvers`: the RPC protocol version, which must be [`RPC_VERSION`]. Decoding keeps any
    /// value so that the server can answer RPC_MISMATCH (see [`CallHeader::is_rpc_v2`]).
    pub rpcvers: u32,
    /// `prog`: the remote program number (RFC 5531 §8.1).
    pub prog: u32,
    /// `vers`: the version of the remote program.
    pub vers: u32,
    /// `proc`: the procedure within the program.
    pub proc_num: u32,
    /// `cred`: the caller's credential.
    pub cred: OpaqueAuth<'a>,
    /// `verf`: the caller's verifier.
    pub verf: OpaqueAuth<'a>,
}

impl<'a> CallHeader<'a> {
    /// A version 2 call header.
    pub const fn new(
        xid: u32,
        prog: u32,
        vers: u32,
        proc_num: u32,
        cred: OpaqueAuth<'a>,
        verf: OpaqueAuth<'a>,
    ) -> Self {
        CallHeader {
            xid,
            rpcvers: RPC_VERSION,
            prog,
            vers,
            proc_num,
            cred,
            verf,
        }
    }

    /// Decodes a call header at the start of `buf` and returns it with the header's length,
    /// the offset at which the procedure's arguments start.
    ///
    /// An `mtype` other than CALL is [`DecodeError::InvalidDiscriminant`] at offset 4. Any
    /// `rpcvers` is accepted.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        match Self::parse_direct(buf) {
            Some(parsed) => Ok(parsed),
            None => Self::parse_reference(buf),
        }
    }

    /// [`CallHeader::parse`] by direct loads (RFC 5531 §9 `call_body`; each `opaque_auth`
    /// body at most 400 bytes, §8.2): `Some` exactly when the reference decoder succeeds,
    /// with the same result; `None` for anything it would reject.
    #[inline]
    pub(crate) fn parse_direct(buf: &'a [u8]) -> Option<(Self, usize)> {
        // xid, mtype, rpcvers, prog, vers, proc, cred.flavor, cred.length.
        let w: &[u8; 32] = fixed_at(buf, 0)?;
        if be32_at(w, 4) != CALL {
            return None;
        }
        let (cred, at) = auth_body_at(buf, 32, be32_at(w, 28))?;
        // verf.flavor, verf.length.
        let v: &[u8; 8] = fixed_at(buf, at)?;
        let (verf, end) = auth_body_at(buf, at + 8, be32_at(v, 4))?;
        Some((
            CallHeader {
                xid: be32_at(w, 0),
                rpcvers: be32_at(w, 8),
                prog: be32_at(w, 12),
                vers: be32_at(w, 16),
                proc_num: be32_at(w, 20),
                cred: OpaqueAuth {
                    flavor: be32_at(w, 24),
                    body: cred,
                },
                verf: OpaqueAuth {
                    flavor: be32_at(v, 0),
                    body: verf,
                },
            },
            end,
        ))
    }

    /// The cursor-based decoder: the reference the direct one agrees with, and the source
    /// of the typed error for input the direct one rejects.
    #[cold]
    #[inline(never)]
    pub(super) fn parse_reference(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (mut r, xid, mtype) = read_prefix(buf)?;
        if mtype != CALL {
            return Err(bad_msg_type(mtype));
        }
        let call = Self::decode_body(xid, &mut r)?;
        Ok((call, r.position()))
    }

    /// Decodes `call_body` (RFC 5531 §9) after the prefix.
    pub(super) fn decode_body(xid: u32, r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        Ok(CallHeader {
            xid,
            rpcvers: r.u32()?,
            prog: r.u32()?,
            vers: r.u32()?,
            proc_num: r.u32()?,
            cred: OpaqueAuth::decode(r)?,
            verf: OpaqueAuth::decode(r)?,
        })
    }

    /// `true` when `rpcvers` is 2, the only version defined (RFC 5531 §9). A server answers a
    /// call for which this is `false` with [`ReplyHeader::rpc_mismatch`]`(xid, 2, 2)`.
    pub const fn is_rpc_v2(&self) -> bool {
        self.rpcvers == RPC_VERSION
    }

    /// Exact encoded size of the header (the arguments not included).
    pub const fn encoded_len(&self) -> usize {
        MSG_PREFIX_LEN + 16 + self.cred.encoded_len() + self.verf.encoded_len()
    }

    /// Encodes the header at the start of `out` and returns its length; the caller writes the
    /// arguments after it.
    ///
    /// An authenticator body over [`MAX_AUTH_BYTES`] is [`EncodeError::TooLong`]; a buffer
    /// shorter than [`CallHeader::encoded_len`] is [`EncodeError::BufferTooSmall`] and nothing
    /// is written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.cred.check()?;
        self.verf.check()?;
        encode_exact(out, self.encoded_len(), |w| {
            w.put_u32(self.xid)?;
            w.put_u32(CALL)?;
            w.put_u32(self.rpcvers)?;
            w.put_u32(self.prog)?;
            w.put_u32(self.vers)?;
            w.put_u32(self.proc_num)?;
            self.cred.put(w)?;
            self.verf.put(w)
        })
    }
}
