//! Error types shared by every decoder and encoder of the crate.

use core::fmt;

/// Why a byte string could not be decoded.
///
/// Every variant carries the byte offset (from the start of the buffer handed to the decoder) at
/// which the problem was found, so that tools can point at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended before an item that needs `needed` bytes at `offset`.
    Truncated {
        /// Where the item starts.
        offset: usize,
        /// How many bytes the item needs.
        needed: usize,
    },
    /// An XDR bool or optional-data discriminator held a value other than 0 or 1 (RFC 4506 §4.4,
    /// §4.19).
    InvalidBool {
        /// Where the word starts.
        offset: usize,
        /// The value found.
        value: u32,
    },
    /// An enum or union discriminator held a value the decoder does not know.
    InvalidDiscriminant {
        /// Where the word starts.
        offset: usize,
        /// The value found.
        value: u32,
    },
    /// A counted array or opaque claimed more elements than the bytes present can hold, or more
    /// than the protocol's maximum.
    CountTooLarge {
        /// Where the count starts.
        offset: usize,
        /// The count found.
        count: u32,
        /// The largest count the input or the protocol allows here.
        max: u32,
    },
}

impl DecodeError {
    /// The byte offset at which decoding failed.
    pub fn offset(&self) -> usize {
        match *self {
            DecodeError::Truncated { offset, .. }
            | DecodeError::InvalidBool { offset, .. }
            | DecodeError::InvalidDiscriminant { offset, .. }
            | DecodeError::CountTooLarge { offset, .. } => offset,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Truncated { offset, needed } => {
                write!(
                    f,
                    "input ends before the {needed}-byte item at offset {offset}"
                )
            }
            DecodeError::InvalidBool { offset, value } => {
                write!(f, "boolean at offset {offset} is {value}, not 0 or 1")
            }
            DecodeError::InvalidDiscriminant { offset, value } => {
                write!(f, "unknown discriminant {value} at offset {offset}")
            }
            DecodeError::CountTooLarge { offset, count, max } => {
                write!(
                    f,
                    "count {count} at offset {offset} exceeds the maximum {max}"
                )
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why an encoder could not write its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The caller's buffer is smaller than the encoding.
    BufferTooSmall {
        /// Bytes the encoding needs in all.
        needed: usize,
        /// Bytes the caller provided.
        available: usize,
    },
    /// A value cannot be represented on the wire (e.g. an opaque longer than 2^32 − 1 bytes, or
    /// longer than the field's maximum).
    TooLong {
        /// The length given.
        len: usize,
        /// The largest the field allows.
        max: usize,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncodeError::BufferTooSmall { needed, available } => {
                write!(
                    f,
                    "encoding needs {needed} bytes but the buffer holds {available}"
                )
            }
            EncodeError::TooLong { len, max } => {
                write!(
                    f,
                    "item of {len} bytes exceeds the field's maximum of {max}"
                )
            }
        }
    }
}

impl std::error::Error for EncodeError {}
