//! What a queue pair shares beyond itself: [`PeerLink`], its views of the connected peer's
//! queue pair memory, arena, receive completion queue and shared receive queue, if any;
//! [`QpShared`], the part its watchdog thread and fault handle hold; and the watchdog, which
//! moves the queue pair to the error state when the connection's socket closes (the peer
//! went away, as with rdma_cm's DREQ).
//!
//! It sits below both the queue pair (`qp`) and the fault handle (`faults`), which each hold
//! a [`QpShared`], so that neither imports the other.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::fabric::soft::arena::ArenaView;
use crate::fabric::soft::cq::CqRing;
use crate::fabric::soft::rq::{Claimed, QpMem};
use crate::fabric::soft::srq::SrqMem;

/// What a queue pair knows of its connected peer: views of the peer's queue pair memory,
/// arena and receive completion queue, and of the shared receive queue the peer's queue pair
/// takes its receives from, if it was made with one (fixed when connecting: what the peer's
/// header says later changes nothing).
#[derive(Clone)]
pub(crate) struct PeerLink {
    pub mem: QpMem,
    pub arena: ArenaView,
    pub recv_cq: CqRing,
    pub qp_num: u32,
    pub srq: Option<SrqMem>,
}

impl PeerLink {
    /// Claims the peer's oldest posted receive, from its shared receive queue or its own
    /// ring.
    #[inline(always)]
    pub(crate) fn claim(&self) -> Option<Claimed<'_>> {
        match &self.srq {
            None => self.mem.consume(),
            Some(srq) => srq.claim(),
        }
    }

    /// Starts fetching the cache line of the receive the next Send will claim.
    #[inline]
    pub(crate) fn prefetch_head(&self) {
        match &self.srq {
            None => self.mem.prefetch_head(),
            Some(srq) => srq.prefetch_head(),
        }
    }

    /// Moves the peer to the error state and flushes its receives (those of its own ring: a
    /// shared receive queue keeps its receives for its other queue pairs).
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

/// Blocks on the connection's socket; when the peer closes it or dies, moves the queue pair
/// to the error state and flushes its receives.
pub(super) fn watchdog(sock: UnixStream, shared: Arc<QpShared>) {
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
