//! `rpcrdma decode`: one JSON object describing a message and the receive-path verdict.
//!
//! The fields are decoded one by one, so a message that breaks off or goes wrong part way still
//! shows everything before the break; fields the input cannot hold are `null`.

use crate::hex;
use crate::render::{read_list_json, role_json, segments_json};
use rpcrdma_proto::header::{Proc, ReadList, Segments, WriteList, RPCRDMA_VERSION};
use rpcrdma_proto::private_data;
use rpcrdma_proto::rpc::RpcMessage;
use rpcrdma_proto::verdict::{judge, Role};
use rpcrdma_proto::xdr::XdrReader;
use serde_json::{json, Map, Value};
use std::io::Read;
use std::process::ExitCode;

/// Arguments of `rpcrdma decode`.
#[derive(clap::Args)]
pub struct Args {
    /// The message as hex (white space and `:` separators allowed). Without it, hex is read
    /// from standard input.
    hex: Option<String>,
    /// Read the raw bytes of the message from this file instead.
    #[arg(long, conflicts_with = "hex")]
    file: Option<std::path::PathBuf>,
    /// Judge the message as this side of the connection would.
    #[arg(long = "as", value_enum, default_value_t = As::Responder)]
    role: As,
    /// Decode this hex as RFC 8797 connection private data instead of a message.
    #[arg(long, conflicts_with_all = ["hex", "file"])]
    private_data: Option<String>,
    /// The RPC-over-RDMA version to decode and judge as: `auto` by the message's
    /// `rdma_vers` (2: draft-cel-nfsv4-rpcrdma-version-two-09), `1` as a version 1 receiver
    /// (which answers any other version ERR_VERS), `2` as a version 2 one.
    #[arg(long, value_enum, default_value_t = Version::Auto)]
    version: Version,
    /// Indent the JSON.
    #[arg(long)]
    pretty: bool,
}

/// The protocol version `rpcrdma decode` reads a message as.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Version {
    /// By the message's `rdma_vers`.
    Auto,
    /// Version 1 (RFC 8166).
    #[value(name = "1")]
    One,
    /// Version 2.
    #[value(name = "2")]
    Two,
}

/// The receiving side.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum As {
    /// A server receiving a Call.
    Responder,
    /// A client receiving a Reply.
    Requester,
}

/// Runs the command; exit status 2 only when the input cannot be read.
pub fn run(args: &Args) -> ExitCode {
    let (bytes, is_private) = match read_input(args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rpcrdma decode: {e}");
            return ExitCode::from(2);
        }
    };
    let v = if is_private {
        describe_private_data(&bytes)
    } else {
        let role = match args.role {
            As::Responder => Role::Responder,
            As::Requester => Role::Requester,
        };
        let two = match args.version {
            Version::Auto => bytes.get(4..8) == Some(&[0, 0, 0, 2]),
            Version::One => false,
            Version::Two => true,
        };
        if two {
            crate::decode_v2::describe(&bytes, role)
        } else {
            describe_message(&bytes, role)
        }
    };
    let text = if args.pretty {
        serde_json::to_string_pretty(&v)
    } else {
        serde_json::to_string(&v)
    };
    println!("{}", text.expect("JSON values always serialise"));
    ExitCode::SUCCESS
}

fn read_input(args: &Args) -> Result<(Vec<u8>, bool), String> {
    if let Some(h) = &args.private_data {
        return hex::decode(h).map(|b| (b, true)).map_err(|e| e.to_string());
    }
    if let Some(path) = &args.file {
        return std::fs::read(path)
            .map(|b| (b, false))
            .map_err(|e| format!("{}: {e}", path.display()));
    }
    let text = match &args.hex {
        Some(h) => h.clone(),
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("standard input: {e}"))?;
            s
        }
    };
    hex::decode(&text)
        .map(|b| (b, false))
        .map_err(|e| e.to_string())
}

/// Describes an RPC-over-RDMA message as a version 1 receiver sees it.
pub fn describe_message(buf: &[u8], role: Role) -> Value {
    let mut o = Map::new();
    let mut r = XdrReader::new(buf);
    let word = |r: &mut XdrReader<'_>| r.u32().ok();
    let xid = word(&mut r);
    let vers = word(&mut r);
    let credit = word(&mut r);
    let proc_raw = word(&mut r);
    o.insert("xid".into(), json!(xid));
    o.insert("vers".into(), json!(vers));
    o.insert("credit".into(), json!(credit));
    o.insert(
        "proc".into(),
        match proc_raw {
            None => Value::Null,
            Some(p) => match Proc::from_u32(p) {
                Some(p) => json!(p.name()),
                None => json!(p),
            },
        },
    );
    let mut read_list = Value::Null;
    let mut write_list = Value::Null;
    let mut reply_chunk = Value::Null;
    let mut error = Value::Null;
    let mut rpc = Value::Null;
    let mut inline_len = Value::Null;
    let mut header_len = Value::Null;
    let proc = proc_raw.and_then(Proc::from_u32);
    match proc {
        Some(Proc::Error) => {
            let code = word(&mut r);
            let (low, high) = if code == Some(1) {
                (word(&mut r), word(&mut r))
            } else {
                (None, None)
            };
            if let Some(code) = code {
                let name = match code {
                    1 => json!("ERR_VERS"),
                    2 => json!("ERR_CHUNK"),
                    c => json!(c),
                };
                error = json!({"code": name, "vers_low": low, "vers_high": high});
                inline_len = json!(0);
            }
        }
        Some(Proc::Msg | Proc::NoMsg | Proc::Msgp) if vers == Some(RPCRDMA_VERSION) => {
            let padded = if proc == Some(Proc::Msgp) {
                word(&mut r).zip(word(&mut r))
            } else {
                Some((0, 0))
            };
            if let Some((align, thresh)) = padded {
                if proc == Some(Proc::Msgp) {
                    o.insert("msgp".into(), json!({"align": align, "thresh": thresh}));
                }
                if let Ok(reads) = ReadList::parse(&mut r) {
                    read_list = read_list_json(reads);
                    if let Ok(writes) = WriteList::parse(&mut r) {
                        write_list = Value::Array(writes.iter().map(segments_json).collect());
                        let reply = match r.optional() {
                            Ok(true) => Segments::parse(&mut r).map(Some).ok(),
                            Ok(false) => Some(None),
                            Err(_) => None,
                        };
                        if let Some(reply) = reply {
                            reply_chunk = reply.map(segments_json).unwrap_or(Value::Null);
                            header_len = json!(r.position());
                            if proc == Some(Proc::NoMsg) {
                                inline_len = json!(0);
                            } else {
                                let payload = r.rest();
                                inline_len = json!(payload.len());
                                rpc = rpc_json(payload);
                            }
                        }
                    }
                }
            }
        }
        Some(Proc::Done) if vers == Some(RPCRDMA_VERSION) => {
            inline_len = json!(0);
            header_len = json!(16);
        }
        _ => {}
    }
    o.insert("read_list".into(), read_list);
    o.insert("write_list".into(), write_list);
    o.insert("reply_chunk".into(), reply_chunk);
    o.insert("error".into(), error);
    o.insert("rpc".into(), rpc);
    o.insert("inline_payload_len".into(), inline_len);
    o.insert("header_len".into(), header_len);
    o.insert("length".into(), json!(buf.len()));
    o.insert("role".into(), role_json(role));
    let v = judge(buf, role);
    o.insert("verdict".into(), json!(v.action.name()));
    if let Some(e) = v.rdma_error() {
        o.insert("reply_error".into(), json!({"code": e.code()}));
    }
    o.insert("reason".into(), json!(v.reason));
    Value::Object(o)
}

fn rpc_json(payload: &[u8]) -> Value {
    match RpcMessage::parse(payload) {
        Ok((m, len)) => crate::render::message_json(&m, len),
        Err(_) => Value::Null,
    }
}

/// Describes RFC 8797 private data.
pub fn describe_private_data(buf: &[u8]) -> Value {
    crate::render::private_data_json(buf, private_data::parse(buf))
}
