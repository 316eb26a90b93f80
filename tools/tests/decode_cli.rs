//! Black-box tests of `rpcrdma decode`: the binary is run as a user would run it.

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn rpcrdma(args: &[&str], stdin: Option<&str>) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma");
    {
        let mut si = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            si.write_all(s.as_bytes()).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn decode(args: &[&str]) -> Value {
    let (code, out) = rpcrdma(args, None);
    assert_eq!(code, 0, "{args:?}: {out}");
    serde_json::from_str(&out).expect("one JSON object")
}

const NULL_CALL: &str = "00000042 00000000 00000002 000186a3 00000003 00000000 00000001 00000018 00000001 00000004 626f7821 000003e8 000003e8 00000000 00000000 00000000";

#[test]
fn short_call_fields() {
    let m = format!("00000042 00000001 00000020 00000000 00000000 00000000 00000000 {NULL_CALL}");
    let v = decode(&["decode", &m]);
    assert_eq!(v["xid"], 0x42);
    assert_eq!(v["vers"], 1);
    assert_eq!(v["credit"], 32);
    assert_eq!(v["proc"], "RDMA_MSG");
    assert_eq!(v["read_list"], serde_json::json!([]));
    assert_eq!(v["write_list"], serde_json::json!([]));
    assert_eq!(v["reply_chunk"], Value::Null);
    assert_eq!(v["error"], Value::Null);
    assert_eq!(v["inline_payload_len"], 64);
    assert_eq!(v["verdict"], "process");
    assert_eq!(v["rpc"]["msg_type"], "CALL");
    assert_eq!(v["rpc"]["prog"], 100003);
    assert_eq!(v["rpc"]["cred"]["flavor_name"], "AUTH_SYS");
    assert_eq!(v["rpc"]["cred"]["auth_sys"]["machinename"], "box!");
    assert_eq!(v["rpc"]["cred"]["auth_sys"]["uid"], 1000);
    assert!(v["reason"].as_str().unwrap().contains("RFC 8166"));
}

#[test]
fn chunk_lists_are_listed() {
    let m = "00000001 00000001 00000001 00000001
             00000001 00000000 00000011 00001000 00000000 00010000
             00000000
             00000000
             00000001 00000001 00000013 00002000 00000001 00000000";
    let v = decode(&["decode", m]);
    assert_eq!(v["proc"], "RDMA_NOMSG");
    assert_eq!(
        v["read_list"],
        serde_json::json!([{"position": 0, "handle": 0x11, "length": 4096, "offset": 0x10000}])
    );
    assert_eq!(
        v["reply_chunk"],
        serde_json::json!([{"handle": 0x13, "length": 8192, "offset": 0x1_0000_0000u64}])
    );
    assert_eq!(v["inline_payload_len"], 0);
    assert_eq!(v["verdict"], "process");
}

#[test]
fn errors_and_verdicts() {
    let v = decode(&[
        "decode",
        "0a0b0c0d 00000002 00000020 00000000 00000000 00000000 00000000",
    ]);
    assert_eq!(v["verdict"], "err_vers");
    let v = decode(&[
        "decode",
        "--as",
        "requester",
        "0a0b0c0d 00000002 00000020 00000004 00000001 00000001 00000001",
    ]);
    assert_eq!(v["proc"], "RDMA_ERROR");
    assert_eq!(
        v["error"],
        serde_json::json!({"code": "ERR_VERS", "vers_low": 1, "vers_high": 1})
    );
    assert_eq!(v["verdict"], "process");
    let v = decode(&[
        "decode",
        "--as",
        "requester",
        "00000001 00000001 00000001 00000004 00000002",
    ]);
    assert_eq!(v["error"]["code"], "ERR_CHUNK");
    assert_eq!(v["error"]["vers_low"], Value::Null);
    assert_eq!(v["verdict"], "process");
}

#[test]
fn short_input_has_null_fields() {
    let v = decode(&["decode", "00000001 000000"]);
    assert_eq!(v["xid"], 1);
    assert_eq!(v["vers"], Value::Null);
    assert_eq!(v["proc"], Value::Null);
    assert_eq!(v["read_list"], Value::Null);
    assert_eq!(v["verdict"], "discard");
    // Truncated inside the write list: the read list is shown, the rest is null.
    let v = decode(&[
        "decode",
        "00000001 00000001 00000001 00000000 00000000 00000001 00000002 00000011",
    ]);
    assert_eq!(v["read_list"], serde_json::json!([]));
    assert_eq!(v["write_list"], Value::Null);
    assert_eq!(v["verdict"], "err_chunk");
}

#[test]
fn stdin_file_and_bad_input() {
    let (code, out) = rpcrdma(
        &["decode"],
        Some("00000001 00000001 00000001 00000003 00000000 00000000 00000000\n"),
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["proc"], "RDMA_DONE");
    assert_eq!(v["verdict"], "discard");

    let dir = std::env::temp_dir().join(format!("rpcrdma-decode-{}", std::process::id()));
    std::fs::write(&dir, [0u8, 0, 0, 1, 0, 0, 0, 1]).unwrap();
    let v = decode(&["decode", "--file", dir.to_str().unwrap()]);
    std::fs::remove_file(&dir).unwrap();
    assert_eq!(v["vers"], 1);
    assert_eq!(v["verdict"], "discard");

    assert_eq!(rpcrdma(&["decode", "not hex"], None).0, 2);
    assert_eq!(rpcrdma(&["decode", "abc"], None).0, 2);
    assert_eq!(rpcrdma(&["decode", "--file", "/nonexistent/x"], None).0, 2);
}

#[test]
fn private_data() {
    let v = decode(&["decode", "--private-data", "f6ab0e1801010303"]);
    assert_eq!(v["present"], true);
    assert_eq!(v["version"], 1);
    assert_eq!(v["remote_invalidation"], true);
    assert_eq!(v["send_size"], 4096);
    assert_eq!(v["receive_size"], 4096);
    // Unaligned, after other layers' bytes, with reserved bits set (ignored).
    let v = decode(&["decode", "--private-data", "aabbccf6ab0e1801fe00ff"]);
    assert_eq!(v["offset"], 3);
    assert_eq!(v["remote_invalidation"], false);
    assert_eq!(v["send_size"], 1024);
    assert_eq!(v["receive_size"], 262144);
    // Absent: defaults in effect.
    let v = decode(&["decode", "--private-data", "0102030405060708"]);
    assert_eq!(v["present"], false);
    assert_eq!(v["absent_reason"], "no_format_identifier");
    assert_eq!(v["effective"]["send_size"], 1024);
    assert_eq!(v["effective"]["remote_invalidation"], false);
    let v = decode(&["decode", "--private-data", "f6ab0e1802010303"]);
    assert_eq!(v["present"], false);
    assert_eq!(v["absent_reason"], "unknown_version");
}

#[test]
fn demo_round_trips_through_decode() {
    let (code, hex) = rpcrdma(&["demo", "long-call"], None);
    assert_eq!(code, 0);
    let (code, out) = rpcrdma(&["decode"], Some(&hex));
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["proc"], "RDMA_NOMSG");
    assert_eq!(v["read_list"].as_array().unwrap().len(), 2);
    assert_eq!(v["verdict"], "process");
}
