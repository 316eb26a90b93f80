//! Helpers every header encoder and decoder shares: exact-size encoding into a caller's
//! buffer, and the `xid` and `mtype` prefix of every `rpc_msg` (RFC 5531 §9).

use crate::error::{DecodeError, EncodeError};
use crate::xdr::{XdrReader, XdrWriter};

/// Size of `xid` and `mtype`, the prefix every message shares (RFC 5531 §9, `rpc_msg`).
pub(super) const MSG_PREFIX_LEN: usize = 8;

/// Checks that `out` can hold `needed` bytes, then runs `f` on a writer over it and returns
/// `needed`. Nothing is written when the buffer is too small.
pub(super) fn encode_exact(
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
pub(super) fn read_prefix<'a>(buf: &'a [u8]) -> Result<(XdrReader<'a>, u32, u32), DecodeError> {
    let mut r = XdrReader::new(buf);
    let xid = r.u32()?;
    let mtype = r.u32()?;
    Ok((r, xid, mtype))
}

/// The error for an `mtype` other than the one a decoder expects or knows.
pub(super) fn bad_msg_type(value: u32) -> DecodeError {
    DecodeError::InvalidDiscriminant { offset: 4, value }
}
