//! Posting a send request: the checks made when it is posted, the fault injected at a given
//! request, dispatch to its execution, and its completion, after which a failed request moves
//! the queue pair to the error state (RC semantics; flushed with WR_FLUSH_ERR once in error).

use std::sync::atomic::Ordering;

use super::SoftQp;
use crate::fabric::soft::cq::Cqe0;
use crate::fabric::soft::rq::{FAIL_FROM_NEXT, S_INIT, S_RTR, S_RTS};
use crate::fabric::soft::sys::monotonic_ns;
use crate::fabric::soft::Soft;
use crate::fabric::{Payload, PostError, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};

/// The outcome of executing a send work request.
pub(super) type Outcome = (WcStatus, WcOpcode, u32);

impl SoftQp {
    /// The checks of a request made when it is posted that depend on the request alone.
    #[inline]
    fn check_post(&self, wr: &SendWr<'_, Soft>) -> Result<(), PostError> {
        match wr.payload {
            Payload::Sges(sges) if sges.len() > self.caps.max_send_sge as usize => {
                return Err(PostError::TooManySge {
                    given: sges.len(),
                    max: self.caps.max_send_sge,
                });
            }
            Payload::Inline(bytes) => {
                if bytes.len() > self.caps.max_inline_data as usize {
                    return Err(PostError::InlineTooLarge {
                        given: bytes.len(),
                        max: self.caps.max_inline_data,
                    });
                }
                if matches!(wr.op, SendOp::RdmaRead { .. }) {
                    return Err(PostError::InvalidWr("inline RDMA Read"));
                }
            }
            _ => {}
        }
        if let SendOp::BindMw(b) = wr.op {
            // Refused at post time by both providers, so that the engine sees one behaviour
            // (verbs would bind a window that grants nothing).
            if b.len == 0 {
                return Err(PostError::InvalidWr("zero-length window bind"));
            }
        }
        Ok(())
    }

    #[inline]
    pub(super) fn post_send_one(&mut self, wr: &SendWr<'_, Soft>) -> Result<(), PostError> {
        self.check_post(wr)?;
        let state = self.mem.state();
        if state == S_INIT || state == S_RTR {
            return Err(PostError::NotConnected);
        }
        if self.sq_outstanding() >= u64::from(self.caps.max_send_wr) {
            return Err(PostError::QueueFull);
        }
        self.sq_posted += 1;
        self.sq_pending += 1;
        let info = self.mem.info();
        let mut fail_at = info.send_fail_at.load(Ordering::Acquire);
        if fail_at & FAIL_FROM_NEXT != 0 {
            fail_at = self.anchor_send_fault(fail_at);
        }
        let outcome = if state != S_RTS {
            (WcStatus::WrFlushErr, opcode_of(&wr.op), 0)
        } else if fail_at == self.sq_posted
            && info
                .send_fail_at
                .compare_exchange(fail_at, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            let status = WcStatus::from_raw(info.send_fail_status.load(Ordering::Relaxed))
                .unwrap_or(WcStatus::GeneralErr);
            (status, opcode_of(&wr.op), 0)
        } else {
            self.execute(wr)
        };
        self.finish(wr, outcome);
        Ok(())
    }

    /// A send fault armed as the `n`th post from the arming (`armed`, see
    /// [`FAIL_FROM_NEXT`]) made absolute now that this post (`sq_posted`) is the first
    /// after it; returns the setting then in force.
    #[cold]
    fn anchor_send_fault(&self, armed: u64) -> u64 {
        let info = self.mem.info();
        let at = self.sq_posted - 1 + (armed & !FAIL_FROM_NEXT);
        match info
            .send_fail_at
            .compare_exchange(armed, at, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => at,
            // Armed again or cleared meanwhile: the newer setting counts from the next post.
            Err(now) if now & FAIL_FROM_NEXT != 0 => 0,
            Err(now) => now,
        }
    }

    /// Produces the send completion if one is due and applies the error state.
    #[inline]
    fn finish(&mut self, wr: &SendWr<'_, Soft>, (status, opcode, byte_len): Outcome) {
        let signaled = self.sig_all || wr.flags.contains(SendFlags::SIGNALED);
        if signaled || status != WcStatus::Success {
            let info = self.mem.info();
            let delay_ns = info.delay_ns.load(Ordering::Relaxed);
            let cqe = Cqe0 {
                wr_id: wr.wr_id,
                status,
                opcode,
                byte_len,
                imm: None,
                inv: None,
                qp_num: self.qp_num,
                slot: self.send_slot.0,
                slot_gen: self.send_slot.1,
                retire: self.sq_pending,
                delay_polls: info.delay_polls.load(Ordering::Relaxed),
                not_before_ns: if delay_ns == 0 {
                    0
                } else {
                    monotonic_ns() + delay_ns
                },
                data: 0,
            };
            self.sq_pending = 0;
            if self.send_cq.ring().push(&cqe).is_err() {
                self.fail_local();
            }
        }
        if status != WcStatus::Success {
            self.fail_local();
        }
    }

    #[inline]
    fn execute(&mut self, wr: &SendWr<'_, Soft>) -> Outcome {
        match wr.op {
            SendOp::Send => self.exec_send(wr, None, None),
            SendOp::SendWithImm { imm } => self.exec_send(wr, Some(imm), None),
            SendOp::SendWithInv { rkey } => self.exec_send(wr, None, Some(rkey)),
            SendOp::RdmaWrite { remote } => self.exec_write(wr, remote, None),
            SendOp::RdmaWriteWithImm { remote, imm } => self.exec_write(wr, remote, Some(imm)),
            SendOp::RdmaRead { remote } => self.exec_read(wr, remote),
            SendOp::LocalInv { rkey } => match self.dom.view().invalidate(rkey) {
                Ok(()) => (WcStatus::Success, WcOpcode::LocalInv, 0),
                Err(_) => (WcStatus::LocQpOpErr, WcOpcode::LocalInv, 0),
            },
            SendOp::BindMw(bind) => self.exec_bind(&bind),
        }
    }
}

fn opcode_of(op: &SendOp<'_, Soft>) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        SendOp::BindMw(_) => WcOpcode::BindMw,
    }
}
