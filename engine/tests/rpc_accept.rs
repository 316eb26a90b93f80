//! Looking at a connection request before accepting it (`Server::accept_if`): a request the
//! filter refuses is rejected at the connection manager before any of the connection's
//! resources are made, the server says `ConnError::Refused`, and the client's connect fails
//! with the reject at once; a request the filter admits is accepted and served. On the soft
//! fabric, whose requests carry no peer address (`ConnRequest::peer_addr` is `None`); the
//! verbs side runs in the QEMU guest (`make vm-test`). Every wait is bounded.

mod common;

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use rpcrdma_engine::conn::{ConnConfig, ConnError};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::{ConnectError, Provider};
use rpcrdma_engine::loopback::soft_server;
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::responder::ServerConn;

/// How long any one step may take.
const WAIT: Duration = Duration::from_secs(5);

/// A client connecting to `addr` from a thread of its own, giving up after [`WAIT`].
fn connecting(addr: &SoftAddr) -> JoinHandle<Result<Client<Soft>, ConnError>> {
    let addr = addr.clone();
    std::thread::spawn(move || {
        let device = Soft::open_device(None)?;
        let cfg = ConnConfig {
            connect_timeout: WAIT,
            ..config()
        };
        Client::<Soft>::connect(&device, &addr, cfg)
    })
}

/// The client `t` once its connect ends, the server's side polled meanwhile (a version 2
/// client's connect waits for the answer to its opening).
fn connected(
    t: JoinHandle<Result<Client<Soft>, ConnError>>,
    s: &mut ServerConn<Soft>,
) -> Client<Soft> {
    let deadline = Instant::now() + WAIT;
    while !t.is_finished() {
        s.poll();
        assert!(
            Instant::now() < deadline,
            "the client's connect did not end"
        );
    }
    t.join().expect("client thread").expect("connect")
}

#[test]
fn a_refused_request_is_rejected_and_the_next_admitted_one_served() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();

    // Refused: the filter is asked once, with no address on soft; the server says Refused,
    // the client's connect fails with the reject (not its timeout).
    let started = Instant::now();
    let t = connecting(&addr);
    let mut asked = Vec::new();
    let refused = srv.accept_if(WAIT, |peer| {
        asked.push(peer);
        false
    });
    match refused {
        Err(ConnError::Refused { peer: None }) => {}
        other => panic!("expected Refused, got {:?}", other.map(|_| ())),
    }
    assert_eq!(asked, [None]);
    match t.join().expect("client thread") {
        Err(ConnError::Connect(ConnectError::Rejected(_))) => {}
        other => panic!("expected the server's reject, got {:?}", other.map(|_| ())),
    }
    assert!(
        started.elapsed() < WAIT,
        "the client learnt of the reject at once: {:?}",
        started.elapsed()
    );

    // Admitted: the same listener accepts the next request, which is served.
    let t = connecting(&addr);
    let mut s = srv
        .accept_if(WAIT, |peer| peer.is_none())
        .expect("admitted");
    assert_eq!(s.peer_addr(), None);
    let mut c = connected(t, &mut s);
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    for _ in 0..3 {
        assert!(call(&mut c, &mut s, &null, |x| x
            .result
            .unwrap()
            .is_success()));
    }

    // And a plain `accept` still takes whatever comes.
    let t = connecting(&addr);
    let mut s = srv.accept(WAIT).expect("accept");
    let mut c = connected(t, &mut s);
    assert!(call(&mut c, &mut s, &null, |x| x
        .result
        .unwrap()
        .is_success()));
}

#[test]
fn with_no_request_accept_if_times_out_without_asking() {
    let (mut srv, _addr) = soft_server(dispatch(), config()).unwrap();
    let started = Instant::now();
    let r = srv.accept_if(Duration::from_millis(50), |_| panic!("no request to judge"));
    match r {
        Err(ConnError::Connect(ConnectError::Timeout)) => {}
        other => panic!("expected a timeout, got {:?}", other.map(|_| ())),
    }
    assert!(started.elapsed() < WAIT);
}

#[test]
fn a_refusal_names_the_address_refused() {
    let v4: SocketAddr = "192.0.2.7:20049".parse().unwrap();
    let v6: SocketAddr = "[2001:db8::1]:20049".parse().unwrap();
    for (peer, shown) in [
        (Some(v4), "192.0.2.7:20049"),
        (Some(v6), "[2001:db8::1]:20049"),
        (None, "no peer address"),
    ] {
        let msg = ConnError::Refused { peer }.to_string();
        assert!(msg.contains("refused") && msg.contains(shown), "{msg}");
    }
}
