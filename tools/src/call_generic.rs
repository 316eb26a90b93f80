//! `rpcrdma call --prog P --vers V --proc N`: any ONC RPC program's procedure over
//! RPC-over-RDMA (the Linux kernel's nfsd, nfs3d, `rpcrdma serve`), with arguments already
//! XDR-encoded, a credential, a DDP-eligible argument (sent in a Read chunk when it does not
//! fit inline), Write chunks for DDP-eligible results and the largest reply expected (a
//! Reply chunk is offered when it exceeds the inline threshold); nothing is assumed about
//! the program. Prints one JSON object per call.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::proto::rpc::{
    AcceptStat, AuthSys, Gids, OpaqueAuth, RejectedReply, ReplyBody, AUTH_SYS,
};
use rpcrdma_engine::requester::{CallArgs, Client};
use serde_json::{json, Value};

use crate::hex;

/// The options of a call to any program.
#[derive(ClapArgs, Debug, Clone)]
pub struct Generic {
    /// Call this program instead of the built-in one (its number).
    #[arg(long, conflicts_with = "workload")]
    pub prog: Option<u32>,
    /// The program's version.
    #[arg(long, default_value_t = 1, requires = "prog")]
    pub vers: u32,
    /// The procedure.
    #[arg(long = "proc", default_value_t = 0, requires = "prog")]
    pub proc_num: u32,
    /// The arguments, XDR-encoded, as hex (spaces and ':' allowed).
    #[arg(long, requires = "prog", conflicts_with = "args_file")]
    pub args_hex: Option<String>,
    /// The arguments, XDR-encoded, from a file.
    #[arg(long, requires = "prog")]
    pub args_file: Option<PathBuf>,
    /// The credential: `none`, or `sys[:UID:GID[:GID,GID...]]` (AUTH_SYS, machine name
    /// `rpcrdma`).
    #[arg(long, default_value = "none")]
    pub cred: String,
    /// A DDP-eligible argument (an opaque ending the arguments) read from a file.
    #[arg(long, requires = "prog")]
    pub bulk_arg_file: Option<PathBuf>,
    /// A Write chunk of LEN bytes for the next DDP-eligible result (repeatable).
    #[arg(long = "write-chunk", requires = "prog")]
    pub write_chunks: Vec<u32>,
    /// The largest reply expected, in bytes of results (a Reply chunk is offered when the
    /// reply could exceed the inline threshold).
    #[arg(long, default_value_t = 4096, requires = "prog")]
    pub max_reply: u32,
    /// Save each Write chunk's bytes as DIR/chunk-I-J.bin (call I, chunk J).
    #[arg(long, requires = "prog")]
    pub save_bulk: Option<PathBuf>,
}

/// Why the call's options are unusable.
#[derive(Debug)]
pub enum OptError {
    /// The arguments are not hex or not whole XDR words.
    Args(String),
    /// The credential is not `none` or `sys[:UID:GID[:GIDS]]`.
    Cred(String),
    /// A file cannot be read.
    File(String),
}

impl core::fmt::Display for OptError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OptError::Args(s) => write!(f, "--args: {s}"),
            OptError::Cred(s) => write!(f, "--cred: {s}"),
            OptError::File(s) => f.write_str(s),
        }
    }
}

/// The AUTH_SYS body `--cred` asks for, or `None` for AUTH_NONE.
pub fn cred_body(spec: &str) -> Result<Option<Vec<u8>>, OptError> {
    if spec == "none" {
        return Ok(None);
    }
    let rest = spec
        .strip_prefix("sys")
        .ok_or_else(|| OptError::Cred(format!("{spec:?} is not none or sys[:UID:GID[:GIDS]]")))?;
    let parts: Vec<&str> = rest.split(':').skip(1).collect();
    let num = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| OptError::Cred(format!("{s:?} is not a number")))
    };
    let uid = parts.first().map_or(Ok(0), |s| num(s))?;
    let gid = parts.get(1).map_or(Ok(0), |s| num(s))?;
    let gids: Vec<u32> = match parts.get(2) {
        Some(g) if !g.is_empty() => g.split(',').map(num).collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    if parts.len() > 3 || gids.len() > 16 {
        return Err(OptError::Cred("at most UID:GID:16 groups".into()));
    }
    let mut body = vec![0u8; 400];
    let n = AuthSys {
        stamp: std::process::id(),
        machinename: b"rpcrdma",
        uid,
        gid,
        gids: Gids::new(&gids).ok_or_else(|| OptError::Cred("too many groups".into()))?,
    }
    .encode(&mut body)
    .map_err(|e| OptError::Cred(e.to_string()))?;
    body.truncate(n);
    Ok(Some(body))
}

/// The argument bytes `--args-hex` or `--args-file` give (whole XDR words).
pub fn args_bytes(g: &Generic) -> Result<Vec<u8>, OptError> {
    let bytes = match (&g.args_hex, &g.args_file) {
        (Some(h), _) => hex::decode(h).map_err(|e| OptError::Args(format!("{e:?}")))?,
        (None, Some(f)) => {
            std::fs::read(f).map_err(|e| OptError::File(format!("{}: {e}", f.display())))?
        }
        (None, None) => Vec::new(),
    };
    if bytes.len() % 4 != 0 {
        return Err(OptError::Args(format!(
            "{} bytes are not whole XDR words (a multiple of 4)",
            bytes.len()
        )));
    }
    Ok(bytes)
}

fn status_json(body: &ReplyBody<'_>) -> Value {
    match body {
        ReplyBody::Accepted { stat, .. } => {
            let mut v = json!({ "reply_stat": "MSG_ACCEPTED", "accept_stat": stat.name() });
            if let AcceptStat::ProgMismatch { low, high } = stat {
                v["low"] = json!(low);
                v["high"] = json!(high);
            }
            v
        }
        ReplyBody::Denied(RejectedReply::RpcMismatch { low, high }) => json!({
            "reply_stat": "MSG_DENIED", "reject_stat": "RPC_MISMATCH", "low": low, "high": high
        }),
        ReplyBody::Denied(RejectedReply::AuthError(a)) => json!({
            "reply_stat": "MSG_DENIED", "reject_stat": "AUTH_ERROR",
            "auth_stat": a.name().map_or(Value::from(a.0), Value::from)
        }),
    }
}

/// Calls `g`'s procedure `count` times on `client`; exit status 0 when every call got a
/// reply (whatever its status: PROG_UNAVAIL is an answer), 1 when one failed at the
/// transport (timeout, connection lost), 2 for unusable options.
pub fn run<P: Provider>(
    client: &mut Client<P>,
    g: &Generic,
    count: u32,
    timeout: Duration,
) -> ExitCode {
    let prog = g.prog.unwrap_or(0);
    let (args, cred, bulk) = match (args_bytes(g), cred_body(&g.cred)) {
        (Ok(a), Ok(c)) => {
            let bulk = match &g.bulk_arg_file {
                Some(f) => match std::fs::read(f) {
                    Ok(b) => Some(b),
                    Err(e) => {
                        eprintln!("call: {}: {e}", f.display());
                        return ExitCode::from(2);
                    }
                },
                None => None,
            };
            (a, c, bulk)
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("call: {e}");
            return ExitCode::from(2);
        }
    };
    let mut call = CallArgs::new(prog, g.vers, g.proc_num, &args, g.max_reply);
    call.timeout = timeout;
    call.bulk_arg = bulk.as_deref();
    call.bulk_results = &g.write_chunks;
    if let Some(body) = &cred {
        call.cred = OpaqueAuth {
            flavor: AUTH_SYS,
            body,
        };
    }
    let mut ok = true;
    for i in 0..count.max(1) {
        let before = client.snapshot();
        let t = Instant::now();
        let outcome = client.call(&call, |r| {
            r.map(|r| {
                let chunks: Vec<Vec<u8>> = r.bulk().iter().map(|b| b.to_vec()).collect();
                (
                    status_json(&r.rpc.body),
                    hex::encode(r.results),
                    chunks,
                    r.rpc.xid,
                )
            })
        });
        let latency_us = t.elapsed().as_secs_f64() * 1e6;
        let after = client.snapshot();
        let d = |a: u64, b: u64| a.saturating_sub(b) > 0;
        let call_form = if d(after.long_calls, before.long_calls) {
            "long"
        } else if d(after.chunked_calls, before.chunked_calls) {
            "chunked"
        } else {
            "short"
        };
        let reply_form = if d(after.long_replies, before.long_replies) {
            "reply_chunk"
        } else {
            "inline"
        };
        let line = match outcome {
            Ok(Ok((status, results_hex, chunks, xid))) => {
                let mut saved = Vec::new();
                if let Some(dir) = &g.save_bulk {
                    for (j, c) in chunks.iter().enumerate() {
                        let p = dir.join(format!("chunk-{i}-{j}.bin"));
                        if let Err(e) = std::fs::write(&p, c) {
                            eprintln!("call: {}: {e}", p.display());
                            ok = false;
                        }
                        saved.push(p.display().to_string());
                    }
                }
                let mut v = json!({
                    "call": i, "xid": xid, "prog": prog, "vers": g.vers, "proc": g.proc_num,
                    "status": "reply", "results_hex": results_hex,
                    "write_chunks": chunks.iter().enumerate().map(|(j, c)| json!({
                        "bytes": c.len(), "saved": saved.get(j)
                    })).collect::<Vec<_>>(),
                    "call_form": call_form, "reply_form": reply_form,
                    "latency_us": (latency_us * 10.0).round() / 10.0,
                });
                if let (Some(o), Some(s)) = (v.as_object_mut(), status.as_object()) {
                    for (k, val) in s {
                        o.insert(k.clone(), val.clone());
                    }
                }
                v
            }
            Ok(Err(e)) | Err(e) => {
                ok = false;
                json!({
                    "call": i, "prog": prog, "vers": g.vers, "proc": g.proc_num,
                    "status": "rpc_error", "error": e.to_string(),
                    "latency_us": (latency_us * 10.0).round() / 10.0,
                })
            }
        };
        println!("{line}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_parse() {
        assert_eq!(cred_body("none").unwrap(), None);
        let b = cred_body("sys:1000:100:4,5").unwrap().unwrap();
        let sys = AuthSys::parse(&b).unwrap();
        assert_eq!((sys.uid, sys.gid, sys.gids.len()), (1000, 100, 2));
        assert_eq!(
            AuthSys::parse(&cred_body("sys").unwrap().unwrap())
                .unwrap()
                .uid,
            0
        );
        for bad in ["kerberos", "sys:x", "sys:1:2:a", "sys:1:2:3:4"] {
            assert!(cred_body(bad).is_err(), "{bad}");
        }
    }
}
