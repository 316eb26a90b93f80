//! The RPC-over-RDMA version 1 transport header (RFC 8166 §4).
//!
//! [`HeaderView`] decodes a received header in place (zero copy, no allocation); [`Header`]
//! describes a header to send and encodes it into a caller-provided buffer after computing its
//! exact size. The list shapes follow the XDR of RFC 8166 §4.1.2:
//!
//! ```text
//! read list   1 PHLOO 1 PHLOO ... 0        (a position plus a segment per entry)
//! write list  1 N HLOO... 1 M HLOO... 0    (a counted array of segments per chunk)
//! reply chunk 0 | 1 N HLOO...              (one optional counted array)
//! ```

mod encode;
mod view;

pub use encode::{Body, Chunks, Header};
pub(crate) use view::V2MessageFields;
pub use view::{
    FixedHeader, HeaderError, HeaderView, ReadList, ReadListIter, Segments, SegmentsIter,
    WriteList, WriteListIter,
};

/// The version number of RPC-over-RDMA version 1 (RFC 8166 §4.2.2).
pub const RPCRDMA_VERSION: u32 = 1;
/// Size of the fixed prefix every version shares: xid, vers, credit, proc (RFC 8166 §4.2, §7).
pub const FIXED_PREFIX_LEN: usize = 16;
/// Size of the smallest v1 header: the fixed prefix and three empty lists (RFC 8166 §4.5).
pub const MIN_HEADER_LEN: usize = 28;
/// Size of an RDMA_ERROR carrying ERR_CHUNK (fixed prefix plus the error code).
pub const ERR_CHUNK_LEN: usize = 20;
/// Size of an RDMA_ERROR carrying ERR_VERS (fixed prefix, error code, low and high versions).
pub const ERR_VERS_LEN: usize = 28;
/// Encoded size of a plain segment, HLOO (RFC 8166 §4.7).
pub const SEGMENT_LEN: usize = 16;
/// Encoded size of a read segment, PHLOO (RFC 8166 §4.7).
pub const READ_SEGMENT_LEN: usize = 20;

/// The header's procedure, `rdma_proc` (RFC 8166 §4.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proc {
    /// RDMA_MSG (0): the Payload stream follows the Transport stream in the same Send.
    Msg,
    /// RDMA_NOMSG (1): the Payload stream travels in a chunk; nothing follows the header.
    NoMsg,
    /// RDMA_MSGP (2): deprecated padded message; senders MUST NOT send it (RFC 8166 §4.6.1).
    Msgp,
    /// RDMA_DONE (3): deprecated Read-Read acknowledgement; senders MUST NOT send it (§4.6.2).
    Done,
    /// RDMA_ERROR (4): a permanent transport error for the XID (RFC 8166 §4.5).
    Error,
}

impl Proc {
    /// The wire value.
    pub const fn to_u32(self) -> u32 {
        match self {
            Proc::Msg => 0,
            Proc::NoMsg => 1,
            Proc::Msgp => 2,
            Proc::Done => 3,
            Proc::Error => 4,
        }
    }

    /// The procedure for a wire value, if it is one of the five version 1 defines.
    pub const fn from_u32(v: u32) -> Option<Proc> {
        match v {
            0 => Some(Proc::Msg),
            1 => Some(Proc::NoMsg),
            2 => Some(Proc::Msgp),
            3 => Some(Proc::Done),
            4 => Some(Proc::Error),
            _ => None,
        }
    }

    /// The name RFC 8166 gives the procedure, e.g. `"RDMA_MSG"`.
    pub const fn name(self) -> &'static str {
        match self {
            Proc::Msg => "RDMA_MSG",
            Proc::NoMsg => "RDMA_NOMSG",
            Proc::Msgp => "RDMA_MSGP",
            Proc::Done => "RDMA_DONE",
            Proc::Error => "RDMA_ERROR",
        }
    }
}

/// The `rdma_err` codes of an RDMA_ERROR (RFC 8166 §4.5).
pub mod errcode {
    /// ERR_VERS: the responder does not support the header's version (§4.5.1).
    pub const ERR_VERS: u32 = 1;
    /// ERR_CHUNK: the header could not be parsed (§4.5.2).
    pub const ERR_CHUNK: u32 = 2;
}

/// The body of an RDMA_ERROR (RFC 8166 §4.1.2, `rpc_rdma_error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RdmaError {
    /// ERR_VERS with the inclusive range of versions the sender supports.
    Vers {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// ERR_CHUNK: the header could not be parsed.
    Chunk,
}

impl RdmaError {
    /// The `rdma_err` wire value.
    pub const fn code(self) -> u32 {
        match self {
            RdmaError::Vers { .. } => errcode::ERR_VERS,
            RdmaError::Chunk => errcode::ERR_CHUNK,
        }
    }

    /// Encoded size of the whole RDMA_ERROR message carrying this error.
    pub const fn message_len(self) -> usize {
        match self {
            RdmaError::Vers { .. } => ERR_VERS_LEN,
            RdmaError::Chunk => ERR_CHUNK_LEN,
        }
    }
}

/// A plain RDMA segment, `xdr_rdma_segment`: a steering tag, a length and an offset
/// (RFC 8166 §3.4.3, §4.1.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Segment {
    /// The steering tag (rkey) of the registered memory.
    pub handle: u32,
    /// Length of the segment in bytes.
    pub length: u32,
    /// Offset or address of the segment's first byte within the registration.
    pub offset: u64,
}

impl Segment {
    /// A segment from its three fields.
    pub const fn new(handle: u32, length: u32, offset: u64) -> Self {
        Segment {
            handle,
            length,
            offset,
        }
    }

    /// The address one past the segment's last byte, or `None` when `offset + length` wraps past
    /// 2^64 (such a segment cannot name real memory).
    pub const fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.length as u64)
    }
}

/// A read segment, `xdr_read_chunk`: a position in the unreduced Payload stream plus a segment
/// (RFC 8166 §3.4.5). A Read chunk is the run of read segments that share a position.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReadSegment {
    /// Byte offset in the unreduced Payload stream, starting at the RPC XID (Position zero).
    pub position: u32,
    /// The memory to read.
    pub segment: Segment,
}

impl ReadSegment {
    /// A read segment from its four fields.
    pub const fn new(position: u32, handle: u32, length: u32, offset: u64) -> Self {
        ReadSegment {
            position,
            segment: Segment::new(handle, length, offset),
        }
    }
}
