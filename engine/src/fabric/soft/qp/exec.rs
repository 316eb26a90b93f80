//! Executing a send request against the peer, inline in the posting thread: a Send fills the
//! peer's oldest receive (with immediate data or invalidation), RDMA Writes and Reads check
//! the rkey against the peer's key table and copy to or from its arena, and a window bind
//! updates the local key table. Each returns the request's outcome.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::copy::{copy_gathered, place, scatter, Segs};
use super::post::Outcome;
use super::SoftQp;
use crate::fabric::reader_copies::STREAM_MIN;
use crate::fabric::soft::arena::BindReq;
use crate::fabric::soft::cq::Cqe0;
use crate::fabric::soft::peer::PeerLink;
use crate::fabric::soft::rq::{S_RTR, S_RTS};
use crate::fabric::soft::sys::copy_bytes;
use crate::fabric::soft::{Soft, MAX_MSG_SZ};
use crate::fabric::{Access, MwBind, Payload, RemoteAddr, SendWr, WcOpcode, WcStatus};

impl SoftQp {
    /// Resolves the local scatter-gather list of a request into `out`; false if an element
    /// is not inside a registration granting `need`.
    #[inline(always)]
    fn gather(&self, payload: &Payload<'_>, need: Access, out: &mut Segs) -> bool {
        match *payload {
            Payload::Inline(bytes) => out.push(bytes.as_ptr() as *mut u8, bytes.len() as u32),
            Payload::Sges(sges) => {
                let view = self.dom.view();
                for sge in sges {
                    let len = u64::from(sge.length);
                    let memo = &self.memo_src;
                    match view.resolve_local_memo(memo, sge.lkey, sge.addr, len, need) {
                        Ok(p) => out.push(p, sge.length),
                        Err(_) => return false,
                    }
                }
            }
        }
        true
    }

    /// Checks the peer can take a request: connected and not in error.
    #[inline(always)]
    pub(super) fn peer_ready(&self) -> Option<&PeerLink> {
        let peer = self.peer.as_ref()?;
        let st = peer.mem.state();
        (st == S_RTS || st == S_RTR).then_some(peer)
    }

    /// The checks every data-moving request starts with: resolves its local list into
    /// `segs` (rights `need`), bounds the message size and finds a ready peer. `Err` is the
    /// request's outcome when one fails.
    #[inline(always)]
    fn prepare(
        &self,
        payload: &Payload<'_>,
        need: Access,
        op: WcOpcode,
        segs: &mut Segs,
    ) -> Result<&PeerLink, Outcome> {
        if !self.gather(payload, need, segs) {
            return Err((WcStatus::LocProtErr, op, 0));
        }
        if segs.total > MAX_MSG_SZ {
            return Err((WcStatus::LocLenErr, op, 0));
        }
        self.peer_ready().ok_or((WcStatus::RetryExcErr, op, 0))
    }

    pub(super) fn exec_send(
        &mut self,
        wr: &SendWr<'_, Soft>,
        imm: Option<u32>,
        inv: Option<u32>,
    ) -> Outcome {
        let op = WcOpcode::Send;
        let mut src = Segs::new();
        let peer = match self.prepare(&wr.payload, Access::NONE, op, &mut src) {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        let (wqe, slot) = match self.claim_recv(peer) {
            Ok(claimed) => claimed,
            Err(status) => return (status, op, 0),
        };
        let mut cqe = peer.mem.recv_cqe(wqe.wr_id(), WcStatus::Success);
        let fail = |cqe: &mut Cqe0, status: WcStatus| {
            cqe.status = status;
            peer.recv_cq.commit(slot, cqe);
            peer.fail();
        };
        let first = (wqe.num_sge() > 0).then(|| wqe.sge(0));
        let placed = match first {
            // The usual case: the message fits the receive's first element (measured: the
            // general walk costs some 80 instructions more per Send).
            Some(d) if u64::from(d.length) >= src.total => {
                place(&src, d, &peer.arena, &self.memo_dst)
            }
            _ => {
                if src.total > wqe.capacity() {
                    drop(wqe);
                    fail(&mut cqe, WcStatus::LocLenErr);
                    return (WcStatus::RemInvReqErr, op, 0);
                }
                scatter(&src, &wqe, &peer.arena)
            }
        };
        // Every read of the receive is done: a shared receive queue's slot goes back before
        // the completion is published, so that a polled receive's slot is free.
        drop(wqe);
        if !placed {
            fail(&mut cqe, WcStatus::LocQpOpErr);
            return (WcStatus::RemOpErr, op, 0);
        }
        if let Some(d) = first {
            cqe.data = d.addr;
        }
        cqe.byte_len = src.total as u32;
        cqe.imm = imm;
        if let Some(rkey) = inv {
            if peer.arena.invalidate(rkey).is_ok() {
                cqe.inv = Some(rkey);
            } else {
                // rxe: the receive completes in error and the responder moves to the error
                // state, but the Send itself was acknowledged.
                fail(&mut cqe, WcStatus::RemInvReqErr);
                return (WcStatus::Success, op, src.total as u32);
            }
        }
        peer.recv_cq.commit(slot, &cqe);
        let pre = self.pre.get();
        if pre.slot >= pre.slot_end {
            // The next Send will claim the peer's next receive and completion slot (within a
            // batch, they are claimed already): start moving their cache lines now, off that
            // Send's path.
            peer.prefetch_head();
            peer.recv_cq.prefetch();
        }
        (WcStatus::Success, op, src.total as u32)
    }

    pub(super) fn exec_write(
        &mut self,
        wr: &SendWr<'_, Soft>,
        remote: RemoteAddr,
        imm: Option<u32>,
    ) -> Outcome {
        let op = WcOpcode::RdmaWrite;
        let mut src = Segs::new();
        let peer = match self.prepare(&wr.payload, Access::NONE, op, &mut src) {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        let recv = match imm {
            Some(_) => match self.claim_recv(peer) {
                Ok(claimed) => Some(claimed),
                Err(status) => return (status, op, 0),
            },
            None => None,
        };
        let dst = match peer.arena.resolve_remote(
            remote.rkey,
            remote.addr,
            src.total,
            Access::REMOTE_WRITE,
            peer.qp_num,
        ) {
            Ok(p) => p,
            Err(_) => {
                match recv {
                    Some((w, slot)) => Self::fail_recv(peer, w, WcStatus::RemAccessErr, slot),
                    None => peer.fail(),
                }
                return (WcStatus::RemAccessErr, op, 0);
            }
        };
        // SAFETY: `dst..dst+total` is a checked span of the peer's arena, which `peer.arena`
        // keeps mapped.
        unsafe { copy_gathered::<STREAM_MIN>(&src, dst) };
        if let (Some((w, slot)), Some(imm)) = (recv, imm) {
            let mut cqe = peer.mem.recv_cqe(w.wr_id(), WcStatus::Success);
            // As in `exec_send`: the slot back before the completion.
            drop(w);
            cqe.opcode = WcOpcode::RecvRdmaWithImm;
            cqe.byte_len = src.total as u32;
            cqe.imm = Some(imm);
            peer.recv_cq.commit(slot, &cqe);
        }
        (WcStatus::Success, op, src.total as u32)
    }

    pub(super) fn exec_read(&mut self, wr: &SendWr<'_, Soft>, remote: RemoteAddr) -> Outcome {
        let op = WcOpcode::RdmaRead;
        let mut dst = Segs::new();
        let peer = match self.prepare(&wr.payload, Access::LOCAL_WRITE, op, &mut dst) {
            Ok(p) => p,
            Err(outcome) => return outcome,
        };
        let Ok(src) = peer.arena.resolve_remote(
            remote.rkey,
            remote.addr,
            dst.total,
            Access::REMOTE_READ,
            peer.qp_num,
        ) else {
            peer.fail();
            return (WcStatus::RemAccessErr, op, 0);
        };
        let mut at = src as *const u8;
        for i in 0..dst.n {
            let (p, len) = dst.get(i);
            // SAFETY: as in `exec_write`, with the peer's span as the source.
            unsafe {
                copy_bytes(at, p, len as usize);
                at = at.add(len as usize);
            }
        }
        (WcStatus::Success, op, dst.total as u32)
    }

    pub(super) fn exec_bind(&mut self, bind: &MwBind<'_, Soft>) -> Outcome {
        let op = WcOpcode::BindMw;
        let mw_rkey = bind.mw.rkey.load(Ordering::Relaxed);
        // The window's key is the one of the latest posted bind, as `ibv_mw.rkey` is.
        bind.mw
            .rkey
            .store((mw_rkey & !0xff) | (bind.rkey & 0xff), Ordering::Relaxed);
        if !Arc::ptr_eq(&bind.mw.dom, &self.dom) || !Arc::ptr_eq(&bind.mr.dom, &self.dom) {
            return (WcStatus::MwBindErr, op, 0);
        }
        let req = BindReq {
            mw_index: bind.mw.index,
            mw_rkey,
            new_rkey: bind.rkey,
            mr_lkey: crate::fabric::MemoryRegion::lkey(bind.mr),
            addr: bind.addr,
            len: bind.len,
            access: bind.access,
            qp_num: self.qp_num,
        };
        match self.dom.bind(&req) {
            Ok(_) => (WcStatus::Success, op, 0),
            Err(_) => (WcStatus::MwBindErr, op, 0),
        }
    }
}
