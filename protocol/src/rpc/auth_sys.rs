//! The body of an AUTH_SYS credential, `authsys_parms`, and its supplementary group list
//! (RFC 5531 appendix A).

use core::fmt;
use core::hash::{Hash, Hasher};
use core::iter::FusedIterator;

use super::wire::encode_exact;
use super::{MAX_GIDS, MAX_MACHINENAME_LEN};
use crate::error::{DecodeError, EncodeError};
use crate::xdr::{pad4, XdrReader, XdrWriter};

#[cfg(doc)]
use super::OpaqueAuth;

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
