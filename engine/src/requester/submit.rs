//! Submission: a Call's form chosen (RFC 8166 §3.5) and its header encoded, the Short fast
//! path written word by word, chunk memory exposed and the chunk lists made (in
//! `submit/chunk_lists.rs`), Sends held while corked and posted as a list.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use super::*;
use crate::fabric::reader_copies;
use rpcrdma_proto::emit;

mod chunk_lists;

use chunk_lists::{expose, make_chunk_lists, offered_invalidation};
pub(super) use chunk_lists::{segment_len, segs_needed};

impl<P: Provider> Client<P> {
    /// Sends a Call if a credit allows (RFC 8166 §3.3.1), choosing its form (§3.5) and
    /// exposing its chunk memory; returns its XID. Never blocks: without a credit it
    /// returns [`SubmitError::WouldBlock`]. A DDP-eligible argument (`call.bulk_arg`) is
    /// copied into the Call's registered memory; [`submit_in_place`](Self::submit_in_place)
    /// has it written there instead.
    pub fn submit(&mut self, call: &CallArgs<'_>, tag: u64) -> Result<u32, SubmitError> {
        self.admit(call)?;
        let max_seg = self.config.max_segment;
        // Version 2's message header is 8 bytes longer (flags, inv_handle): planned as version
        // 1's within thresholds 8 bytes smaller, laid out 8 bytes further on.
        let extra = self.wire.extra();
        // The Short Call without chunks (no DDP-eligible argument or result, no Reply chunk
        // needed): what `plan_call` chooses for it, decided here from the same sums (§3.5:
        // 28-byte header of three empty lists, Call and largest Reply within the thresholds).
        if call.bulk_arg.is_none()
            && call.bulk_results.is_empty()
            && max_seg != 0
            && matches!(call.forced.min_form, None | Some(CallForm::Short))
            && !call.forced.reply_chunk
        {
            let send_len = BARE_MSG_LEN
                + extra
                + CALL_HEADER_LEN
                + pad4(call.cred.body.len())
                + call.args.len();
            let max_reply = (BARE_MSG_LEN + extra + REPLY_HEADER_LEN as usize) as u64
                + u64::from(call.max_results);
            if send_len as u64 <= u64::from(self.negotiation.call_threshold())
                && max_reply <= u64::from(self.negotiation.reply_threshold())
                && send_len <= self.config.send_size as usize
            {
                return self.submit_short(call, tag, send_len);
            }
        }
        let bulk = call.bulk_arg;
        self.submit_planned(call, tag, bulk.map(<[u8]>::len), |dst, wire| {
            if let Some(b) = bulk {
                if wire {
                    // Bytes the server will read, not this core: streamed when large.
                    reader_copies::copy_for_wire(dst, b);
                } else {
                    dst.copy_from_slice(b);
                }
            }
        })
    }

    /// [`submit`](Self::submit) of a Call whose DDP-eligible argument, `len` bytes, is
    /// written by `fill` where it will be sent from: the registered memory the responder
    /// reads through the Read chunk, or the send buffer when the Call goes inline. Zero
    /// copy: a caller that makes its data (reads a file, encodes a block) makes it there,
    /// and the engine moves it only as the RDMA Read or the Send does.
    ///
    /// `fill` is called once, with exactly `len` bytes, when the Call has its credit and
    /// its form; not at all when the Call is refused before that (e.g.
    /// [`SubmitError::WouldBlock`]). A Call that fails after its fill ran (a connection
    /// lost while its memory is exposed) takes its bytes with it: submitting it again fills
    /// again. `call.bulk_arg` must be `None`. A retransmission after a reconnection sends
    /// the same bytes again without calling `fill`. A panic in `fill` unwinds out of this
    /// call with the Call unsent and its credit free again.
    pub fn submit_in_place(
        &mut self,
        call: &CallArgs<'_>,
        tag: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u32, SubmitError> {
        if call.bulk_arg.is_some() {
            return Err(SubmitError::Invalid(
                "a Call has one DDP-eligible argument: bulk_arg or one written in place",
            ));
        }
        if u32::try_from(len).is_err() {
            return Err(SubmitError::TooLarge(None));
        }
        self.admit(call)?;
        self.submit_planned(call, tag, Some(len), |dst, _| fill(dst))
    }

    /// What every Call must pass before it is planned: a live (or reconnecting)
    /// connection, whole XDR units, limits on results and credential, a credit and room to
    /// post.
    #[inline(always)]
    fn admit(&self, call: &CallArgs<'_>) -> Result<(), SubmitError> {
        if self.dead {
            // While reconnecting by itself the requester will take Calls again: poll.
            return Err(if self.recovery.is_some() {
                SubmitError::WouldBlock
            } else {
                SubmitError::Disconnected
            });
        }
        if call.args.len() & 3 != 0 {
            return Err(SubmitError::Invalid("arguments must be whole XDR units"));
        }
        if call.bulk_results.len() > MAX_WRITE_CHUNKS {
            return Err(SubmitError::Invalid("too many DDP-eligible results"));
        }
        if call.cred.body.len() > MAX_AUTH_BYTES {
            return Err(SubmitError::Invalid("credential body over 400 bytes"));
        }
        if self.sq.room() < 8 || self.free.is_empty() || self.credits.available() == 0 {
            return Err(SubmitError::WouldBlock);
        }
        Ok(())
    }

    /// The general path of [`submit`](Self::submit) and
    /// [`submit_in_place`](Self::submit_in_place), for an admitted Call whose DDP-eligible
    /// argument, if any, has `bulk_len` bytes: `place` writes them into the slice given,
    /// told whether it is memory the responder reads (`true`: a Read chunk's) or the send
    /// buffer (`false`: an inline argument). Eight phases, each a function below: the form
    /// is planned, the chunks laid out in the buffers, a slot taken, the Payload stream
    /// written, the DDP-eligible argument placed, the memory exposed, the chunk lists
    /// made, and the header encoded (`encode_call_header`) and the Send posted.
    fn submit_planned(
        &mut self,
        call: &CallArgs<'_>,
        tag: u64,
        bulk_len: Option<usize>,
        place: impl FnOnce(&mut [u8], bool),
    ) -> Result<u32, SubmitError> {
        // Work requests go out in the order their send-queue numbers were given.
        self.post_queued();
        let planned = self.plan_form(call, bulk_len)?;
        let spans = self.lay_out_buffers(call, bulk_len, &planned)?;
        let idx = self.take_slot(&spans)?;
        let xid = self.next_xid(idx);
        let persistent = match self.config.registration {
            Registration::Persistent => true,
            Registration::Mixed => call.persistent,
            Registration::Windows => false,
        };
        let hlen = planned.plan.header_len + self.wire.extra();
        let slot = &mut self.slots[idx as usize];
        if !write_stream(slot, xid, call, &planned, bulk_len, hlen) {
            self.free.put(idx, &mut self.slots[idx as usize]);
            return Err(SubmitError::Invalid("call header"));
        }
        if let Some(n) = bulk_len {
            if let Err(panic) = place_bulk_arg(slot, &planned, &spans, hlen, n, place) {
                self.free.put(idx, &mut self.slots[idx as usize]);
                resume_unwind(panic);
            }
        }
        let Some(qp) = self.qp.as_mut() else {
            // The slot goes back, as on every other refusal after it was taken.
            self.free.put(idx, slot);
            return Err(SubmitError::Disconnected);
        };
        let exposed = expose::<P>(qp, &mut self.sq, &self.stats, slot, idx, persistent, &spans);
        let Some(rkeys) = exposed else {
            self.free.put(idx, slot);
            return Err(SubmitError::Disconnected);
        };
        let reads = &mut *self.reads;
        let nr = make_chunk_lists(slot, reads, call, &planned, &spans, bulk_len, rkeys);
        let nomsg = planned.plan.form.proc() == rpcrdma_proto::header::Proc::NoMsg;
        let inv = offered_invalidation(self.wire, &self.negotiation, slot);
        let head = (self.wire, xid, self.credits.requested(), inv);
        if !encode_call_header(slot, &reads[..nr], head, nomsg, hlen) {
            self.free.put(idx, &mut self.slots[idx as usize]);
            return Err(SubmitError::Invalid("header does not match its plan"));
        }
        self.post_planned(idx, xid, tag, call, &planned, &spans)
    }

    /// Phase one of [`submit_planned`](Self::submit_planned): the Call's sizes, the length
    /// of its segments and its form (RFC 8166 §3.5) within the connection's thresholds;
    /// `Err` when no form carries it or its chunks need more segments than supported.
    #[inline(always)]
    fn plan_form(
        &self,
        call: &CallArgs<'_>,
        bulk_len: Option<usize>,
    ) -> Result<Planned, SubmitError> {
        let extra = self.wire.extra();
        // The RPC call header with this credential (its body padded) and an AUTH_NONE
        // verifier.
        let call_header_len = CALL_HEADER_LEN + pad4(call.cred.body.len());
        let args_end = call_header_len + call.args.len();
        let call_len = args_end + bulk_len.map_or(0, |n| 4 + pad4(n));
        let mut write_segs = [0u32; MAX_WRITE_CHUNKS];
        let mut max_reply = u64::from(REPLY_HEADER_LEN) + u64::from(call.max_results);
        for &r in call.bulk_results {
            max_reply += 4 + pad4(r as usize) as u64;
        }
        let reduced = REPLY_HEADER_LEN + call.max_results + 4 * call.bulk_results.len() as u32;
        let max_reply = u32::try_from(max_reply).map_err(|_| SubmitError::TooLarge(None))?;
        // Segments are `max_segment` long, or longer where a chunk would otherwise need more
        // segments than a list holds: an 8 MiB result goes in 64 segments of 128 KiB. The
        // whole Call bounds a Long Call's position-zero chunk and its item alike. RFC 8166
        // bounds a segment's length only by its 32-bit field.
        let largest = call
            .bulk_results
            .iter()
            .copied()
            .chain([u32::try_from(call_len).unwrap_or(u32::MAX), max_reply])
            .max()
            .unwrap_or(0);
        let max_seg = segment_len(self.config.max_segment, largest);
        let item = bulk_len.filter(|&n| n != 0).map(|n| DdpItem {
            offset: (args_end + 4) as u32,
            len: n as u32,
            segments: segs_needed(n as u32, max_seg),
        });
        for (i, &r) in call.bulk_results.iter().enumerate() {
            write_segs[i] = if r == 0 { 0 } else { segs_needed(r, max_seg) };
        }
        let shape = CallShape {
            call_len: call_len as u32,
            items: item.as_slice(),
            position_zero_segment_max: max_seg,
            write_chunks: &write_segs[..call.bulk_results.len()],
            max_reply_len: max_reply,
            max_reply_reduced_len: Some(reduced),
            reply_chunk_segments: segs_needed(max_reply, max_seg),
        };
        let thresholds = Thresholds {
            call: self
                .negotiation
                .call_threshold()
                .saturating_sub(extra as u32),
            reply: self
                .negotiation
                .reply_threshold()
                .saturating_sub(extra as u32),
        };
        let plan = plan::plan_call_forced(thresholds, &shape, call.forced)
            .map_err(|e| SubmitError::TooLarge(Some(e)))?;
        if plan.read_segments as usize > MAX_READ_SEGMENTS
            || write_segs.iter().any(|&n| n as usize > MAX_SEGMENTS)
            || (plan.reply_chunk && shape.reply_chunk_segments as usize > MAX_SEGMENTS)
        {
            return Err(SubmitError::Invalid("more segments than supported"));
        }
        Ok(Planned {
            plan,
            max_seg,
            call_header_len,
            args_end,
            item,
            max_reply,
        })
    }

    /// Phase two of [`submit_planned`](Self::submit_planned): where the chunks go in the
    /// argument buffer (Read chunks) and the result buffer (Write chunks, then the Reply
    /// chunk); `Err` when they pass the largest bulk buffer or the Send its send buffer.
    #[inline(always)]
    fn lay_out_buffers(
        &self,
        call: &CallArgs<'_>,
        bulk_len: Option<usize>,
        planned: &Planned,
    ) -> Result<Spans, SubmitError> {
        let plan = &planned.plan;
        let bulk_size = self.config.bulk_size as usize;
        let p0_len = plan.position_zero_len as usize;
        let item_off = (p0_len + 7) & !7;
        let (arg_used, item_at) = match plan.form {
            CallForm::Short => (0, 0),
            CallForm::Chunked => (bulk_len.unwrap_or(0), 0),
            CallForm::Long => (item_off + bulk_len.unwrap_or(0), item_off),
        };
        let mut res_used = 0usize;
        let mut write_off = [0u32; MAX_WRITE_CHUNKS];
        for (i, &r) in call.bulk_results.iter().enumerate() {
            write_off[i] = res_used as u32;
            res_used = (res_used + r as usize + 7) & !7;
        }
        let reply_off = res_used;
        if plan.reply_chunk {
            res_used += planned.max_reply as usize;
        }
        if arg_used > bulk_size
            || res_used > bulk_size
            || plan.send_len() + self.wire.extra() > self.config.send_size as usize
        {
            return Err(SubmitError::TooLarge(None));
        }
        Ok(Spans {
            p0_len,
            item_at,
            arg_used,
            res_used,
            write_off,
            reply_off,
        })
    }

    /// Phase three of [`submit_planned`](Self::submit_planned): a free slot, its own
    /// argument and result buffers swapped for shared large ones where the chunks need
    /// more; `WouldBlock` when no slot, or no large buffer, is free.
    #[inline(always)]
    fn take_slot(&mut self, spans: &Spans) -> Result<u32, SubmitError> {
        let Some(idx) = self.free.pop() else {
            return Err(SubmitError::WouldBlock);
        };
        let (arg_used, res_used) = (spans.arg_used, spans.res_used);
        // Chunks larger than the credit's own buffers: shared large ones, or wait.
        if arg_used > self.config.slot_bulk() as usize
            || res_used > self.config.slot_bulk() as usize
        {
            let slot = &mut self.slots[idx as usize];
            let mut took = false;
            for (k, used) in [(0, arg_used), (1, res_used)] {
                let large = self.free.large.as_mut();
                match take_large(large, &self.pd, &self.stats, slot, k, used) {
                    Ok(t) => took |= t,
                    Err(e) => {
                        self.free.put(idx, slot);
                        if e == SubmitError::WouldBlock {
                            bump(&self.stats.large_bulk_waits, 1);
                        }
                        return Err(e);
                    }
                }
            }
            if took {
                bump(&self.stats.large_bulk, 1);
            }
        }
        Ok(idx)
    }

    /// Phase eight of [`submit_planned`](Self::submit_planned), after the transport
    /// header was encoded: the Send of the Call in slot `idx` posted, and the Call counted
    /// by form.
    #[inline(always)]
    fn post_planned(
        &mut self,
        idx: u32,
        xid: u32,
        tag: u64,
        call: &CallArgs<'_>,
        planned: &Planned,
        spans: &Spans,
    ) -> Result<u32, SubmitError> {
        let send_len = (planned.plan.send_len() + self.wire.extra()) as u32;
        self.post_call(idx, xid, tag, call.timeout, send_len, false)?;
        let st = &self.stats;
        if spans.arg_used > 0 {
            bump(&st.bytes_read, spans.arg_used as u64);
        }
        bump(
            match planned.plan.form {
                CallForm::Short => &st.short_calls,
                CallForm::Chunked => &st.chunked_calls,
                CallForm::Long => &st.long_calls,
            },
            1,
        );
        Ok(xid)
    }

    /// The XID of the next Call in slot `idx`: the slot in the low bits, the slot's next
    /// generation above (so that a late reply to the slot's previous Call does not match,
    /// and the slot's XIDs repeat only after 2^(32 − slot bits) of its Calls).
    #[inline]
    pub(super) fn next_xid(&mut self, idx: u32) -> u32 {
        let slot = &mut self.slots[idx as usize];
        slot.gen = slot.gen.wrapping_add(1);
        (slot.gen << self.slot_bits) | idx
    }

    /// [`submit`](Self::submit) of a Short Call without chunks of `send_len` bytes (checked
    /// to fit): the transport header's seven words and the RPC call header written in place,
    /// no planning, no window.
    pub(super) fn submit_short(
        &mut self,
        call: &CallArgs<'_>,
        tag: u64,
        send_len: usize,
    ) -> Result<u32, SubmitError> {
        let Some(idx) = self.free.pop() else {
            return Err(SubmitError::WouldBlock);
        };
        let i = idx as usize;
        let xid = self.next_xid(idx);
        let slot = &mut self.slots[i];
        let credit = self.credits.requested();
        let buf = &mut view::bytes_mut(&mut slot.send)[..send_len];
        let words = emit::short_call_words(xid, credit, call.prog, call.vers, call.proc_num);
        // AUTH_NONE: every word fixed. Another credential: the words up to the procedure
        // number, then the credential (its length and padded body) and an AUTH_NONE verifier.
        // Version 2: RDMA2_MSG's prefix, then version 1's words from the lists on
        // (`emit::put_short_words`). (Each branch writes a constant number of words, which
        // the compiler unrolls.)
        let at = if call.cred.flavor == AUTH_NONE && call.cred.body.is_empty() {
            // Version 1, the usual case: the words handed over by value, so that they are
            // stored from registers (read back from a stack array just written word by word,
            // they stalled the wide loads that copy them: store forwarding fails).
            if self.wire == Wire::V1 {
                emit::put_word_array(buf, words)
            } else {
                emit::put_short_words(buf, &words, self.wire, false)
            }
        } else {
            let head = &words[..emit::SHORT_CALL_CRED_WORD];
            let at = emit::put_short_words(buf, head, self.wire, false);
            let Ok(n) = call.cred.encode(&mut buf[at..]) else {
                self.free.put(idx, &mut self.slots[idx as usize]);
                return Err(SubmitError::Invalid("credential"));
            };
            buf[at + n..at + n + 8].fill(0);
            at + n + 8
        };
        if !call.args.is_empty() {
            // (A call of memcpy for nothing otherwise: a NULL procedure's.)
            buf[at..].copy_from_slice(call.args);
        }
        slot.clear_chunks();
        let send_len = send_len as u32;
        self.post_call(idx, xid, tag, call.timeout, send_len, self.corked)?;
        let st = &self.stats;
        bump(&st.short_calls, 1);
        Ok(xid)
    }

    /// Holds back the Sends of the Short Calls submitted from now on, to post them together
    /// (one list: on the soft fabric one claim of the server's receives for all of them, on
    /// verbs one doorbell) at [`uncork`](Self::uncork), at the next
    /// [`poll_completions`](Self::poll_completions), before any other kind of Call, or when
    /// 32 are held. A run-to-completion caller corks, submits what is ready, and uncorks.
    pub fn cork(&mut self) {
        self.corked = true;
    }

    /// Posts the Sends held back since [`cork`](Self::cork) and stops holding them back.
    pub fn uncork(&mut self) {
        self.corked = false;
        self.post_queued();
    }

    /// Posts the held-back Sends as one list. They were accepted (their credits taken, their
    /// slots Sent): if the post fails the connection is ended, and the next poll completes
    /// them as any Call lost with it.
    #[inline]
    pub(super) fn post_queued(&mut self) {
        if self.n_queued != 0 {
            self.post_held();
        }
    }

    /// [`post_queued`](Self::post_queued) with something held: kept out of line, so that the
    /// poll loop's check stays one compare.
    #[inline(never)]
    pub(super) fn post_held(&mut self) {
        let n = self.n_queued;
        self.n_queued = 0;
        let Some(qp) = self.qp.as_mut() else {
            return;
        };
        let (slots, inline_max) = (&self.slots, self.inline_max);
        let posted = if let [q] = &self.queued[..n] {
            // One Send: one work request, without building (and zeroing) the 32-entry list
            // (measured: some 80 ns of a depth-1 round trip).
            let payload = send_payload(&slots[q.idx as usize].send, &q.sge, inline_max);
            qp.post_send(&call_send(q.idx, (q.seq, q.signaled), payload))
                .is_ok()
        } else {
            let mut wrs = [SendWr::<P>::send(0, &[]); CORK_MAX];
            for (wr, q) in wrs.iter_mut().zip(&self.queued[..n]) {
                let payload = send_payload(&slots[q.idx as usize].send, &q.sge, inline_max);
                *wr = call_send(q.idx, (q.seq, q.signaled), payload);
            }
            qp.post_send_list(&wrs[..n]).is_ok()
        };
        if !posted {
            end_refused::<P>(&self.stats, qp);
        }
    }

    /// Posts the Send of the Call built in slot `idx` (its first `send_len` bytes), takes
    /// its credit and marks the slot Sent; on failure the slot goes back to the free list.
    #[inline(always)]
    pub(super) fn post_call(
        &mut self,
        idx: u32,
        xid: u32,
        tag: u64,
        timeout: Duration,
        send_len: u32,
        hold: bool,
    ) -> Result<(), SubmitError> {
        if self.qp.is_none() {
            self.free.put(idx, &mut self.slots[idx as usize]);
            return Err(SubmitError::Disconnected);
        }
        if hold && self.n_queued == CORK_MAX {
            self.post_queued();
        }
        let post = self.sq.post(false);
        let sge = self.slots[idx as usize].send.sge_span(0, send_len);
        if hold {
            let q = &mut self.queued[self.n_queued];
            (q.seq, q.signaled) = post;
            // Field by field, as for `Queued` itself.
            (q.sge.addr, q.sge.length, q.sge.lkey) = (sge.addr, sge.length, sge.lkey);
            q.idx = idx;
            self.n_queued += 1;
        } else {
            let payload = send_payload(&self.slots[idx as usize].send, &sge, self.inline_max);
            let wr = call_send(idx, post, payload);
            let posted = self.qp.as_mut().is_some_and(|qp| {
                let ok = qp.post_send(&wr).is_ok();
                if !ok {
                    // As for a refused bind.
                    end_refused::<P>(&self.stats, qp);
                }
                ok
            });
            if !posted {
                self.free.put(idx, &mut self.slots[idx as usize]);
                return Err(SubmitError::Disconnected);
            }
        }
        self.credits.take();
        self.slots[idx as usize].arm(xid, tag, timeout, send_len);
        bump(&self.stats.calls, 1);
        bump(&self.stats.bytes_sent, u64::from(send_len));
        Ok(())
    }
}

/// A Call's form and the sizes it was planned from: phase one of
/// [`Client::submit_planned`].
struct Planned {
    /// The form, the transport header's length and whether a Reply chunk is provided
    /// (RFC 8166 §3.5).
    plan: plan::CallPlan,
    /// The length of the Call's segments ([`segment_len`]).
    max_seg: u32,
    /// Bytes of the RPC call header with the Call's credential.
    call_header_len: usize,
    /// Where the arguments end in the Payload stream (the DDP-eligible argument's length
    /// word follows them).
    args_end: usize,
    /// The DDP-eligible argument as an item of the Payload stream; `None` when there is
    /// none or it is empty.
    item: Option<DdpItem>,
    /// The largest Reply the Call provides for, its RPC header and DDP-eligible results
    /// included.
    max_reply: u32,
}

/// Where a planned Call's chunks lie in its slot's argument and result buffers: phase two
/// of [`Client::submit_planned`].
struct Spans {
    /// Bytes of a Long Call's Position-Zero chunk, at the start of the argument buffer.
    p0_len: usize,
    /// Where the DDP-eligible argument lies in the argument buffer: after a Long Call's
    /// Position-Zero chunk (at the next multiple of 8), at 0 for a Chunked Call.
    item_at: usize,
    /// Bytes of the argument buffer the Read chunks expose.
    arg_used: usize,
    /// Bytes of the result buffer the Write chunks and the Reply chunk expose.
    res_used: usize,
    /// Where each Write chunk starts in the result buffer.
    write_off: [u32; MAX_WRITE_CHUNKS],
    /// Where the Reply chunk starts in the result buffer.
    reply_off: usize,
}

/// Phase four of [`Client::submit_planned`]: the Payload stream written where the form
/// puts it (after the `hlen` bytes of transport header in the send buffer, or at the start
/// of the argument buffer for a Long Call): the RPC call header of `xid`, the arguments,
/// and the length word of a DDP-eligible argument of `bulk_len` bytes (and, when it goes
/// inline, its padding). False when the call header does not fit.
#[inline(always)]
fn write_stream<P: Provider>(
    slot: &mut CallSlot<P>,
    xid: u32,
    call: &CallArgs<'_>,
    planned: &Planned,
    bulk_len: Option<usize>,
    hlen: usize,
) -> bool {
    let form = planned.plan.form;
    let (call_header_len, args_end) = (planned.call_header_len, planned.args_end);
    let (stream_buf, at): (&mut [u8], usize) = match form {
        CallForm::Short | CallForm::Chunked => (view::bytes_mut(&mut slot.send), hlen),
        CallForm::Long => (view::bytes_mut(&mut slot.arg), 0),
    };
    let s = &mut stream_buf[at..];
    if put_call_header(s, xid, call).is_none() {
        return false;
    }
    if form == CallForm::Long {
        // A Long Call's arguments are bytes the server will read (its RDMA Read of the
        // position-zero chunk), not this core: streamed when large.
        reader_copies::copy_call_for_wire(&mut s[call_header_len..args_end], call.args);
    } else {
        s[call_header_len..args_end].copy_from_slice(call.args);
    }
    if let Some(n) = bulk_len {
        s[args_end..args_end + 4].copy_from_slice(&(n as u32).to_be_bytes());
        if form == CallForm::Short {
            s[args_end + 4 + n..args_end + 4 + pad4(n)].fill(0);
        }
    }
    true
}

/// Phase five of [`Client::submit_planned`]: the DDP-eligible argument's `n` bytes written
/// by `place` after its length word in the send buffer (a Short Call), or where the Read
/// chunk exposes them in the argument buffer, as the plan says; `place` is told which
/// (`true`: memory the responder reads). An empty argument is its length word alone: a
/// Read chunk would carry nothing. `Err` holds a panic of `place` (a caller's fill), for
/// the caller to free the slot and resume.
#[inline(always)]
fn place_bulk_arg<P: Provider>(
    slot: &mut CallSlot<P>,
    planned: &Planned,
    spans: &Spans,
    hlen: usize,
    n: usize,
    place: impl FnOnce(&mut [u8], bool),
) -> std::thread::Result<()> {
    let form = planned.plan.form;
    let (buf, at) = match form {
        CallForm::Short => (&mut slot.send, hlen + planned.args_end + 4),
        CallForm::Chunked | CallForm::Long => (&mut slot.arg, spans.item_at),
    };
    let dst = &mut view::bytes_mut(buf)[at..at + n];
    let wire = form != CallForm::Short;
    catch_unwind(AssertUnwindSafe(|| place(dst, wire)))
}

/// Writes the ONC RPC call header of `call` (RFC 5531 §9: its credential, an AUTH_NONE
/// verifier) at the start of `buf`: an AUTH_NONE one word by word (what
/// `CallHeader::encode` writes, tested below), another through `CallHeader::encode`. Its
/// length, or `None` if it does not fit.
#[inline]
pub(super) fn put_call_header(buf: &mut [u8], xid: u32, call: &CallArgs<'_>) -> Option<usize> {
    if call.cred.flavor == AUTH_NONE && call.cred.body.is_empty() {
        if buf.len() < CALL_HEADER_LEN {
            return None;
        }
        // xid, CALL, RPC version 2, program, version, procedure, then AUTH_NONE credential
        // and verifier, each a flavor and an empty body.
        let words = emit::call_header_words(xid, call.prog, call.vers, call.proc_num);
        return Some(emit::put_word_array(buf, words));
    }
    let rpc = CallHeader::new(
        xid,
        call.prog,
        call.vers,
        call.proc_num,
        call.cred,
        OpaqueAuth::NONE,
    );
    rpc.encode(buf).ok()
}

/// Encodes the transport header of the Call in `slot` (its Read segments `reads`, the Write
/// chunks and Reply chunk kept in the slot) at the start of its send buffer; false unless it
/// is exactly `len` bytes, the length its payload was laid out for.
pub(super) fn encode_call_header<P: Provider>(
    slot: &mut CallSlot<P>,
    reads: &[ReadSegment],
    (wire, xid, credit, inv_handle): (Wire, u32, u32, u32),
    nomsg: bool,
    len: usize,
) -> bool {
    let mut writes: [&[Segment]; MAX_WRITE_CHUNKS] = [&[]; MAX_WRITE_CHUNKS];
    for c in 0..slot.n_writes {
        writes[c] = &slot.writes[c][..slot.write_n[c]];
    }
    let chunks = Chunks {
        reads,
        writes: &writes[..slot.n_writes],
        reply: slot.has_reply_chunk.then(|| &slot.reply[..slot.reply_n]),
    };
    let sendbuf = view::bytes_mut(&mut slot.send);
    sendbuf.len() >= len
        && rpcrdma_proto::v2::encode_message_header(
            wire,
            &mut sendbuf[..len],
            rpcrdma_proto::v2::MessageFields {
                xid,
                credit,
                nomsg,
                response: false,
                inv_handle,
            },
            chunks,
        ) == Ok(len)
}

/// The Send of the Call in slot `idx`, numbered and signaled as the send queue's `post`
/// said (`SendQueue::post`).
#[inline]
pub(super) fn call_send<P: Provider>(
    idx: u32,
    (seq, signaled): (u64, bool),
    payload: Payload<'_>,
) -> SendWr<'_, P> {
    let wr = SendWr::new(
        wrid::pack(Kind::Send, idx, if signaled { seq } else { 0 }),
        SendOp::Send,
        payload,
    );
    if signaled {
        wr.signaled()
    } else {
        wr
    }
}
