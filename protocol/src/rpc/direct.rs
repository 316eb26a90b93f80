//! Direct decoding: the loads at fixed offsets (RFC 4506 §4.2) and the bounded `opaque_auth`
//! body (RFC 5531 §8.2, RFC 4506 §4.10) that the fast paths of the header parsers use.

use super::MAX_AUTH_BYTES;
use crate::xdr::pad4;

// The header parsers (`call`, `reply`, `message`) first try a direct decoder: one bounds check
// for the fixed words, then big-endian loads at fixed offsets (no cursor, no `Result` per
// word). A direct decoder answers `Some` exactly when the cursor-based reference decoder
// succeeds, with the same header and length (property tests in `tests/direct.rs`), and `None`
// otherwise; the parsers then run the reference decoder, cold, which finds the typed error at
// its offset. Malformed input therefore gets the same `DecodeError` as ever, and well-formed
// input never pays for the per-word checks.

/// The body of an `opaque_auth` whose length word `len` was just read and whose body starts
/// at `at`: `None` when the length exceeds [`MAX_AUTH_BYTES`] (RFC 5531 §8.2) or the body
/// and its padding run past `buf` (RFC 4506 §4.10). Returns the body and where the next item
/// starts.
#[inline(always)]
pub(super) fn auth_body_at(buf: &[u8], at: usize, len: u32) -> Option<(&[u8], usize)> {
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
