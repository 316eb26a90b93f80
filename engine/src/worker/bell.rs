//! A bell: how another thread wakes a worker that waits for its connections' next event
//! ([`Drive::arm`](super::Drive::arm)). A backend whose answers come from its own threads
//! (an I/O pool completing deferred Calls) rings one after each answer; the worker's
//! connection arms it before the worker looks for work a last time and waits.
//!
//! Ringing costs a fence and one load while the worker is not waiting; a system call (an
//! eventfd write) only once per wait.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};

use rustix::event::{eventfd, EventfdFlags};

/// An eventfd with a flag saying whether its reader waits.
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
    armed: AtomicBool,
}

impl Bell {
    /// A new bell, not armed.
    pub fn new() -> io::Result<Bell> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Bell {
            fd,
            armed: AtomicBool::new(false),
        })
    }

    /// Asks to be woken by the next [`ring`](Self::ring). Call it before the last look for
    /// work preceding a wait: a ring after that look finds the bell armed.
    ///
    /// Why no wake-up is lost: the waiter stores `armed`, fences, then looks for work; a
    /// ringer makes its work visible, fences, then loads `armed`. Of the two sequentially
    /// consistent fences one comes first: if the waiter's, the ringer sees `armed`; if the
    /// ringer's, the waiter sees the work.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Wakes the waiter if it asked to be (once per [`arm`](Self::arm)). Call it after
    /// making the work visible (sending it on a channel, storing it).
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::AcqRel) {
            // A full counter (2^64 - 2 rings unread) or a failure leaves it readable anyway.
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
    }

    /// The descriptor that turns readable when the bell rings.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Disarms the bell and takes the rings delivered, so that the descriptor is no longer
    /// readable; returns whether it had rung.
    pub fn clear(&self) -> bool {
        self.armed.store(false, Ordering::Relaxed);
        let mut v = [0u8; 8];
        matches!(rustix::io::read(&self.fd, &mut v), Ok(8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{poll, PollFd, PollFlags, Timespec};

    fn readable(b: &Bell) -> bool {
        let mut fds = [PollFd::new(&b.fd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&zero)).unwrap() == 1
    }

    #[test]
    fn a_bell_rings_only_when_armed_and_once_per_arming() {
        let b = Bell::new().unwrap();
        b.ring();
        assert!(!readable(&b), "rang while not armed");
        b.arm();
        b.ring();
        assert!(readable(&b));
        b.ring();
        assert!(b.clear(), "the ring was lost");
        assert!(
            !readable(&b),
            "a second ring for one arming, or clear left it readable"
        );
        assert!(!b.clear());
    }

    #[test]
    fn a_ring_from_another_thread_wakes_a_poll() {
        let b = std::sync::Arc::new(Bell::new().unwrap());
        b.arm();
        let r = std::sync::Arc::clone(&b);
        let t = std::thread::spawn(move || r.ring());
        let mut fds = [PollFd::new(&b.fd, PollFlags::IN)];
        let ten = Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        assert_eq!(poll(&mut fds, Some(&ten)).unwrap(), 1, "not woken");
        t.join().unwrap();
        assert!(b.clear());
    }
}
