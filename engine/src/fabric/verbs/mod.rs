//! The `verbs` provider: real RDMA devices (and soft-RoCE) through libibverbs and
//! librdmacm, by way of rdma-sys.
//!
//! # Objects
//!
//! - [`VerbsDevice`]: an `ibv_context`. It is rdma_cm's own context of the device
//!   (`rdma_get_devices`), because `rdma_create_qp` requires the protection domain to belong
//!   to the context the connection's id resolved to. Opening fails with
//!   [`FabricError::NoDevice`] when there is none (on a kernel without RDMA,
//!   `ibv_get_device_list` returns NULL with ENOSYS). The largest inline payload is not a
//!   device attribute in verbs: it is found at open time by creating queue pairs.
//! - [`VerbsPd`], [`VerbsMr`] (a page-aligned anonymous mapping registered with
//!   `ibv_reg_mr`; dropping it deregisters, then unmaps, or leaks the memory if the
//!   deregistration fails), [`VerbsMw`] (a type 2 window, bound with `IBV_WR_BIND_MW`).
//! - [`VerbsCq`]: polled with the provider's `poll_cq` in batches of 32.
//! - [`VerbsQp`]: an RC queue pair created with `rdma_create_qp` on an `rdma_cm_id`.
//!   Work requests are translated into `ibv_send_wr`/`ibv_recv_wr` chains on the stack (16
//!   per provider call, no allocation); scatter lists are passed as they are (`Sge` has
//!   `ibv_sge`'s layout).
//! - [`VerbsSrq`]: a shared receive queue (`ibv_create_srq`, at most the device's
//!   `max_srq_wr`), posted to with the provider's `post_srq_recv` in the same stack chains
//!   from any thread (one lock per post call), its limit armed with `ibv_modify_srq` and its
//!   `IBV_EVENT_SRQ_LIMIT_REACHED` read by the monitor. A queue pair made with it
//!   (`QpInit::srq`, on either side of rdma_cm) has no receive queue of its own and keeps it
//!   alive: it is destroyed after the last of them.
//!
//! The hot-path verbs are static inline functions in C that call the provider's function
//! pointers; rdma-sys re-implements them with `.unwrap()` on those pointers. This provider
//! takes the pointers once when the device is opened (refusing a device that lacks
//! `post_send`, `post_recv` or `poll_cq`) and calls them directly.
//!
//! # Behaviour the fabric contract asks for, and how it is met
//!
//! - Queue depth is counted from post to poll (notes in `cq.rs`): each work request is posted
//!   under a provider `wr_id` naming its queue and sequence number, and polling maps it back
//!   to the caller's id and retires the slots.
//! - Failed send completions report the operation that was posted.
//! - Connections: every blocking rdma_cm step waits on the event channel's descriptor with
//!   `poll(2)` until the caller's deadline. Private data travels in
//!   `rdma_conn_param.private_data` and is read from the `CONNECT_REQUEST` and
//!   `ESTABLISHED` events, zero-padded to the step's size as the fabric specifies.
//!   `rnr_retry_count` is 0 (a Send without a posted receive fails at once), `retry_count` 7.
//! - A peer's disconnection moves the local queue pair to the error state (a monitor thread
//!   handles the `DISCONNECTED` event), so outstanding requests flush.
//! - Except a shared receive queue's receives: a queue pair with one that goes to the error
//!   state flushes none of them (rxe flushes nothing for it; they stay posted for the other
//!   queue pairs), so no flush completion is to be expected for them. A shared receive holds
//!   its place in the queue's depth from post to poll, like any request.
//!
//! # Files, in floors
//!
//! Each file imports only from files on the floors below it; no two import each other:
//!
//! 0. `sys` (errno, mappings, socket addresses, waiting on a descriptor) and `marker` (the
//!    [`Verbs`] type, which the trait implementations above name);
//! 1. `monitor` (the event thread; it watches a connection through its `WatchedConn`
//!    trait, which `qp`'s connection implements), `cmid` (rdma_cm channels, ids and events)
//!    and `chain` (work request chains on the stack, for `qp` and `srq`);
//! 2. `context` (an open device context and the provider's function table);
//! 3. `mem` (a domain's device object, regions, windows), `cq` (with the work queues'
//!    `wr_id` records) and `info` (device listing);
//! 4. `srq`;
//! 5. `pd` ([`VerbsPd`], which makes regions, windows and shared receive queues);
//! 6. `qp` and `device` ([`VerbsDevice`], which makes domains and completion queues);
//! 7. `cm` (connection setup, which makes queue pairs);
//!
//! then this file (the [`Provider`] implementation) and `tests`. The conformance suite's
//! environment on this provider, `VerbsEnv`, is the crate `rpcrdma-conformance`'s.
//!
//! Every `unsafe` block carries a `// SAFETY:` comment.

mod chain;
mod cm;
mod cmid;
mod context;
mod cq;
mod device;
mod info;
mod marker;
mod mem;
mod monitor;
mod pd;
mod qp;
mod srq;
mod sys;

use std::net::SocketAddr;
use std::time::Duration;

pub use cm::{VerbsConnRequest, VerbsListener};
pub use context::MwSupport;
pub use cq::VerbsCq;
pub use device::VerbsDevice;
pub use info::{list_devices, DeviceInfo, DeviceList, GidInfo, Limits, PortInfo};
pub use marker::Verbs;
pub use mem::{VerbsMr, VerbsMw};
pub use pd::VerbsPd;
pub use qp::VerbsQp;
pub use srq::VerbsSrq;

use super::{CmPrivateBytes, ConnectError, FabricError, PostError, Provider, QpInit};

impl Provider for Verbs {
    const NAME: &'static str = "verbs";
    type Device = VerbsDevice;
    type Pd = VerbsPd;
    type Mr = VerbsMr;
    type Mw = VerbsMw;
    type Cq = VerbsCq;
    type Srq = VerbsSrq;
    type Qp = VerbsQp;
    type Listener = VerbsListener;
    type ConnRequest = VerbsConnRequest;
    type Addr = SocketAddr;

    fn open_device(name: Option<&str>) -> Result<VerbsDevice, FabricError> {
        let ctx = context::Context::open(name)?;
        Ok(VerbsDevice {
            ctx: std::sync::Arc::new(ctx),
        })
    }

    fn listen(device: &VerbsDevice, addr: &SocketAddr) -> Result<VerbsListener, ConnectError> {
        cm::listen(device, addr)
    }

    fn connect<F>(
        pd: &VerbsPd,
        addr: &SocketAddr,
        init: QpInit<'_, Self>,
        private_data: &[u8],
        timeout: Duration,
        prepare: F,
    ) -> Result<(VerbsQp, CmPrivateBytes), ConnectError>
    where
        F: FnOnce(&mut VerbsQp) -> Result<(), PostError>,
    {
        cm::connect(pd, addr, init, private_data, timeout, prepare)
    }
}

#[cfg(test)]
mod tests;
