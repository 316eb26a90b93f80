//! The receive-path verdict for both roles on arbitrary bytes: never panics, and a Call judged
//! "process" really has a decodable header and a consistent reassembly plan.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::verdict::{judge, judge_call, judge_reply, Role};

fuzz_target!(|data: &[u8]| {
    let _ = judge(data, Role::Responder);
    let _ = judge(data, Role::Requester);
    if let Ok(c) = judge_call(data) {
        assert!(c.header.header_len() <= data.len());
        for _ in c.plan.pieces() {}
    }
    let _ = judge_reply(data);
});
