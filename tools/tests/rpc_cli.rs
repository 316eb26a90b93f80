//! Black-box tests of `rpcrdma serve`, `rpcrdma call` and `rpcrdma bench rpc` on the soft
//! fabric: two processes talking RPC-over-RDMA as a user would run them.

use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

/// A server process, killed when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(addr: &str, extra: &[&str]) -> Serve {
    let child = bin()
        .args(["serve", "--listen", addr, "--seconds", "60"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rpcrdma serve");
    Serve(child)
}

/// Runs `rpcrdma call`, retrying while the server is still starting (at most 10 s).
fn call(addr: &str, workload: &str, extra: &[&str]) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = bin()
            .args([
                "call",
                "--connect",
                addr,
                "--workload",
                workload,
                "--count",
                "2",
            ])
            .args(extra)
            .output()
            .expect("run rpcrdma call");
        let text = String::from_utf8(out.stdout).unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if out.status.success() {
            return text
                .lines()
                .map(|l| serde_json::from_str(l).expect("JSON lines"))
                .collect();
        }
        assert!(
            err.contains("connect") && Instant::now() < deadline,
            "call {workload} failed: {text} {err}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `rpcrdma bench rpc --json` with `args`; it must succeed. One report per line.
fn bench_json(args: &[&str]) -> Vec<Value> {
    let out = bin()
        .args(["bench", "rpc", "--json"])
        .args(args)
        .output()
        .expect("run bench rpc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn unique(tag: &str) -> String {
    format!("@rpcrdma-cli-test.{}.{tag}", std::process::id())
}

#[test]
fn every_message_form_between_two_processes() {
    for (tag, mode) in [
        ("windows", &[][..]),
        ("no-ri", &["--no-remote-invalidation"][..]),
        ("persistent", &["--persistent"][..]),
    ] {
        let addr = unique(tag);
        let _server = serve(&addr, mode);
        // Around the default 4096-byte inline threshold, and well past it.
        for w in [
            "null",
            "echo:100",
            "echo:4000",
            "echo:8000",
            "write:100",
            "write:4060",
            "write:65536",
            "read:100",
            "read:65536",
        ] {
            let lines = call(&addr, w, mode);
            assert_eq!(lines.len(), 3, "{w}: two calls and the counters");
            for l in &lines[..2] {
                assert_eq!(l["status"], "ok", "{w} {mode:?}: {l}");
            }
            let c = &lines[2]["client"];
            assert_eq!(c["rpcs"], 2, "{w}: {c}");
            assert_eq!(c["errors"]["conn_lost"], 0);
            let chunked = c["chunked_calls"].as_u64().unwrap() + c["long_calls"].as_u64().unwrap();
            let big_arg = matches!(w, "echo:8000" | "write:4060" | "write:65536");
            assert_eq!(chunked > 0, big_arg, "{w}: calls through chunks: {c}");
            // A READ whose reply fits inline asks for it so, without a Write chunk.
            let write_chunk = w == "read:65536";
            assert_eq!(
                c["write_chunks"].as_u64().unwrap() > 0,
                write_chunk,
                "{w}: results through Write chunks: {c}"
            );
            if mode.is_empty() && (big_arg || write_chunk || w == "echo:8000") {
                assert!(
                    c["remote_invalidations"].as_u64().unwrap() > 0,
                    "{w}: exposed memory retired by the server's Send With Invalidate: {c}"
                );
            }
            if !mode.is_empty() {
                assert_eq!(c["remote_invalidations"], 0, "{w} {mode:?}: {c}");
            }
        }
    }
}

#[test]
fn call_to_nobody_fails_cleanly() {
    let out = bin()
        .args([
            "call",
            "--connect",
            &unique("nobody"),
            "--timeout-ms",
            "500",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("connect"));
}

#[test]
fn bench_rpc_reports_its_fields_and_allocates_nothing_per_rpc() {
    let reports = bench_json(&[
        "--workload",
        "null,write:4k,read:4k",
        "--seconds",
        "0.3",
        "--warmup",
        "0.1",
        "--depth",
        "4",
    ]);
    assert_eq!(reports.len(), 3);
    for (r, (proc_name, arg, res)) in
        reports
            .iter()
            .zip([("null", 0, 0), ("write", 4096, 0), ("read", 0, 4096)])
    {
        assert_eq!(r["provider"], "soft");
        assert_eq!(r["workers"], 1);
        assert_eq!(r["depth"], 4);
        assert_eq!(r["proc"], proc_name);
        assert_eq!(r["arg_size"], arg);
        assert_eq!(r["res_size"], res);
        assert!(r["rpcs"].as_u64().unwrap() > 0);
        assert!(r["rate_rps"].as_f64().unwrap() > 0.0);
        let lat = &r["lat_ns"];
        let p = |k: &str| lat[k].as_u64().unwrap();
        assert!(p("min") <= p("p50") && p("p50") <= p("p90") && p("p90") <= p("p99"));
        assert!(p("p99") <= p("p999") && p("p999") <= p("max"));
        assert!(r["limit_ns_p50"].as_u64().unwrap() > 0);
        // The zero-work ring at the run's depth: for the null workload only.
        let ring = &r["ring"];
        if proc_name == "null" {
            assert_eq!(ring["depth"], 4);
            let rate = ring["rate_rps"].as_f64().unwrap();
            assert!(rate > 0.0 && rate >= ring["other_rate_rps"].as_f64().unwrap());
            let ratio = ring["ratio_rate"].as_f64().unwrap();
            let want = r["rate_rps"].as_f64().unwrap() / rate;
            assert!((ratio - want).abs() < 0.002, "{ratio} vs {want}");
            let per = ring["ns_per_round_trip"].as_f64().unwrap();
            assert!(
                (per * rate / 1e9 - 1.0).abs() < 0.01,
                "{per} ns at {rate}/s"
            );
            assert!(ring["phase_changed"].is_boolean());
        } else {
            assert!(ring.is_null(), "{proc_name}: {ring}");
        }
        assert_eq!(
            r["allocs_per_rpc"], 0.0,
            "{proc_name}: heap allocations per RPC"
        );
    }
}

#[test]
fn a_workload_the_bulk_buffers_cannot_hold_is_refused_before_the_run() {
    let out = bin()
        .args([
            "bench",
            "rpc",
            "--workload",
            "null,write:2m",
            "--seconds",
            "0.1",
        ])
        .output()
        .expect("bench rpc");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("write:2097152 needs --bulk-size of at least 2101248"),
        "{err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "nothing ran"
    );
    // With the size it names, it runs.
    let out = bin()
        .args([
            "bench",
            "rpc",
            "--workload",
            "write:2m",
            "--bulk-size",
            "2101248",
            "--seconds",
            "0.1",
            "--warmup",
            "0.02",
            "--json",
        ])
        .output()
        .expect("bench rpc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server whose buffers are smaller than the client's payload refuses it (READ: the
/// program's SYSTEM_ERR; WRITE: ERR_CHUNK); the client says which --bulk-size would take it.
#[test]
fn a_payload_larger_than_the_servers_buffers_names_the_size_it_needs() {
    let addr = unique("small-server");
    let _server = serve(&addr, &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    for (workload, answer) in [("read:2m", "SYSTEM_ERR"), ("write:2m", "ERR_CHUNK")] {
        let out = loop {
            let out = bin()
                .args(["call", "--connect", &addr, "--workload", workload])
                .args(["--bulk-size", "2101248"])
                .output()
                .expect("run rpcrdma call");
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            if !(err.contains("connect") && Instant::now() < deadline) {
                break out;
            }
            // The server is still starting.
            thread::sleep(Duration::from_millis(100));
        };
        assert!(!out.status.success(), "{workload}");
        let text = String::from_utf8_lossy(&out.stdout);
        let first: Value = serde_json::from_str(text.lines().next().unwrap_or("{}")).unwrap();
        let error = first["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("the server answered {answer}"))
                && error.contains("--bulk-size 2101248"),
            "{workload}: {text}"
        );
    }
}

/// NFS's usual 1 MiB READs and WRITEs with the credits the Linux client asks for (128), on
/// every default: the connection's RPCs share large buffers (32 in flight, more than the 16
/// large buffers; a second of it, which a debug build on a loaded machine needs to finish
/// any 1 MiB RPC whose every byte is checked). It also caught the load generator reading its
/// clock only every 64 passes: in a debug build 64 passes of 1 MiB RPCs outlasted the
/// measured phase, which then counted nothing.
#[test]
fn one_mebibyte_io_with_128_credits_runs_on_the_defaults() {
    let reports = bench_json(&[
        "--workload",
        "read:1m,write:1m",
        "--credits",
        "128",
        "--depth",
        "32",
        "--seconds",
        "1",
        "--warmup",
        "0.2",
    ]);
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert!(r["rpcs"].as_u64().unwrap() > 0, "{r}");
        assert!(r["client"]["large_bulk"].as_u64().unwrap() > 0, "{r}");
    }
}

#[test]
fn a_server_whose_workers_wait_between_calls_answers_every_form() {
    let addr = unique("wait");
    let child = bin()
        .args(["serve", "--listen", &addr, "--seconds", "8"])
        .args(["--wait-after-us", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rpcrdma serve");
    // Not killed on a failure: it stops by itself after --seconds.
    for w in ["null", "echo:8000", "write:65536", "read:65536"] {
        let lines = call(&addr, w, &[]);
        for l in &lines[..2] {
            assert_eq!(l["status"], "ok", "{w}: {l}");
        }
        // Long enough for the worker to go back to waiting.
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("serve's output");
    assert!(out.status.success(), "serve exits cleanly");
    let text = String::from_utf8(out.stdout).unwrap();
    let report: Value = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("serve's counters");
    let w = &report["workers"][0];
    assert!(w["waits"].as_u64().unwrap() > 0, "the worker waited: {w}");
    assert!(w["wakeups"].as_u64().unwrap() > 0, "events woke it: {w}");
    assert_eq!(w["counters"]["rpcs"], 8, "{w}");
}

/// A reply timeout that is not a positive, finite number of seconds is refused when the
/// command line is read (clap's usage error, status 2), never a panic later.
#[test]
fn bad_reply_timeouts_are_refused_on_the_command_line() {
    for bad in ["0", "-1", "nan", "inf", "1e300", "soon"] {
        let out = bin()
            .args(["bench", "rpc", "--retransmit", "3"])
            .arg(format!("--reply-timeout={bad}"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--reply-timeout {bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--reply-timeout"), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{bad}: {err}");
    }
}

/// `in_flight_per_conn` says what a depth came to: 8 asked with 2 credits keeps at most 2
/// Calls in flight (RFC 8166 §3.3.1), which the text says beside the rate; 4 asked with
/// the default 32 credits keeps more than 2 (the rest of each round trip is the client's
/// own turnaround).
#[test]
fn bench_rpc_says_how_many_calls_were_in_flight() {
    let base = ["--workload", "null", "--seconds", "0.3", "--warmup", "0.1"];
    let capped = bench_json(&[&base[..], &["--depth", "8", "--credits", "2"]].concat());
    let n = capped[0]["in_flight_per_conn"].as_f64().unwrap();
    assert!(n > 0.0 && n <= 2.05, "depth 8 on 2 credits: {n} in flight");
    let mean = capped[0]["in_flight_mean"].as_f64().unwrap();
    assert!(
        (mean - n).abs() < 0.1,
        "one connection: {mean} in all, {n} a connection"
    );
    let deep = bench_json(&[&base[..], &["--depth", "4"]].concat());
    let n = deep[0]["in_flight_per_conn"].as_f64().unwrap();
    assert!(n > 2.5 && n <= 4.05, "depth 4 on 32 credits: {n} in flight");
    let out = bin()
        .args(["bench", "rpc"])
        .args(base)
        .args(["--depth", "8", "--credits", "2"])
        .output()
        .expect("run bench rpc");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("calls in flight per connection on average")
            && text.contains("--credits 2 caps"),
        "{text}"
    );
}
