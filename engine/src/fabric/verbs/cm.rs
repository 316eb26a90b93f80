//! Connection setup with rdma_cm: event channels waited on with `poll(2)` and a deadline,
//! the active side (`rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`), the passive
//! side (`rdma_listen`, connection requests, `rdma_accept`, `rdma_reject`).
//!
//! Every connection gets its own event channel (an accepted one is migrated off the
//! listener's), so waiting for one connection's events never consumes another's. Once a
//! connection is established its channel belongs to the monitor thread (`monitor.rs`),
//! which answers the peer's disconnection.

use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::device::{Context, VerbsDevice};
use super::mem::VerbsPd;
use super::qp::VerbsQp;
use super::sys::{
    errno, millis_ceil, os_err, set_nonblocking, sockaddr_of, socket_addr_from, wait_readable,
};
use super::Verbs;
use crate::fabric::{
    ConnRequest, ConnectError, FabricError, Listener, PostError, PrivateData, QpInit,
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

/// An rdma_cm event channel, non-blocking, destroyed on drop.
pub(super) struct EventChannel {
    raw: *mut rdma_event_channel,
}

// SAFETY: the channel is a descriptor wrapper; librdmacm calls on it are thread-safe and
// only one thread at a time reads events from a given channel (its owner, or the monitor).
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    pub(super) fn new() -> Result<EventChannel, FabricError> {
        // SAFETY: no arguments; returns a new channel or NULL.
        let raw = unsafe { rdma_create_event_channel() };
        if raw.is_null() {
            let e = errno();
            // Without RDMA in the kernel (no /dev/infiniband/rdma_cm) this fails ENODEV.
            if e == libc::ENODEV || e == libc::ENOENT || e == libc::ENOSYS {
                return Err(FabricError::NoDevice);
            }
            return Err(FabricError::Os {
                call: "rdma_create_event_channel",
                errno: e,
            });
        }
        let ch = EventChannel { raw };
        set_nonblocking(ch.fd(), "fcntl(rdma_cm channel)")?;
        Ok(ch)
    }

    pub(super) fn fd(&self) -> i32 {
        // SAFETY: the channel is live.
        unsafe { (*self.raw).fd }
    }

    /// The next event, waiting until `deadline`.
    fn next(&self, deadline: Instant) -> Result<CmEvent, ConnectError> {
        loop {
            if let Some(ev) = self.try_next()? {
                return Ok(ev);
            }
            if !wait_readable(self.fd(), deadline)? {
                return Err(ConnectError::Timeout);
            }
        }
    }

    /// The next event if one is queued.
    pub(super) fn try_next(&self) -> Result<Option<CmEvent>, FabricError> {
        let mut ev: *mut rdma_cm_event = ptr::null_mut();
        // SAFETY: the channel is live; `ev` is a valid out-parameter.
        let rc = unsafe { rdma_get_cm_event(self.raw, &mut ev) };
        if rc != 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EWOULDBLOCK || e == libc::EINTR {
                return Ok(None);
            }
            return Err(FabricError::Os {
                call: "rdma_get_cm_event",
                errno: e,
            });
        }
        // SAFETY: rdma_get_cm_event returned a valid event, ours until acked.
        let copy = unsafe { CmEvent::copy(&*ev) };
        // SAFETY: the event is acked once, after which it is not touched.
        unsafe { rdma_ack_cm_event(ev) };
        Ok(Some(copy))
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on the channel holds an Arc of it, so none is left.
        unsafe { rdma_destroy_event_channel(self.raw) };
    }
}

/// An rdma_cm id (`RDMA_PS_TCP`), destroyed on drop, and the channel its events go to.
pub(super) struct CmId {
    pub(super) raw: *mut rdma_cm_id,
    chan: Arc<EventChannel>,
}

// SAFETY: librdmacm calls on an id are thread-safe; the types holding a CmId serialise the
// calls that change the connection.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

impl CmId {
    fn new(chan: &Arc<EventChannel>) -> Result<CmId, FabricError> {
        let mut raw = ptr::null_mut();
        // SAFETY: the channel is live; `raw` is a valid out-parameter.
        let rc = unsafe {
            rdma_create_id(
                chan.raw,
                &mut raw,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(os_err("rdma_create_id", rc));
        }
        Ok(CmId {
            raw,
            chan: chan.clone(),
        })
    }

    /// The peer's address as rdma_cm knows it (`rdma_get_peer_addr`: the id's
    /// `route.addr.dst_addr`), IPv4 or IPv6; `None` for another family (`AF_IB`) or none.
    /// For a connection request's id librdmacm fills it in before it reports the request.
    fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live and its route is plain data librdmacm wrote before handing
        // the id out; `dst_storage` spans the whole address union (what
        // `rdma_get_peer_addr` points to), read by value as bytes of a sockaddr_storage.
        let ss = unsafe { (*self.raw).route.addr.dst_addr_union.dst_storage };
        socket_addr_from(&ss)
    }

    /// The channel the id's events go to.
    pub(super) fn channel(&self) -> &Arc<EventChannel> {
        &self.chan
    }

    /// Moves the id's events to `chan` (`rdma_migrate_id`).
    fn migrate(&mut self, chan: &Arc<EventChannel>) -> Result<(), FabricError> {
        // SAFETY: the id and the channel are live; every event of the id read so far was
        // acked (librdmacm waits for that).
        let rc = unsafe { rdma_migrate_id(self.raw, chan.raw) };
        if rc != 0 {
            return Err(os_err("rdma_migrate_id", rc));
        }
        self.chan = chan.clone();
        Ok(())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id is destroyed once, after its queue pair (if any); every event of
        // it that was read has been acked.
        unsafe { rdma_destroy_id(self.raw) };
    }
}

/// What is kept of an rdma_cm event once it is acked.
pub(super) struct CmEvent {
    pub(super) kind: rdma_cm_event_type::Type,
    status: i32,
    id: *mut rdma_cm_id,
    private: [u8; PrivateData::CAPACITY],
    private_len: usize,
    initiator_depth: u8,
    responder_resources: u8,
}

impl CmEvent {
    /// Copies what matters out of a live event.
    ///
    /// # Safety
    ///
    /// `ev` must be an event returned by `rdma_get_cm_event` and not yet acked.
    unsafe fn copy(ev: &rdma_cm_event) -> CmEvent {
        use rdma_cm_event_type::*;
        let mut c = CmEvent {
            kind: ev.event,
            status: ev.status,
            id: ev.id,
            private: [0; PrivateData::CAPACITY],
            private_len: 0,
            initiator_depth: 0,
            responder_resources: 0,
        };
        if matches!(
            ev.event,
            RDMA_CM_EVENT_CONNECT_REQUEST
                | RDMA_CM_EVENT_CONNECT_RESPONSE
                | RDMA_CM_EVENT_ESTABLISHED
                | RDMA_CM_EVENT_REJECTED
        ) {
            // SAFETY: for connection events on an RC id, `param.conn` is the live member.
            let conn = unsafe { &ev.param.conn };
            c.initiator_depth = conn.initiator_depth;
            c.responder_resources = conn.responder_resources;
            if !conn.private_data.is_null() {
                let n = usize::from(conn.private_data_len).min(PrivateData::CAPACITY);
                // SAFETY: librdmacm keeps `private_data_len` bytes at `private_data` until
                // the event is acked.
                let src = unsafe { core::slice::from_raw_parts(conn.private_data.cast::<u8>(), n) };
                c.private[..n].copy_from_slice(src);
                c.private_len = n;
            }
        }
        c
    }

    /// The event's private data, as the receiver of a step of at most `max` bytes sees it.
    fn private_data(&self, max: usize) -> PrivateData {
        let n = self.private_len.min(max);
        PrivateData::new(&self.private[..n], max)
            .unwrap_or_default()
            .padded(max)
    }
}

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

fn conn_param(private: &PrivateData, responder: u8, initiator: u8) -> rdma_conn_param {
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
) -> Result<(VerbsQp, PrivateData), ConnectError>
where
    F: FnOnce(&mut VerbsQp) -> Result<(), PostError>,
{
    use rdma_cm_event_type::*;
    let mine = PrivateData::new(private_data, PrivateData::CONNECT_MAX)?;
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
                return Ok((qp, ev.private_data(PrivateData::ACCEPT_MAX)));
            }
            RDMA_CM_EVENT_REJECTED if ev.status == REJ_CONSUMER_DEFINED => {
                return Err(ConnectError::Rejected(Box::new(
                    ev.private_data(PrivateData::REJECT_MAX),
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
                        private: ev.private_data(PrivateData::CONNECT_MAX),
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
    private: PrivateData,
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
    fn private_data(&self) -> PrivateData {
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
        let mine = PrivateData::new(private_data, PrivateData::ACCEPT_MAX)?;
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
        loop {
            let ev = chan.next(deadline)?;
            match ev.kind {
                RDMA_CM_EVENT_ESTABLISHED => {
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
        let mine = PrivateData::new(private_data, PrivateData::REJECT_MAX)?;
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
