//! The Requester receiving a Reply: checking the Write list and Reply chunk it echoes against
//! what the Call provisioned (RFC 8166 §4.5; IMPL §3.9).

use crate::header::{Segment, Segments, WriteList};
use crate::xdr::{be32_at, pad4_u64};
use core::fmt;

/// Why the Write list or Reply chunk echoed in a Reply does not match what the Call provisioned.
///
/// These are errors in a Reply's header or in its use of chunks: the Requester silently discards
/// the Reply (RFC 8166 §4.5) and never exposes bytes that were not written. `chunk` is the Write
/// chunk's index in the Write list; it is 0 for the Reply chunk and for a chunk checked alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnedError {
    /// The Reply's Write list holds more chunks than the Call provided.
    ExtraChunks {
        /// Chunks the Call provided.
        provisioned: usize,
        /// Chunks the Reply holds.
        returned: usize,
    },
    /// The Reply carries a Reply chunk although the Call provided none.
    UnexpectedReplyChunk,
    /// A returned chunk's segment count differs from the provisioned one (and is not the legacy
    /// count zero, decision G-17).
    SegmentCount {
        /// Index of the chunk.
        chunk: usize,
        /// Segments provisioned.
        provisioned: usize,
        /// Segments returned.
        returned: usize,
    },
    /// A returned segment length exceeds the provisioned length: never trusted (decision G-17).
    TooLong {
        /// Index of the chunk.
        chunk: usize,
        /// Index of the segment.
        segment: usize,
        /// Length provisioned.
        provisioned: u32,
        /// Length returned.
        returned: u32,
    },
    /// The bytes returned in a chunk do not match the length of the item the Reply's XDR gives
    /// for it: fewer than the item, or more than the item rounded up to four (decision G-4).
    ItemLength {
        /// The item's encoded length, from the Reply's Payload stream.
        item_len: u32,
        /// The bytes the chunk returned.
        returned: u64,
    },
}

impl fmt::Display for ReturnedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReturnedError::ExtraChunks {
                provisioned,
                returned,
            } => write!(
                f,
                "reply returns {returned} Write chunks but the call provided {provisioned}"
            ),
            ReturnedError::UnexpectedReplyChunk => {
                write!(f, "reply returns a Reply chunk the call did not provide")
            }
            ReturnedError::SegmentCount {
                chunk,
                provisioned,
                returned,
            } => write!(
                f,
                "chunk {chunk} returns {returned} segments but {provisioned} were provisioned"
            ),
            ReturnedError::TooLong {
                chunk,
                segment,
                provisioned,
                returned,
            } => write!(
                f,
                "chunk {chunk} segment {segment} returns {returned} bytes but {provisioned} were provisioned"
            ),
            ReturnedError::ItemLength { item_len, returned } => write!(
                f,
                "chunk returns {returned} bytes for an item of {item_len} bytes"
            ),
        }
    }
}

impl std::error::Error for ReturnedError {}

/// The shape of a chunk returned in a Reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReturnedForm {
    /// Some bytes were returned.
    Filled,
    /// No byte was returned: the provisioned count with every length zero (§4.3.2.2), or the
    /// legacy count zero for a non-empty provisioned chunk (IMPL §3.9; decision G-17).
    Unused,
    /// The chunk was provisioned empty and returned empty (§4.3.2.3).
    Empty,
    /// The Reply does not return the chunk: its Write list stops early, or it omits the Reply
    /// chunk (decisions G-16, G-17). Treated as returning no byte.
    Absent,
}

/// A returned chunk that passed [`check_returned`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReturnedChunk {
    /// Its shape.
    pub form: ReturnedForm,
    /// Bytes returned: the sum of the returned segment lengths.
    pub total: u64,
}

impl ReturnedChunk {
    /// A chunk the Reply left out (decision G-17).
    pub const ABSENT: ReturnedChunk = ReturnedChunk {
        form: ReturnedForm::Absent,
        total: 0,
    };

    /// A returned chunk of `total` bytes: filled, or unused when none.
    fn of_total(total: u64) -> ReturnedChunk {
        let form = if total == 0 {
            ReturnedForm::Unused
        } else {
            ReturnedForm::Filled
        };
        ReturnedChunk { form, total }
    }

    /// Checks the returned bytes against the item's encoded length `item_len` read from the
    /// Reply's Payload stream and returns the bytes to expose: `item_len`.
    ///
    /// RFC 8166 requires the returned length to equal the item's (§3.4.6.2); RFC 5666 Responders
    /// add the roundup, so up to `roundup(item_len)` is tolerated (decision G-4). The pad bytes
    /// are never exposed (§2.2.4.2).
    pub fn item_len(&self, item_len: u32) -> Result<u32, ReturnedError> {
        let len = item_len as u64;
        if self.total < len || self.total > pad4_u64(len) {
            return Err(ReturnedError::ItemLength {
                item_len,
                returned: self.total,
            });
        }
        Ok(item_len)
    }
}

/// Checks one chunk echoed in a Reply against the segments the Call provisioned for it.
///
/// The returned count must equal the provisioned one, except that a legacy count of zero stands
/// for an unused chunk (IMPL §3.9; decision G-17); no returned segment may be longer than its
/// provisioned segment (decision G-17). Handles and offsets are not compared: the Requester
/// addresses its memory with its own copy of the segments and trusts only the lengths.
/// Errors name chunk 0; [`check_returned_write_list`] names the chunk's index.
pub fn check_returned(
    provisioned: &[Segment],
    returned: Segments<'_>,
) -> Result<ReturnedChunk, ReturnedError> {
    check_chunk(0, provisioned, returned)
}

fn check_chunk(
    chunk: usize,
    provisioned: &[Segment],
    returned: Segments<'_>,
) -> Result<ReturnedChunk, ReturnedError> {
    if returned.is_empty() {
        let form = if provisioned.is_empty() {
            ReturnedForm::Empty
        } else {
            ReturnedForm::Unused
        };
        return Ok(ReturnedChunk { form, total: 0 });
    }
    if returned.len() != provisioned.len() {
        return Err(ReturnedError::SegmentCount {
            chunk,
            provisioned: provisioned.len(),
            returned: returned.len(),
        });
    }
    let mut total = 0u64;
    for (segment, (r, p)) in returned.iter().zip(provisioned).enumerate() {
        if r.length > p.length {
            return Err(ReturnedError::TooLong {
                chunk,
                segment,
                provisioned: p.length,
                returned: r.length,
            });
        }
        total += r.length as u64;
    }
    Ok(ReturnedChunk::of_total(total))
}

/// Checks the Reply chunk slot of a Reply against the Reply chunk the Call provided.
///
/// A provided Reply chunk may come back echoed or absent (decision G-16); one that was not
/// provided must not come back. For a Long Reply, `total` is the length of the Payload stream in
/// the chunk.
pub fn check_returned_reply(
    provisioned: Option<&[Segment]>,
    returned: Option<Segments<'_>>,
) -> Result<ReturnedChunk, ReturnedError> {
    match (provisioned, returned) {
        (_, None) => Ok(ReturnedChunk::ABSENT),
        (None, Some(_)) => Err(ReturnedError::UnexpectedReplyChunk),
        (Some(p), Some(r)) => check_chunk(0, p, r),
    }
}

/// Checks every chunk of a Reply's Write list against the Write chunks the Call provided.
///
/// The Reply must not return more chunks than were provided; a shorter list is tolerated, the
/// missing chunks being [`ReturnedForm::Absent`] (decision G-17). Each returned chunk is checked
/// as by [`check_returned`].
pub fn check_returned_write_list<'p, 'a>(
    provisioned: &'p [&'p [Segment]],
    returned: WriteList<'a>,
) -> Result<ReturnedList<'p, 'a>, ReturnedError> {
    check_returned_write_list_into(provisioned, returned, &mut [])?;
    Ok(ReturnedList {
        provisioned,
        returned,
    })
}

/// [`check_returned_write_list`] in one walk that also records, in `out[i]`, the returned
/// form and length of each chunk `i` the Call provided ([`ReturnedForm::Absent`] for those
/// the Reply left out; chunks past `out.len()` are checked and not recorded), for a caller
/// that needs them all: [`ReturnedList::get`] walks the list again for each.
pub fn check_returned_write_list_into(
    provisioned: &[&[Segment]],
    returned: WriteList<'_>,
    out: &mut [ReturnedChunk],
) -> Result<(), ReturnedError> {
    if returned.len() > provisioned.len() {
        return Err(ReturnedError::ExtraChunks {
            provisioned: provisioned.len(),
            returned: returned.len(),
        });
    }
    // An NFS READ's: one chunk of one segment provided and returned. The list's layout was
    // validated when it was decoded, so one chunk in exactly 24 bytes is `1 1 H L O O` and
    // the length is its fourth word: `check_chunk`'s checks without walking the list.
    if let ([[p]], 1, Some(e)) = (
        provisioned,
        returned.len(),
        <&[u8; 24]>::try_from(returned.entries()).ok(),
    ) {
        let length = be32_at(e, 12);
        if length > p.length {
            return Err(ReturnedError::TooLong {
                chunk: 0,
                segment: 0,
                provisioned: p.length,
                returned: length,
            });
        }
        if let Some(o) = out.first_mut() {
            *o = ReturnedChunk::of_total(u64::from(length));
        }
        return Ok(());
    }
    let mut n = 0;
    for (i, (r, p)) in returned.iter().zip(provisioned).enumerate() {
        let checked = check_chunk(i, p, r)?;
        if let Some(o) = out.get_mut(i) {
            *o = checked;
        }
        n = i + 1;
    }
    if let Some(rest) = out.get_mut(n..provisioned.len().min(out.len())) {
        rest.fill(ReturnedChunk::ABSENT);
    }
    Ok(())
}

/// A Reply's Write list that passed [`check_returned_write_list`].
#[derive(Clone, Copy, Debug)]
pub struct ReturnedList<'p, 'a> {
    provisioned: &'p [&'p [Segment]],
    returned: WriteList<'a>,
}

impl ReturnedList<'_, '_> {
    /// Number of Write chunks the Call provided.
    pub fn provisioned(&self) -> usize {
        self.provisioned.len()
    }

    /// The returned form and length of Write chunk `i`, or `None` when the Call provided fewer
    /// chunks.
    pub fn get(&self, i: usize) -> Option<ReturnedChunk> {
        let p = self.provisioned.get(i)?;
        match self.returned.iter().nth(i) {
            Some(r) => check_chunk(i, p, r).ok(),
            None => Some(ReturnedChunk::ABSENT),
        }
    }
}
