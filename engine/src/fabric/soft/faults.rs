//! Fault injection on a soft queue pair, for tests of what the engine does when the fabric
//! misbehaves. The settings live in the queue pair's shared header, so they also govern the
//! work a peer (possibly in another process) executes against it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::peer::QpShared;
use super::rq::FAIL_FROM_NEXT;
use crate::fabric::WcStatus;

/// How long completions stay invisible to polling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// Each completion becomes visible only at the poll after this many polls have seen it
    /// first (the queue holds back everything behind it, keeping order).
    Polls(u32),
    /// Each completion becomes visible this long after it was produced.
    For(Duration),
}

/// A handle to inject faults into one soft queue pair; cheap to clone, usable from any
/// thread, valid after the queue pair is gone (it then does nothing useful).
#[derive(Clone)]
pub struct Faults {
    shared: Arc<QpShared>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let info = self.shared.mem.info();
        f.debug_struct("Faults")
            .field("qp_num", &info.qp_num.load(Ordering::Relaxed))
            .field("send_fail_at", &info.send_fail_at.load(Ordering::Relaxed))
            .field("recv_fail_at", &info.recv_fail_at.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Faults {
    pub(crate) fn new(shared: Arc<QpShared>) -> Faults {
        Faults { shared }
    }

    /// The `n`th send work request posted from now on (1 = the next one) completes with
    /// `status` instead of executing, and the queue pair moves to the error state, flushing
    /// what follows. One-shot.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn fail_nth_send(&self, n: u64, status: WcStatus) {
        assert!(n > 0, "requests are counted from 1");
        let info = self.shared.mem.info();
        info.send_fail_status
            .store(status.to_raw(), Ordering::Relaxed);
        // Made absolute by the next post, which knows the count (counting every post in
        // shared memory for this cost a cache line per post).
        info.send_fail_at.store(
            FAIL_FROM_NEXT | n.min(FAIL_FROM_NEXT - 1),
            Ordering::Release,
        );
    }

    /// The `n`th receive consumed from now on (1 = the next one) completes with `status`;
    /// the queue pair moves to the error state and the sender's request fails with
    /// [`WcStatus::RemOpErr`], as when a responder fails an incoming message. One-shot. On a
    /// queue pair made with a shared receive queue, the receives counted are those consumed
    /// by Sends arriving on this queue pair (not the other queue pairs').
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn fail_nth_recv(&self, n: u64, status: WcStatus) {
        assert!(n > 0, "requests are counted from 1");
        let info = self.shared.mem.info();
        info.recv_fail_status
            .store(status.to_raw(), Ordering::Relaxed);
        info.recv_fail_at
            .store(self.shared.mem.consumed() + n, Ordering::Release);
    }

    /// Delays the visibility of every completion of this queue pair produced from now on
    /// (its send completions and its receive completions, whoever produces them); `None`
    /// stops delaying.
    pub fn delay_completions(&self, delay: Option<Delay>) {
        let info = self.shared.mem.info();
        let (polls, ns) = match delay {
            None => (0, 0),
            Some(Delay::Polls(n)) => (n, 0),
            Some(Delay::For(d)) => (0, d.as_nanos().clamp(1, u128::from(u64::MAX / 2)) as u64),
        };
        info.delay_polls.store(polls, Ordering::Relaxed);
        info.delay_ns.store(ns, Ordering::Relaxed);
    }

    /// Drops the connection now, as a cable pull followed by both sides noticing: both queue
    /// pairs move to the error state and flush their outstanding requests.
    pub fn drop_connection(&self) {
        self.shared.disconnect();
    }

    /// Disarms every fault.
    pub fn clear(&self) {
        let info = self.shared.mem.info();
        info.send_fail_at.store(0, Ordering::Relaxed);
        info.recv_fail_at.store(0, Ordering::Relaxed);
        self.delay_completions(None);
    }
}
