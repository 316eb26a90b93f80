//! `rpcrdma bench cost --conns N --cache`: the per-RPC cache misses grow with the number of
//! connections taking turns while the instructions do not; `--check` is refused beside it.

use std::process::{Command, Output};

use serde_json::Value;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(["bench", "cost", "--form", "null:0"])
        .args(args)
        .output()
        .expect("runs")
}

fn valgrind() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The one figure of a `--json` run.
fn figure(out: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v.as_array().expect("an array")[0].clone()
}

#[test]
fn misses_per_rpc_grow_with_the_connections_and_instructions_do_not() {
    if !valgrind() {
        let out = bench(&["--conns", "8", "--cache"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("SKIPPED"), "without valgrind: {stderr}");
        return;
    }
    // A receive queue per connection: one connection's ring then fits the cache (the shared
    // receive queue's ring, sized for the most receives it may hold, is walked slot by slot:
    // a cold line at each post and claim even for one connection).
    let one = figure(&bench(&["--cache", "--no-srq", "--json", "--rpcs", "200"]));
    let many = figure(&bench(&[
        "--conns", "64", "--cache", "--no-srq", "--json", "--rpcs", "256",
    ]));
    assert_eq!(one["conns"], 1);
    assert_eq!(many["conns"], 64);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    for side in ["client", "server"] {
        let (a, b) = (
            f(&one, &format!("{side}_instructions")),
            f(&many, &format!("{side}_instructions")),
        );
        assert!(
            (b / a - 1.0).abs() < 0.05,
            "{side}: {a} then {b} instructions"
        );
        let (a, b) = (
            f(&one, &format!("{side}_l2_misses")),
            f(&many, &format!("{side}_l2_misses")),
        );
        // Measured: about 1 with one connection, over 20 with 64.
        assert!(
            b > 5.0 * a.max(1.0),
            "{side}: {a} then {b} second-level misses"
        );
    }
}

#[test]
fn the_committed_figures_are_not_checked_against_many_connections() {
    let out = bench(&["--conns", "4", "--check", "bench/cost-figures.json"]);
    if !valgrind() {
        return;
    }
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("one connection"));
}
