//! Searching a received private-data buffer for the Format Identifier at any offset (RFC 8797
//! §5.2) and deciding what to behave as when nothing usable is found (§5.1; checklist G-11).

use core::fmt;

use super::{
    decode_size, PrivateData, ENCODED_LEN, FLAGS_OFFSET, FORMAT_IDENTIFIER_BYTES,
    RECEIVE_SIZE_OFFSET, R_BIT, SEND_SIZE_OFFSET, VERSION, VERSION_OFFSET,
};

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
