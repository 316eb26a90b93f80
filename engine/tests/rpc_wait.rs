//! A worker that waits for events between RPCs (`Workers::set_wait`) on the soft fabric:
//! the completion queue's notification (its eventfd, rung by the peer's Send) wakes it for
//! every Call that arrives while it waits — echoes of each form (Short, a Read chunk's pull,
//! Write chunks), a client in the same process — and it sleeps, not spins, in between; an
//! idle connection gives its shared buffers back at its worker's housekeeping.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::loopback::soft_server;
use rpcrdma_engine::pool::share::Share;
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::responder::ServerConn;
use rpcrdma_engine::worker::{WorkerConfig, Workers};
use std::sync::Arc;

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// A server's one worker, set up by `settings`, serving the connection of a client in
/// this process; the server's share, to look at.
fn served(
    settings: impl FnOnce(&Workers<ServerConn<Soft>>),
) -> (Workers<ServerConn<Soft>>, Client<Soft>, Arc<Share<Soft>>) {
    let cfg = config();
    let (mut server, addr) = soft_server(dispatch(), cfg).expect("server");
    let share = Arc::clone(server.share());
    let mut workers = Workers::start(&[WorkerConfig {
        core: None,
        max_conns: 4,
    }])
    .expect("workers");
    settings(&workers);
    let device = Soft::open_device(None).expect("device");
    let acceptor = thread::spawn(move || {
        let conn = server.accept(Duration::from_secs(10)).expect("accept");
        workers.assign(conn).expect("assign");
        workers
    });
    let client = Client::<Soft>::connect(&device, &addr, cfg).expect("connect");
    (acceptor.join().expect("acceptor"), client, share)
}

#[test]
fn calls_wake_a_waiting_worker_through_the_completion_queue() {
    let (workers, mut client, _) = served(|workers| {
        workers.set_wait(Some(Duration::from_micros(200)));
        // No wait ends by its limit: each Call must wake the worker through the completion
        // queue's notification (one lost hangs the call until it fails).
        workers.set_wait_limit(Duration::from_secs(600));
    });
    wait_for("a first wait", || workers.stats()[0].waits > 0);

    // Sleeping, not spinning.
    let before = workers.stats()[0].loops;
    thread::sleep(Duration::from_millis(120));
    let turned = workers.stats()[0].loops - before;
    assert!(turned < 1000, "{turned} turns while idle");

    let small = opaque(&pattern(1, 100));
    let large = opaque(&pattern(2, 200_000));
    for k in 0..30u32 {
        // The worker waits (armed, past its last look) when each Call comes.
        let (woken, waits) = (workers.stats()[0].wakeups, workers.stats()[0].waits);
        let echo = if k % 3 == 2 { &large } else { &small };
        let mut args = CallArgs::new(PROG, VERS, ECHO, echo, echo.len() as u32 + 64);
        args.timeout = Duration::from_secs(10);
        let ok = client
            .call(&args, |r| r.is_ok_and(|r| r.results == echo.as_slice()))
            .expect("call");
        assert!(ok, "echo {k} came back wrong");
        assert!(
            workers.stats()[0].wakeups > woken,
            "echo {k} was answered without waking the worker by an event"
        );
        wait_for("the worker to wait again", || {
            workers.stats()[0].waits > waits
        });
    }
    let s = workers.stats()[0];
    assert!(s.rpc.rpcs >= 30, "{s:?}");
    assert_eq!(s.naps, 0);
    client.disconnect();
    workers.shutdown(Duration::from_secs(2)).expect("shutdown");
}

/// A connection left idle gives its ring and its own buffers back to the share at its
/// worker's housekeeping (`Drive::housekeep`, `ServerConn::shed`) once `SHED_AFTER` has
/// passed, whether the worker waits or spins, and its next Call is answered.
#[test]
fn an_idle_connection_gives_its_buffers_back_at_its_workers_housekeeping() {
    use rpcrdma_engine::responder::SHED_AFTER;
    for waiting in [true, false] {
        let (workers, mut client, share) = served(|workers| {
            if waiting {
                workers.set_wait(Some(Duration::from_micros(200)));
            } else {
                workers.set_nap(Some((Duration::from_millis(1), Duration::from_millis(1))));
            }
        });
        let small = opaque(&pattern(3, 100));
        let mut args = CallArgs::new(PROG, VERS, ECHO, &small, small.len() as u32 + 64);
        args.timeout = Duration::from_secs(10);
        let echo = |client: &mut Client<Soft>| {
            client
                .call(&args, |r| r.is_ok_and(|r| r.results == small.as_slice()))
                .expect("call")
        };
        assert!(echo(&mut client));
        assert!(share.stats().reply_out > 0, "the first Call took the ring");
        let idle_from = Instant::now();
        wait_for("the idle connection to give its ring back", || {
            share.stats().reply_out == 0
        });
        // The quiet spell starts at the housekeeping after the reply was posted, which may
        // come a little before the client has it.
        assert!(
            idle_from.elapsed() + Duration::from_millis(100) >= SHED_AFTER,
            "given back before its time"
        );
        assert!(
            echo(&mut client),
            "the Call after the shed (waiting: {waiting})"
        );
        assert!(share.stats().reply_out > 0, "taken again");
        client.disconnect();
        workers.shutdown(Duration::from_secs(2)).expect("shutdown");
    }
}
