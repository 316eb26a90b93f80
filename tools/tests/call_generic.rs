//! `rpcrdma call --prog`: any program's procedure against `rpcrdma serve` on the soft
//! fabric, black box: arguments as hex, Write chunks saved and checked, a Read chunk
//! argument, a Reply chunk for a long reply, every RPC-level answer reported with exit
//! status 0, bad options with 2.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `rpcrdma call --connect ADDR ARGS`, retrying while the server starts.
fn call(addr: &str, args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = bin()
            .args(["call", "--connect", addr])
            .args(args)
            .output()
            .expect("run rpcrdma call");
        let refused = String::from_utf8_lossy(&out.stderr).contains("connect to");
        if !refused || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn first(out: &Output) -> Value {
    let s = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(s.lines().next().expect("a line")).expect("JSON")
}

/// The built-in program's pattern byte (engine/src/program.rs).
fn pattern_byte(seed: u32, i: usize) -> u8 {
    ((i as u32)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(seed.wrapping_mul(7919)) as u8)
        ^ (i >> 8) as u8
}

#[test]
fn any_program_from_the_command_line() {
    let addr = format!("@rpcrdma-call-generic.{}", std::process::id());
    let _server = Serve(
        bin()
            .args(["serve", "--listen", &addr, "--seconds", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let dir = std::env::temp_dir().join(format!("rpcrdma-call-generic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // ECHO (400100 v1 proc 1) of 8 bytes, with an AUTH_SYS credential.
    let out = call(
        &addr,
        &[
            "--prog",
            "400100",
            "--vers",
            "1",
            "--proc",
            "1",
            "--args-hex",
            "00000008 aabbccdd eeff0011",
            "--cred",
            "sys:1000:100:4,5",
        ],
    );
    assert!(out.status.success());
    let v = first(&out);
    assert_eq!(v["accept_stat"], "SUCCESS");
    assert_eq!(v["results_hex"], "00000008aabbccddeeff0011");
    assert_eq!(
        (v["call_form"].as_str(), v["reply_form"].as_str()),
        (Some("short"), Some("inline"))
    );

    // READ (proc 2: n = 65536, seed 5) into a Write chunk, saved and checked.
    let save = dir.to_str().unwrap();
    let out = call(
        &addr,
        &[
            "--prog",
            "400100",
            "--proc",
            "2",
            "--args-hex",
            "00010000 00000005",
            "--write-chunk",
            "65536",
            "--save-bulk",
            save,
        ],
    );
    let v = first(&out);
    assert_eq!(v["write_chunks"][0]["bytes"], 65536);
    let data = std::fs::read(dir.join("chunk-0-0.bin")).unwrap();
    assert!(data
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern_byte(5, i)));

    // WRITE (proc 3: seed 6, then the data) with the data from a file, in a Read chunk.
    let bulk: Vec<u8> = (0..65536).map(|i| pattern_byte(6, i)).collect();
    let f = dir.join("bulk.bin");
    std::fs::write(&f, &bulk).unwrap();
    let out = call(
        &addr,
        &[
            "--prog",
            "400100",
            "--proc",
            "3",
            "--args-hex",
            "00000006",
            "--bulk-arg-file",
            f.to_str().unwrap(),
        ],
    );
    let v = first(&out);
    assert_eq!(v["results_hex"], "0000000100010000", "ok, 65536 bytes");
    assert_eq!(v["call_form"], "chunked");

    // ECHO of 8000 bytes expecting up to 9000: a Long Call and a Reply through the chunk.
    let mut hex = String::from("00001f40");
    hex.push_str(&"ab".repeat(8000));
    let out = call(
        &addr,
        &[
            "--prog",
            "400100",
            "--proc",
            "1",
            "--args-hex",
            &hex,
            "--max-reply",
            "9000",
        ],
    );
    let v = first(&out);
    assert_eq!(v["reply_form"], "reply_chunk", "{v}");
    assert_eq!(v["results_hex"].as_str().unwrap().len(), 2 * 8004);

    // RPC-level refusals are answers: exit status 0.
    for (args, stat) in [
        (vec!["--prog", "7"], "PROG_UNAVAIL"),
        (vec!["--prog", "400100", "--vers", "9"], "PROG_MISMATCH"),
        (vec!["--prog", "400100", "--proc", "99"], "PROC_UNAVAIL"),
    ] {
        let out = call(&addr, &args);
        assert!(out.status.success(), "{args:?}");
        let v = first(&out);
        assert_eq!(v["accept_stat"], stat, "{args:?}");
        if stat == "PROG_MISMATCH" {
            // Version 1 and the timed version 2.
            assert_eq!((v["low"].as_u64(), v["high"].as_u64()), (Some(1), Some(2)));
        }
    }
    // Options that cannot work: exit status 2.
    for args in [
        vec!["--prog", "400100", "--args-hex", "000"],
        vec!["--prog", "400100", "--args-hex", "000000"],
        vec!["--prog", "400100", "--cred", "kerberos"],
    ] {
        assert_eq!(call(&addr, &args).status.code(), Some(2), "{args:?}");
    }
    // bench rpc measures any program's procedure with the same report.
    let out = bin()
        .args([
            "bench",
            "rpc",
            "--connect",
            &addr,
            "--prog",
            "400100",
            "--vers",
            "1",
            "--proc",
            "0",
            "--seconds",
            "0.2",
            "--warmup",
            "0.05",
            "--json",
        ])
        .output()
        .expect("bench rpc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("a report"),
    )
    .expect("JSON");
    assert!(report["rpcs"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["proc"], "proc");
    // A procedure the server does not have fails the run.
    let out = bin()
        .args([
            "bench",
            "rpc",
            "--connect",
            &addr,
            "--prog",
            "7",
            "--seconds",
            "0.1",
            "--json",
        ])
        .output()
        .expect("bench rpc");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the server answered PROG_UNAVAIL, not SUCCESS"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
