//! Decoding a version 2 transport header in place (\[V2\] §3, §5, §6).

use core::fmt;

use super::props::{PropError, Props};
use super::{flags, Htype, RdmaError, PREFIX_LEN, RPCRDMA_VERSION_TWO};
use crate::error::DecodeError;
use crate::header::{ReadList, Segments, WriteList, FIXED_PREFIX_LEN};
use crate::xdr::XdrReader;

/// Why a message could not be decoded as a version 2 header. Each maps to one answer of
/// the receive path ([`super::verdict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer bytes than the prefix and the header type's body need.
    Truncated(DecodeError),
    /// `rdma_vers` is not 2.
    NotVersion2 {
        /// The version received.
        vers: u32,
    },
    /// `rdma_htype` is none of the four header types (\[V2\] §5.2).
    UnknownHtype {
        /// The value received.
        htype: u32,
    },
    /// Reserved `rdma_flags` bits are set (\[V2\] §3.2, §9.4; see the module's decisions).
    ReservedFlags {
        /// The whole flags word.
        flags: u32,
    },
    /// The body does not decode: a list discriminator other than 0 or 1, a count larger
    /// than the message.
    Malformed(DecodeError),
    /// The property list of an RDMA2_CONNPROP is refused (\[V2\] §4.1).
    Props(PropError),
    /// `rdma_inv_handle` is not zero and names none of the header's handles (\[V2\] §3.3;
    /// CHECKLIST G-13 e).
    InvHandle {
        /// The handle named.
        handle: u32,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Truncated(e) => write!(f, "truncated version 2 header: {e}"),
            HeaderError::NotVersion2 { vers } => write!(f, "rdma_vers {vers} is not 2"),
            HeaderError::UnknownHtype { htype } => write!(f, "unknown rdma_htype {htype}"),
            HeaderError::ReservedFlags { flags } => {
                write!(f, "reserved rdma_flags bits set: {flags:#010x}")
            }
            HeaderError::Malformed(e) => write!(f, "malformed version 2 header: {e}"),
            HeaderError::Props(e) => write!(f, "{e}"),
            HeaderError::InvHandle { handle } => {
                write!(
                    f,
                    "rdma_inv_handle {handle:#x} names no handle of the header"
                )
            }
        }
    }
}

impl std::error::Error for HeaderError {}

fn classify(e: DecodeError) -> HeaderError {
    match e {
        DecodeError::Truncated { .. } => HeaderError::Truncated(e),
        _ => HeaderError::Malformed(e),
    }
}

/// What follows the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewBody<'a> {
    /// RDMA2_MSG and RDMA2_NOMSG: `rpcrdma2_chunk_lists`.
    Chunks {
        /// `rdma_inv_handle`: the handle the responder may invalidate, 0 for none.
        inv_handle: u32,
        /// The read list.
        reads: ReadList<'a>,
        /// The write list.
        writes: WriteList<'a>,
        /// The reply chunk.
        reply: Option<Segments<'a>>,
        /// Bytes of the header.
        header_len: usize,
    },
    /// RDMA2_ERROR.
    Error(RdmaError),
    /// RDMA2_CONNPROP.
    ConnProp(Props<'a>),
}

/// A version 2 transport header decoded in place: the structure is validated once, then the
/// accessors cannot fail and do not allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderView<'a> {
    buf: &'a [u8],
    xid: u32,
    vers: u32,
    credit: u32,
    htype: Htype,
    flags: u32,
    body: ViewBody<'a>,
    /// An ERR_VERS in version 1's fixed layout (no flags word).
    v1_layout: bool,
}

#[inline]
fn word(b: &[u8], i: usize) -> Option<u32> {
    b.get(4 * i..4 * i + 4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

impl<'a> HeaderView<'a> {
    /// Decodes the header at the start of `buf`.
    ///
    /// A 28-byte RDMA_ERROR whose fifth word is ERR_VERS (1) is decoded in version 1's fixed
    /// layout whatever its `rdma_vers`: what a version 1 responder answers a version 2 Call
    /// with (RFC 8166 §4.5.1, §7; CHECKLIST G-13 a). A version 2 RDMA2_ERR_VERS is 32 bytes;
    /// the version 2 errors of 28 bytes (RPCRDMA2_F_RESPONSE in word 4 too) have a code
    /// with a one-word arm in word 5 (4, 5, 6 or 8), which as a version 1 ERR_VERS would be
    /// a lowest supported version of 4 or more: those are read as version 2.
    pub fn parse(buf: &'a [u8]) -> Result<Self, HeaderError> {
        let mut r = XdrReader::new(buf);
        let mut next = || r.u32().map_err(HeaderError::Truncated);
        let (xid, vers, credit, htype_raw) = (next()?, next()?, next()?, next()?);
        if htype_raw == Htype::Error.to_u32()
            && buf.len() == 28
            && word(buf, 4) == Some(super::errcode::VERS)
            && word(buf, 5).is_none_or(|c| RdmaError::arm_words(c) != 1)
        {
            return Ok(HeaderView {
                buf,
                xid,
                vers,
                credit,
                htype: Htype::Error,
                flags: 0,
                body: ViewBody::Error(RdmaError::Vers {
                    low: word(buf, 5).unwrap_or(0),
                    high: word(buf, 6).unwrap_or(0),
                }),
                v1_layout: true,
            });
        }
        if vers != RPCRDMA_VERSION_TWO {
            return Err(HeaderError::NotVersion2 { vers });
        }
        let htype =
            Htype::from_u32(htype_raw).ok_or(HeaderError::UnknownHtype { htype: htype_raw })?;
        let mut r = XdrReader::at(buf, FIXED_PREFIX_LEN);
        let flags = r.u32().map_err(HeaderError::Truncated)?;
        if flags & !flags::KNOWN != 0 {
            return Err(HeaderError::ReservedFlags { flags });
        }
        let body = match htype {
            Htype::Msg | Htype::NoMsg => {
                let inv_handle = r.u32().map_err(HeaderError::Truncated)?;
                let reads = ReadList::parse(&mut r).map_err(classify)?;
                let writes = WriteList::parse(&mut r).map_err(classify)?;
                let reply = if r.optional().map_err(classify)? {
                    Some(Segments::parse(&mut r).map_err(classify)?)
                } else {
                    None
                };
                let named = |h: u32| {
                    reads.iter().any(|s| s.segment.handle == h)
                        || writes.iter().any(|c| c.iter().any(|s| s.handle == h))
                        || reply.is_some_and(|c| c.iter().any(|s| s.handle == h))
                };
                if inv_handle != 0 && !named(inv_handle) {
                    return Err(HeaderError::InvHandle { handle: inv_handle });
                }
                ViewBody::Chunks {
                    inv_handle,
                    reads,
                    writes,
                    reply,
                    header_len: r.position(),
                }
            }
            Htype::Error => {
                let code = r.u32().map_err(HeaderError::Truncated)?;
                let arm = RdmaError::arm_words(code);
                let mut words = [0u32; 2];
                for w in words.iter_mut().take(arm) {
                    *w = r.u32().map_err(HeaderError::Truncated)?;
                }
                // Every word of the arm was read: the error is made.
                let err =
                    RdmaError::from_code(code, &words[..arm]).unwrap_or(RdmaError::Other { code });
                ViewBody::Error(err)
            }
            Htype::ConnProp => ViewBody::ConnProp(Props::parse(&mut r).map_err(|e| match e {
                PropError::Xdr(d) => classify(d),
                other => HeaderError::Props(other),
            })?),
        };
        Ok(HeaderView {
            buf,
            xid,
            vers,
            credit,
            htype,
            flags,
            body,
            v1_layout: false,
        })
    }

    /// `rdma_xid`.
    pub fn xid(&self) -> u32 {
        self.xid
    }

    /// `rdma_vers` (2, or what a version 1 ERR_VERS echoed).
    pub fn vers(&self) -> u32 {
        self.vers
    }

    /// `rdma_credit`: a request, or a grant when [`is_response`](Self::is_response).
    pub fn credit(&self) -> u32 {
        self.credit
    }

    /// The header type.
    pub fn htype(&self) -> Htype {
        self.htype
    }

    /// `rdma_flags` (0 for a version 1 ERR_VERS).
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// Whether RPCRDMA2_F_RESPONSE is set: the XID is one the receiver generated.
    pub fn is_response(&self) -> bool {
        self.flags & flags::RESPONSE != 0
    }

    /// Whether this is an ERR_VERS in version 1's fixed layout (a version 1 responder's
    /// answer to a version 2 Call).
    pub fn is_v1_err_vers(&self) -> bool {
        self.v1_layout
    }

    /// The body.
    pub fn body(&self) -> ViewBody<'a> {
        self.body
    }

    /// An RDMA2_MSG or RDMA2_NOMSG as a [`crate::header::HeaderView`] (`vers` 2, `proc` MSG
    /// or NOMSG, the same lists, [`flags`](crate::header::HeaderView::flags) and
    /// [`inv_handle`](crate::header::HeaderView::inv_handle)), so that code reading chunk
    /// lists serves both versions; `None` for the other header types.
    pub fn chunk_view(&self) -> Option<crate::header::HeaderView<'a>> {
        match self.body {
            ViewBody::Chunks {
                inv_handle,
                reads,
                writes,
                reply,
                header_len,
            } => Some(crate::header::HeaderView::from_v2(
                self.buf,
                crate::header::V2MessageFields {
                    xid: self.xid,
                    vers: RPCRDMA_VERSION_TWO,
                    credit: self.credit,
                    nomsg: self.htype == Htype::NoMsg,
                    flags: self.flags,
                    inv_handle,
                },
                (reads, writes, reply),
                header_len,
            )),
            _ => None,
        }
    }

    /// `rdma_inv_handle` of an RDMA2_MSG or RDMA2_NOMSG.
    pub fn inv_handle(&self) -> Option<u32> {
        match self.body {
            ViewBody::Chunks { inv_handle, .. } => Some(inv_handle),
            _ => None,
        }
    }

    /// The read list (empty without chunk lists).
    pub fn read_list(&self) -> ReadList<'a> {
        match self.body {
            ViewBody::Chunks { reads, .. } => reads,
            _ => ReadList::default(),
        }
    }

    /// The write list (empty without chunk lists).
    pub fn write_list(&self) -> WriteList<'a> {
        match self.body {
            ViewBody::Chunks { writes, .. } => writes,
            _ => WriteList::default(),
        }
    }

    /// The reply chunk, when present.
    pub fn reply_chunk(&self) -> Option<Segments<'a>> {
        match self.body {
            ViewBody::Chunks { reply, .. } => reply,
            _ => None,
        }
    }

    /// The error of an RDMA2_ERROR.
    pub fn error(&self) -> Option<RdmaError> {
        match self.body {
            ViewBody::Error(e) => Some(e),
            _ => None,
        }
    }

    /// The properties of an RDMA2_CONNPROP.
    pub fn props(&self) -> Option<Props<'a>> {
        match self.body {
            ViewBody::ConnProp(p) => Some(p),
            _ => None,
        }
    }

    /// Bytes of the transport header.
    pub fn header_len(&self) -> usize {
        match self.body {
            ViewBody::Chunks { header_len, .. } => header_len,
            ViewBody::Error(_) if self.v1_layout => 28,
            ViewBody::Error(e) => e.message_len(),
            ViewBody::ConnProp(p) => PREFIX_LEN + p.encoded_len(),
        }
    }

    /// The RPC message after an RDMA2_MSG header; empty for the other types.
    pub fn payload(&self) -> &'a [u8] {
        match (self.htype, self.body) {
            (Htype::Msg, ViewBody::Chunks { header_len, .. }) => &self.buf[header_len..],
            _ => &[],
        }
    }

    /// The whole message.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
}
