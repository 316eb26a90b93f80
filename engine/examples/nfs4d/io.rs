//! The I/O threads: every COMPOUND runs on one, as its caller ([`crate::identity`]), so
//! the polling thread never waits for the file system and never changes its credentials
//! (the kernel refuses writes to the RDMA device from a thread whose credentials changed).
//!
//! The COMPOUND's argument bytes are lent to the thread where the RDMA Read put them (a
//! WRITE's data is written to its file from there), and a READ ending the COMPOUND reads
//! straight into the lent registered buffer the responder RDMA-Writes into the client's
//! Write chunk (RFC 8267 §4.2): no copy either way when the engine can lend. The loans
//! are dropped before the answer goes back, so the polling thread completes the Call at
//! once ([`rpcrdma_engine::responder::ServerConn::complete`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rpcrdma_engine::dispatch::Deferred;
use rpcrdma_engine::pool::loan::{ArgsLoan, BulkLoan};

use crate::compound;
use crate::fileops::{Fs, ReadData};
use crate::identity::{self, Caller};
use crate::session::{State, MAX_COMPOUND};

/// A COMPOUND's argument bytes on the I/O thread.
pub enum Args {
    /// Where the engine received (or RDMA-Read) them.
    Lent(ArgsLoan),
    /// A copy (the engine could not lend).
    Copied(Vec<u8>),
}

impl Args {
    fn bytes(&self) -> &[u8] {
        match self {
            Args::Lent(l) => l.bytes(),
            Args::Copied(v) => v,
        }
    }
}

/// One COMPOUND to run.
pub struct Job {
    pub conn: u64,
    pub ticket: Deferred,
    pub caller: Caller,
    pub args: Args,
    /// The registered buffer lent for a READ ending the COMPOUND.
    pub bulk: Option<BulkLoan>,
}

/// A COMPOUND run: its results, for the polling thread to complete its Call with.
pub struct Finished {
    pub conn: u64,
    pub ticket: Deferred,
    pub results: Vec<u8>,
    pub data: ReadData,
}

/// What the I/O threads share.
pub struct Shared {
    pub sessions: Arc<Mutex<State>>,
    pub fs: Fs,
}

/// The I/O threads.
pub struct IoPool {
    jobs: Option<Sender<Job>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl IoPool {
    /// Starts `n` threads (at least one) running jobs against `shared`, their answers
    /// sent on `done`.
    pub fn start(
        n: usize,
        shared: &Arc<Shared>,
        done: &Sender<Finished>,
    ) -> std::io::Result<IoPool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let stop = Arc::new(AtomicBool::new(false));
        let switching = rustix::process::geteuid().is_root();
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let (rx, shared, stop, done) = (
                Arc::clone(&rx),
                Arc::clone(shared),
                Arc::clone(&stop),
                done.clone(),
            );
            threads.push(thread::Builder::new().name(format!("nfs4d-io-{i}")).spawn(
                move || {
                    if switching {
                        identity::switching_thread();
                    }
                    serve(&rx, &shared, &stop, &done);
                },
            )?);
        }
        Ok(IoPool {
            jobs: Some(tx),
            stop,
            threads,
        })
    }

    /// Where to send jobs.
    pub fn sender(&self) -> Option<Sender<Job>> {
        self.jobs.clone()
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(rx: &Mutex<Receiver<Job>>, shared: &Shared, stop: &AtomicBool, done: &Sender<Finished>) {
    let mut out = vec![0u8; MAX_COMPOUND as usize];
    while !stop.load(Ordering::Relaxed) {
        let job = {
            let Ok(rx) = rx.lock() else { return };
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(j) => j,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        let Job {
            conn,
            ticket,
            caller,
            args,
            mut bulk,
        } = job;
        // A thread that cannot act as the caller (a server not run as root) runs the
        // session operations only: file operations are NFS4ERR_NOTSUPP then.
        let files = identity::act_as(&caller)
            .is_ok()
            .then_some((&shared.fs, &caller));
        let ran = compound::run(
            &shared.sessions,
            files,
            conn,
            args.bytes(),
            &mut out,
            bulk.as_mut().map(|b| b.bytes_mut()),
        );
        // The loans end before the answer is sent: the Call can be completed at once.
        drop(args);
        drop(bulk);
        let f = Finished {
            conn,
            ticket,
            results: out[..ran.len].to_vec(),
            data: ran.data,
        };
        if done.send(f).is_err() {
            return;
        }
    }
}
