//! `Client::cork`: Short Calls' Sends held back and posted together, in submission order,
//! at `uncork`, at the next poll, before any other kind of Call, or when 32 are held.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::responder::ServerConn;

fn pair(credits: u32) -> (Client<Soft>, ServerConn<Soft>) {
    let cfg = ConnConfig {
        credits,
        initial_grant: credits,
        bulk_size: 128 << 10,
        ..config()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    // The first reply brings the grant: from then on `credits` Calls may be in flight.
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    assert!(call(&mut c, &mut s, &null, |comp| comp
        .result
        .unwrap()
        .is_success()));
    (c, s)
}

/// Drives both ends until `n` RPCs completed; returns each tag's echoed payload (or the
/// WRITE's verified length).
fn drive_n(c: &mut Client<Soft>, s: &mut ServerConn<Soft>, n: usize) -> BTreeMap<u64, Vec<u8>> {
    drive_n_ordered(c, s, n).0
}

/// [`drive_n`], also returning the tags in the order their replies arrived.
fn drive_n_ordered(
    c: &mut Client<Soft>,
    s: &mut ServerConn<Soft>,
    n: usize,
) -> (BTreeMap<u64, Vec<u8>>, Vec<u64>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = BTreeMap::new();
    let mut order = Vec::new();
    while got.len() < n {
        s.poll();
        c.poll_completions(|comp| {
            let r = comp.result.expect("reply");
            assert!(r.is_success(), "tag {}", comp.tag);
            got.insert(comp.tag, r.results.to_vec());
            order.push(comp.tag);
        });
        assert!(Instant::now() < deadline, "{} of {n} in 10 s", got.len());
    }
    (got, order)
}

fn echo_args(tag: u64) -> Vec<u8> {
    opaque(&pattern(tag as u32, 4 + tag as usize % 61))
}

/// Lets the server poll a while: it must see nothing that is still held back.
fn server_sees_nothing(s: &mut ServerConn<Soft>, rpcs_before: u64) {
    for _ in 0..1000 {
        s.poll();
    }
    assert_eq!(s.snapshot().rpcs, rpcs_before, "a held-back Call was sent");
}

#[test]
fn held_back_until_uncork_then_all_answered() {
    let (mut c, mut s) = pair(32);
    let before = s.snapshot().rpcs;
    let args: Vec<Vec<u8>> = (0..20).map(echo_args).collect();
    c.cork();
    for (tag, a) in args.iter().enumerate() {
        c.submit(&CallArgs::new(PROG, VERS, ECHO, a, 256), tag as u64)
            .expect("submit");
    }
    assert_eq!(c.in_flight(), 20);
    server_sees_nothing(&mut s, before);
    c.uncork();
    let got = drive_n(&mut c, &mut s, 20);
    for (tag, a) in args.iter().enumerate() {
        assert_eq!(&got[&(tag as u64)], a, "tag {tag}");
    }
    assert_eq!(s.snapshot().rpcs, before + 20);
}

#[test]
fn a_poll_posts_what_is_held() {
    let (mut c, mut s) = pair(32);
    let before = s.snapshot().rpcs;
    c.cork();
    for tag in 0..3 {
        c.submit(&CallArgs::new(PROG, VERS, ECHO, &echo_args(tag), 256), tag)
            .expect("submit");
    }
    server_sees_nothing(&mut s, before);
    // Still corked: the poll posts them anyway, so a caller that forgets to uncork is only
    // late, never stuck.
    let got = drive_n(&mut c, &mut s, 3);
    for tag in 0..3 {
        assert_eq!(got[&tag], echo_args(tag), "tag {tag}");
    }
    // Still corked: later Calls are held again until the next poll.
    c.submit(&CallArgs::new(PROG, VERS, NULL, &[], 0), 9)
        .expect("submit");
    server_sees_nothing(&mut s, before + 3);
    drive_n(&mut c, &mut s, 1);
    c.uncork();
}

#[test]
fn chunked_calls_and_more_than_32_keep_their_order() {
    let (mut c, mut s) = pair(64);
    let before = s.snapshot().rpcs;
    let data = pattern(65_536, 65_536);
    let seed = 65_536u32.to_be_bytes();
    c.cork();
    // 40 Short Calls (the 33rd posts the first 32), a Call with a Read chunk in the middle
    // (posts what is held before its window binds), then more Short Calls.
    for tag in 0..40 {
        c.submit(&CallArgs::new(PROG, VERS, ECHO, &echo_args(tag), 256), tag)
            .expect("submit");
    }
    let mut w = CallArgs::new(PROG, VERS, WRITE, &seed, 8);
    w.bulk_arg = Some(&data);
    c.submit(&w, 100).expect("submit chunked");
    for tag in 40..50 {
        c.submit(&CallArgs::new(PROG, VERS, ECHO, &echo_args(tag), 256), tag)
            .expect("submit");
    }
    c.uncork();
    let (got, order) = drive_n_ordered(&mut c, &mut s, 51);
    for tag in 0..50 {
        assert_eq!(got[&tag], echo_args(tag), "tag {tag}");
    }
    // The Short Calls are answered as they arrive: in submission order. (The chunked Call
    // waits for its RDMA Read, so its place among them is not fixed.)
    let short: Vec<u64> = order.iter().copied().filter(|&t| t != 100).collect();
    assert_eq!(
        short,
        (0..50).collect::<Vec<_>>(),
        "Short Calls out of order"
    );
    let w = &got[&100];
    assert_eq!(
        (w[3], u32::from_be_bytes(w[4..8].try_into().unwrap())),
        (1, 65_536),
        "bulk data verified by the server"
    );
    assert_eq!(s.snapshot().rpcs, before + 51);
    assert_eq!(c.snapshot().wc_errors + c.snapshot().conn_lost, 0);
}
