//! The I/O pool: threads that run the NFSv3 procedures against the file system, so that no
//! polling worker ever waits for a disk.
//!
//! Jobs arrive on one channel shared by the threads (FIFO: a duplicate request is always
//! queued after its original, so a thread waiting in the duplicate request cache never
//! waits for a job still queued behind it). One thread at a time waits on it, holding its
//! lock; the others wait for the lock. (A lock-free queue with a wake-up of the lowest idle
//! thread per job made single CREATE and REMOVE round trips shorter in the guest, 541/415 us
//! against 587/465, but not the kernel client's tree copy and 2,000 creates: 1.55 and 1.60
//! times the kernel's against 1.30 and 1.32, medians of three rounds in rotated order. The
//! thread woken to take the lock over may be awake for the next job of a burst. Kept as it
//! is.) Non-idempotent procedures go through the cache first ([`Drc`](crate::drc::Drc)). A
//! READ reads straight into the lent registered buffer; the loans are dropped before the
//! answer is sent back, so the driver can complete the Call at once.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::drc::{Begin, Cached, DrcKey};
use crate::ops;

use super::{Answer, Finished, Job, Nfs};

/// How long a thread waits for a job before looking at the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// The I/O threads.
pub struct IoPool {
    jobs: Option<Sender<Job>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl core::fmt::Debug for IoPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IoPool")
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl IoPool {
    /// Starts `n` threads (at least one) serving `nfs`, none of them spinning.
    #[cfg(test)]
    pub fn start(n: usize, nfs: &Arc<Nfs>) -> std::io::Result<IoPool> {
        IoPool::start_spinning(n, nfs, Duration::ZERO)
    }

    /// Starts `n` threads (at least one) serving `nfs`; after each job, the thread whose
    /// turn it is to take the next one looks for it for up to `spin` (yielding its core
    /// between looks) before it sleeps, so that a client issuing one Call after another
    /// does not pay a thread wake-up per Call.
    pub fn start_spinning(n: usize, nfs: &Arc<Nfs>, spin: Duration) -> std::io::Result<IoPool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let (rx, nfs, stop) = (Arc::clone(&rx), Arc::clone(nfs), Arc::clone(&stop));
            threads.push(
                thread::Builder::new()
                    .name(format!("nfs3d-io-{i}"))
                    .spawn(move || serve(&rx, &nfs, &stop, spin))?,
            );
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

    /// Stops the threads once the jobs queued are done (call it after the workers stopped:
    /// nothing sends any more) and waits for them.
    pub fn shutdown(mut self) {
        self.jobs = None;
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(rx: &Mutex<Receiver<Job>>, nfs: &Nfs, stop: &AtomicBool, spin: Duration) {
    // Nothing but procedures runs here (no RDMA device): this thread takes its callers'
    // identities, and keeps the last one until a Call needs another.
    crate::identity::switching_thread();
    let mut scratch = Vec::new();
    loop {
        let next = next_job(rx, spin);
        match next {
            Ok(job) => run_job(nfs, &mut scratch, job),
            Err(RecvTimeoutError::Timeout) if !stop.load(Ordering::Relaxed) => {}
            Err(_) => return,
        }
    }
}

/// The next job: looked for without sleeping for up to `spin` (the core yielded between
/// looks), then waited for up to [`IDLE_WAIT`]. One thread at a time holds the channel; the
/// others wait for it on the lock.
fn next_job(rx: &Mutex<Receiver<Job>>, spin: Duration) -> Result<Job, RecvTimeoutError> {
    let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
    if !spin.is_zero() {
        let start = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(job) => return Ok(job),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) if start.elapsed() < spin => thread::yield_now(),
                Err(TryRecvError::Empty) => break,
            }
        }
    }
    rx.recv_timeout(IDLE_WAIT)
}

/// Runs one job and sends its answer to the connection's driver.
pub fn run_job(nfs: &Nfs, scratch: &mut Vec<u8>, job: Job) {
    let begin = ops::is_non_idempotent(job.proc_num).then(|| {
        let key = drc_key(&job);
        (key, nfs.drc.begin(key, nfs.drc_wait))
    });
    // An I/O thread may search the export: nothing is given back.
    let _ = run_begun(nfs, scratch, job, begin, false);
}

/// Runs `job` on the polling worker that started it, for an export whose operations never
/// wait for a device ([`Nfs::on_worker_all`]), and sends its answer to the connection's
/// driver (which completes it at its next turn). Gives the job back when it must go to the
/// I/O pool after all: a retransmission whose original is still in progress (the pool waits
/// for it; a worker never does), the duplicate request cache busy, or a handle that only a
/// search of the export would find (a search may read every directory of the export).
/// Finishing the cache's entry takes its lock, which other threads hold only to update
/// its maps.
pub fn run_on_worker(nfs: &Nfs, scratch: &mut Vec<u8>, job: Job) -> Option<Job> {
    let begin = if ops::is_non_idempotent(job.proc_num) {
        let key = drc_key(&job);
        match nfs.drc.try_begin(key) {
            Some(b) => Some((key, b)),
            None => return Some(job),
        }
    } else {
        None
    };
    run_begun(nfs, scratch, job, begin, true)
}

fn drc_key(job: &Job) -> DrcKey {
    DrcKey::new(job.xid, job.proc_num, job.args.bytes(), job.client_hash)
}

/// Runs `job` whose lookup in the duplicate request cache (non-idempotent procedures
/// only) gave `begin`, and sends its answer. On a worker (`on_worker`) no handle is
/// searched for: a job that would need a search comes back (its cache entry abandoned,
/// nothing changed yet: handles are resolved before anything is done) for the pool.
fn run_begun(
    nfs: &Nfs,
    scratch: &mut Vec<u8>,
    mut job: Job,
    begin: Option<(DrcKey, Begin)>,
    on_worker: bool,
) -> Option<Job> {
    let mut run = |job: &mut Job| {
        if on_worker {
            let (a, searched) = ops::export::without_search(|| execute(nfs, scratch, job));
            (!searched).then_some(a)
        } else {
            Some(execute(nfs, scratch, job))
        }
    };
    let answer = match begin {
        Some((key, Begin::Execute)) => {
            let Some(a) = run(&mut job) else {
                nfs.drc.abandon(key);
                return Some(job);
            };
            match &a {
                Answer::Success { results, .. } => {
                    nfs.drc.finish(key, Cached::Success(Arc::clone(results)))
                }
                Answer::Garbage => nfs.drc.finish(key, Cached::Garbage),
                Answer::SystemErr => nfs.drc.abandon(key),
            }
            a
        }
        Some((_, Begin::Replay(Cached::Success(results)))) => Answer::Success {
            results,
            bulk: None,
        },
        Some((_, Begin::Replay(Cached::Garbage))) => Answer::Garbage,
        Some((_, Begin::StillRunning)) => Answer::SystemErr,
        None => match run(&mut job) {
            Some(a) => a,
            None => return Some(job),
        },
    };
    if on_worker {
        nfs.stats.on_worker_jobs.fetch_add(1, Ordering::Relaxed);
    }
    match &answer {
        Answer::Success { results, .. } => {
            let status = results
                .get(..4)
                .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
            nfs.stats.count_status(status);
        }
        Answer::Garbage => {
            nfs.stats.garbage_args.fetch_add(1, Ordering::Relaxed);
        }
        Answer::SystemErr => {
            nfs.stats.system_errs.fetch_add(1, Ordering::Relaxed);
        }
    }
    let Job {
        ticket,
        args,
        bulk,
        reply,
        ..
    } = job;
    // Every loan is given back before the driver is told: it can complete at once.
    drop(args);
    drop(bulk);
    let sent = reply.is_some_and(|r| r.send(Finished { ticket, answer }));
    if !sent {
        nfs.stats.dropped.fetch_add(1, Ordering::Relaxed);
    }
    None
}

/// Runs the procedure (a panic in it is a SYSTEM_ERR, not a lost thread).
fn execute(nfs: &Nfs, scratch: &mut Vec<u8>, job: &mut Job) -> Answer {
    let max = ops::max_results(job.proc_num, &nfs.config) as usize;
    if scratch.len() < max {
        scratch.resize(max, 0);
    }
    if let Some(c) = nfs.stats.executed.get(job.proc_num as usize) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    // The test hook: the procedure takes this long (in progress in the cache meanwhile).
    if let Some(d) = nfs.io_delay() {
        thread::sleep(d);
    }
    let run = catch_unwind(AssertUnwindSafe(|| {
        let bulk = job.bulk.as_mut().map(|b| b.bytes_mut());
        ops::run(
            &nfs.export,
            &job.caller,
            job.proc_num,
            job.args.bytes(),
            &mut scratch[..max],
            bulk,
        )
    }));
    match run {
        Ok(Ok(done)) => {
            let Some(results) = scratch.get(..done.results_len) else {
                return Answer::SystemErr;
            };
            if results.len() % 4 != 0 {
                return Answer::SystemErr;
            }
            let bulk = match (done.bulk_len, job.bulk.take()) {
                (Some(n), Some(b)) if n <= ops_bulk_len(&b) => Some(b.finish(n)),
                (Some(_), _) => return Answer::SystemErr,
                (None, _) => None,
            };
            Answer::Success {
                results: Arc::from(results),
                bulk,
            }
        }
        Ok(Err(_)) => Answer::Garbage,
        Err(_) => Answer::SystemErr,
    }
}

fn ops_bulk_len(b: &super::Bulk) -> usize {
    match b {
        super::Bulk::Lent(l) => l.len(),
        super::Bulk::Owned(v) => v.len(),
    }
}
