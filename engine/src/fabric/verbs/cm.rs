//! Connection setup with rdma_cm: event channels waited on with `poll(2)` and a deadline,
//! the active side (`rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`), the passive
//! side (`rdma_listen`, connection requests, `rdma_accept`, `rdma_reject`).
//!
//! Every connection gets its own event channel (an accepted one is migrated off the
//! listener's), so waiting for one connection's events never consumes another's. Once a
//! connection is established its channel belongs to the monitor thread (`monitor.rs`),
//! which answers the peer's disconnection. The rdma_cm objects themselves (channels, ids,
//! events) are a floor below, in `cmid.rs`; this is the top floor of the provider's files.

use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::cmid::{CmId, EventChannel};
use super::context::Context;
use super::device::VerbsDevice;
use super::marker::Verbs;
use super::pd::VerbsPd;
use super::qp::VerbsQp;
use super::sys::{millis_ceil, os_err, sockaddr_of};
use crate::fabric::{
    CmPrivateBytes, ConnRequest, ConnectError, FabricError, Listener, PostError, QpInit,
};

/// `IB_CM_REJ_CONSUMER_DEFINED`: the status of a rejection by the peer's application (as
/// opposed to the CM's, such as "no listener on this service id").
const REJ_CONSUMER_DEFINED: i32 = 28;
/// Transport retries before a send fails with `RetryExcErr` (7 is the most).
const RETRY_COUNT: u8 = 7;
/// Receiver-not-ready retries: none. A Send that finds no posted receive fails at once with
/// `RnrRetryExcErr` (RPC-over-RDMA's credits must prevent it; the Linux client sets 0 too).
const RNR_RETRY_COUNT: u8 = 0;
/// `rdma_set_option` level and option of the acknowledgement timeout (`rdma_cma.h`:
/// `RDMA_OPTION_ID`, `RDMA_OPTION_ID_ACK_TIMEOUT`, a `uint8_t`).
const RDMA_OPTION_ID: i32 = 0;
const RDMA_OPTION_ID_ACK_TIMEOUT: i32 = 3;
/// Pending connection requests a listener queues.
const BACKLOG: i32 = 128;

/// Sets the acknowledgement timeout (`QpInit::ack_timeout`) rdma_cm gives the queue pair
/// when it moves it to ready-to-send; must precede `rdma_connect` or `rdma_accept`. A
/// kernel without the option (before 4.14) keeps its own: not an error.
fn set_ack_timeout(id: *mut rdma_cm_id, exponent: u8) {
    if exponent == 0 {
        return;
    }
    let mut v = exponent.min(31);
    // SAFETY: the id is live; the option value is one byte, valid for the call.
    let _ = unsafe {
        rdma_set_option(
            id,
            RDMA_OPTION_ID,
            RDMA_OPTION_ID_ACK_TIMEOUT,
            (&mut v as *mut u8).cast(),
            1,
        )
    };
}

fn conn_param(private: &CmPrivateBytes, responder: u8, initiator: u8) -> rdma_conn_param {
    rdma_conn_param {
        private_data: if private.is_empty() {
            ptr::null()
        } else {
            private.as_bytes().as_ptr().cast()
        },
        private_data_len: private.len() as u8,
        responder_resources: responder,
        initiator_depth: initiator,
        flow_control: 0,
        retry_count: RETRY_COUNT,
        rnr_retry_count: RNR_RETRY_COUNT,
        srq: 0,
        qp_num: 0,
    }
}

/// Waits for `want` on `chan`, mapping the failure events of the resolution steps.
fn expect(
    chan: &EventChannel,
    deadline: Instant,
    want: rdma_cm_event_type::Type,
) -> Result<(), ConnectError> {
    use rdma_cm_event_type::*;
    loop {
        let ev = chan.next(deadline)?;
        match ev.kind {
            k if k == want => {
                if ev.status != 0 {
                    return Err(ConnectError::Unreachable);
                }
                return Ok(());
            }
            RDMA_CM_EVENT_ADDR_ERROR | RDMA_CM_EVENT_ROUTE_ERROR | RDMA_CM_EVENT_UNREACHABLE => {
                return Err(ConnectError::Unreachable)
            }
            RDMA_CM_EVENT_DEVICE_REMOVAL => {
                return Err(ConnectError::Fabric(FabricError::NoDevice));
            }
            _ => {}
        }
    }
}

fn resolve_error(call: &'static str, rc: i32) -> ConnectError {
    let e = os_err(call, rc);
    match e {
        FabricError::Os { errno, .. }
            if errno == libc::EADDRNOTAVAIL
                || errno == libc::ENETUNREACH
                || errno == libc::EHOSTUNREACH
                || errno == libc::ENODEV =>
        {
            ConnectError::Unreachable
        }
        e => ConnectError::Fabric(e),
    }
}

/// [`Provider::connect`](crate::fabric::Provider::connect) for verbs.
pub(super) fn connect<F>(
    pd: &VerbsPd,
    addr: &SocketAddr,
    init: QpInit<'_, Verbs>,
    private_data: &[u8],
    timeout: Duration,
    prepare: F,
) -> Result<(VerbsQp, CmPrivateBytes), ConnectError>
where
    F: FnOnce(&mut VerbsQp) -> Result<(), PostError>,
{
    use rdma_cm_event_type::*;
    let mine = CmPrivateBytes::new(private_data, CmPrivateBytes::CONNECT_MAX)?;
    let deadline = Instant::now() + timeout;
    let left_ms = || millis_ceil(deadline.saturating_duration_since(Instant::now())).max(1);

    let chan = Arc::new(EventChannel::new()?);
    let id = CmId::new(&chan)?;
    let mut dst = sockaddr_of(addr);
    // SAFETY: the id is live; `dst` is a valid socket address for the call; no source.
    let rc = unsafe {
        rdma_resolve_addr(
            id.raw,
            ptr::null_mut(),
            (&mut dst as *mut libc::sockaddr_storage).cast(),
            left_ms(),
        )
    };
    if rc != 0 {
        return Err(resolve_error("rdma_resolve_addr", rc));
    }
    expect(&chan, deadline, RDMA_CM_EVENT_ADDR_RESOLVED)?;
    // SAFETY: the id is live with its address resolved.
    let rc = unsafe { rdma_resolve_route(id.raw, left_ms()) };
    if rc != 0 {
        return Err(resolve_error("rdma_resolve_route", rc));
    }
    expect(&chan, deadline, RDMA_CM_EVENT_ROUTE_RESOLVED)?;

    let mut qp = VerbsQp::create(id, pd, init)?;
    prepare(&mut qp).map_err(ConnectError::Prepare)?;
    set_ack_timeout(qp.cm_id(), init.ack_timeout);

    let ctx: &Context = &pd.inner.ctx;
    let mut param = conn_param(&mine, ctx.max_qp_rd_atom, ctx.max_qp_init_rd_atom);
    // SAFETY: the id is live with its queue pair; `param` and the private data bytes it
    // points to outlive the call (librdmacm copies them).
    let rc = unsafe { rdma_connect(qp.cm_id(), &mut param) };
    if rc != 0 {
        return Err(resolve_error("rdma_connect", rc));
    }
    loop {
        let ev = chan.next(deadline)?;
        match ev.kind {
            RDMA_CM_EVENT_ESTABLISHED => {
                qp.set_established();
                return Ok((qp, ev.private_data(CmPrivateBytes::ACCEPT_MAX)));
            }
            RDMA_CM_EVENT_REJECTED if ev.status == REJ_CONSUMER_DEFINED => {
                return Err(ConnectError::Rejected(Box::new(
                    ev.private_data(CmPrivateBytes::REJECT_MAX),
                )));
            }
            RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_UNREACHABLE | RDMA_CM_EVENT_CONNECT_ERROR => {
                return Err(ConnectError::Unreachable);
            }
            RDMA_CM_EVENT_DISCONNECTED => {
                return Err(ConnectError::Protocol("disconnected while connecting"));
            }
            RDMA_CM_EVENT_DEVICE_REMOVAL => {
                return Err(ConnectError::Fabric(FabricError::NoDevice));
            }
            _ => {}
        }
    }
}

/// A listening rdma_cm id (`rdma_bind_addr` + `rdma_listen`).
pub struct VerbsListener {
    id: CmId,
    addr: SocketAddr,
}

impl core::fmt::Debug for VerbsListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsListener")
            .field("addr", &self.addr)
            .finish()
    }
}

/// [`Provider::listen`](crate::fabric::Provider::listen) for verbs.
pub(super) fn listen(
    device: &VerbsDevice,
    addr: &SocketAddr,
) -> Result<VerbsListener, ConnectError> {
    let chan = Arc::new(EventChannel::new()?);
    let id = CmId::new(&chan)?;
    let mut sa = sockaddr_of(addr);
    // SAFETY: the id is live; `sa` is a valid socket address for the call.
    let rc = unsafe { rdma_bind_addr(id.raw, (&mut sa as *mut libc::sockaddr_storage).cast()) };
    if rc != 0 {
        return Err(ConnectError::Fabric(os_err("rdma_bind_addr", rc)));
    }
    // SAFETY: the id is live; `verbs` is set when the address names one device.
    let bound = unsafe { (*id.raw).verbs };
    if !bound.is_null() && bound != device.ctx.ctx {
        return Err(ConnectError::Fabric(FabricError::InvalidArgument(
            "the address belongs to another RDMA device",
        )));
    }
    // SAFETY: the id is live and bound.
    let rc = unsafe { rdma_listen(id.raw, BACKLOG) };
    if rc != 0 {
        return Err(ConnectError::Fabric(os_err("rdma_listen", rc)));
    }
    Ok(VerbsListener { id, addr: *addr })
}

impl VerbsListener {
    /// The address the listener is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Listener<Verbs> for VerbsListener {
    fn get_request(&mut self, timeout: Duration) -> Result<VerbsConnRequest, ConnectError> {
        let deadline = Instant::now() + timeout;
        loop {
            let ev = self.id.channel().next(deadline)?;
            match ev.kind {
                rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST => {
                    let id = CmId {
                        raw: ev.id,
                        chan: self.id.channel().clone(),
                    };
                    return Ok(VerbsConnRequest {
                        peer: id.peer_addr(),
                        id: Some(id),
                        private: ev.private_data(CmPrivateBytes::CONNECT_MAX),
                        // This side's point of view (see `accept`).
                        initiator_depth: ev.initiator_depth,
                        responder_resources: ev.responder_resources,
                    });
                }
                rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    return Err(ConnectError::Fabric(FabricError::NoDevice));
                }
                // Events of requests not yet moved to their own channel (a client that
                // gave up, say) need nothing: their request handles see to them.
                _ => {}
            }
        }
    }
}

/// An incoming connection request (`RDMA_CM_EVENT_CONNECT_REQUEST`). Dropping it without
/// accepting rejects it.
pub struct VerbsConnRequest {
    id: Option<CmId>,
    private: CmPrivateBytes,
    /// The client's address, read from the request's id when it arrived.
    peer: Option<SocketAddr>,
    initiator_depth: u8,
    responder_resources: u8,
}

impl core::fmt::Debug for VerbsConnRequest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsConnRequest")
            .field("private", &self.private)
            .field("peer", &self.peer)
            .finish()
    }
}

impl Drop for VerbsConnRequest {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            // SAFETY: the request's id is live and neither accepted nor rejected yet.
            unsafe { rdma_reject(id.raw, ptr::null(), 0) };
        }
    }
}

impl ConnRequest<Verbs> for VerbsConnRequest {
    fn private_data(&self) -> CmPrivateBytes {
        self.private
    }

    /// The client's IPv4 or IPv6 address and port, from the request's rdma_cm id
    /// (`rdma_get_peer_addr`, read when the request arrived); `None` for an `AF_IB` one.
    fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    fn accept<F>(
        mut self,
        pd: &VerbsPd,
        init: QpInit<'_, Verbs>,
        private_data: &[u8],
        timeout: Duration,
        prepare: F,
    ) -> Result<VerbsQp, ConnectError>
    where
        F: FnOnce(&mut VerbsQp) -> Result<(), PostError>,
    {
        use rdma_cm_event_type::*;
        let mine = CmPrivateBytes::new(private_data, CmPrivateBytes::ACCEPT_MAX)?;
        let deadline = Instant::now() + timeout;
        let mut id = self
            .id
            .take()
            .ok_or(ConnectError::Protocol("request already used"))?;
        let chan = Arc::new(EventChannel::new()?);
        id.migrate(&chan)?;
        // From here a failure drops the id (through the queue pair or directly), which
        // rejects the request.
        let mut qp = VerbsQp::create(id, pd, init)?;
        prepare(&mut qp).map_err(ConnectError::Prepare)?;
        set_ack_timeout(qp.cm_id(), init.ack_timeout);
        let ctx: &Context = &pd.inner.ctx;
        // The request's event reports the peer's offer from this side's point of view
        // (the IB CM swaps them: its `responder_resources` is the peer's initiator depth,
        // its `initiator_depth` the peer's responder resources), so each bounds the same
        // field here. The Linux NFS client offers responder resources and an initiator
        // depth of 0 (it never reads from the server): swapped, this side's initiator depth
        // was 0, and its RDMA Reads of WRITE data waited forever in rxe.
        let mut param = conn_param(
            &mine,
            ctx.max_qp_rd_atom.min(self.responder_resources),
            ctx.max_qp_init_rd_atom.min(self.initiator_depth),
        );
        // SAFETY: the id is live with its queue pair; `param` and the private data bytes it
        // points to outlive the call.
        let rc = unsafe { rdma_accept(qp.cm_id(), &mut param) };
        if rc != 0 {
            return Err(ConnectError::Fabric(os_err("rdma_accept", rc)));
        }
        let sent = Instant::now();
        loop {
            let ev = chan.next(deadline)?;
            match ev.kind {
                RDMA_CM_EVENT_ESTABLISHED => {
                    qp.set_confirm_wait(sent.elapsed());
                    qp.set_established();
                    return Ok(qp);
                }
                RDMA_CM_EVENT_CONNECT_ERROR
                | RDMA_CM_EVENT_UNREACHABLE
                | RDMA_CM_EVENT_REJECTED
                | RDMA_CM_EVENT_DISCONNECTED => {
                    return Err(ConnectError::Protocol(
                        "the client did not complete the connection",
                    ));
                }
                RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    return Err(ConnectError::Fabric(FabricError::NoDevice));
                }
                _ => {}
            }
        }
    }

    fn reject(mut self, private_data: &[u8]) -> Result<(), ConnectError> {
        let mine = CmPrivateBytes::new(private_data, CmPrivateBytes::REJECT_MAX)?;
        let id = self
            .id
            .take()
            .ok_or(ConnectError::Protocol("request already used"))?;
        let p = if mine.is_empty() {
            ptr::null()
        } else {
            mine.as_bytes().as_ptr().cast()
        };
        // SAFETY: the request's id is live; the bytes outlive the call.
        let rc = unsafe { rdma_reject(id.raw, p, mine.len() as u8) };
        if rc != 0 {
            return Err(ConnectError::Fabric(os_err("rdma_reject", rc)));
        }
        Ok(())
    }
}
