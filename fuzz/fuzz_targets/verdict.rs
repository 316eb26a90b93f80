//! The receive-path verdict for both roles on arbitrary bytes: never panics, a Call judged
//! "process" really has a decodable header and a consistent reassembly plan, and the
//! Write-list fast paths accept only what the full verdicts accept.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::verdict::{
    judge, judge_call, judge_call_full, judge_reply, judge_reply_full, write_call, write_reply, Role,
};

fuzz_target!(|data: &[u8]| {
    let _ = judge(data, Role::Responder);
    let _ = judge(data, Role::Requester);
    if let Ok(c) = judge_call(data) {
        assert!(c.header.header_len() <= data.len());
        for _ in c.plan.pieces() {}
    }
    let _ = judge_reply(data);
    if let Some(w) = write_call(data) {
        let full = judge_call_full(data).expect("write_call took a refused Call");
        assert_eq!(w.writes, full.header.write_list());
    }
    if let Some(w) = write_reply(data) {
        let full = judge_reply_full(data).expect("write_reply took a discarded Reply");
        assert_eq!(w.writes, full.header.write_list());
    }
});
