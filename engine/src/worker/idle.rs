//! What an idle worker does: spin (the default), nap ([`Workers::set_nap`]) or wait in
//! epoll for its connections' next event ([`Workers::set_wait`]).
//!
//! An idle spell is timed from the clock every [`Rest::CLOCK_EVERY`] idle turns; a busy turn
//! pays one store. Once the spell has lasted `wait_after`, the worker arms every connection
//! ([`Drive::arm`]) and its inbox bell, polls them all a last time, and, finding nothing,
//! waits until a descriptor turns readable (a completion channel, an I/O pool's bell, the
//! inbox) or the wait limit passes ([`WAIT_MAX`] by default). If a connection cannot be armed, it naps instead once the
//! spell has lasted `nap_after` (or keeps spinning).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use rustix::event::epoll;

use super::{Drive, WorkerShared};
use crate::stats::bump;

/// The longest wait by default ([`Workers::set_wait_limit`]): a waiting worker still
/// house-keeps (publishes its counters, sees new settings) this often, and an event lost by
/// a broken notifier costs at most this much.
pub(super) const WAIT_MAX: Duration = Duration::from_millis(50);

/// A worker's idle policy and the state of its current idle spell.
#[derive(Debug, Default)]
pub(super) struct Rest {
    /// Idleness before napping (zero: never nap) and the length of a nap.
    nap_after: Duration,
    nap: Duration,
    /// Idleness before waiting (zero: never wait).
    wait_after: Duration,
    /// The shorter of `nap_after` and `wait_after` that is set: when the worker first rests.
    first: Option<Duration>,
    /// The longest one wait lasts.
    wait_max: Duration,
    /// Idle turns in a row.
    run: u32,
    /// When the current idle spell was first seen on the clock.
    since: Option<Instant>,
    /// How long the spell had lasted at the last look at the clock.
    spell: Duration,
    /// Whether the spell has lasted long enough to rest: every idle turn rests until a busy
    /// one.
    pub(super) resting: bool,
    /// Whether a connection could not be armed in this spell: no more tries until a busy
    /// turn (arming costs a call into the provider per connection).
    unarmable: bool,
    /// The worker's epoll set, made at the first wait.
    epoll: Option<OwnedFd>,
    /// The settings generation taken by the last `configure`.
    settings_seen: u64,
}

impl Rest {
    /// Idle turns between two looks at the clock.
    const CLOCK_EVERY: u32 = 64;

    /// Takes the settings published in `shared`.
    pub(super) fn configure(&mut self, shared: &WorkerShared) {
        // Read before the values: a change stored after this is seen at the next look.
        self.settings_seen = shared.settings.load(Ordering::Acquire);
        let ns = |a: &std::sync::atomic::AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        self.nap_after = ns(&shared.nap_after_ns);
        self.nap = ns(&shared.nap_ns);
        self.wait_after = ns(&shared.wait_after_ns);
        self.wait_max = match ns(&shared.wait_max_ns) {
            d if d.is_zero() => WAIT_MAX,
            d => d,
        };
        self.first = [self.nap_after, self.wait_after]
            .into_iter()
            .filter(|d| !d.is_zero())
            .min();
        self.resting &= self.first.is_some();
    }

    #[inline]
    pub(super) fn busy(&mut self) {
        self.run = 0;
        self.unarmable = false;
    }

    /// An idle turn: returns whether the worker should rest now ([`rest`](Self::rest)).
    #[inline]
    pub(super) fn idle(&mut self) -> bool {
        let Some(first) = self.first else {
            return false;
        };
        self.run = self.run.saturating_add(1);
        if self.run == 1 {
            // A new idle spell.
            self.since = None;
            self.spell = Duration::ZERO;
            self.resting = false;
        }
        if self.resting {
            return true;
        }
        if !self.run.is_multiple_of(Self::CLOCK_EVERY) {
            return false;
        }
        let now = Instant::now();
        match self.since {
            None => self.since = Some(now),
            Some(t) => {
                self.spell = now.duration_since(t);
                self.resting = self.spell >= first;
            }
        }
        self.resting
    }

    /// Rests once: waits for an event of `conns` (or the inbox) if waiting is due and every
    /// connection can be armed, else naps if napping is due. Returns the work the last look
    /// before a wait found (0 if it waited or napped).
    pub(super) fn rest<T: Drive>(&mut self, conns: &mut [T], shared: &WorkerShared) -> usize {
        if !self.wait_after.is_zero() && self.spell >= self.wait_after && !self.unarmable {
            match self.wait(conns, shared) {
                Some(work) => return work,
                None => self.unarmable = true,
            }
        }
        if !self.nap_after.is_zero() && self.spell >= self.nap_after {
            thread::sleep(self.nap);
            bump(&shared.naps, 1);
        }
        0
    }

    /// Arms everything, looks a last time, waits (not when a connection waits in the inbox:
    /// the worker takes it first). `None` when a connection cannot be armed (or no epoll set
    /// can be made): the caller naps or spins instead.
    fn wait<T: Drive>(&mut self, conns: &mut [T], shared: &WorkerShared) -> Option<usize> {
        let bell = shared.bell.as_ref()?;
        let timeout = rustix::event::Timespec::try_from(self.wait_max).ok()?;
        if self.epoll.is_none() {
            let ep = epoll::create(epoll::CreateFlags::CLOEXEC).ok()?;
            add(&ep, bell.fd()).ok()?;
            self.epoll = Some(ep);
            for c in conns.iter() {
                self.adopt(c);
            }
        }
        let ep = self.epoll.as_ref()?;
        bell.arm();
        let mut armed = true;
        for c in conns.iter_mut() {
            // Every one is armed, so that none is left out when the worker does wait.
            armed &= c.arm();
        }
        let outcome = if !armed {
            None
        } else if shared.has_news(self.settings_seen) {
            // A connection, a stop or new settings: the worker's housekeeping takes them now.
            Some(0)
        } else {
            // The last look: anything that came before the arming is found here, anything
            // after it rings.
            let mut work = 0;
            for c in conns.iter_mut() {
                work += c.poll();
            }
            if work == 0 {
                let mut events = [epoll::Event {
                    flags: epoll::EventFlags::empty(),
                    data: epoll::EventData::new_u64(0),
                }; 8];
                // Counted as it begins: whoever sees the count knows the worker is armed and
                // past its last look, so that anything new now wakes it.
                bump(&shared.waits, 1);
                // Interrupted or failed: the worker polls again, which is always safe.
                if let Ok(n) = epoll::wait(ep, &mut events[..], Some(&timeout)) {
                    if n > 0 {
                        bump(&shared.wakeups, 1);
                    }
                }
            }
            Some(work)
        };
        // Nothing stays armed, waited or not: a ring for a worker that does not wait would
        // cost its ringer (a peer's Send, an I/O thread) a system call for nothing.
        for c in conns.iter_mut() {
            c.disarm();
        }
        bell.clear();
        outcome
    }

    /// Adds a new connection's descriptors to the epoll set (if there is one yet; the set
    /// made at the first wait takes every connection's).
    pub(super) fn adopt<T: Drive>(&self, conn: &T) {
        if let Some(ep) = &self.epoll {
            for fd in conn.wake_fds().into_iter().flatten() {
                let _ = add(ep, fd);
            }
        }
    }

    /// Removes a connection's descriptors from the epoll set, before it is dropped.
    pub(super) fn forget<T: Drive>(&self, conn: &T) {
        if let Some(ep) = &self.epoll {
            for fd in conn.wake_fds().into_iter().flatten() {
                let _ = epoll::delete(ep, fd);
            }
        }
    }
}

fn add(ep: &OwnedFd, fd: BorrowedFd<'_>) -> rustix::io::Result<()> {
    epoll::add(
        ep.as_fd(),
        fd,
        epoll::EventData::new_u64(0),
        epoll::EventFlags::IN,
    )
}
