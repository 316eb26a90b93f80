//! Credentials and verifiers: `opaque_auth` (RFC 5531 §8.2, §9), whatever their flavor.

use super::auth_sys::AuthSys;
use super::wire::encode_exact;
use super::{flavor_name, AUTH_NONE, AUTH_SYS, MAX_AUTH_BYTES};
use crate::error::{DecodeError, EncodeError};
use crate::xdr::{pad4, XdrReader, XdrWriter};

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

    pub(super) fn check(&self) -> Result<(), EncodeError> {
        if self.body.len() > MAX_AUTH_BYTES {
            return Err(EncodeError::TooLong {
                len: self.body.len(),
                max: MAX_AUTH_BYTES,
            });
        }
        Ok(())
    }

    pub(super) fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.flavor)?;
        w.put_opaque_var(self.body, MAX_AUTH_BYTES as u32)
    }
}
