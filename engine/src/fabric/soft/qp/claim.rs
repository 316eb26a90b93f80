//! Claiming the peer's receives and receive completion slots for Sends (and RDMA Writes with
//! immediate): one at a time, or for a whole list of Sends ahead with one locked instruction
//! each (`preclaim`), giving back what the list did not use (`release_pre`); and the receive
//! faults applied to a claimed receive. A peer's shared receive queue is claimed from one
//! receive at a time: receives claimed ahead could not go back to it once another queue
//! pair's peer had claimed after them.

use std::sync::atomic::Ordering;

use super::SoftQp;
use crate::fabric::soft::peer::PeerLink;
use crate::fabric::soft::rq::{Claimed, S_RTS};
use crate::fabric::soft::Soft;
use crate::fabric::{SendOp, SendWr, WcStatus};

/// Most Sends of one list claimed at once (see [`SoftQp::preclaim`]).
const MAX_PRECLAIM: u64 = 32;

/// The peer's receives (positions `recv..recv_end`) and completion slots (`slot..slot_end`)
/// claimed for the Sends of the list being posted and not used yet.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pre {
    pub(super) recv: u64,
    pub(super) recv_end: u64,
    pub(super) slot: u64,
    pub(super) slot_end: u64,
}

impl SoftQp {
    /// The status of a receive fault armed for the claimed `wqe`, disarming it. A receive of
    /// a shared receive queue is counted among the queue pair's own while a fault is armed
    /// (see `QpMem::count_srq_claim`).
    #[inline]
    fn recv_fault(peer: &PeerLink, wqe: &Claimed<'_>) -> Option<WcStatus> {
        let info = peer.mem.info();
        let fail_at = info.recv_fail_at.load(Ordering::Acquire);
        if fail_at == 0 {
            return None;
        }
        let index = match peer.srq {
            None => wqe.index(),
            Some(_) => peer.mem.count_srq_claim(),
        };
        if fail_at == index + 1
            && info
                .recv_fail_at
                .compare_exchange(fail_at, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return Some(
                WcStatus::from_raw(info.recv_fail_status.load(Ordering::Relaxed))
                    .unwrap_or(WcStatus::GeneralErr),
            );
        }
        None
    }

    /// The completion slot and receive of the peer for a Send (or an RDMA Write with
    /// immediate): those claimed by the batch in progress ([`SoftQp::preclaim`]) while it has
    /// some left, else claimed now, the slot always before the receive. That order keeps the
    /// completions of consumed receives in the order they were claimed, which is what lets
    /// the owner reuse a ring slot once it has polled enough completions (see [`Claimed`]).
    /// An armed receive fault is applied to the receive. `Err` is the requester's status.
    #[inline(always)]
    pub(super) fn claim_recv<'p>(
        &self,
        peer: &'p PeerLink,
    ) -> Result<(Claimed<'p>, u64), WcStatus> {
        let pre = self.pre.get();
        let batch = pre.slot < pre.slot_end;
        // The batch's receives run out no later than its slots.
        let batch_recv = pre.recv < pre.recv_end;
        let slot = if batch {
            self.pre.set(Pre {
                slot: pre.slot + 1,
                recv: pre.recv + u64::from(batch_recv),
                ..pre
            });
            pre.slot
        } else {
            let Ok(slot) = peer.recv_cq.reserve() else {
                peer.fail();
                return Err(WcStatus::RetryExcErr);
            };
            slot
        };
        let wqe = if batch_recv {
            peer.mem.claimed_at(pre.recv)
        } else if let Some(wqe) = peer.claim() {
            wqe
        } else {
            peer.recv_cq.skip(slot);
            return Err(WcStatus::RnrRetryExcErr);
        };
        if let Some(status) = Self::recv_fault(peer, &wqe) {
            Self::fail_recv(peer, wqe, status, slot);
            return Err(WcStatus::RemOpErr);
        }
        Ok((wqe, slot))
    }

    /// Before a list of requests starting with Sends: claims the peer's receives and
    /// completion slots for all of them with one locked instruction each, instead of two
    /// per Send (each of which would also wait for the previous Send's copy to reach the
    /// peer's lines). A request refused when posted ends the list; `release_pre` gives back
    /// what it and the rest had claimed.
    pub(super) fn preclaim(&mut self, wrs: &[SendWr<'_, Soft>]) {
        let room = u64::from(self.caps.max_send_wr).saturating_sub(self.sq_outstanding());
        let n = wrs
            .iter()
            .take(room.min(MAX_PRECLAIM) as usize)
            .take_while(|wr| {
                matches!(
                    wr.op,
                    SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }
                )
            })
            .count() as u64;
        if n < 2 || self.mem.state() != S_RTS {
            return;
        }
        let Some(peer) = self.peer_ready() else {
            return;
        };
        let Some(slot) = peer.recv_cq.reserve_n(n) else {
            return;
        };
        // Only completion slots ahead from a shared receive queue (see the module docs).
        let (recv, k) = match peer.srq {
            None => peer.mem.consume_n(n),
            Some(_) => (0, 0),
        };
        self.pre.set(Pre {
            recv,
            recv_end: recv + k,
            slot,
            slot_end: slot + n,
        });
    }

    /// After the list: gives back what the batch claimed and did not use (its requests
    /// failed or were flushed). Receives go back to the peer's ring if nothing was claimed
    /// after them; otherwise a flush took the rest of the ring, and they complete with flush
    /// errors too. Unused completion slots are published empty.
    pub(super) fn release_pre(&mut self) {
        let mut pre = self.pre.replace(Pre::default());
        if pre.slot == pre.slot_end {
            return;
        }
        let Some(peer) = self.peer.as_ref() else {
            return;
        };
        if pre.recv < pre.recv_end {
            if peer.mem.unclaim(pre.recv, pre.recv_end) {
                // A peer that went to the error state meanwhile flushed its ring without
                // them: flush them now (pairs with the fence in `QpMem::enter_error`).
                peer.mem.flush_if_error(&peer.recv_cq);
            } else {
                for pos in pre.recv..pre.recv_end {
                    let wqe = peer.mem.claimed_at(pos);
                    let cqe = peer.mem.recv_cqe(wqe.wr_id(), WcStatus::WrFlushErr);
                    peer.recv_cq.commit(pre.slot, &cqe);
                    pre.slot += 1;
                }
                peer.fail();
            }
        }
        for pos in pre.slot..pre.slot_end {
            peer.recv_cq.skip(pos);
        }
    }

    /// Completes the peer's claimed receive with an error, in the completion slot claimed
    /// for it, and moves the peer to the error state.
    pub(super) fn fail_recv(peer: &PeerLink, wqe: Claimed<'_>, status: WcStatus, slot: u64) {
        let cqe = peer.mem.recv_cqe(wqe.wr_id(), status);
        // A shared receive queue's slot back before the completion (see `exec_send`).
        drop(wqe);
        peer.recv_cq.commit(slot, &cqe);
        peer.fail();
    }
}
