//! Zero-copy decoding of a received transport header (RFC 8166 §4.1.2, §4.7).

use super::{
    errcode, Proc, RdmaError, ReadSegment, Segment, FIXED_PREFIX_LEN, MIN_HEADER_LEN,
    READ_SEGMENT_LEN, RPCRDMA_VERSION, SEGMENT_LEN,
};
use crate::error::DecodeError;
use crate::xdr::XdrReader;
use core::fmt;

/// The four words every RPC-over-RDMA version shares at the same offsets (RFC 8166 §4.2, §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedHeader {
    /// `rdma_xid`: the RPC transaction ID (§4.2.1).
    pub xid: u32,
    /// `rdma_vers`: the header version (§4.2.2).
    pub vers: u32,
    /// `rdma_credit`: credits requested (in a Call) or granted (in a Reply) (§4.2.3).
    pub credit: u32,
    /// `rdma_proc` as received; see [`FixedHeader::proc`].
    pub proc_raw: u32,
}

impl FixedHeader {
    /// Decodes the fixed prefix from the first 16 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<FixedHeader, DecodeError> {
        let mut r = XdrReader::new(buf);
        Ok(FixedHeader {
            xid: r.u32()?,
            vers: r.u32()?,
            credit: r.u32()?,
            proc_raw: r.u32()?,
        })
    }

    /// The procedure, when `proc_raw` is one of the five defined values.
    pub fn proc(&self) -> Option<Proc> {
        Proc::from_u32(self.proc_raw)
    }
}

/// A decoded read list: the entries, borrowed from the receive buffer (RFC 8166 §4.3.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadList<'a> {
    /// The entries, each `1 P H L OO` (24 bytes), without the terminating zero.
    bytes: &'a [u8],
}

const READ_ENTRY_LEN: usize = 4 + READ_SEGMENT_LEN;

impl<'a> ReadList<'a> {
    /// Decodes a read list at the reader's position, consuming it and its terminator.
    ///
    /// The loop is driven by the bytes present: each entry consumes 24 bytes.
    pub fn parse(r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        let start = r.position();
        while r.optional()? {
            r.skip(READ_SEGMENT_LEN)?;
        }
        let end = r.position() - 4;
        Ok(ReadList {
            bytes: &r.input()[start..end],
        })
    }

    /// Number of read segments.
    pub fn len(&self) -> usize {
        self.bytes.len() / READ_ENTRY_LEN
    }

    /// `true` when the list holds no read segment.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The `i`-th read segment.
    pub fn get(&self, i: usize) -> Option<ReadSegment> {
        let at = i.checked_mul(READ_ENTRY_LEN)?;
        let e = self.bytes.get(at + 4..at + READ_ENTRY_LEN)?;
        Some(ReadSegment {
            position: be32(&e[0..4]),
            segment: segment_at(&e[4..]),
        })
    }

    /// The read segments in list order.
    pub fn iter(&self) -> ReadListIter<'a> {
        ReadListIter { list: *self, i: 0 }
    }

    /// Encoded size of the list including its terminator.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len() + 4
    }
}

impl<'a> IntoIterator for ReadList<'a> {
    type Item = ReadSegment;
    type IntoIter = ReadListIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over the read segments of a [`ReadList`].
#[derive(Clone, Debug)]
pub struct ReadListIter<'a> {
    list: ReadList<'a>,
    i: usize,
}

impl Iterator for ReadListIter<'_> {
    type Item = ReadSegment;
    fn next(&mut self) -> Option<ReadSegment> {
        let s = self.list.get(self.i)?;
        self.i += 1;
        Some(s)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.list.len() - self.i;
        (n, Some(n))
    }
}

impl ExactSizeIterator for ReadListIter<'_> {}

/// A decoded counted array of segments: one Write chunk, or the Reply chunk (RFC 8166 §4.3.2,
/// §4.3.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segments<'a> {
    /// The segments, 16 bytes each, without the count.
    bytes: &'a [u8],
}

impl<'a> Segments<'a> {
    /// Decodes a counted array of segments (count, then HLOO each) at the reader's position.
    pub fn parse(r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        let n = r.array_len(SEGMENT_LEN, u32::MAX)? as usize;
        Ok(Segments {
            bytes: r.take(n * SEGMENT_LEN)?,
        })
    }

    /// Number of segments (the array's count).
    pub fn len(&self) -> usize {
        self.bytes.len() / SEGMENT_LEN
    }

    /// `true` for a chunk of zero segments (an "empty" Write chunk, RFC 8166 §4.3.2.3).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The `i`-th segment.
    pub fn get(&self, i: usize) -> Option<Segment> {
        let at = i.checked_mul(SEGMENT_LEN)?;
        self.bytes.get(at..at + SEGMENT_LEN).map(segment_at)
    }

    /// The segments in array order.
    pub fn iter(&self) -> SegmentsIter<'a> {
        SegmentsIter { segs: *self, i: 0 }
    }

    /// Sum of the segment lengths, in 64 bits so that it cannot overflow.
    pub fn total_len(&self) -> u64 {
        self.iter().map(|s| s.length as u64).sum()
    }

    /// Encoded size: the count plus 16 bytes per segment.
    pub fn encoded_len(&self) -> usize {
        4 + self.bytes.len()
    }
}

impl<'a> IntoIterator for Segments<'a> {
    type Item = Segment;
    type IntoIter = SegmentsIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over the segments of a [`Segments`] array.
#[derive(Clone, Debug)]
pub struct SegmentsIter<'a> {
    segs: Segments<'a>,
    i: usize,
}

impl Iterator for SegmentsIter<'_> {
    type Item = Segment;
    fn next(&mut self) -> Option<Segment> {
        let s = self.segs.get(self.i)?;
        self.i += 1;
        Some(s)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.segs.len() - self.i;
        (n, Some(n))
    }
}

impl ExactSizeIterator for SegmentsIter<'_> {}

/// A decoded write list: its Write chunks, borrowed from the receive buffer (RFC 8166 §4.3.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteList<'a> {
    /// The entries, each `1 N HLOO...`, without the terminating zero.
    bytes: &'a [u8],
    chunks: usize,
}

impl<'a> WriteList<'a> {
    /// Decodes a write list at the reader's position, consuming it and its terminator.
    pub fn parse(r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        let start = r.position();
        let mut chunks = 0;
        while r.optional()? {
            Segments::parse(r)?;
            chunks += 1;
        }
        let end = r.position() - 4;
        Ok(WriteList {
            bytes: &r.input()[start..end],
            chunks,
        })
    }

    /// The list whose entries are `bytes`, one chunk of one segment (`1 1 H L O O`),
    /// checked by the caller.
    pub(crate) fn of_one_segment(bytes: &'a [u8]) -> Self {
        debug_assert_eq!(bytes.len(), 24);
        WriteList { bytes, chunks: 1 }
    }

    /// Number of Write chunks.
    pub fn len(&self) -> usize {
        self.chunks
    }

    /// `true` when the list holds no Write chunk.
    pub fn is_empty(&self) -> bool {
        self.chunks == 0
    }

    /// The Write chunks in list order.
    pub fn iter(&self) -> WriteListIter<'a> {
        WriteListIter {
            bytes: self.bytes,
            at: 0,
            left: self.chunks,
        }
    }

    /// Encoded size of the list including its terminator.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len() + 4
    }

    /// The encoded entries as received (for each chunk `1`, its segment count `N` and `N`
    /// segments of 16 bytes: handle, length, offset), without the terminating zero: what a
    /// Reply echoing the list copies before it sets the lengths
    /// ([`echo_write_list`](crate::chunks::echo_write_list)).
    pub fn entries(&self) -> &'a [u8] {
        self.bytes
    }
}

impl<'a> IntoIterator for WriteList<'a> {
    type Item = Segments<'a>;
    type IntoIter = WriteListIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over the Write chunks of a [`WriteList`].
#[derive(Clone, Debug)]
pub struct WriteListIter<'a> {
    /// The list's entries, validated by [`WriteList::parse`].
    bytes: &'a [u8],
    /// Where the next entry (its discriminator) starts.
    at: usize,
    left: usize,
}

impl<'a> Iterator for WriteListIter<'a> {
    type Item = Segments<'a>;
    #[inline]
    fn next(&mut self) -> Option<Segments<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The entries were validated by `WriteList::parse` (discriminator 1, a count the
        // bytes hold): read in place, each range still checked.
        let start = self.at + 8;
        let n = be32(self.bytes.get(self.at + 4..start)?) as usize;
        let end = start.checked_add(n.checked_mul(SEGMENT_LEN)?)?;
        let bytes = self.bytes.get(start..end)?;
        self.at = end;
        Some(Segments { bytes })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for WriteListIter<'_> {}

/// Why a transport header could not be decoded as a version 1 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer bytes than the fixed prefix and the procedure's body need.
    Truncated(DecodeError),
    /// `rdma_vers` is not 1, so the body's layout is unknown (RFC 8166 §4.5.1).
    UnsupportedVersion {
        /// The version received.
        vers: u32,
    },
    /// `rdma_proc` is not one of the five defined values (RFC 8166 §4.5.2).
    UnknownProc {
        /// The value received.
        proc_raw: u32,
    },
    /// The body does not decode: a bad discriminator, a count larger than the input, an
    /// unknown error code (RFC 8166 §4.5.2).
    Malformed(DecodeError),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Truncated(e) => write!(f, "truncated header: {e}"),
            HeaderError::UnsupportedVersion { vers } => {
                write!(f, "unsupported RPC-over-RDMA version {vers}")
            }
            HeaderError::UnknownProc { proc_raw } => write!(f, "unknown rdma_proc {proc_raw}"),
            HeaderError::Malformed(e) => write!(f, "malformed header: {e}"),
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

/// What follows the fixed prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body<'a> {
    Lists {
        reads: ReadList<'a>,
        writes: WriteList<'a>,
        reply: Option<Segments<'a>>,
        /// `(rdma_align, rdma_thresh)` of an RDMA_MSGP.
        padded: Option<(u32, u32)>,
        header_len: usize,
    },
    Done,
    Error(RdmaError),
}

/// What a version 2 RDMA2_MSG or RDMA2_NOMSG's header holds besides its chunk lists, as
/// `v2::HeaderView::chunk_view` hands it to [`HeaderView::from_v2`] (\[V2\] §3.2, §3.3).
#[derive(Clone, Copy, Debug)]
pub(crate) struct V2MessageFields {
    /// `rdma_xid`.
    pub(crate) xid: u32,
    /// `rdma_vers`: 2.
    pub(crate) vers: u32,
    /// `rdma_credit`.
    pub(crate) credit: u32,
    /// RDMA2_NOMSG rather than RDMA2_MSG.
    pub(crate) nomsg: bool,
    /// `rdma_flags`.
    pub(crate) flags: u32,
    /// `rdma_inv_handle`.
    pub(crate) inv_handle: u32,
}

/// A version 1 transport header decoded in place.
///
/// Decoding validates the whole structure once; the accessors and iterators then cannot fail
/// and do not allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderView<'a> {
    buf: &'a [u8],
    fixed: FixedHeader,
    proc: Proc,
    body: Body<'a>,
    /// Version 2's `rdma_flags` and `rdma_inv_handle` when this view holds the chunk lists of
    /// a version 2 RDMA2_MSG or RDMA2_NOMSG (`vers` 2; see [`HeaderView::parse_any`]); zero
    /// for version 1.
    v2: (u32, u32),
}

impl<'a> HeaderView<'a> {
    /// Decodes the header at the start of `buf`.
    ///
    /// An RDMA_ERROR carrying ERR_VERS decodes whatever its `rdma_vers` (the error's layout is
    /// "fixed for all versions", RFC 8166 §4.1.2, and a responder echoes the failing version,
    /// §4.5); every other body requires version 1. The 28-byte minimum of §4.5 is receive-path
    /// policy and is applied by [`crate::verdict`], not here.
    pub fn parse(buf: &'a [u8]) -> Result<Self, HeaderError> {
        let fixed = FixedHeader::parse(buf).map_err(HeaderError::Truncated)?;
        let mut r = XdrReader::at(buf, FIXED_PREFIX_LEN);
        if fixed.proc_raw == Proc::Error.to_u32() {
            let at = r.position();
            let code = r.u32().map_err(HeaderError::Truncated)?;
            let err = match code {
                errcode::ERR_VERS => RdmaError::Vers {
                    low: r.u32().map_err(HeaderError::Truncated)?,
                    high: r.u32().map_err(HeaderError::Truncated)?,
                },
                errcode::ERR_CHUNK if fixed.vers == RPCRDMA_VERSION => RdmaError::Chunk,
                _ if fixed.vers != RPCRDMA_VERSION => {
                    return Err(HeaderError::UnsupportedVersion { vers: fixed.vers })
                }
                value => {
                    return Err(HeaderError::Malformed(DecodeError::InvalidDiscriminant {
                        offset: at,
                        value,
                    }))
                }
            };
            return Ok(HeaderView {
                buf,
                fixed,
                proc: Proc::Error,
                body: Body::Error(err),
                v2: (0, 0),
            });
        }
        if fixed.vers != RPCRDMA_VERSION {
            return Err(HeaderError::UnsupportedVersion { vers: fixed.vers });
        }
        let proc = fixed.proc().ok_or(HeaderError::UnknownProc {
            proc_raw: fixed.proc_raw,
        })?;
        let body = match proc {
            Proc::Done => Body::Done,
            Proc::Msg | Proc::NoMsg | Proc::Msgp => {
                let padded = if proc == Proc::Msgp {
                    let align = r.u32().map_err(classify)?;
                    let thresh = r.u32().map_err(classify)?;
                    Some((align, thresh))
                } else {
                    None
                };
                let reads = ReadList::parse(&mut r).map_err(classify)?;
                let writes = WriteList::parse(&mut r).map_err(classify)?;
                let reply = if r.optional().map_err(classify)? {
                    Some(Segments::parse(&mut r).map_err(classify)?)
                } else {
                    None
                };
                Body::Lists {
                    reads,
                    writes,
                    reply,
                    padded,
                    header_len: r.position(),
                }
            }
            Proc::Error => unreachable!("handled above"),
        };
        Ok(HeaderView {
            buf,
            fixed,
            proc,
            body,
            v2: (0, 0),
        })
    }

    /// The view of a version 2 RDMA2_MSG or RDMA2_NOMSG already decoded by
    /// [`crate::v2::HeaderView`]: its fields beside the lists (`fields`), its chunk lists
    /// and its header's length.
    pub(crate) fn from_v2(
        buf: &'a [u8],
        fields: V2MessageFields,
        lists: (ReadList<'a>, WriteList<'a>, Option<Segments<'a>>),
        header_len: usize,
    ) -> Self {
        let V2MessageFields {
            xid,
            vers,
            credit,
            nomsg,
            flags,
            inv_handle,
        } = fields;
        let proc = if nomsg { Proc::NoMsg } else { Proc::Msg };
        HeaderView {
            buf,
            fixed: FixedHeader {
                xid,
                vers,
                credit,
                proc_raw: proc.to_u32(),
            },
            proc,
            body: Body::Lists {
                reads: lists.0,
                writes: lists.1,
                reply: lists.2,
                padded: None,
                header_len,
            },
            v2: (flags, inv_handle),
        }
    }

    /// Version 2's `rdma_flags` (0 in version 1).
    pub fn flags(&self) -> u32 {
        self.v2.0
    }

    /// Version 2's `rdma_inv_handle`: the handle the responder may invalidate with its
    /// reply, 0 for none (\[V2\] §3.3; always 0 in version 1).
    pub fn inv_handle(&self) -> u32 {
        self.v2.1
    }

    /// The header of a bare RDMA_MSG, decided from its first seven words alone: version 1,
    /// `rdma_proc` RDMA_MSG and the read list, write list and reply chunk all absent (three
    /// zero discriminators), as every Short Call and Short Reply without chunks carries
    /// (RFC 8166 §4.2, §4.3). Returns exactly what [`HeaderView::parse`] returns for such a
    /// message, and `None` for every other message (including those shorter than 28 bytes),
    /// which [`HeaderView::parse`] then decodes.
    #[inline]
    pub fn parse_bare_msg(buf: &'a [u8]) -> Option<Self> {
        let w: &[u8; MIN_HEADER_LEN] = buf.get(..MIN_HEADER_LEN)?.try_into().ok()?;
        let word = |i: usize| be32(&w[4 * i..]);
        // Words 4, 5, 6: read list, write list and reply chunk discriminators.
        if word(1) != RPCRDMA_VERSION
            || word(3) != Proc::Msg.to_u32()
            || (word(4) | word(5) | word(6)) != 0
        {
            return None;
        }
        Some(HeaderView::msg_with_reads(
            buf,
            (word(0), word(2)),
            ReadList::default(),
            MIN_HEADER_LEN,
        ))
    }

    /// The view of a version 1 RDMA_MSG with `(rdma_xid, rdma_credit)`, the Read list
    /// `reads`, no Write list and no Reply chunk, its header `header_len` bytes long: what
    /// the fixed-layout readers above found.
    #[inline(always)]
    fn msg_with_reads(
        buf: &'a [u8],
        (xid, credit): (u32, u32),
        reads: ReadList<'a>,
        header_len: usize,
    ) -> Self {
        HeaderView {
            buf,
            fixed: FixedHeader {
                xid,
                vers: RPCRDMA_VERSION,
                credit,
                proc_raw: Proc::Msg.to_u32(),
            },
            proc: Proc::Msg,
            body: Body::Lists {
                reads,
                writes: WriteList::default(),
                reply: None,
                padded: None,
                header_len,
            },
            v2: (0, 0),
        }
    }

    /// Where [`parse_one_read_msg`](Self::parse_one_read_msg)'s header ends: the fixed
    /// prefix, one Read list entry and its terminator, the empty Write list and the absent
    /// Reply chunk.
    pub const ONE_READ_MSG_LEN: usize = FIXED_PREFIX_LEN + READ_ENTRY_LEN + 3 * 4;

    /// The view [`parse`](Self::parse) gives of a version 1 RDMA_MSG whose Read list is one
    /// entry and whose Write list and Reply chunk are absent (how an NFS WRITE arrives,
    /// RFC 8267 §4.3), read from its fixed layout in one bounds check; `None` for any other
    /// message (decided by nothing: parse it).
    #[inline]
    pub fn parse_one_read_msg(buf: &'a [u8]) -> Option<Self> {
        const LEN: usize = HeaderView::ONE_READ_MSG_LEN;
        let w: &[u8; LEN] = buf.get(..LEN)?.try_into().ok()?;
        let word = |i: usize| be32(&w[4 * i..]);
        // Word 4: one Read list entry (its discriminator); words 10, 11, 12: the list's
        // terminator, the Write list's and the Reply chunk's discriminators.
        if word(1) != RPCRDMA_VERSION
            || word(3) != Proc::Msg.to_u32()
            || word(4) != 1
            || (word(10) | word(11) | word(12)) != 0
        {
            return None;
        }
        let reads = ReadList {
            bytes: &buf[FIXED_PREFIX_LEN..FIXED_PREFIX_LEN + READ_ENTRY_LEN],
        };
        Some(HeaderView::msg_with_reads(
            buf,
            (word(0), word(2)),
            reads,
            LEN,
        ))
    }

    /// The fixed prefix.
    pub fn fixed(&self) -> FixedHeader {
        self.fixed
    }

    /// `rdma_xid`.
    pub fn xid(&self) -> u32 {
        self.fixed.xid
    }

    /// `rdma_vers`.
    pub fn vers(&self) -> u32 {
        self.fixed.vers
    }

    /// `rdma_credit`: the request in a Call, the grant in a Reply.
    pub fn credit(&self) -> u32 {
        self.fixed.credit
    }

    /// The procedure.
    pub fn proc(&self) -> Proc {
        self.proc
    }

    /// The read list (empty for procedures without lists).
    pub fn read_list(&self) -> ReadList<'a> {
        match self.body {
            Body::Lists { reads, .. } => reads,
            _ => ReadList::default(),
        }
    }

    /// The write list (empty for procedures without lists).
    pub fn write_list(&self) -> WriteList<'a> {
        match self.body {
            Body::Lists { writes, .. } => writes,
            _ => WriteList::default(),
        }
    }

    /// The reply chunk, when present.
    pub fn reply_chunk(&self) -> Option<Segments<'a>> {
        match self.body {
            Body::Lists { reply, .. } => reply,
            _ => None,
        }
    }

    /// `(rdma_align, rdma_thresh)` of an RDMA_MSGP.
    pub fn padded(&self) -> Option<(u32, u32)> {
        match self.body {
            Body::Lists { padded, .. } => padded,
            _ => None,
        }
    }

    /// The error of an RDMA_ERROR.
    pub fn error(&self) -> Option<RdmaError> {
        match self.body {
            Body::Error(e) => Some(e),
            _ => None,
        }
    }

    /// Length of the Transport stream (the header) in bytes.
    pub fn header_len(&self) -> usize {
        match self.body {
            Body::Lists { header_len, .. } => header_len,
            Body::Done => FIXED_PREFIX_LEN,
            Body::Error(e) => e.message_len(),
        }
    }

    /// The inline Payload stream: the bytes after the header of an RDMA_MSG or RDMA_MSGP. Empty
    /// for the other procedures, whose Sends carry no payload (RFC 8166 §4.2.4).
    pub fn payload(&self) -> &'a [u8] {
        match (self.proc, self.body) {
            (Proc::Msg | Proc::Msgp, Body::Lists { header_len, .. }) => &self.buf[header_len..],
            _ => &[],
        }
    }

    /// The whole received message.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
}

#[inline]
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
fn segment_at(b: &[u8]) -> Segment {
    let mut off = [0u8; 8];
    off.copy_from_slice(&b[8..16]);
    Segment {
        handle: be32(&b[0..4]),
        length: be32(&b[4..8]),
        offset: u64::from_be_bytes(off),
    }
}
