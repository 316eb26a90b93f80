//! Black-box tests of `rpcrdma bench rpc` with many connections, workers and client
//! threads, and of its fault runs (`--disconnect-every` with `--retransmit`), in process
//! and against a separate `rpcrdma serve --count-executions`, on the soft fabric.

use serde_json::Value;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

fn bench(args: &[&str]) -> Output {
    bin()
        .args(["bench", "rpc", "--json", "--warmup", "0.05"])
        .args(args)
        .output()
        .expect("run bench rpc")
}

fn reports(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn many_connections_on_several_threads_and_workers_report_each_part() {
    let out = bench(&[
        "--workload",
        "null,read:4k",
        "--conns",
        "3",
        "--client-threads",
        "2",
        "--workers",
        "2",
        "--depth",
        "2",
        "--seconds",
        "0.4",
    ]);
    let rs = reports(&out);
    assert_eq!(rs.len(), 2);
    for r in &rs {
        assert_eq!(r["conns"], 3);
        assert_eq!(r["client_threads"], 2);
        assert_eq!(r["workers"], 2);
        let per_conn = r["per_conn_rps"].as_array().expect("per_conn_rps");
        assert_eq!(per_conn.len(), 3, "{r}");
        assert!(
            per_conn.iter().all(|x| x.as_f64().unwrap() > 0.0),
            "every connection carried RPCs: {r}"
        );
        let threads = r["threads"].as_array().expect("threads");
        assert_eq!(threads.len(), 2);
        let conns: u64 = threads.iter().map(|t| t["conns"].as_u64().unwrap()).sum();
        assert_eq!(conns, 3, "the threads share the connections: {r}");
        let per_worker = r["per_worker_rps"].as_array().expect("per_worker_rps");
        assert_eq!(per_worker.len(), 2);
        let served: f64 = per_worker.iter().map(|x| x.as_f64().unwrap()).sum();
        assert!(served > 0.0, "{r}");
        // The total is every connection's round trips together.
        let sum: f64 = per_conn.iter().map(|x| x.as_f64().unwrap()).sum();
        let rate = r["rate_rps"].as_f64().unwrap();
        assert!((sum - rate).abs() <= 0.01 * rate + 3.0, "{sum} vs {rate}");
        assert_eq!(r["allocs_per_rpc"], 0.0, "{r}");
        assert!(r["faults"].is_null(), "no fault run: {r}");
    }
}

/// Four connections on one client thread: the spread of their rates (issue 33's fairness)
/// is each connection's rate's, ordered, and the rates add up to the total; the terminal
/// shows it too. (No speed is asserted.)
#[test]
fn four_connections_report_the_spread_of_their_rates() {
    let out = bench(&[
        "--workload",
        "null",
        "--conns",
        "4",
        "--depth",
        "2",
        "--seconds",
        "0.3",
    ]);
    let rs = reports(&out);
    assert_eq!(rs.len(), 1);
    let r = &rs[0];
    let per_conn: Vec<f64> = r["per_conn_rps"]
        .as_array()
        .expect("per_conn_rps")
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(per_conn.len(), 4, "{r}");
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
    let (min, median, max) = (
        f("conn_rate_min"),
        f("conn_rate_median"),
        f("conn_rate_max"),
    );
    assert!(min <= median && median <= max, "{r}");
    // The ends are the slowest and the fastest connection's (each rounded on its own).
    let lowest = per_conn.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = per_conn.iter().copied().fold(0.0, f64::max);
    assert!(
        (min - lowest).abs() <= 1.0 && (max - highest).abs() <= 1.0,
        "{r}"
    );
    let ratio = f("conn_rate_min_to_median");
    assert!((0.0..=1.0).contains(&ratio), "{r}");
    assert!((ratio - min / median).abs() <= 0.01, "{r}");
    let sum: f64 = per_conn.iter().sum();
    let rate = f("rate_rps");
    assert!((sum - rate).abs() <= 0.02 * rate + 4.0, "{sum} vs {rate}");
    assert_eq!(r["allocs_per_rpc"], 0.0, "counting allocates nothing: {r}");

    let out = bin()
        .args(["bench", "rpc", "--warmup", "0.05", "--workload", "null"])
        .args(["--conns", "4", "--depth", "2", "--seconds", "0.2"])
        .output()
        .expect("run bench rpc");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("RPC/s per connection: min ")
            && text.contains(", median ")
            && text.contains("x the median"),
        "{text}"
    );
}

/// The fault report of a run that dropped connections: every RPC exactly once.
fn check_faults(r: &Value, server_counts: bool) {
    let f = &r["faults"];
    let n = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} in {f}"));
    assert!(n("severed") >= 2, "{f}");
    assert!(
        n("reconnects") >= n("severed"),
        "one reconnection per drop: {f}"
    );
    assert_eq!(n("lost"), 0, "{f}");
    assert_eq!(n("completed_twice"), 0, "{f}");
    assert_eq!(n("submitted"), n("completed"), "{f}");
    assert!(n("completed") >= r["rpcs"].as_u64().unwrap());
    assert_eq!(f["exact"], true, "{f}");
    if server_counts {
        let s = &f["server"];
        let runs = s["executions"].as_u64().expect("the server counted");
        assert!(runs >= n("completed"), "every RPC ran: {f}");
        assert!(runs - n("completed") <= n("retransmits"), "{f}");
    }
}

#[test]
fn a_fault_run_loses_and_repeats_nothing_in_process() {
    let out = bench(&[
        "--workload",
        "echo:512,write:8k,read:8k",
        "--depth",
        "4",
        "--seconds",
        "0.6",
        "--disconnect-every",
        "0.1",
        "--retransmit",
        "30",
    ]);
    let rs = reports(&out);
    assert_eq!(rs.len(), 3);
    for r in &rs {
        check_faults(r, true);
    }
}

/// A server process, killed when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_fault_run_against_a_counting_server_process() {
    let addr = format!("@rpcrdma-fleet-test.{}", std::process::id());
    let _serve = Serve(
        bin()
            .args(["serve", "--listen", &addr, "--seconds", "60"])
            .arg("--count-executions")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn rpcrdma serve"),
    );
    // The server takes a moment to listen.
    let mut out = None;
    for _ in 0..50 {
        let o = bench(&[
            "--connect",
            &addr,
            "--workload",
            "null,echo:2k",
            "--conns",
            "2",
            "--depth",
            "4",
            "--seconds",
            "0.6",
            "--disconnect-every",
            "0.1",
            "--retransmit",
            "30",
        ]);
        if o.status.success() || !String::from_utf8_lossy(&o.stderr).contains("connect to") {
            out = Some(o);
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let rs = reports(&out.expect("the server came up"));
    assert_eq!(rs.len(), 2);
    for r in &rs {
        check_faults(r, true);
        assert!(r["workers"].is_null(), "no in-process server: {r}");
    }
}

#[test]
fn a_fault_run_without_retransmission_is_refused_naming_the_option() {
    let out = bench(&["--disconnect-every", "0.1", "--seconds", "0.1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--disconnect-every needs --retransmit"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
    let out = bench(&["--conns", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--conns"));
}

/// A mix (`null+read:4k`): each connection keeps one Call of each form in flight, the
/// report names both, and the READs really ran (each of their 4 KiB results came back
/// through a Write chunk, the nulls' inline); a depth below the mix's forms is refused.
#[test]
fn a_mix_runs_its_workloads_together_on_every_connection() {
    let out = bench(&[
        "--workload",
        "null+read:4k",
        "--conns",
        "2",
        "--depth",
        "2",
        "--seconds",
        "0.3",
    ]);
    let rs = reports(&out);
    assert_eq!(rs.len(), 1, "a mix is one run");
    let r = &rs[0];
    assert_eq!(r["proc"], "null+read", "{r}");
    let mix = r["mix"].as_array().expect("the mix's workloads");
    assert_eq!(mix.len(), 2);
    assert_eq!(mix[0]["proc"], "null");
    assert_eq!(mix[1]["res_size"], 4096);
    let per_conn = r["per_conn_rps"].as_array().expect("per_conn_rps");
    assert!(per_conn.iter().all(|x| x.as_f64().unwrap() > 0.0), "{r}");
    let calls = r["client"]["calls"].as_f64().unwrap();
    let chunks = r["client"]["write_chunks"].as_f64().unwrap();
    assert!(
        calls > 0.0 && chunks > 0.25 * calls && chunks < 0.75 * calls,
        "about half the Calls were READs: {chunks} Write chunks in {calls} Calls"
    );
    assert!(r["client_registered_bytes"].as_u64().unwrap() > 0, "{r}");

    let out = bench(&[
        "--workload",
        "null+read:4k",
        "--depth",
        "1",
        "--seconds",
        "0.1",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs --depth 2 or more"), "{err}");
}
