//! Building a reply in a reply ring buffer: the RPC reply header and results in place, the
//! DDP-eligible results placed into Write chunks with RDMA Write (RFC 8166 §3.4.6, §4.3.2),
//! a Long Reply written into the Reply chunk (§3.5.3, §4.3.3), unused and empty chunks
//! echoed (§4.3.2.2, §4.3.2.3), and the RDMA_ERROR messages (§4.5). The Short-reply fast
//! path is in `reply/short.rs` (re-exported here).

// Indexes run over parallel fixed arrays (segments, echoes, work requests).
#![allow(clippy::needless_range_loop)]

use rpcrdma_proto::chunks::{self, ChunkFill, ResultTarget};
use rpcrdma_proto::emit::{self, DENIED_REPLY_LEN};
use rpcrdma_proto::header::MIN_HEADER_LEN;
use rpcrdma_proto::header::{Chunks, Header, HeaderView, RdmaError, Segment, Segments, WriteList};
use rpcrdma_proto::plan::{self, ReplyForm};
use rpcrdma_proto::rpc::{AcceptStat, ReplyHeader, AUTH_NONE_ACCEPTED_LEN};
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::Wire;
use rpcrdma_proto::verdict;
use rpcrdma_proto::xdr::{pad4, word_at};

use super::handler::{overflowed, run_handler, HandlerContext};
use super::{Answering, FabricSide};
use crate::conn::view;
use crate::dispatch::{Entry, Lookup, Outcome, Request, MAX_BULK_RESULTS};
use crate::fabric::{Provider, QueuePair, RemoteAddr, SendWr, Sge};
use crate::pool::Buf;
use crate::stats::bump;
use crate::wrid::{self, Kind};

mod short;

pub(super) use short::{short, short_of, short_pulled, PulledCall};

/// Most Write chunks a Call may carry to this responder.
pub const MAX_WRITE_CHUNKS: usize = 8;
/// Most segments of one Write chunk or of the Reply chunk.
pub const MAX_SEGMENTS: usize = 64;

/// Room for the echoed Write list and Reply chunk of one reply, kept by the connection: a
/// reply clears none of its ten kilobytes.
pub(super) struct Echo {
    writes: [[Segment; MAX_SEGMENTS]; MAX_WRITE_CHUNKS],
    reply: [Segment; MAX_SEGMENTS],
}

impl Echo {
    pub(super) fn new() -> Box<Echo> {
        Box::new(Echo {
            writes: [[Segment::default(); MAX_SEGMENTS]; MAX_WRITE_CHUNKS],
            reply: [Segment::default(); MAX_SEGMENTS],
        })
    }
}

/// What the reply carries.
pub(super) enum Body<'a> {
    /// Run the handler (or, as [`build`]'s `run` says, a deferred Call's completion in its
    /// place); SUCCESS with its results unless it says otherwise.
    Handler { entry: &'a Entry, req: Request<'a> },
    /// An RPC reply without results (an accepted error or a denial).
    Error(ReplyHeader<'static>),
}

/// What building the answer to a Call leaves the connection to do: send the reply built in
/// the ring buffer, send nothing, end the connection, or wait for a deferred answer.
pub(super) enum ReplyAction {
    /// Nothing to send (discard).
    Nothing,
    /// Send `len` bytes of the ring buffer, with Send With Invalidate of `inv` if set.
    Send { len: u32, inv: Option<u32> },
    /// The queue pair refused a post: the connection is lost.
    Fatal,
    /// The handler deferred its answer ([`Outcome::Deferred`]): nothing was written to the
    /// peer or counted.
    Deferred,
}

/// The Send of a Short reply of `len` bytes invalidating `inv`, counted.
#[inline(always)]
fn sent<P: Provider>(io: &mut FabricSide<P>, len: usize, inv: Option<u32>) -> ReplyAction {
    if inv.is_some() {
        bump(&io.stats.remote_invalidations, 1);
    }
    ReplyAction::Send {
        len: len as u32,
        inv,
    }
}

/// A Short Call's refusal `e` (a reply no chunk can carry), as `build` gives it, and
/// counted as it counts it: a Short Call, answered.
pub(super) fn refuse_short<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    call: &[u8],
    grant: u32,
    e: v2::RdmaError,
) -> ReplyAction {
    io.tally.short_calls += 1;
    refuse(io, ring, call, grant, e)
}

/// The error of an RDMA_ERROR or RDMA2_ERROR, in the version of the header that carries it
/// ([`rdma_error`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum WireError {
    /// Version 1's RDMA_ERROR (RFC 8166 §4.5).
    V1(RdmaError),
    /// Version 2's RDMA2_ERROR (\[V2\] §5.3.3).
    V2(v2::RdmaError),
}

/// RDMA_ERROR (or, for a version 2 error, RDMA2_ERROR with RPCRDMA2_F_RESPONSE, \[V2\]
/// §5.3.3) for the message `call` (at least 28 bytes, checked by the verdict): its XID and
/// version echoed (RFC 8166 §4.5, CHECKLIST G-2) and the current grant (G-15). Counted as
/// ERR_VERS in either version, else as ERR_CHUNK (version 1) or an RDMA2_ERROR; a header
/// that does not fit the reply buffer is fatal.
pub(super) fn rdma_error<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    call: &[u8],
    grant: u32,
    err: WireError,
) -> ReplyAction {
    // The verdict saw at least 28 bytes; a shorter `call` has no XID to echo.
    let (Some(xid), Some(vers)) = (word_at(call, 0), word_at(call, 4)) else {
        return ReplyAction::Fatal;
    };
    let out = view::bytes_mut(ring);
    let (counter, encoded) = match err {
        WireError::V1(e) => (
            match e {
                RdmaError::Vers { .. } => &io.stats.err_vers,
                RdmaError::Chunk => &io.stats.err_chunk,
            },
            Header::error(xid, vers, grant, e).encode(out),
        ),
        WireError::V2(e) => (
            match e {
                v2::RdmaError::Vers { .. } => &io.stats.err_vers,
                _ => &io.stats.rdma2_errors,
            },
            v2::Header::error(xid, vers, grant, e).encode(out),
        ),
    };
    match encoded {
        Ok(n) => {
            bump(counter, 1);
            ReplyAction::Send {
                len: n as u32,
                inv: None,
            }
        }
        Err(_) => ReplyAction::Fatal,
    }
}

/// Refuses the Call `call` for the reason `precise`: version 2 says it (\[V2\] §5.3.3: the
/// responder's limit, the length it needed), version 1 can only say ERR_CHUNK (RFC 8166
/// §4.5.2, §4.5.3).
pub(super) fn refuse<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    call: &[u8],
    grant: u32,
    precise: v2::RdmaError,
) -> ReplyAction {
    let err = match io.wire {
        Wire::V1 => WireError::V1(RdmaError::Chunk),
        Wire::V2 => WireError::V2(precise),
    };
    rdma_error(io, ring, call, grant, err)
}

/// Posts the RDMA Writes of `fill`, whose item starts at byte `at` of `src`; false if the
/// queue pair refused one.
pub(super) fn post_fill<P: Provider>(
    io: &mut FabricSide<P>,
    src: &Buf<P>,
    at: usize,
    fill: &ChunkFill<'_>,
) -> bool {
    fill.placements().all(|p| {
        let sge = src.sge_span(at + p.src_offset as usize, p.len);
        post_write(io, sge, RemoteAddr::new(p.segment.offset, p.segment.handle))
    })
}

fn post_write<P: Provider>(io: &mut FabricSide<P>, sge: Sge, remote: RemoteAddr) -> bool {
    let (seq, signaled) = io.sq.post(false);
    let sges = [sge];
    let id = wrid::pack(Kind::Write, 0, if signaled { seq } else { 0 });
    let mut wr = SendWr::write(id, &sges, remote);
    if signaled {
        wr = wr.signaled();
    }
    bump(&io.stats.bytes_written, u64::from(sge.length));
    io.qp.post_send(&wr).is_ok()
}

/// The rkey to invalidate with the reply: the first handle the Call advertised for the
/// reply (Write list, then Reply chunk), else its Read list's (RFC 8797 §4.1: it belongs to
/// this XID only).
fn inv_rkey(header: &HeaderView<'_>) -> Option<u32> {
    for c in header.write_list().iter() {
        if let Some(s) = c.iter().next() {
            return Some(s.handle);
        }
    }
    if let Some(s) = header.reply_chunk().and_then(|c| c.iter().next()) {
        return Some(s.handle);
    }
    header.read_list().iter().next().map(|r| r.segment.handle)
}

/// The Call [`build`] answers and how: its transport header, the credit grant the reply
/// advertises (RFC 8166 §3.3.1), the reply threshold it keeps to (§3.3.2), whether it may
/// invalidate the Call's rkey (Send With Invalidate, RFC 8797 §4.1), and what it carries.
pub(super) struct ReplyTo<'a> {
    pub(super) header: &'a HeaderView<'a>,
    pub(super) grant: u32,
    pub(super) threshold: u32,
    pub(super) swi: bool,
    pub(super) body: Body<'a>,
}

/// Why [`build`] stopped before its reply was whole: a refusal (RDMA_ERROR, or in version
/// 2 the precise RDMA2_ERROR, [`refuse`]), or another answer (deferred, or fatal).
enum Stop {
    Refuse(v2::RdmaError),
    Answer(ReplyAction),
}

/// Builds the reply `to` a Call in `ring`, posting its RDMA Writes: the handler's
/// DDP-eligible results go into `bulk`, the echoed chunks into `scratch`, and a handler
/// body runs as `run` says (the procedure's handler, or a deferred Call's completion).
pub(super) fn build<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    bulk: Option<&mut Buf<P>>,
    scratch: &mut Echo,
    run: &mut HandlerContext<'_, '_>,
    to: &ReplyTo<'_>,
) -> ReplyAction {
    match build_phases(io, ring, bulk, scratch, run, to) {
        Ok(action) | Err(Stop::Answer(action)) => action,
        Err(Stop::Refuse(e)) => refuse(io, ring, to.header.bytes(), to.grant, e),
    }
}

/// [`build`]'s phases, each a function below: the chunk limits checked, the RPC reply
/// written (the handler run), the DDP-eligible results placed, the reply's form chosen,
/// the RDMA Writes posted, and the transport header encoded in front of the payload.
#[inline(always)]
fn build_phases<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    bulk: Option<&mut Buf<P>>,
    scratch: &mut Echo,
    run: &mut HandlerContext<'_, '_>,
    to: &ReplyTo<'_>,
) -> Result<ReplyAction, Stop> {
    let (header, grant) = (to.header, to.grant);
    let xid = header.xid();
    let wl = header.write_list();
    let rc = header.reply_chunk();
    check_chunk_limits(wl, rc)?;
    // Version 2's header carries flags and inv_handle too: 8 bytes more, and 8 bytes less
    // of the threshold for the payload.
    let extra = io.wire.extra();
    let threshold = to.threshold.saturating_sub(extra as u32);
    let hlen = 16 + extra + 4 + wl.encoded_len() + rc.map_or(4, |c| 4 + c.encoded_len());
    let echo = &mut scratch.writes;
    let mut echo_n = [0usize; MAX_WRITE_CHUNKS];
    for (c, chunk) in wl.iter().enumerate() {
        echo_n[c] = chunks::echo_lengths(chunk, 0, &mut echo[c]).map_or(0, |s| s.len());
    }
    let mut items = [(0, 0); MAX_BULK_RESULTS];
    let written = write_rpc_reply(io, ring, hlen, to, bulk, run, &mut items)?;
    let mut fills: [Option<(ChunkFill<'_>, u32)>; MAX_WRITE_CHUNKS] =
        [const { None }; MAX_WRITE_CHUNKS];
    let end = place_results(ring, hlen, wl, &written, echo, &mut echo_n, &mut fills)?;
    let payload_len = (end - hlen) as u32;
    let rc_echo = &mut scratch.reply;
    let (form, reply_fill, rc_n) = choose_form(threshold, payload_len, wl, rc, rc_echo)?;
    let send_len = post_writes(
        io,
        ring,
        written.bulk,
        &fills,
        reply_fill,
        hlen,
        payload_len,
    )?;
    let mut writes: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for c in 0..wl.len() {
        writes[c] = &echo[c][..echo_n[c]];
    }
    let chunks = Chunks {
        reads: &[],
        writes: &writes[..wl.len()],
        reply: rc.map(|_| &rc_echo[..rc_n]),
    };
    let nomsg = form == ReplyForm::Long;
    encode_transport_header(io.wire, ring, hlen, xid, grant, chunks, nomsg)?;
    // Version 2: the handle the Call named in rdma_inv_handle, if any ([V2] §3.3);
    // version 1: the Call's first handle when both ends set R (RFC 8797 §4.1).
    let inv = match (to.swi, io.wire) {
        (false, _) => None,
        (true, Wire::V1) => inv_rkey(header),
        (true, Wire::V2) => Some(header.inv_handle()).filter(|&h| h != 0),
    };
    Ok(sent(io, send_len, inv))
}

/// [`build`]'s first phase: a Call with more Write chunks, or longer chunks, than this
/// responder takes is refused (\[V2\] §5.3.3 says which limit).
#[inline(always)]
fn check_chunk_limits(wl: WriteList<'_>, rc: Option<Segments<'_>>) -> Result<(), Stop> {
    if wl.len() > MAX_WRITE_CHUNKS {
        let max = MAX_WRITE_CHUNKS as u32;
        return Err(Stop::Refuse(v2::RdmaError::WriteChunks { max_chunks: max }));
    }
    if wl.iter().any(|c| c.len() > MAX_SEGMENTS) || rc.is_some_and(|c| c.len() > MAX_SEGMENTS) {
        let max = MAX_SEGMENTS as u32;
        return Err(Stop::Refuse(v2::RdmaError::Segments { max_segments: max }));
    }
    Ok(())
}

/// The RPC reply [`build`] wrote after the transport header's `hlen` bytes, and the
/// DDP-eligible results its handler made.
struct Written<'b, 'i, P: Provider> {
    /// Where the RPC reply (its header and inline results) ends in the ring buffer.
    end: usize,
    /// The DDP-eligible results: offset and length of each in `bulk`.
    items: &'i [(u32, u32)],
    /// The bulk buffer holding them; `None` when the reply carries no results.
    bulk: Option<&'b Buf<P>>,
}

/// [`build`]'s second phase: the RPC reply header and the results, in place after the
/// transport header's `hlen` bytes: the handler run for a [`Body::Handler`] (its results,
/// and its DDP-eligible results into `bulk`, their offsets and lengths into `items`; or
/// the error it answers), the error header alone for a [`Body::Error`].
#[inline(always)]
fn write_rpc_reply<'b, 'i, P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    hlen: usize,
    to: &ReplyTo<'_>,
    bulk: Option<&'b mut Buf<P>>,
    run: &mut HandlerContext<'_, '_>,
    items: &'i mut [(u32, u32); MAX_BULK_RESULTS],
) -> Result<Written<'b, 'i, P>, Stop> {
    let xid = to.header.xid();
    let out = view::bytes_mut(ring);
    if out.len() < hlen + 64 {
        return Err(Stop::Refuse(v2::RdmaError::System));
    }
    let (rpc, results_len, n_items, bulk) = match &to.body {
        Body::Handler { entry, req } => {
            let rpc_len = ReplyHeader::accepted_success(xid).encoded_len();
            let bulk_bytes = match bulk {
                Some(b) => b,
                None => return Err(Stop::Answer(ReplyAction::Fatal)),
            };
            let (outcome, len, made, n) = run_handler(
                entry,
                run,
                req,
                &mut out[hlen + rpc_len..],
                view::bytes_mut(bulk_bytes),
            );
            if overflowed(n) {
                // DDP-eligible results beyond what the Call's chunks and an inline reply
                // can carry (the bulk buffer holds that much): too long for this Call.
                return Err(Stop::Refuse(v2::RdmaError::ReplyResource {
                    length_needed: (rpc_len + len) as u32,
                }));
            }
            match outcome {
                Outcome::Deferred => return Err(Stop::Answer(ReplyAction::Deferred)),
                Outcome::Success => {
                    *items = made;
                    (ReplyHeader::accepted_success(xid), len, n, Some(bulk_bytes))
                }
                Outcome::GarbageArgs => {
                    bump(&io.stats.garbage_args, 1);
                    (ReplyHeader::garbage_args(xid), 0, 0, None)
                }
                Outcome::SystemErr => {
                    bump(&io.stats.system_err, 1);
                    (ReplyHeader::system_err(xid), 0, 0, None)
                }
                Outcome::AuthError(a) => {
                    bump(&io.stats.auth_errors, 1);
                    (ReplyHeader::auth_error(xid, a), 0, 0, None)
                }
            }
        }
        Body::Error(h) => (*h, 0, 0, None),
    };
    let rpc_len = match rpc.encode(&mut out[hlen..]) {
        Ok(n) => n,
        Err(_) => return Err(Stop::Refuse(v2::RdmaError::System)),
    };
    Ok(Written {
        end: hlen + rpc_len + results_len,
        items: &items[..n_items],
        bulk: bulk.map(|b| &*b),
    })
}

/// [`build`]'s third phase: the DDP-eligible results `written` holds, each matched with a
/// Write chunk in order, else inline after the RPC reply (§4.3.2.1); returns where the
/// payload ends. A result for a chunk gets its `fills` entry (its chunk's placement and
/// its offset in the bulk buffer) and its chunk's echo in `echo` (`echo_n` segments);
/// nothing is posted yet: every result is placed, and every chunk checked, before any
/// RDMA Write is (the Reply chunk's too), so a reply that turns into ERR_CHUNK writes
/// nothing into the requester's memory.
#[inline(always)]
fn place_results<'w, P: Provider>(
    ring: &mut Buf<P>,
    hlen: usize,
    wl: WriteList<'w>,
    written: &Written<'_, '_, P>,
    echo: &mut [[Segment; MAX_SEGMENTS]; MAX_WRITE_CHUNKS],
    echo_n: &mut [usize; MAX_WRITE_CHUNKS],
    fills: &mut [Option<(ChunkFill<'w>, u32)>; MAX_WRITE_CHUNKS],
) -> Result<usize, Stop> {
    let mut cursor = written.end;
    let Some(bulk) = written.bulk else {
        return Ok(cursor);
    };
    let targets = chunks::match_results(wl, written.items.len());
    for (k, target) in targets.enumerate() {
        let (off, len) = written.items[k];
        let out = view::bytes_mut(ring);
        if cursor + 4 > out.len() {
            return Err(Stop::Refuse(v2::RdmaError::System));
        }
        out[cursor..cursor + 4].copy_from_slice(&len.to_be_bytes());
        cursor += 4;
        match target {
            ResultTarget::Chunk { index, chunk } => {
                let fill = match chunks::place_write(chunk, len) {
                    Ok(f) => f,
                    Err(_) => {
                        // [V2] §5.3.3: the first chunk too short (1-based), and the bytes
                        // it needed.
                        return Err(Stop::Refuse(v2::RdmaError::WriteResource {
                            chunk_index: index as u32 + 1,
                            length_needed: len,
                        }));
                    }
                };
                echo_n[index] = fill.echo(&mut echo[index]).map_or(0, |s| s.len());
                fills[index] = Some((fill, off));
            }
            ResultTarget::InlineEmptyChunk { .. } | ResultTarget::InlineNoChunk => {
                let padded = pad4(len as usize);
                if cursor + padded > out.len() {
                    // Inline, the result overflows the reply buffer: a Reply chunk of at
                    // least this much would carry it.
                    let needed = (cursor + padded - hlen) as u32;
                    return Err(Stop::Refuse(v2::RdmaError::ReplyResource {
                        length_needed: needed,
                    }));
                }
                let src = view::bytes(bulk, (off + len) as usize);
                out[cursor..cursor + len as usize].copy_from_slice(&src[off as usize..]);
                out[cursor + len as usize..cursor + padded].fill(0);
                cursor += padded;
            }
        }
    }
    Ok(cursor)
}

/// [`build`]'s fourth phase: the reply's form for a payload of `payload_len` bytes, Short
/// or Long (§3.5.3, §4.3.3), with the Long Reply's placement in the Reply chunk `rc` and
/// the number of the Reply chunk's segments echoed into `rc_echo` (an unused one with zero
/// lengths, G-16).
#[inline(always)]
fn choose_form<'c>(
    threshold: u32,
    payload_len: u32,
    wl: WriteList<'_>,
    rc: Option<Segments<'c>>,
    rc_echo: &mut [Segment; MAX_SEGMENTS],
) -> Result<(ReplyForm, Option<ChunkFill<'c>>, usize), Stop> {
    let too_long = || {
        Stop::Refuse(v2::RdmaError::ReplyResource {
            length_needed: payload_len,
        })
    };
    let form = match plan::plan_reply(threshold, payload_len, wl, rc) {
        Ok(p) => p.form,
        Err(_) => return Err(too_long()),
    };
    match form {
        ReplyForm::Short => {
            // G-16: an unused Reply chunk is echoed with zero lengths.
            let rc_n = match rc {
                Some(c) => chunks::echo_lengths(c, 0, rc_echo).map_or(0, |s| s.len()),
                None => 0,
            };
            Ok((form, None, rc_n))
        }
        ReplyForm::Long => {
            let Some(c) = rc else {
                return Err(Stop::Answer(ReplyAction::Fatal));
            };
            let fill = chunks::place_reply(c, payload_len).map_err(|_| too_long())?;
            let rc_n = fill.echo(rc_echo).map_or(0, |s| s.len());
            Ok((form, Some(fill), rc_n))
        }
    }
}

/// [`build`]'s fifth phase, once everything fits: the RDMA Writes, the DDP-eligible results
/// first (`fills`, from `bulk`), then a Long Reply's payload (`reply_fill`, from the ring
/// buffer after the transport header's `hlen` bytes); returns the length of the Send: the
/// whole reply, or a Long Reply's transport header alone. Fatal when the queue pair
/// refused a Write.
#[inline(always)]
fn post_writes<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &Buf<P>,
    bulk: Option<&Buf<P>>,
    fills: &[Option<(ChunkFill<'_>, u32)>; MAX_WRITE_CHUNKS],
    reply_fill: Option<ChunkFill<'_>>,
    hlen: usize,
    payload_len: u32,
) -> Result<usize, Stop> {
    const FATAL: Stop = Stop::Answer(ReplyAction::Fatal);
    if let Some(bulk) = bulk {
        for (fill, off) in fills.iter().flatten() {
            if !post_fill(io, bulk, *off as usize, fill) {
                return Err(FATAL);
            }
            bump(&io.stats.write_chunks, 1);
        }
    }
    match reply_fill {
        None => {
            io.tally.short_replies += 1;
            Ok(hlen + payload_len as usize)
        }
        Some(fill) => {
            if !post_fill(io, ring, hlen, &fill) {
                return Err(FATAL);
            }
            bump(&io.stats.long_replies, 1);
            Ok(hlen)
        }
    }
}

/// [`build`]'s last phase: the transport header of the reply to `xid` in the connection's
/// version `wire`, its `hlen` bytes in front of the payload in `ring`: the grant, the
/// echoed `chunks`, RDMA_NOMSG for a Long Reply (`nomsg`). Fatal unless it is exactly
/// `hlen` bytes long.
#[inline(always)]
fn encode_transport_header<P: Provider>(
    wire: Wire,
    ring: &mut Buf<P>,
    hlen: usize,
    xid: u32,
    grant: u32,
    chunks: Chunks<'_>,
    nomsg: bool,
) -> Result<(), Stop> {
    let out = view::bytes_mut(ring);
    let fields = v2::MessageFields {
        xid,
        credit: grant,
        nomsg,
        response: true,
        inv_handle: 0,
    };
    match rpcrdma_proto::v2::encode_message_header(wire, &mut out[..hlen], fields, chunks) {
        Ok(n) if n == hlen => Ok(()),
        _ => Err(Stop::Answer(ReplyAction::Fatal)),
    }
}
