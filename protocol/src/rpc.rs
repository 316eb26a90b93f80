//! ONC RPC version 2 message headers (RFC 5531).
//!
//! [`RpcMessage`], [`CallHeader`] and [`ReplyHeader`] decode the header of a received RPC
//! message in place (zero copy, no allocation) and report where the procedure's arguments or
//! results start; the same types describe a header to send and encode it into a
//! caller-provided buffer after computing its exact size. The shapes follow the XDR of
//! RFC 5531 §9:
//!
//! ```text
//! call   xid CALL(0)  rpcvers prog vers proc  cred(flavor len body)  verf(flavor len body)
//! reply  xid REPLY(1) MSG_ACCEPTED(0) verf(flavor len body) accept_stat [low high]
//! reply  xid REPLY(1) MSG_DENIED(1)   RPC_MISMATCH(0) low high | AUTH_ERROR(1) auth_stat
//! ```
//!
//! Credentials and verifiers are carried as [`OpaqueAuth`] whatever their flavor;
//! [`AuthSys`] decodes and encodes the body of an AUTH_SYS credential (RFC 5531 appendix A).

use core::fmt;
use core::hash::{Hash, Hasher};
use core::iter::FusedIterator;

use crate::error::{DecodeError, EncodeError};
use crate::xdr::{pad4, XdrReader, XdrWriter};

/// The only RPC protocol version: `rpcvers` "MUST be equal to 2" (RFC 5531 §9).
pub const RPC_VERSION: u32 = 2;
/// Largest body of an `opaque_auth`, in bytes (RFC 5531 §8.2: `opaque body<400>`).
pub const MAX_AUTH_BYTES: usize = 400;
/// Size of a Call header with AUTH_NONE credential and verifier (RFC 5531 §9: xid, CALL,
/// rpcvers, prog, vers, proc, two empty `opaque_auth`s).
pub const AUTH_NONE_CALL_LEN: usize = 40;
/// Size of an accepted Reply header with the AUTH_NONE verifier (RFC 5531 §9: xid, REPLY,
/// MSG_ACCEPTED, verifier flavor and length, accept_stat).
pub const AUTH_NONE_ACCEPTED_LEN: usize = 24;
/// Largest `machinename` of an AUTH_SYS credential, in bytes (RFC 5531 appendix A:
/// `string machinename<255>`).
pub const MAX_MACHINENAME_LEN: usize = 255;
/// Largest number of supplementary groups in an AUTH_SYS credential (RFC 5531 appendix A:
/// `unsigned int gids<16>`).
pub const MAX_GIDS: usize = 16;

/// `msg_type` CALL (RFC 5531 §9).
pub const CALL: u32 = 0;
/// `msg_type` REPLY (RFC 5531 §9).
pub const REPLY: u32 = 1;

/// `reply_stat` MSG_ACCEPTED (RFC 5531 §9).
pub const MSG_ACCEPTED: u32 = 0;
/// `reply_stat` MSG_DENIED (RFC 5531 §9).
pub const MSG_DENIED: u32 = 1;

/// `auth_flavor` AUTH_NONE: no authentication (RFC 5531 §9, §10.1).
pub const AUTH_NONE: u32 = 0;
/// `auth_flavor` AUTH_SYS: Unix-style credentials (RFC 5531 §9, appendix A).
pub const AUTH_SYS: u32 = 1;
/// `auth_flavor` AUTH_SHORT: a short-hand verifier a server may return for AUTH_SYS
/// (RFC 5531 §9, appendix A).
pub const AUTH_SHORT: u32 = 2;
/// `auth_flavor` AUTH_DH: Diffie-Hellman authentication (RFC 5531 §9; RFC 2695).
pub const AUTH_DH: u32 = 3;
/// `auth_flavor` RPCSEC_GSS (RFC 5531 §9; RFC 2203).
pub const RPCSEC_GSS: u32 = 6;

/// Encoded size of the smallest call header: six words plus two empty AUTH_NONE
/// `opaque_auth`s.
pub const MIN_CALL_LEN: usize = 40;
/// Encoded size of the smallest reply header: a MSG_DENIED AUTH_ERROR (five words).
pub const MIN_REPLY_LEN: usize = 20;

/// Size of `xid` and `mtype`, the prefix every message shares (RFC 5531 §9, `rpc_msg`).
const MSG_PREFIX_LEN: usize = 8;

/// The RFC 5531 §9 name of an `auth_flavor`, e.g. `"AUTH_SYS"`, or `None` for a flavor the
/// RFC's enum does not list.
pub const fn flavor_name(flavor: u32) -> Option<&'static str> {
    match flavor {
        AUTH_NONE => Some("AUTH_NONE"),
        AUTH_SYS => Some("AUTH_SYS"),
        AUTH_SHORT => Some("AUTH_SHORT"),
        AUTH_DH => Some("AUTH_DH"),
        RPCSEC_GSS => Some("RPCSEC_GSS"),
        _ => None,
    }
}

/// Checks that `out` can hold `needed` bytes, then runs `f` on a writer over it and returns
/// `needed`. Nothing is written when the buffer is too small.
fn encode_exact(
    out: &mut [u8],
    needed: usize,
    f: impl FnOnce(&mut XdrWriter<'_>) -> Result<(), EncodeError>,
) -> Result<usize, EncodeError> {
    if out.len() < needed {
        return Err(EncodeError::BufferTooSmall {
            needed,
            available: out.len(),
        });
    }
    let mut w = XdrWriter::new(out);
    f(&mut w)?;
    debug_assert_eq!(w.position(), needed);
    Ok(needed)
}

/// Reads the `xid` and `mtype` words at the start of a message (RFC 5531 §9, `rpc_msg`).
fn read_prefix<'a>(buf: &'a [u8]) -> Result<(XdrReader<'a>, u32, u32), DecodeError> {
    let mut r = XdrReader::new(buf);
    let xid = r.u32()?;
    let mtype = r.u32()?;
    Ok((r, xid, mtype))
}

/// The error for an `mtype` other than the one a decoder expects or knows.
fn bad_msg_type(value: u32) -> DecodeError {
    DecodeError::InvalidDiscriminant { offset: 4, value }
}

// ---------------------------------------------------------------------------------------------
// Direct decoding
// ---------------------------------------------------------------------------------------------
//
// The parsers below first try a direct decoder: one bounds check for the fixed words, then
// big-endian loads at fixed offsets (no cursor, no `Result` per word). A direct decoder
// answers `Some` exactly when the cursor-based reference decoder succeeds, with the same
// header and length (property tests below), and `None` otherwise; the parsers then run the
// reference decoder, cold, which finds the typed error at its offset. Malformed input
// therefore gets the same `DecodeError` as ever, and well-formed input never pays for the
// per-word checks.

/// The big-endian word at byte `at` of `w` (RFC 4506 §4.2). With a constant `at` the index is
/// checked at compile time.
#[inline(always)]
fn be32_at<const N: usize>(w: &[u8; N], at: usize) -> u32 {
    u32::from_be_bytes([w[at], w[at + 1], w[at + 2], w[at + 3]])
}

/// The `N` bytes of `buf` from `at`, or `None` when `buf` ends before.
#[inline(always)]
fn fixed_at<const N: usize>(buf: &[u8], at: usize) -> Option<&[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The body of an `opaque_auth` whose length word `len` was just read and whose body starts
/// at `at`: `None` when the length exceeds [`MAX_AUTH_BYTES`] (RFC 5531 §8.2) or the body
/// and its padding run past `buf` (RFC 4506 §4.10). Returns the body and where the next item
/// starts.
#[inline(always)]
fn auth_body_at(buf: &[u8], at: usize, len: u32) -> Option<(&[u8], usize)> {
    let len = len as usize;
    if len > MAX_AUTH_BYTES {
        return None;
    }
    let end = at + pad4(len);
    if end > buf.len() {
        return None;
    }
    Some((&buf[at..at + len], end))
}

// ---------------------------------------------------------------------------------------------
// opaque_auth
// ---------------------------------------------------------------------------------------------

/// A credential or verifier, `opaque_auth` (RFC 5531 §8.2, §9): a flavor and up to
/// [`MAX_AUTH_BYTES`] bytes of flavor-specific data, borrowed from the receive buffer.
///
/// The default value is the AUTH_NONE authenticator with an empty body ([`OpaqueAuth::NONE`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OpaqueAuth<'a> {
    /// `flavor`: the authentication flavor (see [`AUTH_NONE`] and the other flavor constants).
    /// Flavors this crate does not know are carried unchanged.
    pub flavor: u32,
    /// `body`: the flavor-specific data, without its length word or padding.
    pub body: &'a [u8],
}

impl<'a> OpaqueAuth<'a> {
    /// The AUTH_NONE authenticator: flavor 0 and a zero-length body (RFC 5531 §10.1).
    pub const NONE: OpaqueAuth<'static> = OpaqueAuth {
        flavor: AUTH_NONE,
        body: &[],
    };

    /// An authenticator from its flavor and body.
    pub const fn new(flavor: u32, body: &'a [u8]) -> Self {
        OpaqueAuth { flavor, body }
    }

    /// Decodes an `opaque_auth` at the reader's position, consuming it and its padding.
    ///
    /// A body length over [`MAX_AUTH_BYTES`] is [`DecodeError::CountTooLarge`], reported before
    /// the bytes present are looked at.
    pub fn decode(r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        let flavor = r.u32()?;
        let body = r.opaque_var(MAX_AUTH_BYTES as u32)?;
        Ok(OpaqueAuth { flavor, body })
    }

    /// Decodes an `opaque_auth` at the start of `buf` and returns it with its encoded length.
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let mut r = XdrReader::new(buf);
        let auth = Self::decode(&mut r)?;
        Ok((auth, r.position()))
    }

    /// Exact encoded size: flavor, length and the body padded to a multiple of four.
    pub const fn encoded_len(&self) -> usize {
        8 + pad4(self.body.len())
    }

    /// Encodes the authenticator at the start of `out` and returns its length.
    ///
    /// A body over [`MAX_AUTH_BYTES`] is [`EncodeError::TooLong`]; a buffer shorter than
    /// [`OpaqueAuth::encoded_len`] is [`EncodeError::BufferTooSmall`] and nothing is written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.check()?;
        encode_exact(out, self.encoded_len(), |w| self.put(w))
    }

    /// The RFC 5531 §9 name of the flavor, when it has one.
    pub const fn flavor_name(&self) -> Option<&'static str> {
        flavor_name(self.flavor)
    }

    /// Decodes the body as AUTH_SYS parameters: `None` when the flavor is not AUTH_SYS,
    /// otherwise the result of [`AuthSys::parse`] on the body.
    pub fn auth_sys(&self) -> Option<Result<AuthSys<'a>, DecodeError>> {
        (self.flavor == AUTH_SYS).then(|| AuthSys::parse(self.body))
    }

    fn check(&self) -> Result<(), EncodeError> {
        if self.body.len() > MAX_AUTH_BYTES {
            return Err(EncodeError::TooLong {
                len: self.body.len(),
                max: MAX_AUTH_BYTES,
            });
        }
        Ok(())
    }

    fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.flavor)?;
        w.put_opaque_var(self.body, MAX_AUTH_BYTES as u32)
    }
}

// ---------------------------------------------------------------------------------------------
// AUTH_SYS
// ---------------------------------------------------------------------------------------------

/// The supplementary group IDs of an AUTH_SYS credential (RFC 5531 appendix A,
/// `gids<16>`): at most [`MAX_GIDS`] values.
///
/// A decoded list is a view of the big-endian words in the receive buffer; a list to send
/// borrows the caller's `&[u32]` ([`Gids::new`]). Equality, hashing and `Debug` look at the
/// values only, so a decoded list equals the one it was encoded from.
#[derive(Clone, Copy)]
pub struct Gids<'a> {
    repr: GidsRepr<'a>,
}

#[derive(Clone, Copy)]
enum GidsRepr<'a> {
    /// Four big-endian bytes per gid, without the count; the length is at most 64.
    Wire(&'a [u8]),
    /// Host values, at most [`MAX_GIDS`] of them.
    Host(&'a [u32]),
}

impl<'a> Gids<'a> {
    /// The empty list.
    pub const EMPTY: Gids<'static> = Gids {
        repr: GidsRepr::Host(&[]),
    };

    /// A list to encode, or `None` when `gids` holds more than [`MAX_GIDS`] values.
    pub const fn new(gids: &'a [u32]) -> Option<Self> {
        if gids.len() > MAX_GIDS {
            return None;
        }
        Some(Gids {
            repr: GidsRepr::Host(gids),
        })
    }

    /// Decodes the counted array at the reader's position. The count is checked against
    /// [`MAX_GIDS`] and against the bytes present before the gids are taken.
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        let n = r.array_len(4, MAX_GIDS as u32)? as usize;
        Ok(Gids {
            repr: GidsRepr::Wire(r.take(n * 4)?),
        })
    }

    /// Number of gids.
    pub const fn len(&self) -> usize {
        match self.repr {
            GidsRepr::Wire(b) => b.len() / 4,
            GidsRepr::Host(v) => v.len(),
        }
    }

    /// `true` when the list holds no gid.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th gid.
    pub fn get(&self, i: usize) -> Option<u32> {
        match self.repr {
            GidsRepr::Wire(b) => {
                let at = i.checked_mul(4)?;
                let w = b.get(at..at.checked_add(4)?)?;
                Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            }
            GidsRepr::Host(v) => v.get(i).copied(),
        }
    }

    /// The gids in array order.
    pub fn iter(&self) -> GidsIter<'a> {
        GidsIter { gids: *self, i: 0 }
    }

    fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.len() as u32)?;
        self.iter().try_for_each(|g| w.put_u32(g))
    }
}

impl Default for Gids<'_> {
    fn default() -> Self {
        Gids::EMPTY
    }
}

impl PartialEq for Gids<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Gids<'_> {}

impl Hash for Gids<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.len());
        self.iter().for_each(|g| g.hash(state));
    }
}

impl fmt::Debug for Gids<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for Gids<'a> {
    type Item = u32;
    type IntoIter = GidsIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over the values of a [`Gids`] list.
#[derive(Clone, Debug)]
pub struct GidsIter<'a> {
    gids: Gids<'a>,
    i: usize,
}

impl Iterator for GidsIter<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        let g = self.gids.get(self.i)?;
        self.i += 1;
        Some(g)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.gids.len() - self.i;
        (n, Some(n))
    }
}

impl ExactSizeIterator for GidsIter<'_> {}

impl FusedIterator for GidsIter<'_> {}

/// The body of an AUTH_SYS credential, `authsys_parms` (RFC 5531 appendix A), borrowed from
/// the receive buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AuthSys<'a> {
    /// `stamp`: an arbitrary ID the caller's machine may generate.
    pub stamp: u32,
    /// `machinename`: the caller's host name, at most [`MAX_MACHINENAME_LEN`] bytes (ASCII by
    /// convention, not checked).
    pub machinename: &'a [u8],
    /// `uid`: the caller's effective user ID.
    pub uid: u32,
    /// `gid`: the caller's effective group ID.
    pub gid: u32,
    /// `gids`: the groups the caller is a member of.
    pub gids: Gids<'a>,
}

impl<'a> AuthSys<'a> {
    /// Decodes `authsys_parms` at the reader's position, consuming them.
    ///
    /// A `machinename` over [`MAX_MACHINENAME_LEN`] bytes or a `gids` count over [`MAX_GIDS`]
    /// (or over what the bytes present can hold) is [`DecodeError::CountTooLarge`].
    pub fn decode(r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        Ok(AuthSys {
            stamp: r.u32()?,
            machinename: r.string(MAX_MACHINENAME_LEN as u32)?,
            uid: r.u32()?,
            gid: r.u32()?,
            gids: Gids::decode(r)?,
        })
    }

    /// Decodes the body of an AUTH_SYS `opaque_auth`, which must hold exactly one
    /// `authsys_parms`. Offsets in errors count from the start of `body`.
    ///
    /// Bytes left over after the structure are an error: [`DecodeError::CountTooLarge`] with
    /// `count` the body's length and `max` the bytes the structure used, at the offset where
    /// the surplus starts (the opaque's length claims more than its content).
    pub fn parse(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = XdrReader::new(body);
        let sys = Self::decode(&mut r)?;
        if r.remaining() != 0 {
            return Err(DecodeError::CountTooLarge {
                offset: r.position(),
                count: u32::try_from(body.len()).unwrap_or(u32::MAX),
                max: r.position() as u32,
            });
        }
        Ok(sys)
    }

    /// Exact encoded size: stamp, the padded machine name with its length, uid, gid and the
    /// counted gids.
    pub const fn encoded_len(&self) -> usize {
        4 + 4 + pad4(self.machinename.len()) + 4 + 4 + 4 + 4 * self.gids.len()
    }

    /// Encodes `authsys_parms` at the start of `out` and returns its length; the bytes are the
    /// body of an AUTH_SYS [`OpaqueAuth`].
    ///
    /// A machine name over [`MAX_MACHINENAME_LEN`] bytes is [`EncodeError::TooLong`]; a buffer
    /// shorter than [`AuthSys::encoded_len`] is [`EncodeError::BufferTooSmall`] and nothing is
    /// written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if self.machinename.len() > MAX_MACHINENAME_LEN {
            return Err(EncodeError::TooLong {
                len: self.machinename.len(),
                max: MAX_MACHINENAME_LEN,
            });
        }
        encode_exact(out, self.encoded_len(), |w| {
            w.put_u32(self.stamp)?;
            w.put_string(self.machinename, MAX_MACHINENAME_LEN as u32)?;
            w.put_u32(self.uid)?;
            w.put_u32(self.gid)?;
            self.gids.put(w)
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Call
// ---------------------------------------------------------------------------------------------

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
    fn parse_reference(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (mut r, xid, mtype) = read_prefix(buf)?;
        if mtype != CALL {
            return Err(bad_msg_type(mtype));
        }
        let call = Self::decode_body(xid, &mut r)?;
        Ok((call, r.position()))
    }

    /// Decodes `call_body` (RFC 5531 §9) after the prefix.
    fn decode_body(xid: u32, r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
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

// ---------------------------------------------------------------------------------------------
// Reply
// ---------------------------------------------------------------------------------------------

/// The `reply_data` of an accepted reply: `accept_stat` and its arm (RFC 5531 §9,
/// `accepted_reply`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcceptStat {
    /// SUCCESS (0): the procedure ran; its results follow the header.
    Success,
    /// PROG_UNAVAIL (1): the program is not exported.
    ProgUnavail,
    /// PROG_MISMATCH (2): the program version is not supported.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL (3): the program does not support the procedure.
    ProcUnavail,
    /// GARBAGE_ARGS (4): the arguments could not be decoded.
    GarbageArgs,
    /// SYSTEM_ERR (5): an error on the server such as a memory allocation failure.
    SystemErr,
}

impl AcceptStat {
    /// The `accept_stat` wire value.
    pub const fn code(self) -> u32 {
        match self {
            AcceptStat::Success => 0,
            AcceptStat::ProgUnavail => 1,
            AcceptStat::ProgMismatch { .. } => 2,
            AcceptStat::ProcUnavail => 3,
            AcceptStat::GarbageArgs => 4,
            AcceptStat::SystemErr => 5,
        }
    }

    /// The name RFC 5531 §9 gives the status, e.g. `"PROG_MISMATCH"`.
    pub const fn name(self) -> &'static str {
        match self {
            AcceptStat::Success => "SUCCESS",
            AcceptStat::ProgUnavail => "PROG_UNAVAIL",
            AcceptStat::ProgMismatch { .. } => "PROG_MISMATCH",
            AcceptStat::ProcUnavail => "PROC_UNAVAIL",
            AcceptStat::GarbageArgs => "GARBAGE_ARGS",
            AcceptStat::SystemErr => "SYSTEM_ERR",
        }
    }

    /// Encoded size: the status word, plus `mismatch_info` for PROG_MISMATCH.
    const fn encoded_len(self) -> usize {
        match self {
            AcceptStat::ProgMismatch { .. } => 12,
            _ => 4,
        }
    }

    fn decode(r: &mut XdrReader<'_>) -> Result<Self, DecodeError> {
        let offset = r.position();
        Ok(match r.u32()? {
            0 => AcceptStat::Success,
            1 => AcceptStat::ProgUnavail,
            2 => AcceptStat::ProgMismatch {
                low: r.u32()?,
                high: r.u32()?,
            },
            3 => AcceptStat::ProcUnavail,
            4 => AcceptStat::GarbageArgs,
            5 => AcceptStat::SystemErr,
            value => return Err(DecodeError::InvalidDiscriminant { offset, value }),
        })
    }

    fn put(self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.code())?;
        if let AcceptStat::ProgMismatch { low, high } = self {
            w.put_u32(low)?;
            w.put_u32(high)?;
        }
        Ok(())
    }
}

/// Why authentication failed, `auth_stat` (RFC 5531 §9).
///
/// A newtype rather than an enum: a reply carrying a value this crate does not name still
/// decodes, and [`AuthStat::name`] returns `None` for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AuthStat(pub u32);

impl AuthStat {
    /// AUTH_OK (0): success.
    pub const AUTH_OK: AuthStat = AuthStat(0);
    /// AUTH_BADCRED (1): bad credential (seal broken).
    pub const AUTH_BADCRED: AuthStat = AuthStat(1);
    /// AUTH_REJECTEDCRED (2): the client must begin a new session.
    pub const AUTH_REJECTEDCRED: AuthStat = AuthStat(2);
    /// AUTH_BADVERF (3): bad verifier (seal broken).
    pub const AUTH_BADVERF: AuthStat = AuthStat(3);
    /// AUTH_REJECTEDVERF (4): verifier expired or replayed.
    pub const AUTH_REJECTEDVERF: AuthStat = AuthStat(4);
    /// AUTH_TOOWEAK (5): rejected for security reasons.
    pub const AUTH_TOOWEAK: AuthStat = AuthStat(5);
    /// AUTH_INVALIDRESP (6): bogus response verifier (a client-side failure).
    pub const AUTH_INVALIDRESP: AuthStat = AuthStat(6);
    /// AUTH_FAILED (7): reason unknown (a client-side failure).
    pub const AUTH_FAILED: AuthStat = AuthStat(7);
    /// AUTH_KERB_GENERIC (8): Kerberos generic error (deprecated, RFC 2695).
    pub const AUTH_KERB_GENERIC: AuthStat = AuthStat(8);
    /// AUTH_TIMEEXPIRE (9): time of credential expired (deprecated, RFC 2695).
    pub const AUTH_TIMEEXPIRE: AuthStat = AuthStat(9);
    /// AUTH_TKT_FILE (10): problem with ticket file (deprecated, RFC 2695).
    pub const AUTH_TKT_FILE: AuthStat = AuthStat(10);
    /// AUTH_DECODE (11): cannot decode authenticator (deprecated, RFC 2695).
    pub const AUTH_DECODE: AuthStat = AuthStat(11);
    /// AUTH_NET_ADDR (12): wrong net address in ticket (deprecated, RFC 2695).
    pub const AUTH_NET_ADDR: AuthStat = AuthStat(12);
    /// RPCSEC_GSS_CREDPROBLEM (13): no credentials for user (RFC 2203).
    pub const RPCSEC_GSS_CREDPROBLEM: AuthStat = AuthStat(13);
    /// RPCSEC_GSS_CTXPROBLEM (14): problem with context (RFC 2203).
    pub const RPCSEC_GSS_CTXPROBLEM: AuthStat = AuthStat(14);

    /// The name RFC 5531 §9 gives the value, e.g. `"AUTH_BADCRED"`, or `None` for a value it
    /// does not define.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "AUTH_OK",
            1 => "AUTH_BADCRED",
            2 => "AUTH_REJECTEDCRED",
            3 => "AUTH_BADVERF",
            4 => "AUTH_REJECTEDVERF",
            5 => "AUTH_TOOWEAK",
            6 => "AUTH_INVALIDRESP",
            7 => "AUTH_FAILED",
            8 => "AUTH_KERB_GENERIC",
            9 => "AUTH_TIMEEXPIRE",
            10 => "AUTH_TKT_FILE",
            11 => "AUTH_DECODE",
            12 => "AUTH_NET_ADDR",
            13 => "RPCSEC_GSS_CREDPROBLEM",
            14 => "RPCSEC_GSS_CTXPROBLEM",
            _ => return None,
        })
    }
}

/// The body of a denied reply, `rejected_reply` (RFC 5531 §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectedReply {
    /// RPC_MISMATCH (0): the RPC version is not supported; the inclusive range supported.
    RpcMismatch {
        /// Lowest RPC version supported.
        low: u32,
        /// Highest RPC version supported.
        high: u32,
    },
    /// AUTH_ERROR (1): the server refuses to authenticate the caller.
    AuthError(AuthStat),
}

impl RejectedReply {
    /// The `reject_stat` wire value.
    pub const fn code(self) -> u32 {
        match self {
            RejectedReply::RpcMismatch { .. } => 0,
            RejectedReply::AuthError(_) => 1,
        }
    }

    /// The name RFC 5531 §9 gives the `reject_stat`: `"RPC_MISMATCH"` or `"AUTH_ERROR"`.
    pub const fn name(self) -> &'static str {
        match self {
            RejectedReply::RpcMismatch { .. } => "RPC_MISMATCH",
            RejectedReply::AuthError(_) => "AUTH_ERROR",
        }
    }

    /// Encoded size: the status word and its arm.
    const fn encoded_len(self) -> usize {
        match self {
            RejectedReply::RpcMismatch { .. } => 12,
            RejectedReply::AuthError(_) => 8,
        }
    }

    fn decode(r: &mut XdrReader<'_>) -> Result<Self, DecodeError> {
        let offset = r.position();
        Ok(match r.u32()? {
            0 => RejectedReply::RpcMismatch {
                low: r.u32()?,
                high: r.u32()?,
            },
            1 => RejectedReply::AuthError(AuthStat(r.u32()?)),
            value => return Err(DecodeError::InvalidDiscriminant { offset, value }),
        })
    }

    fn put(self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.code())?;
        match self {
            RejectedReply::RpcMismatch { low, high } => {
                w.put_u32(low)?;
                w.put_u32(high)
            }
            RejectedReply::AuthError(stat) => w.put_u32(stat.0),
        }
    }
}

/// The body of a REPLY message, `reply_body` switched on `reply_stat` (RFC 5531 §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyBody<'a> {
    /// MSG_ACCEPTED (0): the call was authenticated; `accepted_reply`.
    Accepted {
        /// `verf`: the server's verifier.
        verf: OpaqueAuth<'a>,
        /// `reply_data`: the outcome.
        stat: AcceptStat,
    },
    /// MSG_DENIED (1): the call was rejected; `rejected_reply`.
    Denied(RejectedReply),
}

impl ReplyBody<'_> {
    /// The `reply_stat` wire value.
    pub const fn code(&self) -> u32 {
        match self {
            ReplyBody::Accepted { .. } => MSG_ACCEPTED,
            ReplyBody::Denied(_) => MSG_DENIED,
        }
    }

    /// The name RFC 5531 §9 gives the `reply_stat`: `"MSG_ACCEPTED"` or `"MSG_DENIED"`.
    pub const fn name(&self) -> &'static str {
        match self {
            ReplyBody::Accepted { .. } => "MSG_ACCEPTED",
            ReplyBody::Denied(_) => "MSG_DENIED",
        }
    }
}

/// The header of a REPLY message: `xid`, `mtype` = REPLY and `reply_body` (RFC 5531 §9).
///
/// For an accepted SUCCESS reply the procedure's results follow the header;
/// [`ReplyHeader::parse`] returns where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplyHeader<'a> {
    /// `xid`: the transaction ID of the call answered.
    pub xid: u32,
    /// The reply's status and its arm.
    pub body: ReplyBody<'a>,
}

impl<'a> ReplyHeader<'a> {
    /// An accepted reply with the given verifier and outcome.
    pub const fn accepted(xid: u32, verf: OpaqueAuth<'a>, stat: AcceptStat) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Accepted { verf, stat },
        }
    }

    /// Decodes a reply header at the start of `buf` and returns it with the header's length,
    /// the offset at which a SUCCESS reply's results start (for the other statuses nothing
    /// follows).
    ///
    /// An `mtype` other than REPLY, and unknown `reply_stat`, `accept_stat` and `reject_stat`
    /// values, are [`DecodeError::InvalidDiscriminant`]. An unknown `auth_stat` decodes.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        match Self::parse_direct(buf) {
            Some(parsed) => Ok(parsed),
            None => Self::parse_reference(buf),
        }
    }

    /// [`ReplyHeader::parse`] by direct loads (RFC 5531 §9 `reply_body`; the verifier body at
    /// most 400 bytes, §8.2): `Some` exactly when the reference decoder succeeds, with the
    /// same result; `None` for anything it would reject.
    #[inline]
    pub(crate) fn parse_direct(buf: &'a [u8]) -> Option<(Self, usize)> {
        // xid, mtype, reply_stat, then verf.flavor and verf.length (accepted) or reject_stat
        // and its first word (denied).
        let w: &[u8; 20] = fixed_at(buf, 0)?;
        if be32_at(w, 4) != REPLY {
            return None;
        }
        let (body, end) = match be32_at(w, 8) {
            MSG_ACCEPTED => {
                let (verf, at) = auth_body_at(buf, 20, be32_at(w, 16))?;
                let verf = OpaqueAuth {
                    flavor: be32_at(w, 12),
                    body: verf,
                };
                let (stat, end) = match be32_at(fixed_at::<4>(buf, at)?, 0) {
                    0 => (AcceptStat::Success, at + 4),
                    1 => (AcceptStat::ProgUnavail, at + 4),
                    2 => {
                        let m: &[u8; 8] = fixed_at(buf, at + 4)?;
                        let (low, high) = (be32_at(m, 0), be32_at(m, 4));
                        (AcceptStat::ProgMismatch { low, high }, at + 12)
                    }
                    3 => (AcceptStat::ProcUnavail, at + 4),
                    4 => (AcceptStat::GarbageArgs, at + 4),
                    5 => (AcceptStat::SystemErr, at + 4),
                    _ => return None,
                };
                (ReplyBody::Accepted { verf, stat }, end)
            }
            MSG_DENIED => match be32_at(w, 12) {
                0 => {
                    let high = be32_at(fixed_at::<4>(buf, 20)?, 0);
                    let low = be32_at(w, 16);
                    (
                        ReplyBody::Denied(RejectedReply::RpcMismatch { low, high }),
                        24,
                    )
                }
                1 => (
                    ReplyBody::Denied(RejectedReply::AuthError(AuthStat(be32_at(w, 16)))),
                    20,
                ),
                _ => return None,
            },
            _ => return None,
        };
        Some((
            ReplyHeader {
                xid: be32_at(w, 0),
                body,
            },
            end,
        ))
    }

    /// The cursor-based decoder: the reference the direct one agrees with, and the source
    /// of the typed error for input the direct one rejects.
    #[cold]
    #[inline(never)]
    fn parse_reference(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (mut r, xid, mtype) = read_prefix(buf)?;
        if mtype != REPLY {
            return Err(bad_msg_type(mtype));
        }
        let reply = Self::decode_body(xid, &mut r)?;
        Ok((reply, r.position()))
    }

    /// Decodes `reply_body` (RFC 5531 §9) after the prefix.
    fn decode_body(xid: u32, r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        let offset = r.position();
        let body = match r.u32()? {
            MSG_ACCEPTED => ReplyBody::Accepted {
                verf: OpaqueAuth::decode(r)?,
                stat: AcceptStat::decode(r)?,
            },
            MSG_DENIED => ReplyBody::Denied(RejectedReply::decode(r)?),
            value => return Err(DecodeError::InvalidDiscriminant { offset, value }),
        };
        Ok(ReplyHeader { xid, body })
    }

    /// The outcome of an accepted reply, `None` for a denied one.
    pub const fn accept_stat(&self) -> Option<AcceptStat> {
        match self.body {
            ReplyBody::Accepted { stat, .. } => Some(stat),
            ReplyBody::Denied(_) => None,
        }
    }

    /// The server's verifier of an accepted reply, `None` for a denied one.
    pub const fn verf(&self) -> Option<OpaqueAuth<'a>> {
        match self.body {
            ReplyBody::Accepted { verf, .. } => Some(verf),
            ReplyBody::Denied(_) => None,
        }
    }

    /// `true` for MSG_ACCEPTED with SUCCESS: results follow the header.
    pub const fn is_success(&self) -> bool {
        matches!(
            self.body,
            ReplyBody::Accepted {
                stat: AcceptStat::Success,
                ..
            }
        )
    }

    /// Exact encoded size of the header (a SUCCESS reply's results not included).
    pub const fn encoded_len(&self) -> usize {
        MSG_PREFIX_LEN
            + 4
            + match self.body {
                ReplyBody::Accepted { verf, stat } => verf.encoded_len() + stat.encoded_len(),
                ReplyBody::Denied(rej) => rej.encoded_len(),
            }
    }

    /// Encodes the header at the start of `out` and returns its length; for SUCCESS the caller
    /// writes the results after it.
    ///
    /// A verifier body over [`MAX_AUTH_BYTES`] is [`EncodeError::TooLong`]; a buffer shorter
    /// than [`ReplyHeader::encoded_len`] is [`EncodeError::BufferTooSmall`] and nothing is
    /// written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if let ReplyBody::Accepted { verf, .. } = &self.body {
            verf.check()?;
        }
        encode_exact(out, self.encoded_len(), |w| {
            w.put_u32(self.xid)?;
            w.put_u32(REPLY)?;
            w.put_u32(self.body.code())?;
            match self.body {
                ReplyBody::Accepted { verf, stat } => {
                    verf.put(w)?;
                    stat.put(w)
                }
                ReplyBody::Denied(rej) => rej.put(w),
            }
        })
    }
}

/// Replies a server sends without a verifier of its own: accepted replies carry the AUTH_NONE
/// verifier (RFC 5531 §10.1).
impl ReplyHeader<'static> {
    /// MSG_ACCEPTED / SUCCESS: the results follow.
    pub const fn accepted_success(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::Success)
    }

    /// MSG_ACCEPTED / PROG_UNAVAIL.
    pub const fn prog_unavail(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::ProgUnavail)
    }

    /// MSG_ACCEPTED / PROG_MISMATCH with the inclusive range of program versions supported.
    pub const fn prog_mismatch(xid: u32, low: u32, high: u32) -> Self {
        Self::accepted(
            xid,
            OpaqueAuth::NONE,
            AcceptStat::ProgMismatch { low, high },
        )
    }

    /// MSG_ACCEPTED / PROC_UNAVAIL.
    pub const fn proc_unavail(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::ProcUnavail)
    }

    /// MSG_ACCEPTED / GARBAGE_ARGS.
    pub const fn garbage_args(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::GarbageArgs)
    }

    /// MSG_ACCEPTED / SYSTEM_ERR.
    pub const fn system_err(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::SystemErr)
    }

    /// MSG_DENIED with the given `rejected_reply`.
    pub const fn denied(xid: u32, rej: RejectedReply) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Denied(rej),
        }
    }

    /// MSG_DENIED / RPC_MISMATCH with the inclusive range of RPC versions supported (2 to 2
    /// for this crate, [`RPC_VERSION`]).
    pub const fn rpc_mismatch(xid: u32, low: u32, high: u32) -> Self {
        Self::denied(xid, RejectedReply::RpcMismatch { low, high })
    }

    /// MSG_DENIED / AUTH_ERROR with the given `auth_stat`.
    pub const fn auth_error(xid: u32, stat: AuthStat) -> Self {
        Self::denied(xid, RejectedReply::AuthError(stat))
    }
}

// ---------------------------------------------------------------------------------------------
// Message
// ---------------------------------------------------------------------------------------------

/// An RPC message header, `rpc_msg` switched on `msg_type` (RFC 5531 §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RpcMessage<'a> {
    /// A CALL.
    Call(CallHeader<'a>),
    /// A REPLY.
    Reply(ReplyHeader<'a>),
}

impl<'a> RpcMessage<'a> {
    /// Decodes the header of a call or a reply at the start of `buf` and returns it with the
    /// header's length (where the arguments or results start).
    ///
    /// An unknown `msg_type` is [`DecodeError::InvalidDiscriminant`] at offset 4.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let direct = match fixed_at::<4>(buf, 4).map(|m| be32_at(m, 0)) {
            Some(CALL) => CallHeader::parse_direct(buf).map(|(c, n)| (RpcMessage::Call(c), n)),
            Some(REPLY) => ReplyHeader::parse_direct(buf).map(|(r, n)| (RpcMessage::Reply(r), n)),
            _ => None,
        };
        match direct {
            Some(parsed) => Ok(parsed),
            None => Self::parse_reference(buf),
        }
    }

    /// The cursor-based decoder: the reference the direct ones agree with, and the source
    /// of the typed error for input they reject.
    #[cold]
    #[inline(never)]
    fn parse_reference(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (mut r, xid, mtype) = read_prefix(buf)?;
        let msg = match mtype {
            CALL => RpcMessage::Call(CallHeader::decode_body(xid, &mut r)?),
            REPLY => RpcMessage::Reply(ReplyHeader::decode_body(xid, &mut r)?),
            value => return Err(bad_msg_type(value)),
        };
        Ok((msg, r.position()))
    }

    /// The `xid` of a message, read from its first four bytes without decoding the rest;
    /// `None` when `buf` is shorter than four bytes.
    pub fn peek_xid(buf: &[u8]) -> Option<u32> {
        XdrReader::new(buf).u32().ok()
    }

    /// The `mtype` word of a message (bytes 4 to 8) as received, without checking it; `None`
    /// when `buf` is shorter than eight bytes.
    pub fn peek_msg_type(buf: &[u8]) -> Option<u32> {
        XdrReader::at(buf, 4).u32().ok()
    }

    /// The transaction ID.
    pub const fn xid(&self) -> u32 {
        match self {
            RpcMessage::Call(c) => c.xid,
            RpcMessage::Reply(r) => r.xid,
        }
    }

    /// The `msg_type` wire value: [`CALL`] or [`REPLY`].
    pub const fn msg_type(&self) -> u32 {
        match self {
            RpcMessage::Call(_) => CALL,
            RpcMessage::Reply(_) => REPLY,
        }
    }

    /// The name RFC 5531 §9 gives the `msg_type`: `"CALL"` or `"REPLY"`.
    pub const fn name(&self) -> &'static str {
        match self {
            RpcMessage::Call(_) => "CALL",
            RpcMessage::Reply(_) => "REPLY",
        }
    }

    /// Exact encoded size of the header.
    pub const fn encoded_len(&self) -> usize {
        match self {
            RpcMessage::Call(c) => c.encoded_len(),
            RpcMessage::Reply(r) => r.encoded_len(),
        }
    }

    /// Encodes the header at the start of `out` and returns its length (see
    /// [`CallHeader::encode`] and [`ReplyHeader::encode`]).
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        match self {
            RpcMessage::Call(c) => c.encode(out),
            RpcMessage::Reply(r) => r.encode(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::hash_map::DefaultHasher;

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

    #[test]
    fn null_call_is_byte_exact() {
        let call = CallHeader::new(
            0x1234_5678,
            100_003,
            3,
            0,
            OpaqueAuth::NONE,
            OpaqueAuth::NONE,
        );
        let expected = words(&NULL_CALL);
        assert_eq!(call.encoded_len(), 40);
        assert_eq!(call.encoded_len(), MIN_CALL_LEN);
        assert_eq!(encode_vec(|b| call.encode(b)), expected);

        let (parsed, len) = CallHeader::parse(&expected).unwrap();
        assert_eq!(parsed, call);
        assert_eq!(len, 40);
        assert!(parsed.is_rpc_v2());
        assert_eq!(parsed.cred.flavor_name(), Some("AUTH_NONE"));
        assert_eq!(parsed.cred.auth_sys(), None);

        let (msg, len) = RpcMessage::parse(&expected).unwrap();
        assert_eq!(msg, RpcMessage::Call(call));
        assert_eq!(len, 40);
        assert_eq!(msg.name(), "CALL");
        assert_eq!(msg.msg_type(), CALL);
        assert_eq!(msg.xid(), 0x1234_5678);
        assert_eq!(msg.encoded_len(), 40);
        assert_eq!(encode_vec(|b| msg.encode(b)), expected);
    }

    #[test]
    fn auth_sys_call_is_byte_exact() {
        let sys = sys_cred();
        let body = encode_vec(|b| sys.encode(b));
        assert_eq!(body, words(&SYS_BODY));
        assert_eq!(sys.encoded_len(), 36);

        let cred = OpaqueAuth::new(AUTH_SYS, &body);
        let call = CallHeader::new(0xdead_beef, 100_003, 3, 1, cred, OpaqueAuth::NONE);
        let expected = words(&SYS_CALL);
        assert_eq!(call.encoded_len(), 76);
        assert_eq!(encode_vec(|b| call.encode(b)), expected);

        // The arguments (an opaque file handle) follow the header.
        let mut msg = expected.clone();
        msg.extend_from_slice(&words(&[8, 0x0102_0304, 0x0506_0708]));
        let (parsed, len) = CallHeader::parse(&msg).unwrap();
        assert_eq!(len, 76);
        assert_eq!(parsed, call);
        assert_eq!(&msg[len..], &words(&[8, 0x0102_0304, 0x0506_0708])[..]);
        assert_eq!(parsed.cred.flavor, AUTH_SYS);
        assert_eq!(parsed.cred.body.len(), 36);
        assert_eq!(parsed.cred.flavor_name(), Some("AUTH_SYS"));

        let got = parsed.cred.auth_sys().unwrap().unwrap();
        assert_eq!(got, sys);
        assert_eq!(got.stamp, 0x6a3b_1c2d);
        assert_eq!(got.machinename, b"client");
        assert_eq!(got.uid, 1000);
        assert_eq!(got.gid, 100);
        assert_eq!(got.gids.len(), 2);
        assert!(!got.gids.is_empty());
        assert_eq!(got.gids.get(0), Some(10));
        assert_eq!(got.gids.get(1), Some(100));
        assert_eq!(got.gids.get(2), None);
        assert_eq!(got.gids.get(usize::MAX), None);
        let mut it = got.gids.iter();
        assert_eq!(it.len(), 2);
        assert_eq!(it.next(), Some(10));
        assert_eq!(it.len(), 1);
        assert_eq!(it.next(), Some(100));
        assert_eq!(it.next(), None);
        assert_eq!(it.next(), None);
        let mut sum = 0;
        for g in got.gids {
            sum += g;
        }
        assert_eq!(sum, 110);

        let (m, len) = RpcMessage::parse(&msg).unwrap();
        assert_eq!((m, len), (RpcMessage::Call(call), 76));
    }

    #[test]
    fn every_reply_status_is_byte_exact() {
        for (reply, ws, reply_name, name) in reply_vectors() {
            let expected = words(&ws);
            assert_eq!(reply.encoded_len(), expected.len(), "{name}");
            assert_eq!(encode_vec(|b| reply.encode(b)), expected, "{name}");
            let (parsed, len) = ReplyHeader::parse(&expected).unwrap();
            assert_eq!(parsed, reply, "{name}");
            assert_eq!(len, expected.len(), "{name}");
            assert_eq!(parsed.body.name(), reply_name);
            assert_eq!(parsed.body.code(), ws[2]);
            assert_eq!(stat_name(&parsed), name);
            let (msg, len) = RpcMessage::parse(&expected).unwrap();
            assert_eq!(msg, RpcMessage::Reply(reply));
            assert_eq!(len, expected.len());
            assert_eq!(msg.name(), "REPLY");
            assert_eq!(msg.msg_type(), REPLY);
            assert_eq!(msg.xid(), 7);
        }
    }

    #[test]
    fn reply_accessors_and_minimum_length() {
        let ok = ReplyHeader::accepted_success(1);
        assert!(ok.is_success());
        assert_eq!(ok.accept_stat(), Some(AcceptStat::Success));
        assert_eq!(ok.verf(), Some(OpaqueAuth::NONE));
        let bad = ReplyHeader::garbage_args(1);
        assert!(!bad.is_success());
        assert_eq!(bad.accept_stat(), Some(AcceptStat::GarbageArgs));
        let denied = ReplyHeader::auth_error(1, AuthStat::AUTH_TOOWEAK);
        assert!(!denied.is_success());
        assert_eq!(denied.accept_stat(), None);
        assert_eq!(denied.verf(), None);
        assert_eq!(denied.encoded_len(), MIN_REPLY_LEN);
        let shortest = reply_vectors()
            .iter()
            .map(|(r, ..)| r.encoded_len())
            .min()
            .unwrap();
        assert_eq!(shortest, MIN_REPLY_LEN);
    }

    #[test]
    fn success_reply_with_gss_verifier_reports_where_results_start() {
        // A 5-byte verifier body is padded with three zero bytes.
        let verf = OpaqueAuth::new(RPCSEC_GSS, b"\x01\x02\x03\x04\x05");
        let reply = ReplyHeader::accepted(0x0a0b_0c0d, verf, AcceptStat::Success);
        let expected = words(&[
            0x0a0b_0c0d, // xid
            1,           // REPLY
            0,           // MSG_ACCEPTED
            6,           // verf.flavor RPCSEC_GSS
            5,           // verf.body length
            0x0102_0304,
            0x0500_0000,
            0, // SUCCESS
        ]);
        assert_eq!(reply.encoded_len(), 32);
        assert_eq!(encode_vec(|b| reply.encode(b)), expected);
        let mut msg = expected.clone();
        msg.extend_from_slice(&words(&[0xfeed_f00d]));
        let (parsed, len) = ReplyHeader::parse(&msg).unwrap();
        assert_eq!(parsed, reply);
        assert_eq!(len, 32);
        assert_eq!(&msg[len..], &[0xfe, 0xed, 0xf0, 0x0d]);
        assert_eq!(parsed.verf().unwrap().body, b"\x01\x02\x03\x04\x05");
        assert_eq!(parsed.verf().unwrap().flavor_name(), Some("RPCSEC_GSS"));
    }

    #[test]
    fn names_and_codes_follow_rfc_5531() {
        let accept = [
            (AcceptStat::Success, 0, "SUCCESS"),
            (AcceptStat::ProgUnavail, 1, "PROG_UNAVAIL"),
            (
                AcceptStat::ProgMismatch { low: 1, high: 2 },
                2,
                "PROG_MISMATCH",
            ),
            (AcceptStat::ProcUnavail, 3, "PROC_UNAVAIL"),
            (AcceptStat::GarbageArgs, 4, "GARBAGE_ARGS"),
            (AcceptStat::SystemErr, 5, "SYSTEM_ERR"),
        ];
        for (s, code, name) in accept {
            assert_eq!(s.code(), code);
            assert_eq!(s.name(), name);
        }
        let rpc_mismatch = RejectedReply::RpcMismatch { low: 2, high: 2 };
        assert_eq!(rpc_mismatch.code(), 0);
        assert_eq!(rpc_mismatch.name(), "RPC_MISMATCH");
        let auth_error = RejectedReply::AuthError(AuthStat::AUTH_OK);
        assert_eq!(auth_error.code(), 1);
        assert_eq!(auth_error.name(), "AUTH_ERROR");

        let auth = [
            (AuthStat::AUTH_OK, 0, "AUTH_OK"),
            (AuthStat::AUTH_BADCRED, 1, "AUTH_BADCRED"),
            (AuthStat::AUTH_REJECTEDCRED, 2, "AUTH_REJECTEDCRED"),
            (AuthStat::AUTH_BADVERF, 3, "AUTH_BADVERF"),
            (AuthStat::AUTH_REJECTEDVERF, 4, "AUTH_REJECTEDVERF"),
            (AuthStat::AUTH_TOOWEAK, 5, "AUTH_TOOWEAK"),
            (AuthStat::AUTH_INVALIDRESP, 6, "AUTH_INVALIDRESP"),
            (AuthStat::AUTH_FAILED, 7, "AUTH_FAILED"),
            (AuthStat::AUTH_KERB_GENERIC, 8, "AUTH_KERB_GENERIC"),
            (AuthStat::AUTH_TIMEEXPIRE, 9, "AUTH_TIMEEXPIRE"),
            (AuthStat::AUTH_TKT_FILE, 10, "AUTH_TKT_FILE"),
            (AuthStat::AUTH_DECODE, 11, "AUTH_DECODE"),
            (AuthStat::AUTH_NET_ADDR, 12, "AUTH_NET_ADDR"),
            (
                AuthStat::RPCSEC_GSS_CREDPROBLEM,
                13,
                "RPCSEC_GSS_CREDPROBLEM",
            ),
            (AuthStat::RPCSEC_GSS_CTXPROBLEM, 14, "RPCSEC_GSS_CTXPROBLEM"),
        ];
        for (s, code, name) in auth {
            assert_eq!(s.0, code);
            assert_eq!(s.name(), Some(name));
            assert_eq!(AuthStat(code), s);
        }
        assert_eq!(AuthStat(15).name(), None);
        assert_eq!(AuthStat(u32::MAX).name(), None);

        assert_eq!(flavor_name(0), Some("AUTH_NONE"));
        assert_eq!(flavor_name(1), Some("AUTH_SYS"));
        assert_eq!(flavor_name(2), Some("AUTH_SHORT"));
        assert_eq!(flavor_name(3), Some("AUTH_DH"));
        assert_eq!(flavor_name(6), Some("RPCSEC_GSS"));
        assert_eq!(flavor_name(4), None);
        assert_eq!(flavor_name(390_003), None);
        assert_eq!(
            (AUTH_NONE, AUTH_SYS, AUTH_SHORT, AUTH_DH, RPCSEC_GSS),
            (0, 1, 2, 3, 6)
        );
        assert_eq!((CALL, REPLY, MSG_ACCEPTED, MSG_DENIED), (0, 1, 0, 1));
        assert_eq!((RPC_VERSION, MAX_AUTH_BYTES), (2, 400));
    }

    #[test]
    fn truncated_calls_fail_at_every_length() {
        for full in [words(&NULL_CALL), words(&SYS_CALL)] {
            for n in 0..full.len() {
                let cut = &full[..n];
                assert!(
                    matches!(CallHeader::parse(cut), Err(DecodeError::Truncated { .. })),
                    "call truncated to {n} bytes"
                );
                assert!(
                    matches!(RpcMessage::parse(cut), Err(DecodeError::Truncated { .. })),
                    "message truncated to {n} bytes"
                );
                assert!(ReplyHeader::parse(cut).is_err());
            }
            assert!(CallHeader::parse(&full).is_ok());
        }
        assert_eq!(
            CallHeader::parse(&[0, 0, 0]),
            Err(DecodeError::Truncated {
                offset: 0,
                needed: 4
            })
        );
        // Cut inside the AUTH_SYS body: the padded 36 bytes at offset 32 are not all there.
        assert_eq!(
            CallHeader::parse(&words(&SYS_CALL)[..40]),
            Err(DecodeError::Truncated {
                offset: 32,
                needed: 36
            })
        );
        // Cut before the verifier's length word.
        assert_eq!(
            CallHeader::parse(&words(&NULL_CALL)[..36]),
            Err(DecodeError::Truncated {
                offset: 36,
                needed: 4
            })
        );
    }

    #[test]
    fn truncated_replies_fail_at_every_length() {
        for (reply, ws, ..) in reply_vectors() {
            let full = words(&ws);
            for n in 0..full.len() {
                let cut = &full[..n];
                assert!(
                    matches!(ReplyHeader::parse(cut), Err(DecodeError::Truncated { .. })),
                    "{reply:?} truncated to {n} bytes"
                );
                assert!(
                    matches!(RpcMessage::parse(cut), Err(DecodeError::Truncated { .. })),
                    "{reply:?} truncated to {n} bytes"
                );
            }
        }
    }

    #[test]
    fn truncated_auth_sys_bodies_fail_at_every_length() {
        let body = words(&SYS_BODY);
        for n in 0..body.len() {
            let got = AuthSys::parse(&body[..n]);
            if n >= 28 {
                // The gids count (2, at offset 24) is checked against the words present.
                assert_eq!(
                    got,
                    Err(DecodeError::CountTooLarge {
                        offset: 24,
                        count: 2,
                        max: ((n - 28) / 4) as u32
                    }),
                    "body truncated to {n} bytes"
                );
            } else {
                assert!(
                    matches!(got, Err(DecodeError::Truncated { .. })),
                    "body truncated to {n} bytes"
                );
            }
        }
        assert_eq!(AuthSys::parse(&body), Ok(sys_cred()));
    }

    #[test]
    fn opaque_auth_of_401_bytes_is_rejected() {
        // Call: cred.flavor at 24, its length at 28.
        let mut call = words(&NULL_CALL[..7]);
        call.extend_from_slice(&words(&[401]));
        call.extend_from_slice(&[0u8; 404]);
        call.extend_from_slice(&words(&[0, 0]));
        let err = DecodeError::CountTooLarge {
            offset: 28,
            count: 401,
            max: 400,
        };
        assert_eq!(CallHeader::parse(&call), Err(err));
        assert_eq!(RpcMessage::parse(&call), Err(err));
        // The maximum is checked before the bytes present.
        assert_eq!(CallHeader::parse(&call[..32]), Err(err));

        // Exactly 400 bytes is fine.
        let mut call = words(&NULL_CALL[..6]);
        call.extend_from_slice(&words(&[RPCSEC_GSS, 400]));
        call.extend_from_slice(&[0x5a; 400]);
        call.extend_from_slice(&words(&[0, 0]));
        let (parsed, len) = CallHeader::parse(&call).unwrap();
        assert_eq!(len, 440);
        assert_eq!(parsed.cred.body, &[0x5a; 400][..]);

        // Reply: verf.flavor at 12, its length at 16.
        let mut reply = words(&[7, REPLY, MSG_ACCEPTED, AUTH_SHORT, 401]);
        reply.extend_from_slice(&[0u8; 404]);
        reply.extend_from_slice(&words(&[0]));
        assert_eq!(
            ReplyHeader::parse(&reply),
            Err(DecodeError::CountTooLarge {
                offset: 16,
                count: 401,
                max: 400
            })
        );

        // On its own.
        assert_eq!(
            OpaqueAuth::parse(&words(&[AUTH_DH, 401])),
            Err(DecodeError::CountTooLarge {
                offset: 4,
                count: 401,
                max: 400
            })
        );
        assert_eq!(
            OpaqueAuth::parse(&words(&[AUTH_DH, 0xffff_ffff])),
            Err(DecodeError::CountTooLarge {
                offset: 4,
                count: 0xffff_ffff,
                max: 400
            })
        );
        let bytes = words(&[AUTH_DH, 3, 0x6162_6300, 99]);
        let (auth, len) = OpaqueAuth::parse(&bytes).unwrap();
        assert_eq!(auth, OpaqueAuth::new(AUTH_DH, b"abc"));
        assert_eq!(len, 12);
        assert_eq!(auth.encoded_len(), 12);
        assert_eq!(
            encode_vec(|b| auth.encode(b)),
            words(&[AUTH_DH, 3, 0x6162_6300])
        );
    }

    #[test]
    fn gids_count_over_16_is_rejected() {
        let head = &SYS_BODY[..6]; // stamp, name, uid, gid: the count is at offset 24.
        let mut body = words(head);
        body.extend_from_slice(&words(&[17]));
        body.extend_from_slice(&words(&[5; 17]));
        assert_eq!(
            AuthSys::parse(&body),
            Err(DecodeError::CountTooLarge {
                offset: 24,
                count: 17,
                max: 16
            })
        );

        let mut body = words(head);
        body.extend_from_slice(&words(&[0xffff_ffff, 1, 2]));
        assert_eq!(
            AuthSys::parse(&body),
            Err(DecodeError::CountTooLarge {
                offset: 24,
                count: 0xffff_ffff,
                max: 2
            })
        );

        // 16 is the maximum.
        let mut body = words(head);
        body.extend_from_slice(&words(&[16]));
        body.extend_from_slice(&words(&[9; 16]));
        let sys = AuthSys::parse(&body).unwrap();
        assert_eq!(sys.gids.len(), 16);
        assert!(sys.gids.iter().all(|g| g == 9));

        // Through a whole call.
        let mut cred = words(head);
        cred.extend_from_slice(&words(&[17]));
        cred.extend_from_slice(&words(&[5; 17]));
        let call = CallHeader::new(
            1,
            2,
            3,
            4,
            OpaqueAuth::new(AUTH_SYS, &cred),
            OpaqueAuth::NONE,
        );
        let bytes = encode_vec(|b| call.encode(b));
        let (parsed, _) = CallHeader::parse(&bytes).unwrap();
        assert_eq!(
            parsed.cred.auth_sys(),
            Some(Err(DecodeError::CountTooLarge {
                offset: 24,
                count: 17,
                max: 16
            }))
        );
    }

    #[test]
    fn machinename_over_255_is_rejected() {
        let mut body = words(&[1, 256]);
        body.extend_from_slice(&[b'a'; 256]);
        body.extend_from_slice(&words(&[0, 0, 0]));
        assert_eq!(
            AuthSys::parse(&body),
            Err(DecodeError::CountTooLarge {
                offset: 4,
                count: 256,
                max: 255
            })
        );
        let mut body = words(&[1, 255]);
        body.extend_from_slice(&[b'a'; 256]);
        body.extend_from_slice(&words(&[0, 0, 0]));
        let sys = AuthSys::parse(&body).unwrap();
        assert_eq!(sys.machinename, &[b'a'; 255][..]);
        assert_eq!(sys.encoded_len(), body.len());
    }

    #[test]
    fn auth_sys_trailing_bytes_are_rejected() {
        let mut body = words(&SYS_BODY);
        body.extend_from_slice(&words(&[0]));
        assert_eq!(
            AuthSys::parse(&body),
            Err(DecodeError::CountTooLarge {
                offset: 36,
                count: 40,
                max: 36
            })
        );
        let mut body = words(&SYS_BODY);
        body.push(0);
        assert_eq!(
            AuthSys::parse(&body),
            Err(DecodeError::CountTooLarge {
                offset: 36,
                count: 37,
                max: 36
            })
        );
        // `decode` on a reader stops after the structure.
        let mut r = XdrReader::new(&body);
        assert_eq!(AuthSys::decode(&mut r), Ok(sys_cred()));
        assert_eq!(r.position(), 36);
    }

    #[test]
    fn unknown_discriminants_are_rejected() {
        let mut msg = words(&NULL_CALL);
        msg[7] = 2; // mtype 2
        let err = DecodeError::InvalidDiscriminant {
            offset: 4,
            value: 2,
        };
        assert_eq!(RpcMessage::parse(&msg), Err(err));
        assert_eq!(CallHeader::parse(&msg), Err(err));
        assert_eq!(ReplyHeader::parse(&msg), Err(err));

        // A reply is not a call and vice versa.
        assert_eq!(
            CallHeader::parse(&words(&[7, 1, 0, 0, 0, 0])),
            Err(DecodeError::InvalidDiscriminant {
                offset: 4,
                value: 1
            })
        );
        assert_eq!(
            ReplyHeader::parse(&words(&NULL_CALL)),
            Err(DecodeError::InvalidDiscriminant {
                offset: 4,
                value: 0
            })
        );

        // reply_stat at 8.
        let reply = words(&[7, 1, 2, 0, 0, 0]);
        let err = DecodeError::InvalidDiscriminant {
            offset: 8,
            value: 2,
        };
        assert_eq!(ReplyHeader::parse(&reply), Err(err));
        assert_eq!(RpcMessage::parse(&reply), Err(err));

        // accept_stat at 20 after an AUTH_NONE verifier.
        for value in [6, 0xffff_ffff] {
            let reply = words(&[7, 1, 0, 0, 0, value]);
            assert_eq!(
                RpcMessage::parse(&reply),
                Err(DecodeError::InvalidDiscriminant { offset: 20, value })
            );
        }

        // reject_stat at 12.
        let reply = words(&[7, 1, 1, 2, 0, 0]);
        assert_eq!(
            ReplyHeader::parse(&reply),
            Err(DecodeError::InvalidDiscriminant {
                offset: 12,
                value: 2
            })
        );
    }

    #[test]
    fn unknown_auth_stat_and_flavor_decode() {
        let reply = words(&[7, 1, 1, 1, 99]);
        let (parsed, len) = ReplyHeader::parse(&reply).unwrap();
        assert_eq!(len, 20);
        assert_eq!(parsed, ReplyHeader::auth_error(7, AuthStat(99)));
        match parsed.body {
            ReplyBody::Denied(RejectedReply::AuthError(s)) => assert_eq!(s.name(), None),
            other => panic!("unexpected body {other:?}"),
        }
        assert_eq!(encode_vec(|b| parsed.encode(b)), reply);

        // A flavor outside the RFC's enum is carried as an opaque body.
        let call = words(&[1, 0, 2, 3, 4, 5, 390_003, 4, 0xcafe_babe, 0, 0]);
        let (parsed, len) = CallHeader::parse(&call).unwrap();
        assert_eq!(len, 44);
        assert_eq!(parsed.cred.flavor, 390_003);
        assert_eq!(parsed.cred.flavor_name(), None);
        assert_eq!(parsed.cred.body, &[0xca, 0xfe, 0xba, 0xbe]);
        assert_eq!(parsed.cred.auth_sys(), None);
        assert_eq!(encode_vec(|b| parsed.encode(b)), call);
    }

    #[test]
    fn rpcvers_other_than_2_is_parsed_for_rpc_mismatch() {
        let mut msg = words(&NULL_CALL);
        msg[11] = 3;
        let (parsed, len) = CallHeader::parse(&msg).unwrap();
        assert_eq!(len, 40);
        assert_eq!(parsed.rpcvers, 3);
        assert!(!parsed.is_rpc_v2());
        assert_eq!(encode_vec(|b| parsed.encode(b)), msg);
        let answer = ReplyHeader::rpc_mismatch(parsed.xid, RPC_VERSION, RPC_VERSION);
        assert_eq!(
            encode_vec(|b| answer.encode(b)),
            words(&[0x1234_5678, 1, 1, 0, 2, 2])
        );
    }

    #[test]
    fn encoders_reject_oversized_fields_and_short_buffers() {
        let big = [0u8; 401];
        let too_long = EncodeError::TooLong { len: 401, max: 400 };
        let mut buf = [0u8; 1024];
        let auth = OpaqueAuth::new(RPCSEC_GSS, &big);
        assert_eq!(auth.encode(&mut buf), Err(too_long));
        let call = CallHeader::new(1, 2, 3, 4, auth, OpaqueAuth::NONE);
        assert_eq!(call.encode(&mut buf), Err(too_long));
        let call = CallHeader::new(1, 2, 3, 4, OpaqueAuth::NONE, auth);
        assert_eq!(call.encode(&mut buf), Err(too_long));
        let reply = ReplyHeader::accepted(1, auth, AcceptStat::Success);
        assert_eq!(reply.encode(&mut buf), Err(too_long));
        assert_eq!(RpcMessage::Reply(reply).encode(&mut buf), Err(too_long));

        // The size limit is reported even when the buffer is also too small.
        assert_eq!(auth.encode(&mut [0u8; 4]), Err(too_long));

        // A short buffer is left untouched.
        let call = CallHeader::new(1, 2, 3, 4, OpaqueAuth::NONE, OpaqueAuth::NONE);
        let mut short = [0xAAu8; 39];
        assert_eq!(
            call.encode(&mut short),
            Err(EncodeError::BufferTooSmall {
                needed: 40,
                available: 39
            })
        );
        assert!(short.iter().all(|&b| b == 0xAA));
        let mut short = [0xAAu8; 23];
        assert_eq!(
            ReplyHeader::accepted_success(1).encode(&mut short),
            Err(EncodeError::BufferTooSmall {
                needed: 24,
                available: 23
            })
        );
        assert!(short.iter().all(|&b| b == 0xAA));
        assert_eq!(
            sys_cred().encode(&mut [0u8; 35]),
            Err(EncodeError::BufferTooSmall {
                needed: 36,
                available: 35
            })
        );

        // AUTH_SYS limits.
        let name = [b'x'; 256];
        let sys = AuthSys {
            machinename: &name,
            ..sys_cred()
        };
        assert_eq!(
            sys.encode(&mut buf),
            Err(EncodeError::TooLong { len: 256, max: 255 })
        );
        assert!(Gids::new(&[0; 17]).is_none());
        assert_eq!(Gids::new(&[0; 16]).map(|g| g.len()), Some(16));
        assert_eq!(Gids::new(&[]), Some(Gids::EMPTY));
        assert!(Gids::default().is_empty());
    }

    #[test]
    fn peek_reads_only_the_prefix() {
        let msg = words(&SYS_CALL);
        assert_eq!(RpcMessage::peek_xid(&msg), Some(0xdead_beef));
        assert_eq!(RpcMessage::peek_xid(&msg[..4]), Some(0xdead_beef));
        assert_eq!(RpcMessage::peek_xid(&msg[..3]), None);
        assert_eq!(RpcMessage::peek_xid(&[]), None);
        assert_eq!(RpcMessage::peek_msg_type(&msg), Some(CALL));
        assert_eq!(RpcMessage::peek_msg_type(&words(&[9, 5])), Some(5));
        assert_eq!(RpcMessage::peek_msg_type(&msg[..7]), None);
        assert_eq!(RpcMessage::peek_msg_type(&msg[..2]), None);
    }

    #[test]
    fn gids_compare_by_value_across_representations() {
        let wire = words(&SYS_BODY);
        let decoded = AuthSys::parse(&wire).unwrap();
        let built = sys_cred();
        assert_eq!(decoded.gids, built.gids);
        assert_ne!(decoded.gids, Gids::new(&[10]).unwrap());
        assert_ne!(decoded.gids, Gids::new(&[10, 101]).unwrap());
        let hash = |s: &AuthSys<'_>| {
            let mut h = DefaultHasher::new();
            s.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&decoded), hash(&built));
        assert_eq!(format!("{:?}", decoded.gids), "[10, 100]");
        assert_eq!(format!("{:?}", Gids::EMPTY), "[]");
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

    /// Checks what any successful parse must satisfy: the length is the encoded length, and
    /// encoding then parsing again gives the same header.
    fn check_parsed(msg: RpcMessage<'_>, len: usize, input_len: usize) {
        assert!(len <= input_len);
        assert_eq!(msg.encoded_len(), len);
        let mut buf = vec![0u8; len];
        assert_eq!(msg.encode(&mut buf), Ok(len));
        assert_eq!(RpcMessage::parse(&buf), Ok((msg, len)));
    }

    proptest! {
        #[test]
        fn call_encode_parse_encode_is_identity(
            xid in any::<u32>(),
            rpcvers in prop_oneof![Just(2u32), any::<u32>()],
            prog in any::<u32>(),
            vers in any::<u32>(),
            proc_num in any::<u32>(),
            cred_flavor in any::<u32>(),
            cred_body in proptest::collection::vec(any::<u8>(), 0..=MAX_AUTH_BYTES),
            verf_flavor in any::<u32>(),
            verf_body in proptest::collection::vec(any::<u8>(), 0..=MAX_AUTH_BYTES),
            args in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let call = CallHeader {
                xid,
                rpcvers,
                prog,
                vers,
                proc_num,
                cred: OpaqueAuth::new(cred_flavor, &cred_body),
                verf: OpaqueAuth::new(verf_flavor, &verf_body),
            };
            let n = call.encoded_len();
            prop_assert_eq!(n, 40 + pad4(cred_body.len()) + pad4(verf_body.len()));
            let mut buf = vec![0xAAu8; n + args.len()];
            prop_assert_eq!(call.encode(&mut buf), Ok(n));
            buf[n..].copy_from_slice(&args);
            let (parsed, len) = CallHeader::parse(&buf).unwrap();
            prop_assert_eq!(parsed, call);
            prop_assert_eq!(len, n);
            prop_assert_eq!(parsed.is_rpc_v2(), rpcvers == 2);
            prop_assert_eq!(RpcMessage::parse(&buf), Ok((RpcMessage::Call(call), n)));
            let mut again = vec![0u8; n];
            prop_assert_eq!(parsed.encode(&mut again), Ok(n));
            prop_assert_eq!(&again[..], &buf[..n]);
        }

        #[test]
        fn reply_encode_parse_encode_is_identity(
            kind in 0u8..8,
            xid in any::<u32>(),
            a in any::<u32>(),
            b in any::<u32>(),
            verf_flavor in any::<u32>(),
            verf_body in proptest::collection::vec(any::<u8>(), 0..=MAX_AUTH_BYTES),
            results in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let reply = make_reply(kind, xid, a, b, OpaqueAuth::new(verf_flavor, &verf_body));
            let n = reply.encoded_len();
            let mut buf = vec![0xAAu8; n + results.len()];
            prop_assert_eq!(reply.encode(&mut buf), Ok(n));
            buf[n..].copy_from_slice(&results);
            let (parsed, len) = ReplyHeader::parse(&buf).unwrap();
            prop_assert_eq!(parsed, reply);
            prop_assert_eq!(len, n);
            prop_assert_eq!(RpcMessage::parse(&buf), Ok((RpcMessage::Reply(reply), n)));
            let mut again = vec![0u8; n];
            prop_assert_eq!(parsed.encode(&mut again), Ok(n));
            prop_assert_eq!(&again[..], &buf[..n]);
            // Every strict prefix of the header is truncated.
            for cut in 0..n {
                let truncated = matches!(
                    ReplyHeader::parse(&buf[..cut]),
                    Err(DecodeError::Truncated { .. })
                );
                prop_assert!(truncated, "prefix of {} bytes", cut);
            }
        }

        #[test]
        fn auth_sys_encode_parse_encode_is_identity(
            stamp in any::<u32>(),
            machinename in proptest::collection::vec(any::<u8>(), 0..=MAX_MACHINENAME_LEN),
            uid in any::<u32>(),
            gid in any::<u32>(),
            gids in proptest::collection::vec(any::<u32>(), 0..=MAX_GIDS),
        ) {
            let sys = AuthSys {
                stamp,
                machinename: &machinename,
                uid,
                gid,
                gids: Gids::new(&gids).unwrap(),
            };
            let n = sys.encoded_len();
            let mut body = vec![0xAAu8; n];
            prop_assert_eq!(sys.encode(&mut body), Ok(n));
            let parsed = AuthSys::parse(&body).unwrap();
            prop_assert_eq!(parsed, sys);
            prop_assert_eq!(parsed.gids.iter().collect::<Vec<_>>(), gids.clone());
            let mut again = vec![0u8; n];
            prop_assert_eq!(parsed.encode(&mut again), Ok(n));
            prop_assert_eq!(&again, &body);

            // Carried in a call's credential.
            let call = CallHeader::new(1, 100_003, 3, 1, OpaqueAuth::new(AUTH_SYS, &body),
                OpaqueAuth::NONE);
            let mut msg = vec![0u8; call.encoded_len()];
            call.encode(&mut msg).unwrap();
            let (parsed_call, _) = CallHeader::parse(&msg).unwrap();
            prop_assert_eq!(parsed_call.cred.auth_sys(), Some(Ok(sys)));
        }

        #[test]
        fn parsing_arbitrary_bytes_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            if let Ok((msg, len)) = RpcMessage::parse(&bytes) {
                check_parsed(msg, len, bytes.len());
            }
            if let Ok((call, len)) = CallHeader::parse(&bytes) {
                check_parsed(RpcMessage::Call(call), len, bytes.len());
            }
            if let Ok((reply, len)) = ReplyHeader::parse(&bytes) {
                check_parsed(RpcMessage::Reply(reply), len, bytes.len());
            }
            if let Ok((auth, len)) = OpaqueAuth::parse(&bytes) {
                prop_assert_eq!(auth.encoded_len(), len);
                prop_assert!(auth.body.len() <= MAX_AUTH_BYTES);
            }
            if let Ok(sys) = AuthSys::parse(&bytes) {
                prop_assert_eq!(sys.encoded_len(), bytes.len());
                prop_assert!(sys.gids.len() <= MAX_GIDS);
                prop_assert!(sys.machinename.len() <= MAX_MACHINENAME_LEN);
            }
            let _ = RpcMessage::peek_xid(&bytes);
            let _ = RpcMessage::peek_msg_type(&bytes);
        }

        #[test]
        fn parsing_arbitrary_small_words_never_panics(
            ws in proptest::collection::vec(
                prop_oneof![4 => 0u32..4, 1 => 0u32..40, 1 => any::<u32>()],
                0..48,
            ),
            cut in 0usize..4,
        ) {
            // Small words hit the known discriminants and short lengths often; `cut` shifts the
            // end off the four-byte grid.
            let mut bytes = words(&ws);
            let keep = bytes.len().saturating_sub(cut);
            bytes.truncate(keep);
            if let Ok((msg, len)) = RpcMessage::parse(&bytes) {
                check_parsed(msg, len, bytes.len());
            }
            if let Ok(sys) = AuthSys::parse(&bytes) {
                prop_assert_eq!(sys.encoded_len(), bytes.len());
            }
        }

        #[test]
        fn mutated_auth_sys_call_never_panics(
            at in 0usize..19,
            value in prop_oneof![0u32..64, any::<u32>()],
            cut in prop_oneof![3 => Just(76usize), 1 => 0usize..76],
        ) {
            let mut ws = SYS_CALL;
            ws[at] = value;
            let bytes = words(&ws);
            let bytes = &bytes[..cut];
            if let Ok((msg, len)) = RpcMessage::parse(bytes) {
                check_parsed(msg, len, bytes.len());
                if let RpcMessage::Call(call) = msg {
                    if let Some(Ok(sys)) = call.cred.auth_sys() {
                        prop_assert_eq!(sys.encoded_len(), call.cred.body.len());
                    }
                }
            }
        }
    }

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
}
