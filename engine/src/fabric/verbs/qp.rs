//! Reliable-connected queue pairs: creation on an rdma_cm id, posting work requests (chains
//! of `ibv_send_wr`/`ibv_recv_wr` built on the stack), state and disconnection.
//!
//! A queue pair made with a shared receive queue ([`QpInit::srq`]) has no receive queue of
//! its own (`max_recv_wr` and `max_recv_sge` 0): posting to it is refused before the
//! library sees it, and its receives complete on its receive completion queue, which learns
//! the shared queue's table when the queue pair is created.
//!
//! The chain helpers shared with shared receive queues are in `chain.rs`, the rdma_cm id in
//! `cmid.rs`; the monitor watches an established connection through the `WatchedConn`
//! trait that `Conn` implements.

use std::mem::{self, MaybeUninit};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rdma_sys::*;

use super::chain::{check_recv_sges, post_chain, post_in_chunks, raw_recv_wr, CHUNK};
use super::cmid::CmId;
use super::context::{PostRecvFn, PostSendFn};
use super::cq::{CqInner, WqSlot, WqTrack};
use super::marker::Verbs;
use super::mem::PdInner;
use super::monitor::{monitor, WatchedConn};
use super::pd::VerbsPd;
use super::srq::SrqInner;
use super::sys::os_err;
use crate::fabric::{
    BadWr, ConnectError, FabricError, Payload, PostError, QpCaps, QpInit, QpState, QueuePair,
    RecvWr, SendOp, SendWr, WcOpcode,
};

/// The connection state shared with the CM event monitor.
pub(super) struct CmState {
    /// `rdma_disconnect` was called (by us, or because the peer disconnected).
    pub(super) disconnected: bool,
}

/// One connection's rdma_cm id and queue pair, shared between the [`VerbsQp`] and the
/// monitor thread that handles the peer's disconnection. Dropping it disconnects (if
/// connected), destroys the queue pair, frees its completion queue slots, then destroys
/// the id and its event channel.
pub(super) struct Conn {
    pub(super) id: CmId,
    pub(super) qp: *mut ibv_qp,
    pub(super) state: Mutex<CmState>,
    pub(super) established: AtomicBool,
    /// Set when the connection is ended (`disconnect_locked`), for
    /// `QueuePair::is_disconnected` without a system call.
    pub(super) gone: AtomicBool,
    slots: Vec<(Arc<CqInner>, WqSlot)>,
    _pd: Arc<PdInner>,
    /// The shared receive queue the queue pair takes its receives from: destroyed after
    /// the queue pair (`ibv_destroy_srq` fails while a queue pair uses it).
    _srq: Option<Arc<SrqInner>>,
}

// SAFETY: the id and queue pair are used through thread-safe librdmacm/libibverbs calls;
// the calls that change the connection (disconnect, event handling) are serialised by
// `state`.
unsafe impl Send for Conn {}
// SAFETY: as above.
unsafe impl Sync for Conn {}

impl Conn {
    /// Ends the connection: `rdma_disconnect` once established (moves the queue pair to the
    /// error state and tells the peer), else just the error state.
    pub(super) fn disconnect(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.disconnect_locked(&mut st);
    }

    pub(super) fn disconnect_locked(&self, st: &mut CmState) {
        if st.disconnected {
            return;
        }
        st.disconnected = true;
        self.gone.store(true, Ordering::Release);
        if self.established.load(Ordering::Acquire) {
            // SAFETY: the id is live; the state lock serialises this with other CM calls
            // on the connection.
            unsafe { rdma_disconnect(self.id.raw) };
        } else if !self.qp.is_null() {
            to_error(self.qp);
        }
    }
}

impl WatchedConn for Conn {
    fn cm_fd(&self) -> i32 {
        self.id.channel().fd()
    }

    /// Drains an established connection's CM events (on the monitor thread); a
    /// disconnection by the peer, or the device's removal, moves the queue pair to the
    /// error state (`rdma_disconnect`).
    fn handle_cm_events(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while let Ok(Some(ev)) = self.id.channel().try_next() {
            if matches!(
                ev.kind,
                rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED
                    | rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL
            ) {
                self.disconnect_locked(&mut st);
            }
        }
    }
}

/// Moves a queue pair to the error state.
fn to_error(qp: *mut ibv_qp) {
    // SAFETY: plain old data; all zeroes is valid.
    let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
    attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
    // SAFETY: the queue pair is live; `attr` is valid for the call.
    unsafe { ibv_modify_qp(qp, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
}

impl Drop for Conn {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if self.established.load(Ordering::Acquire) && !st.disconnected {
            st.disconnected = true;
            // SAFETY: the id is live and no one else holds the connection.
            unsafe { rdma_disconnect(self.id.raw) };
        }
        if !self.qp.is_null() {
            // SAFETY: the queue pair was created on this id and is destroyed once; nothing
            // posts to it any more.
            unsafe { rdma_destroy_qp(self.id.raw) };
        }
        for (cq, slot) in self.slots.drain(..) {
            cq.deregister(slot);
        }
        // The id, then its event channel, are destroyed as the fields drop.
    }
}

/// A reliable-connected queue pair (`struct ibv_qp` with its `rdma_cm_id`).
pub struct VerbsQp {
    conn: Arc<Conn>,
    qp: *mut ibv_qp,
    qp_num: u32,
    caps: QpCaps,
    post_send_fn: PostSendFn,
    post_recv_fn: PostRecvFn,
    send: Arc<WqTrack>,
    send_slot: WqSlot,
    send_posted: u64,
    recv: Arc<WqTrack>,
    recv_slot: WqSlot,
    recv_posted: u64,
    /// Receives come from a shared receive queue: posting to the queue pair's is refused.
    shared_recv: bool,
    connected: bool,
    monitor_token: Option<u64>,
    /// An accepted connection's wait for the peer's confirmation (`QueuePair::confirm_wait`).
    confirm_wait: Option<std::time::Duration>,
}

// SAFETY: the queue pair is used through thread-safe verbs; posting takes `&mut self`.
unsafe impl Send for VerbsQp {}

impl core::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("qp_num", &self.qp_num)
            .field("caps", &self.caps)
            .field("connected", &self.connected)
            .finish()
    }
}

impl VerbsQp {
    /// Creates the queue pair on `id` (`rdma_create_qp`) in `pd` with `init`.
    pub(super) fn create(
        id: CmId,
        pd: &VerbsPd,
        init: QpInit<'_, Verbs>,
    ) -> Result<VerbsQp, ConnectError> {
        let ctx = &pd.inner.ctx;
        // SAFETY: the id is live; `verbs` is set once its address is resolved or bound.
        let id_ctx = unsafe { (*id.raw).verbs };
        if id_ctx != ctx.ctx {
            return Err(ConnectError::Fabric(FabricError::InvalidArgument(
                "the connection's RDMA device is not the protection domain's",
            )));
        }
        let srq = init.srq.map(|s| s.inner.clone());
        if let Some(s) = &srq {
            if !Arc::ptr_eq(&s.pd, &pd.inner) {
                return Err(ConnectError::Fabric(FabricError::InvalidArgument(
                    "the shared receive queue is not of the queue pair's protection domain",
                )));
            }
        }
        // With a shared receive queue, no receive queue of its own.
        let (want_recv_wr, want_recv_sge) = match srq {
            Some(_) => (0, 0),
            None => (init.caps.max_recv_wr, init.caps.max_recv_sge),
        };
        let mut attr = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: init.send_cq.inner.cq,
            recv_cq: init.recv_cq.inner.cq,
            srq: srq.as_ref().map_or(ptr::null_mut(), |s| s.srq),
            cap: ibv_qp_cap {
                max_send_wr: init.caps.max_send_wr,
                max_recv_wr: want_recv_wr,
                max_send_sge: init.caps.max_send_sge,
                max_recv_sge: want_recv_sge,
                max_inline_data: init.caps.max_inline_data,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: i32::from(init.sig_all),
        };
        let mut conn = Conn {
            id,
            qp: ptr::null_mut(),
            state: Mutex::new(CmState {
                disconnected: false,
            }),
            established: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            slots: Vec::with_capacity(2),
            _pd: pd.inner.clone(),
            _srq: srq.clone(),
        };
        // SAFETY: the id is live and resolved to the domain's device; the domain, both
        // completion queues and the shared receive queue, if any, are live objects of that
        // device (the Conn keeps the domain and the shared queue, the slots keep the
        // completion queues); `attr` is valid for the call and receives the granted
        // capacities.
        let rc = unsafe { rdma_create_qp(conn.id.raw, pd.inner.pd, &mut attr) };
        if rc != 0 {
            return Err(ConnectError::Fabric(os_err("rdma_create_qp", rc)));
        }
        // SAFETY: rdma_create_qp stored the new queue pair in the id.
        conn.qp = unsafe { (*conn.id.raw).qp };
        let granted = attr.cap;
        // A queue pair on a shared receive queue has no receive queue, whatever a device
        // reports for it.
        let own_recv = srq.is_none();
        let caps = QpCaps {
            max_send_wr: granted.max_send_wr.max(init.caps.max_send_wr),
            max_recv_wr: if own_recv {
                granted.max_recv_wr.max(want_recv_wr)
            } else {
                0
            },
            max_send_sge: granted.max_send_sge.max(init.caps.max_send_sge),
            max_recv_sge: if own_recv {
                granted.max_recv_sge.max(want_recv_sge)
            } else {
                0
            },
            max_inline_data: granted.max_inline_data.max(init.caps.max_inline_data),
        };
        let send = Arc::new(WqTrack::new(caps.max_send_wr, true));
        let recv = Arc::new(WqTrack::new(caps.max_recv_wr, false));
        let send_slot = init.send_cq.inner.register(send.clone())?;
        conn.slots.push((init.send_cq.inner.clone(), send_slot));
        let recv_slot = init.recv_cq.inner.register(recv.clone())?;
        conn.slots.push((init.recv_cq.inner.clone(), recv_slot));
        if let Some(s) = &srq {
            init.recv_cq.inner.register_srq(&s.track);
        }
        let qp = conn.qp;
        Ok(VerbsQp {
            conn: Arc::new(conn),
            qp,
            // SAFETY: the queue pair is live.
            qp_num: unsafe { (*qp).qp_num },
            caps,
            post_send_fn: ctx.ops.post_send,
            post_recv_fn: ctx.ops.post_recv,
            send,
            send_slot,
            send_posted: 0,
            recv,
            recv_slot,
            recv_posted: 0,
            shared_recv: srq.is_some(),
            connected: false,
            monitor_token: None,
            confirm_wait: None,
        })
    }

    /// Records how long the accept waited for the peer's confirmation.
    pub(super) fn set_confirm_wait(&mut self, waited: std::time::Duration) {
        self.confirm_wait = Some(waited);
    }

    /// The connection is established: sends are accepted from now on, and the monitor
    /// answers the peer's disconnection by moving this queue pair to the error state.
    pub(super) fn set_established(&mut self) {
        self.conn.established.store(true, Ordering::Release);
        self.connected = true;
        if let Some(m) = monitor() {
            self.monitor_token = m.watch_conn(&self.conn);
        }
    }

    /// The rdma_cm id of the connection.
    pub(super) fn cm_id(&self) -> *mut rdma_cm_id {
        self.conn.id.raw
    }

    /// Why `wr` cannot be posted now, if it cannot.
    fn check_send(&self, wr: &SendWr<'_, Verbs>, free: bool) -> Result<(), PostError> {
        if !self.connected {
            return Err(PostError::NotConnected);
        }
        let uses_payload = !matches!(wr.op, SendOp::LocalInv { .. } | SendOp::BindMw(_));
        if uses_payload {
            match wr.payload {
                Payload::Sges(s) if s.len() > self.caps.max_send_sge as usize => {
                    return Err(PostError::TooManySge {
                        given: s.len(),
                        max: self.caps.max_send_sge,
                    });
                }
                Payload::Inline(b) => {
                    if matches!(wr.op, SendOp::RdmaRead { .. }) {
                        return Err(PostError::InvalidWr("inline RDMA Read"));
                    }
                    if b.len() > self.caps.max_inline_data as usize {
                        return Err(PostError::InlineTooLarge {
                            given: b.len(),
                            max: self.caps.max_inline_data,
                        });
                    }
                }
                _ => {}
            }
        }
        if let SendOp::BindMw(b) = wr.op {
            if b.len == 0 {
                return Err(PostError::InvalidWr("zero-length window bind"));
            }
        }
        if !free {
            return Err(PostError::QueueFull);
        }
        Ok(())
    }

    /// Posts `wrs` (at most [`CHUNK`]) in one `ibv_post_send` call, stopping before the
    /// first request that cannot be posted now or that binds a window already bound earlier
    /// in the call. Returns how many were posted, or the refused request's index and why.
    fn post_send_chunk(&mut self, wrs: &[SendWr<'_, Verbs>]) -> Result<usize, (usize, PostError)> {
        let mut raw = MaybeUninit::<[ibv_send_wr; CHUNK]>::uninit();
        let raw_p = raw.as_mut_ptr().cast::<ibv_send_wr>();
        let mut inline = MaybeUninit::<[ibv_sge; CHUNK]>::uninit();
        let inline_p = inline.as_mut_ptr().cast::<ibv_sge>();
        let mut bound: [*mut ibv_mw; CHUNK] = [ptr::null_mut(); CHUNK];
        let mut nbound = 0;

        let in_flight = self.send.outstanding(self.send_posted);
        let free = u64::from(self.caps.max_send_wr).saturating_sub(in_flight);
        let mut count = 0;
        let mut refused = None;
        for (i, wr) in wrs.iter().take(CHUNK).enumerate() {
            if let Err(e) = self.check_send(wr, (i as u64) < free) {
                refused = Some((i, e));
                break;
            }
            if let SendOp::BindMw(b) = wr.op {
                if bound[..nbound].contains(&b.mw.raw()) {
                    break;
                }
                bound[nbound] = b.mw.raw();
                nbound += 1;
            }
            let seq = self.send_posted + i as u64;
            // SAFETY: all-zero is a valid ibv_send_wr (null pointers, zero numbers).
            let mut w: ibv_send_wr = unsafe { mem::zeroed() };
            w.wr_id = self.send_slot.wr_id(seq);
            w.send_flags = wr.flags.bits();
            let payload = !matches!(wr.op, SendOp::LocalInv { .. } | SendOp::BindMw(_));
            if payload {
                match wr.payload {
                    Payload::Sges(s) => {
                        // The provider only reads the list; Sge has ibv_sge's layout.
                        w.sg_list = s.as_ptr().cast_mut().cast();
                        w.num_sge = s.len() as i32;
                    }
                    Payload::Inline(b) => {
                        let sge = ibv_sge {
                            addr: b.as_ptr() as u64,
                            length: b.len() as u32,
                            lkey: 0,
                        };
                        // SAFETY: `i < CHUNK`, inside the array.
                        unsafe { inline_p.add(i).write(sge) };
                        // SAFETY: as above.
                        w.sg_list = unsafe { inline_p.add(i) };
                        w.num_sge = i32::from(!b.is_empty());
                        w.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
                    }
                }
            }
            let op = encode_op(&mut w, wr.op);
            self.send.record(seq, wr.wr_id, op);
            // SAFETY: `i < CHUNK`, inside the array.
            unsafe { raw_p.add(i).write(w) };
            count += 1;
        }
        let (qp, post_send) = (self.qp, self.post_send_fn);
        let post = |chain, bad: &mut _| {
            // SAFETY: the queue pair is live; the chain's entries are initialised, linked,
            // and with every scatter list, inline buffer, window and region they name
            // outlive the call (borrowed from `wrs`, or locals of this frame); the provider
            // copies what it needs before returning (inline bytes included).
            unsafe { post_send(qp, chain, bad) }
        };
        // SAFETY: the array's first `count` entries are written above, their `next` null
        // from `mem::zeroed`; `post` may be called with them.
        let (posted, outcome) = unsafe { post_chain(raw_p, count, refused, post) };
        self.commit_send(&wrs[..posted]);
        outcome
    }

    /// Accounts for `wrs`, just posted: advances the send sequence and records the new
    /// rkeys of the windows they bind.
    fn commit_send(&mut self, wrs: &[SendWr<'_, Verbs>]) {
        self.send_posted += wrs.len() as u64;
        for wr in wrs {
            if let SendOp::BindMw(b) = wr.op {
                b.mw.set_rkey((b.mw.rkey_now() & !0xff) | (b.rkey & 0xff));
            }
        }
    }

    fn post_recv_chunk(&mut self, wrs: &[RecvWr<'_>]) -> Result<usize, (usize, PostError)> {
        let mut raw = MaybeUninit::<[ibv_recv_wr; CHUNK]>::uninit();
        let raw_p = raw.as_mut_ptr().cast::<ibv_recv_wr>();
        let in_flight = self.recv.outstanding(self.recv_posted);
        let free = u64::from(self.caps.max_recv_wr).saturating_sub(in_flight);
        let mut count: usize = 0;
        let mut refused = None;
        for (i, wr) in wrs.iter().take(CHUNK).enumerate() {
            if let Err(e) = check_recv_sges(wr, self.caps.max_recv_sge) {
                refused = Some((i, e));
                break;
            }
            if i as u64 >= free {
                refused = Some((i, PostError::QueueFull));
                break;
            }
            let seq = self.recv_posted + i as u64;
            self.recv.record(seq, wr.wr_id, WcOpcode::Recv);
            let w = raw_recv_wr(self.recv_slot.wr_id(seq), wr);
            // SAFETY: `i < CHUNK`, inside the array.
            unsafe { raw_p.add(i).write(w) };
            count += 1;
        }
        let (qp, post_recv) = (self.qp, self.post_recv_fn);
        let post = |chain, bad: &mut _| {
            // SAFETY: the queue pair is live; the chain's entries are initialised and
            // linked; their scatter lists (borrowed from `wrs`) outlive the call, and the
            // provider copies them into its queue before returning.
            unsafe { post_recv(qp, chain, bad) }
        };
        // SAFETY: the array's first `count` entries are written above, their `next` null
        // (`raw_recv_wr`); `post` may be called with them.
        let (posted, outcome) = unsafe { post_chain(raw_p, count, refused, post) };
        self.recv_posted += posted as u64;
        outcome
    }
}

/// Writes the operation `op` into the work request `w` (its opcode and the operation's
/// fields: immediate data, rkey to invalidate, remote address, window binding); the
/// completion opcode it will complete with.
#[inline(always)]
fn encode_op(w: &mut ibv_send_wr, op: SendOp<'_, Verbs>) -> WcOpcode {
    match op {
        SendOp::Send => {
            w.opcode = ibv_wr_opcode::IBV_WR_SEND;
            WcOpcode::Send
        }
        SendOp::SendWithImm { imm } => {
            w.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
            w.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            WcOpcode::Send
        }
        SendOp::SendWithInv { rkey } => {
            w.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
            w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            WcOpcode::Send
        }
        SendOp::RdmaWrite { remote } => {
            w.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            w.wr.rdma = rdma_t {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            };
            WcOpcode::RdmaWrite
        }
        SendOp::RdmaWriteWithImm { remote, imm } => {
            w.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
            w.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            w.wr.rdma = rdma_t {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            };
            WcOpcode::RdmaWrite
        }
        SendOp::RdmaRead { remote } => {
            w.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
            w.wr.rdma = rdma_t {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            };
            WcOpcode::RdmaRead
        }
        SendOp::LocalInv { rkey } => {
            w.opcode = ibv_wr_opcode::IBV_WR_LOCAL_INV;
            w.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            WcOpcode::LocalInv
        }
        SendOp::BindMw(b) => {
            w.opcode = ibv_wr_opcode::IBV_WR_BIND_MW;
            let rkey = (b.mw.rkey_now() & !0xff) | (b.rkey & 0xff);
            w.bind_mw_tso_union.bind_mw = bind_mw_t {
                mw: b.mw.raw(),
                rkey,
                bind_info: ibv_mw_bind_info {
                    mr: b.mr.raw(),
                    addr: b.addr,
                    length: b.len,
                    mw_access_flags: b.access.bits(),
                },
            };
            WcOpcode::BindMw
        }
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        if let (Some(token), Some(m)) = (self.monitor_token.take(), monitor()) {
            m.unwatch_conn(token, &*self.conn);
        }
        // The Conn (shared with the monitor only while it handles an event) disconnects
        // and destroys everything when its last holder lets go.
    }
}

impl QueuePair<Verbs> for VerbsQp {
    fn qp_num(&self) -> u32 {
        self.qp_num
    }

    fn caps(&self) -> QpCaps {
        self.caps
    }

    fn is_disconnected(&self) -> bool {
        self.conn.gone.load(Ordering::Acquire)
    }

    fn confirm_wait(&self) -> Option<std::time::Duration> {
        self.confirm_wait
    }

    fn state(&self) -> QpState {
        // SAFETY: plain old data; all zeroes is valid and the call overwrites it.
        let mut attr: ibv_qp_attr = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut init: ibv_qp_init_attr = unsafe { mem::zeroed() };
        // SAFETY: the queue pair is live; both out-parameters are valid for the call.
        let rc = unsafe {
            ibv_query_qp(
                self.qp,
                &mut attr,
                ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        };
        if rc != 0 {
            return QpState::Err;
        }
        match attr.qp_state {
            ibv_qp_state::IBV_QPS_RESET => QpState::Reset,
            ibv_qp_state::IBV_QPS_INIT => QpState::Init,
            ibv_qp_state::IBV_QPS_RTR => QpState::Rtr,
            ibv_qp_state::IBV_QPS_RTS => QpState::Rts,
            ibv_qp_state::IBV_QPS_SQD => QpState::Sqd,
            ibv_qp_state::IBV_QPS_SQE => QpState::Sqe,
            _ => QpState::Err,
        }
    }

    fn post_send_list(&mut self, wrs: &[SendWr<'_, Verbs>]) -> Result<(), BadWr> {
        post_in_chunks(wrs, |chunk| self.post_send_chunk(chunk))
    }

    fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BadWr> {
        if self.shared_recv && !wrs.is_empty() {
            return Err(BadWr {
                index: 0,
                error: PostError::InvalidWr(
                    "the queue pair takes its receives from a shared receive queue",
                ),
            });
        }
        post_in_chunks(wrs, |chunk| self.post_recv_chunk(chunk))
    }

    fn disconnect(&mut self) {
        self.conn.disconnect();
    }
}
