//! Soft queue pairs: work requests execute inline, in the posting thread, against shared
//! memory. A Send claims the peer's oldest posted receive from its ring (or from the shared
//! receive queue the peer's queue pair was made with), scatters into the peer's registered
//! memory and pushes the receive completion into the peer's completion
//! queue; RDMA Reads and Writes check the rkey against the peer's key table and copy directly
//! to or from the peer's arena. The peer's CPU does nothing.
//!
//! Errors follow RC semantics (and rxe's choice of statuses where the specification leaves
//! room): the failing request completes with its status, the local queue pair moves to the
//! error state, and — when the responder would have detected the error — so does the peer's;
//! a queue pair in the error state flushes every posted and later posted request.
//!
//! The queue pair type, its creation and connection, and the [`QueuePair`] interface are
//! here; posting and completing a send request is in `post`, executing one (Send, RDMA
//! Write and Read, window bind) in `exec`, claiming the peer's receives and completion slots
//! in `claim`, posting receives in `recv`, and the gather lists and copies in `copy`. What
//! a queue pair shares with its peer, its watchdog thread and its fault handle is the soft
//! provider's `peer`, a floor below both this module and `faults`.

mod claim;
mod copy;
mod exec;
mod post;
mod recv;

use std::cell::Cell;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use self::claim::Pre;
use super::arena::{Domain, RegionMemo};
use super::cq::{CountersRef, CqLocal};
use super::faults::Faults;
use super::mem::SoftPd;
use super::peer::{watchdog, PeerLink, QpShared};
use super::rq::{state_of, QpMem, S_ERR, S_INIT, S_RTR, S_RTS};
use super::srq::SrqMem;
use super::{Soft, MAX_INLINE, MAX_QP_WR, MAX_SGE};
use crate::fabric::{
    BadWr, FabricError, PostError, QpCaps, QpInit, QpState, QueuePair, RecvWr, SendWr,
};

/// Most ring slots one `expect_recv_posts` hint takes ahead (a poll's batch, not a sweep
/// of the ring).
const MAX_EXPECTED_POSTS: u64 = 32;

/// A soft reliable-connected queue pair.
pub struct SoftQp {
    shared: Arc<QpShared>,
    mem: QpMem,
    dom: Arc<Domain>,
    send_cq: Arc<CqLocal>,
    recv_cq: Arc<CqLocal>,
    send_slot: (u32, u32),
    recv_slot: (u32, u32),
    /// The counters of `send_slot` and `recv_slot`, in the mappings `send_cq` and
    /// `recv_cq` keep alive.
    send_retired: CountersRef,
    recv_retired: CountersRef,
    sq_base: u64,
    rq_base: u64,
    caps: QpCaps,
    sig_all: bool,
    qp_num: u32,
    sq_posted: u64,
    sq_pending: u32,
    rq_posted: u64,
    pre: Cell<Pre>,
    /// The shared receive queue the queue pair takes its receives from; then its own ring is
    /// never posted to.
    srq: Option<SrqMem>,
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
    /// Creates an unconnected queue pair (state Init): receives may be posted. With a shared
    /// receive queue (`init.srq`, of the same domain), `caps.max_recv_wr` and `max_recv_sge`
    /// are ignored and granted as 0: the queue pair has no receive queue of its own.
    pub(crate) fn create(pd: &SoftPd, init: QpInit<'_, Soft>) -> Result<SoftQp, FabricError> {
        let mut c = init.caps;
        let own_rq = init.srq.is_none();
        if c.max_send_wr == 0
            || c.max_send_wr > MAX_QP_WR
            || (own_rq && (c.max_recv_wr == 0 || c.max_recv_wr > MAX_QP_WR))
        {
            return Err(FabricError::InvalidArgument("queue depth"));
        }
        if c.max_send_sge as usize > MAX_SGE || (own_rq && c.max_recv_sge as usize > MAX_SGE) {
            return Err(FabricError::InvalidArgument("scatter-gather elements"));
        }
        if c.max_inline_data > MAX_INLINE {
            return Err(FabricError::InvalidArgument("inline data size"));
        }
        if let Some(srq) = init.srq {
            if srq.domain_id() != pd.dom.view().domain_id() {
                return Err(FabricError::InvalidArgument(
                    "shared receive queue of another protection domain",
                ));
            }
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        }
        let srq = init.srq.map(|s| s.mem().clone());
        let srq_id = srq.as_ref().map_or(0, SrqMem::id);
        let qp_num = next_qp_num();
        let send_cq = init.send_cq.local().clone();
        let recv_cq = init.recv_cq.local().clone();
        let s = send_cq.alloc_slot()?;
        let same = Arc::ptr_eq(&send_cq, &recv_cq);
        let r = if same {
            s
        } else {
            match recv_cq.alloc_slot() {
                Ok(r) => r,
                Err(e) => {
                    send_cq.free_slot(s.slot);
                    return Err(e);
                }
            }
        };
        let (s_slot, r_slot) = (s.slot, r.slot);
        let created = QpMem::create(qp_num, c.max_recv_wr, c.max_recv_sge, r_slot, r.gen, srq_id);
        let mem = match created {
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
            send_slot: (s.slot, s.gen),
            recv_slot: (r.slot, r.gen),
            send_retired: s.counters,
            recv_retired: r.counters,
            sq_base: s.sq,
            rq_base: r.rq,
            caps: c,
            sig_all: init.sig_all,
            qp_num,
            sq_posted: 0,
            sq_pending: 0,
            rq_posted: 0,
            pre: Cell::new(Pre::default()),
            srq,
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
            srq: self.srq.clone(),
        }
    }

    /// The descriptors a peer in another process needs: the memfds it maps (arena, queue
    /// pair, receive queue's completion queue), that completion queue's bell and, for a
    /// queue pair made with a shared receive queue, that queue's memfd; how many of the five.
    pub(crate) fn fds_for_peer(&self) -> ([std::os::fd::RawFd; 5], usize) {
        let mut fds = [
            self.dom.view().mapping().fd(),
            self.mem.mapping().fd(),
            self.recv_cq.ring().mapping().fd(),
            self.recv_cq.ring().bell_fd(),
            -1,
        ];
        match &self.srq {
            Some(srq) => {
                fds[4] = srq.mapping().fd();
                (fds, 5)
            }
            None => (fds, 4),
        }
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
        let sq = self.send_retired.sq_retired();
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
        self.recv_retired.rq_retired().wrapping_sub(self.rq_base)
    }

    fn fail_local(&self) {
        self.mem.enter_error(self.recv_cq.ring());
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

    #[inline(always)]
    fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        self.produce_recv(wr)?;
        self.flush_if_error();
        Ok(())
    }

    #[inline]
    fn expect_recv_posts(&self, n: usize) {
        if self.srq.is_some() {
            return;
        }
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
