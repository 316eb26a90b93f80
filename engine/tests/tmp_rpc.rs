mod common;
use common::*;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::requester::CallArgs;
use std::time::Instant;

#[test]
#[ignore]
fn rpc_cost() {
    let depth: u64 = std::env::var("DEPTH")
        .map(|v| v.parse().unwrap())
        .unwrap_or(32);
    let cfg = ConnConfig {
        credits: 32,
        initial_grant: 32,
        ..config()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let iters: u64 = std::env::var("ITERS")
        .map(|v| v.parse().unwrap())
        .unwrap_or(100_000);
    let mut done = 0u64;
    let mut inflight = 0u64;
    let t0 = Instant::now();
    while done < iters * depth {
        c.cork();
        while inflight < depth && c.submit(&null, 0).is_ok() {
            inflight += 1;
        }
        c.uncork();
        s.poll();
        let mut n = 0;
        c.poll_completions(|comp| {
            assert!(comp.result.unwrap().is_success());
            n += 1;
        });
        inflight -= n as u64;
        done += n as u64;
        if t0.elapsed().as_secs() > 5 {
            eprintln!("stuck: done {done} inflight {inflight}");
            break;
        }
    }
    eprintln!(
        "per rpc {:.1} ns",
        t0.elapsed().as_nanos() as f64 / done as f64
    );
}
