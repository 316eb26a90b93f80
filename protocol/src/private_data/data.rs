//! The fields of RPC-over-RDMA version 1 CM Private Data, [`PrivateData`], and their eight-octet
//! encoding (RFC 8797 §4, §4.2; checklist G-10, G-11).

use core::fmt;

use super::{
    advertisable_size, encode_size, parse, DEFAULT_INLINE_THRESHOLD, ENCODED_LEN,
    FORMAT_IDENTIFIER_BYTES, R_BIT, VERSION,
};
use crate::error::EncodeError;

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
