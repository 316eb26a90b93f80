//! Chunks in operation: rebuilding a reduced Payload stream from its Read chunks, placing results
//! into Write chunks and the Reply chunk, and checking what a Responder returned (RFC 8166 §3.4,
//! §3.5.3, §4.3).
//!
//! Three parties use this module:
//!
//! * the **Responder receiving a Call** plans how the unreduced Payload stream is rebuilt from
//!   the inline payload and the Read chunks ([`ReadPlan`]);
//! * the **Responder building a Reply** decides which result goes into which Write chunk
//!   ([`match_results`]), where its bytes go ([`place_write`], [`place_reply`]) and what to echo
//!   in the Reply header ([`echo_lengths`]);
//! * the **Requester receiving a Reply** checks the echoed Write list and Reply chunk against
//!   what it provisioned ([`check_returned`], [`check_returned_write_list`],
//!   [`check_returned_reply`]).
//!
//! Nothing here allocates: plans borrow the decoded header views and iterate over them.
//!
//! # The unreduced stream
//!
//! Every Read chunk is the run of consecutive read segments that share a Position; its content is
//! the concatenation of those segments in list order, and its length is the sum of their lengths
//! (§3.4.4, §3.4.5). Positions are byte offsets in the unreduced Payload stream, which starts at
//! Position zero with the RPC XID (§3.4.5). Rebuilding walks the chunks in ascending Position:
//! the reduced stream (the inline payload) fills the gaps between chunks, and after a chunk of
//! length `L` at Position `P` it resumes at `P + roundup(L)`: the chunk's XDR roundup padding is
//! never in the inline buffer, whether or not the Requester put it in the chunk (§3.4.4.4,
//! §3.4.5.2; checklist D8). When the pad is not in the chunk, the rebuilt stream holds zeros in
//! its place; when it is, `L` is already a multiple of four.
//!
//! ## Position Zero
//!
//! A Read chunk at Position zero is a Long Call (§3.5.3): its content is the Call's Payload
//! stream, XDR padding included. This module treats it as the **reduced stream** of the Call, the
//! role the inline payload plays in an RDMA_MSG:
//!
//! * With no other chunk, the unreduced stream is the Position-Zero content itself.
//! * Other chunks (non-zero Positions) may accompany it (IMPL §3.5.1; checklist D5): they are
//!   reinserted into the Position-Zero content exactly as they would be into an inline payload.
//!   This is the Long Call whose body is still too large after its DDP-eligible items were
//!   reduced.
//! * A Position-Zero chunk together with an inline payload (an RDMA_MSG carrying a Position-Zero
//!   chunk) is rejected: two streams would start at Position zero (IMPL §3.6; decision G-7,
//!   ERR_CHUNK).
//!
//! # Error classes
//!
//! Every [`ChunkError`] names the answer a Responder gives to a Call that carries it
//! ([`ChunkError::class`]). RFC 8166 §4.5.2 distinguishes two cases:
//!
//! * errors in the chunk lists themselves, visible without looking at the payload (a misaligned
//!   Position, segments of one Position that are not adjacent, lengths or addresses that
//!   overflow, more chunks than the local limit, a Position-Zero chunk beside an inline payload)
//!   make the header unusable: RDMA_ERROR with ERR_CHUNK (§4.5.2, first paragraph;
//!   [`ChunkErrorClass::ErrChunk`]);
//! * errors only visible relative to the payload (a Position past the end of the stream that the
//!   reduced payload can reach, a chunk starting inside the preceding one) are "mismatches between
//!   chunk sizes or offsets and the contents of the Payload stream": the header is valid and the
//!   Responder answers with an RPC GARBAGE_ARGS reply sent as RDMA_MSG (§4.5.2, second paragraph;
//!   decision G-8; [`ChunkErrorClass::GarbageArgs`]).
//!
//! [`ReadPlan::new`] reports an ERR_CHUNK-class error in preference to a GARBAGE_ARGS-class one
//! when a list has both, so that the verdict does not depend on the order of the list.
//!
//! Errors found while building a Reply (a result larger than its Write chunk or the Reply chunk)
//! are Responder operational errors (§4.5.3): no RPC-level reply is possible for that XID, and the
//! Responder answers with ERR_CHUNK.
//!
//! # Layout
//!
//! The Read side is in `read` ([`ReadPlan`], its limits and summary, and the reassembly),
//! `pieces` ([`Piece`], [`Pieces`]) and, below both, `read_chunk` ([`ReadChunk`] and the scan
//! that finds one); the Responder's Write chunks and Reply chunk in `write`;
//! the Requester's checks of a Reply in `returned`; [`ChunkError`] in `error`.

mod error;
mod pieces;
mod read;
mod read_chunk;
mod returned;
mod write;

pub use error::{ChunkError, ChunkErrorClass};
pub use pieces::{Piece, Pieces};
pub use read::{PlanSummary, ReadLimits, ReadPlan, ReassembleError};
pub use read_chunk::ReadChunk;
pub use returned::{
    check_returned, check_returned_reply, check_returned_write_list,
    check_returned_write_list_into, ReturnedChunk, ReturnedError, ReturnedForm, ReturnedList,
};
pub use write::{
    echo_lengths, echo_write_list, match_results, place_reply, place_write, ChunkFill, Placement,
    Placements, ResultMatch, ResultTarget,
};
