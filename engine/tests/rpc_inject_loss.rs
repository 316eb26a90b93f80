//! A run with its connection dropped again and again (`Client::inject_loss`, what `bench
//! rpc --disconnect-every` does): with a retransmit policy every RPC completes exactly once
//! with its data, the requester reconnects and retransmits, and the built-in program's
//! execution count (`EXECUTIONS`) shows every XID ran, some of them twice (no duplicate
//! request cache).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use rpcrdma_engine::conn::{ConnConfig, RetransmitPolicy};
use rpcrdma_engine::dispatch::Dispatch;
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::loopback::soft_server;
use rpcrdma_engine::program::{self, Counts, EXECUTIONS};
use rpcrdma_engine::proto::rpc::{AuthSys, Gids, OpaqueAuth, AUTH_SYS};
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::worker::{WorkerConfig, Workers};

const STAMP: u32 = 0x5e7e_0001;
const RPCS: u64 = 600;
const DEPTH: u64 = 8;

#[test]
fn every_rpc_completes_once_across_severed_connections() {
    let cfg = ConnConfig {
        retransmit: Some(RetransmitPolicy {
            max_attempts: 50,
            attempt_timeout: Duration::from_millis(500),
            backoff: Duration::from_millis(1),
            ..RetransmitPolicy::default()
        }),
        ..config()
    };
    let mut d = Dispatch::new();
    program::register_counted(&mut d);
    let (mut server, addr) = soft_server(Arc::new(d), cfg).expect("server");
    let mut workers = Workers::start(&[WorkerConfig {
        core: None,
        max_conns: 64,
    }])
    .expect("workers");
    // The acceptor: every (re)connection goes to the worker.
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let acceptor = thread::spawn(move || {
        while !st.load(Ordering::Relaxed) {
            if let Ok(conn) = server.accept(Duration::from_millis(50)) {
                workers.assign(conn).expect("assign");
            }
        }
        workers
    });
    let device = Soft::open_device(None).expect("device");
    let mut client = Client::<Soft>::connect(&device, &addr, cfg).expect("connect");

    let mut body = [0u8; 64];
    let n = AuthSys {
        stamp: STAMP,
        machinename: b"sever",
        uid: 0,
        gid: 0,
        gids: Gids::default(),
    }
    .encode(&mut body)
    .expect("AUTH_SYS");
    let cred = OpaqueAuth {
        flavor: AUTH_SYS,
        body: &body[..n],
    };
    let echo = opaque(&pattern(4, 300));
    let mut call = CallArgs::new(PROG, VERS, ECHO, &echo, 400);
    call.cred = cred;
    call.timeout = Duration::from_secs(20);

    let mut completed = vec![0u32; RPCS as usize];
    let (mut next, mut done, mut bad) = (0u64, 0u64, 0u64);
    let (mut next_sever, mut severed) = (100u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < RPCS {
        assert!(Instant::now() < deadline, "{done} of {RPCS} completed");
        while next < RPCS && next - done < DEPTH && client.submit(&call, next).is_ok() {
            next += 1;
        }
        client.poll_completions(|c| {
            completed[c.tag as usize] += 1;
            done += 1;
            if !c.result.is_ok_and(|r| r.results == echo.as_slice()) {
                bad += 1;
            }
        });
        // Drop the connection every 100 completions, with Calls in flight.
        if done >= next_sever && done < RPCS && !client.is_reconnecting() && !client.is_dead() {
            client.inject_loss();
            severed += 1;
            next_sever += 100;
        }
    }
    assert_eq!(bad, 0, "every reply is the ECHO's data");
    assert!(
        completed.iter().all(|&n| n == 1),
        "each RPC completed exactly once"
    );
    let s = client.snapshot();
    assert_eq!(severed, 5);
    assert_eq!(
        s.reconnects, severed,
        "one reconnection per severed connection"
    );
    assert!(s.retransmits > 0, "retransmits: {}", s.retransmits);

    // The server counted every XID; the retransmitted ones that had already run, twice.
    let counts = client
        .call(
            &CallArgs::new(PROG, VERS, EXECUTIONS, &STAMP.to_be_bytes(), 16),
            |r| {
                r.map(|r| {
                    let w = |k: usize| program::word(r.results, 4 * k).unwrap_or(u32::MAX);
                    Counts {
                        xids: w(0),
                        executions: w(1),
                        repeated: w(2),
                        lost_track: w(3),
                    }
                })
            },
        )
        .expect("EXECUTIONS")
        .expect("EXECUTIONS answered");
    assert_eq!(counts.xids as u64, RPCS, "every XID ran: {counts:?}");
    // Every execution beyond the first of an XID is a retransmission's, and an XID that ran
    // more than once accounts for at least one of them.
    let extra = counts.executions - counts.xids;
    assert!(extra as u64 <= s.retransmits, "{counts:?} {s:?}");
    assert!(counts.repeated <= extra, "{counts:?}");
    assert_eq!(counts.lost_track, 0);
    client.disconnect();
    stop.store(true, Ordering::Relaxed);
    let workers = acceptor.join().expect("acceptor");
    workers.shutdown(Duration::from_secs(1)).expect("shutdown");
}
