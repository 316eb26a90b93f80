//! The receive-path verdict (RFC 8166 §4.5) for valid and hostile messages, each written by
//! hand as hex words.

mod common;

use common::*;

use rpcrdma_proto::verdict::{judge, Action, Role};

fn responder(words: &str) -> Action {
    judge(&hex(words), Role::Responder).action
}

fn requester(words: &str) -> Action {
    judge(&hex(words), Role::Requester).action
}

const V1: Action = Action::ErrVers { low: 1, high: 1 };

#[test]
fn short_call_is_processed() {
    let m = format!(
        "00000042 00000001 00000020 00000000 00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(responder(&m), Action::Process);
}

#[test]
fn every_prefix_shorter_than_28_bytes_is_discarded() {
    let m = hex(&format!(
        "00000042 00000001 00000020 00000000 00000000 00000000 00000000 {}",
        null_call("00000042")
    ));
    for n in 0..28 {
        assert_eq!(
            judge(&m[..n], Role::Responder).action,
            Action::Discard,
            "{n} bytes"
        );
        assert_eq!(
            judge(&m[..n], Role::Requester).action,
            Action::Discard,
            "{n} bytes"
        );
    }
}

#[test]
fn truncated_anywhere_after_28_bytes_never_processes() {
    // A Call with a read chunk, a write chunk and a reply chunk, cut at every length.
    let m = hex(&format!(
        "00000007 00000001 00000020 00000000
         00000001 00000028 00000011 00000100 00000000 00001000 00000000
         00000001 00000001 00000012 00000200 00000000 00002000 00000000
         00000001 00000001 00000013 00000300 00000000 00003000
         {}",
        null_call("00000007")
    ));
    assert_eq!(judge(&m, Role::Responder).action, Action::Process);
    for n in 28..m.len() {
        let a = judge(&m[..n], Role::Responder).action;
        assert!(
            matches!(a, Action::ErrChunk | Action::GarbageArgs),
            "{n} bytes: {a:?}"
        );
    }
}

#[test]
fn version_mismatch() {
    // A version 2 Call gets ERR_VERS 1..1; a version 2 Reply is discarded by a requester.
    assert_eq!(
        responder("0a0b0c0d 00000002 00000020 00000000 00000000 00000000 00000000"),
        V1
    );
    assert_eq!(
        responder("0a0b0c0d ffffffff 00000020 00000007 00000000 00000000 00000000"),
        V1
    );
    assert_eq!(
        requester("0a0b0c0d 00000002 00000020 00000000 00000000 00000000 00000000"),
        Action::Discard
    );
}

#[test]
fn procedures_at_the_wrong_side() {
    let done = "00000001 00000001 00000001 00000003 00000000 00000000 00000000";
    let msgp = "00000001 00000001 00000001 00000002 00000040 00000400 00000000 00000000 00000000";
    let err_chunk = "00000001 00000001 00000001 00000004 00000002 00000000 00000000";
    let unknown = "00000001 00000001 00000001 00000005 00000000 00000000 00000000";
    assert_eq!(responder(done), Action::Discard); // §4.6.2
    assert_eq!(requester(done), Action::Discard);
    assert_eq!(responder(msgp), Action::ErrChunk); // §4.6.1 SHOULD
    assert_eq!(requester(msgp), Action::Discard); // §4.6.1 MUST
    assert_eq!(responder(err_chunk), Action::Discard); // §4.5: responders discard RDMA_ERROR
    assert_eq!(responder(unknown), Action::ErrChunk); // §4.5.2
    assert_eq!(requester(unknown), Action::Discard);
}

#[test]
fn rdma_error_at_the_requester() {
    // G-1: a 20-byte ERR_CHUNK is accepted; G-2: ERR_VERS is read whatever its rdma_vers.
    assert_eq!(
        requester("00000001 00000001 00000001 00000004 00000002"),
        Action::Process
    );
    assert_eq!(
        requester("00000001 00000007 00000001 00000004 00000001 00000001 00000001"),
        Action::Process
    );
    // ERR_VERS cut short, and an unknown error code, cannot be decoded: discard (§4.5).
    assert_eq!(
        requester("00000001 00000001 00000001 00000004 00000001 00000001"),
        Action::Discard
    );
    assert_eq!(
        requester("00000001 00000001 00000001 00000004 00000003 00000000 00000000"),
        Action::Discard
    );
    assert_eq!(
        requester("00000001 00000001 00000001 00000004"),
        Action::Discard
    );
}

#[test]
fn bool_of_two_and_huge_counts() {
    // A read-list discriminator of 2.
    assert_eq!(
        responder("00000001 00000001 00000001 00000000 00000002 00000000 00000000"),
        Action::ErrChunk
    );
    // A write chunk count of 0xFFFFFFFF.
    assert_eq!(
        responder(
            "00000001 00000001 00000001 00000001 00000000 00000001 ffffffff 00000000 00000000"
        ),
        Action::ErrChunk
    );
    // A reply chunk claiming a million segments in 40 bytes.
    assert_eq!(
        responder("00000001 00000001 00000001 00000001 00000000 00000000 00000001 000f4240 00000000 00000000"),
        Action::ErrChunk
    );
}

#[test]
fn nomsg_rules() {
    // All three lists absent (§4.5.2).
    assert_eq!(
        responder("00000001 00000001 00000001 00000001 00000000 00000000 00000000"),
        Action::ErrChunk
    );
    // A Long Call: Position-Zero Read chunk of two segments plus a reply chunk.
    let long = "00000001 00000001 00000001 00000001
                00000001 00000000 00000011 00001000 00000000 00010000
                00000001 00000000 00000012 00000404 00000000 00020000
                00000000
                00000000
                00000001 00000001 00000013 00002000 00000000 00030000";
    assert_eq!(responder(long), Action::Process);
    // RDMA_NOMSG whose only read chunk is not at Position zero carries no Call.
    assert_eq!(
        responder("00000001 00000001 00000001 00000001 00000001 00000040 00000011 00001000 00000000 00010000 00000000 00000000"),
        Action::ErrChunk
    );
    // A Long Reply at the requester needs the reply chunk.
    assert_eq!(
        requester("00000001 00000001 00000020 00000001 00000000 00000000 00000001 00000001 00000013 00000100 00000000 00030000"),
        Action::Process
    );
    assert_eq!(
        requester("00000001 00000001 00000020 00000001 00000000 00000001 00000001 00000013 00000100 00000000 00030000 00000000 00000000"),
        Action::Discard
    );
}

#[test]
fn xid_mismatch_and_missing_payload() {
    let m = format!(
        "00000042 00000001 00000020 00000000 00000000 00000000 00000000 {}",
        null_call("00000043")
    );
    assert_eq!(responder(&m), Action::ErrChunk); // G-9
    assert_eq!(
        responder("00000042 00000001 00000020 00000000 00000000 00000000 00000000"),
        Action::ErrChunk
    );
    let r = format!(
        "00000042 00000001 00000020 00000000 00000000 00000000 00000000 {}",
        success_reply("00000043")
    );
    assert_eq!(requester(&r), Action::Discard);
    let r = format!(
        "00000042 00000001 00000020 00000000 00000000 00000000 00000000 {}",
        success_reply("00000042")
    );
    assert_eq!(requester(&r), Action::Process);
}

#[test]
fn msg_with_position_zero_chunk_is_ambiguous() {
    // G-7.
    let m = format!(
        "00000042 00000001 00000020 00000000 00000001 00000000 00000011 00001000 00000000 00010000 00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(responder(&m), Action::ErrChunk);
}

#[test]
fn read_chunk_positions() {
    // A DDP-eligible argument after the 40-byte call header: position 40 (0x28) is valid.
    let ok = format!(
        "00000042 00000001 00000020 00000000 00000001 00000028 00000011 00001000 00000000 00010000 00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(responder(&ok), Action::Process);
    // Misaligned position 41.
    let m = ok.replacen("00000028 00000011", "00000029 00000011", 1);
    assert_eq!(responder(&m), Action::ErrChunk);
    // Beyond the unreduced stream (the inline part ends at 40).
    let m = ok.replacen("00000028 00000011", "00000100 00000011", 1);
    assert_eq!(responder(&m), Action::GarbageArgs);
    // Inside the RPC Call header (position 8): reduces data that is never DDP-eligible.
    let m = ok.replacen("00000028 00000011", "00000008 00000011", 1);
    assert_eq!(responder(&m), Action::GarbageArgs);
}

#[test]
fn overlapping_and_non_adjacent_chunks() {
    // Two chunks at 40 and 44; the first is 16 bytes long, so the second overlaps it.
    let m = format!(
        "00000042 00000001 00000020 00000000
         00000001 00000028 00000011 00000010 00000000 00010000
         00000001 0000002c 00000012 00000010 00000000 00020000
         00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(responder(&m), Action::GarbageArgs);
    // Segments at 40, 48, 40: the two at 40 are not adjacent (G-8).
    let m = format!(
        "00000042 00000001 00000020 00000000
         00000001 00000028 00000011 00000004 00000000 00010000
         00000001 00000030 00000012 00000004 00000000 00020000
         00000001 00000028 00000013 00000004 00000000 00030000
         00000000 00000000 00000000 {} 00000000 00000000",
        null_call("00000042")
    );
    assert_eq!(responder(&m), Action::ErrChunk);
}

#[test]
fn wrapping_offsets_and_oversized_chunks() {
    // offset + length wraps 2^64 in a write chunk.
    let m = format!(
        "00000042 00000001 00000020 00000000 00000000 00000001 00000001 00000011 00000010 ffffffff fffffff8 00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(responder(&m), Action::ErrChunk);
    // A write chunk whose two segment lengths sum past 2^32.
    let m = format!(
        "00000042 00000001 00000020 00000000 00000000
         00000001 00000002 00000011 ffffffff 00000000 00010000 00000012 00000002 00000000 00020000
         00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(responder(&m), Action::ErrChunk);
    // The same in a Reply is discarded by the requester.
    let r = format!(
        "00000042 00000001 00000020 00000000 00000000
         00000001 00000002 00000011 ffffffff 00000000 00010000 00000012 00000002 00000000 00020000
         00000000 00000000 {}",
        success_reply("00000042")
    );
    assert_eq!(requester(&r), Action::Discard);
    // Read chunk lengths summing past 2^32.
    let m = format!(
        "00000042 00000001 00000020 00000000
         00000001 00000028 00000011 ffffffff 00000000 00010000
         00000001 00000028 00000012 00000008 00000000 00020000
         00000000 00000000 00000000 {}",
        null_call("00000042")
    );
    assert_eq!(responder(&m), Action::ErrChunk);
}

#[test]
fn garbage_rpc_header() {
    // Valid transport header, but the RPC call's credential claims 500 bytes (max 400).
    let m = "00000042 00000001 00000020 00000000 00000000 00000000 00000000
             00000042 00000000 00000002 000186a3 00000003 00000000 00000001 000001f4";
    assert_eq!(responder(m), Action::GarbageArgs);
}

#[test]
fn reply_read_list_is_discarded() {
    let r = format!(
        "00000042 00000001 00000020 00000000 00000001 00000018 00000011 00000010 00000000 00010000 00000000 00000000 00000000 {}",
        success_reply("00000042")
    );
    assert_eq!(requester(&r), Action::Discard);
}

mod has_chunks {
    use proptest::prelude::*;
    use rpcrdma_proto::verdict::{call_has_chunks, judge_call};

    fn full(buf: &[u8]) -> bool {
        judge_call(buf).is_ok_and(|c| c.plan.chunk_count() > 0)
    }

    /// A Short Call, a Call with a Read chunk at position 44, and a Long Call.
    fn seeds() -> Vec<Vec<u8>> {
        let null = super::null_call("00000042");
        let short =
            format!("00000042 00000001 00000020 00000000 00000000 00000000 00000000 {null}");
        let chunked = format!(
            "00000042 00000001 00000020 00000000 \
             00000001 0000002c 00000007 00000010 00000000 00001000 00000000 \
             00000000 00000000 {null} 00000010"
        );
        let long = "00000042 00000001 00000020 00000001 \
             00000001 00000000 00000007 00000030 00000000 00001000 00000000 \
             00000000 00000000";
        [short, chunked, long.to_string()]
            .iter()
            .map(|m| super::hex(m))
            .collect()
    }

    #[test]
    fn seeds_are_what_they_claim() {
        let s = seeds();
        assert!(!call_has_chunks(&s[0]) && !full(&s[0]));
        assert!(call_has_chunks(&s[1]) && full(&s[1]));
        assert!(call_has_chunks(&s[2]) && full(&s[2]));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// The two-word shortcut never disagrees with the full verdict, on valid messages
        /// with any byte changed or any length cut.
        #[test]
        fn shortcut_agrees_with_the_full_verdict(
            which in 0usize..3,
            edits in proptest::collection::vec((0usize..128, any::<u8>()), 0..4),
            cut in 0usize..128,
        ) {
            let mut m = seeds()[which].clone();
            let len = m.len();
            for (at, v) in edits {
                m[at % len] = v;
            }
            m.truncate(m.len() - cut.min(m.len()));
            prop_assert_eq!(call_has_chunks(&m), full(&m));
        }

        #[test]
        fn shortcut_agrees_on_random_bytes(m in proptest::collection::vec(any::<u8>(), 0..96)) {
            prop_assert_eq!(call_has_chunks(&m), full(&m));
        }
    }
}

mod fast_path {
    use proptest::prelude::*;
    use rpcrdma_proto::header::Proc;
    use rpcrdma_proto::shape::{call_shape, reply_shape, CallShape, Refusal, ReplyShape};
    use rpcrdma_proto::v2::Wire;
    use rpcrdma_proto::verdict::{
        accept_short_call, accept_short_reply, judge_call, judge_call_full, judge_reply,
        judge_reply_full, pulled_call, resume_call, short_call, short_reply, write_call,
        write_reply, AcceptedCall, AcceptedReply, Verdict,
    };

    /// Calls: Short (AUTH_NONE), Short with AUTH_SYS and arguments, chunked, Long, Short with
    /// a Write chunk, Short with a Reply chunk.
    fn call_seeds() -> Vec<Vec<u8>> {
        let null = super::null_call("00000042");
        let sys = "00000042 00000000 00000002 00061a84 00000001 00000002 \
                   00000001 00000018 00000007 00000003 61626300 00000000 00000000 00000000 \
                   00000000 00000000 00000004 01020304";
        [
            format!("00000042 00000001 00000020 00000000 00000000 00000000 00000000 {null}"),
            format!("00000042 00000001 00000001 00000000 00000000 00000000 00000000 {sys}"),
            format!(
                "00000042 00000001 00000020 00000000 \
                 00000001 0000002c 00000007 00000010 00000000 00001000 00000000 \
                 00000000 00000000 {null} 00000010"
            ),
            "00000042 00000001 00000020 00000001 \
             00000001 00000000 00000007 00000030 00000000 00001000 00000000 \
             00000000 00000000"
                .to_string(),
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000001 00000012 00000200 00000000 00002000 00000000 \
                 00000000 {null}"
            ),
            format!(
                "00000042 00000001 00000020 00000000 00000000 00000000 \
                 00000001 00000001 00000013 00000300 00000000 00003000 {null}"
            ),
        ]
        .iter()
        .chain(&write_seeds())
        .chain(&pulled_seeds())
        .map(|m| super::hex(m))
        .collect()
    }

    /// Calls with one Read chunk of one segment, an RDMA_MSG without Write list or Reply
    /// chunk (`pulled_call`'s shape): with AUTH_SYS and the chunk after the arguments; the
    /// chunk inside the RPC Call header (GARBAGE_ARGS); at a misaligned Position, at
    /// Position zero, past the inline payload (ERR_CHUNK); a segment that wraps past 2^64
    /// (ERR_CHUNK); a 4 KiB chunk of an odd length in the middle of the arguments.
    fn pulled_seeds() -> Vec<String> {
        let null = super::null_call("00000042");
        let sys = "00000042 00000000 00000002 00061a84 00000001 00000002 \
                   00000001 00000018 00000007 00000003 61626300 00000000 00000000 00000000 \
                   00000000 00000000 00000004 01020304";
        let one = |position: &str, segment: &str, rpc: &str| {
            format!(
                "00000042 00000001 00000020 00000000 \
                 00000001 {position} {segment} 00000000 00000000 00000000 {rpc}"
            )
        };
        let seg = "00000007 00001000 00000000 00010000";
        vec![
            one("00000048", seg, sys),
            one("00000008", seg, &format!("{null} 00000010")),
            one("0000002e", seg, &format!("{null} 00000010")),
            one("00000000", seg, &format!("{null} 00000010")),
            one("00000100", seg, &format!("{null} 00000010")),
            one(
                "0000002c",
                "00000007 00000100 ffffffff ffffff80",
                &format!("{null} 00000010"),
            ),
            one(
                "0000002c",
                "00000007 00000ffd 00000000 00010000",
                &format!("{null} 00000010 00000020"),
            ),
        ]
    }

    /// Calls whose only chunks are Write chunks: two chunks (two segments, then one), a
    /// chunk whose second segment wraps past 2^64, an empty chunk after a full one, and
    /// three one-segment chunks with AUTH_SYS.
    fn write_seeds() -> Vec<String> {
        let null = super::null_call("00000042");
        let sys = "00000042 00000000 00000002 00061a84 00000001 00000002 \
                   00000001 00000018 00000007 00000003 61626300 00000000 00000000 00000000 \
                   00000000 00000000 00000004 01020304";
        let seg = "00000012 00000200 00000000 00002000";
        vec![
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000002 {seg} 00000013 00000100 00000000 00003000 \
                 00000001 00000001 {seg} 00000000 00000000 {null}"
            ),
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000002 {seg} 00000013 00000100 ffffffff ffffff80 \
                 00000000 00000000 {null}"
            ),
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000001 {seg} 00000001 00000000 00000000 00000000 {null}"
            ),
            format!(
                "00000042 00000001 00000001 00000000 00000000 \
                 00000001 00000001 {seg} 00000001 00000001 {seg} \
                 00000001 00000001 {seg} 00000000 00000000 {sys}"
            ),
        ]
    }

    /// Replies: Short SUCCESS with results, Short denied, with a Write chunk, Long (NOMSG),
    /// RDMA_ERROR ERR_CHUNK and ERR_VERS, Short PROG_MISMATCH and Short AUTH_ERROR.
    fn reply_seeds() -> Vec<Vec<u8>> {
        let ok = super::success_reply("00000042");
        [
            format!("00000042 00000001 00000020 00000000 00000000 00000000 00000000 {ok} 00000007"),
            "00000042 00000001 00000020 00000000 00000000 00000000 00000000 \
             00000042 00000001 00000001 00000000 00000002 00000002"
                .to_string(),
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000001 00000012 00000010 00000000 00002000 00000000 \
                 00000000 {ok} 00000010"
            ),
            "00000042 00000001 00000020 00000001 00000000 00000000 \
             00000001 00000001 00000013 00000030 00000000 00003000"
                .to_string(),
            "00000042 00000001 00000020 00000004 00000002".to_string(),
            "00000042 00000001 00000020 00000004 00000001 00000001 00000001".to_string(),
            // Short PROG_MISMATCH with a verifier body, Short AUTH_ERROR.
            "00000042 00000001 00000020 00000000 00000000 00000000 00000000 \
             00000042 00000001 00000000 00000001 00000005 01020304 05000000 \
             00000002 00000001 00000003"
                .to_string(),
            "00000042 00000001 00000020 00000000 00000000 00000000 00000000 \
             00000042 00000001 00000001 00000001 00000005"
                .to_string(),
            // Write lists: two chunks (two segments, then an empty chunk), a wrapping
            // segment, and a Reply chunk beside the Write chunk.
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000002 00000012 00000010 00000000 00002000 \
                 00000013 00000000 00000000 00003000 00000001 00000000 \
                 00000000 00000000 {ok} 00000010"
            ),
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000001 00000012 00000100 ffffffff ffffff80 \
                 00000000 00000000 {ok} 00000010"
            ),
            format!(
                "00000042 00000001 00000020 00000000 00000000 \
                 00000001 00000001 00000012 00000010 00000000 00002000 00000000 \
                 00000001 00000001 00000013 00000000 00000000 00003000 {ok} 00000010"
            ),
        ]
        .iter()
        .map(|m| super::hex(m))
        .collect()
    }

    /// The fast path never disagrees with the full verdict, and takes every bare RDMA_MSG
    /// the full verdict accepts.
    fn check_call(m: &[u8]) -> Result<(), TestCaseError> {
        let full = judge_call_full(m);
        prop_assert_eq!(&judge_call(m), &full);
        check_call_shape(m, &full)?;
        // An accepted Call resumes from its summary to the same acceptance.
        if let Ok(a) = &full {
            let resumed = resume_call(m, &a.summary());
            prop_assert_eq!(resumed.as_ref(), Some(a));
            // Other bytes of another length are refused, not misread.
            let mut longer = m.to_vec();
            longer.push(0);
            prop_assert!(resume_call(&longer, &a.summary()).is_none());
        }
        // The one-Read-chunk fast path takes exactly the accepted Calls of its shape, and
        // finds what the full verdict finds.
        match pulled_call(m) {
            Some(p) => {
                prop_assert!(is_one_read_call(&p));
                prop_assert_eq!(Some(&p), full.as_ref().ok());
            }
            None => prop_assert!(!full.as_ref().is_ok_and(is_one_read_call)),
        }
        // The Write-list fast path takes exactly the accepted Calls of its shape, and finds
        // what the full verdict finds.
        match write_call(m) {
            Some(w) => {
                let Ok(a) = &full else {
                    return Err(TestCaseError::fail("write_call took a refused Call"));
                };
                prop_assert!(is_write_call(a));
                prop_assert_eq!(w.xid, a.header.xid());
                prop_assert_eq!(w.credit, a.header.credit());
                prop_assert_eq!(w.writes, a.header.write_list());
                prop_assert_eq!(w.header_len, a.header.header_len());
                prop_assert_eq!(Some((w.call, w.call_len)), a.call);
                prop_assert_eq!(w.args, &a.header.payload()[w.call_len..]);
            }
            None => prop_assert!(!full.as_ref().is_ok_and(is_write_call)),
        }
        let lean = short_call(m);
        match accept_short_call(m) {
            Some(fast) => {
                // The lean fast path takes the same messages and finds the same Call.
                let Some(lean) = lean else {
                    return Err(TestCaseError::fail("short_call refused an accepted Call"));
                };
                prop_assert_eq!(lean.xid, fast.header.xid());
                prop_assert_eq!(lean.credit, fast.header.credit());
                prop_assert_eq!(Some((lean.call, lean.call_len)), fast.call);
                prop_assert_eq!(lean.args, &fast.header.payload()[lean.call_len..]);
                prop_assert_eq!(Ok(fast), full);
            }
            None => {
                prop_assert!(lean.is_none());
                prop_assert!(!full.as_ref().is_ok_and(is_bare_call));
            }
        }
        Ok(())
    }

    fn check_reply(m: &[u8]) -> Result<(), TestCaseError> {
        let full = judge_reply_full(m);
        prop_assert_eq!(&judge_reply(m), &full);
        check_reply_shape(m, &full)?;
        // The Write-list fast path takes exactly the accepted Replies of its shape, and
        // finds what the full verdict finds.
        match write_reply(m) {
            Some(w) => {
                let Ok(a) = &full else {
                    return Err(TestCaseError::fail("write_reply took a discarded Reply"));
                };
                prop_assert!(is_write_reply(a));
                prop_assert_eq!(w.xid, a.header.xid());
                prop_assert_eq!(w.credit, a.header.credit());
                prop_assert_eq!(w.writes, a.header.write_list());
                prop_assert_eq!(Some((w.reply, w.reply_len)), a.reply);
                prop_assert_eq!(w.results, &a.header.payload()[w.reply_len..]);
            }
            None => prop_assert!(!full.as_ref().is_ok_and(is_write_reply)),
        }
        let lean = short_reply(m);
        match accept_short_reply(m) {
            Some(fast) => {
                // The lean fast path takes the same messages and finds the same Reply.
                let Some(lean) = lean else {
                    return Err(TestCaseError::fail("short_reply refused an accepted Reply"));
                };
                prop_assert_eq!(lean.xid, fast.header.xid());
                prop_assert_eq!(lean.credit, fast.header.credit());
                prop_assert_eq!(Some((lean.reply, lean.reply_len)), fast.reply);
                prop_assert_eq!(lean.results, &fast.header.payload()[lean.reply_len..]);
                prop_assert_eq!(Ok(fast), full);
            }
            None => {
                prop_assert!(lean.is_none());
                prop_assert!(!full.as_ref().is_ok_and(is_bare_reply));
            }
        }
        Ok(())
    }

    fn is_bare_call(a: &AcceptedCall<'_>) -> bool {
        a.header.proc() == Proc::Msg
            && a.header.read_list().is_empty()
            && a.header.write_list().is_empty()
            && a.header.reply_chunk().is_none()
    }

    /// The shape `write_call` takes: RDMA_MSG, no Read list, a Write list of non-empty
    /// chunks, no Reply chunk, the Call inline.
    /// The one classification of a Call (`shape::call_shape`) agrees with the full verdict:
    /// refused exactly when it refuses, with its verdict; otherwise the shape the accepted
    /// Call has, carrying what the verdict found.
    fn check_call_shape(
        m: &[u8],
        full: &Result<AcceptedCall<'_>, Verdict>,
    ) -> Result<(), TestCaseError> {
        let shape = call_shape(m, Wire::V1);
        let a = match (full, &shape) {
            (Err(v), CallShape::Refused(Refusal::V1(r))) => {
                prop_assert_eq!(v, r);
                return Ok(());
            }
            (Err(_), _) => return Err(TestCaseError::fail("a refused Call took a shape")),
            (Ok(_), CallShape::Refused(_)) => {
                return Err(TestCaseError::fail("an accepted Call was refused"))
            }
            (Ok(a), _) => a,
        };
        let h = &a.header;
        match &shape {
            CallShape::Short(sc) => {
                prop_assert!(is_short_call(a));
                prop_assert_eq!((sc.xid, sc.credit), (h.xid(), h.credit()));
                prop_assert_eq!(Some((sc.call, sc.call_len)), a.call);
                prop_assert_eq!(sc.args, &h.payload()[sc.call_len..]);
            }
            CallShape::Written(w) => {
                prop_assert!(is_write_call(a));
                prop_assert_eq!((w.xid, w.credit), (h.xid(), h.credit()));
                prop_assert_eq!(w.writes, h.write_list());
                prop_assert_eq!(Some((w.call, w.call_len)), a.call);
            }
            CallShape::Pulled(c) => {
                prop_assert_eq!(c, a);
                prop_assert!(a.plan.chunk_count() > 0 && h.proc() == Proc::Msg);
            }
            CallShape::Long(c) => {
                prop_assert_eq!(c, a);
                prop_assert!(a.plan.chunk_count() > 0 && h.proc() == Proc::NoMsg);
            }
            CallShape::General(c) => {
                prop_assert_eq!(c, a);
                prop_assert!(a.plan.chunk_count() == 0);
                prop_assert!(!is_short_call(a) && !is_write_call(a));
            }
            CallShape::Refused(_) => unreachable!("matched above"),
        }
        Ok(())
    }

    /// The same for an answer (`shape::reply_shape`).
    fn check_reply_shape(
        m: &[u8],
        full: &Result<AcceptedReply<'_>, Verdict>,
    ) -> Result<(), TestCaseError> {
        let shape = reply_shape(m, Wire::V1, false);
        let a = match (full, &shape) {
            (Err(v), ReplyShape::Refused(Refusal::V1(r))) => {
                prop_assert_eq!(v, r);
                return Ok(());
            }
            (Err(_), _) => return Err(TestCaseError::fail("a discarded Reply took a shape")),
            (Ok(_), ReplyShape::Refused(_)) => {
                return Err(TestCaseError::fail("an accepted Reply was refused"))
            }
            (Ok(a), _) => a,
        };
        let h = &a.header;
        let inline = a.reply.is_some() && h.error().is_none();
        match &shape {
            ReplyShape::Short(sr) => {
                prop_assert!(inline && is_bare_reply(a));
                prop_assert_eq!((sr.xid, sr.credit), (h.xid(), h.credit()));
                prop_assert_eq!(Some((sr.reply, sr.reply_len)), a.reply);
                prop_assert_eq!(sr.results, &h.payload()[sr.reply_len..]);
            }
            ReplyShape::Written(w) => {
                prop_assert!(inline && is_write_reply(a));
                prop_assert_eq!((w.xid, w.credit), (h.xid(), h.credit()));
                prop_assert_eq!(w.writes, h.write_list());
                prop_assert_eq!(Some((w.reply, w.reply_len)), a.reply);
            }
            ReplyShape::General(r) => {
                prop_assert_eq!(r, a);
                prop_assert!(!(inline && (is_bare_reply(a) || is_write_reply(a))));
            }
            ReplyShape::Refused(_) => unreachable!("matched above"),
        }
        Ok(())
    }

    /// A Call without any chunk, its RPC header inline.
    fn is_short_call(a: &AcceptedCall<'_>) -> bool {
        a.header.proc() == Proc::Msg
            && a.header.read_list().is_empty()
            && a.header.write_list().is_empty()
            && a.header.reply_chunk().is_none()
            && a.call.is_some()
    }

    /// The shape `pulled_call` takes: RDMA_MSG, a Read list of one segment, no Write list,
    /// no Reply chunk, the Call inline.
    fn is_one_read_call(a: &AcceptedCall<'_>) -> bool {
        a.header.proc() == Proc::Msg
            && a.header.read_list().len() == 1
            && a.header.write_list().is_empty()
            && a.header.reply_chunk().is_none()
            && a.call.is_some()
    }

    fn is_write_call(a: &AcceptedCall<'_>) -> bool {
        a.header.proc() == Proc::Msg
            && a.header.read_list().is_empty()
            && !a.header.write_list().is_empty()
            && a.header.write_list().iter().all(|c| !c.is_empty())
            && a.header.reply_chunk().is_none()
            && a.call.is_some()
    }

    /// The shape `write_reply` takes: RDMA_MSG, no Read list, a Write list, no Reply chunk.
    fn is_write_reply(a: &AcceptedReply<'_>) -> bool {
        a.header.proc() == Proc::Msg
            && a.header.read_list().is_empty()
            && !a.header.write_list().is_empty()
            && a.header.reply_chunk().is_none()
    }

    fn is_bare_reply(a: &AcceptedReply<'_>) -> bool {
        a.header.proc() == Proc::Msg
            && a.header.read_list().is_empty()
            && a.header.write_list().is_empty()
            && a.header.reply_chunk().is_none()
    }

    #[test]
    fn seeds_take_every_shape() {
        use rpcrdma_proto::shape::CallForm;
        let forms: Vec<CallForm> = call_seeds()
            .iter()
            .map(|m| call_shape(m, Wire::V1).form())
            .collect();
        for f in [
            CallForm::Short,
            CallForm::Written,
            CallForm::Pulled,
            CallForm::Long,
            CallForm::General,
            CallForm::Refused,
        ] {
            assert!(forms.contains(&f), "no seed of shape {f:?}: {forms:?}");
        }
        let replies: Vec<&str> = reply_seeds()
            .iter()
            .map(|m| match reply_shape(m, Wire::V1, false) {
                ReplyShape::Short(_) => "short",
                ReplyShape::Written(_) => "written",
                ReplyShape::General(_) => "general",
                ReplyShape::Refused(_) => "refused",
            })
            .collect();
        for f in ["short", "written", "general", "refused"] {
            assert!(
                replies.contains(&f),
                "no reply seed of shape {f}: {replies:?}"
            );
        }
    }

    #[test]
    fn seeds_take_the_expected_path() {
        let c = call_seeds();
        assert!(accept_short_call(&c[0]).is_some() && accept_short_call(&c[1]).is_some());
        for m in &c[2..] {
            assert!(accept_short_call(m).is_none());
        }
        for m in &c[2..6] {
            assert!(judge_call_full(m).is_ok());
        }
        // The Write-list seeds: all accepted but the wrapping segment's (ERR_CHUNK), all
        // taken by the Write-list fast path but that one and the empty chunk's; of the
        // others, only the Short Call with a Write chunk (seed 4).
        let accepted: Vec<bool> = c[6..10]
            .iter()
            .map(|m| judge_call_full(m).is_ok())
            .collect();
        assert_eq!(accepted, [true, false, true, true]);
        let taken: Vec<bool> = c.iter().map(|m| write_call(m).is_some()).collect();
        let mut want = [false; 17];
        for k in [4, 6, 9] {
            want[k] = true;
        }
        assert_eq!(taken, want);
        // The one-Read-chunk seeds: the first (AUTH_SYS) and the last (4 KiB, odd length)
        // accepted and taken by its fast path, the others refused; of the seeds before, the
        // chunked Call (seed 2).
        let accepted: Vec<bool> = c[10..].iter().map(|m| judge_call_full(m).is_ok()).collect();
        assert_eq!(accepted, [true, false, false, false, false, false, true]);
        let taken: Vec<bool> = c.iter().map(|m| pulled_call(m).is_some()).collect();
        let mut want = [false; 17];
        for k in [2, 10, 16] {
            want[k] = true;
        }
        assert_eq!(taken, want);
        let r = reply_seeds();
        assert!(accept_short_reply(&r[0]).is_some() && accept_short_reply(&r[1]).is_some());
        assert!(accept_short_reply(&r[6]).is_some() && accept_short_reply(&r[7]).is_some());
        for m in &r[2..6] {
            assert!(accept_short_reply(m).is_none());
            assert!(judge_reply_full(m).is_ok());
        }
        // The Write-list Replies: accepted but the wrapping segment's; taken by the
        // Write-list fast path: the Short one with a Write chunk (seed 2) and the two-chunk
        // one (seed 8).
        let accepted: Vec<bool> = r[8..].iter().map(|m| judge_reply_full(m).is_ok()).collect();
        assert_eq!(accepted, [true, false, true]);
        let taken: Vec<bool> = r.iter().map(|m| write_reply(m).is_some()).collect();
        let mut want = [false; 11];
        want[2] = true;
        want[8] = true;
        assert_eq!(taken, want);
        for m in c.iter().chain(&r) {
            check_call(m).unwrap();
            check_reply(m).unwrap();
        }
        // A Call is never a Reply and the other way round.
        assert!(accept_short_reply(&c[0]).is_none() && accept_short_call(&r[0]).is_none());
    }

    fn mutate(mut m: Vec<u8>, edits: Vec<(usize, u8)>, cut: usize, extend: usize) -> Vec<u8> {
        let len = m.len();
        for (at, v) in edits {
            m[at % len] = v;
        }
        m.truncate(m.len() - cut.min(m.len()));
        m.resize(m.len() + extend, 0);
        m
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Valid Calls and Replies with bytes changed (often in the fixed words), cut at any
        /// length or padded with zeros, judged in both roles.
        #[test]
        fn fast_path_agrees_on_mutated_messages(
            call in any::<bool>(),
            which in 0usize..24,
            edits in proptest::collection::vec(
                (prop_oneof![0usize..28, 0usize..128], any::<u8>()), 0..4),
            small in proptest::collection::vec((0usize..28, 0u8..6), 0..2),
            cut in prop_oneof![Just(0usize), 0usize..128],
            extend in prop_oneof![Just(0usize), 0usize..8],
        ) {
            let seeds = if call { call_seeds() } else { reply_seeds() };
            let seed = seeds[which % seeds.len()].clone();
            let mut edits = edits;
            edits.extend(small);
            let m = mutate(seed, edits, cut, extend);
            check_call(&m)?;
            check_reply(&m)?;
        }

        #[test]
        fn fast_path_agrees_on_random_bytes(m in proptest::collection::vec(any::<u8>(), 0..96)) {
            check_call(&m)?;
            check_reply(&m)?;
        }

        /// One Read segment of any Position, length and offset behind a valid RDMA_MSG header
        /// and an RPC Call with arguments of any length: the one-Read-chunk fast path and
        /// the full verdict agree (Positions inside the Call header, misaligned, zero, past
        /// the inline payload; segments that wrap).
        #[test]
        fn one_read_chunk_agrees_with_the_full_verdict(
            position in prop_oneof![0u32..96, any::<u32>()],
            length in prop_oneof![0u32..8192, any::<u32>()],
            offset in prop_oneof![Just(0x10000u64), u64::MAX - 8192..=u64::MAX, any::<u64>()],
            args in 0usize..16,
        ) {
            let mut m = super::hex(&format!(
                "00000042 00000001 00000020 00000000 00000001 00000000 00000007 00000000 \
                 00000000 00000000 00000000 00000000 00000000 {}",
                super::null_call("00000042")
            ));
            m[20..24].copy_from_slice(&position.to_be_bytes());
            m[28..32].copy_from_slice(&length.to_be_bytes());
            m[32..40].copy_from_slice(&offset.to_be_bytes());
            m.extend((0..4 * args).map(|k| k as u8));
            check_call(&m)?;
        }

        /// One Write chunk of one segment of any length and offset (an NFS READ's Call and
        /// Reply), its terminator and Reply-chunk words sometimes not zero: the Write-list
        /// fast paths (whose one-segment shortcut reads these words directly) and the full
        /// verdicts agree, in both roles (segments that wrap, a second chunk, a Reply chunk).
        #[test]
        fn one_write_segment_agrees_with_the_full_verdict(
            length in prop_oneof![0u32..8192, any::<u32>()],
            offset in prop_oneof![Just(0x10000u64), u64::MAX - 8192..=u64::MAX, any::<u64>()],
            count in prop_oneof![Just(1u32), 0u32..3],
            terminator in prop_oneof![Just(0u32), 0u32..3],
            reply_chunk in prop_oneof![Just(0u32), 0u32..3],
            reply in any::<bool>(),
        ) {
            let rpc = if reply {
                format!("{} 00000010", super::success_reply("00000042"))
            } else {
                super::null_call("00000042")
            };
            let mut m = super::hex(&format!(
                "00000042 00000001 00000020 00000000 00000000 00000001 00000001 00000012 \
                 00000000 00000000 00000000 00000000 00000000 {rpc}"
            ));
            m[24..28].copy_from_slice(&count.to_be_bytes());
            m[32..36].copy_from_slice(&length.to_be_bytes());
            m[36..44].copy_from_slice(&offset.to_be_bytes());
            m[44..48].copy_from_slice(&terminator.to_be_bytes());
            m[48..52].copy_from_slice(&reply_chunk.to_be_bytes());
            check_call(&m)?;
            check_reply(&m)?;
        }

        /// Random bytes behind a valid bare RDMA_MSG header: the RPC message is what varies.
        #[test]
        fn fast_path_agrees_on_random_rpc_messages(
            xid in prop_oneof![Just(0x42u32), any::<u32>()],
            body in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..64),
        ) {
            let mut m = super::hex("00000042 00000001 00000020 00000000 00000000 00000000 00000000 00000042");
            m[28..32].copy_from_slice(&xid.to_be_bytes());
            m.extend_from_slice(&body);
            check_call(&m)?;
            check_reply(&m)?;
        }
    }

    /// RFC 8167's backward messages are told apart only among messages the forward verdicts
    /// refuse: what a requester accepts as a Reply is never a backward Call, what a
    /// responder accepts as a Call never answers one; a backward Call or Reply taken is
    /// exactly what the Short fast path reads from the same bytes.
    fn check_backward(m: &[u8]) -> Result<(), TestCaseError> {
        use rpcrdma_proto::verdict::{backward_call, backward_reply, BackwardCall, BackwardReply};
        let call = backward_call(m);
        let reply = backward_reply(m);
        if call.is_some() {
            prop_assert!(
                judge_reply_full(m).is_err(),
                "a forward Reply taken as a backward Call"
            );
        }
        if reply.is_some() {
            prop_assert!(
                judge_call_full(m).is_err(),
                "a forward Call taken as a backward Reply"
            );
        }
        prop_assert!(call.is_none() || reply.is_none(), "both a Call and a Reply");
        if let Some(BackwardCall::Call(c)) = call {
            prop_assert_eq!(Some(c), short_call(m));
        }
        if let Some(BackwardReply::Reply(r)) = reply {
            prop_assert_eq!(Some(r), short_reply(m));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn backward_messages_are_never_forward_ones(
            call in any::<bool>(),
            which in 0usize..24,
            edits in proptest::collection::vec(
                (prop_oneof![0usize..28, 28usize..40, 0usize..128], any::<u8>()), 0..4),
            cut in prop_oneof![Just(0usize), 0usize..128],
        ) {
            let seeds = if call { call_seeds() } else { reply_seeds() };
            let seed = seeds[which % seeds.len()].clone();
            check_backward(&mutate(seed, edits, cut, 0))?;
        }

        #[test]
        fn backward_messages_on_random_rpc_messages(
            proc_word in prop_oneof![Just(0u32), Just(1u32), Just(4u32)],
            body in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..64),
        ) {
            let mut m = super::hex("00000042 00000001 00000020 00000000 00000000 00000000 00000000 00000042");
            m[12..16].copy_from_slice(&proc_word.to_be_bytes());
            m.extend_from_slice(&body);
            check_backward(&m)?;
        }
    }
}
