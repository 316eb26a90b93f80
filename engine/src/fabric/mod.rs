//! The fabric: the engine's view of RDMA, a small family of traits modelled on verbs, and its
//! providers.
//!
//! # Shape
//!
//! A [`Provider`] names the types of one RDMA implementation: a [`Device`] opens protection
//! domains ([`ProtectionDomain`]) and completion queues ([`CompletionQueue`]); a domain
//! allocates registered memory ([`MemoryRegion`], with lkey and rkey) and type 2 memory
//! windows ([`MemoryWindow`]); connections are made with rdma_cm's steps
//! ([`Provider::connect`], [`Listener`], [`ConnRequest`]) carrying opaque private data (the
//! RFC 8797 bytes) and yield reliable-connected queue pairs ([`QueuePair`]) to which work
//! requests ([`SendWr`], [`RecvWr`]) are posted and whose completions ([`Wc`]) are polled.
//! Everything on the hot path is generic over the provider: no `dyn`, each provider is
//! monomorphised.
//!
//! Two providers fit it: [`soft`] (software RDMA over shared memory, in this crate) and
//! `verbs` (libibverbs and librdmacm through rdma-sys, for NICs and soft-RoCE). The behaviour
//! both must show is written once, as the conformance suite: the crate `rpcrdma-conformance`
//! (`engine/conformance/`), which uses this module's public API only.
//!
//! # Why posting is safe
//!
//! `post_send` and `post_recv` are safe functions: the memory hazard of handing buffers to
//! hardware is removed by ownership instead of being left to a `Safety` section.
//!
//! - Work requests name memory only as `(addr, length, lkey)` numbers ([`Sge`]) or as inline
//!   bytes that are copied during the call. A provider checks every element against the live
//!   registration its key names, as a NIC does: an element outside its region, or needing
//!   rights the region lacks, fails with [`WcStatus::LocProtErr`] (or the peer's equivalent),
//!   never with a stray access.
//! - Every registration is memory the provider allocated itself
//!   ([`ProtectionDomain::alloc_region`]) and keeps mapped for as long as the fabric may
//!   reach it: the soft provider's arena lives until the last queue pair using the domain is
//!   gone; the verbs provider deregisters before unmapping and leaks rather than unmaps
//!   memory it cannot deregister.
//! - What remains is the race between the CPU and the fabric over the bytes of a
//!   registration. Safe code touches those bytes only by copying
//!   ([`MemoryRegion::read_at`], [`MemoryRegion::write_at`]); the zero-copy views
//!   ([`MemoryRegion::slice`], [`MemoryRegion::slice_mut`]) are `unsafe fn` and carry the
//!   rule: no posted work request may read (for a mutable view) or write the viewed bytes
//!   until its completion — including a flush completion — has been polled, and no peer may
//!   hold a key that lets it write them. That is where the buffer pool's `unsafe` lives.
//!
//! # Queue depth accounting
//!
//! A work request occupies a slot of its queue from the post until its completion has been
//! polled; an unsignaled send request's slot is released when the completion of a later
//! request on the same send queue is polled. Posting into a full queue is refused with
//! [`PostError::QueueFull`]; it never blocks. This is the strictest rule real devices apply
//! (mlx5 releases slots at poll time), so code that respects it runs on all of them.

#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod access;
pub mod conn;
pub mod error;
#[allow(unsafe_code)]
pub mod reader_copies;
#[allow(unsafe_code)]
pub mod soft;
#[cfg(feature = "verbs")]
#[allow(unsafe_code)]
pub mod verbs;
#[allow(unsafe_code)]
pub mod watch;
pub mod wc;
pub mod wr;

use core::fmt;
use std::time::Duration;

pub use access::Access;
pub use conn::{CmPrivateBytes, ConnectError, DeviceAttr, QpCaps, QpInit, QpState};
pub use error::{BadWr, CqError, FabricError, PostError};
pub use watch::{CqWatch, WatchTable};
pub use wc::{Wc, WcOpcode, WcStatus};
pub use wr::{inc_rkey, MwBind, Payload, RecvWr, RemoteAddr, SendFlags, SendOp, SendWr, Sge};

/// One RDMA implementation: the types of its objects and its connection entry points.
pub trait Provider: Sized + Send + Sync + 'static {
    /// Short name, e.g. `"soft"` or `"verbs"`.
    const NAME: &'static str;
    /// An opened device (`struct ibv_context`).
    type Device: Device<Self> + Send + Sync;
    /// A protection domain (`struct ibv_pd`).
    type Pd: ProtectionDomain<Self> + Send + Sync;
    /// A registered memory region that owns its memory (`struct ibv_mr` plus the mapping).
    type Mr: MemoryRegion + Send + Sync;
    /// A type 2 memory window (`struct ibv_mw`).
    type Mw: MemoryWindow + Send + Sync;
    /// A completion queue (`struct ibv_cq`).
    type Cq: CompletionQueue + Send + Sync;
    /// A shared receive queue (`struct ibv_srq`).
    type Srq: SharedReceiveQueue + Send + Sync;
    /// A reliable-connected queue pair (`struct ibv_qp` with its `rdma_cm_id`).
    type Qp: QueuePair<Self> + Send;
    /// A listening endpoint (`rdma_listen` on an `rdma_cm_id`).
    type Listener: Listener<Self> + Send;
    /// An incoming connection request (`RDMA_CM_EVENT_CONNECT_REQUEST`).
    type ConnRequest: ConnRequest<Self> + Send;
    /// The address a listener binds and a client connects to (an IP socket address for
    /// verbs, a Unix socket name for soft).
    type Addr: Clone + fmt::Debug + fmt::Display + Send + Sync;

    /// Opens the device called `name`, or the first one if `None`.
    fn open_device(name: Option<&str>) -> Result<Self::Device, FabricError>;

    /// Listens for connections at `addr` on `device` (`rdma_bind_addr` + `rdma_listen`).
    fn listen(device: &Self::Device, addr: &Self::Addr) -> Result<Self::Listener, ConnectError>;

    /// Connects to the listener at `addr` (`rdma_resolve_addr`, `rdma_resolve_route`,
    /// `rdma_create_qp`, `rdma_connect`): creates the queue pair in `pd` with `init`, hands it
    /// to `prepare` (which may post receives, as the peer may send as soon as it is
    /// connected), then sends `private_data` (at most [`CmPrivateBytes::CONNECT_MAX`] bytes) and
    /// waits at most `timeout` for the peer's accept. Returns the connected queue pair and
    /// the peer's private data, zero-padded to [`CmPrivateBytes::ACCEPT_MAX`] bytes.
    fn connect<F>(
        pd: &Self::Pd,
        addr: &Self::Addr,
        init: QpInit<'_, Self>,
        private_data: &[u8],
        timeout: Duration,
        prepare: F,
    ) -> Result<(Self::Qp, CmPrivateBytes), ConnectError>
    where
        F: FnOnce(&mut Self::Qp) -> Result<(), PostError>;
}

/// An opened RDMA device.
pub trait Device<P: Provider> {
    /// The device's name (`ibv_get_device_name`).
    fn name(&self) -> &str;

    /// The device's limits.
    fn attr(&self) -> DeviceAttr;

    /// Allocates a protection domain (`ibv_alloc_pd`).
    fn alloc_pd(&self) -> Result<P::Pd, FabricError>;

    /// Creates a completion queue holding at least `min_depth` completions
    /// (`ibv_create_cq`); [`CompletionQueue::depth`] tells the size granted.
    fn create_cq(&self, min_depth: u32) -> Result<P::Cq, FabricError>;
}

/// A protection domain: the scope of memory registrations, windows and queue pairs that may
/// be used together.
pub trait ProtectionDomain<P: Provider> {
    /// Allocates `len` bytes of page-aligned, zeroed memory and registers it with `access`
    /// (`mmap` + `ibv_reg_mr`). The region owns the memory.
    fn alloc_region(&self, len: usize, access: Access) -> Result<P::Mr, FabricError>;

    /// Allocates an unbound type 2 memory window (`ibv_alloc_mw(pd, IBV_MW_TYPE_2)`).
    fn alloc_mw(&self) -> Result<P::Mw, FabricError>;

    /// Creates a shared receive queue holding at least `max_wr` receives of at most
    /// `max_sge` scatter elements each (`ibv_create_srq`); [`SharedReceiveQueue::depth`]
    /// tells the size granted. [`FabricError::InvalidArgument`] beyond the device's
    /// [`DeviceAttr::max_srq_wr`] (0: the device has none).
    fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<P::Srq, FabricError>;
}

/// A shared receive queue: receives that any queue pair made with it
/// ([`QpInit::srq`]) consumes, in the order they were posted.
///
/// A receive it holds completes on the receive completion queue of the queue pair whose
/// incoming Send (or RDMA Write With Immediate) consumed it, with that queue pair's
/// [`Wc::qp_num`] and the receive's `wr_id`. A queue pair that goes to the error state
/// flushes none of the shared queue's receives (they stay for the other queue pairs); they
/// are released when the queue is destroyed, after every queue pair made with it. Posting on
/// such a queue pair's own receive queue is refused ([`PostError::InvalidWr`]).
pub trait SharedReceiveQueue {
    /// Posts `wrs` in order (`ibv_post_srq_recv`). Any thread may post; concurrent posts
    /// are serialized by the provider. On a refusal, the requests before the refused one
    /// are posted.
    fn post_recv_list(&self, wrs: &[RecvWr<'_>]) -> Result<(), BadWr>;

    /// Posts one receive.
    fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        self.post_recv_list(core::slice::from_ref(wr))
            .map_err(|bad| bad.error)
    }

    /// How many receives the queue holds at most.
    fn depth(&self) -> u32;

    /// Arms the limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): once fewer than `limit`
    /// receives remain posted, [`take_limit_event`](Self::take_limit_event) says so
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`). The limit fires once; arm it again to watch again.
    /// `limit` 0 disarms it.
    fn arm_limit(&self, limit: u32) -> Result<(), FabricError>;

    /// Whether the armed limit was reached since the last call (reading clears it).
    fn take_limit_event(&self) -> bool;
}

/// A registered memory region that owns its memory. Dropping it deregisters the region.
///
/// The region's bytes are shared with the fabric, so safe access copies
/// ([`read_at`](Self::read_at), [`write_at`](Self::write_at)); borrowing them in place is
/// `unsafe` ([`slice`](Self::slice), [`slice_mut`](Self::slice_mut)).
pub trait MemoryRegion {
    /// Virtual address of the first byte, as work requests and peers name it.
    fn addr(&self) -> u64;

    /// Pointer to the first byte.
    fn as_ptr(&self) -> *mut u8;

    /// Length in bytes.
    fn len(&self) -> usize;

    /// Whether the region is empty (never, for a successful allocation).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The local key, named by scatter-gather elements.
    fn lkey(&self) -> u32;

    /// The remote key, named by peers' one-sided operations.
    fn rkey(&self) -> u32;

    /// The rights the region was registered with.
    fn access(&self) -> Access;

    /// A scatter-gather element for `len` bytes at `offset` of the region.
    ///
    /// # Panics
    ///
    /// If the span is not inside the region.
    fn sge(&self, offset: usize, len: u32) -> Sge {
        assert!(
            offset
                .checked_add(len as usize)
                .is_some_and(|end| end <= self.len()),
            "sge {offset}+{len} outside a region of {} bytes",
            self.len()
        );
        Sge::new(self.addr() + offset as u64, len, self.lkey())
    }

    /// The remote address of `offset` under the region's rkey, to advertise to a peer.
    fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr::new(self.addr() + offset as u64, self.rkey())
    }

    /// Copies `dst.len()` bytes at `offset` out of the region.
    ///
    /// # Panics
    ///
    /// If the span is not inside the region.
    fn read_at(&self, offset: usize, dst: &mut [u8]);

    /// Copies `src` into the region at `offset`.
    ///
    /// # Panics
    ///
    /// If the span is not inside the region.
    fn write_at(&self, offset: usize, src: &[u8]);

    /// Borrows `len` bytes at `offset` in place.
    ///
    /// # Safety
    ///
    /// While the borrow lives, nothing may write those bytes: no posted receive or RDMA Read
    /// whose scatter list covers them may be outstanding (it is outstanding until its
    /// completion, including a flush completion, has been polled), no peer may hold an rkey
    /// with write access that covers them, and no other thread may write them through
    /// [`write_at`](Self::write_at) or a mutable view.
    ///
    /// # Panics
    ///
    /// If the span is not inside the region.
    // Declares the contract only; the unsafe operations are in the providers.
    #[allow(unsafe_code)]
    unsafe fn slice(&self, offset: usize, len: usize) -> &[u8];

    /// Borrows `len` bytes at `offset` in place, mutably.
    ///
    /// # Safety
    ///
    /// As for [`slice`](Self::slice), and moreover nothing else may read those bytes while
    /// the borrow lives: no outstanding Send or RDMA Write gathering from them, no peer rkey
    /// with read access covering them, no other view of them.
    ///
    /// # Panics
    ///
    /// If the span is not inside the region.
    #[allow(unsafe_code, clippy::mut_from_ref)]
    unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8];
}

/// A type 2 memory window: a remote key over part of a region, bound and invalidated by work
/// requests on a queue pair.
pub trait MemoryWindow {
    /// The window's rkey: the one its latest posted bind gave it, or its initial key if it
    /// was never bound. Peers may use it only while the window is bound.
    fn rkey(&self) -> u32;

    /// The rkey the next bind should use: [`inc_rkey`]`(self.rkey())`.
    fn next_rkey(&self) -> u32 {
        inc_rkey(self.rkey())
    }
}

/// A completion queue.
pub trait CompletionQueue {
    /// Moves up to `wc.len()` completions into `wc` and returns how many; never blocks.
    ///
    /// Completions of one work queue arrive in the order its requests were posted.
    fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, CqError>;

    /// How many completions the queue holds.
    fn depth(&self) -> u32;

    /// Asks for a notification of the next completion added to the queue
    /// (`ibv_req_notify_cq` for any completion): [`notify_fd`](Self::notify_fd) turns
    /// readable when one arrives. Completions already queued do not notify, so a caller
    /// about to wait polls once more after arming. `Ok(false)` when the provider cannot
    /// notify (the default): the caller must keep polling.
    fn arm(&mut self) -> Result<bool, CqError> {
        Ok(false)
    }

    /// The descriptor that turns readable when an armed queue is notified (a completion
    /// channel's), if the provider can notify. It lives as long as the queue.
    fn notify_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Takes the notifications delivered since the last call, without blocking
    /// (`ibv_get_cq_event` and `ibv_ack_cq_events`), so that the descriptor is no longer
    /// readable; returns how many there were. The queue must be armed again to notify again.
    fn take_notifications(&mut self) -> u32 {
        0
    }

    /// Starts fetching what the next [`poll`](Self::poll) reads first (a hint; the default
    /// does nothing). A thread polling many queues asks it of a queue a few places ahead of
    /// the one it polls, so that their cache misses overlap instead of following one another.
    #[inline]
    fn prefetch_next(&self) {}

    /// A view of the queue's entries that tells, from one word, whether a completion waits
    /// at a position ([`CqWatch`]), for a thread that polls many queues and would rather
    /// not poll the empty ones. `None` (the default) when the provider cannot offer one:
    /// such a queue is polled to find out.
    fn watch(&self) -> Option<CqWatch> {
        None
    }

    /// The position the next [`poll`](Self::poll) looks at first, for
    /// [`WatchTable::set`] (0 where the provider offers no watch).
    #[inline]
    fn cursor(&self) -> u64 {
        0
    }
}

/// A reliable-connected queue pair.
pub trait QueuePair<P: Provider> {
    /// The queue pair number reported in its completions.
    fn qp_num(&self) -> u32;

    /// The capacities granted.
    fn caps(&self) -> QpCaps;

    /// The current state.
    fn state(&self) -> QpState;

    /// How long accepting this queue pair's connection waited, once the acceptance was
    /// sent, for the peer to confirm it (the connection manager's ready-to-use message: the
    /// ESTABLISHED event on verbs). `None` where the provider does not measure it, or for a
    /// queue pair that was not accepted (the default).
    fn confirm_wait(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether the connection is known to be over, cheaply enough to ask often (no system
    /// call): on verbs, a flag set when either end disconnected (the peer's disconnection
    /// arrives through the connection manager); on soft, the shared state. A queue pair that
    /// went to the error state for another reason may still say false; [`state`](Self::state)
    /// tells. A caller whose queue pair has no receives of its own (a shared receive queue's)
    /// gets no flush completion when the peer goes, and asks this instead.
    fn is_disconnected(&self) -> bool {
        self.state() == QpState::Err
    }

    /// Posts `wrs` to the send queue in order (`ibv_post_send`). On a refusal, the requests
    /// before the refused one are posted.
    fn post_send_list(&mut self, wrs: &[SendWr<'_, P>]) -> Result<(), BadWr>;

    /// Posts `wrs` to the receive queue in order (`ibv_post_recv`).
    fn post_recv_list(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BadWr>;

    /// Posts one send work request.
    fn post_send(&mut self, wr: &SendWr<'_, P>) -> Result<(), PostError> {
        self.post_send_list(core::slice::from_ref(wr))
            .map_err(|bad| bad.error)
    }

    /// Posts one receive work request.
    fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        self.post_recv_list(core::slice::from_ref(wr))
            .map_err(|bad| bad.error)
    }

    /// A hint that up to `n` receives will be posted soon (say, the receives of the Calls a
    /// poll just returned, reposted once they are answered): a provider may start taking
    /// ownership of the memory they will be written to, so that posting them later does not
    /// wait for it. No effect on the queue pair's state; the default does nothing.
    #[inline]
    fn expect_recv_posts(&self, n: usize) {
        let _ = n;
    }

    /// A hint from a caller about to poll again for this queue pair's next receive (its last
    /// poll found nothing): a provider may pull in the memory that receive's message will
    /// land in, so that reading the message once it completes does not wait for it. No
    /// effect on the queue pair's state; the default does nothing.
    #[inline]
    fn watch_next_recv(&self) {}

    /// Ends the connection (`rdma_disconnect`): both queue pairs go to the error state and
    /// their outstanding requests complete with [`WcStatus::WrFlushErr`].
    fn disconnect(&mut self);
}

/// A listening endpoint.
pub trait Listener<P: Provider> {
    /// Waits at most `timeout` for the next connection request.
    fn get_request(&mut self, timeout: Duration) -> Result<P::ConnRequest, ConnectError>;

    /// Waits for the next connection request and accepts it; returns the queue pair and the
    /// client's private data (zero-padded to [`CmPrivateBytes::CONNECT_MAX`] bytes).
    fn accept<F>(
        &mut self,
        pd: &P::Pd,
        init: QpInit<'_, P>,
        private_data: &[u8],
        timeout: Duration,
        prepare: F,
    ) -> Result<(P::Qp, CmPrivateBytes), ConnectError>
    where
        F: FnOnce(&mut P::Qp) -> Result<(), PostError>,
    {
        let req = self.get_request(timeout)?;
        let peer = req.private_data();
        let qp = req.accept(pd, init, private_data, timeout, prepare)?;
        Ok((qp, peer))
    }
}

/// An incoming connection request, to accept or reject.
pub trait ConnRequest<P: Provider>: Sized {
    /// The client's private data, zero-padded to [`CmPrivateBytes::CONNECT_MAX`] bytes.
    fn private_data(&self) -> CmPrivateBytes;

    /// The address the request comes from, for deciding whether to accept it before any
    /// resources are spent on it: on verbs, the IPv4 or IPv6 address and port of the
    /// request's rdma_cm id (`rdma_get_peer_addr`, its `route.addr.dst_addr`), `None` for
    /// another family (InfiniBand's native `AF_IB`); on soft, always `None` (its addresses
    /// are names of Unix sockets, not IP addresses). An IPv4 client of a listener bound to
    /// an IPv6 address may show as an IPv4-mapped one (`::ffff:a.b.c.d`): a filter compares
    /// `ip().to_canonical()`.
    fn peer_addr(&self) -> Option<std::net::SocketAddr>;

    /// Creates the queue pair in `pd` with `init` (`rdma_create_qp`), hands it to `prepare`
    /// (to post receives before the client may send), accepts with `private_data` (at most
    /// [`CmPrivateBytes::ACCEPT_MAX`] bytes, `rdma_accept`) and waits at most `timeout` for the
    /// connection to be established.
    fn accept<F>(
        self,
        pd: &P::Pd,
        init: QpInit<'_, P>,
        private_data: &[u8],
        timeout: Duration,
        prepare: F,
    ) -> Result<P::Qp, ConnectError>
    where
        F: FnOnce(&mut P::Qp) -> Result<(), PostError>;

    /// Rejects the request with `private_data` (at most [`CmPrivateBytes::REJECT_MAX`] bytes,
    /// `rdma_reject`).
    fn reject(self, private_data: &[u8]) -> Result<(), ConnectError>;
}
