//! The soft provider: software RDMA over shared memory, with the semantics of a
//! reliable-connected queue pair on a NIC. It is the fabric of `make run`, of the tests and of
//! machines without RDMA hardware.
//!
//! # Design
//!
//! - **Memory.** Each protection domain owns an arena: one memfd, mapped `MAP_SHARED`, holding
//!   a key table (every region and window: address, length, rights, state, key) and the
//!   bytes of its regions ([`arena`](self)). Regions are allocated by the provider from the
//!   arena, page aligned, so registration is safe by ownership; a region reads as zero (memory
//!   handed out before is zeroed, memory never used already is, and its pages are only
//!   allocated when touched). A peer maps the arena too and
//!   performs RDMA Reads and Writes itself, checking the rkey against the table: the target's
//!   CPU takes no part, as with a NIC.
//! - **Queue pairs.** A queue pair's shared memory holds its state, its fault settings and its
//!   receive queue, a ring the owner fills and the peer drains. Work requests execute inline,
//!   in `post_send`, on the poster's thread: a Send claims the peer's oldest receive, checks
//!   and fills its buffer and pushes the receive completion into the peer's completion queue;
//!   its own completion, if signaled, goes into its own completion queue in posting order.
//! - **Shared receive queues** ([`SoftSrq`], `srq`) are receive rings in memfds of their
//!   own, with a queue pair's ring layout and code. A queue pair made with one
//!   (`QpInit::srq`, same domain) has no receive queue of its own (posting to it is
//!   `InvalidWr`); its header names the queue, and its peer, which maps the queue once per
//!   connection, claims the oldest receive from it (one locked instruction) and pushes the
//!   completion into the receiving queue pair's completion queue, with that queue pair's
//!   number. A queue pair going to the error state flushes none of them. The owner posts
//!   from any thread, serialized by a flag taken with a bounded spin and then yields; since
//!   many peers consume, a claim hands its slot back through the slot's sequence word
//!   before the completion is published, and a post finding its slot not yet handed back is
//!   refused with `QueueFull`. The limit is a word on the claim counter's line; the claim
//!   that leaves fewer receives posted disarms it and sets the event word.
//! - **Completion queues** are bounded lock-free multi-producer rings in shared memory
//!   (several queue pairs and peers push into one). A full ring is an overrun: reported by
//!   `poll`, and the queue pair whose completion was lost goes to the error state. A queue
//!   can notify like a completion channel (`arm`, `notify_fd`): its bell is a datagram socket
//!   pair, which a producer rings (one non-blocking send) only when it finds the consumer
//!   armed; the flag shares the line of the tail the producer has just claimed from.
//! - **Hot path.** `post_send`, `post_recv` and `poll` take no lock, make no system call and
//!   allocate nothing (a shared receive queue's post takes its posters' flag, one locked
//!   instruction when free, and yields only when another poster holds it long): atomics and copies in shared memory only. The monotonic clock is read
//!   (through the vDSO) only while a completion delay is armed. A Send claims its completion
//!   slot before copying, so that no locked instruction waits for the copy; it prefetches the
//!   peer's next receive and completion slot for the next Send; a completion's cache line
//!   travels once, producer to consumer (the consumer publishes its position elsewhere), and
//!   so does a receive's: consumers never write a queue pair's receive ring (a slot returns
//!   to its owner through the owner's depth accounting, when the receive's completion is
//!   polled; a shared receive queue's consumer hands the slot back itself). A
//!   receive completion carries where the message landed, and `poll` starts fetching its first
//!   two lines as soon as it sees it, before the caller asks for the bytes. A list of Sends
//!   (`post_send_list`) claims all its receives and completion slots with one locked
//!   instruction each, so that no claim waits for the previous Send's copy; what the list
//!   does not use goes back (receives to the ring, slots as entries `poll` passes over). A
//!   shared receive queue's receives are claimed one Send at a time (claimed ahead, they
//!   could not go back once another queue pair's peer had claimed after them).
//! - **Connections** ([`Soft::connect`](crate::fabric::Provider::connect), [`SoftListener`])
//!   go over a Unix socket (abstract name or path), carry rdma_cm's private data and pass the
//!   arena, queue pair and completion queue memfds, the queue's bell and the shared receive
//!   queue's memfd if the queue pair has one with `SCM_RIGHTS`, so
//!   peers may be threads
//!   of one process or separate processes; [`pair`] connects two queue pairs of one process
//!   directly. A watchdog thread per socket connection blocks on the socket (off the hot path);
//!   when the peer closes it or dies, the queue pair moves to the error state and its
//!   outstanding requests flush.
//! - **Faults** ([`Faults`], from [`SoftQp::faults`]): fail the nth send or receive with a
//!   chosen status, delay completions by polls or time, drop the connection.
//!
//! # Deliberate differences from rxe (soft-RoCE)
//!
//! The conformance suite (the crate `rpcrdma-conformance`, with this provider's environment
//! `SoftEnv`) runs on both; where they differ and the difference is not listed here, the
//! soft provider is wrong.
//!
//! 1. **RNR.** A Send or RDMA Write With Immediate that finds no posted receive fails at once
//!    with `RNR_RETRY_EXC_ERR`, as a device does with `rnr_retry_count = 0`. rxe waits and
//!    retries as the connection's `rnr_retry_count` says (7 means forever); the verbs
//!    provider's conformance environment connects with `rnr_retry_count = 0` for parity.
//! 2. **Receive too small.** The receiver's completion is `LOC_LEN_ERR` (the InfiniBand
//!    specification's local length error, as on mlx5); rxe reports `REM_INV_REQ_ERR` there
//!    (Linux 6.1: `LOC_QP_OP_ERR`). The sender sees `REM_INV_REQ_ERR` (rxe on 6.1:
//!    `REM_OP_ERR`), and both queue pairs go to the error state.
//! 3. **Timeouts are immediate.** Errors rxe discovers by retrying until a timer expires
//!    (`RETRY_EXC_ERR` when the peer's queue pair is gone or in the error state, or when a
//!    responder lost an acknowledgement because its completion queue overflowed) are reported
//!    at once by the soft provider.
//! 4. **Depths are exact and slots free at poll time.** Queue depths are exactly the
//!    capacities asked for; a completion queue holds the next power of two of the depth asked
//!    for. A request's slot is freed when its completion is polled (see `fabric`'s docs); rxe
//!    frees send slots when the completion is generated, and may round depths up.
//! 5. **Completion queue overrun** is reported synchronously by `poll`; rxe raises the
//!    asynchronous `IBV_EVENT_CQ_ERR`, which the verbs provider turns into the same error.
//! 6. **Peer death** is noticed by the watchdog a moment after the socket closes; Sends
//!    executed in that moment succeed into memory nobody reads (rxe would time them out).
//! 7. **A peer that dies while producing a completion** into a shared completion queue
//!    (between claiming the slot and publishing it, which for a Send spans the copy of the
//!    message) leaves that queue stuck behind the unpublished slot. A NIC's completion queue
//!    cannot be wedged by a peer. The watchdog still moves the queue pair to the error
//!    state, and the responder looks at that state now and then while idle
//!    (`ServerConn::poll`), so such a connection is dropped all the same.
//! 8. **Peers are trusted.** A peer maps the whole arena; the key checks are made by the
//!    initiator, so the soft provider protects against bugs, not against a hostile peer —
//!    except that shared memory cannot be shrunk under us: every memfd is sealed with
//!    `F_SEAL_SHRINK | F_SEAL_SEAL`, and a peer's memfd without `F_SEAL_SHRINK` is refused,
//!    so no peer can make our next access raise SIGBUS.
//! 9. **Dropping a region with windows bound** invalidates the region's key (accesses through
//!    the windows fail too) and leaks its span until the domain goes. rxe refuses that
//!    deregistration (the verbs provider then leaks the registration) and the windows keep
//!    working.
//! 10. **Invalidating a window that is not bound** (for instance a second Local Invalidate)
//!     fails with `LOC_QP_OP_ERR`; rxe's behaviour there is undefined.
//! 11. **No atomics, no completion channels, no solicited events**: the engine uses none. The
//!     `FENCE` and `SOLICITED` flags are accepted and have no effect (requests execute in
//!     order, synchronously, so a fence is always satisfied).
//! 12. **Messages are not packetized**: a Send or RDMA Write lands in one copy, never
//!     partially visible by MTU-sized pieces as on rxe; nothing may rely on either.
//! 13. **Error statuses follow the specification where rxe (Linux 6.1) does not**, all seen
//!     in the shared conformance suite on rxe: a Send from an unknown lkey is
//!     `LOC_PROT_ERR` (rxe: `LOC_QP_OP_ERR`); a receive posted after the error state is
//!     flushed (rxe's user-space post_recv never reaches the kernel, so nothing flushes it;
//!     the engine never waits for work posted after an error). One posted in the very
//!     instant another thread sets the error may stay unflushed, as on rxe: closing that
//!     race would cost a fence on every post.
//! 14. **A zero-length window bind is refused when posted** (`InvalidWr`), by both
//!     providers; verbs would bind a window that grants nothing.
//! 15. **Shared receive queue slots are reused in ring order.** A queue holds the next power
//!     of two of the receives asked for, at least 2. A receive's slot is free once its
//!     completion has been published (so once it has been polled), but slots are reused in
//!     posting order: a post whose slot still holds a receive that a peer is consuming (its
//!     Send's copy under way) is refused with `QueueFull` even when fewer than `depth`
//!     receives are outstanding, and succeeds when retried a moment later. rxe copies a
//!     receive out of its queue when it takes it, so its posts are refused only when the
//!     queue holds `depth` receives.
//! 16. **A peer that dies while consuming a shared receive** (between claiming it and
//!     publishing its completion) leaves its slot taken: that receive never completes, and
//!     posting stops at its slot (`QueueFull`) until the queue is destroyed, as a peer dying
//!     mid-completion wedges a completion queue (7). The queue pairs' watchdogs still move
//!     the dead peer's queue pair to the error state.
//!
//! Where the specification leaves a choice, the soft provider follows rxe: a region's lkey and
//! rkey are equal; regions cannot be invalidated (only windows); an invalid Send With
//! Invalidate fails the receiver's completion with `REM_INV_REQ_ERR` and moves only the
//! receiver to the error state while the Send succeeds; a receive whose buffer is not a
//! writable registration fails with `LOC_QP_OP_ERR` at the receiver and `REM_OP_ERR` at the
//! sender; a type 2 window grants access only to requests arriving on the queue pair it was
//! bound through; zero-length RDMA operations skip the key check; peer private data arrives
//! zero-padded to the step's maximum.

mod arena;
mod conn;
mod cq;
mod faults;
mod mem;
mod peer;
mod qp;
mod rq;
mod srq;
mod sys;

use std::time::Duration;

pub use conn::{pair, SoftAddr, SoftConnRequest, SoftListener};
pub use cq::SoftCq;
pub use faults::{Delay, Faults};
pub use mem::{SoftMr, SoftMw, SoftPd};
pub use qp::SoftQp;
pub use srq::SoftSrq;

use crate::fabric::{
    CmPrivateBytes, ConnectError, Device, DeviceAttr, FabricError, PostError, Provider, QpInit,
};

/// Largest scatter-gather list.
pub(crate) const MAX_SGE: usize = 16;
/// Largest queue depth.
pub(crate) const MAX_QP_WR: u32 = 16384;
/// Largest inline payload.
pub(crate) const MAX_INLINE: u32 = 1024;
/// Largest message, as rxe's port `max_msg_sz`.
pub(crate) const MAX_MSG_SZ: u64 = 1 << 31;

/// The soft provider.
#[derive(Clone, Copy, Debug, Default)]
pub struct Soft;

/// Sizes of a soft device's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftConfig {
    /// Bytes of each protection domain's arena (virtual: the memfd is sparse and a page is
    /// allocated only when touched, so the default is large — 16 GiB — and a domain holds
    /// whatever its pools ask for, such as 128 credits of 1 MiB pull and bulk buffers).
    pub arena_bytes: usize,
    /// Memory keys (regions plus windows) per protection domain. The default, 65,536, lets
    /// one server domain register the receives and buffers of a thousand connections; the
    /// table's pages are allocated only as keys are used.
    pub max_keys: u32,
    /// Queue pairs that may share one completion queue.
    pub qps_per_cq: u32,
}

impl Default for SoftConfig {
    fn default() -> Self {
        SoftConfig {
            arena_bytes: 16 << 30,
            max_keys: 1 << 16,
            qps_per_cq: 256,
        }
    }
}

/// A soft device: a name and the sizes of the objects it creates.
#[derive(Clone, Debug)]
pub struct SoftDevice {
    name: String,
    config: SoftConfig,
}

impl SoftDevice {
    /// A device with the given sizes.
    pub fn with_config(name: &str, config: SoftConfig) -> SoftDevice {
        SoftDevice {
            name: name.to_owned(),
            config,
        }
    }

    /// The sizes.
    pub fn config(&self) -> SoftConfig {
        self.config
    }
}

impl Device<Soft> for SoftDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn attr(&self) -> DeviceAttr {
        DeviceAttr {
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE as u32,
            max_cqe: 1 << 20,
            max_inline_data: MAX_INLINE,
            max_msg_sz: MAX_MSG_SZ,
            max_mr_size: self.config.arena_bytes as u64,
            max_srq_wr: srq::MAX_SRQ_WR,
        }
    }

    fn alloc_pd(&self) -> Result<SoftPd, FabricError> {
        SoftPd::create(self.config.arena_bytes, self.config.max_keys)
    }

    fn create_cq(&self, min_depth: u32) -> Result<SoftCq, FabricError> {
        SoftCq::create(min_depth, self.config.qps_per_cq)
    }
}

impl Provider for Soft {
    const NAME: &'static str = "soft";
    type Device = SoftDevice;
    type Pd = SoftPd;
    type Mr = SoftMr;
    type Mw = SoftMw;
    type Cq = SoftCq;
    type Srq = SoftSrq;
    type Qp = SoftQp;
    type Listener = SoftListener;
    type ConnRequest = SoftConnRequest;
    type Addr = SoftAddr;

    /// Any name opens a device of that name with the default sizes; `None` opens `"soft0"`.
    fn open_device(name: Option<&str>) -> Result<SoftDevice, FabricError> {
        Ok(SoftDevice::with_config(
            name.unwrap_or("soft0"),
            SoftConfig::default(),
        ))
    }

    fn listen(device: &SoftDevice, addr: &SoftAddr) -> Result<SoftListener, ConnectError> {
        SoftListener::bind(device, addr)
    }

    fn connect<F>(
        pd: &SoftPd,
        addr: &SoftAddr,
        init: QpInit<'_, Soft>,
        private_data: &[u8],
        timeout: Duration,
        prepare: F,
    ) -> Result<(SoftQp, CmPrivateBytes), ConnectError>
    where
        F: FnOnce(&mut SoftQp) -> Result<(), PostError>,
    {
        conn::connect(pd, addr, init, private_data, timeout, prepare)
    }
}
