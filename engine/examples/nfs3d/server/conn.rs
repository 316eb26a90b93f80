//! The driver of one NFS connection on a worker: polls the [`ServerConn`], hands the jobs
//! its handlers started to the I/O pool (or runs them itself, for an export that never waits
//! for a device: [`Nfs::on_worker_all`]), and completes the Calls whose answers came back
//! (RFC 8166: the reply leaves when it is ready, in any order; the Call's receive and
//! credit are kept meanwhile, §3.3). Never blocks: the completion channel is read with
//! `try_recv`, a completion the connection has no room for now is retried at the next poll.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

use rpcrdma_engine::dispatch::{Outcome, Response};
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::responder::{CompleteError, ServerConn};
use rpcrdma_engine::stats::Snapshot;
use rpcrdma_engine::worker::{Bell, Drive, WakeFds};

use super::{io, lend, take_started, Answer, Finished, Job, Nfs, ReplyTo};
use crate::identity;

/// Most answers completed per poll (the worker's other connections get their turn).
const COMPLETIONS_PER_POLL: usize = 64;

/// One NFS connection with its completion queue.
pub struct NfsConn<P: Provider> {
    conn: ServerConn<P>,
    nfs: Arc<Nfs>,
    jobs: Option<Sender<Job>>,
    done_tx: Sender<Finished>,
    done_rx: Receiver<Finished>,
    /// Rung by the I/O threads after each answer, for a worker waiting for events (`None`
    /// if no eventfd could be made: the connection is then never waited for).
    bell: Option<Arc<Bell>>,
    /// Answers that could not be completed yet (no reply room, a loan still out).
    retry: VecDeque<Finished>,
    started: Vec<Job>,
    /// Results of the jobs run on the worker ([`Nfs::on_worker_all`]).
    scratch: Vec<u8>,
}

impl<P: Provider> core::fmt::Debug for NfsConn<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NfsConn")
            .field("id", &self.conn.id())
            .field("retry", &self.retry.len())
            .finish_non_exhaustive()
    }
}

impl<P: Provider> NfsConn<P> {
    /// Drives `conn`, sending its jobs to `jobs` (the I/O pool's channel).
    pub fn new(conn: ServerConn<P>, nfs: Arc<Nfs>, jobs: Option<Sender<Job>>) -> NfsConn<P> {
        let (done_tx, done_rx) = mpsc::channel();
        NfsConn {
            conn,
            nfs,
            jobs,
            done_tx,
            done_rx,
            bell: Bell::new().ok().map(Arc::new),
            retry: VecDeque::new(),
            started: Vec::with_capacity(64),
            scratch: Vec::new(),
        }
    }

    /// The connection, mutably (tests: to disconnect it).
    #[cfg(test)]
    pub fn conn_mut(&mut self) -> &mut ServerConn<P> {
        &mut self.conn
    }

    /// Hands the jobs started during the last poll to the pool.
    fn dispatch_started(&mut self) {
        take_started(self.conn.id(), &mut self.started);
        for mut job in self.started.drain(..) {
            job.reply = Some(ReplyTo {
                tx: self.done_tx.clone(),
                bell: self.bell.clone(),
            });
            // A worker keeps the server's credentials (identity.rs): it runs only the Calls
            // of the server's own identity.
            let job = if self.nfs.on_worker_all(job.proc_num) && identity::runs_here(&job.caller) {
                match io::run_on_worker(&self.nfs, &mut self.scratch, job) {
                    None => continue,
                    Some(job) => job,
                }
            } else {
                job
            };
            let ticket = job.ticket;
            let refused = match &self.jobs {
                Some(tx) => tx.send(job).is_err(),
                None => true,
            };
            if refused {
                // No pool (shutting down): the job and its loans are dropped by `send`'s
                // error; the Call is answered SYSTEM_ERR.
                self.nfs.stats.system_errs.fetch_add(1, Ordering::Relaxed);
                self.retry.push_back(Finished {
                    ticket,
                    answer: Answer::SystemErr,
                });
            }
        }
    }

    /// Completes one answer: sent, dropped (its Call is gone with its connection), or
    /// given back when it must wait for the next poll (no reply room, a loan still out).
    fn try_complete(&mut self, f: Finished) -> Completed {
        let stats = &self.nfs.stats;
        match self
            .conn
            .complete(f.ticket, |_, resp| write_answer(&f.answer, resp))
        {
            Ok(()) => {
                stats.answered.fetch_add(1, Ordering::Relaxed);
                Completed::Sent
            }
            Err(CompleteError::WouldBlock) | Err(CompleteError::OnLoan) => {
                stats.retries.fetch_add(1, Ordering::Relaxed);
                Completed::Wait(f)
            }
            Err(CompleteError::ConnectionLost) | Err(CompleteError::UnknownTicket) => {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                Completed::Dropped
            }
        }
    }

    /// Completes what is waiting, the answers held back first, in order, at most
    /// [`COMPLETIONS_PER_POLL`] sent; returns how many were sent.
    fn complete_ready(&mut self) -> usize {
        let mut sent = 0;
        while sent < COMPLETIONS_PER_POLL {
            let Some(f) = self
                .retry
                .pop_front()
                .or_else(|| self.done_rx.try_recv().ok())
            else {
                break;
            };
            match self.try_complete(f) {
                Completed::Sent => sent += 1,
                Completed::Dropped => {}
                Completed::Wait(f) => {
                    self.retry.push_front(f);
                    break;
                }
            }
        }
        sent
    }
}

/// What became of an answer.
enum Completed {
    Sent,
    Dropped,
    Wait(Finished),
}

/// Writes an I/O thread's answer as the reply (in place of the handler): the results bytes
/// copied, READ's data pushed (in place when it was lent).
pub fn write_answer(answer: &Answer, resp: &mut Response<'_>) -> Outcome {
    match answer {
        Answer::Success { results, bulk } => {
            let out = resp.results();
            let Some(dst) = out.get_mut(..results.len()) else {
                return Outcome::SystemErr;
            };
            dst.copy_from_slice(results);
            if results.len() % 4 != 0 {
                return Outcome::SystemErr;
            }
            resp.set_results_len(results.len());
            if let Some(b) = bulk {
                if !lend::push(resp, b) {
                    return Outcome::SystemErr;
                }
            }
            Outcome::Success
        }
        Answer::Garbage => Outcome::GarbageArgs,
        Answer::SystemErr => Outcome::SystemErr,
    }
}

impl<P: Provider> Drive for NfsConn<P>
where
    ServerConn<P>: Send,
{
    fn poll(&mut self) -> usize {
        let mut work = self.conn.poll();
        self.dispatch_started();
        if self.conn.deferred() > 0 || !self.retry.is_empty() {
            work += self.complete_ready();
        }
        work
    }

    fn prefetch(&self) {
        self.conn.prefetch_poll();
    }

    fn watch(&self) -> Option<rpcrdma_engine::fabric::CqWatch> {
        self.conn.cq_watch()
    }

    /// Skipped only while no Call is out with the I/O threads: their answers arrive
    /// through a channel, not the completion queue. (The jobs a poll starts are handed
    /// over before it returns: `started` is empty here.)
    fn idle_at(&self) -> Option<u64> {
        if self.conn.deferred() == 0 && self.retry.is_empty() {
            self.conn.idle_at()
        } else {
            None
        }
    }

    fn housekeep(&mut self, now: std::time::Instant) {
        self.conn.housekeep(now);
    }

    fn is_dead(&self) -> bool {
        self.conn.is_dead()
    }

    fn busy(&self) -> bool {
        Drive::busy(&self.conn) || !self.retry.is_empty()
    }

    fn settle(&mut self) {
        self.conn.settle();
    }

    fn close(&mut self) {
        self.conn.disconnect();
    }

    fn counters(&self) -> Snapshot {
        self.conn.snapshot()
    }

    /// Armed when both the completion queue and the I/O threads' bell are: the worker then
    /// wakes for a message from the client and for an answer to complete.
    fn arm(&mut self) -> bool {
        let Some(bell) = &self.bell else {
            return false;
        };
        bell.arm();
        // Answers held back wait for room that a completion makes: the queue's arming
        // covers them.
        self.conn.arm_notify()
    }

    fn wake_fds(&self) -> WakeFds<'_> {
        [self.conn.notify_fd(), self.bell.as_ref().map(|b| b.fd())]
    }

    fn disarm(&mut self) {
        self.conn.take_notifications();
        if let Some(b) = &self.bell {
            b.clear();
        }
    }

    fn home(&self) -> Option<usize> {
        self.conn.home()
    }
}
