//! RPC-over-RDMA version 1 CM Private Data (RFC 8797).
//!
//! When an RPC-over-RDMA version 1 connection is established, the client (the active side) and
//! the server (the passive side) may each place eight octets in the Connection Manager's private
//! data to advertise their inline thresholds and whether they support remote invalidation
//! (RFC 8797 §4). The exchange is OPTIONAL (§1): a peer that receives nothing usable behaves as if
//! it had received the defaults of RFC 8166 (§5.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Format Identifier                       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |  Reserved   |R|   Send Size   | Receive Size  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! - [`PrivateData`] holds the decoded fields; [`PrivateData::encode`] writes them.
//! - [`parse`] searches a received private-data buffer for the Format Identifier at any offset
//!   (§5.2) and returns [`Parsed`]; [`Parsed::effective`] gives what to behave as.
//! - [`negotiate`] and [`negotiate_with_peer`] compute the pair of inline thresholds (§4.2) and
//!   whether the responder may use RDMA Send with Invalidate (§4.1).
//!
//! Where the RFC is silent, this module follows the project checklist: the R bit is the lowest
//! bit of octet 5 (G-10); sizes are rounded down and clamped when encoded, and an unknown Version
//! is treated as absent private data (G-11).
//!
//! The code is split by concern: the constants and the Size field encoding live here, the
//! [`PrivateData`] fields and their encoding in `data`, the search of a received buffer in
//! `search`, and the negotiation of inline thresholds in `negotiation`.

mod data;
mod negotiation;
mod search;

pub use data::PrivateData;
pub use negotiation::{negotiate, negotiate_with_peer, ConnEnd, Negotiated};
pub use search::{candidates, parse, AbsentReason, Candidate, Candidates, Parsed};

/// The Format Identifier of RPC-over-RDMA version 1 CM Private Data, sent in network byte order
/// (RFC 8797 §4, registered in §8).
pub const FORMAT_IDENTIFIER: u32 = 0xf6ab_0e18;

/// [`FORMAT_IDENTIFIER`] as it appears on the wire: `f6 ab 0e 18`.
pub const FORMAT_IDENTIFIER_BYTES: [u8; 4] = FORMAT_IDENTIFIER.to_be_bytes();

/// The only message format version this module understands (RFC 8797 §4: "The value "1" in this
/// field indicates that exactly eight octets are present").
pub const VERSION: u8 = 1;

/// Length in octets of version 1 private data, Format Identifier included (RFC 8797 §4, §8).
pub const ENCODED_LEN: usize = 8;

/// The smallest inline threshold the Size fields can express, encoded as 0 (RFC 8797 §4.2).
pub const MIN_SIZE: u32 = 1024;

/// The largest inline threshold the Size fields can express, encoded as 255 (RFC 8797 §4.2).
pub const MAX_SIZE: u32 = 262_144;

/// The granularity of the Size fields: each step of the encoded value adds one kilo-octet
/// (RFC 8797 §4.2).
pub const SIZE_UNIT: u32 = 1024;

/// The default inline threshold in each direction of an RPC-over-RDMA version 1 connection
/// (RFC 8166 §3.3.3, restated in RFC 8797 §3.1).
pub const DEFAULT_INLINE_THRESHOLD: u32 = 1024;

/// Mask of the R bit within octet 5: the lowest bit, bit 15 of the second word in the RFC's
/// diagram (RFC 8797 §4; checklist G-10).
pub const R_BIT: u8 = 0x01;

/// Mask of the seven Reserved bits within octet 5. Senders MUST set them to zero and receivers
/// MUST ignore them (RFC 8797 §4).
pub const RESERVED_MASK: u8 = 0xfe;

/// Offset of the Version octet from the start of the Format Identifier.
const VERSION_OFFSET: usize = 4;
/// Offset of the octet holding the Reserved bits and the R bit.
const FLAGS_OFFSET: usize = 5;
/// Offset of the Send Size octet.
const SEND_SIZE_OFFSET: usize = 6;
/// Offset of the Receive Size octet.
const RECEIVE_SIZE_OFFSET: usize = 7;

/// Encodes an inline threshold in octets as a Size field value (RFC 8797 §4.2).
///
/// The RFC's rule is `bytes / 1024 − 1`. It does not say how to encode a size that is not a
/// multiple of 1024 or that lies outside 1024..=262144 (checklist G-11). This function never
/// over-advertises a size it can represent: the division rounds down, so 2047 encodes as 0
/// (1024), and anything above [`MAX_SIZE`] encodes as 255 (262144). Sizes below [`MIN_SIZE`]
/// encode as 0 because the field cannot express less; every RPC-over-RDMA version 1 receiver
/// MUST support 1024 octets anyway (RFC 8166 §3.3.3).
pub const fn encode_size(bytes: u32) -> u8 {
    let units = bytes / SIZE_UNIT;
    if units == 0 {
        0
    } else if units > 256 {
        255
    } else {
        (units - 1) as u8
    }
}

/// Decodes a Size field value to an inline threshold in octets: `(value + 1) × 1024`
/// (RFC 8797 §4.2). The result lies in [`MIN_SIZE`]..=[`MAX_SIZE`].
pub const fn decode_size(value: u8) -> u32 {
    (value as u32 + 1) * SIZE_UNIT
}

/// The size a peer will see when `bytes` is advertised: `decode_size(encode_size(bytes))`.
///
/// The result is a multiple of 1024 in [`MIN_SIZE`]..=[`MAX_SIZE`], and not greater than `bytes`
/// unless `bytes` is below [`MIN_SIZE`].
pub const fn advertisable_size(bytes: u32) -> u32 {
    decode_size(encode_size(bytes))
}

#[cfg(test)]
mod tests;
