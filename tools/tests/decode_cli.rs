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
    // As a version 1 receiver sees a version 2 message.
    let v = decode(&[
        "decode",
        "--version",
        "1",
        "0a0b0c0d 00000002 00000020 00000000 00000000 00000000 00000000",
    ]);
    assert_eq!(v["verdict"], "err_vers");
    let v = decode(&[
        "decode",
        "--version",
        "1",
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

/// Version 2 (draft-cel-nfsv4-rpcrdma-version-two-09): the same contract plus `htype`,
/// `flags`, `inv_handle`, `properties` and the error's own fields.
#[test]
fn version_2_messages() {
    // An RDMA2_MSG Call with a Write chunk whose handle is the one to invalidate.
    let m = format!(
        "00000042 00000002 00000020 00000000 00000000 00000abc 00000000 \
         00000001 00000001 00000abc 00001000 00000000 10000000 00000000 00000000 {NULL_CALL}"
    );
    let v = decode(&["decode", &m]);
    assert_eq!(v["vers"], 2);
    assert_eq!(v["htype"], "RDMA2_MSG");
    assert_eq!(v["flags"], 0);
    assert_eq!(v["inv_handle"], 0xabc);
    assert_eq!(v["write_list"][0][0]["handle"], 0xabc);
    assert_eq!(v["rpc"]["xid"], 0x42);
    assert_eq!(v["header_len"], 60);
    assert_eq!(v["verdict"], "call");
    assert!(v["properties"].is_null());

    // RDMA2_CONNPROP: Receive Buffer Size 8192, an unknown property, Reverse Request
    // Support GENL.
    let p = "00000001 00000002 00000001 00000005 00000000 00000003 \
             00000001 00000004 00002000 00000063 00000003 01020300 00000002 00000004 00000002";
    let v = decode(&["decode", p]);
    assert_eq!(v["htype"], "RDMA2_CONNPROP");
    let props = v["properties"].as_array().unwrap();
    assert_eq!(props.len(), 3);
    assert_eq!(props[0]["id"], 1);
    assert_eq!(props[0]["name"], "receive_buffer_size");
    assert_eq!(props[0]["value"], 8192);
    assert_eq!(props[1]["id"], 99);
    assert!(props[1]["name"].is_null());
    assert_eq!(props[1]["value"], "010203");
    assert_eq!(props[2]["value"], "RDMA2_RVREQSUP_GENL");
    assert_eq!(v["verdict"], "properties");

    // RDMA2_ERROR / RDMA2_ERR_WRITE_RESOURCE, received by the requester.
    let e = "00000042 00000002 00000020 00000004 00000001 00000007 00000001 00002000";
    let v = decode(&["decode", "--as", "requester", e]);
    assert_eq!(v["htype"], "RDMA2_ERROR");
    assert_eq!(v["flags"], 1);
    assert_eq!(v["error"]["name"], "RDMA2_ERR_WRITE_RESOURCE");
    assert_eq!(v["error"]["chunk_index"], 1);
    assert_eq!(v["error"]["length_needed"], 8192);
    assert_eq!(v["verdict"], "peer_error");

    // Hostile: reserved flag bits, answered RDMA2_ERR_BAD_XDR; an unknown header type,
    // RDMA2_ERR_INVAL_HTYPE.
    let bad = format!(
        "00000042 00000002 00000020 00000000 80000000 00000000 00000000 00000000 00000000 {NULL_CALL}"
    );
    let v = decode(&["decode", &bad]);
    assert_eq!(v["verdict"], "rdma2_error");
    assert_eq!(v["reply_error"]["name"], "RDMA2_ERR_BAD_XDR");
    let v = decode(&["decode", "00000042 00000002 00000020 00000007 00000000"]);
    assert_eq!(v["htype"], 7);
    assert_eq!(v["reply_error"]["name"], "RDMA2_ERR_INVAL_HTYPE");

    // A version 1 server's answer to a version 2 probe: ERR_VERS 1..1 in version 1's
    // layout, echoing vers 2: the client falls back.
    let v = decode(&[
        "decode",
        "--as",
        "requester",
        "00000042 00000002 00000020 00000004 00000001 00000001 00000001",
    ]);
    assert_eq!(v["error"]["name"], "RDMA2_ERR_VERS");
    assert_eq!(v["error"]["vers_low"], 1);
    assert!(v["flags"].is_null());
    assert_eq!(v["verdict"], "fall_back");
}
