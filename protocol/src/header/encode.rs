//! Encoding a transport header into a caller-provided buffer (RFC 8166 §4.1.2, §4.7).

use super::{Proc, RdmaError, ReadSegment, Segment, FIXED_PREFIX_LEN, RPCRDMA_VERSION};
use crate::error::EncodeError;
use crate::xdr::{Words, XdrWriter};

/// The three chunk lists of an RDMA_MSG, RDMA_NOMSG or RDMA_MSGP header, borrowed from the
/// caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chunks<'s> {
    /// The read list, in list order; segments of one Read chunk share a position.
    pub reads: &'s [ReadSegment],
    /// The write list: one slice of segments per Write chunk (an empty slice is an empty chunk,
    /// RFC 8166 §4.3.2.3).
    pub writes: &'s [&'s [Segment]],
    /// The reply chunk, or `None` when absent.
    pub reply: Option<&'s [Segment]>,
}

impl Chunks<'_> {
    /// No chunks at all: the lists of a Short message.
    pub const NONE: Chunks<'static> = Chunks {
        reads: &[],
        writes: &[],
        reply: None,
    };

    /// Encoded size of the three lists (RFC 8166 §4.7):
    /// `4 + 24·R` + `4 + Σ(8 + 16·nᵢ)` + (`4` or `8 + 16·m`).
    pub fn encoded_len(&self) -> usize {
        let reads = 4 + self.reads.len() * 24;
        let writes = 4 + self.writes.iter().map(|c| 8 + 16 * c.len()).sum::<usize>();
        let reply = match self.reply {
            None => 4,
            Some(c) => 8 + 16 * c.len(),
        };
        reads + writes + reply
    }

    /// [`encode`](Self::encode) into a cursor over a buffer already checked to hold
    /// [`encoded_len`](Self::encoded_len) bytes.
    #[inline]
    pub(crate) fn put_words(&self, w: &mut Words<'_>) {
        for rs in self.reads {
            w.put(1);
            w.put(rs.position);
            put_segment_word(w, &rs.segment);
        }
        w.put(0);
        for chunk in self.writes {
            w.put(1);
            w.put(chunk.len() as u32);
            chunk.iter().for_each(|s| put_segment_word(w, s));
        }
        w.put(0);
        match self.reply {
            None => w.put(0),
            Some(c) => {
                w.put(1);
                w.put(c.len() as u32);
                c.iter().for_each(|s| put_segment_word(w, s));
            }
        }
    }

    pub(crate) fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        for rs in self.reads {
            w.put_u32(1)?;
            w.put_u32(rs.position)?;
            put_segment(w, &rs.segment)?;
        }
        w.put_u32(0)?;
        for chunk in self.writes {
            w.put_u32(1)?;
            put_segments(w, chunk)?;
        }
        w.put_u32(0)?;
        match self.reply {
            None => w.put_u32(0),
            Some(c) => {
                w.put_u32(1)?;
                put_segments(w, c)
            }
        }
    }
}

/// What follows the fixed prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'s> {
    /// RDMA_MSG: the lists, then the Payload stream in the same Send.
    Msg(Chunks<'s>),
    /// RDMA_NOMSG: the lists only; one of them holds the Payload stream.
    NoMsg(Chunks<'s>),
    /// RDMA_MSGP (deprecated; encodable only so that tests can send it to peers).
    Msgp {
        /// `rdma_align`.
        align: u32,
        /// `rdma_thresh`.
        thresh: u32,
        /// The lists.
        chunks: Chunks<'s>,
    },
    /// RDMA_DONE (deprecated; encodable only for tests).
    Done,
    /// RDMA_ERROR.
    Error(RdmaError),
}

impl Body<'_> {
    /// The procedure this body encodes.
    pub fn proc(&self) -> Proc {
        match self {
            Body::Msg(_) => Proc::Msg,
            Body::NoMsg(_) => Proc::NoMsg,
            Body::Msgp { .. } => Proc::Msgp,
            Body::Done => Proc::Done,
            Body::Error(_) => Proc::Error,
        }
    }
}

/// A transport header to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'s> {
    /// `rdma_xid`: MUST equal the RPC message's XID (RFC 8166 §4.2.1).
    pub xid: u32,
    /// `rdma_vers`: 1 for every message this crate builds, except an RDMA_ERROR, which echoes
    /// the failing message's version (§4.5).
    pub vers: u32,
    /// `rdma_credit`: requested credits in a Call, granted credits in a Reply (§4.2.3).
    pub credit: u32,
    /// The procedure and its body.
    pub body: Body<'s>,
}

impl<'s> Header<'s> {
    /// An RDMA_MSG header (version 1).
    pub fn msg(xid: u32, credit: u32, chunks: Chunks<'s>) -> Self {
        Header {
            xid,
            vers: RPCRDMA_VERSION,
            credit,
            body: Body::Msg(chunks),
        }
    }

    /// An RDMA_NOMSG header (version 1).
    pub fn nomsg(xid: u32, credit: u32, chunks: Chunks<'s>) -> Self {
        Header {
            xid,
            vers: RPCRDMA_VERSION,
            credit,
            body: Body::NoMsg(chunks),
        }
    }

    /// An RDMA_ERROR answering a message with `xid` and version `vers` (both echoed, RFC 8166
    /// §4.5).
    pub fn error(xid: u32, vers: u32, credit: u32, err: RdmaError) -> Self {
        Header {
            xid,
            vers,
            credit,
            body: Body::Error(err),
        }
    }

    /// Exact encoded size in bytes, computed without encoding.
    pub fn encoded_len(&self) -> usize {
        FIXED_PREFIX_LEN
            + match &self.body {
                Body::Msg(c) | Body::NoMsg(c) => c.encoded_len(),
                Body::Msgp { chunks, .. } => 8 + chunks.encoded_len(),
                Body::Done => 0,
                Body::Error(e) => e.message_len() - FIXED_PREFIX_LEN,
            }
    }

    /// Encodes the header at the start of `out` and returns its length.
    ///
    /// Fails without writing anything when `out` is shorter than [`Header::encoded_len`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let needed = self.encoded_len();
        if out.len() < needed {
            return Err(EncodeError::BufferTooSmall {
                needed,
                available: out.len(),
            });
        }
        let mut w = XdrWriter::new(out);
        w.put_u32(self.xid)?;
        w.put_u32(self.vers)?;
        w.put_u32(self.credit)?;
        w.put_u32(self.body.proc().to_u32())?;
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => c.encode(&mut w)?,
            Body::Msgp {
                align,
                thresh,
                chunks,
            } => {
                w.put_u32(*align)?;
                w.put_u32(*thresh)?;
                chunks.encode(&mut w)?;
            }
            Body::Done => {}
            Body::Error(e) => {
                w.put_u32(e.code())?;
                if let RdmaError::Vers { low, high } = e {
                    w.put_u32(*low)?;
                    w.put_u32(*high)?;
                }
            }
        }
        debug_assert_eq!(w.position(), needed);
        Ok(needed)
    }
}

#[inline(always)]
fn put_segment_word(w: &mut Words<'_>, s: &Segment) {
    w.put(s.handle);
    w.put(s.length);
    w.put_u64(s.offset);
}

fn put_segment(w: &mut XdrWriter<'_>, s: &Segment) -> Result<(), EncodeError> {
    w.put_u32(s.handle)?;
    w.put_u32(s.length)?;
    w.put_u64(s.offset)
}

fn put_segments(w: &mut XdrWriter<'_>, segs: &[Segment]) -> Result<(), EncodeError> {
    w.put_u32(segs.len() as u32)?;
    segs.iter().try_for_each(|s| put_segment(w, s))
}
