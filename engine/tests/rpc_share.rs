//! The bulk memory a server's connections share (`pool::share`): an idle connection
//! registers only its receives; Calls take ring and bulk buffers from the server's share at
//! first use; the share stays within its bound; an RPC that finds it empty waits its turn
//! and completes, while other connections' RPCs that need no bulk memory keep completing;
//! waiting connections are served in turn; connections opened and closed leave nothing out.

mod common;

use common::*;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::requester::{CallArgs, Client, SubmitError};
use rpcrdma_engine::responder::{Server, ServerConn};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// 64 credits and 1 MiB of maximum I/O, the reference configuration.
fn nfs_config() -> ConnConfig {
    ConnConfig {
        credits: 64,
        initial_grant: 64,
        ..ConnConfig::default()
    }
}

fn server(cfg: ConnConfig) -> (Server<Soft>, SoftAddr) {
    soft_server(dispatch(), cfg).expect("server")
}

#[test]
fn an_idle_connection_registers_only_its_receives() {
    let cfg = nfs_config();
    let (mut srv, addr) = server(cfg);
    let (mut c, mut s) = connect_to(&mut srv, &addr, cfg).expect("connect");
    let idle = s.registered_bytes();
    // 67 receives of 4 KiB (credits and the spares) at their stride: within 512 KiB, where
    // each connection registered 12.6 MiB when it owned its bulk buffers.
    assert!(
        idle <= 512 * 1024,
        "{idle} bytes registered by an idle connection"
    );
    assert_eq!(s.shared_bytes(), 0);
    // Before any Call the share holds only the chunk of reply rings the server registered
    // when it started listening (`Share::prime_replies`), none of it lent out.
    let primed = srv.share_stats();
    assert!(
        primed.registered_bytes > 0
            && primed.registered_bytes == primed.reply_bytes
            && primed.reply_out == 0
            && primed.bulk_bytes == 0,
        "before a Call: {primed:?}"
    );
    // The idle connection holds its receives and nothing of the share; the primed chunk is
    // the server's headroom, counted in the per-connection average but not held.
    assert_eq!(primed.held_per_conn_bytes(), idle, "{primed:?}");
    assert!(primed.per_conn_bytes() > idle);
    // The first Call takes the ring and the connection's own buffers from the share; the
    // connection's own registration does not grow.
    assert!(call(
        &mut c,
        &mut s,
        &CallArgs::new(PROG, VERS, NULL, &[], 0),
        |r| r.result.is_ok()
    ));
    assert_eq!(s.registered_bytes(), idle);
    let (held, st) = (s.shared_bytes(), srv.share_stats());
    let entry = srv.share().config().reply_size as u64;
    assert!(
        held > 0 && held == u64::from(st.reply_out) * entry,
        "{held} held, {st:?}"
    );
    assert_eq!(
        srv.share_stats().bulk_bytes,
        0,
        "a NULL needs no bulk buffer"
    );
    assert_eq!(
        st.registered_bytes, primed.registered_bytes,
        "the first Call registers nothing: its ring came from the primed chunk"
    );
    // Now it holds its ring and its slots' buffers too, each at its registered stride (at
    // least the entry's size), and not all of the primed ones.
    assert!(
        st.lent_bytes >= held && st.lent_bytes < st.reply_bytes,
        "{held} held, {st:?}"
    );
    assert_eq!(st.held_per_conn_bytes(), idle + st.lent_bytes);
}

/// A 1 MiB WRITE's Call (its data in a Read chunk).
fn write_call<'a>(args: &'a [u8], data: &'a [u8]) -> CallArgs<'a> {
    let mut a = CallArgs::new(PROG, VERS, WRITE, args, 8);
    a.bulk_arg = Some(data);
    a
}

#[test]
fn nulls_keep_completing_while_another_connection_exhausts_the_share() {
    // The smallest share: three large buffers, what one Call may need.
    let cfg = ConnConfig {
        shared_bulk: 0,
        ..nfs_config()
    };
    let (mut srv, addr) = server(cfg);
    let (mut w, mut sw) = connect_to(&mut srv, &addr, cfg).expect("writer");
    let (mut n, mut sn) = connect_to(&mut srv, &addr, cfg).expect("nuller");
    let args = 12u32.to_be_bytes();
    let data = pattern(12, MIB);
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let (mut writes_next, mut writes_done, mut nulls, mut nulls_while_waiting) = (0u64, 0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while writes_done < 64 {
        assert!(Instant::now() < deadline, "{writes_done} WRITEs done");
        while writes_next < 64 && writes_next - writes_done < 16 {
            match w.submit(&write_call(&args, &data), writes_next) {
                Ok(_) => writes_next += 1,
                Err(SubmitError::WouldBlock) => break,
                Err(e) => panic!("submit: {e:?}"),
            }
        }
        let _ = n.submit(&null, 0);
        sw.poll();
        sn.poll();
        w.poll_completions(|c| {
            assert!(c.result.is_ok(), "WRITE {}: {:?}", c.tag, c.result.err());
            writes_done += 1;
        });
        let waiting = sw.snapshot().large_bulk_waits > 0 && writes_done < writes_next;
        n.poll_completions(|c| {
            assert!(c.result.is_ok());
            nulls += 1;
            if waiting {
                nulls_while_waiting += 1;
            }
        });
    }
    let st = srv.share_stats();
    assert!(st.bulk_bytes <= srv.share().config().bulk_limit, "{st:?}");
    assert!(
        sw.snapshot().large_bulk_waits > 0,
        "the WRITEs waited for the share"
    );
    assert!(
        nulls_while_waiting > 0,
        "{nulls} NULLs, none while WRITEs waited"
    );
    assert_eq!(sw.snapshot().err_chunk + sw.snapshot().system_err, 0);
}

#[test]
fn connections_waiting_for_the_share_are_served_in_turn() {
    let cfg = ConnConfig {
        shared_bulk: 0,
        ..nfs_config()
    };
    let (mut srv, addr) = server(cfg);
    let mut pairs: Vec<(Client<Soft>, ServerConn<Soft>)> = (0..3)
        .map(|_| connect_to(&mut srv, &addr, cfg).expect("connect"))
        .collect();
    let args = 12u32.to_be_bytes();
    let data = pattern(12, MIB);
    let mut done = [0u64; 3];
    let mut next = [0u64; 3];
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.iter().sum::<u64>() < 150 {
        assert!(Instant::now() < deadline, "{done:?} done");
        for (k, (c, s)) in pairs.iter_mut().enumerate() {
            while next[k] - done[k] < 8 {
                match c.submit(&write_call(&args, &data), next[k]) {
                    Ok(_) => next[k] += 1,
                    Err(SubmitError::WouldBlock) => break,
                    Err(e) => panic!("submit: {e:?}"),
                }
            }
            s.poll();
            c.poll_completions(|r| {
                assert!(r.result.is_ok());
                done[k] += 1;
            });
        }
    }
    // Each connection keeps eight 1 MiB WRITEs waiting for three large buffers: none is
    // starved, and none gets much more than its turn.
    let (min, max) = (*done.iter().min().unwrap(), *done.iter().max().unwrap());
    assert!(min * 2 >= max, "WRITEs done per connection: {done:?}");
}

#[test]
fn connections_opened_and_closed_leave_nothing_registered_or_out() {
    let cfg = nfs_config();
    let (mut srv, addr) = server(cfg);
    let args = 12u32.to_be_bytes();
    let data = pattern(12, 64 * 1024);
    let mut after_first = None;
    for round in 0..4 {
        let mut pairs: Vec<(Client<Soft>, ServerConn<Soft>)> = (0..25)
            .map(|_| connect_to(&mut srv, &addr, cfg).expect("connect"))
            .collect();
        for (c, s) in pairs.iter_mut() {
            assert!(call(c, s, &write_call(&args, &data), |r| r.result.is_ok()));
        }
        drop(pairs);
        let st = srv.share_stats();
        assert_eq!((st.reply_out, st.bulk_out), (0, 0), "round {round}: {st:?}");
        // The share's memory is reused: after the first round it does not grow.
        match after_first {
            None => after_first = Some(st.registered_bytes),
            Some(first) => assert_eq!(st.registered_bytes, first, "round {round}"),
        }
    }
}

#[test]
fn an_idle_connection_gives_its_ring_and_buffers_back_and_takes_them_again() {
    use rpcrdma_engine::responder::SHED_AFTER;
    let cfg = nfs_config();
    let (mut srv, addr) = server(cfg);
    let (mut c, mut s) = connect_to(&mut srv, &addr, cfg).expect("connect");
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    assert!(call(&mut c, &mut s, &null, |r| r.result.is_ok()));
    let held = s.shared_bytes();
    assert!(held > 0, "the first Call took the ring");
    let t0 = Instant::now();
    // The first look starts the quiet spell; before it has lasted, nothing goes back.
    assert!(!s.shed(t0));
    assert!(!s.shed(t0 + SHED_AFTER / 2));
    assert_eq!(s.shared_bytes(), held);
    // A Call in the spell starts it again.
    assert!(call(&mut c, &mut s, &null, |r| r.result.is_ok()));
    assert!(!s.shed(t0 + SHED_AFTER));
    let later = t0 + 3 * SHED_AFTER;
    // The last reply may be known sent only after a signaled request: the connection
    // posts one and gives its buffers back at a later look.
    let mut shed = false;
    for _ in 0..1000 {
        if s.shed(later) {
            shed = true;
            break;
        }
        s.poll();
        c.poll_completions(|_| {});
    }
    assert!(shed, "an idle connection at rest gives its buffers back");
    assert_eq!(s.shared_bytes(), 0);
    assert_eq!(srv.share_stats().reply_out, 0, "every ring entry is back");
    // The next Call takes them again and is answered.
    for _ in 0..3 {
        assert!(call(&mut c, &mut s, &null, |r| r.result.is_ok()));
    }
    assert_eq!(s.shared_bytes(), held);
    assert!(!s.is_dead());
}
