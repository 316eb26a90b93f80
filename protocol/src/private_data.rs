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

use core::fmt;

use crate::error::EncodeError;

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

/// The contents of RPC-over-RDMA version 1 CM Private Data (RFC 8797 §4), with the Size fields
/// decoded to octets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrivateData {
    /// The message format version, octet 4. Version 1 is the only one defined (RFC 8797 §4, §6).
    pub version: u8,
    /// The R bit, the lowest bit of octet 5 (checklist G-10): the sender supports remote
    /// invalidation as described in RFC 8797 §4.1.
    pub remote_invalidation: bool,
    /// The maximum number of octets this peer is prepared to transmit in a single RDMA Send on
    /// this connection (RFC 8797 §4, Send Size).
    pub send_size: u32,
    /// The maximum number of octets this peer is prepared to receive with a single RDMA Receive
    /// on this connection (RFC 8797 §4, Receive Size).
    pub receive_size: u32,
}

impl PrivateData {
    /// What a peer MUST behave as having received when no conforming private data arrived: R
    /// clear and both Size fields zero, i.e. 1024 octets each way (RFC 8797 §5.1).
    pub const DEFAULT: PrivateData = PrivateData {
        version: VERSION,
        remote_invalidation: false,
        send_size: DEFAULT_INLINE_THRESHOLD,
        receive_size: DEFAULT_INLINE_THRESHOLD,
    };

    /// Version 1 private data advertising `send_size` and `receive_size` octets and the R bit.
    ///
    /// Both sizes are replaced by [`advertisable_size`], so the value held is exactly what the
    /// peer will decode: `new(5000, 300_000, false)` holds 4096 and 262144. A local side that
    /// negotiates with these values therefore agrees with its peer.
    pub const fn new(send_size: u32, receive_size: u32, remote_invalidation: bool) -> Self {
        PrivateData {
            version: VERSION,
            remote_invalidation,
            send_size: advertisable_size(send_size),
            receive_size: advertisable_size(receive_size),
        }
    }

    /// The eight octets on the wire (RFC 8797 §4). The Reserved bits are zero, as senders MUST
    /// set them. The sizes are encoded with [`encode_size`], so values that were set directly
    /// and are not representable are rounded down or clamped. The Version octet is written as
    /// held; anything other than [`VERSION`] makes a version 1 receiver ignore the data.
    pub const fn encode(&self) -> [u8; ENCODED_LEN] {
        let id = FORMAT_IDENTIFIER_BYTES;
        let flags = if self.remote_invalidation { R_BIT } else { 0 };
        [
            id[0],
            id[1],
            id[2],
            id[3],
            self.version,
            flags,
            encode_size(self.send_size),
            encode_size(self.receive_size),
        ]
    }

    /// Writes [`encode`](Self::encode) into the first [`ENCODED_LEN`] octets of `out` and returns
    /// the number of octets written. Octets of `out` after the first eight are left alone.
    ///
    /// # Errors
    ///
    /// [`EncodeError::BufferTooSmall`] when `out` is shorter than [`ENCODED_LEN`]; `out` is then
    /// unchanged.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        match out.get_mut(..ENCODED_LEN) {
            Some(dst) => {
                dst.copy_from_slice(&self.encode());
                Ok(ENCODED_LEN)
            }
            None => Err(EncodeError::BufferTooSmall {
                needed: ENCODED_LEN,
                available: out.len(),
            }),
        }
    }

    /// What a version 1 receiver makes of this data once sent: `parse(&self.encode()).effective()`.
    ///
    /// Sizes become their [`advertisable_size`], and data whose Version is not [`VERSION`]
    /// becomes [`PrivateData::DEFAULT`] (RFC 8797 §5.2, checklist G-11).
    pub fn as_received(&self) -> PrivateData {
        parse(&self.encode()).effective()
    }
}

impl Default for PrivateData {
    /// [`PrivateData::DEFAULT`]: the RFC 8797 §5.1 defaults.
    fn default() -> Self {
        PrivateData::DEFAULT
    }
}

impl fmt::Display for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "version {}, send size {}, receive size {}, remote invalidation {}",
            self.version,
            self.send_size,
            self.receive_size,
            if self.remote_invalidation {
                "supported"
            } else {
                "not supported"
            }
        )
    }
}

/// Why a received private-data buffer yields no RPC-over-RDMA version 1 CM Private Data. In
/// every case the receiver behaves as if it had received [`PrivateData::DEFAULT`]
/// (RFC 8797 §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbsentReason {
    /// The buffer is empty: the peer sent no private data at all (RFC 8797 §5.1).
    Empty,
    /// The Format Identifier occurs nowhere in the buffer (RFC 8797 §5.2 MUST).
    NoFormatIdentifier,
    /// The Format Identifier is followed by a Version other than 1, so the octets after it have
    /// no meaning this implementation knows (RFC 8797 §5.2, §6; checklist G-11).
    UnknownVersion(u8),
    /// The Format Identifier was found at `offset`, but fewer than [`ENCODED_LEN`] octets run from
    /// there to the end of the buffer: the content would overrun it (RFC 8797 §5.2).
    Truncated {
        /// Offset of the Format Identifier from the start of the buffer.
        offset: usize,
    },
}

impl AbsentReason {
    /// A stable machine-readable name, e.g. for a JSON field: `"empty"`,
    /// `"no-format-identifier"`, `"unknown-version"` or `"truncated"`.
    pub const fn name(&self) -> &'static str {
        match self {
            AbsentReason::Empty => "empty",
            AbsentReason::NoFormatIdentifier => "no-format-identifier",
            AbsentReason::UnknownVersion(_) => "unknown-version",
            AbsentReason::Truncated { .. } => "truncated",
        }
    }

    /// A sentence for people explaining the reason and citing the RFC section.
    pub const fn describe(&self) -> &'static str {
        match self {
            AbsentReason::Empty => {
                "no CM private data was received, so the peer is treated as supporting only the \
                 RPC-over-RDMA version 1 defaults (RFC 8797 §5.1)"
            }
            AbsentReason::NoFormatIdentifier => {
                "the CM private data does not contain the Format Identifier 0xf6ab0e18 at any \
                 offset, so it is treated as if no RPC-over-RDMA private data was provided \
                 (RFC 8797 §5.2)"
            }
            AbsentReason::UnknownVersion(_) => {
                "the Format Identifier is followed by a Version other than 1, which is not \
                 recognised, so the private data is ignored (RFC 8797 §5.2, §6)"
            }
            AbsentReason::Truncated { .. } => {
                "the Format Identifier is followed by fewer than the 8 octets version 1 needs, so \
                 the content would overrun the buffer and is ignored (RFC 8797 §5.2)"
            }
        }
    }
}

impl fmt::Display for AbsentReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AbsentReason::Empty => f.write_str("no private data"),
            AbsentReason::NoFormatIdentifier => {
                f.write_str("format identifier 0xf6ab0e18 not found")
            }
            AbsentReason::UnknownVersion(v) => write!(f, "unknown private data version {v}"),
            AbsentReason::Truncated { offset } => write!(
                f,
                "private data at offset {offset} needs {ENCODED_LEN} octets but the buffer ends first"
            ),
        }
    }
}

/// The outcome of [`parse`]: RPC-over-RDMA version 1 CM Private Data, or why there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Parsed {
    /// Valid version 1 private data was found.
    Present {
        /// The decoded fields.
        data: PrivateData,
        /// Offset of its Format Identifier from the start of the buffer.
        offset: usize,
    },
    /// No valid version 1 private data was found.
    Absent(AbsentReason),
}

impl Parsed {
    /// What the receiver behaves as having received: the data when present, otherwise R clear and
    /// both sizes 1024 octets, [`PrivateData::DEFAULT`] (RFC 8797 §5.1 MUST).
    pub fn effective(&self) -> PrivateData {
        match *self {
            Parsed::Present { data, .. } => data,
            Parsed::Absent(_) => PrivateData::DEFAULT,
        }
    }

    /// The data and its offset when present.
    pub fn present(&self) -> Option<(PrivateData, usize)> {
        match *self {
            Parsed::Present { data, offset } => Some((data, offset)),
            Parsed::Absent(_) => None,
        }
    }

    /// Whether valid version 1 private data was found.
    pub fn is_present(&self) -> bool {
        matches!(self, Parsed::Present { .. })
    }

    /// A sentence for people explaining the outcome and citing the RFC section.
    pub const fn describe(&self) -> &'static str {
        match self {
            Parsed::Present { .. } => {
                "RPC-over-RDMA version 1 CM private data was found and is in effect for the life \
                 of this connection (RFC 8797 §4)"
            }
            Parsed::Absent(reason) => reason.describe(),
        }
    }
}

/// One occurrence of the Format Identifier in a received buffer, as yielded by [`candidates`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// Offset of the Format Identifier from the start of the buffer.
    pub offset: usize,
    /// The decoded data, or why this occurrence fails the checks of RFC 8797 §5.2: always
    /// [`AbsentReason::UnknownVersion`] or [`AbsentReason::Truncated`].
    pub result: Result<PrivateData, AbsentReason>,
}

/// Iterator over every occurrence of the Format Identifier in a buffer; see [`candidates`].
#[derive(Clone, Debug)]
pub struct Candidates<'a> {
    buf: &'a [u8],
    from: usize,
}

impl Iterator for Candidates<'_> {
    type Item = Candidate;

    fn next(&mut self) -> Option<Candidate> {
        let rest = self.buf.get(self.from..)?;
        let found = rest
            .windows(FORMAT_IDENTIFIER_BYTES.len())
            .position(|w| w == FORMAT_IDENTIFIER_BYTES);
        let Some(rel) = found else {
            self.from = self.buf.len();
            return None;
        };
        let offset = self.from + rel;
        // The identifier cannot overlap itself (no proper suffix of f6 ab 0e 18 is a prefix of
        // it), but every offset is tried anyway: §5.2 puts no restriction on alignment.
        self.from = offset + 1;
        Some(Candidate {
            offset,
            result: check_candidate(self.buf, offset),
        })
    }
}

/// Every occurrence of the Format Identifier in `buf`, at any byte offset (RFC 8797 §5.2), in
/// increasing order of offset, each with the outcome of the §5.2 checks. [`parse`] uses the first
/// that passes; a diagnostic tool can list them all.
pub fn candidates(buf: &[u8]) -> Candidates<'_> {
    Candidates { buf, from: 0 }
}

/// Applies the checks of RFC 8797 §5.2 to the octets of `buf` starting at the Format Identifier
/// found at `offset` (which a [`AbsentReason::Truncated`] reports).
///
/// The Version is checked before the length: only the Version says how long the content is (§4:
/// version 1 means "exactly eight octets"), so an overrun can be judged only for a recognised
/// Version. Without even a Version octet the candidate is truncated.
fn check_candidate(buf: &[u8], offset: usize) -> Result<PrivateData, AbsentReason> {
    let at = &buf[offset..];
    let truncated = AbsentReason::Truncated { offset };
    let version = *at.get(VERSION_OFFSET).ok_or(truncated)?;
    if version != VERSION {
        return Err(AbsentReason::UnknownVersion(version));
    }
    let octets = at.get(..ENCODED_LEN).ok_or(truncated)?;
    Ok(PrivateData {
        version,
        // Receivers MUST ignore the Reserved bits (§4): only the R bit is read.
        remote_invalidation: octets[FLAGS_OFFSET] & R_BIT != 0,
        send_size: decode_size(octets[SEND_SIZE_OFFSET]),
        receive_size: decode_size(octets[RECEIVE_SIZE_OFFSET]),
    })
}

/// Finds and decodes RPC-over-RDMA version 1 CM Private Data in a received CM private-data
/// buffer (RFC 8797 §5.1, §5.2).
///
/// The whole buffer is searched for the Format Identifier at every byte offset, because other
/// layers (for example MPA, RFC 6581) may have placed their own private data before it (§5.2).
/// An occurrence is accepted when its Version is 1 and its eight octets fit in the buffer (the
/// two checks §5.2 recommends). The Reserved bits are ignored (§4).
///
/// **An occurrence that fails a check does not end the search: the first occurrence that passes
/// both checks wins.** The RFC says only that the receiver "should check" (§5.2), and it names the
/// risk these checks guard against: "non-RPC-over-RDMA CM Private Data inadvertently contains the
/// Format Identifier" (§7). A failing occurrence is therefore most likely four octets of another
/// layer's data that happen to match, and stopping there would let that data hide genuine private
/// data placed after it (a later occurrence that is followed by version 1 and fits the buffer is
/// exactly what §5.2 asks for). Skipping it also lets a future sender place an extended format
/// (§6) ahead of a version 1 copy. Because the identifier cannot overlap itself, the search
/// advances one octet at a time without missing any occurrence.
///
/// When no occurrence passes, the result is [`Parsed::Absent`] with the reason of the *first*
/// occurrence (the lowest offset), or [`AbsentReason::Empty`] /
/// [`AbsentReason::NoFormatIdentifier`] when there is none. [`candidates`] lists every
/// occurrence with its own outcome.
pub fn parse(buf: &[u8]) -> Parsed {
    if buf.is_empty() {
        return Parsed::Absent(AbsentReason::Empty);
    }
    let mut first_failure = None;
    for candidate in candidates(buf) {
        match candidate.result {
            Ok(data) => {
                return Parsed::Present {
                    data,
                    offset: candidate.offset,
                }
            }
            Err(reason) => {
                first_failure.get_or_insert(reason);
            }
        }
    }
    Parsed::Absent(first_failure.unwrap_or(AbsentReason::NoFormatIdentifier))
}

/// Which end of the connection the local side is (RFC 8797 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The client, which actively establishes the connection and sends forward-direction Calls.
    Client,
    /// The server, which passively accepts the connection and sends forward-direction Replies.
    Server,
}

impl Role {
    /// The role of the other end.
    pub const fn peer(self) -> Role {
        match self {
            Role::Client => Role::Server,
            Role::Server => Role::Client,
        }
    }
}

/// The transport properties in force on a connection after the exchange (RFC 8797 §4.1, §4.2).
/// They are fixed for the life of the connection and are computed afresh on each new one (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Negotiated {
    /// The client-to-server inline threshold, which bounds the Calls a requester sends in the
    /// forward direction: the smaller of the client's Send Size and the server's Receive Size
    /// (RFC 8797 §4.2).
    pub call_threshold: u32,
    /// The server-to-client inline threshold, which bounds the Replies a responder sends in the
    /// forward direction: the smaller of the server's Send Size and the client's Receive Size
    /// (RFC 8797 §4.2).
    pub reply_threshold: u32,
    /// Whether the responder MAY use RDMA Send with Invalidate for RPC Replies: only when both
    /// peers set R. When either clears it the responder MUST use only RDMA Send (RFC 8797 §4.1).
    /// This covers forward-direction Replies only; backward-direction Replies use plain RDMA Send
    /// (checklist G-12).
    pub remote_invalidation: bool,
}

impl Negotiated {
    /// The properties of a connection on which neither side sent usable private data: 1024 octets
    /// each way and no remote invalidation (RFC 8797 §5.1, RFC 8166 §3.3.3).
    pub const DEFAULT: Negotiated = Negotiated {
        call_threshold: DEFAULT_INLINE_THRESHOLD,
        reply_threshold: DEFAULT_INLINE_THRESHOLD,
        remote_invalidation: false,
    };

    /// The inline threshold for messages the side in `role` sends.
    pub const fn send_threshold(&self, role: Role) -> u32 {
        match role {
            Role::Client => self.call_threshold,
            Role::Server => self.reply_threshold,
        }
    }

    /// The inline threshold for messages the side in `role` receives.
    pub const fn receive_threshold(&self, role: Role) -> u32 {
        self.send_threshold(role.peer())
    }
}

impl Default for Negotiated {
    /// [`Negotiated::DEFAULT`].
    fn default() -> Self {
        Negotiated::DEFAULT
    }
}

impl fmt::Display for Negotiated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client-to-server inline threshold {}, server-to-client inline threshold {}, remote \
             invalidation {}",
            self.call_threshold,
            self.reply_threshold,
            if self.remote_invalidation {
                "allowed"
            } else {
                "not allowed"
            }
        )
    }
}

/// The thresholds and remote-invalidation permission for a connection, from the private data of
/// both ends (RFC 8797 §4.1, §4.2).
///
/// Each side is first taken as its peer sees it ([`PrivateData::as_received`]): sizes as encoded
/// on the wire, and the defaults for data whose Version is not 1. Both ends therefore compute the
/// same result even when a side's own values are not multiples of 1024, which matters because the
/// requester and the responder must agree on the reply threshold (RFC 8166 §3.3.3, §4.3.3).
pub fn negotiate(client: &PrivateData, server: &PrivateData) -> Negotiated {
    let client = client.as_received();
    let server = server.as_received();
    Negotiated {
        call_threshold: client.send_size.min(server.receive_size),
        reply_threshold: server.send_size.min(client.receive_size),
        remote_invalidation: client.remote_invalidation && server.remote_invalidation,
    }
}

/// The local side's view of [`negotiate`]: `local` is what the side in `role` sent, `peer_bytes`
/// the raw CM private data it received. Absent or invalid peer data counts as
/// [`PrivateData::DEFAULT`] (RFC 8797 §5.1, §5.2).
pub fn negotiate_with_peer(role: Role, local: &PrivateData, peer_bytes: &[u8]) -> Negotiated {
    let peer = parse(peer_bytes).effective();
    match role {
        Role::Client => negotiate(local, &peer),
        Role::Server => negotiate(&peer, local),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Send 4096, Receive 4096, R = 1 (checklist B.7 example).
    const EXAMPLE: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];

    fn present(data: PrivateData, offset: usize) -> Parsed {
        Parsed::Present { data, offset }
    }

    fn pd(send_size: u32, receive_size: u32, remote_invalidation: bool) -> PrivateData {
        PrivateData {
            version: 1,
            remote_invalidation,
            send_size,
            receive_size,
        }
    }

    #[test]
    fn constants_match_the_rfc() {
        assert_eq!(FORMAT_IDENTIFIER_BYTES, [0xf6, 0xab, 0x0e, 0x18]);
        assert_eq!(VERSION, 1);
        assert_eq!(ENCODED_LEN, 8);
        assert_eq!(MIN_SIZE, 1024);
        assert_eq!(MAX_SIZE, 262_144);
        assert_eq!(DEFAULT_INLINE_THRESHOLD, 1024);
        assert_eq!(R_BIT | RESERVED_MASK, 0xff);
        assert_eq!(R_BIT & RESERVED_MASK, 0);
    }

    #[test]
    fn example_4096_4096_r_encodes_and_parses() {
        let data = PrivateData::new(4096, 4096, true);
        assert_eq!(data, pd(4096, 4096, true));
        assert_eq!(data.encode(), EXAMPLE);
        assert_eq!(parse(&EXAMPLE), present(data, 0));
    }

    #[test]
    fn defaults_encode_as_all_zero_fields() {
        let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0x00];
        assert_eq!(PrivateData::new(1024, 1024, false).encode(), bytes);
        assert_eq!(PrivateData::DEFAULT.encode(), bytes);
        assert_eq!(PrivateData::default(), PrivateData::DEFAULT);
        assert_eq!(parse(&bytes), present(pd(1024, 1024, false), 0));
    }

    #[test]
    fn maximum_size_encodes_as_ff() {
        let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0xff];
        assert_eq!(PrivateData::new(262_144, 262_144, false).encode(), bytes);
        assert_eq!(parse(&bytes), present(pd(262_144, 262_144, false), 0));
        // Send and Receive are separate octets, in that order.
        let bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0x00];
        assert_eq!(PrivateData::new(262_144, 1024, false).encode(), bytes);
        assert_eq!(parse(&bytes), present(pd(262_144, 1024, false), 0));
    }

    #[test]
    fn reserved_bits_are_ignored_on_input() {
        let all_set = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0xff, 0x03, 0x07];
        assert_eq!(parse(&all_set), present(pd(4096, 8192, true), 0));
        let reserved_only = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0xfe, 0x00, 0x01];
        assert_eq!(parse(&reserved_only), present(pd(1024, 2048, false), 0));
        let top_bit = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x80, 0x00, 0x00];
        assert_eq!(parse(&top_bit), present(pd(1024, 1024, false), 0));
        // Re-encoding clears them.
        assert_eq!(parse(&all_set).effective().encode()[5], 0x01);
        assert_eq!(parse(&reserved_only).effective().encode()[5], 0x00);
    }

    #[test]
    fn identifier_at_unaligned_offset() {
        let buf = [
            0x00, 0x11, 0x22, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03,
        ];
        assert_eq!(parse(&buf), present(pd(4096, 4096, true), 3));
        // Trailing octets after the eight are ignored.
        let buf = [
            0x00, 0x11, 0x22, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x01, 0x00, 0xde, 0xad,
        ];
        assert_eq!(parse(&buf), present(pd(2048, 1024, false), 3));
    }

    #[test]
    fn identifier_with_seven_octets_is_truncated() {
        let seven = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03];
        let parsed = parse(&seven);
        assert_eq!(
            parsed,
            Parsed::Absent(AbsentReason::Truncated { offset: 0 })
        );
        assert_eq!(parsed.effective(), PrivateData::DEFAULT);
        let prefixed = [0x99, 0x98, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03];
        assert_eq!(
            parse(&prefixed),
            Parsed::Absent(AbsentReason::Truncated { offset: 2 })
        );
        // The identifier alone, with no Version octet.
        assert_eq!(
            parse(&FORMAT_IDENTIFIER_BYTES),
            Parsed::Absent(AbsentReason::Truncated { offset: 0 })
        );
    }

    #[test]
    fn unknown_version_is_absent() {
        let v2 = [0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x03];
        let parsed = parse(&v2);
        assert_eq!(parsed, Parsed::Absent(AbsentReason::UnknownVersion(2)));
        assert_eq!(parsed.effective(), PrivateData::DEFAULT);
        let v0 = [0xf6, 0xab, 0x0e, 0x18, 0x00, 0x01, 0x03, 0x03];
        assert_eq!(parse(&v0), Parsed::Absent(AbsentReason::UnknownVersion(0)));
        // A future version may be shorter or longer than eight octets: the Version decides, so
        // five octets with version 2 are an unknown version, not a truncation.
        let short_v2 = [0xf6, 0xab, 0x0e, 0x18, 0x02];
        assert_eq!(
            parse(&short_v2),
            Parsed::Absent(AbsentReason::UnknownVersion(2))
        );
    }

    #[test]
    fn empty_buffer() {
        let parsed = parse(&[]);
        assert_eq!(parsed, Parsed::Absent(AbsentReason::Empty));
        assert_eq!(parsed.effective(), PrivateData::DEFAULT);
        assert!(!parsed.is_present());
        assert_eq!(parsed.present(), None);
    }

    #[test]
    fn no_identifier() {
        let none = Parsed::Absent(AbsentReason::NoFormatIdentifier);
        assert_eq!(parse(&[0u8; 56]), none);
        // Three of the four identifier octets.
        assert_eq!(parse(&[0xf6, 0xab, 0x0e, 0x01, 0x00, 0x03, 0x03]), none);
        assert_eq!(parse(&[0x00, 0xf6, 0xab, 0x0e]), none);
        // The identifier in little-endian order is not the identifier.
        assert_eq!(
            parse(&[0x18, 0x0e, 0xab, 0xf6, 0x01, 0x00, 0x00, 0x00]),
            none
        );
        assert_eq!(parse(&[0x42]).effective(), PrivateData::DEFAULT);
    }

    /// A 56-octet buffer (the most rdma_cm carries in an InfiniBand connect request) whose first
    /// four octets are MPA-like IRD/ORD data (RFC 6581 §7.1).
    #[test]
    fn fifty_six_octets_with_mpa_like_prefix() {
        let mut buf = [0u8; 56];
        buf[..4].copy_from_slice(&[0x80, 0x10, 0x40, 0x10]);
        buf[4..12].copy_from_slice(&[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x1f, 0x0f]);
        assert_eq!(parse(&buf), present(pd(32_768, 16_384, true), 4));

        // The same data in the last eight octets: the search reaches the very end.
        let mut buf = [0xa5u8; 56];
        buf[48..].copy_from_slice(&EXAMPLE);
        assert_eq!(parse(&buf), present(pd(4096, 4096, true), 48));

        // One octet further and it no longer fits.
        let mut buf = [0xa5u8; 56];
        buf[49..].copy_from_slice(&EXAMPLE[..7]);
        assert_eq!(
            parse(&buf),
            Parsed::Absent(AbsentReason::Truncated { offset: 49 })
        );
    }

    #[test]
    fn failing_candidate_does_not_hide_a_later_valid_one() {
        // Version 2 at offset 0, valid version 1 at offset 8.
        let buf = [
            0xf6, 0xab, 0x0e, 0x18, 0x02, 0x00, 0x00, 0x00, //
            0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x01, 0x02,
        ];
        assert_eq!(parse(&buf), present(pd(2048, 3072, false), 8));
        // Back to back: the first candidate's Version octet is the next identifier's first octet.
        let buf = [
            0xf6, 0xab, 0x0e, 0x18, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x00,
        ];
        assert_eq!(parse(&buf), present(pd(1024, 1024, true), 4));
        let all: Vec<Candidate> = candidates(&buf).collect();
        assert_eq!(
            all,
            vec![
                Candidate {
                    offset: 0,
                    result: Err(AbsentReason::UnknownVersion(0xf6)),
                },
                Candidate {
                    offset: 4,
                    result: Ok(pd(1024, 1024, true)),
                },
            ]
        );
    }

    #[test]
    fn first_valid_candidate_wins() {
        let buf = [
            0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0x00, //
            0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0xff, 0xff,
        ];
        assert_eq!(parse(&buf), present(pd(1024, 1024, false), 0));
        assert_eq!(candidates(&buf).count(), 2);
    }

    #[test]
    fn first_failure_is_reported_when_none_is_valid() {
        let buf = [
            0xf6, 0xab, 0x0e, 0x18, 0x02, 0x00, 0x00, 0x00, //
            0xf6, 0xab, 0x0e, 0x18, 0x01,
        ];
        assert_eq!(parse(&buf), Parsed::Absent(AbsentReason::UnknownVersion(2)));
        let all: Vec<Candidate> = candidates(&buf).collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].offset, 8);
        assert!(matches!(all[1].result, Err(AbsentReason::Truncated { .. })));
    }

    #[test]
    fn size_boundaries_encode() {
        let table: [(u32, u8, u32); 13] = [
            (0, 0, 1024),
            (1, 0, 1024),
            (1023, 0, 1024),
            (1024, 0, 1024),
            (1025, 0, 1024),
            (2047, 0, 1024),
            (2048, 1, 2048),
            (4096, 3, 4096),
            (262_143, 254, 261_120),
            (262_144, 255, 262_144),
            (262_145, 255, 262_144),
            (263_168, 255, 262_144),
            (u32::MAX, 255, 262_144),
        ];
        for (bytes, code, seen) in table {
            assert_eq!(encode_size(bytes), code, "encode_size({bytes})");
            assert_eq!(advertisable_size(bytes), seen, "advertisable_size({bytes})");
        }
    }

    #[test]
    fn size_boundaries_decode() {
        assert_eq!(decode_size(0), 1024);
        assert_eq!(decode_size(1), 2048);
        assert_eq!(decode_size(3), 4096);
        assert_eq!(decode_size(254), 261_120);
        assert_eq!(decode_size(255), 262_144);
        for v in 0..=u8::MAX {
            assert_eq!(encode_size(decode_size(v)), v);
        }
    }

    #[test]
    fn new_rounds_sizes_to_what_the_peer_sees() {
        let data = PrivateData::new(5000, 300_000, false);
        assert_eq!(data, pd(4096, 262_144, false));
        assert_eq!(PrivateData::new(0, 1023, true), pd(1024, 1024, true));
        // Fields set directly are rounded by encode.
        let raw = pd(5000, 2047, true);
        assert_eq!(
            raw.encode(),
            [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x00]
        );
        assert_eq!(raw.as_received(), pd(4096, 1024, true));
        // A version other than 1 is written as held, and a v1 receiver ignores it.
        let v2 = PrivateData { version: 2, ..raw };
        assert_eq!(v2.encode()[4], 2);
        assert_eq!(v2.as_received(), PrivateData::DEFAULT);
    }

    #[test]
    fn encode_into_checks_the_buffer() {
        let data = PrivateData::new(4096, 4096, true);
        let mut small = [0u8; 7];
        assert_eq!(
            data.encode_into(&mut small),
            Err(EncodeError::BufferTooSmall {
                needed: 8,
                available: 7
            })
        );
        assert_eq!(small, [0u8; 7]);
        let mut exact = [0u8; 8];
        assert_eq!(data.encode_into(&mut exact), Ok(8));
        assert_eq!(exact, EXAMPLE);
        let mut large = [0xeeu8; 12];
        assert_eq!(data.encode_into(&mut large), Ok(8));
        assert_eq!(&large[..8], &EXAMPLE);
        assert_eq!(&large[8..], &[0xee; 4]);
    }

    #[test]
    fn negotiation_table() {
        // (client send, client receive, client R, server send, server receive, server R)
        //   -> (call threshold, reply threshold, remote invalidation)
        type Row = ((u32, u32, bool), (u32, u32, bool), (u32, u32, bool));
        let table: [Row; 8] = [
            (
                (1024, 1024, false),
                (1024, 1024, false),
                (1024, 1024, false),
            ),
            ((4096, 4096, true), (4096, 4096, true), (4096, 4096, true)),
            ((4096, 4096, true), (4096, 4096, false), (4096, 4096, false)),
            ((4096, 4096, false), (4096, 4096, true), (4096, 4096, false)),
            // Each direction takes the sender's Send Size against the receiver's Receive Size.
            ((8192, 2048, true), (65_536, 4096, true), (4096, 2048, true)),
            (
                (2048, 65_536, false),
                (4096, 32_768, false),
                (2048, 4096, false),
            ),
            (
                (262_144, 262_144, true),
                (1024, 1024, true),
                (1024, 1024, true),
            ),
            (
                (262_144, 262_144, false),
                (262_144, 1024, false),
                (1024, 262_144, false),
            ),
        ];
        for ((cs, cr, cri), (ss, sr, sri), (call, reply, ri)) in table {
            let client = PrivateData::new(cs, cr, cri);
            let server = PrivateData::new(ss, sr, sri);
            let expected = Negotiated {
                call_threshold: call,
                reply_threshold: reply,
                remote_invalidation: ri,
            };
            assert_eq!(negotiate(&client, &server), expected, "{client} / {server}");
            assert_eq!(expected.send_threshold(Role::Client), call);
            assert_eq!(expected.receive_threshold(Role::Client), reply);
            assert_eq!(expected.send_threshold(Role::Server), reply);
            assert_eq!(expected.receive_threshold(Role::Server), call);
        }
    }

    #[test]
    fn negotiation_uses_wire_values() {
        // 5000 is advertised as 4096, so both ends use 4096.
        let client = pd(5000, 5000, false);
        let server = pd(8192, 8192, false);
        let n = negotiate(&client, &server);
        assert_eq!((n.call_threshold, n.reply_threshold), (4096, 4096));
    }

    #[test]
    fn negotiate_with_peer_from_raw_bytes() {
        let local_client = PrivateData::new(8192, 16_384, true);
        // Server: send 32768 (0x1f), receive 4096 (0x03), R = 1.
        let server_bytes = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x1f, 0x03];
        assert_eq!(
            negotiate_with_peer(Role::Client, &local_client, &server_bytes),
            Negotiated {
                call_threshold: 4096,
                reply_threshold: 16_384,
                remote_invalidation: true,
            }
        );
        let local_server = PrivateData::new(32_768, 4096, true);
        assert_eq!(
            negotiate_with_peer(Role::Server, &local_server, &local_client.encode()),
            negotiate_with_peer(Role::Client, &local_client, &server_bytes)
        );
    }

    #[test]
    fn absent_or_invalid_peer_data_means_defaults() {
        let local = PrivateData::new(65_536, 65_536, true);
        let inputs: [&[u8]; 4] = [
            &[],
            &[0u8; 56],
            &[0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0xff, 0xff],
            &[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0xff],
        ];
        for bytes in inputs {
            for role in [Role::Client, Role::Server] {
                assert_eq!(
                    negotiate_with_peer(role, &local, bytes),
                    Negotiated::DEFAULT,
                    "{role:?} {bytes:02x?}"
                );
            }
        }
        assert_eq!(Negotiated::default(), Negotiated::DEFAULT);
        assert_eq!(
            negotiate(&PrivateData::DEFAULT, &PrivateData::DEFAULT),
            Negotiated::DEFAULT
        );
    }

    #[test]
    fn descriptions_cite_the_rfc() {
        let reasons = [
            AbsentReason::Empty,
            AbsentReason::NoFormatIdentifier,
            AbsentReason::UnknownVersion(2),
            AbsentReason::Truncated { offset: 3 },
        ];
        let mut names = Vec::new();
        for reason in reasons {
            assert!(reason.describe().contains("RFC 8797 §5."), "{reason:?}");
            assert_eq!(Parsed::Absent(reason).describe(), reason.describe());
            assert!(!reason.to_string().is_empty());
            names.push(reason.name());
        }
        assert_eq!(
            names,
            [
                "empty",
                "no-format-identifier",
                "unknown-version",
                "truncated"
            ]
        );
        assert!(parse(&EXAMPLE).describe().contains("RFC 8797 §4"));
        assert_eq!(
            AbsentReason::UnknownVersion(7).to_string(),
            "unknown private data version 7"
        );
        assert_eq!(
            AbsentReason::Truncated { offset: 9 }.to_string(),
            "private data at offset 9 needs 8 octets but the buffer ends first"
        );
        assert_eq!(
            PrivateData::new(4096, 2048, true).to_string(),
            "version 1, send size 4096, receive size 2048, remote invalidation supported"
        );
    }

    fn valid_data() -> impl Strategy<Value = PrivateData> {
        (any::<u8>(), any::<u8>(), any::<bool>())
            .prop_map(|(s, r, ri)| pd(decode_size(s), decode_size(r), ri))
    }

    proptest! {
        #[test]
        fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
            let parsed = parse(&buf);
            if let Parsed::Present { data, offset } = parsed {
                prop_assert!(offset + ENCODED_LEN <= buf.len());
                prop_assert_eq!(&buf[offset..offset + 4], &FORMAT_IDENTIFIER_BYTES[..]);
                prop_assert_eq!(data.version, VERSION);
            }
            let _ = parsed.effective();
            let _ = parsed.describe();
        }

        #[test]
        fn parse_never_panics_with_identifiers(
            pieces in proptest::collection::vec(
                prop_oneof![
                    Just(FORMAT_IDENTIFIER_BYTES.to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..6),
                    proptest::collection::vec(0u8..3, 0..3),
                ],
                0..12,
            )
        ) {
            let buf: Vec<u8> = pieces.concat();
            let parsed = parse(&buf);
            let first_ok = candidates(&buf).find(|c| c.result.is_ok());
            match (parsed, first_ok) {
                (Parsed::Present { data, offset }, Some(c)) => {
                    prop_assert_eq!(offset, c.offset);
                    prop_assert_eq!(Ok(data), c.result);
                }
                (Parsed::Absent(_), None) => {}
                (p, c) => prop_assert!(false, "parse {:?} but candidates {:?}", p, c),
            }
        }

        #[test]
        fn encode_then_parse_is_identity(
            data in valid_data(),
            prefix in proptest::collection::vec(any::<u8>().prop_filter("no 0xf6", |b| *b != 0xf6), 0..48),
            suffix in proptest::collection::vec(any::<u8>(), 0..48),
        ) {
            let encoded = data.encode();
            prop_assert_eq!(encoded[5] & RESERVED_MASK, 0);
            prop_assert_eq!(parse(&encoded), present(data, 0));
            let mut buf = prefix.clone();
            buf.extend_from_slice(&encoded);
            buf.extend_from_slice(&suffix);
            prop_assert_eq!(parse(&buf), present(data, prefix.len()));
            prop_assert_eq!(data.as_received(), data);
        }

        #[test]
        fn encode_size_never_over_advertises(bytes in any::<u32>()) {
            let seen = advertisable_size(bytes);
            prop_assert!((MIN_SIZE..=MAX_SIZE).contains(&seen));
            prop_assert_eq!(seen % SIZE_UNIT, 0);
            if bytes >= MIN_SIZE {
                prop_assert!(seen <= bytes);
            }
            if (MIN_SIZE..=MAX_SIZE).contains(&bytes) {
                prop_assert!(bytes - seen < SIZE_UNIT);
            }
        }

        #[test]
        fn both_ends_agree(
            cs in any::<u32>(), cr in any::<u32>(), cri in any::<bool>(),
            ss in any::<u32>(), sr in any::<u32>(), sri in any::<bool>(),
        ) {
            let client = pd(cs, cr, cri);
            let server = pd(ss, sr, sri);
            let at_client = negotiate_with_peer(Role::Client, &client, &server.encode());
            let at_server = negotiate_with_peer(Role::Server, &server, &client.encode());
            prop_assert_eq!(at_client, at_server);
            prop_assert_eq!(at_client, negotiate(&client, &server));
            prop_assert!(at_client.call_threshold >= MIN_SIZE);
            prop_assert!(at_client.reply_threshold >= MIN_SIZE);
            prop_assert_eq!(at_client.remote_invalidation, cri && sri);
        }
    }
}
