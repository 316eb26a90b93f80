//! rdma_cm's objects: event channels (non-blocking, waited on with `poll(2)` until a
//! deadline), ids and their channels, and events, copied out before they are acked. The
//! connection steps that use them are in `cm.rs`; a queue pair's connection (`qp.rs`) owns
//! its id.

use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use rdma_sys::*;

use super::sys::{errno, os_err, set_nonblocking, socket_addr_from, wait_readable};
use crate::fabric::{CmPrivateBytes, ConnectError, FabricError};

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
    pub(super) fn next(&self, deadline: Instant) -> Result<CmEvent, ConnectError> {
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
    pub(super) chan: Arc<EventChannel>,
}

// SAFETY: librdmacm calls on an id are thread-safe; the types holding a CmId serialise the
// calls that change the connection.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

impl CmId {
    pub(super) fn new(chan: &Arc<EventChannel>) -> Result<CmId, FabricError> {
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
    pub(super) fn peer_addr(&self) -> Option<SocketAddr> {
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
    pub(super) fn migrate(&mut self, chan: &Arc<EventChannel>) -> Result<(), FabricError> {
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
    pub(super) status: i32,
    pub(super) id: *mut rdma_cm_id,
    private: [u8; CmPrivateBytes::CAPACITY],
    private_len: usize,
    pub(super) initiator_depth: u8,
    pub(super) responder_resources: u8,
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
            private: [0; CmPrivateBytes::CAPACITY],
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
                let n = usize::from(conn.private_data_len).min(CmPrivateBytes::CAPACITY);
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
    pub(super) fn private_data(&self, max: usize) -> CmPrivateBytes {
        let n = self.private_len.min(max);
        CmPrivateBytes::new(&self.private[..n], max)
            .unwrap_or_default()
            .padded(max)
    }
}
