//! A server's connections taking their receives from one shared receive queue
//! (`ConnConfig::srq`, `pool::srq`): an idle connection costs a few receives of the queue,
//! every message form is served, grants grow as a connection's Calls fill them, a
//! connection that sends beyond its grant is ended while the others keep being served, and
//! connections opened and closed by the thousand leave the queue as it was.

mod common;
mod raw;

use common::*;
use rpcrdma_engine::conn::{ConnConfig, Registration};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::pool::share::STUB_SIZE;
use rpcrdma_engine::requester::{CallArgs, Client, SubmitError};
use rpcrdma_engine::responder::{Server, ServerConn};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn srq_config() -> ConnConfig {
    ConnConfig {
        credits: 64,
        initial_grant: 64,
        srq: true,
        ..ConnConfig::default()
    }
}

fn server(cfg: ConnConfig) -> (Server<Soft>, SoftAddr) {
    soft_server(dispatch(), cfg).expect("server")
}

fn null() -> CallArgs<'static> {
    CallArgs::new(PROG, VERS, NULL, &[], 0)
}

#[test]
fn an_idle_connection_on_the_shared_receive_queue_costs_under_64_kib() {
    let cfg = srq_config();
    let (mut srv, addr) = server(cfg);
    let (mut c, mut s) = connect_to(&mut srv, &addr, cfg).expect("connect");
    assert_eq!(
        s.grant(),
        cfg.srq_grant,
        "a connection starts with srq_grant"
    );
    // Its own registration (none), the share's placeholders its slots hold (64 bytes
    // each), and its share of the queue's receives (its grant and spares, at the receive
    // buffers' stride).
    assert_eq!(
        s.registered_bytes(),
        0,
        "a connection on the queue registers nothing"
    );
    let stubs = u64::from(srv.share_stats().stubs_out) * STUB_SIZE as u64;
    let stride = (cfg.recv_size as u64 + 64).next_multiple_of(64);
    let cost = stubs + u64::from(s.shared_receives()) * stride;
    assert!(
        stubs > 0 && cost <= 64 * 1024,
        "{cost} bytes for an idle connection"
    );
    assert!(call(&mut c, &mut s, &null(), |r| r.result.is_ok()));
    let st = srv.share_stats();
    assert_eq!((st.conns, st.srq_reserved), (1, s.shared_receives()));
}

/// Issue 33: accepting on the shared receive queue registers nothing. The queue's headroom
/// and a chunk of placeholders are registered when the server starts; the first
/// connections take from them, and the share grows by a chunk only when they run out. The
/// completion queue is made before the request comes.
#[test]
fn accepting_on_the_shared_receive_queue_registers_nothing() {
    let cfg = srq_config();
    let (mut srv, addr) = server(cfg);
    let at_start = srv.share_stats();
    assert!(
        at_start.stub_bytes > 0 && at_start.srq_bytes > 0,
        "{at_start:?}"
    );
    let mut pairs = Vec::new();
    for k in 0..8 {
        // The completion queue is made ahead: at listen, then before waiting for the next
        // request.
        assert!(srv.cq_ready(), "accept {k}: no completion queue made ahead");
        pairs.push(connect_to(&mut srv, &addr, cfg).expect("connect"));
        assert!(!srv.cq_ready(), "accept {k} took the queue made ahead");
        assert!(srv.accept(Duration::from_millis(1)).is_err(), "no request");
        let st = srv.share_stats();
        assert_eq!(
            (st.grown, st.total_bytes(), st.conn_bytes),
            (at_start.grown, at_start.total_bytes(), 0),
            "accept {k} registered memory: {st:?}"
        );
    }
    // What each idle connection holds: its reserved receives and its slots' placeholders,
    // within the 64 KiB; the rest is the server's headroom.
    let st = srv.share_stats();
    let each = st.held_per_conn_bytes();
    assert!(
        each > 0 && each <= 64 * 1024 && each == (st.srq_reserved_bytes + st.lent_bytes) / 8,
        "{each} bytes held by each idle connection: {st:?}"
    );
    // Every slot holds a placeholder of its own: 8 connections' worth are out.
    let held = srv.share_stats().stubs_out;
    assert_eq!(held % 8, 0);
    assert!(held >= 8 * cfg.credits, "{held} placeholders out");
    for (c, s) in pairs.iter_mut() {
        assert!(call(c, s, &null(), |r| r.result.is_ok()));
    }
    drop(pairs);
    assert_eq!(srv.share_stats().stubs_out, 0, "placeholders given back");
}

/// Issue 33: on the shared receive queue a connection's reply ring follows its grant
/// (twice the grant, 8 to 64 entries): a client with one Call in flight holds 16 entries
/// of the share, not 64, and the ring grows as the grant does. Many more Calls than entries
/// are answered (entries are used again once a signaled reply retires them).
#[test]
fn the_reply_ring_follows_the_grant() {
    let cfg = srq_config();
    let (mut srv, addr) = server(cfg);
    let (mut c, mut s) = connect_to(&mut srv, &addr, cfg).expect("connect");
    for _ in 0..100 {
        assert!(call(&mut c, &mut s, &null(), |r| r.result.is_ok()));
    }
    assert_eq!(
        s.grant(),
        cfg.srq_grant,
        "one Call at a time raises no grant"
    );
    assert_eq!(s.reply_ring_len(), 2 * cfg.srq_grant as usize);
    mixed(&mut c, &mut s, 400, 32);
    assert!(
        s.grant() > cfg.srq_grant,
        "32 Calls in flight raise the grant"
    );
    assert_eq!(s.reply_ring_len(), (2 * s.grant() as usize).clamp(8, 64));
    for _ in 0..100 {
        assert!(call(&mut c, &mut s, &null(), |r| r.result.is_ok()));
    }
    assert_eq!(s.snapshot().conn_lost, 0);
}

/// The Calls of a mixed load: READ and WRITE of 1 MiB, a Long ECHO (Long Call and Long
/// reply), a READ of 8 KiB and a NULL; every result checked.
fn mixed(c: &mut Client<Soft>, s: &mut ServerConn<Soft>, total: u64, depth: u64) {
    let read_big = [(MIB as u32).to_be_bytes(), 11u32.to_be_bytes()].concat();
    let read_small = [8192u32.to_be_bytes(), 14u32.to_be_bytes()].concat();
    let write_args = 12u32.to_be_bytes();
    let write_data = pattern(12, MIB);
    let echo = opaque(&pattern(13, 200 * 1024));
    let calls: Vec<CallArgs<'_>> = (0..5)
        .map(|k| match k {
            0 => {
                let mut a = CallArgs::new(PROG, VERS, READ, &read_big, 4);
                a.bulk_results = &[MIB as u32];
                a
            }
            1 => {
                let mut a = CallArgs::new(PROG, VERS, WRITE, &write_args, 8);
                a.bulk_arg = Some(&write_data);
                a
            }
            2 => CallArgs::new(PROG, VERS, ECHO, &echo, echo.len() as u32),
            3 => {
                let mut a = CallArgs::new(PROG, VERS, READ, &read_small, 4);
                a.bulk_results = &[8192];
                a
            }
            _ => null(),
        })
        .collect();
    let (big, small, echoed) = (pattern(11, MIB), pattern(14, 8192), pattern(13, 200 * 1024));
    let (mut next, mut done) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    while done < total {
        assert!(Instant::now() < deadline, "{done} of {total} done");
        while next < total && next - done < depth {
            match c.submit(&calls[(next % 5) as usize], next) {
                Ok(_) => next += 1,
                Err(SubmitError::WouldBlock) => break,
                Err(e) => panic!("submit {next}: {e:?}"),
            }
        }
        s.poll();
        c.poll_completions(|comp| {
            done += 1;
            let r = comp
                .result
                .as_ref()
                .unwrap_or_else(|e| panic!("RPC {}: {e:?}", comp.tag));
            let ok = match comp.tag % 5 {
                0 => r.bulk()[0] == big.as_slice(),
                1 => r.results.get(..4) == Some(&1u32.to_be_bytes()[..]),
                2 => r.results.get(4..4 + echoed.len()) == Some(echoed.as_slice()),
                3 => r.bulk()[0] == small.as_slice(),
                _ => true,
            };
            assert!(ok, "RPC {} answered wrong", comp.tag);
        });
    }
}

#[test]
fn every_form_is_served_from_the_shared_receive_queue_and_grants_grow_with_the_calls() {
    for registration in [Registration::Windows, Registration::Persistent] {
        let cfg = ConnConfig {
            registration,
            ..srq_config()
        };
        let (mut srv, addr) = server(cfg);
        let (mut c, mut s) = connect_to(&mut srv, &addr, cfg).expect("connect");
        mixed(&mut c, &mut s, 300, 32);
        let snap = s.snapshot();
        assert!(s.grant() >= 32, "{registration:?}: grant {}", s.grant());
        assert!(snap.grants_raised > 0);
        assert_eq!(
            snap.credit_overruns + snap.conn_lost + snap.err_chunk,
            0,
            "{snap:?}"
        );
        assert!(snap.long_calls > 0 && snap.long_replies > 0 && snap.chunked_calls > 0);
        // The receives reserved are the grant's, the spares' and no more.
        assert_eq!(srv.share_stats().srq_reserved, s.shared_receives());
    }
}

#[test]
fn a_connection_sending_beyond_its_grant_is_ended_while_the_others_are_served() {
    let cfg = ConnConfig {
        srq_grant: 4,
        ..srq_config()
    };
    let (mut srv, addr) = server(cfg);
    let (mut good, mut sg) = connect_to(&mut srv, &addr, cfg).expect("connect");
    let flood_addr = addr.clone();
    let t = std::thread::spawn(move || raw::RawClient::connect(&flood_addr, 64));
    let mut sf = srv
        .accept(Duration::from_secs(5))
        .expect("accept the flooder");
    let mut flooder = t.join().expect("raw connect");
    // Forty NULL Calls without waiting for a reply: ten times its grant of 4.
    for xid in 0..40 {
        assert_eq!(
            flooder.send(&raw::null_call(100 + xid)),
            rpcrdma_engine::fabric::WcStatus::Success
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sf.is_dead() {
        assert!(Instant::now() < deadline, "the flooder was not ended");
        sf.poll();
    }
    assert!(sf.snapshot().credit_overruns > 0);
    // The well-behaved connection is served all along.
    for _ in 0..200 {
        assert!(call(&mut good, &mut sg, &null(), |r| r.result.is_ok()));
        sf.poll();
    }
    let reserved_before = srv.share_stats().srq_reserved;
    drop(sf);
    let st = srv.share_stats();
    assert!(
        st.srq_reserved < reserved_before,
        "the flooder's reservation went back"
    );
    assert_eq!(sg.snapshot().conn_lost, 0);
}

#[test]
fn a_thousand_connections_opened_and_closed_leave_the_queue_as_it_was() {
    let cfg = srq_config();
    let (mut srv, addr) = server(cfg);
    let args = 12u32.to_be_bytes();
    let data = pattern(12, 64 * 1024);
    let mut write = CallArgs::new(PROG, VERS, WRITE, &args, 8);
    write.bulk_arg = Some(&data);
    let mut after_first = None;
    for round in 0..10 {
        let mut pairs: Vec<(Client<Soft>, ServerConn<Soft>)> = (0..100)
            .map(|_| connect_to(&mut srv, &addr, cfg).expect("connect"))
            .collect();
        for (c, s) in pairs.iter_mut() {
            assert!(call(c, s, &null(), |r| r.result.is_ok()));
            assert!(call(c, s, &write, |r| r.result.is_ok()));
        }
        assert_eq!(srv.share_stats().conns, 100);
        drop(pairs);
        let st = srv.share_stats();
        assert_eq!(
            (
                st.conns,
                st.conn_bytes,
                st.srq_reserved,
                st.reply_out,
                st.bulk_out,
                st.stubs_out
            ),
            (0, 0, 0, 0, 0, 0),
            "round {round}: {st:?}"
        );
        // Registered memory is reused, not added to, after the first hundred.
        match after_first {
            None => after_first = Some(st.total_bytes()),
            Some(first) => assert_eq!(st.total_bytes(), first, "round {round}"),
        }
    }
}

/// With a queue per worker, connections take the least loaded queue (alternating here),
/// say so through `home`, and are served from it; each queue's reservations come back.
#[test]
fn connections_spread_over_one_shared_receive_queue_per_worker() {
    let cfg = ConnConfig {
        srq_queues: 2,
        ..srq_config()
    };
    let (mut srv, addr) = server(cfg);
    let mut pairs: Vec<(Client<Soft>, ServerConn<Soft>)> = (0..4)
        .map(|_| connect_to(&mut srv, &addr, cfg).expect("connect"))
        .collect();
    let homes: Vec<Option<usize>> = pairs.iter().map(|(_, s)| s.home()).collect();
    assert_eq!(homes, [Some(0), Some(1), Some(0), Some(1)]);
    for (c, s) in pairs.iter_mut() {
        for _ in 0..3 {
            assert!(call(c, s, &null(), |r| r.result.is_ok()));
        }
    }
    let per_conn = pairs[0].1.shared_receives();
    assert_eq!(srv.share_stats().srq_reserved, 4 * per_conn);
    drop(pairs);
    assert_eq!(srv.share_stats().srq_reserved, 0);
    // Without the shared queues a connection has no home.
    let (mut plain, addr) = server(ConnConfig { srq: false, ..cfg });
    let (_c, s) = connect_to(&mut plain, &addr, ConnConfig { srq: false, ..cfg }).unwrap();
    assert_eq!(s.home(), None);
}
