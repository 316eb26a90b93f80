//! JSON renderings of decoded protocol values for `rpcrdma decode`: RPC messages, private
//! data, and the pieces versions 1 and 2 share (chunk lists, segments, the receiving side).

use rpcrdma_proto::header::{ReadList, Segment, Segments};
use rpcrdma_proto::private_data::{self, Parsed, PrivateData};
use rpcrdma_proto::rpc::{self, AcceptStat, OpaqueAuth, RejectedReply, ReplyBody, RpcMessage};
use rpcrdma_proto::verdict::Role;
use serde_json::{json, Value};

/// Renders RFC 8797 private data and what a peer would behave as after receiving it.
pub fn private_data_json(buf: &[u8], parsed: Parsed) -> Value {
    let fields = |d: &PrivateData| {
        json!({
            "version": d.version,
            "remote_invalidation": d.remote_invalidation,
            "send_size": d.send_size,
            "receive_size": d.receive_size,
        })
    };
    let effective = parsed.effective();
    let mut v = json!({
        "length": buf.len(),
        "present": parsed.is_present(),
    });
    let o = v.as_object_mut().expect("object");
    match parsed {
        Parsed::Present { data, offset } => {
            let raw = &buf[offset..offset + private_data::ENCODED_LEN];
            o.insert("offset".into(), json!(offset));
            o.insert(
                "format_identifier".into(),
                json!(format!("{:08x}", private_data::FORMAT_IDENTIFIER)),
            );
            o.insert("version".into(), json!(data.version));
            o.insert(
                "remote_invalidation".into(),
                json!(data.remote_invalidation),
            );
            o.insert(
                "reserved".into(),
                json!(raw[5] & private_data::RESERVED_MASK),
            );
            o.insert("send_size".into(), json!(data.send_size));
            o.insert("send_size_encoded".into(), json!(raw[6]));
            o.insert("receive_size".into(), json!(data.receive_size));
            o.insert("receive_size_encoded".into(), json!(raw[7]));
            o.insert("absent_reason".into(), Value::Null);
        }
        Parsed::Absent(reason) => {
            for k in [
                "offset",
                "format_identifier",
                "version",
                "remote_invalidation",
                "reserved",
                "send_size",
                "send_size_encoded",
                "receive_size",
                "receive_size_encoded",
            ] {
                o.insert(k.into(), Value::Null);
            }
            o.insert(
                "absent_reason".into(),
                json!(reason.name().replace('-', "_")),
            );
        }
    }
    o.insert("effective".into(), fields(&effective));
    o.insert("reason".into(), json!(parsed.describe()));
    v
}

fn auth_json(a: &OpaqueAuth<'_>) -> Value {
    let mut v = json!({
        "flavor": a.flavor,
        "flavor_name": rpc::flavor_name(a.flavor),
        "length": a.body.len(),
    });
    if let Some(sys) = a.auth_sys() {
        v["auth_sys"] = match sys {
            Ok(s) => json!({
                "stamp": s.stamp,
                "machinename": String::from_utf8_lossy(s.machinename),
                "uid": s.uid,
                "gid": s.gid,
                "gids": s.gids.iter().collect::<Vec<_>>(),
            }),
            Err(e) => json!({"error": e.to_string()}),
        };
    }
    v
}

/// Renders a decoded ONC RPC message header (RFC 5531 §9).
pub fn message_json(m: &RpcMessage<'_>, header_len: usize) -> Value {
    match m {
        RpcMessage::Call(c) => json!({
            "msg_type": "CALL",
            "xid": c.xid,
            "rpcvers": c.rpcvers,
            "prog": c.prog,
            "vers": c.vers,
            "proc": c.proc_num,
            "cred": auth_json(&c.cred),
            "verf": auth_json(&c.verf),
            "header_len": header_len,
        }),
        RpcMessage::Reply(r) => {
            let mut v = json!({
                "msg_type": "REPLY",
                "xid": r.xid,
                "reply_stat": r.body.name(),
                "header_len": header_len,
            });
            match r.body {
                ReplyBody::Accepted { verf, stat } => {
                    v["verf"] = auth_json(&verf);
                    v["accept_stat"] = json!(stat.name());
                    if let AcceptStat::ProgMismatch { low, high } = stat {
                        v["mismatch_info"] = json!({"low": low, "high": high});
                    }
                }
                ReplyBody::Denied(rej) => {
                    v["reject_stat"] = json!(rej.name());
                    match rej {
                        RejectedReply::RpcMismatch { low, high } => {
                            v["mismatch_info"] = json!({"low": low, "high": high});
                        }
                        RejectedReply::AuthError(stat) => {
                            v["auth_stat"] = match stat.name() {
                                Some(n) => json!(n),
                                None => json!(stat.0),
                            };
                        }
                    }
                }
            }
            v
        }
    }
}

fn segment_json(s: &Segment) -> Value {
    json!({"handle": s.handle, "length": s.length, "offset": s.offset})
}

/// The receiving side's name.
pub fn role_json(role: Role) -> Value {
    json!(match role {
        Role::Responder => "responder",
        Role::Requester => "requester",
    })
}

/// A read list as `[{position, handle, length, offset}]`.
pub fn read_list_json(reads: ReadList<'_>) -> Value {
    Value::Array(
        reads
            .iter()
            .map(|s| {
                json!({"position": s.position, "handle": s.segment.handle,
                       "length": s.segment.length, "offset": s.segment.offset})
            })
            .collect(),
    )
}

/// A chunk's segments as `[{handle, length, offset}]`.
pub fn segments_json(c: Segments<'_>) -> Value {
    Value::Array(c.iter().map(|s| segment_json(&s)).collect())
}
