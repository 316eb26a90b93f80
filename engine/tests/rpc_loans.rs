//! Loans of a deferred Call's registered bytes to another thread (`Response::lend_args`,
//! `Response::lend_bulk`): a WRITE's pulled data read there and a READ's result filled
//! there, without a copy; completion refused while a loan is out; lent memory that stays
//! valid after its connection is gone.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rpcrdma_engine::dispatch::{Deferred, Dispatch, Outcome, ProcSpec};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::pool::loan::{ArgsLoan, BulkLoan};
use rpcrdma_engine::program::{fill_pattern, is_pattern};
use rpcrdma_engine::requester::{CallArgs, Client, Completion};
use rpcrdma_engine::responder::{CompleteError, ServerConn};

const LENT: u32 = 0x2000_1042;
/// Arguments `u32 n, u32 seed`; results `u32 n` and `n` bytes DDP-eligible, filled by a
/// borrower thread through a bulk loan.
const READ: u32 = 1;
/// Arguments `u32 seed` and a DDP-eligible `opaque<>`; results `u32 ok, u32 n`, judged by a
/// borrower thread through an args loan.
const WRITE: u32 = 2;
/// Lends a bulk result and returns Success: the Call is deferred all the same.
const SLY: u32 = 3;

/// What a handler sends to the borrower thread.
enum Job {
    Read(Deferred, u32, BulkLoan),
    Write(Deferred, ArgsLoan),
    Keep(Deferred, BulkLoan),
}

fn word(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn dispatch(jobs: mpsc::Sender<Job>) -> Dispatch {
    let mut d = Dispatch::new();
    let read = ProcSpec {
        max_results: 4,
        ddp_arg: false,
        ddp_results: 1,
    };
    let j = jobs.clone();
    d.register(LENT, 1, READ, read, move |req, resp| {
        let (Some(n), Some(seed)) = (word(req.args, 0), word(req.args, 4)) else {
            return Outcome::GarbageArgs;
        };
        let Some(loan) = resp.lend_bulk(n as usize) else {
            return Outcome::SystemErr;
        };
        let _ = j.send(Job::Read(resp.deferred(), seed, loan));
        Outcome::Deferred
    });
    let write = ProcSpec {
        max_results: 8,
        ddp_arg: true,
        ddp_results: 0,
    };
    let j = jobs.clone();
    d.register(LENT, 1, WRITE, write, move |_, resp| {
        let Some(loan) = resp.lend_args() else {
            return Outcome::SystemErr;
        };
        let _ = j.send(Job::Write(resp.deferred(), loan));
        Outcome::Deferred
    });
    d.register(LENT, 1, SLY, read, move |_, resp| {
        let Some(loan) = resp.lend_bulk(64) else {
            return Outcome::SystemErr;
        };
        let _ = jobs.send(Job::Keep(resp.deferred(), loan));
        Outcome::Success
    });
    d
}

/// What the borrower sends back: the ticket and the results to write.
type Done = (Deferred, [u8; 8], usize);

/// The borrower thread: fills READ loans with the pattern, checks WRITE loans' data, keeps
/// SLY loans until told to drop them.
fn borrower(jobs: mpsc::Receiver<Job>, done: mpsc::Sender<Done>, kept: mpsc::Sender<BulkLoan>) {
    thread::spawn(move || {
        for job in jobs {
            match job {
                Job::Read(t, seed, mut loan) => {
                    let n = loan.len();
                    fill_pattern(seed, loan.bytes_mut());
                    drop(loan);
                    let mut r = [0u8; 8];
                    r[..4].copy_from_slice(&(n as u32).to_be_bytes());
                    let _ = done.send((t, r, n));
                }
                Job::Write(t, loan) => {
                    let a = loan.bytes();
                    let ok = match (word(a, 0), word(a, 4)) {
                        (Some(seed), Some(n)) => a
                            .get(8..8 + n as usize)
                            .is_some_and(|d| is_pattern(seed, d)),
                        _ => false,
                    };
                    let n = word(a, 4).unwrap_or(0);
                    drop(loan);
                    let mut r = [0u8; 8];
                    r[..4].copy_from_slice(&u32::from(ok).to_be_bytes());
                    r[4..].copy_from_slice(&n.to_be_bytes());
                    let _ = done.send((t, r, usize::MAX));
                }
                Job::Keep(t, loan) => {
                    let _ = kept.send(loan);
                    let _ = done.send((t, [0; 8], 0));
                }
            }
        }
    });
}

struct Rig {
    c: Client<Soft>,
    s: ServerConn<Soft>,
    done: mpsc::Receiver<Done>,
    kept: mpsc::Receiver<BulkLoan>,
}

fn rig() -> Rig {
    let (jt, jr) = mpsc::channel();
    let (dt, dr) = mpsc::channel();
    let (kt, kr) = mpsc::channel();
    borrower(jr, dt, kt);
    let cfg = config();
    let (c, s) = soft_pair(std::sync::Arc::new(dispatch(jt)), cfg, cfg).expect("pair");
    Rig {
        c,
        s,
        done: dr,
        kept: kr,
    }
}

/// Answers a borrower's result on the server connection.
fn answer(s: &mut ServerConn<Soft>, d: Done) -> Result<(), CompleteError> {
    let (t, r, n) = d;
    s.complete(t, |_, resp| {
        if n == usize::MAX {
            resp.write_results(&r);
        } else {
            resp.write_results(&r[..4]);
            // The bytes the loan filled, in place: not written again.
            if resp.push_bulk(n).is_none() {
                return Outcome::SystemErr;
            }
        }
        Outcome::Success
    })
}

/// Polls until the client completes one RPC, answering borrowed Calls as their results
/// come back; returns what `f` says of the completion.
fn run_one<R>(rig: &mut Rig, call: &CallArgs<'_>, f: impl FnOnce(&Completion<'_>) -> R) -> R {
    rig.c.submit(call, 7).expect("submit");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut f = Some(f);
    let mut out = None;
    while out.is_none() {
        assert!(Instant::now() < deadline, "no completion");
        rig.s.poll();
        while let Ok(d) = rig.done.try_recv() {
            answer(&mut rig.s, d).expect("complete");
        }
        rig.c.poll_completions(|x| {
            if let Some(f) = f.take() {
                out = Some(f(&x));
            }
        });
    }
    out.expect("set above")
}

#[test]
fn a_read_filled_by_another_thread_reaches_the_write_chunk() {
    let mut rig = rig();
    for (n, seed) in [(20_000u32, 5u32), (1, 9), (65_536, 77)] {
        let args = [n.to_be_bytes(), seed.to_be_bytes()].concat();
        let mut call = CallArgs::new(LENT, 1, READ, &args, 4);
        let chunk = [n];
        call.bulk_results = &chunk;
        let good = run_one(&mut rig, &call, |x| match &x.result {
            Ok(r) => {
                r.is_success()
                    && word(r.results, 0) == Some(n)
                    && r.bulk().len() == 1
                    && r.bulk()[0].len() == n as usize
                    && is_pattern(seed, r.bulk()[0])
            }
            Err(_) => false,
        });
        assert!(good, "READ of {n} bytes filled through the loan");
    }
    assert!(rig.s.snapshot().write_chunks >= 3);
}

#[test]
fn a_write_read_by_another_thread_from_the_pull_buffer() {
    let mut rig = rig();
    for (len, seed) in [(30_000usize, 6u32), (100, 3)] {
        let data = pattern(seed, len);
        let args = seed.to_be_bytes();
        let mut call = CallArgs::new(LENT, 1, WRITE, &args, 8);
        call.bulk_arg = Some(&data);
        let res = run_one(&mut rig, &call, |x| {
            x.result
                .as_ref()
                .ok()
                .map(|r| (word(r.results, 0), word(r.results, 4)))
        });
        assert_eq!(
            res,
            Some((Some(1), Some(len as u32))),
            "WRITE of {len} bytes"
        );
    }
}

#[test]
fn complete_waits_for_every_loan_and_a_lending_handler_has_deferred() {
    let mut rig = rig();
    let args = [0u8; 8];
    let mut call = CallArgs::new(LENT, 1, SLY, &args, 4);
    call.bulk_results = &[64];
    rig.c.submit(&call, 1).expect("submit");
    let deadline = Instant::now() + Duration::from_secs(10);
    // The handler returned Success but lent: nothing is answered.
    let (ticket, loan) = loop {
        assert!(Instant::now() < deadline, "handler never ran");
        rig.s.poll();
        rig.c.poll_completions(|_| panic!("answered while lent"));
        // The borrower sends the loan, then the ticket.
        if let Ok(d) = rig.done.try_recv() {
            let l = rig.kept.recv_timeout(Duration::from_secs(5)).expect("kept");
            break (d.0, l);
        }
    };
    assert_eq!(rig.s.deferred(), 1, "the lending handler deferred");
    assert_eq!(
        rig.s.complete(ticket, |_, _| Outcome::Success),
        Err(CompleteError::OnLoan)
    );
    drop(loan);
    assert_eq!(
        rig.s.complete(ticket, |_, resp| {
            resp.write_results(&[0, 0, 0, 64]);
            resp.push_bulk(64)
                .map_or(Outcome::SystemErr, |_| Outcome::Success)
        }),
        Ok(())
    );
    let mut seen = 0;
    while seen == 0 {
        assert!(Instant::now() < deadline, "no reply");
        rig.s.poll();
        seen += rig.c.poll_completions(|x| assert!(x.result.is_ok()));
    }
}

#[test]
fn lent_memory_outlives_its_connection() {
    let mut rig = rig();
    let args = [0u8; 8];
    let mut call = CallArgs::new(LENT, 1, SLY, &args, 4);
    call.bulk_results = &[64];
    rig.c.submit(&call, 1).expect("submit");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut loan = loop {
        assert!(Instant::now() < deadline, "handler never ran");
        rig.s.poll();
        if let Ok(l) = rig.kept.try_recv() {
            break l;
        }
    };
    // The connection goes, with its pools: the loan's bytes stay mapped and writable.
    rig.s.disconnect();
    drop(rig.s);
    drop(rig.c);
    loan.bytes_mut().fill(0xa5);
    assert!(loan.bytes_mut().iter().all(|&b| b == 0xa5));
    drop(loan);
}

/// On a shared receive queue, the receive of a Call whose bytes are still lent when its
/// connection goes is posted to the queue again when the last loan goes, not lost to it.
#[test]
fn a_lent_shared_receive_goes_back_to_its_queue_with_the_last_loan() {
    let (jt, jr) = mpsc::channel();
    let (dt, _dr) = mpsc::channel();
    let (kt, kr) = mpsc::channel();
    borrower(jr, dt, kt);
    let cfg = rpcrdma_engine::conn::ConnConfig {
        srq: true,
        ..config()
    };
    let (mut srv, addr) =
        rpcrdma_engine::loopback::soft_server(std::sync::Arc::new(dispatch(jt)), cfg)
            .expect("server");
    let (mut c, mut s) = rpcrdma_engine::loopback::connect_to(&mut srv, &addr, cfg).expect("pair");
    let args = [0u8; 8];
    let mut call = CallArgs::new(LENT, 1, SLY, &args, 4);
    call.bulk_results = &[64];
    c.submit(&call, 1).expect("submit");
    let deadline = Instant::now() + Duration::from_secs(10);
    let loan = loop {
        assert!(Instant::now() < deadline, "handler never ran");
        s.poll();
        if let Ok(l) = kr.try_recv() {
            break l;
        }
    };
    assert_eq!(srv.share_stats().srq_held, 1, "the Call holds its receive");
    s.disconnect();
    drop(s);
    drop(c);
    assert_eq!(srv.share_stats().srq_held, 1, "still lent");
    drop(loan);
    let st = srv.share_stats();
    assert_eq!((st.srq_held, st.srq_reserved), (0, 0), "{st:?}");
}
