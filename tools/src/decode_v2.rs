//! `rpcrdma decode` of a version 2 message (`rdma_vers` 2): the version 1 JSON contract
//! (`xid`, `vers`, `credit`, `proc`, the lists, `error`, `rpc`, `inline_payload_len`,
//! `header_len`, `length`, `role`, `verdict`, `reason`) plus `htype` (the draft's name),
//! `flags`, `inv_handle`, `properties` (`[{"id", "name", "value"}]`) and the error's own
//! fields. Fields the message cannot hold are `null`.

use crate::render::{read_list_json, role_json, segments_json};
use rpcrdma_proto::v2;
use rpcrdma_proto::v2::props::{Property, Props};
use rpcrdma_proto::v2::Htype;
use rpcrdma_proto::verdict::Role;
use serde_json::{json, Map, Value};

/// An error's code, name and arm as JSON.
pub fn error_json(e: &v2::RdmaError) -> Value {
    let mut o = Map::new();
    o.insert("code".into(), json!(e.code()));
    o.insert("name".into(), json!(e.name()));
    match *e {
        v2::RdmaError::Vers { low, high } => {
            o.insert("vers_low".into(), json!(low));
            o.insert("vers_high".into(), json!(high));
        }
        v2::RdmaError::ReadChunks { max_chunks } | v2::RdmaError::WriteChunks { max_chunks } => {
            o.insert("max_chunks".into(), json!(max_chunks));
        }
        v2::RdmaError::Segments { max_segments } => {
            o.insert("max_segments".into(), json!(max_segments));
        }
        v2::RdmaError::WriteResource {
            chunk_index,
            length_needed,
        } => {
            o.insert("chunk_index".into(), json!(chunk_index));
            o.insert("length_needed".into(), json!(length_needed));
        }
        v2::RdmaError::ReplyResource { length_needed } => {
            o.insert("length_needed".into(), json!(length_needed));
        }
        v2::RdmaError::BadXdr
        | v2::RdmaError::InvalHtype
        | v2::RdmaError::System
        | v2::RdmaError::Other { .. } => {}
    }
    Value::Object(o)
}

fn properties_json(p: &Props<'_>) -> Value {
    Value::Array(
        p.iter()
            .map(|pv| {
                let (name, value) = match Property::decode(pv) {
                    Ok(Property::RecvBufSize(v)) => (json!("receive_buffer_size"), json!(v)),
                    Ok(Property::ReverseRequests(l)) => {
                        (json!("reverse_request_support"), json!(l.map(|l| l.name())))
                    }
                    _ => (Value::Null, json!(crate::hex::encode(pv.data))),
                };
                json!({"id": pv.which, "name": name, "value": value})
            })
            .collect(),
    )
}

/// Describes a version 2 message as `rpcrdma decode` does.
pub fn describe(buf: &[u8], role: Role) -> Value {
    let mut o = Map::new();
    let word = |i: usize| {
        buf.get(4 * i..4 * i + 4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    };
    let htype_raw = word(3);
    o.insert("xid".into(), json!(word(0)));
    o.insert("vers".into(), json!(word(1)));
    o.insert("credit".into(), json!(word(2)));
    let htype_name = htype_raw.map(|h| match Htype::from_u32(h) {
        Some(t) => json!(t.name()),
        None => json!(h),
    });
    o.insert("htype".into(), htype_name.clone().unwrap_or(Value::Null));
    o.insert("proc".into(), htype_name.unwrap_or(Value::Null));
    o.insert("flags".into(), json!(word(4)));
    let mut fields = [
        ("inv_handle", Value::Null),
        ("read_list", Value::Null),
        ("write_list", Value::Null),
        ("reply_chunk", Value::Null),
        ("error", Value::Null),
        ("properties", Value::Null),
        ("rpc", Value::Null),
        ("inline_payload_len", Value::Null),
        ("header_len", Value::Null),
    ];
    let mut set = |k: &str, v: Value| {
        if let Some(f) = fields.iter_mut().find(|f| f.0 == k) {
            f.1 = v;
        }
    };
    if let Ok(h) = v2::HeaderView::parse(buf) {
        if h.is_v1_err_vers() {
            // Version 1's fixed ERR_VERS layout has no flags word.
            o.insert("flags".into(), Value::Null);
        }
        set("header_len", json!(h.header_len()));
        match h.body() {
            v2::ViewBody::Chunks {
                inv_handle,
                reads,
                writes,
                reply,
                ..
            } => {
                set("inv_handle", json!(inv_handle));
                set("read_list", read_list_json(reads));
                set(
                    "write_list",
                    Value::Array(writes.iter().map(segments_json).collect()),
                );
                set(
                    "reply_chunk",
                    reply.map(segments_json).unwrap_or(Value::Null),
                );
                let payload = h.payload();
                set("inline_payload_len", json!(payload.len()));
                if h.htype() == Htype::Msg {
                    if let Ok((m, len)) = rpcrdma_proto::rpc::RpcMessage::parse(payload) {
                        set("rpc", crate::render::message_json(&m, len));
                    }
                }
            }
            v2::ViewBody::Error(e) => {
                set("error", error_json(&e));
                set("inline_payload_len", json!(0));
            }
            v2::ViewBody::ConnProp(p) => {
                set("properties", properties_json(&p));
                set("inline_payload_len", json!(0));
            }
        }
    }
    for (k, val) in fields {
        o.insert(k.into(), val);
    }
    o.insert("length".into(), json!(buf.len()));
    o.insert("role".into(), role_json(role));
    let v = v2::judge(buf, role, false);
    o.insert("verdict".into(), json!(v.action.name()));
    let reply_error = match v.action {
        v2::Action::Error(e) => error_json(&e),
        _ => Value::Null,
    };
    o.insert("reply_error".into(), reply_error);
    o.insert("reason".into(), json!(v.reason));
    Value::Object(o)
}
