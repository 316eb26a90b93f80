//! Answering a Call: now or when reply resources free up, through the Short-reply fast path
//! or the general path (the verdict, RFC 8166 §4.5; the RPC checks, RFC 5531 §9; the handler
//! or a deferred Call's closure), its receive queued for reposting and its reply for posting
//! (in the order `flush.rs` chooses, §3.3.1).

use super::*;
use rpcrdma_proto::v2;

impl<P: Provider> ServerConn<P> {
    pub(super) fn answer_or_defer(&mut self, idx: u32) {
        if self.ready.is_empty() && self.can_reply() {
            if !self.answer(idx) {
                self.await_share(idx);
            }
            return;
        }
        let slot = &mut self.slots[idx as usize];
        slot.state = RecvState::Ready;
        if !slot.queued {
            slot.queued = true;
            self.ready.push_back(idx);
        }
    }

    /// The Call in slot `idx` waits for shared buffers (it holds none): beside those whose
    /// pulls wait, not in the ready queue, where it would hold up Calls behind it that have
    /// theirs (and may be what it waits for). Tried again as they are (`start_pull` answers
    /// a Call without Read chunks).
    pub(super) fn await_share(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        slot.state = RecvState::AwaitLarge;
        slot.queued = false;
        self.large.waiting.push_back(idx);
    }

    /// Whether a reply can be built now: a free reply buffer and send-queue room.
    pub(super) fn can_reply(&self) -> bool {
        let r = self.ring_next as usize;
        let pending = self.sends.len() as u64;
        self.sends.len() < self.ring.len() / 2
            && self.io.sq.is_retired(self.ring_seq[r])
            && self.io.sq.room() >= REPLY_WRS + pending
    }

    /// Builds the answer to the Call in receive buffer `idx` (reply, RPC error or
    /// RDMA_ERROR, or nothing for a discard), queues its receive for reposting and its Send
    /// for posting (`flush`). A Short Call without chunks whose reply fits inline is
    /// answered by [`reply::short`]; every other Call by [`answer_general`].
    ///
    /// False, with nothing done, when the Call needs large buffers none of which is free:
    /// it waits in the ready queue.
    pub(super) fn answer(&mut self, idx: u32) -> bool {
        self.answer_with(idx, None)
    }

    /// Answers the Call in slot `idx`, running `answerer` in place of its handler if given
    /// (a deferred Call's completion); false, with nothing done, when it must wait for
    /// large buffers.
    pub(super) fn answer_with(&mut self, idx: u32, mut answerer: Option<Answerer<'_, '_>>) -> bool {
        let i = idx as usize;
        let r = self.ring_next as usize;
        let gen = self.slots[i].gen.wrapping_add(1);
        // Judged at its pull's start: its own pull buffer was written (unless a large one
        // stood in).
        let pulled = self.slots[i].judged.is_some() && !self.large.stands_in(i);
        // A version 1 Call whose only chunks are Write chunks (and which needs no large
        // buffer) is read once, for both.
        let written = match (self.slots[i].judged, self.slots[i].form) {
            (None, CallForm::Written) => self.answer_written(idx, r, gen, answerer.as_deref_mut()),
            _ => None,
        };
        let (built, judged) = match written {
            Some(built) => (built, None),
            None => match self.answer_other(idx, r, gen, answerer) {
                Some(answered) => answered,
                None => return false,
            },
        };
        self.answered(idx, r, gen, built, judged, pulled);
        true
    }

    /// What follows the answer `built` to the Call in slot `idx`, made in ring entry `r` for
    /// ticket generation `gen`: a deferred Call keeps its receive (and `judged`, its
    /// verdict's summary) until `complete`; any other gives its receive back to be reposted
    /// and queues its reply's Send. `pulled`: the Call was pulled into its own pull buffer.
    #[inline(always)]
    pub(super) fn answered(
        &mut self,
        idx: u32,
        r: usize,
        gen: u32,
        built: ReplyAction,
        judged: Option<CallSummary>,
        pulled: bool,
    ) {
        let i = idx as usize;
        if let ReplyAction::Deferred = built {
            // Kept as it is until `complete`: receive, pull buffer and summary.
            let slot = &mut self.slots[i];
            slot.judged = judged;
            slot.gen = gen;
            slot.state = RecvState::Deferred;
            self.deferred += 1;
            self.large_out_of_ring(i, r);
            return;
        }
        self.slots[i].state = RecvState::Posted;
        self.in_process -= 1;
        self.reposts.push(idx);
        self.large_after_answer(i, r, matches!(built, ReplyAction::Send { .. }));
        if pulled {
            self.hot_pull = Some(idx);
        }
        match built {
            ReplyAction::Nothing => {}
            ReplyAction::Send { len, inv } => {
                self.sends.push(PendingSend {
                    ring: r as u32,
                    len,
                    inv,
                    signal: self.ring_holds_large(r),
                });
                self.ring_next += 1;
                if self.ring_next as usize == self.ring.len() {
                    self.ring_next = 0;
                }
            }
            ReplyAction::Fatal => self.lose(),
            ReplyAction::Deferred => {}
        }
    }

    /// The ticket a handler answering the Call in slot `idx` gets ([`Deferred`]), in its
    /// generation `gen`.
    fn ticket(&self, idx: u32, gen: u32) -> Deferred {
        Deferred {
            conn: self.id,
            slot: idx,
            gen,
        }
    }

    /// The Write-list fast path (`written`) for the Call in slot `idx`, in ring entry `r`,
    /// when it is a version 1 Call whose only chunks are Write chunks that fit the slot's
    /// own bulk buffer: `None`, with nothing done, otherwise. Its header is read once, for
    /// the large-buffer check and the answer.
    fn answer_written(
        &mut self,
        idx: u32,
        r: usize,
        gen: u32,
        answerer: Option<Answerer<'_, '_>>,
    ) -> Option<ReplyAction> {
        let i = idx as usize;
        if self.io.wire != Wire::V1 {
            return None;
        }
        let bytes = view::bytes(&self.recv[i], self.slots[i].byte_len as usize);
        let wc = verdict::write_call(bytes)?;
        let needs = self.lists_need_large(i, wc.writes, None, true);
        if needs.count() != 0 {
            // Shared bulk buffers for its Write chunks, or the general path, which waits.
            if !self.reserve_large(i, needs) {
                return None;
            }
            // Read again: the reservation borrowed the connection.
            return self.answer_written(idx, r, gen, answerer);
        }
        // The two fields alone: `wc` borrows the receive buffer.
        self.large.enter_ring(&mut self.ring, i, r);
        let mut run = HandlerContext {
            ticket: self.ticket(idx, gen),
            answerer,
            loans: Some(&self.loans),
            max_bulk: self.large.max_bulk(),
        };
        let at = Answering::of(&self.credits, &self.negotiation, &self.dispatch);
        written::answer(
            &mut self.io,
            &mut self.ring[r],
            bytes,
            &wc,
            &at,
            &mut self.bulk[i],
            &mut run,
        )
    }

    /// Every other answer to the Call in slot `idx`, in ring entry `r`: the Short-reply
    /// fast paths or the general path, after taking the large buffers the Call needs
    /// (`None`, with nothing done, when they cannot be had now). With the answer, the
    /// verdict summary the Call's pull left, if any.
    fn answer_other(
        &mut self,
        idx: u32,
        r: usize,
        gen: u32,
        answerer: Option<Answerer<'_, '_>>,
    ) -> Option<(ReplyAction, Option<CallSummary>)> {
        let i = idx as usize;
        // Large buffers: a pulled Call took its own when its pull started; a Call without
        // Read chunks takes them now (Write chunks or a Reply chunk beyond its buffers).
        if self.slots[i].judged.is_none() {
            let bytes = view::bytes(&self.recv[i], self.slots[i].byte_len as usize);
            if self.may_need_large(bytes) {
                let needs = match HeaderView::parse_any(bytes) {
                    Ok(h) => self.large_needs(i, &h, 0, self.may_have_ddp_results(&h)),
                    Err(_) => Default::default(),
                };
                if !self.reserve_large(i, needs) {
                    return None;
                }
            }
        }
        self.large_into_ring(i, r);
        let mut run = HandlerContext {
            ticket: self.ticket(idx, gen),
            answerer,
            loans: Some(&self.loans),
            max_bulk: self.large.max_bulk(),
        };
        let byte_len = self.slots[i].byte_len as usize;
        let wire = if self.slots[i].open_v2 {
            Wire::V2
        } else {
            self.io.wire
        };
        let at = Answering::of(&self.credits, &self.negotiation, &self.dispatch);
        let bytes = view::bytes(&self.recv[i], byte_len);
        let ring = &mut self.ring[r];
        // Where a pulled Call's stream lies (from its start to the buffer's end).
        let area = stream_area(&self.pull[i], self.slots[i].shift);
        // A Call judged when its pull started is not a Short one.
        // (Looked at before taken: a Short Call's slot holds none, and `take` would copy
        // the whole summary out.)
        let judged = match self.slots[i].judged {
            Some(_) => self.slots[i].judged.take(),
            None => None,
        };
        // The fast paths answer Calls in the connection's version only (a version 1 Call
        // on a version 2 connection is refused by the general path).
        let short = match judged {
            // The Short path for a Call classified Short only.
            None if self.slots[i].form != CallForm::Short => None,
            None => reply::short(
                &mut self.io,
                &mut *ring,
                bytes,
                &at,
                &mut self.bulk[i],
                &mut run,
            ),
            Some(_) => match self.slots[i].bare {
                // A pulled Call without Write or Reply chunks: the reply is a bare one.
                Some((total, handle)) if total as usize <= area.len() => reply::short_pulled(
                    &mut self.io,
                    &mut *ring,
                    reply::PulledCall {
                        call: bytes,
                        stream: &area[..total as usize],
                        inv: at.swi.then_some(handle),
                    },
                    &at,
                    &mut self.bulk[i],
                    &mut run,
                ),
                _ => None,
            },
        };
        let built = match short {
            Some(built) => built,
            None => answer_general(
                &mut self.io,
                ring,
                bytes,
                &mut self.bulk[i],
                &General {
                    at,
                    pull: area,
                    recv_size: self.config.recv_size,
                    judged,
                    wire,
                },
                &mut self.echo,
                &mut run,
            ),
        };
        Some((built, judged))
    }
}

/// Why the general path has no call to run: a chunk problem (RDMA_ERROR ERR_CHUNK) or an
/// undecodable call header (GARBAGE_ARGS).
enum NoCall {
    Chunk,
    /// More than the pull buffer holds (RFC 8166 §8.1.4).
    TooLarge,
    Garbage,
    /// The pulled stream holds an RPC Reply: discarded, as the verdict discards
    /// one sent inline (RFC 8166 §4).
    Reply,
}

/// The accepted Call `call`'s Payload stream (inline, or, when `pulled`, pulled into
/// `pull`) with its RPC Call header and that header's length, or why the general path has
/// no call to run.
#[inline(always)]
fn call_stream<'s>(
    call: AcceptedCall<'s>,
    pulled: bool,
    pull: &'s [u8],
) -> Result<(&'s [u8], CallHeader<'s>, usize), NoCall> {
    let header = call.header;
    if pulled {
        let total = call.plan.total_len() as usize;
        if total > pull.len() {
            // RFC 8166 §8.1.4: "A Responder is not obliged to pull Read chunks
            // that are unreasonably large. The Responder can use an RDMA_ERROR
            // response": ERR_CHUNK, before any RDMA Read.
            Err(NoCall::TooLarge)
        } else {
            let s = &pull[..total];
            match RpcMessage::parse(s) {
                Ok((RpcMessage::Call(c), len)) if c.xid == header.xid() => Ok((s, c, len)),
                Ok((RpcMessage::Call(_), _)) => Err(NoCall::Chunk),
                Ok((RpcMessage::Reply(_), _)) => Err(NoCall::Reply),
                Err(_) => Err(NoCall::Garbage),
            }
        }
    } else {
        match call.call {
            Some((c, len)) => Ok((header.payload(), c, len)),
            None => Err(NoCall::Chunk),
        }
    }
}

/// The part of pull buffer `pull` from `shift` (where a pulled stream starts,
/// `RecvSlot::shift`) to its end.
pub(super) fn stream_area<P: Provider>(pull: &Buf<P>, shift: u32) -> &[u8] {
    &view::bytes(pull, pull.size())[shift as usize..]
}

/// The general answer to the Call `bytes` (any form, any verdict), built in `ring`: the
/// verdict (RFC 8166 §4.5), then the RPC checks (RFC 5531 §9) and the handler, or the
/// RDMA_ERROR or RPC error that replaces them. `g.pull` holds the reassembled Payload stream
/// of a chunked or Long Call from its start ([`stream_area`]); `bulk` receives the
/// handler's DDP-eligible results.
pub(super) fn answer_general<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    bytes: &[u8],
    bulk: &mut Buf<P>,
    g: &General<'_>,
    echo: &mut Echo,
    run: &mut HandlerContext<'_, '_>,
) -> ReplyAction {
    let Answering {
        grant,
        threshold: reply_threshold,
        swi,
        ..
    } = g.at;
    match version::judged(bytes, g.judged.as_ref(), g.wire) {
        Err(Refusal::V2(v)) => version::answer_refused_v2(io, ring, bytes, g, v, echo, run),
        Err(Refusal::V1(v)) => match v.action {
            Action::Discard => {
                bump(&io.stats.discards, 1);
                ReplyAction::Nothing
            }
            Action::ErrVers { .. } | Action::ErrChunk => {
                let err = v.rdma_error().unwrap_or(RdmaError::Chunk);
                reply::rdma_error(io, ring, bytes, grant, WireError::V1(err))
            }
            Action::GarbageArgs => garbage_args(io, ring, bytes, g, echo, run),
            Action::Process => ReplyAction::Nothing,
        },
        Ok(call) => {
            let header = call.header;
            let pulled = call.plan.chunk_count() > 0;
            let stream = call_stream(call, pulled, g.pull);
            // What to build, or the answer already made without building.
            let to_build = match stream {
                Err(NoCall::Chunk) => {
                    Err(reply::refuse(io, ring, bytes, grant, v2::RdmaError::BadXdr))
                }
                Err(NoCall::TooLarge) => {
                    Err(reply::refuse(io, ring, bytes, grant, v2::RdmaError::System))
                }
                Err(NoCall::Reply) => {
                    bump(&io.stats.discards, 1);
                    Err(ReplyAction::Nothing)
                }
                Err(NoCall::Garbage) => {
                    bump(&io.stats.garbage_args, 1);
                    Ok((Body::Error(ReplyHeader::garbage_args(header.xid())), None))
                }
                Ok((stream, c, len)) => {
                    let xid = header.xid();
                    let body = if !c.is_rpc_v2() {
                        bump(&io.stats.system_err, 1);
                        Body::Error(ReplyHeader::rpc_mismatch(xid, 2, 2))
                    } else {
                        match g.at.dispatch.lookup(c.prog, c.vers, c.proc_num) {
                            Lookup::ProgUnavail => {
                                bump(&io.stats.prog_unavail, 1);
                                Body::Error(ReplyHeader::prog_unavail(xid))
                            }
                            Lookup::ProgMismatch { low, high } => {
                                bump(&io.stats.prog_mismatch, 1);
                                Body::Error(ReplyHeader::prog_mismatch(xid, low, high))
                            }
                            Lookup::ProcUnavail => {
                                bump(&io.stats.proc_unavail, 1);
                                Body::Error(ReplyHeader::proc_unavail(xid))
                            }
                            Lookup::Found(entry) => {
                                let req = Request::of(xid, &c, &stream[len..]);
                                Body::Handler { entry, req }
                            }
                        }
                    };
                    Ok((body, Some(bulk)))
                }
            };
            let built = match to_build {
                Ok((body, bulk)) => {
                    let to = ReplyTo {
                        header: &header,
                        grant,
                        threshold: reply_threshold,
                        swi,
                        body,
                    };
                    reply::build(io, ring, bulk, echo, run, &to)
                }
                Err(answered) => answered,
            };
            // A Call without chunks counts as Short once answered (a deferred one when it is
            // completed).
            if !pulled && !matches!(built, ReplyAction::Deferred) {
                io.tally.short_calls += 1;
            }
            built
        }
    }
}

/// The GARBAGE_ARGS reply to the Call `bytes`, whose transport header is valid but whose
/// RPC message does not match its Payload stream (RFC 8166 §4.5.2), in the connection's
/// version; a header that does not decode after all gets ERR_CHUNK (RDMA2_ERR_BAD_XDR).
pub(super) fn garbage_args<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    bytes: &[u8],
    g: &General<'_>,
    echo: &mut Echo,
    run: &mut HandlerContext<'_, '_>,
) -> ReplyAction {
    let Ok(h) = HeaderView::parse_any(bytes) else {
        return reply::refuse(io, ring, bytes, g.at.grant, v2::RdmaError::BadXdr);
    };
    bump(&io.stats.garbage_args, 1);
    let rpc = ReplyHeader::garbage_args(h.xid());
    let to = ReplyTo {
        header: &h,
        grant: g.at.grant,
        threshold: g.at.threshold,
        swi: false,
        body: Body::Error(rpc),
    };
    reply::build(io, ring, None, echo, run, &to)
}
