//! Encoding a version 2 transport header into a caller-provided buffer (\[V2\] §3, §5, §6).

use super::props::Property;
use super::{flags, Htype, RdmaError, PREFIX_LEN, RPCRDMA_VERSION_TWO};
use crate::error::EncodeError;
use crate::header::Chunks;
use crate::xdr::XdrWriter;

/// What follows the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'s> {
    /// RDMA2_MSG: `rdma_inv_handle` and the lists; the RPC message follows in the same Send.
    Msg {
        /// The handle the responder may invalidate (one of the chunks'), 0 for none.
        inv_handle: u32,
        /// The lists.
        chunks: Chunks<'s>,
    },
    /// RDMA2_NOMSG: `rdma_inv_handle` and the lists; the RPC message is in a chunk.
    NoMsg {
        /// As for [`Body::Msg`].
        inv_handle: u32,
        /// The lists.
        chunks: Chunks<'s>,
    },
    /// RDMA2_ERROR.
    Error(RdmaError),
    /// RDMA2_CONNPROP.
    ConnProp(&'s [Property<'s>]),
}

impl Body<'_> {
    /// The header type this body encodes.
    pub fn htype(&self) -> Htype {
        match self {
            Body::Msg { .. } => Htype::Msg,
            Body::NoMsg { .. } => Htype::NoMsg,
            Body::Error(_) => Htype::Error,
            Body::ConnProp(_) => Htype::ConnProp,
        }
    }

    fn len(&self) -> usize {
        match self {
            Body::Msg { chunks, .. } | Body::NoMsg { chunks, .. } => 4 + chunks.encoded_len(),
            Body::Error(e) => e.message_len() - PREFIX_LEN,
            Body::ConnProp(props) => Property::list_len(props),
        }
    }
}

/// A version 2 transport header to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'s> {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers`: 2, except in an RDMA2_ERROR, which echoes the failing message's
    /// (\[V2\] §5.3.3).
    pub vers: u32,
    /// `rdma_credit`: a request, or a grant with RPCRDMA2_F_RESPONSE.
    pub credit: u32,
    /// `rdma_flags`.
    pub flags: u32,
    /// The header type and its body.
    pub body: Body<'s>,
}

impl<'s> Header<'s> {
    /// A Call (either direction): RDMA2_MSG, or RDMA2_NOMSG when `external` (the Call in a
    /// Position-Zero Read chunk); the flags clear (\[V2\] §3.2: the XID is the sender's).
    pub fn call(
        xid: u32,
        credit: u32,
        inv_handle: u32,
        chunks: Chunks<'s>,
        external: bool,
    ) -> Self {
        Header {
            xid,
            vers: RPCRDMA_VERSION_TWO,
            credit,
            flags: 0,
            body: if external {
                Body::NoMsg { inv_handle, chunks }
            } else {
                Body::Msg { inv_handle, chunks }
            },
        }
    }

    /// A Reply (either direction): RDMA2_MSG, or RDMA2_NOMSG when `external` (in the Reply
    /// chunk), with RPCRDMA2_F_RESPONSE (the XID is the receiver's, `grant` a grant).
    pub fn reply(xid: u32, grant: u32, chunks: Chunks<'s>, external: bool) -> Self {
        Header {
            flags: flags::RESPONSE,
            ..Header::call(xid, grant, 0, chunks, external)
        }
    }

    /// An RDMA2_ERROR about the message `xid` of version `vers` (both echoed), with the
    /// connection's grant and RPCRDMA2_F_RESPONSE (\[V2\] §5.3.3).
    pub fn error(xid: u32, vers: u32, grant: u32, err: RdmaError) -> Self {
        Header {
            xid,
            vers,
            credit: grant,
            flags: flags::RESPONSE,
            body: Body::Error(err),
        }
    }

    /// An RDMA2_CONNPROP with `props` (\[V2\] §5.3.4).
    pub fn connprop(xid: u32, credit: u32, props: &'s [Property<'s>]) -> Self {
        Header {
            xid,
            vers: RPCRDMA_VERSION_TWO,
            credit,
            flags: 0,
            body: Body::ConnProp(props),
        }
    }

    /// Exact encoded size in bytes, computed without encoding.
    pub fn encoded_len(&self) -> usize {
        PREFIX_LEN + self.body.len()
    }

    /// Encodes the header at the start of `out` and returns its length; fails without
    /// writing anything when `out` is shorter than [`Header::encoded_len`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let needed = self.encoded_len();
        if out.len() < needed {
            return Err(EncodeError::BufferTooSmall {
                needed,
                available: out.len(),
            });
        }
        let mut w = XdrWriter::new(out);
        for v in [
            self.xid,
            self.vers,
            self.credit,
            self.body.htype().to_u32(),
            self.flags,
        ] {
            w.put_u32(v)?;
        }
        match &self.body {
            Body::Msg { inv_handle, chunks } | Body::NoMsg { inv_handle, chunks } => {
                w.put_u32(*inv_handle)?;
                chunks.encode(&mut w)?;
            }
            Body::Error(e) => {
                w.put_u32(e.code())?;
                let (words, n) = e.arm();
                for v in &words[..n] {
                    w.put_u32(*v)?;
                }
            }
            Body::ConnProp(props) => Property::encode_list(props, &mut w)?,
        }
        debug_assert_eq!(w.position(), needed);
        Ok(needed)
    }
}
