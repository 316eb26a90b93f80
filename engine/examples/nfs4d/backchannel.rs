//! Calling clients back (RFC 8881 §20) over each session's back channel: CB_NULL first,
//! then a CB_COMPOUND holding CB_SEQUENCE on back-channel slot 0 (§20.9), each sent with
//! `ServerConn::call_reverse_as` (RFC 8167's backward direction on version 1) and its
//! answer checked. A client whose CB_SEQUENCE was answered has a working callback path
//! (`State::cb_up`) and may be given delegations; their recalls follow, one at a time on
//! slot 0, as CB_COMPOUND(CB_SEQUENCE, CB_RECALL) (§20.2).

use std::collections::VecDeque;

use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::responder::{ReverseCallError, ServerConn};
use rpcrdma_proto::rpc::{AuthSys, Gids, OpaqueAuth, AUTH_SYS};
use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

use crate::session::{BackChannel, SessionId, State};
use crate::state::Recall;

/// CB_NULL and CB_COMPOUND (§20), in the callback program the client named.
const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;
const CB_VERSION: u32 = 1;
/// OP_CB_RECALL and OP_CB_SEQUENCE.
const OP_CB_RECALL: u32 = 4;
const OP_CB_SEQUENCE: u32 = 11;
/// NFS4ERR_DELAY, and how many times a CB_SEQUENCE answered so is sent again.
const NFS4ERR_DELAY: u32 = 10008;
const MAX_DELAYS: u32 = 5;

/// Where one session's callbacks stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// CB_NULL to send.
    Null,
    /// CB_NULL sent.
    NullSent,
    /// CB_SEQUENCE to send.
    Sequence,
    /// CB_SEQUENCE sent.
    SequenceSent,
    /// Both answered, or given up.
    Done,
}

struct Run {
    session: SessionId,
    back: BackChannel,
    step: Step,
    /// CB_SEQUENCEs answered NFS4ERR_DELAY so far.
    delays: u32,
    /// The sequence ID of back-channel slot 0's next call.
    seq: u32,
    /// Delegations to recall through this session, the first one's call sent or not.
    recalls: VecDeque<Recall>,
    recall_sent: bool,
}

/// Every session's callbacks and what came of them.
#[derive(Default)]
pub struct Callbacks {
    runs: Vec<Run>,
    calls: u64,
    replies: u64,
    errors: u64,
    null_ok: u64,
    sequence_ok: u64,
    recalls: u64,
    recall_ok: u64,
    /// The statuses of the last CB_COMPOUND that failed: its own and CB_SEQUENCE's.
    last_failure: Option<(u32, u32)>,
}

impl Callbacks {
    /// Sessions just created with a back channel.
    pub fn add(&mut self, new: Vec<(SessionId, BackChannel)>) {
        self.runs.extend(new.into_iter().map(|(session, back)| Run {
            session,
            back,
            step: Step::Null,
            delays: 0,
            seq: 1,
            recalls: VecDeque::new(),
            recall_sent: false,
        }));
    }

    /// Queues the recall `r` on a live session of its client with a back channel; `false`
    /// when the client has none (the delegation is revoked once its time is up).
    pub fn recall(&mut self, r: Recall, state: &State) -> bool {
        let run = self.runs.iter_mut().rev().find(|run| {
            state.client_of(&run.session) == Some(r.clientid)
                && state.back_channel(&run.session).is_some()
        });
        match run {
            Some(run) => {
                run.recalls.push_back(r);
                true
            }
            None => false,
        }
    }

    /// Sends what each session's next step needs on its connection, and takes the
    /// answers in. A session destroyed meanwhile is called no more.
    pub fn drive<P: Provider>(&mut self, conns: &mut [ServerConn<P>], state: &mut State) {
        for c in conns.iter_mut() {
            let id = c.id();
            let mut answers = Vec::new();
            c.take_reverse(|r| answers.push((r.tag, r.result.map(<[u8]>::to_vec))));
            for (tag, result) in answers {
                self.replies += u64::from(result.is_ok());
                let Some(run) = self.runs.get_mut(tag as usize) else {
                    continue;
                };
                match (run.step, result) {
                    (Step::Done, result) if run.recall_sent => {
                        run.recall_sent = false;
                        let st = result
                            .map_err(|_| (u32::MAX, u32::MAX))
                            .and_then(|res| cb_sequence_status(&res, &run.session, OP_CB_RECALL));
                        match st {
                            Ok(()) => {
                                run.seq = run.seq.wrapping_add(1);
                                self.recall_ok += 1;
                                run.recalls.pop_front();
                            }
                            Err((_, NFS4ERR_DELAY)) => {}
                            Err(e) => {
                                // CB_SEQUENCE went through, CB_RECALL failed: the slot
                                // moved on.
                                if e.1 == 0 {
                                    run.seq = run.seq.wrapping_add(1);
                                }
                                self.errors += 1;
                                self.last_failure = Some(e);
                                run.recalls.pop_front();
                            }
                        }
                    }
                    (Step::NullSent, Ok(_)) => {
                        self.null_ok += 1;
                        run.step = Step::Sequence;
                    }
                    (Step::SequenceSent, Ok(res)) => {
                        run.step = Step::Done;
                        match cb_sequence_status(&res, &run.session, 0) {
                            Ok(()) => {
                                self.sequence_ok += 1;
                                run.seq = run.seq.wrapping_add(1);
                                if let Some(id) = state.client_of(&run.session) {
                                    state.cb_up.insert(id);
                                }
                            }
                            // Again later, a few times (RFC 8881 §15.1.1.3: the slot was
                            // not used).
                            Err((_, NFS4ERR_DELAY)) if run.delays < MAX_DELAYS => {
                                run.delays += 1;
                                run.step = Step::Sequence;
                            }
                            Err(st) => {
                                self.errors += 1;
                                self.last_failure = Some(st);
                            }
                        }
                    }
                    _ => {
                        self.errors += 1;
                        run.step = Step::Done;
                    }
                }
            }
            for (k, run) in self.runs.iter_mut().enumerate() {
                // Only a step with something to send: one sent waits for its answer.
                let recall = run.step == Step::Done && !run.recall_sent && !run.recalls.is_empty();
                if run.back.conn != id
                    || !(recall || matches!(run.step, Step::Null | Step::Sequence))
                {
                    continue;
                }
                let Some((_, used)) = state.back_channel(&run.session) else {
                    // The session is gone: nothing more to call.
                    run.step = Step::Done;
                    continue;
                };
                if (run.step == Step::Sequence || recall) && !used {
                    // Not before the client has the session (its first SEQUENCE).
                    continue;
                }
                let sent = match run.step {
                    Step::Null => c.call_reverse_as(
                        run.back.program,
                        CB_VERSION,
                        CB_NULL,
                        OpaqueAuth::NONE,
                        &[],
                        k as u64,
                    ),
                    Step::Sequence | Step::Done => {
                        let mut body = [0u8; 64];
                        let n = auth_sys(&mut body);
                        let cred = match run.back.flavor {
                            1 => OpaqueAuth {
                                flavor: AUTH_SYS,
                                body: &body[..n],
                            },
                            _ => OpaqueAuth::NONE,
                        };
                        let args = cb_args(
                            &run.session,
                            run.seq,
                            run.recalls.front().filter(|_| recall),
                        );
                        // Within the client's back-channel requests (CREATE_SESSION's
                        // ca_maxrequestsize), its RPC header included.
                        if args.len() + 128 > run.back.max_request as usize {
                            self.errors += 1;
                            run.step = Step::Done;
                            continue;
                        }
                        c.call_reverse_as(
                            run.back.program,
                            CB_VERSION,
                            CB_COMPOUND,
                            cred,
                            &args,
                            k as u64,
                        )
                    }
                    _ => continue,
                };
                match sent {
                    Ok(_) => {
                        self.calls += 1;
                        if recall {
                            run.recall_sent = true;
                            self.recalls += 1;
                        } else if run.step == Step::Null {
                            run.step = Step::NullSent;
                        } else {
                            run.step = Step::SequenceSent;
                        }
                    }
                    Err(ReverseCallError::WouldBlock) | Err(ReverseCallError::VersionUndecided) => {
                    }
                    Err(_) => {
                        self.errors += 1;
                        if recall {
                            run.recalls.pop_front();
                        }
                        run.step = Step::Done;
                    }
                }
            }
        }
    }

    /// The counters as a JSON object.
    pub fn json(&self) -> String {
        format!(
            "{{\"calls\":{},\"replies\":{},\"errors\":{},\"cb_null\":{},\"cb_sequence\":{},\"cb_recall_sent\":{},\"cb_recall\":{}{}}}",
            self.calls,
            self.replies,
            self.errors,
            self.null_ok,
            self.sequence_ok,
            self.recalls,
            self.recall_ok,
            match self.last_failure {
                Some((c, o)) =>
                    format!(",\"last_failure\":{{\"compound\":{c},\"cb_sequence\":{o}}}"),
                None => String::new(),
            }
        )
    }
}

/// An AUTH_SYS body for root.
fn auth_sys(out: &mut [u8]) -> usize {
    AuthSys {
        stamp: 0,
        machinename: b"nfs4d",
        uid: 0,
        gid: 0,
        gids: Gids::default(),
    }
    .encode(out)
    .unwrap_or(0)
}

/// CB_COMPOUND4args with CB_SEQUENCE (slot 0, sequence `seq`, no referring calls) and,
/// with `recall`, CB_RECALL of its delegation (not truncated).
fn cb_args(session: &SessionId, seq: u32, recall: Option<&Recall>) -> Vec<u8> {
    let mut v = vec![0u8; 512];
    let mut w = XdrWriter::new(&mut v);
    let n = (|| {
        w.put_opaque_var(b"nfs4d", 64)?;
        w.put_u32(1)?; // minor version
        w.put_u32(0)?; // callback_ident
        w.put_u32(if recall.is_some() { 2 } else { 1 })?;
        w.put_u32(OP_CB_SEQUENCE)?;
        w.put_opaque_fixed(session)?;
        w.put_u32(seq)?;
        w.put_u32(0)?; // slot
        w.put_u32(0)?; // highest slot
        w.put_bool(false)?;
        w.put_u32(0)?; // referring call lists
        if let Some(r) = recall {
            w.put_u32(OP_CB_RECALL)?;
            w.put_u32(r.stateid.seqid)?;
            w.put_opaque_fixed(&r.stateid.other)?;
            w.put_bool(false)?;
            w.put_opaque_var(&r.fh, 128)?;
        }
        Ok::<_, rpcrdma_proto::EncodeError>(w.position())
    })()
    .unwrap_or(0);
    v.truncate(n);
    v
}

/// Whether a CB_COMPOUND's results say NFS4_OK for a CB_SEQUENCE of `session` (and the
/// operation `then` after it, unless 0); else the compound's status and CB_SEQUENCE's
/// (`u32::MAX` where the results end or differ).
fn cb_sequence_status(res: &[u8], session: &SessionId, then: u32) -> Result<(), (u32, u32)> {
    let mut r = XdrReader::new(res);
    let status = r.u32().unwrap_or(u32::MAX);
    let mut ops = 0;
    let op_status = (|| {
        r.opaque_var(1024).ok()?;
        ops = r.u32().ok()?;
        let op = r.u32().ok()?;
        let st = r.u32().ok()?;
        if ops == 0 || op != OP_CB_SEQUENCE {
            return None;
        }
        if st != 0 {
            return Some(st);
        }
        let sid = r.opaque_fixed(16).ok()?;
        (sid == session).then_some(0)
    })()
    .unwrap_or(u32::MAX);
    // The operation after CB_SEQUENCE answered too (the COMPOUND's status is its).
    if status == 0 && op_status == 0 && (then == 0 || ops >= 2) {
        Ok(())
    } else {
        Err((status, op_status))
    }
}
