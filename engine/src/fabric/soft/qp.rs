//! Soft queue pairs: work requests execute inline, in the posting thread, against shared
//! memory. A Send claims the peer's oldest posted receive from its ring, scatters into the
//! peer's registered memory and pushes the receive completion into the peer's completion
//! queue; RDMA Reads and Writes check the rkey against the peer's key table and copy directly
//! to or from the peer's arena. The peer's CPU does nothing.
//!
//! Errors follow RC semantics (and rxe's choice of statuses where the specification leaves
//! room): the failing request completes with its status, the local queue pair moves to the
//! error state, and — when the responder would have detected the error — so does the peer's;
//! a queue pair in the error state flushes every posted and later posted request.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use super::arena::{ArenaView, BindReq, Domain, RegionMemo};
use super::cq::{CqLocal, CqRing, Cqe0};
use super::faults::Faults;
use super::mem::SoftPd;
use super::rq::{state_of, Claimed, QpMem, S_ERR, S_INIT, S_RTR, S_RTS};
use super::sys::{copy_bytes, monotonic_ns};
use super::{Soft, MAX_INLINE, MAX_MSG_SZ, MAX_QP_WR, MAX_SGE};
use crate::fabric::{
    Access, BadWr, FabricError, MwBind, Payload, PostError, QpCaps, QpInit, QpState, QueuePair,
    RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};

/// What a queue pair knows of its connected peer: views of the peer's queue pair memory,
/// arena and receive completion queue.
#[derive(Clone)]
pub(crate) struct PeerLink {
    pub mem: QpMem,
    pub arena: ArenaView,
    pub recv_cq: CqRing,
    pub qp_num: u32,
}

impl PeerLink {
    /// Moves the peer to the error state and flushes its receives.
    pub(crate) fn fail(&self) {
        self.mem.enter_error(&self.recv_cq);
    }
}

/// The part of a queue pair shared with its watchdog thread and its fault handle.
pub(crate) struct QpShared {
    pub mem: QpMem,
    pub recv_cq: CqRing,
    pub destroyed: AtomicBool,
    pub peer: OnceLock<PeerLink>,
    pub sock: OnceLock<UnixStream>,
}

impl QpShared {
    /// Ends the connection from this side: both queue pairs to the error state, both
    /// receive queues flushed, the peer's watchdog woken.
    pub(crate) fn disconnect(&self) {
        self.mem.enter_error(&self.recv_cq);
        if let Some(peer) = self.peer.get() {
            peer.fail();
        }
        if let Some(sock) = self.sock.get() {
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Scatter-gather elements resolved to addresses; only the first `n` entries are set (no
/// zeroing of the array on the hot path).
struct Segs {
    seg: [MaybeUninit<(*mut u8, u32)>; MAX_SGE],
    n: usize,
    total: u64,
}

impl Segs {
    #[inline]
    fn new() -> Segs {
        Segs {
            seg: [const { MaybeUninit::uninit() }; MAX_SGE],
            n: 0,
            total: 0,
        }
    }

    #[inline]
    fn push(&mut self, p: *mut u8, len: u32) {
        self.seg[self.n].write((p, len));
        self.n += 1;
        self.total += u64::from(len);
    }

    #[inline]
    fn get(&self, i: usize) -> (*mut u8, u32) {
        assert!(i < self.n, "segment index");
        // SAFETY: entries below `n` were written by `push`.
        unsafe { self.seg[i].assume_init() }
    }
}

/// Most Sends of one list claimed at once (see [`SoftQp::preclaim`]).
const MAX_PRECLAIM: u64 = 32;

/// Most ring slots one `expect_recv_posts` hint takes ahead (a poll's batch, not a sweep
/// of the ring).
const MAX_EXPECTED_POSTS: u64 = 32;

/// The peer's receives (positions `recv..recv_end`) and completion slots (`slot..slot_end`)
/// claimed for the Sends of the list being posted and not used yet.
#[derive(Clone, Copy, Debug, Default)]
struct Pre {
    recv: u64,
    recv_end: u64,
    slot: u64,
    slot_end: u64,
}

/// The outcome of executing a send work request.
type Outcome = (WcStatus, WcOpcode, u32);

/// A soft reliable-connected queue pair.
pub struct SoftQp {
    shared: Arc<QpShared>,
    mem: QpMem,
    dom: Arc<Domain>,
    send_cq: Arc<CqLocal>,
    recv_cq: Arc<CqLocal>,
    send_slot: (u32, u32),
    recv_slot: (u32, u32),
    sq_base: u64,
    rq_base: u64,
    caps: QpCaps,
    sig_all: bool,
    qp_num: u32,
    sq_posted: u64,
    sq_pending: u32,
    rq_posted: u64,
    pre: Cell<Pre>,
    /// The local region last resolved for a request's gather list, and the peer's region
    /// last resolved for a receive's element (see `ArenaView::resolve_local_memo`).
    memo_src: Cell<RegionMemo>,
    memo_dst: Cell<RegionMemo>,
    peer: Option<PeerLink>,
    watchdog: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftQp")
            .field("qp_num", &self.qp_num)
            .field("state", &self.state())
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

fn next_qp_num() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0x11);
    NEXT.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff
}

impl SoftQp {
    /// Creates an unconnected queue pair (state Init): receives may be posted.
    pub(crate) fn create(pd: &SoftPd, init: QpInit<'_, Soft>) -> Result<SoftQp, FabricError> {
        let c = init.caps;
        if c.max_send_wr == 0
            || c.max_send_wr > MAX_QP_WR
            || c.max_recv_wr == 0
            || c.max_recv_wr > MAX_QP_WR
        {
            return Err(FabricError::InvalidArgument("queue depth"));
        }
        if c.max_send_sge as usize > MAX_SGE || c.max_recv_sge as usize > MAX_SGE {
            return Err(FabricError::InvalidArgument("scatter-gather elements"));
        }
        if c.max_inline_data > MAX_INLINE {
            return Err(FabricError::InvalidArgument("inline data size"));
        }
        let qp_num = next_qp_num();
        let send_cq = init.send_cq.local().clone();
        let recv_cq = init.recv_cq.local().clone();
        let (s_slot, s_gen, sq_base, _) = send_cq.alloc_slot()?;
        let same = Arc::ptr_eq(&send_cq, &recv_cq);
        let (r_slot, r_gen, rq_base) = if same {
            let (_, rq) = send_cq.ring().retired(s_slot);
            (s_slot, s_gen, rq)
        } else {
            match recv_cq.alloc_slot() {
                Ok((slot, gen, _, rq)) => (slot, gen, rq),
                Err(e) => {
                    send_cq.free_slot(s_slot);
                    return Err(e);
                }
            }
        };
        let mem = match QpMem::create(qp_num, c.max_recv_wr, c.max_recv_sge, r_slot, r_gen) {
            Ok(m) => m,
            Err(e) => {
                send_cq.free_slot(s_slot);
                if !same {
                    recv_cq.free_slot(r_slot);
                }
                return Err(e);
            }
        };
        let shared = Arc::new(QpShared {
            mem: mem.clone(),
            recv_cq: recv_cq.ring().clone(),
            destroyed: AtomicBool::new(false),
            peer: OnceLock::new(),
            sock: OnceLock::new(),
        });
        Ok(SoftQp {
            shared,
            mem,
            dom: pd.dom.clone(),
            send_cq,
            recv_cq,
            send_slot: (s_slot, s_gen),
            recv_slot: (r_slot, r_gen),
            sq_base,
            rq_base,
            caps: c,
            sig_all: init.sig_all,
            qp_num,
            sq_posted: 0,
            sq_pending: 0,
            rq_posted: 0,
            pre: Cell::new(Pre::default()),
            memo_src: Cell::new(RegionMemo::default()),
            memo_dst: Cell::new(RegionMemo::default()),
            peer: None,
            watchdog: None,
        })
    }

    /// Views of this queue pair's shared memory, for a peer in this process.
    pub(crate) fn link_for_peer(&self) -> PeerLink {
        PeerLink {
            mem: self.mem.clone(),
            arena: self.dom.view().clone(),
            recv_cq: self.recv_cq.ring().clone(),
            qp_num: self.qp_num,
        }
    }

    /// The descriptors a peer in another process needs: the memfds it maps (arena, queue
    /// pair, receive queue's completion queue) and that completion queue's bell.
    pub(crate) fn fds_for_peer(&self) -> [std::os::fd::RawFd; 4] {
        [
            self.dom.view().mapping().fd(),
            self.mem.mapping().fd(),
            self.recv_cq.ring().mapping().fd(),
            self.recv_cq.ring().bell_fd(),
        ]
    }

    /// Marks the queue pair ready to receive (the listener side, between accept and the
    /// client's confirmation).
    pub(crate) fn set_ready_to_receive(&self) {
        self.mem.info().state.store(S_RTR, Ordering::Release);
    }

    /// Connects the queue pair to `peer` (state RTS); with a socket, starts the watchdog that
    /// flushes the queue pair when the peer goes away.
    pub(crate) fn establish(
        &mut self,
        peer: PeerLink,
        sock: Option<UnixStream>,
    ) -> std::io::Result<()> {
        let _ = self.shared.peer.set(peer.clone());
        self.peer = Some(peer);
        let st = &self.mem.info().state;
        let _ = st.compare_exchange(S_INIT, S_RTS, Ordering::AcqRel, Ordering::Relaxed);
        let _ = st.compare_exchange(S_RTR, S_RTS, Ordering::AcqRel, Ordering::Relaxed);
        if let Some(sock) = sock {
            sock.set_read_timeout(None)?;
            sock.set_write_timeout(None)?;
            let watch = sock.try_clone()?;
            let _ = self.shared.sock.set(sock);
            let shared = self.shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("soft-qp-{:#x}-watchdog", self.qp_num))
                .spawn(move || watchdog(watch, shared))?;
            self.watchdog = Some(handle);
        }
        Ok(())
    }

    /// A handle to inject faults into this queue pair (see [`Faults`]).
    pub fn faults(&self) -> Faults {
        Faults::new(self.shared.clone())
    }

    #[inline]
    fn sq_outstanding(&self) -> u64 {
        let (sq, _) = self.send_cq.ring().retired(self.send_slot.0);
        self.sq_posted - sq.wrapping_sub(self.sq_base)
    }

    #[inline]
    fn rq_outstanding(&self) -> u64 {
        self.rq_posted - self.rq_retired()
    }

    /// Receives of this queue pair completed and polled so far (they complete in ring
    /// order: the next to complete is receive `rq_retired`).
    #[inline]
    fn rq_retired(&self) -> u64 {
        let (_, rq) = self.recv_cq.ring().retired(self.recv_slot.0);
        rq.wrapping_sub(self.rq_base)
    }

    fn fail_local(&self) {
        self.mem.enter_error(self.recv_cq.ring());
    }

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
    fn post_send_one(&mut self, wr: &SendWr<'_, Soft>) -> Result<(), PostError> {
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
        self.mem.set_posted(self.sq_posted);
        let info = self.mem.info();
        let fail_at = info.send_fail_at.load(Ordering::Acquire);
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
    fn peer_ready(&self) -> Option<&PeerLink> {
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

    /// The status of a receive fault armed for the claimed `wqe`, disarming it.
    #[inline]
    fn recv_fault(peer: &PeerLink, wqe: &Claimed<'_>) -> Option<WcStatus> {
        let info = peer.mem.info();
        let fail_at = info.recv_fail_at.load(Ordering::Acquire);
        if fail_at == wqe.index() + 1
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
    fn claim_recv<'p>(&self, peer: &'p PeerLink) -> Result<(Claimed<'p>, u64), WcStatus> {
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
        } else if let Some(wqe) = peer.mem.consume() {
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
    fn preclaim(&mut self, wrs: &[SendWr<'_, Soft>]) {
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
        let (recv, k) = peer.mem.consume_n(n);
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
    fn release_pre(&mut self) {
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
    fn fail_recv(peer: &PeerLink, wqe: Claimed<'_>, status: WcStatus, slot: u64) {
        let cqe = peer.mem.recv_cqe(wqe.wr_id(), status);
        peer.recv_cq.commit(slot, &cqe);
        peer.fail();
    }

    fn exec_send(&mut self, wr: &SendWr<'_, Soft>, imm: Option<u32>, inv: Option<u32>) -> Outcome {
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
                    fail(&mut cqe, WcStatus::LocLenErr);
                    return (WcStatus::RemInvReqErr, op, 0);
                }
                scatter(&src, &wqe, &peer.arena)
            }
        };
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
            peer.mem.prefetch_head();
            peer.recv_cq.prefetch();
        }
        (WcStatus::Success, op, src.total as u32)
    }

    fn exec_write(
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
        unsafe { copy_gathered(&src, dst) };
        if let (Some((w, slot)), Some(imm)) = (recv, imm) {
            let mut cqe = peer.mem.recv_cqe(w.wr_id(), WcStatus::Success);
            cqe.opcode = WcOpcode::RecvRdmaWithImm;
            cqe.byte_len = src.total as u32;
            cqe.imm = Some(imm);
            peer.recv_cq.commit(slot, &cqe);
        }
        (WcStatus::Success, op, src.total as u32)
    }

    fn exec_read(&mut self, wr: &SendWr<'_, Soft>, remote: RemoteAddr) -> Outcome {
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

    fn exec_bind(&mut self, bind: &MwBind<'_, Soft>) -> Outcome {
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

    /// Writes one receive into the ring without the error-state check that must follow.
    #[inline]
    fn produce_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        if wr.sges.len() > self.caps.max_recv_sge as usize {
            return Err(PostError::TooManySge {
                given: wr.sges.len(),
                max: self.caps.max_recv_sge,
            });
        }
        if self.rq_outstanding() >= u64::from(self.caps.max_recv_wr) {
            return Err(PostError::QueueFull);
        }
        self.mem.produce(self.rq_posted, wr.wr_id, wr.sges);
        self.rq_posted += 1;
        Ok(())
    }

    /// After receives were written: a queue pair that is (or just went) in the error state
    /// flushes them at once.
    #[inline]
    fn flush_if_error(&mut self) {
        if self.mem.must_flush_after_post() {
            self.mem.flush(self.recv_cq.ring());
        }
    }
}

/// Copies the gathered `src` into the one receive element `d`, which can hold it all (the
/// common case of [`scatter`], without its walk over the receive's list). False if `d` is
/// not inside a registration of the peer granting local write.
#[inline]
fn place(src: &Segs, d: Sge, arena: &ArenaView, memo: &Cell<RegionMemo>) -> bool {
    let need = Access::LOCAL_WRITE;
    let Ok(dp) = arena.resolve_local_memo(memo, d.lkey, d.addr, src.total, need) else {
        return false;
    };
    // SAFETY: the `src.total` bytes from `dp` lie in the checked part of the peer's receive
    // buffer, kept mapped by `arena`.
    unsafe { copy_gathered(src, dp) };
    true
}

/// Copies the gathered `src` to `dst`, its segments laid end to end.
///
/// # Safety
///
/// `dst` must be valid for writes of `src.total` bytes.
#[inline]
unsafe fn copy_gathered(src: &Segs, mut dst: *mut u8) {
    for i in 0..src.n {
        let (p, len) = src.get(i);
        // SAFETY: `p..p+len` is a checked span of a local registration (or the inline slice);
        // the segments add up to `src.total`, which the caller's `dst` can take.
        unsafe {
            copy_bytes(p, dst, len as usize);
            dst = dst.add(len as usize);
        }
    }
}

/// Scatters `src` into the receive `wqe`'s elements, checking each piece used against the
/// peer's key table (local write rights).
#[inline]
fn scatter(src: &Segs, wqe: &Claimed<'_>, arena: &ArenaView) -> bool {
    let mut si = 0;
    let mut soff = 0u32;
    let mut left = src.total;
    let mut di = 0;
    while left > 0 {
        if di >= wqe.num_sge() {
            return false;
        }
        let d: Sge = wqe.sge(di);
        di += 1;
        let take = u64::from(d.length).min(left);
        let Ok(mut dp) = arena.resolve_local(d.lkey, d.addr, take, Access::LOCAL_WRITE) else {
            return false;
        };
        let mut want = take as u32;
        while want > 0 {
            let (sp, slen) = src.get(si);
            let n = (slen - soff).min(want);
            // SAFETY: `sp+soff..+n` lies in a checked local span; `dp..dp+n` lies in the
            // checked part of the peer's receive buffer, kept mapped by `arena`.
            unsafe {
                copy_bytes(sp.add(soff as usize), dp, n as usize);
                dp = dp.add(n as usize);
            }
            want -= n;
            soff += n;
            if soff == slen {
                si += 1;
                soff = 0;
            }
        }
        left -= take;
    }
    true
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

/// Blocks on the connection's socket; when the peer closes it or dies, moves the queue pair
/// to the error state and flushes its receives.
fn watchdog(sock: UnixStream, shared: Arc<QpShared>) {
    use std::io::Read;
    let mut buf = [0u8; 64];
    let mut sock = sock;
    loop {
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if !shared.destroyed.load(Ordering::Acquire) {
        shared.mem.enter_error(&shared.recv_cq);
    }
}

impl QueuePair<Soft> for SoftQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    fn caps(&self) -> QpCaps {
        self.caps
    }

    fn state(&self) -> QpState {
        state_of(self.mem.state())
    }

    fn post_send_list(&mut self, wrs: &[SendWr<'_, Soft>]) -> Result<(), BadWr> {
        if wrs.len() > 1 {
            self.preclaim(wrs);
        }
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = self.post_send_one(wr) {
                result = Err(BadWr { index, error });
                break;
            }
        }
        self.release_pre();
        result
    }

    fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BadWr> {
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = self.produce_recv(wr) {
                result = Err(BadWr { index, error });
                break;
            }
        }
        // One state check for the whole batch.
        self.flush_if_error();
        result
    }

    #[inline]
    fn post_send(&mut self, wr: &SendWr<'_, Soft>) -> Result<(), PostError> {
        self.post_send_one(wr)
    }

    #[inline]
    fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        self.produce_recv(wr)?;
        self.flush_if_error();
        Ok(())
    }

    #[inline]
    fn expect_recv_posts(&self, n: usize) {
        self.mem
            .prefetch_produce(self.rq_posted, (n as u64).min(MAX_EXPECTED_POSTS));
    }

    #[inline]
    fn watch_next_recv(&self) {
        let pos = self.rq_retired();
        if pos < self.rq_posted {
            self.mem.prefetch_landing(pos);
        }
    }

    fn disconnect(&mut self) {
        self.shared.disconnect();
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        // Destroying a queue pair produces no completions of its own (as ibv_destroy_qp);
        // the peer sees the connection end, as with rdma_cm's DREQ.
        self.shared.destroyed.store(true, Ordering::Release);
        self.mem.info().state.store(S_ERR, Ordering::Release);
        if let Some(peer) = &self.peer {
            peer.fail();
        }
        if let Some(sock) = self.shared.sock.get() {
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
        if let Some(h) = self.watchdog.take() {
            let _ = h.join();
        }
        self.send_cq.free_slot(self.send_slot.0);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.free_slot(self.recv_slot.0);
        }
    }
}
