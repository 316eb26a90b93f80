//! `rpcrdma serve --max-conns N` on the soft fabric: with N connections live, the next
//! request is rejected at the connection manager (the client's connect fails with the
//! reject, `rpcrdma call` says the server refused the connection), serve logs one line per
//! refusal and counts them (`refused_max_conns`); once a client has gone and its worker has
//! dropped the connection, a new one is accepted again. Every wait is bounded.

#[path = "serve_common/mod.rs"]
mod serve_common;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::conn::{ConnConfig, ConnError};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr, SoftDevice};
use rpcrdma_engine::fabric::{ConnectError, Provider};
use rpcrdma_engine::program::{NULL, PROG, VERS};
use rpcrdma_engine::requester::{CallArgs, Client};
use serve_common::{run_bounded, serial, ServerProc};

/// How long one connect, one call or one command may take.
const STEP: Duration = Duration::from_secs(5);
/// How long the server may take to start, and to drop a connection whose client left.
const SETTLE: Duration = Duration::from_secs(15);

fn config() -> ConnConfig {
    ConnConfig {
        connect_timeout: STEP,
        ..ConnConfig::default()
    }
}

/// One connect attempt.
fn connect(device: &SoftDevice, addr: &SoftAddr) -> Result<Client<Soft>, ConnError> {
    Client::<Soft>::connect(device, addr, config())
}

/// Whether `r` is the server's reject.
fn rejected(r: &Result<Client<Soft>, ConnError>) -> bool {
    matches!(r, Err(ConnError::Connect(ConnectError::Rejected(_))))
}

/// A NULL call on `c` is answered.
fn null_ok(c: &mut Client<Soft>, what: &str) {
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let ok = c
        .call(&null, |r| r.map(|r| r.is_success()))
        .unwrap_or_else(|e| panic!("{what}: NULL failed: {e:?}"));
    assert_eq!(ok, Ok(true), "{what}: NULL answered with an error");
}

#[test]
fn max_conns_refuses_past_the_limit_and_admits_again_once_one_goes() {
    let _one_server = serial();
    let name = format!("rpcrdma-max-conns-test.{}", std::process::id());
    let mut server = ServerProc::spawn(&name, 120, ["--max-conns", "2"], Vec::new());
    let addr = server.soft_addr();
    let device = Soft::open_device(None).expect("soft device");
    // Rejections this test saw: each is one refusal the server must have counted.
    let mut rejections = 0u64;

    // The first client, once the server listens.
    let deadline = Instant::now() + SETTLE;
    let mut first = loop {
        server.assert_alive("starting");
        match connect(&device, &addr) {
            Ok(c) => break c,
            Err(e) => assert!(Instant::now() < deadline, "server never ready: {e}"),
        }
        thread::sleep(Duration::from_millis(50));
    };
    null_ok(&mut first, "the first client");
    let mut second = connect(&device, &addr).expect("the second client is accepted");
    null_ok(&mut second, "the second client");

    // The third is refused at once with the reject, and serve says why.
    let started = Instant::now();
    let third = connect(&device, &addr);
    assert!(
        rejected(&third),
        "the third client is rejected: {:?}",
        third.as_ref().map(|_| ())
    );
    rejections += 1;
    assert!(
        started.elapsed() < STEP,
        "the reject came at once, not after a timeout: {:?}",
        started.elapsed()
    );
    let line = "rpcrdma serve: refused a connection from a soft peer: 2 connections already \
                (--max-conns 2)";
    let deadline = Instant::now() + STEP;
    while !server.log_text().contains(line) {
        assert!(
            Instant::now() < deadline,
            "no refusal line in serve's log:\n{}",
            server.log_text()
        );
        thread::sleep(Duration::from_millis(20));
    }

    // `rpcrdma call` says the server refused the connection.
    let (st, out, err) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_rpcrdma")).args(["call", "--connect", &server.addr]),
        Duration::from_secs(30),
    );
    rejections += 1;
    assert!(!st.success(), "call succeeded past the limit: {out}");
    assert!(
        err.contains("the server refused the connection"),
        "call's error: {err}"
    );

    // The connections held were not disturbed.
    null_ok(&mut first, "the first client after the refusals");
    null_ok(&mut second, "the second client after the refusals");

    // One goes; once its worker has dropped it (at housekeeping), a new client is accepted.
    second.disconnect();
    drop(second);
    let deadline = Instant::now() + SETTLE;
    let mut again = loop {
        server.assert_alive("after a client left");
        let r = connect(&device, &addr);
        if rejected(&r) {
            rejections += 1;
            assert!(
                Instant::now() < deadline,
                "still refused {SETTLE:?} after a client left"
            );
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        break r.expect("a new client once one has gone");
    };
    null_ok(&mut again, "the client accepted again");
    null_ok(&mut first, "the first client at the end");
    first.disconnect();
    again.disconnect();

    let stats = server.terminate("the end");
    assert_eq!(
        stats["refused_max_conns"], rejections,
        "every refusal counted once: {stats}"
    );
    let log = server.log_text();
    assert_eq!(
        log.matches("rpcrdma serve: refused a connection").count() as u64,
        rejections,
        "one log line per refusal:\n{log}"
    );
}
