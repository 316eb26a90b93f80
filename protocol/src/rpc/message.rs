//! An RPC message header, `rpc_msg` switched on `msg_type` (RFC 5531 §9): a call or a reply,
//! and the `xid` and `mtype` read without decoding the rest.

use super::call::CallHeader;
use super::reply::ReplyHeader;
use super::wire::{bad_msg_type, read_prefix};
use super::{CALL, REPLY};
use crate::error::{DecodeError, EncodeError};
use crate::xdr::XdrReader;
use crate::xdr::{be32_at, fixed_at};

/// An RPC message header, `rpc_msg` switched on `msg_type` (RFC 5531 §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RpcMessage<'a> {
    /// A CALL.
    Call(CallHeader<'a>),
    /// A REPLY.
    Reply(ReplyHeader<'a>),
}

impl<'a> RpcMessage<'a> {
    /// Decodes the header of a call or a reply at the start of `buf` and returns it with the
    /// header's length (where the arguments or results start).
    ///
    /// An unknown `msg_type` is [`DecodeError::InvalidDiscriminant`] at offset 4.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let direct = match fixed_at::<4>(buf, 4).map(|m| be32_at(m, 0)) {
            Some(CALL) => CallHeader::parse_direct(buf).map(|(c, n)| (RpcMessage::Call(c), n)),
            Some(REPLY) => ReplyHeader::parse_direct(buf).map(|(r, n)| (RpcMessage::Reply(r), n)),
            _ => None,
        };
        match direct {
            Some(parsed) => Ok(parsed),
            None => Self::parse_reference(buf),
        }
    }

    /// The cursor-based decoder: the reference the direct ones agree with, and the source
    /// of the typed error for input they reject.
    #[cold]
    #[inline(never)]
    pub(super) fn parse_reference(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (mut r, xid, mtype) = read_prefix(buf)?;
        let msg = match mtype {
            CALL => RpcMessage::Call(CallHeader::decode_body(xid, &mut r)?),
            REPLY => RpcMessage::Reply(ReplyHeader::decode_body(xid, &mut r)?),
            value => return Err(bad_msg_type(value)),
        };
        Ok((msg, r.position()))
    }

    /// The `xid` of a message, read from its first four bytes without decoding the rest;
    /// `None` when `buf` is shorter than four bytes.
    pub fn peek_xid(buf: &[u8]) -> Option<u32> {
        XdrReader::new(buf).u32().ok()
    }

    /// The `mtype` word of a message (bytes 4 to 8) as received, without checking it; `None`
    /// when `buf` is shorter than eight bytes.
    pub fn peek_msg_type(buf: &[u8]) -> Option<u32> {
        XdrReader::at(buf, 4).u32().ok()
    }

    /// The transaction ID.
    pub const fn xid(&self) -> u32 {
        match self {
            RpcMessage::Call(c) => c.xid,
            RpcMessage::Reply(r) => r.xid,
        }
    }

    /// The `msg_type` wire value: [`CALL`] or [`REPLY`].
    pub const fn msg_type(&self) -> u32 {
        match self {
            RpcMessage::Call(_) => CALL,
            RpcMessage::Reply(_) => REPLY,
        }
    }

    /// The name RFC 5531 §9 gives the `msg_type`: `"CALL"` or `"REPLY"`.
    pub const fn name(&self) -> &'static str {
        match self {
            RpcMessage::Call(_) => "CALL",
            RpcMessage::Reply(_) => "REPLY",
        }
    }

    /// Exact encoded size of the header.
    pub const fn encoded_len(&self) -> usize {
        match self {
            RpcMessage::Call(c) => c.encoded_len(),
            RpcMessage::Reply(r) => r.encoded_len(),
        }
    }

    /// Encodes the header at the start of `out` and returns its length (see
    /// [`CallHeader::encode`] and [`ReplyHeader::encode`]).
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        match self {
            RpcMessage::Call(c) => c.encode(out),
            RpcMessage::Reply(r) => r.encode(out),
        }
    }
}
