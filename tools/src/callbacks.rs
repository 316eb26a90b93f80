//! `rpcrdma serve --reverse N`: each connection keeps N reverse-direction ECHOs of the
//! built-in program outstanding (callbacks under the client's forward load), every result
//! checked against what was sent. Version 1 calls back in RFC 8167's backward direction,
//! version 2 in draft-cel-nfsv4-rpcrdma-version-two-09 §3.2. A version 2 client that takes
//! none says so (Reverse Request Support NONE); a version 1 client cannot say so, and one
//! that drops the first Call is found by its timeout: either is then served as usual.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::program;
use rpcrdma_engine::responder::{ReverseCallError, ReverseError, ServerConn};
use rpcrdma_engine::stats::Snapshot;
use rpcrdma_engine::worker::{Drive, WakeFds};

/// Bytes of each reverse ECHO's payload.
const PAYLOAD: usize = 64;

/// A served connection that also calls its client.
pub struct Callbacks<P: Provider> {
    conn: ServerConn<P>,
    depth: u32,
    /// The ECHO arguments (an opaque of [`PAYLOAD`] pattern bytes).
    args: [u8; PAYLOAD + 4],
    next: u64,
    /// Reverse results that differed from their arguments, or failed (all connections).
    bad: Arc<AtomicU64>,
    /// The client takes none (Reverse Request Support NONE, or a version 1 Call given up
    /// unanswered): stop trying.
    off: bool,
}

impl<P: Provider> Callbacks<P> {
    /// `conn`, keeping `depth` reverse Calls outstanding (0: none); failures counted in
    /// `bad`.
    pub fn new(conn: ServerConn<P>, depth: u32, bad: Arc<AtomicU64>) -> Self {
        let mut args = [0u8; PAYLOAD + 4];
        program::encode_opaque(&mut args, PAYLOAD, |d| program::fill_pattern(7, d));
        Callbacks {
            conn,
            depth,
            args,
            next: 0,
            bad,
            off: depth == 0,
        }
    }
}

impl<P: Provider> Drive for Callbacks<P>
where
    ServerConn<P>: Send,
{
    #[inline]
    fn prefetch(&self) {
        self.conn.prefetch_poll();
    }

    fn housekeep(&mut self, now: std::time::Instant) {
        self.conn.housekeep(now);
    }

    #[inline]
    fn poll(&mut self) -> usize {
        let n = self.conn.poll();
        if self.off {
            return n;
        }
        let args = &self.args;
        let (mut bad, mut unanswered) = (0, false);
        let took = self.conn.take_reverse(|r| match r.result {
            Ok(got) if got == &args[..] => {}
            // Outstanding when the client went away: nothing wrong with the results.
            Err(ReverseError::ConnectionLost) => {}
            // A version 1 client that serves no callbacks drops them (RFC 8167 §6).
            Err(ReverseError::Timeout) => unanswered = true,
            _ => bad += 1,
        });
        if bad > 0 {
            self.bad.fetch_add(bad, Ordering::Relaxed);
        }
        if unanswered {
            self.off = true;
            return n + took;
        }
        while self.conn.reverse_in_flight() < self.depth {
            match self.conn.call_reverse(
                program::PROG,
                program::VERS,
                program::ECHO,
                &self.args,
                self.next,
            ) {
                Ok(_) => self.next += 1,
                Err(ReverseCallError::NotSupported) => {
                    self.off = true;
                    break;
                }
                // No credit or room now, or the version not decided yet: the next poll tries
                // again.
                Err(_) => break,
            }
        }
        n + took
    }

    fn is_dead(&self) -> bool {
        Drive::is_dead(&self.conn)
    }

    fn watch(&self) -> Option<rpcrdma_engine::fabric::CqWatch> {
        self.conn.cq_watch()
    }

    // Skipped only once it has stopped calling: while on, each poll tops up its reverse
    // Calls, which a credit returned may allow at any turn.
    #[inline]
    fn idle_at(&self) -> Option<u64> {
        if self.off {
            self.conn.idle_at()
        } else {
            None
        }
    }

    fn busy(&self) -> bool {
        Drive::busy(&self.conn)
    }

    fn settle(&mut self) {
        Drive::settle(&mut self.conn);
    }

    fn close(&mut self) {
        Drive::close(&mut self.conn);
    }

    fn counters(&self) -> Snapshot {
        Drive::counters(&self.conn)
    }

    // Reverse Calls' Replies arrive as receives: the completion queue wakes the worker for
    // them as for Calls.
    fn arm(&mut self) -> bool {
        Drive::arm(&mut self.conn)
    }

    fn wake_fds(&self) -> WakeFds<'_> {
        Drive::wake_fds(&self.conn)
    }

    fn disarm(&mut self) {
        Drive::disarm(&mut self.conn);
    }

    fn home(&self) -> Option<usize> {
        self.conn.home()
    }
}
