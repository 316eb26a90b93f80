//! Procedures and helpers shared by the RPC tests.
#![allow(dead_code)]

pub mod reverse;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::requester::{CallArgs, Client, Completion};
use rpcrdma_engine::responder::ServerConn;
use rpcrdma_engine::stats::Snapshot;

#[allow(unused_imports)]
pub use rpcrdma_engine::program::{
    dispatch, fill_pattern, opaque_len, word, ECHO, MULTI, NULL, PROG, READ, VERS, VERS_TIMED,
    WRITE,
};

pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill_pattern(seed, &mut v);
    v
}

pub fn opaque(data: &[u8]) -> Vec<u8> {
    let mut v = vec![0; opaque_len(data.len())];
    rpcrdma_engine::program::encode_opaque(&mut v, data.len(), |d| d.copy_from_slice(data))
        .expect("sized");
    v
}

pub fn config() -> ConnConfig {
    ConnConfig {
        bulk_size: 1 << 20,
        ..ConnConfig::default()
    }
}

/// Drives both ends in this thread until `f` has seen a completion; returns what it
/// returned. Panics after 10 s.
pub fn drive<R>(
    client: &mut Client<Soft>,
    server: &mut ServerConn<Soft>,
    mut f: impl FnMut(Completion<'_>) -> R,
) -> R {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = None;
    while out.is_none() {
        server.poll();
        client.poll_completions(|c| out = Some(f(c)));
        assert!(Instant::now() < deadline, "no completion in 10 s");
    }
    out.unwrap()
}

/// One RPC, driven in this thread.
pub fn call<R>(
    client: &mut Client<Soft>,
    server: &mut ServerConn<Soft>,
    args: &CallArgs<'_>,
    f: impl FnMut(Completion<'_>) -> R,
) -> R {
    client.submit(args, 7).expect("submit");
    drive(client, server, f)
}

/// A server connection polled on a thread of its own, for blocking calls from the test's
/// thread; [`ServedThread::stop`] ends it and returns its counters.
pub struct ServedThread {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Snapshot>,
}

impl ServedThread {
    /// Polls `server` on a new thread until stopped.
    pub fn start(mut server: ServerConn<Soft>) -> ServedThread {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                if server.poll() == 0 {
                    std::thread::yield_now();
                }
            }
            server.snapshot()
        });
        ServedThread { stop, handle }
    }

    /// Stops the thread; the server's counters.
    pub fn stop(self) -> Snapshot {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("server thread")
    }
}
