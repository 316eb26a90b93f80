//! Encoding a version 2 transport header into a caller-provided buffer (\[V2\] §3, §5, §6).

use super::props::Property;
use super::{flags, Error2, Htype, PREFIX_LEN, RPCRDMA_VERSION_TWO};
use crate::error::EncodeError;
use crate::header::Chunks;
use crate::xdr::XdrWriter;

/// What follows the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body2<'s> {
    /// RDMA2_MSG: `rdma_inv_handle` and the lists; the RPC message follows in the same Send.
    Msg {
        /// The handle the responder may invalidate (one of the chunks'), 0 for none.
        inv_handle: u32,
        /// The lists.
        chunks: Chunks<'s>,
    },
    /// RDMA2_NOMSG: `rdma_inv_handle` and the lists; the RPC message is in a chunk.
    NoMsg {
        /// As for [`Body2::Msg`].
        inv_handle: u32,
        /// The lists.
        chunks: Chunks<'s>,
    },
    /// RDMA2_ERROR.
    Error(Error2),
    /// RDMA2_CONNPROP.
    ConnProp(&'s [Property<'s>]),
}

impl Body2<'_> {
    /// The header type this body encodes.
    pub fn htype(&self) -> Htype {
        match self {
            Body2::Msg { .. } => Htype::Msg,
            Body2::NoMsg { .. } => Htype::NoMsg,
            Body2::Error(_) => Htype::Error,
            Body2::ConnProp(_) => Htype::ConnProp,
        }
    }

    fn len(&self) -> usize {
        match self {
            Body2::Msg { chunks, .. } | Body2::NoMsg { chunks, .. } => 4 + chunks.encoded_len(),
            Body2::Error(e) => e.message_len() - PREFIX_LEN,
            Body2::ConnProp(props) => Property::list_len(props),
        }
    }
}

/// A version 2 transport header to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header2<'s> {
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
    pub body: Body2<'s>,
}

impl<'s> Header2<'s> {
    /// A Call (either direction): RDMA2_MSG, or RDMA2_NOMSG when `external` (the Call in a
    /// Position-Zero Read chunk); the flags clear (\[V2\] §3.2: the XID is the sender's).
    pub fn call(
        xid: u32,
        credit: u32,
        inv_handle: u32,
        chunks: Chunks<'s>,
        external: bool,
    ) -> Self {
        Header2 {
            xid,
            vers: RPCRDMA_VERSION_TWO,
            credit,
            flags: 0,
            body: if external {
                Body2::NoMsg { inv_handle, chunks }
            } else {
                Body2::Msg { inv_handle, chunks }
            },
        }
    }

    /// A Reply (either direction): RDMA2_MSG, or RDMA2_NOMSG when `external` (in the Reply
    /// chunk), with RPCRDMA2_F_RESPONSE (the XID is the receiver's, `grant` a grant).
    pub fn reply(xid: u32, grant: u32, chunks: Chunks<'s>, external: bool) -> Self {
        Header2 {
            flags: flags::RESPONSE,
            ..Header2::call(xid, grant, 0, chunks, external)
        }
    }

    /// An RDMA2_ERROR about the message `xid` of version `vers` (both echoed), with the
    /// connection's grant and RPCRDMA2_F_RESPONSE (\[V2\] §5.3.3).
    pub fn error(xid: u32, vers: u32, grant: u32, err: Error2) -> Self {
        Header2 {
            xid,
            vers,
            credit: grant,
            flags: flags::RESPONSE,
            body: Body2::Error(err),
        }
    }

    /// An RDMA2_CONNPROP with `props` (\[V2\] §5.3.4).
    pub fn connprop(xid: u32, credit: u32, props: &'s [Property<'s>]) -> Self {
        Header2 {
            xid,
            vers: RPCRDMA_VERSION_TWO,
            credit,
            flags: 0,
            body: Body2::ConnProp(props),
        }
    }

    /// Exact encoded size in bytes, computed without encoding.
    pub fn encoded_len(&self) -> usize {
        PREFIX_LEN + self.body.len()
    }

    /// Encodes the header at the start of `out` and returns its length; fails without
    /// writing anything when `out` is shorter than [`Header2::encoded_len`].
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
            Body2::Msg { inv_handle, chunks } | Body2::NoMsg { inv_handle, chunks } => {
                w.put_u32(*inv_handle)?;
                chunks.encode(&mut w)?;
            }
            Body2::Error(e) => {
                w.put_u32(e.code())?;
                let (words, n) = e.arm();
                for v in &words[..n] {
                    w.put_u32(*v)?;
                }
            }
            Body2::ConnProp(props) => Property::encode_list(props, &mut w)?,
        }
        debug_assert_eq!(w.position(), needed);
        Ok(needed)
    }
}
