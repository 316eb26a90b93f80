//! The fabric latency probes run, and (by hand, in release mode) report the soft provider's
//! SEND ping-pong beside the cache-line limit.

use std::time::Instant;

use rpcrdma_bench::fabric_probes;

#[test]
fn latency_probes_run() {
    let l = fabric_probes::cacheline_pingpong(200);
    assert_eq!(l.samples, 200);
    let l = fabric_probes::soft_send_pingpong(200, 64).unwrap();
    assert_eq!(l.samples, 200);
    assert!(l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns);
}

/// `cargo test --release -p rpcrdma-bench --test fabric_probes -- --ignored --nocapture latency_report`
#[test]
#[ignore = "a measurement, run by hand in release mode"]
fn latency_report() {
    let iters: usize = std::env::var("RPCRDMA_LATENCY_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    for _ in 0..3 {
        let t0 = Instant::now();
        let line = fabric_probes::cacheline_pingpong(iters);
        println!(
            "cache line ping-pong (half round trip): {line} [{:?}]",
            t0.elapsed()
        );
        let t0 = Instant::now();
        let send = fabric_probes::soft_send_pingpong(iters, 64).unwrap();
        println!(
            "soft 64-byte SEND ping-pong (half round trip): {send} [{:?}]",
            t0.elapsed()
        );
        println!(
            "ratio of p50s: {:.2}",
            send.p50_ns as f64 / line.p50_ns as f64
        );
    }
}
