//! The model of the responder: what the server must do with one message (`predict`).

use rpcrdma_engine::program::{
    fill_pattern, is_pattern, opaque_len, ECHO, MAX_ECHO, MULTI, NULL, PROG, READ, VERS,
    VERS_TIMED, WRITE,
};
use rpcrdma_proto::chunks::{match_results, place_reply, place_write, Placement, ResultTarget};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, RdmaError, Segment};
use rpcrdma_proto::plan::{plan_reply, ReplyForm};
use rpcrdma_proto::rpc::{ReplyHeader, RpcMessage};
use rpcrdma_proto::verdict::{judge_call, Action};

use crate::serve_common::msg::w;

use crate::peer::{MemView, Peer};
use crate::settings::Cfg;

/// What the server must do with one message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Want {
    /// No reply; the connection stays up.
    Discard,
    /// Exactly this Send, after exactly these RDMA Writes into the data region.
    Reply(Reply),
    /// The connection is torn down without a reply.
    TornDown,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reply {
    pub(crate) send: Vec<u8>,
    /// (offset in the data region, bytes).
    pub(crate) writes: Vec<(usize, Vec<u8>)>,
}

fn rdma_error(m: &[u8], grant: u32, err: RdmaError) -> Want {
    let h = Header::error(w(m, 0), w(m, 4), grant, err);
    let mut v = vec![0; h.encoded_len()];
    h.encode(&mut v).unwrap();
    Want::Reply(Reply {
        send: v,
        writes: Vec::new(),
    })
}

/// What the handler of the built-in program does.
enum ModelOutcome {
    Success {
        results: Vec<u8>,
        items: Vec<Vec<u8>>,
    },
    Garbage,
    SystemErr,
    /// A DDP-eligible result the bulk buffer could not hold: the reply is refused as too
    /// long for what the Call provided (`responder::answer::run_handler`).
    Overflow,
}

pub(crate) fn arg(a: &[u8], k: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        a.get(4 * k..4 * k + 4)?.try_into().ok()?,
    ))
}

/// `program.rs`'s procedures as specified in its table, with the transport's limits: inline
/// results at most `cap` bytes (the reply buffer left after the headers), DDP-eligible
/// results in a bulk buffer of `bulk` bytes, each aligned to 8.
/// A DDP-eligible result whose bytes would end at `need` in a bulk buffer that cannot hold
/// them: refused as too long when the server's largest bulk buffer (`max_bulk`) could, the
/// program's SYSTEM_ERR when none could (`responder::answer::run_handler`).
fn overflow(need: usize, max_bulk: usize) -> ModelOutcome {
    if need <= max_bulk {
        ModelOutcome::Overflow
    } else {
        ModelOutcome::SystemErr
    }
}

fn handler(proc_num: u32, a: &[u8], cap: usize, bulk: usize, max_bulk: usize) -> ModelOutcome {
    match proc_num {
        NULL => ModelOutcome::Success {
            results: Vec::new(),
            items: Vec::new(),
        },
        ECHO => {
            let Some(n) = arg(a, 0) else {
                return ModelOutcome::Garbage;
            };
            let len = opaque_len(n as usize);
            if n > MAX_ECHO || a.len() < len {
                return ModelOutcome::Garbage;
            }
            let max = cap.min(opaque_len(MAX_ECHO as usize)) & !3;
            if max < len {
                return ModelOutcome::SystemErr;
            }
            ModelOutcome::Success {
                results: a[..len].to_vec(),
                items: Vec::new(),
            }
        }
        READ => {
            let (Some(n), Some(seed)) = (arg(a, 0), arg(a, 1)) else {
                return ModelOutcome::Garbage;
            };
            if n as usize > bulk {
                return overflow(n as usize, max_bulk);
            }
            let mut item = vec![0; n as usize];
            fill_pattern(seed, &mut item);
            ModelOutcome::Success {
                results: n.to_be_bytes().to_vec(),
                items: vec![item],
            }
        }
        WRITE => {
            let (Some(seed), Some(n)) = (arg(a, 0), arg(a, 1)) else {
                return ModelOutcome::Garbage;
            };
            let Some(data) = a.get(8..8 + n as usize) else {
                return ModelOutcome::Garbage;
            };
            let ok = is_pattern(seed, data) as u32;
            let mut results = ok.to_be_bytes().to_vec();
            results.extend_from_slice(&n.to_be_bytes());
            ModelOutcome::Success {
                results,
                items: Vec::new(),
            }
        }
        MULTI => {
            let (Some(k), Some(n)) = (arg(a, 0), arg(a, 1)) else {
                return ModelOutcome::Garbage;
            };
            let mut items = Vec::new();
            let mut used = 0usize;
            for i in 0..k {
                // At most 4 DDP-eligible results (dispatch::MAX_BULK_RESULTS).
                if i >= 4 {
                    return ModelOutcome::SystemErr;
                }
                let start = (used + 7) & !7;
                let end = start + n as usize;
                if end > bulk {
                    return overflow(end, max_bulk);
                }
                used = end;
                let mut item = vec![0; n as usize];
                fill_pattern(i + 1, &mut item);
                items.push(item);
            }
            ModelOutcome::Success {
                results: k.to_be_bytes().to_vec(),
                items,
            }
        }
        _ => unreachable!("looked up before"),
    }
}

/// What goes in the reply: the handler's results, or an RPC error.
enum RpcBody<'a> {
    Handler { proc_num: u32, args: &'a [u8] },
    Error(ReplyHeader<'static>),
}

struct Model<'a> {
    mem: &'a MemView<'a>,
    cfg: &'a Cfg,
    grant: u32,
    threshold: u32,
}

/// The model's answer to message `m` from a peer whose memory is `mem`.
fn predict(m: &[u8], mem: &MemView<'_>, cfg: &Cfg, grant: u32, peer_recv: u32) -> Want {
    // A Send larger than the server's receives: the receive fails, the connection ends
    // (RFC 8166 §3.3).
    if m.len() > cfg.inline as usize {
        return Want::TornDown;
    }
    let model = Model {
        mem,
        cfg,
        grant,
        threshold: cfg.reply_threshold(peer_recv),
    };
    model.predict(m)
}

impl Model<'_> {
    fn predict(&self, m: &[u8]) -> Want {
        let call = match judge_call(m) {
            Ok(c) => c,
            Err(v) => {
                return match v.action {
                    Action::Discard => Want::Discard,
                    Action::ErrVers { low, high } => {
                        rdma_error(m, self.grant, RdmaError::Vers { low, high })
                    }
                    Action::ErrChunk => rdma_error(m, self.grant, RdmaError::Chunk),
                    Action::Process => unreachable!("an Err verdict"),
                    Action::GarbageArgs => match HeaderView::parse(m) {
                        Ok(h) => self.build(&h, RpcBody::Error(ReplyHeader::garbage_args(h.xid()))),
                        Err(_) => rdma_error(m, self.grant, RdmaError::Chunk),
                    },
                };
            }
        };
        let h = call.header;
        let stream: Vec<u8>;
        let (c, len) = if call.plan.chunk_count() > 0 {
            let plan = call.plan;
            let total = plan.total_len() as usize;
            // RFC 8166 §8.1.4: too large to pull, ERR_CHUNK before any RDMA Read.
            if total > self.cfg.bulk as usize {
                return rdma_error(m, self.grant, RdmaError::Chunk);
            }
            // Every segment is read: one the peer's memory refuses ends the connection.
            let reads = plan.read_list();
            if reads.iter().any(|rs| self.mem.read(&rs.segment).is_none()) {
                return Want::TornDown;
            }
            let mut s = vec![0u8; total];
            let payload = h.payload();
            let inline = &payload[..plan.inline_len().min(payload.len())];
            let n = plan
                .reassemble(
                    inline,
                    |i, buf| {
                        let seg = reads.get(i).unwrap().segment;
                        buf.copy_from_slice(self.mem.read(&seg).unwrap());
                    },
                    &mut s,
                )
                .expect("the verdict's plan reassembles");
            s.truncate(n);
            stream = s;
            match RpcMessage::parse(&stream) {
                Ok((RpcMessage::Call(c), len)) if c.xid == h.xid() => (c, len),
                Ok((RpcMessage::Call(_), _)) => return rdma_error(m, self.grant, RdmaError::Chunk),
                // As the verdict does for one inline (RFC 8166 §4).
                Ok((RpcMessage::Reply(_), _)) => return Want::Discard,
                Err(_) => {
                    return self.build(&h, RpcBody::Error(ReplyHeader::garbage_args(h.xid())))
                }
            }
        } else {
            match call.call {
                Some((c, len)) => {
                    stream = h.payload().to_vec();
                    (c, len)
                }
                None => return rdma_error(m, self.grant, RdmaError::Chunk),
            }
        };
        let xid = h.xid();
        let body = if !c.is_rpc_v2() {
            RpcBody::Error(ReplyHeader::rpc_mismatch(xid, 2, 2))
        } else if c.prog != PROG {
            RpcBody::Error(ReplyHeader::prog_unavail(xid))
        } else if c.vers != VERS {
            // The fuzzer never calls the timed version (2), which the server also has.
            RpcBody::Error(ReplyHeader::prog_mismatch(xid, VERS, VERS_TIMED))
        } else if c.proc_num > MULTI {
            RpcBody::Error(ReplyHeader::proc_unavail(xid))
        } else {
            RpcBody::Handler {
                proc_num: c.proc_num,
                args: &stream[len..],
            }
        };
        self.build(&h, body)
    }

    /// The reply to the Call `h` (RFC 8166 §4.3, §4.5.3, §3.5.3).
    fn build(&self, h: &HeaderView<'_>, body: RpcBody<'_>) -> Want {
        let m = h.bytes();
        let chunk_error = || rdma_error(m, self.grant, RdmaError::Chunk);
        let wl = h.write_list();
        let rc = h.reply_chunk();
        // The responder's limits: 8 Write chunks, 64 segments per chunk.
        if wl.len() > 8 || wl.iter().any(|c| c.len() > 64) || rc.is_some_and(|c| c.len() > 64) {
            return chunk_error();
        }
        let hlen = 16 + 4 + wl.encoded_len() + rc.map_or(4, |c| 4 + c.encoded_len());
        let ring = self.cfg.ring_len(h);
        let xid = h.xid();
        let (rpc, results, items) = match body {
            RpcBody::Error(r) => (r, Vec::new(), Vec::new()),
            RpcBody::Handler { proc_num, args } => {
                let cap = ring.saturating_sub(hlen + 24);
                let max_results = match proc_num {
                    ECHO => opaque_len(MAX_ECHO as usize),
                    WRITE => 8,
                    _ => 4,
                };
                match handler(
                    proc_num,
                    args,
                    cap.min(max_results) & !3,
                    self.cfg.bulk_cap(h),
                    self.cfg.bulk as usize,
                ) {
                    ModelOutcome::Success { results, items } => {
                        (ReplyHeader::accepted_success(xid), results, items)
                    }
                    ModelOutcome::Garbage => {
                        (ReplyHeader::garbage_args(xid), Vec::new(), Vec::new())
                    }
                    ModelOutcome::SystemErr => {
                        (ReplyHeader::system_err(xid), Vec::new(), Vec::new())
                    }
                    ModelOutcome::Overflow => return chunk_error(),
                }
            }
        };
        let mut payload = vec![0u8; rpc.encoded_len()];
        rpc.encode(&mut payload).unwrap();
        payload.extend_from_slice(&results);

        // Echoes: every chunk unused (zero lengths) until it receives a result.
        let mut echo: Vec<Vec<Segment>> = wl
            .iter()
            .map(|c| c.iter().map(|s| Segment { length: 0, ..s }).collect())
            .collect();
        let mut writes: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut torn = false;
        for (k, target) in match_results(wl, items.len()).enumerate() {
            let item = &items[k];
            let len = item.len() as u32;
            if hlen + payload.len() + 4 > ring {
                return self.after_error(m);
            }
            payload.extend_from_slice(&len.to_be_bytes());
            match target {
                ResultTarget::Chunk { index, chunk } => match place_write(chunk, len) {
                    Ok(fill) => {
                        self.place(fill.placements(), item, &mut writes, &mut torn);
                        let mut left = len;
                        for (e, s) in echo[index].iter_mut().zip(chunk.iter()) {
                            e.length = s.length.min(left);
                            left -= e.length;
                        }
                    }
                    Err(_) => return self.after_error(m),
                },
                ResultTarget::InlineEmptyChunk { .. } | ResultTarget::InlineNoChunk => {
                    let padded = (item.len() + 3) & !3;
                    if hlen + payload.len() + padded > ring {
                        return self.after_error(m);
                    }
                    payload.extend_from_slice(item);
                    payload.resize(payload.len() + padded - item.len(), 0);
                }
            }
        }
        let form = match plan_reply(self.threshold, payload.len() as u32, wl, rc) {
            Ok(p) => p.form,
            Err(_) => return self.after_error(m),
        };
        let mut rc_echo: Vec<Segment> = rc
            .map(|c| c.iter().map(|s| Segment { length: 0, ..s }).collect())
            .unwrap_or_default();
        if form == ReplyForm::Long {
            let c = rc.unwrap();
            match place_reply(c, payload.len() as u32) {
                Ok(fill) => {
                    self.place(fill.placements(), &payload, &mut writes, &mut torn);
                    let mut left = payload.len() as u32;
                    for (e, s) in rc_echo.iter_mut().zip(c.iter()) {
                        e.length = s.length.min(left);
                        left -= e.length;
                    }
                }
                Err(_) => return self.after_error(m),
            }
        }
        if torn {
            return Want::TornDown;
        }
        let echo_refs: Vec<&[Segment]> = echo.iter().map(|v| v.as_slice()).collect();
        let chunks = Chunks {
            reads: &[],
            writes: &echo_refs,
            reply: rc.map(|_| rc_echo.as_slice()),
        };
        let hdr = match form {
            ReplyForm::Short => Header::msg(xid, self.grant, chunks),
            ReplyForm::Long => Header::nomsg(xid, self.grant, chunks),
        };
        let mut send = vec![0u8; hdr.encoded_len()];
        hdr.encode(&mut send).unwrap();
        assert_eq!(send.len(), hlen, "the model's header length");
        if form == ReplyForm::Short {
            send.extend_from_slice(&payload);
        }
        Want::Reply(Reply { send, writes })
    }

    /// The RDMA Writes of `placements` of `src` into the peer's memory; one the memory
    /// refuses ends the connection.
    fn place(
        &self,
        placements: impl Iterator<Item = Placement>,
        src: &[u8],
        writes: &mut Vec<(usize, Vec<u8>)>,
        torn: &mut bool,
    ) {
        for p in placements {
            let bytes = &src[p.src_offset as usize..(p.src_offset + p.len) as usize];
            match self.mem.write_at(p.segment.handle, p.segment.offset, p.len) {
                Some(off) => writes.push((off, bytes.to_vec())),
                None => *torn = true,
            }
        }
    }

    /// ERR_CHUNK found while placing the results: nothing was written before it (the
    /// responder checks every chunk before it posts any RDMA Write), and no rkey the
    /// placement would have used was touched, so none can end the connection.
    fn after_error(&self, m: &[u8]) -> Want {
        rdma_error(m, self.grant, RdmaError::Chunk)
    }
}

pub(crate) fn model_answer(m: &[u8], p: &Peer, cfg: &Cfg) -> Want {
    let grant = p.grant.unwrap_or(cfg.credits);
    predict(m, &p.view(), cfg, grant, p.opts.peer_recv())
}
