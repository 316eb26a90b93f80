//! Deferred answers: handlers that return `Outcome::Deferred` (their storage I/O under way)
//! and are answered later with `ServerConn::complete`, in any order, in every reply form
//! (inline results, Write chunks, Read-chunk arguments, Long Calls and Replies); the Calls
//! keep their receives (the credits they stand for) meanwhile; tickets answer once.

mod common;

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::dispatch::{Deferred, Dispatch, Lookup, Outcome, Request, Response};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::loopback::{connect_to, soft_pair, soft_server};
use rpcrdma_engine::program;
use rpcrdma_engine::requester::{CallArgs, Client, SubmitError};
use rpcrdma_engine::responder::{CompleteError, ServerConn};
use rpcrdma_engine::stats::Snapshot;
use rpcrdma_engine::worker::{Drive, WorkerConfig, Workers};

/// The test program's procedures again under this program number, each deferring: its
/// handler records (ticket, procedure, XID) and answers nothing.
const LATER: u32 = 0x2000_0777;

type Tickets = Arc<Mutex<Vec<(Deferred, u32, u32)>>>;

/// A dispatch table with the deferring copy of the test program (and the program itself),
/// and where its handlers leave their tickets.
fn deferring() -> (Arc<Dispatch>, Tickets) {
    let tickets: Tickets = Arc::new(Mutex::new(Vec::new()));
    let mut d = Dispatch::new();
    program::register(&mut d);
    let real = program::dispatch();
    for p in [NULL, ECHO, READ, WRITE, MULTI] {
        let Lookup::Found(entry) = real.lookup(PROG, VERS, p) else {
            unreachable!("the test program has procedure {p}");
        };
        let t = tickets.clone();
        d.register(LATER, VERS, p, entry.spec, move |req, resp| {
            t.lock()
                .unwrap()
                .push((resp.deferred(), req.proc_num, req.xid));
            Outcome::Deferred
        });
    }
    (Arc::new(d), tickets)
}

/// Answers as the test program would: runs its handler for `req`'s procedure.
fn program_answer(req: &Request<'_>, resp: &mut Response<'_>) -> Outcome {
    match program::dispatch().lookup(PROG, VERS, req.proc_num) {
        Lookup::Found(e) => (e.handler)(req, resp),
        _ => Outcome::SystemErr,
    }
}

fn pair(cfg: ConnConfig) -> (Client<Soft>, ServerConn<Soft>, Tickets) {
    let (d, t) = deferring();
    let (c, s) = soft_pair(d, cfg, cfg).expect("pair");
    (c, s, t)
}

/// Polls both ends `n` times; returns the completions the client saw as (tag, check).
fn spin(c: &mut Client<Soft>, s: &mut ServerConn<Soft>, n: usize, seen: &mut Vec<(u64, bool)>) {
    for _ in 0..n {
        s.poll();
        c.poll_completions(|x| seen.push((x.tag, check(x.tag, &x.result))));
    }
}

/// Polls both ends until `want` completions were seen (10 s at most).
fn until(c: &mut Client<Soft>, s: &mut ServerConn<Soft>, want: usize, seen: &mut Vec<(u64, bool)>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < want {
        spin(c, s, 1, seen);
        assert!(
            Instant::now() < deadline,
            "{} of {want} completions",
            seen.len()
        );
    }
}

/// The Calls of the test, by tag: each form of reply and argument.
struct Calls {
    echo_small: Vec<u8>,
    echo_long: Vec<u8>,
    read_args: Vec<u8>,
    bulk: Vec<u8>,
    multi_args: Vec<u8>,
}

const TAGS: [u64; 6] = [0, 1, 2, 3, 4, 5];

/// The test's Calls, made once.
fn calls() -> &'static Calls {
    static CALLS: std::sync::OnceLock<Calls> = std::sync::OnceLock::new();
    CALLS.get_or_init(Calls::new)
}

impl Calls {
    fn new() -> Calls {
        Calls {
            echo_small: opaque(&pattern(1, 100)),
            // Over both inline thresholds: a Long Call and a Long Reply.
            echo_long: opaque(&pattern(2, 9000)),
            read_args: [20_000u32.to_be_bytes(), 5u32.to_be_bytes()].concat(),
            bulk: pattern(6, 30_000),
            multi_args: [3u32.to_be_bytes(), 5000u32.to_be_bytes()].concat(),
        }
    }

    fn args(&self, tag: u64) -> CallArgs<'_> {
        match tag {
            0 => CallArgs::new(LATER, VERS, NULL, &[], 0),
            1 => CallArgs::new(LATER, VERS, ECHO, &self.echo_small, 200),
            2 => CallArgs::new(LATER, VERS, ECHO, &self.echo_long, 9100),
            3 => {
                let mut a = CallArgs::new(LATER, VERS, READ, &self.read_args, 4);
                a.bulk_results = &[20_000];
                a
            }
            4 => {
                let mut a = CallArgs::new(LATER, VERS, WRITE, &[0, 0, 0, 6], 8);
                a.bulk_arg = Some(&self.bulk);
                a
            }
            _ => {
                let mut a = CallArgs::new(LATER, VERS, MULTI, &self.multi_args, 4);
                a.bulk_results = &[5000, 5000, 5000];
                a
            }
        }
    }
}

/// Whether the reply to the Call tagged `tag` is what the test program answers, byte for
/// byte.
fn check(
    tag: u64,
    r: &Result<rpcrdma_engine::requester::Reply<'_>, rpcrdma_engine::requester::RpcError>,
) -> bool {
    let Ok(r) = r else { return false };
    let calls = calls();
    r.is_success()
        && match tag {
            0 => r.results.is_empty(),
            1 => r.results == calls.echo_small.as_slice(),
            2 => r.results == calls.echo_long.as_slice(),
            3 => {
                word(r.results, 0) == Some(20_000)
                    && r.bulk().len() == 1
                    && r.bulk()[0].len() == 20_000
                    && program::is_pattern(5, r.bulk()[0])
            }
            4 => word(r.results, 0) == Some(1) && word(r.results, 4) == Some(30_000),
            _ => {
                word(r.results, 0) == Some(3)
                    && r.bulk().len() == 3
                    && (0..3).all(|i| {
                        r.bulk()[i].len() == 5000 && program::is_pattern(i as u32 + 1, r.bulk()[i])
                    })
            }
        }
}

/// Every form deferred at once, then answered in reverse order of arrival: nothing is
/// sent before its answer, every reply is right, counters count each RPC once.
#[test]
fn deferred_calls_are_answered_later_in_any_order() {
    let (mut c, mut s, tickets) = pair(config());
    let calls = calls();
    // Warm-up for the full grant.
    assert!(call(
        &mut c,
        &mut s,
        &CallArgs::new(PROG, VERS, NULL, &[], 0),
        |x| { x.result.is_ok() }
    ));
    for tag in TAGS {
        c.submit(&calls.args(tag), tag).unwrap();
    }
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tickets.lock().unwrap().len() < TAGS.len() {
        spin(&mut c, &mut s, 1, &mut seen);
        assert!(
            Instant::now() < deadline,
            "not every Call reached its handler"
        );
    }
    spin(&mut c, &mut s, 200, &mut seen);
    assert!(seen.is_empty(), "nothing is answered before `complete`");
    assert_eq!((s.deferred(), s.in_process()), (6, 6));
    let before = s.snapshot();
    let waiting: Vec<_> = tickets.lock().unwrap().drain(..).collect();
    for &(ticket, _, _) in waiting.iter().rev() {
        assert_eq!(s.complete(ticket, program_answer), Ok(()));
        assert_eq!(
            s.complete(ticket, program_answer),
            Err(CompleteError::UnknownTicket),
            "a ticket answers once"
        );
    }
    assert_eq!((s.deferred(), s.in_process()), (0, 0));
    until(&mut c, &mut s, TAGS.len(), &mut seen);
    seen.sort_unstable();
    assert_eq!(seen, TAGS.map(|t| (t, true)));
    let after = s.snapshot();
    assert_eq!(after.rpcs - before.rpcs, 6);
    // Each Call counted once, in its form, whatever the order of the answers.
    let cs = c.snapshot();
    assert_eq!(
        (after.short_calls, after.chunked_calls, after.long_calls),
        (cs.short_calls, cs.chunked_calls, cs.long_calls)
    );
    assert_eq!((cs.short_calls, cs.chunked_calls, cs.long_calls), (5, 1, 1));
    assert_eq!(after.long_replies, 1);
    assert!(tickets.lock().unwrap().is_empty(), "no handler ran twice");
}

/// The Calls deferred hold their receives: with every credit deferred the requester cannot
/// send (RFC 8166 §3.3), and each answer returns one credit.
#[test]
fn deferred_calls_hold_their_credits() {
    let cfg = ConnConfig {
        credits: 4,
        initial_grant: 4,
        ..config()
    };
    let (mut c, mut s, tickets) = pair(cfg);
    assert!(call(
        &mut c,
        &mut s,
        &CallArgs::new(PROG, VERS, NULL, &[], 0),
        |x| { x.result.is_ok() }
    ));
    let calls = calls();
    let mut seen = Vec::new();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while tickets.lock().unwrap().len() < 4 {
        if sent < 4 && c.submit(&calls.args(1), 1).is_ok() {
            sent += 1;
        }
        spin(&mut c, &mut s, 1, &mut seen);
        assert!(Instant::now() < deadline, "4 Calls deferred");
    }
    spin(&mut c, &mut s, 100, &mut seen);
    assert_eq!(
        c.submit(&calls.args(1), 1),
        Err(SubmitError::WouldBlock),
        "every credit is held by a deferred Call"
    );
    for k in 0..4 {
        let (ticket, _, _) = tickets.lock().unwrap().remove(0);
        s.complete(ticket, program_answer).unwrap();
        until(&mut c, &mut s, k + 1, &mut seen);
        assert!(
            c.submit(&calls.args(1), 1).is_ok(),
            "an answer returns a credit"
        );
    }
    assert_eq!(s.snapshot().credit_overruns, 0);
    assert!(seen.iter().all(|&(t, ok)| t == 1 && ok));
}

/// An answer may defer again (a second stage of I/O) under a new ticket; the old one is
/// spent; a ticket of another connection, or any ticket after the connection is lost, is
/// refused without running the closure.
#[test]
fn tickets_answer_one_deferral_of_their_own_connection() {
    let (mut c, mut s, tickets) = pair(config());
    let (mut c2, mut s2, tickets2) = pair(config());
    let calls = calls();
    c.submit(&calls.args(3), 3).unwrap();
    c2.submit(&calls.args(1), 1).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tickets.lock().unwrap().is_empty() || tickets2.lock().unwrap().is_empty() {
        spin(&mut c, &mut s, 1, &mut seen);
        spin(&mut c2, &mut s2, 1, &mut seen);
        assert!(Instant::now() < deadline, "both Calls deferred");
    }
    let (first, _, _) = tickets.lock().unwrap()[0];
    let (other, _, _) = tickets2.lock().unwrap()[0];
    let never = |_: &Request<'_>, _: &mut Response<'_>| -> Outcome { panic!("not run") };
    assert_eq!(s.complete(other, never), Err(CompleteError::UnknownTicket));
    // Stage two: defer again from the completion.
    let mut second = None;
    s.complete(first, |_, resp| {
        second = Some(resp.deferred());
        Outcome::Deferred
    })
    .unwrap();
    let second = second.unwrap();
    assert_ne!(second, first);
    assert_eq!(s.deferred(), 1);
    spin(&mut c, &mut s, 100, &mut seen);
    assert!(seen.is_empty());
    assert_eq!(s.complete(first, never), Err(CompleteError::UnknownTicket));
    s.complete(second, program_answer).unwrap();
    until(&mut c, &mut s, 1, &mut seen);
    assert_eq!(seen, [(3, true)]);
    // The requester goes away: the deferred Call dies with the connection.
    drop(c2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s2.is_dead() {
        s2.poll();
        assert!(Instant::now() < deadline, "the loss was not noticed");
    }
    assert_eq!(
        s2.complete(other, never),
        Err(CompleteError::ConnectionLost)
    );
}

// ---------------------------------------------------------------------------------------
// A storage backend on a pinned worker: its handlers start "I/O" and defer; its own `Drive`
// polls the connection, then its I/O, and completes the Calls whose I/O is done.

thread_local! {
    /// The I/O started on this worker thread: (ticket, polls until it is done).
    static STARTED: RefCell<Vec<(Deferred, u32)>> = const { RefCell::new(Vec::new()) };
}

/// The test program, every procedure deferring for 50 polls of "I/O".
fn backend_dispatch() -> Arc<Dispatch> {
    let mut d = Dispatch::new();
    let real = program::dispatch();
    for p in [NULL, ECHO, READ, WRITE, MULTI] {
        let Lookup::Found(entry) = real.lookup(PROG, VERS, p) else {
            unreachable!("the test program has procedure {p}");
        };
        d.register(LATER, VERS, p, entry.spec, |_, resp| {
            STARTED.with(|s| s.borrow_mut().push((resp.deferred(), 50)));
            Outcome::Deferred
        });
    }
    Arc::new(d)
}

/// One connection of the backend and its I/O in flight.
struct Backend {
    conn: ServerConn<Soft>,
    io: Vec<(Deferred, u32)>,
}

impl Drive for Backend {
    fn poll(&mut self) -> usize {
        let mut work = self.conn.poll();
        let id = self.conn.id();
        STARTED.with(|s| {
            s.borrow_mut().retain(|&(t, polls)| {
                let mine = t.connection() == id;
                if mine {
                    self.io.push((t, polls));
                }
                !mine
            })
        });
        let mut k = 0;
        while k < self.io.len() {
            let (t, polls) = &mut self.io[k];
            if *polls > 0 {
                *polls -= 1;
                k += 1;
                continue;
            }
            match self.conn.complete(*t, program_answer) {
                Ok(()) => {
                    work += 1;
                    self.io.swap_remove(k);
                }
                Err(CompleteError::WouldBlock) => k += 1,
                Err(_) => {
                    self.io.swap_remove(k);
                }
            }
        }
        work
    }

    fn is_dead(&self) -> bool {
        self.conn.is_dead()
    }

    fn busy(&self) -> bool {
        Drive::busy(&self.conn)
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
}

/// Two requesters against the backend on one worker: every form, answered after its I/O,
/// verified byte for byte; a graceful shutdown finds nothing left in process.
#[test]
fn a_backend_on_a_worker_completes_its_own_deferred_calls() {
    let (mut srv, addr) = soft_server(backend_dispatch(), config()).unwrap();
    let mut workers = Workers::<Backend>::start(&[WorkerConfig {
        core: None,
        max_conns: 4,
    }])
    .unwrap();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (c, conn) = connect_to(&mut srv, &addr, config()).unwrap();
        workers
            .assign(Backend {
                conn,
                io: Vec::new(),
            })
            .unwrap();
        clients.push(c);
    }
    let calls = calls();
    for round in 0..3 {
        for c in clients.iter_mut() {
            for tag in TAGS {
                let ok = c
                    .call(&calls.args(tag), |r| check(tag, &r))
                    .unwrap_or_else(|e| panic!("round {round} tag {tag}: {e}"));
                assert!(ok, "round {round} tag {tag}");
            }
        }
    }
    // The worker publishes its counters every few hundred turns.
    let deadline = Instant::now() + Duration::from_secs(5);
    while workers.stats()[0].rpc.rpcs != 2 * 3 * TAGS.len() as u64 {
        assert!(Instant::now() < deadline, "{:?}", workers.stats()[0].rpc);
        std::thread::sleep(Duration::from_millis(1));
    }
    workers.shutdown(Duration::from_secs(2)).unwrap();
}
