//! XDR primitives (RFC 4506): a bounds-checked reader over a received buffer and a writer into a
//! caller-provided buffer.
//!
//! The unit is four octets, big-endian (RFC 4506 §3). Variable-length items are followed by zero
//! padding up to the next multiple of four. The reader never reads past its input and never loops
//! or allocates according to a count before checking that count against the bytes present; the
//! writer never allocates.

use crate::error::{DecodeError, EncodeError};

/// The XDR unit: every item occupies a multiple of four octets (RFC 4506 §3).
pub const UNIT: usize = 4;

/// Rounds `len` up to the next multiple of four (the XDR "roundup", RFC 4506 §3).
#[inline]
pub const fn pad4(len: usize) -> usize {
    (len + 3) & !3
}

/// Rounds a 64-bit length up to the next multiple of four, saturating at 2^64 − 4.
#[inline]
pub const fn pad4_u64(len: u64) -> u64 {
    match len.checked_add(3) {
        Some(v) => v & !3,
        None => !3u64,
    }
}

/// The big-endian 32-bit word at byte offset `at` of `b` (an XDR unsigned int, RFC 4506
/// §4.2), or `None` past its end: for the few reads of a fixed header word outside a full
/// decode (a version or type test before choosing a decoder).
#[inline]
pub fn word_at(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(UNIT)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The big-endian word at byte `at` of `w` (RFC 4506 §4.2). With a constant `at` the index is
/// checked at compile time.
#[inline(always)]
pub(crate) fn be32_at<const N: usize>(w: &[u8; N], at: usize) -> u32 {
    u32::from_be_bytes([w[at], w[at + 1], w[at + 2], w[at + 3]])
}

/// The `N` bytes of `buf` from `at`, or `None` when `buf` ends before.
#[inline(always)]
pub(crate) fn fixed_at<const N: usize>(buf: &[u8], at: usize) -> Option<&[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// A cursor that decodes XDR items from a byte slice without copying.
///
/// Slices it returns borrow from the input, so a decoded message can be inspected in place in
/// its receive buffer.
#[derive(Clone, Debug)]
pub struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrReader<'a> {
    /// A reader positioned at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        XdrReader { buf, pos: 0 }
    }

    /// A reader over `buf` positioned at `pos` (clamped to the end of `buf`).
    #[inline]
    pub fn at(buf: &'a [u8], pos: usize) -> Self {
        XdrReader {
            buf,
            pos: pos.min(buf.len()),
        }
    }

    /// The offset of the next item from the start of the input.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// How many bytes are left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not yet consumed.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The whole input.
    #[inline]
    pub fn input(&self) -> &'a [u8] {
        self.buf
    }

    /// Consumes exactly `n` bytes and returns them.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                offset: self.pos,
                needed: n,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Decodes an unsigned int (RFC 4506 §4.2).
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Decodes a signed int (RFC 4506 §4.1).
    #[inline]
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        self.u32().map(|v| v as i32)
    }

    /// Decodes an unsigned hyper (RFC 4506 §4.5): eight octets, most significant first.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// Decodes a signed hyper (RFC 4506 §4.5).
    #[inline]
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        self.u64().map(|v| v as i64)
    }

    /// Decodes a bool (RFC 4506 §4.4): only 0 (FALSE) and 1 (TRUE) are valid.
    #[inline]
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        let offset = self.pos;
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(DecodeError::InvalidBool { offset, value }),
        }
    }

    /// Decodes the discriminator of optional-data (RFC 4506 §4.19): `true` when the item follows.
    #[inline]
    pub fn optional(&mut self) -> Result<bool, DecodeError> {
        self.bool()
    }

    /// Decodes fixed-length opaque data of `n` bytes plus its padding (RFC 4506 §4.9).
    #[inline]
    pub fn opaque_fixed(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let offset = self.pos;
        let padded = pad4(n);
        if padded > self.remaining() || n > padded {
            return Err(DecodeError::Truncated {
                offset,
                needed: padded,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += padded;
        Ok(s)
    }

    /// Decodes variable-length opaque data (RFC 4506 §4.10) of at most `max` bytes.
    ///
    /// The length is checked against `max` and against the bytes present before anything else.
    #[inline]
    pub fn opaque_var(&mut self, max: u32) -> Result<&'a [u8], DecodeError> {
        let offset = self.pos;
        let len = self.u32()?;
        if len > max {
            return Err(DecodeError::CountTooLarge {
                offset,
                count: len,
                max,
            });
        }
        let len = len as usize;
        if pad4(len) > self.remaining() {
            return Err(DecodeError::Truncated {
                offset: self.pos,
                needed: pad4(len),
            });
        }
        self.opaque_fixed(len)
    }

    /// Decodes a string (RFC 4506 §4.11) of at most `max` bytes, returned as raw bytes (XDR
    /// strings are ASCII by convention but not by rule).
    #[inline]
    pub fn string(&mut self, max: u32) -> Result<&'a [u8], DecodeError> {
        self.opaque_var(max)
    }

    /// Decodes the count of a counted array (RFC 4506 §4.13) whose elements take at least
    /// `min_elem_size` bytes each, and checks it against `max` and against the bytes present.
    ///
    /// Callers may then loop `count` times: the loop is bounded by the input's length.
    #[inline]
    pub fn array_len(&mut self, min_elem_size: usize, max: u32) -> Result<u32, DecodeError> {
        let offset = self.pos;
        let count = self.u32()?;
        let fits = (self.remaining() / min_elem_size.max(1)).min(u32::MAX as usize) as u32;
        let limit = fits.min(max);
        if count > limit {
            return Err(DecodeError::CountTooLarge {
                offset,
                count,
                max: limit,
            });
        }
        Ok(count)
    }

    /// Skips `n` bytes.
    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(|_| ())
    }
}

/// A cursor that writes big-endian words into a buffer its caller has already sized: the
/// encoders' fast form of [`XdrWriter`], for headers whose exact length was computed and
/// checked first. A word past the end is not written (never a panic); the caller's
/// `position` check finds it.
#[derive(Debug)]
pub(crate) struct Words<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl<'a> Words<'a> {
    /// A cursor at the start of `buf`.
    #[inline]
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Words { buf, at: 0 }
    }

    /// Writes an unsigned int.
    #[inline(always)]
    pub(crate) fn put(&mut self, v: u32) {
        if let Some(d) = self.buf.get_mut(self.at..self.at + 4) {
            d.copy_from_slice(&v.to_be_bytes());
        }
        self.at += 4;
    }

    /// Writes an unsigned hyper.
    #[inline(always)]
    pub(crate) fn put_u64(&mut self, v: u64) {
        if let Some(d) = self.buf.get_mut(self.at..self.at + 8) {
            d.copy_from_slice(&v.to_be_bytes());
        }
        self.at += 8;
    }

    /// Bytes written (or skipped past the end) so far.
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.at
    }
}

/// A cursor that encodes XDR items into a caller-provided buffer.
///
/// Nothing is allocated: an item that does not fit is an [`EncodeError::BufferTooSmall`] and the
/// buffer's contents past the last complete item are unspecified.
#[derive(Debug)]
pub struct XdrWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> XdrWriter<'a> {
    /// A writer positioned at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a mut [u8]) -> Self {
        XdrWriter { buf, pos: 0 }
    }

    /// Bytes written so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes still free.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes written so far.
    #[inline]
    pub fn written(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    #[inline]
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], EncodeError> {
        if n > self.remaining() {
            return Err(EncodeError::BufferTooSmall {
                needed: self.pos + n,
                available: self.buf.len(),
            });
        }
        let s = &mut self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Encodes an unsigned int.
    #[inline]
    pub fn put_u32(&mut self, v: u32) -> Result<(), EncodeError> {
        self.reserve(4)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    /// Encodes a signed int.
    #[inline]
    pub fn put_i32(&mut self, v: i32) -> Result<(), EncodeError> {
        self.put_u32(v as u32)
    }

    /// Encodes an unsigned hyper.
    #[inline]
    pub fn put_u64(&mut self, v: u64) -> Result<(), EncodeError> {
        self.reserve(8)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    /// Encodes a signed hyper.
    #[inline]
    pub fn put_i64(&mut self, v: i64) -> Result<(), EncodeError> {
        self.put_u64(v as u64)
    }

    /// Encodes a bool as 0 or 1.
    #[inline]
    pub fn put_bool(&mut self, v: bool) -> Result<(), EncodeError> {
        self.put_u32(v as u32)
    }

    /// Encodes fixed-length opaque data followed by zero padding to a multiple of four.
    #[inline]
    pub fn put_opaque_fixed(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        let padded = pad4(data.len());
        let out = self.reserve(padded)?;
        out[..data.len()].copy_from_slice(data);
        out[data.len()..].fill(0);
        Ok(())
    }

    /// Encodes variable-length opaque data (length word, bytes, padding); `max` is the field's
    /// declared maximum.
    #[inline]
    pub fn put_opaque_var(&mut self, data: &[u8], max: u32) -> Result<(), EncodeError> {
        if data.len() > max as usize {
            return Err(EncodeError::TooLong {
                len: data.len(),
                max: max as usize,
            });
        }
        if 4 + pad4(data.len()) > self.remaining() {
            return Err(EncodeError::BufferTooSmall {
                needed: self.pos + 4 + pad4(data.len()),
                available: self.buf.len(),
            });
        }
        self.put_u32(data.len() as u32)?;
        self.put_opaque_fixed(data)
    }

    /// Encodes a string (same wire form as variable-length opaque data).
    #[inline]
    pub fn put_string(&mut self, s: &[u8], max: u32) -> Result<(), EncodeError> {
        self.put_opaque_var(s, max)
    }

    /// Copies already-encoded XDR bytes (whose length must be a multiple of four for the stream
    /// to stay aligned).
    #[inline]
    pub fn put_raw(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        self.reserve(data.len())?.copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_big_endian() {
        let mut buf = [0u8; 24];
        let mut w = XdrWriter::new(&mut buf);
        w.put_u32(0x0102_0304).unwrap();
        w.put_i32(-2).unwrap();
        w.put_u64(0x1122_3344_5566_7788).unwrap();
        w.put_i64(-1).unwrap();
        assert_eq!(w.position(), 24);
        assert_eq!(&buf[..8], &[1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(
            &buf[8..16],
            &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
        let mut r = XdrReader::new(&buf);
        assert_eq!(r.u32().unwrap(), 0x0102_0304);
        assert_eq!(r.i32().unwrap(), -2);
        assert_eq!(r.u64().unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(r.i64().unwrap(), -1);
        assert_eq!(
            r.u32(),
            Err(DecodeError::Truncated {
                offset: 24,
                needed: 4
            })
        );
    }

    #[test]
    fn bool_accepts_only_zero_and_one() {
        let bytes = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2];
        let mut r = XdrReader::new(&bytes);
        assert!(!r.bool().unwrap());
        assert!(r.bool().unwrap());
        assert_eq!(
            r.bool(),
            Err(DecodeError::InvalidBool {
                offset: 8,
                value: 2
            })
        );
    }

    #[test]
    fn opaque_var_is_padded_and_bounded() {
        let mut buf = [0xAAu8; 16];
        let mut w = XdrWriter::new(&mut buf);
        w.put_opaque_var(b"hello", 8).unwrap();
        assert_eq!(w.position(), 12);
        assert_eq!(&buf[..12], b"\0\0\0\x05hello\0\0\0");
        let mut r = XdrReader::new(&buf[..12]);
        assert_eq!(r.opaque_var(8).unwrap(), b"hello");
        assert_eq!(r.remaining(), 0);
        // Over the declared maximum.
        let mut r = XdrReader::new(&buf[..12]);
        assert!(matches!(
            r.opaque_var(4),
            Err(DecodeError::CountTooLarge { .. })
        ));
        // Claims more than present (the padded length does not fit).
        let mut r = XdrReader::new(&buf[..11]);
        assert!(matches!(
            r.opaque_var(8),
            Err(DecodeError::Truncated { .. })
        ));
        // Encoding over the maximum or past the buffer is an error.
        let mut small = [0u8; 8];
        let mut w = XdrWriter::new(&mut small);
        assert!(matches!(
            w.put_opaque_var(b"hello", 4),
            Err(EncodeError::TooLong { .. })
        ));
        assert!(matches!(
            w.put_opaque_var(b"hello", 8),
            Err(EncodeError::BufferTooSmall { .. })
        ));
    }

    #[test]
    fn huge_counts_are_rejected_before_looping() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        let mut r = XdrReader::new(&bytes);
        assert_eq!(
            r.array_len(4, u32::MAX),
            Err(DecodeError::CountTooLarge {
                offset: 0,
                count: u32::MAX,
                max: 1
            })
        );
        let mut r = XdrReader::new(&bytes);
        assert!(r.opaque_var(u32::MAX).is_err());
    }

    #[test]
    fn pad_rounds_up_to_four() {
        assert_eq!(pad4(0), 0);
        assert_eq!(pad4(1), 4);
        assert_eq!(pad4(4), 4);
        assert_eq!(pad4(5), 8);
        assert_eq!(pad4_u64(u64::MAX), !3u64);
    }
}
