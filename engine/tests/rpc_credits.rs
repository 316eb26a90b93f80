//! Credits under load and grant changes (no RNR ever), remote against local invalidation,
//! timeouts, and a peer that disconnects mid-RPC.

mod common;

use common::*;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::loopback::{connect_to, soft_pair, soft_server};
use rpcrdma_engine::requester::{CallArgs, RpcError, SubmitError};
use std::time::Duration;

#[test]
fn credits_follow_grant_changes_without_rnr() {
    let (mut c, mut s) = soft_pair(dispatch(), config(), config()).unwrap();
    let args = opaque(&pattern(1, 200));
    let a = CallArgs::new(PROG, VERS, ECHO, &args, args.len() as u32);
    let grants = [1u32, 2, 5, 32, 3, 16, 1, 32];
    let mut submitted = 0u64;
    let mut completed = 0u64;
    let mut max_seen = 0;
    for (round, &g) in grants.iter().enumerate() {
        s.set_grant(g);
        for _ in 0..2000 {
            loop {
                let before = c.credits();
                match c.submit(&a, round as u64) {
                    Ok(_) => {
                        // RFC 8166 §3.3.1: never beyond min(requested, granted) in flight.
                        assert!(before.in_flight() < before.requested().min(before.granted()));
                        submitted += 1;
                        max_seen = max_seen.max(c.credits().in_flight());
                    }
                    Err(SubmitError::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            s.poll();
            c.poll_completions(|comp| {
                assert_eq!(comp.result.unwrap().results, &args[..]);
                completed += 1;
            });
        }
    }
    while completed < submitted {
        s.poll();
        c.poll_completions(|_| completed += 1);
    }
    let st = s.snapshot();
    assert_eq!(st.conn_lost + st.wc_errors, 0, "no RNR, no error");
    assert_eq!(
        st.credit_overruns, 0,
        "never more Calls in process than granted"
    );
    assert!(submitted > 1000);
    assert_eq!(max_seen, 32, "the full grant was used");
}

#[test]
fn remote_invalidation_when_negotiated_local_otherwise() {
    let read_args = [5000u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let mut a = CallArgs::new(PROG, VERS, READ, &read_args, 4);
    a.bulk_results = &[5000];
    for swi in [true, false] {
        let cfg = ConnConfig {
            remote_invalidation: swi,
            ..config()
        };
        let (mut c, mut s) = soft_pair(dispatch(), cfg, config()).unwrap();
        assert_eq!(c.negotiation().remote_invalidation(), swi);
        for _ in 0..20 {
            let ok = call(&mut c, &mut s, &a, |comp| {
                comp.result.unwrap().bulk()[0] == pattern(4, 5000)
            });
            assert!(ok);
        }
        let st = c.snapshot();
        assert_eq!(st.registrations, 20);
        if swi {
            assert_eq!((st.remote_invalidations, st.local_invalidations), (20, 0));
        } else {
            assert_eq!((st.remote_invalidations, st.local_invalidations), (0, 20));
        }
    }
}

#[test]
fn timeouts_invalidate_and_other_connections_keep_working() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let (mut c1, _s1) = connect_to(&mut srv, &addr, config()).unwrap();
    let (mut c2, mut s2) = connect_to(&mut srv, &addr, config()).unwrap();
    // c1's server is never polled: the RPC times out; its window is invalidated first.
    let read_args = [100u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let mut a = CallArgs::new(PROG, VERS, READ, &read_args, 4);
    a.bulk_results = &[100];
    a.timeout = Duration::from_millis(50);
    let r = c1.call(&a, |r| r.map(|_| ()));
    assert_eq!(r.unwrap(), Err(RpcError::Timeout));
    assert_eq!(c1.snapshot().timeouts, 1);
    assert_eq!(c1.snapshot().local_invalidations, 1);
    assert_eq!(c1.in_flight(), 1, "the timed-out RPC keeps its credit");
    // c2 is unaffected.
    let ok = call(&mut c2, &mut s2, &a, |comp| {
        comp.result.unwrap().bulk()[0].len()
    });
    assert_eq!(ok, 100);
}

#[test]
fn peer_disconnect_mid_rpc_completes_pending_with_errors() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let (mut c1, mut s1) = connect_to(&mut srv, &addr, config()).unwrap();
    let (mut c2, mut s2) = connect_to(&mut srv, &addr, config()).unwrap();
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    call(&mut c1, &mut s1, &null, |comp| {
        comp.result.unwrap().is_success()
    });
    let mut sent = 0;
    while c1.submit(&null, 1).is_ok() {
        sent += 1;
    }
    assert!(sent > 1);
    s1.disconnect();
    let mut lost = 0;
    for _ in 0..1000 {
        c1.poll_completions(|comp| {
            assert_eq!(comp.result.unwrap_err(), RpcError::ConnectionLost);
            lost += 1;
        });
        if c1.is_dead() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(lost, sent, "every pending RPC completed with an error");
    assert!(matches!(
        c1.submit(&null, 1),
        Err(SubmitError::Disconnected)
    ));
    // The other connection keeps working.
    assert!(call(&mut c2, &mut s2, &null, |comp| comp
        .result
        .unwrap()
        .is_success()));
    // Reconnect and retransmit on a fresh connection.
    let addr2 = addr.clone();
    let t = std::thread::spawn(move || {
        c1.reconnect().unwrap();
        c1
    });
    let mut s3 = srv.accept(Duration::from_secs(5)).unwrap();
    let mut c1 = t.join().unwrap();
    let _ = addr2;
    assert!(call(&mut c1, &mut s3, &null, |comp| comp
        .result
        .unwrap()
        .is_success()));
}

/// A graceful close waits for the replies it posted: unsignaled replies stay outstanding
/// until a signaled request behind them completes (on a NIC, posting is not sending, and a
/// close would flush what is still queued), so `settle` posts a signaled zero-length RDMA
/// Write, invisible to the peer, after which nothing is outstanding and the connection is
/// no longer busy.
#[test]
fn settling_makes_every_posted_reply_known_sent() {
    use rpcrdma_engine::worker::Drive;
    let (mut c, mut s) = soft_pair(dispatch(), config(), config()).unwrap();
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let mut done = 0;
    for _ in 0..3 {
        call(&mut c, &mut s, &null, |x| {
            assert!(x.result.unwrap().is_success());
            done += 1;
        });
    }
    assert_eq!(done, 3);
    assert_eq!(s.in_process(), 0);
    assert_eq!(s.sends_outstanding(), 3, "three unsignaled replies");
    assert!(Drive::busy(&s), "a close now could lose them on a NIC");
    for _ in 0..1000 {
        s.poll();
        Drive::settle(&mut s);
        if s.sends_outstanding() == 0 {
            break;
        }
    }
    assert_eq!(s.sends_outstanding(), 0);
    assert!(!Drive::busy(&s));
    // Nothing more is posted once settled, and the peer saw nothing of it.
    Drive::settle(&mut s);
    s.poll();
    assert_eq!(s.sends_outstanding(), 0);
    for _ in 0..100 {
        c.poll_completions(|x| panic!("completion {}", x.xid));
    }
    let more = call(&mut c, &mut s, &null, |x| x.result.unwrap().is_success());
    assert!(more, "the connection carries on");
    assert_eq!(s.snapshot().wc_errors + s.snapshot().conn_lost, 0);
}
