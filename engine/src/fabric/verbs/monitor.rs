//! The monitor: one background thread, started on first use, that waits with epoll on the
//! descriptors whose events the fabric must act on without the owner's help:
//!
//! - the rdma_cm event channel of every established connection: when the peer disconnects
//!   (or the device goes away) it calls `rdma_disconnect`, which moves the local queue pair
//!   to the error state, so its outstanding requests complete with flush errors as the
//!   fabric promises (the peer's CPU is busy polling its completion queue, not reading CM
//!   events);
//! - the asynchronous event descriptor of every open device context: `IBV_EVENT_CQ_ERR`
//!   (a completion queue overflowed, rxe's way of reporting an overrun) marks the completion
//!   queue, whose next poll then fails with [`CqError::Overrun`](crate::fabric::CqError);
//!   `IBV_EVENT_SRQ_LIMIT_REACHED` (fewer receives remain on a shared receive queue than its
//!   armed limit) sets the queue's flag, which
//!   [`take_limit_event`](crate::fabric::SharedReceiveQueue::take_limit_event) reads. Other
//!   events (`IBV_EVENT_QP_LAST_WQE_REACHED` of a queue pair with a shared receive queue
//!   that went to the error state, say) are acknowledged and ignored.
//!
//! Nothing here is on the hot path: polling reads one relaxed atomic flag.
//!
//! The monitor is a low floor of the provider (it needs only `sys.rs`): contexts, completion
//! queues and shared receive queues register with it from above, and a connection
//! (`qp.rs`'s `Conn`) is watched through the [`WatchedConn`] trait it implements.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};
use std::time::Duration;

use rdma_sys::*;

use super::sys::{errno, set_nonblocking};

/// What the monitor needs of an established connection it watches (`qp.rs`'s `Conn`): the
/// descriptor of its rdma_cm event channel, and the handling of the events read there.
pub(super) trait WatchedConn: Send + Sync {
    /// The descriptor of the connection's rdma_cm event channel.
    fn cm_fd(&self) -> i32;

    /// Drains the connection's pending rdma_cm events (called on the monitor thread when
    /// the descriptor is readable).
    fn handle_cm_events(&self);
}

enum Watched {
    Conn(Arc<dyn WatchedConn>),
    /// A device context's async event descriptor (the context pointer).
    Async(usize),
}

#[derive(Default)]
struct MonitorState {
    watched: HashMap<u64, Watched>,
    /// Context pointer → (token, how many handles registered it).
    contexts: HashMap<usize, (u64, usize)>,
    /// Completion queue pointer → its overrun flag.
    cqs: HashMap<usize, Arc<AtomicBool>>,
    /// Shared receive queue pointer → its limit flag.
    srqs: HashMap<usize, Arc<AtomicBool>>,
}

/// The monitor thread's shared state.
pub(super) struct Monitor {
    epfd: i32,
    state: Mutex<MonitorState>,
    next: AtomicU64,
}

static MONITOR: OnceLock<Option<Monitor>> = OnceLock::new();
static MONITOR_THREAD: Once = Once::new();

/// The monitor, started on first use; None if epoll or the thread are unavailable (peer
/// disconnections then surface only as failing work requests, overruns not at all).
pub(super) fn monitor() -> Option<&'static Monitor> {
    let m = MONITOR
        .get_or_init(|| {
            // SAFETY: plain system call.
            let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            (epfd >= 0).then(|| Monitor {
                epfd,
                state: Mutex::new(MonitorState::default()),
                next: AtomicU64::new(1),
            })
        })
        .as_ref()?;
    MONITOR_THREAD.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("rpcrdma-verbs".into())
            .spawn(move || m.run());
    });
    Some(m)
}

impl Monitor {
    fn lock(&self) -> MutexGuard<'_, MonitorState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add_fd(&self, fd: i32, token: u64) -> bool {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both descriptors are open; `ev` is valid for the call.
        unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) == 0 }
    }

    fn del_fd(&self, fd: i32) {
        // SAFETY: the descriptor is still open (its owner calls this before closing it).
        unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_DEL, fd, ptr::null_mut()) };
    }

    /// Watches an established connection's event channel; returns the token to stop with.
    pub(super) fn watch_conn<C: WatchedConn + 'static>(&self, conn: &Arc<C>) -> Option<u64> {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock();
        st.watched.insert(token, Watched::Conn(conn.clone()));
        if !self.add_fd(conn.cm_fd(), token) {
            st.watched.remove(&token);
            return None;
        }
        Some(token)
    }

    /// Stops watching a connection (before its channel is closed).
    pub(super) fn unwatch_conn(&self, token: u64, conn: &dyn WatchedConn) {
        self.del_fd(conn.cm_fd());
        // The map's reference is released outside the lock: it may be the last one.
        let removed = self.lock().watched.remove(&token);
        drop(removed);
    }

    /// Watches a device context's asynchronous events (once per context, however many
    /// handles share it). Returns whether it does; only then undo it with
    /// [`unwatch_context`](Self::unwatch_context).
    pub(super) fn watch_context(&self, ctx: *mut ibv_context) -> bool {
        let mut st = self.lock();
        if let Some(e) = st.contexts.get_mut(&(ctx as usize)) {
            e.1 += 1;
            return true;
        }
        // SAFETY: the context is open.
        let fd = unsafe { (*ctx).async_fd };
        if set_nonblocking(fd, "fcntl(async_fd)").is_err() {
            return false;
        }
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        if !self.add_fd(fd, token) {
            return false;
        }
        st.watched.insert(token, Watched::Async(ctx as usize));
        st.contexts.insert(ctx as usize, (token, 1));
        true
    }

    /// Undoes one [`watch_context`](Self::watch_context), before the context is closed.
    pub(super) fn unwatch_context(&self, ctx: *mut ibv_context) {
        let mut st = self.lock();
        let Some(e) = st.contexts.get_mut(&(ctx as usize)) else {
            return;
        };
        e.1 -= 1;
        if e.1 > 0 {
            return;
        }
        let token = e.0;
        st.contexts.remove(&(ctx as usize));
        st.watched.remove(&token);
        // SAFETY: the context is still open (the caller closes it afterwards).
        self.del_fd(unsafe { (*ctx).async_fd });
    }

    /// Routes `IBV_EVENT_CQ_ERR` of `cq` to `flag`.
    pub(super) fn watch_cq(&self, cq: *mut ibv_cq, flag: &Arc<AtomicBool>) {
        self.lock().cqs.insert(cq as usize, flag.clone());
    }

    /// Undoes [`watch_cq`](Self::watch_cq), before the queue is destroyed.
    pub(super) fn unwatch_cq(&self, cq: *mut ibv_cq) {
        self.lock().cqs.remove(&(cq as usize));
    }

    /// Routes `IBV_EVENT_SRQ_LIMIT_REACHED` of `srq` to `flag`.
    pub(super) fn watch_srq(&self, srq: *mut ibv_srq, flag: &Arc<AtomicBool>) {
        self.lock().srqs.insert(srq as usize, flag.clone());
    }

    /// Undoes [`watch_srq`](Self::watch_srq), before the queue is destroyed.
    pub(super) fn unwatch_srq(&self, srq: *mut ibv_srq) {
        self.lock().srqs.remove(&(srq as usize));
    }

    fn run(&self) {
        // SAFETY: epoll_event is plain old data.
        let mut evs: [libc::epoll_event; 16] = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: `evs` has room for 16 events.
            let n = unsafe { libc::epoll_wait(self.epfd, evs.as_mut_ptr(), 16, -1) };
            if n < 0 {
                if errno() != libc::EINTR {
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            }
            for ev in &evs[..n as usize] {
                let token = ev.u64;
                let st = self.lock();
                match st.watched.get(&token) {
                    Some(Watched::Conn(c)) => {
                        let c = c.clone();
                        drop(st);
                        c.handle_cm_events();
                    }
                    Some(Watched::Async(ctx)) => {
                        // Under the lock: the context cannot be closed meanwhile.
                        drain_async(*ctx as *mut ibv_context, &st);
                    }
                    None => {}
                }
            }
        }
    }
}

/// Reads and acknowledges every pending asynchronous event of `ctx`.
fn drain_async(ctx: *mut ibv_context, st: &MonitorState) {
    loop {
        let mut ev = MaybeUninit::<ibv_async_event>::uninit();
        // SAFETY: the context is open (registered, and unregistered under the same lock
        // before it closes); `ev` is a valid out-parameter.
        if unsafe { ibv_get_async_event(ctx, ev.as_mut_ptr()) } != 0 {
            return;
        }
        let p = ev.as_mut_ptr();
        // The type is read as a number: a kernel newer than the bindings may report values
        // the Rust enum does not have.
        // SAFETY: ibv_get_async_event filled the event; the enum field is a C int.
        let kind = unsafe { ptr::read(ptr::addr_of!((*p).event_type).cast::<u32>()) };
        if kind == ibv_event_type::IBV_EVENT_CQ_ERR as u32 {
            // SAFETY: for a CQ event the element is the completion queue.
            let cq = unsafe { ptr::read(ptr::addr_of!((*p).element.cq)) };
            if let Some(flag) = st.cqs.get(&(cq as usize)) {
                flag.store(true, Ordering::Release);
            }
        } else if kind == ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED as u32 {
            // SAFETY: for an SRQ event the element is the shared receive queue (libibverbs
            // gives back the pointer it registered as the queue's user handle).
            let srq = unsafe { ptr::read(ptr::addr_of!((*p).element.srq)) };
            if let Some(flag) = st.srqs.get(&(srq as usize)) {
                flag.store(true, Ordering::Release);
            }
        }
        // SAFETY: the event was returned by ibv_get_async_event and is acked once.
        unsafe { ibv_ack_async_event(p) };
    }
}
