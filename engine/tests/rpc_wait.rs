//! A worker that waits for events between RPCs (`Workers::set_wait`) on the soft fabric:
//! the completion queue's notification (its eventfd, rung by the peer's Send) wakes it for
//! every Call that arrives while it waits — echoes of each form (Short, a Read chunk's pull,
//! Write chunks), a client in the same process — and it sleeps, not spins, in between.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::loopback::soft_server;
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::worker::{WorkerConfig, Workers};

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn calls_wake_a_waiting_worker_through_the_completion_queue() {
    let cfg = config();
    let (mut server, addr) = soft_server(dispatch(), cfg).expect("server");
    let mut workers = Workers::start(&[WorkerConfig {
        core: None,
        max_conns: 4,
    }])
    .expect("workers");
    workers.set_wait(Some(Duration::from_micros(200)));
    // No wait ends by its limit: each Call must wake the worker through the completion
    // queue's notification (one lost hangs the call until it fails).
    workers.set_wait_limit(Duration::from_secs(600));
    let device = Soft::open_device(None).expect("device");
    let acceptor = thread::spawn(move || {
        let conn = server.accept(Duration::from_secs(10)).expect("accept");
        workers.assign(conn).expect("assign");
        workers
    });
    let mut client = Client::<Soft>::connect(&device, &addr, cfg).expect("connect");
    let workers = acceptor.join().expect("acceptor");
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
