//! Black-box tests of `rpcrdma sweep` and `rpcrdma report` on the soft fabric: a small sweep
//! of both forms around the threshold writes its table, JSON lines, CSV and plot; against a
//! running `rpcrdma serve` too; a report of a run against itself passes and against a slowed
//! copy fails; settings that cannot work are refused before anything runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpcrdma-sweep-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run rpcrdma")
}

fn points(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("json file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON point per line"))
        .collect()
}

const SMALL: [&str; 13] = [
    "sweep",
    "--op",
    "write,read",
    "--sizes",
    "256,2k",
    "--force-form",
    "short,chunked",
    "--reps",
    "2",
    "--seconds",
    // Long enough for a debug build on a loaded machine to complete RPCs in every point.
    "0.2",
    "--warmup",
    "0.01",
];

#[test]
fn a_sweep_writes_its_table_json_csv_and_plot_and_a_report_judges_it() {
    let d = scratch("full");
    let (json, csv, svg) = (d.join("a.json"), d.join("a.csv"), d.join("a.svg"));
    let out = run(&[
        &SMALL[..],
        &[
            "--json",
            json.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
    ]
    .concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The table: a header and a row per point and repetition (2 ops × 2 sizes × 2 forms × 2).
    assert!(stdout.lines().next().unwrap().contains("p50 ns"));
    let rows = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("write ") || l.trim_start().starts_with("read "))
        .count();
    assert_eq!(rows, 16, "{stdout}");
    assert!(
        stdout.contains("crossover: write at inline 4096"),
        "{stdout}"
    );
    assert!(stdout.contains("recommended inline threshold"), "{stdout}");
    let pts = points(&json);
    assert_eq!(pts.len(), 16);
    for p in &pts {
        assert!(p["rpcs"].as_u64().unwrap() > 0);
        assert!(p["lat_ns"]["p50"].as_u64().unwrap() > 0);
        assert!(p["limits"]["cacheline_rtt_ns"].as_u64().unwrap() > 0);
        let chunked = p["form"] == "chunked";
        let f = &p["forms"];
        match p["op"].as_str().unwrap() {
            "write" if chunked => assert!(f["chunked_calls"].as_u64().unwrap() > 0, "{p}"),
            "write" => assert_eq!(f["chunked_calls"], 0, "{p}"),
            "read" if chunked => assert!(f["write_chunks"].as_u64().unwrap() > 0, "{p}"),
            _ => assert_eq!(f["write_chunks"], 0, "{p}"),
        }
    }
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv_text.lines().count(), 17);
    assert!(csv_text.starts_with("provider,op,size,"));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    // A run against itself: no regression.
    let same = run(&["report", json.to_str().unwrap(), json.to_str().unwrap()]);
    assert!(
        same.status.success(),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );
    // Against a copy twice as slow everywhere: a regression, exit status 1.
    let slow = d.join("b.json");
    let doubled: Vec<String> = pts
        .iter()
        .map(|p| {
            let mut p = p.clone();
            let v = p["lat_ns"]["p50"].as_u64().unwrap();
            p["lat_ns"]["p50"] = (v * 2).into();
            p.to_string()
        })
        .collect();
    std::fs::write(&slow, doubled.join("\n")).unwrap();
    let worse = run(&[
        "report",
        json.to_str().unwrap(),
        slow.to_str().unwrap(),
        "--max-regression",
        "10",
    ]);
    assert_eq!(worse.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&worse.stdout).contains("REGRESSION"));
    // A file that is not a sweep: exit status 2.
    let bad = d.join("bad.json");
    std::fs::write(&bad, "{\"nope\": 1}\n").unwrap();
    let unreadable = run(&["report", json.to_str().unwrap(), bad.to_str().unwrap()]);
    assert_eq!(unreadable.status.code(), Some(2));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn json_to_standard_output_moves_the_table_to_standard_error() {
    let out = run(&[
        &SMALL[..5],
        &["--seconds", "0.02", "--reps", "1", "--json", "-"],
    ]
    .concat());
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 4, "{stdout}");
    for l in stdout.lines() {
        let v: Value = serde_json::from_str(l).expect("only JSON on stdout");
        assert_eq!(v["provider"], "soft");
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("p50 ns"));
}

#[test]
fn a_sweep_against_a_running_server() {
    let addr = format!("@rpcrdma-sweep-serve.{}", std::process::id());
    let mut server = bin()
        .args([
            "serve",
            "--listen",
            &addr,
            "--seconds",
            "60",
            "--first-core",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = run(&[
            "sweep",
            "--op",
            "null,echo",
            "--sizes",
            "64",
            "--reps",
            "1",
            "--seconds",
            "0.05",
            "--connect",
            &addr,
            "--json",
            "-",
        ]);
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pts: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(pts.len(), 2);
    // A remote server's CPU is not ours to read.
    assert!(pts.iter().all(|p| p["cpu_ns_per_rpc"]["server"].is_null()));
}

/// Points of several connections carry the spread of the connections' rates (JSON, CSV, and
/// the table's `min/med`, the slowest connection's rate over the median's); a point of one
/// connection shows `-` there; `report` still reads points written before these fields.
#[test]
fn a_sweep_of_several_connections_reports_the_spread_of_their_rates() {
    let d = scratch("conns");
    let (json, csv) = (d.join("c.json"), d.join("c.csv"));
    let out = run(&[
        "sweep",
        "--op",
        "null",
        "--sizes",
        "64",
        "--depth",
        "2",
        "--conns",
        "1,4",
        "--client-threads",
        "1",
        "--reps",
        "1",
        "--seconds",
        "0.2",
        "--warmup",
        "0.01",
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pts = points(&json);
    assert_eq!(pts.len(), 2);
    for p in &pts {
        let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {p}"));
        let (min, median, max) = (
            f("conn_rate_min"),
            f("conn_rate_median"),
            f("conn_rate_max"),
        );
        assert!(min <= median && median <= max, "{p}");
        let per_conn: Vec<f64> = p["per_conn_rps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(per_conn.len() as u64, p["conns"].as_u64().unwrap(), "{p}");
        let sum: f64 = per_conn.iter().sum();
        let rate = f("rate_rps");
        assert!((sum - rate).abs() <= 0.02 * rate, "{sum} vs {rate}");
        assert!((f("conn_rate_min_to_median") - min / median).abs() < 1e-9);
    }
    // The table: the ratio for four connections, `-` for one.
    let header = stdout.lines().next().unwrap();
    assert!(header.contains("min/med"), "{header}");
    let ratios: Vec<(String, String)> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("null "))
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            // op bytes inline cred depth con ... p50/line p50/copy rps/ring min/med MiB/conn work
            (cells[5].to_string(), cells[cells.len() - 3].to_string())
        })
        .collect();
    assert_eq!(ratios.len(), 2, "{stdout}");
    for (conns, ratio) in &ratios {
        match conns.as_str() {
            "1" => assert_eq!(ratio, "-", "{stdout}"),
            _ => assert!(
                ratio.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)),
                "{stdout}"
            ),
        }
    }
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = csv_text.lines();
    let columns: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert!(columns.ends_with(&[
        "conn_rate_min",
        "conn_rate_median",
        "conn_rate_max",
        "conn_rate_min_to_median"
    ]));
    for l in lines {
        assert_eq!(l.split(',').count(), columns.len(), "{l}");
    }
    // Points written before these fields still read, and compare with the new ones.
    let old = d.join("old.json");
    let stripped: Vec<String> = pts
        .iter()
        .map(|p| {
            let mut p = p.clone();
            for k in [
                "conn_rate_min",
                "conn_rate_median",
                "conn_rate_max",
                "conn_rate_min_to_median",
            ] {
                p.as_object_mut().unwrap().remove(k);
            }
            p.to_string()
        })
        .collect();
    std::fs::write(&old, stripped.join("\n")).unwrap();
    let report = run(&["report", old.to_str().unwrap(), json.to_str().unwrap()]);
    assert!(
        report.status.success(),
        "{}{}",
        String::from_utf8_lossy(&report.stdout),
        String::from_utf8_lossy(&report.stderr)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn settings_that_cannot_work_are_refused_before_the_run() {
    let out = run(&[
        "sweep",
        "--op",
        "write",
        "--sizes",
        "2m",
        "--bulk-size",
        "1048576",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("write:2097152 needs --bulk-size of at least"),
        "{err}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(" write "),
        "nothing ran"
    );
    for (args, says) in [
        (vec!["--inline", "1500"], "multiple of 1024"),
        (vec!["--op", "reed"], "is not one of"),
        (vec!["--sizes", "16m"], "over 8 MiB"),
        (
            vec!["--op", "echo", "--force-form", "chunked"],
            "no combination",
        ),
        (
            vec![
                "--registration",
                "persistent",
                "--remote-invalidation",
                "on",
            ],
            "--remote-invalidation auto or off",
        ),
        (vec!["--remote-invalidation", "maybe"], "is not one of"),
        (vec!["--plot", "sweep.png"], "FILE.svg"),
    ] {
        let out = run(&[&["sweep"][..], &args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{args:?}"
        );
    }
}

/// `--op prog:P:V:N`: another program's procedure without arguments (here the built-in
/// program's NULL through the generic path), inline and as a Long Call.
#[test]
fn a_sweep_of_any_programs_procedure() {
    let out = run(&[
        "sweep",
        "--op",
        "prog:400100:1:0",
        "--force-form",
        "auto,long",
        "--reps",
        "1",
        "--seconds",
        "0.05",
        "--warmup",
        "0.01",
        "--json",
        "-",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pts: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON point per line"))
        .collect();
    assert_eq!(pts.len(), 2);
    for p in &pts {
        assert_eq!(p["op"], "prog:400100:1:0");
        assert!(p["rpcs"].as_u64().unwrap() > 0, "{p}");
    }
    assert!(pts
        .iter()
        .any(|p| p["forms"]["long_calls"].as_u64() > Some(0)));
    // A malformed procedure is refused before anything runs.
    let out = run(&["sweep", "--op", "prog:400100:1", "--seconds", "0.01"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("prog:P:V:N"));
}

/// A point whose RPCs fail (a program the in-process server does not serve) is reported and
/// recorded, the sweep measures the next one anyway and exits 1; `report` reads the file,
/// skipping the failure.
#[test]
fn a_failing_point_does_not_stop_the_sweep() {
    let d = scratch("failing");
    let json = d.join("f.json");
    let out = run(&[
        "sweep",
        "--op",
        "prog:400199:1:0,null",
        "--reps",
        "1",
        "--seconds",
        "0.05",
        "--warmup",
        "0.01",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("FAILED prog:400199:1:0") && stderr.contains("PROG_UNAVAIL"),
        "{stderr}"
    );
    assert!(stderr.contains("1 of 2 repetition(s) failed"), "{stderr}");
    let lines = points(&json);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let failed: Vec<&Value> = lines.iter().filter(|l| l.get("error").is_some()).collect();
    assert_eq!(failed.len(), 1, "{lines:?}");
    assert_eq!(failed[0]["op"], "prog:400199:1:0");
    assert_eq!(failed[0]["rep"], 0);
    let null = lines
        .iter()
        .find(|l| l["op"] == "null")
        .expect("the null point");
    assert!(null["rpcs"].as_u64().unwrap() > 0, "{null}");
    // The file reads back as its one measured point.
    let j = json.to_str().unwrap();
    let out = run(&["report", j, j]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}
