//! Tests of `rpcrdma_proto::plan`: the Short / Chunked / Long decision for Calls and Replies
//! (RFC 8166 §3.5) and the Reply-chunk decision (§4.3.3, checklist A.8).

use rpcrdma_proto::header::{Chunks, Header, HeaderView, Proc, ReadSegment, Segment};
use rpcrdma_proto::plan::{
    plan_call, plan_reply, CallForm, CallPlan, CallShape, DdpItem, PlanError, ReplyForm, ReplyPlan,
    Thresholds,
};

const T: Thresholds = Thresholds {
    call: 1024,
    reply: 1024,
};

/// A Call with no items, no Write list and a small Reply.
fn shape(call_len: u32) -> CallShape<'static> {
    CallShape {
        call_len,
        items: &[],
        position_zero_segment_max: u32::MAX,
        write_chunks: &[],
        max_reply_len: 100,
        max_reply_reduced_len: None,
        reply_chunk_segments: 1,
    }
}

/// The encoded length of a header with `r` read segments, Write chunks of the given segment
/// counts and an optional Reply chunk of `m` segments, computed by the header encoder.
fn encoded_header_len(r: u32, writes: &[u32], reply: Option<u32>) -> usize {
    let reads = vec![ReadSegment::default(); r as usize];
    let write_segs: Vec<Vec<Segment>> = writes
        .iter()
        .map(|&n| vec![Segment::default(); n as usize])
        .collect();
    let write_refs: Vec<&[Segment]> = write_segs.iter().map(|v| &v[..]).collect();
    let reply_segs = reply.map(|m| vec![Segment::default(); m as usize]);
    let h = Header::msg(
        1,
        1,
        Chunks {
            reads: &reads,
            writes: &write_refs,
            reply: reply_segs.as_deref(),
        },
    );
    h.encoded_len()
}

fn item(offset: u32, len: u32, segments: u32) -> DdpItem {
    DdpItem {
        offset,
        len,
        segments,
    }
}

// ----- plan_call ------------------------------------------------------------------------------

#[test]
fn default_thresholds_are_1024() {
    assert_eq!(Thresholds::default(), T);
    assert_eq!(Thresholds::MIN, 1024);
}

/// §3.5.1 / §3.5.3: with a 28-byte header, a 996-byte Call is the largest Short Call at the
/// default threshold; one byte more and, with nothing to reduce, it must be Long.
#[test]
fn short_call_threshold_boundary() {
    let p = plan_call(T, &shape(995)).unwrap();
    assert_eq!(p.form, CallForm::Short);
    assert_eq!((p.header_len, p.inline_len, p.send_len()), (28, 995, 1023));
    let p = plan_call(T, &shape(996)).unwrap();
    assert_eq!(
        p,
        CallPlan {
            form: CallForm::Short,
            header_len: 28,
            inline_len: 996,
            read_segments: 0,
            position_zero_len: 0,
            position_zero_segments: 0,
            reply_chunk: false,
        }
    );
    assert_eq!(p.send_len(), 1024);
    assert_eq!(p.form.proc(), Proc::Msg);
    let p = plan_call(T, &shape(997)).unwrap();
    assert_eq!(
        p,
        CallPlan {
            form: CallForm::Long,
            header_len: 52,
            inline_len: 0,
            read_segments: 1,
            position_zero_len: 997,
            position_zero_segments: 1,
            reply_chunk: false,
        }
    );
    assert_eq!(p.form.proc(), Proc::NoMsg);
    assert_eq!(p.header_len, encoded_header_len(1, &[], None));
}

/// §3.5.2: an NFS WRITE of 4096 bytes at offset 104 reduces to a Chunked Call when header
/// (28 + 24) plus the reduced Call fit: reduced ≤ 972.
#[test]
fn chunked_call_threshold_boundary() {
    let items = [item(104, 4096, 1)];
    let mk = |call_len| CallShape {
        items: &items,
        ..shape(call_len)
    };
    let p = plan_call(T, &mk(4096 + 971)).unwrap();
    assert_eq!(p.form, CallForm::Chunked);
    assert_eq!((p.header_len, p.inline_len, p.send_len()), (52, 971, 1023));
    let p = plan_call(T, &mk(4096 + 972)).unwrap();
    assert_eq!(
        p,
        CallPlan {
            form: CallForm::Chunked,
            header_len: 52,
            inline_len: 972,
            read_segments: 1,
            position_zero_len: 0,
            position_zero_segments: 0,
            reply_chunk: false,
        }
    );
    assert_eq!(p.send_len(), 1024);
    assert_eq!(p.form.proc(), Proc::Msg);
    // Still too large after reduction: Long, the item keeps its chunk and the Position-Zero
    // chunk carries the 973-byte reduced Call (IMPL §3.5.1).
    let p = plan_call(T, &mk(4096 + 973)).unwrap();
    assert_eq!(
        p,
        CallPlan {
            form: CallForm::Long,
            header_len: 76,
            inline_len: 0,
            read_segments: 2,
            position_zero_len: 973,
            position_zero_segments: 1,
            reply_chunk: false,
        }
    );
    assert_eq!(p.header_len, encoded_header_len(2, &[], None));
}

/// §3.4.4.4: reducing a variable-length item removes its XDR pad from the payload too.
#[test]
fn reduction_removes_the_pad() {
    let items = [item(104, 4097, 1)];
    let p = plan_call(
        T,
        &CallShape {
            items: &items,
            ..shape(104 + 4100 + 8)
        },
    )
    .unwrap();
    assert_eq!(p.form, CallForm::Chunked);
    assert_eq!(p.inline_len, 112);
}

/// Multi-segment items and several items: 24 bytes per read segment.
#[test]
fn header_counts_every_read_segment() {
    let items = [item(8, 2000, 3), item(2012, 3000, 2)];
    let p = plan_call(
        T,
        &CallShape {
            items: &items,
            ..shape(2012 + 3000 + 100)
        },
    )
    .unwrap();
    assert_eq!(p.form, CallForm::Chunked);
    assert_eq!(p.read_segments, 5);
    assert_eq!(p.header_len, 28 + 5 * 24);
    assert_eq!(p.header_len, encoded_header_len(5, &[], None));
    assert_eq!(p.inline_len, 2012 + 3000 + 100 - 2000 - 3000);
}

/// E1: a Call that fits inline goes Short even when it has reducible items.
#[test]
fn short_is_preferred_over_chunked() {
    let items = [item(104, 300, 1)];
    let p = plan_call(
        T,
        &CallShape {
            items: &items,
            ..shape(500)
        },
    )
    .unwrap();
    assert_eq!(p.form, CallForm::Short);
    assert_eq!((p.inline_len, p.read_segments), (500, 0));
}

/// IMPL §3.4 (checklist E10): a Position-Zero chunk split at a registration limit.
#[test]
fn long_call_with_multi_segment_position_zero() {
    let p = plan_call(
        T,
        &CallShape {
            position_zero_segment_max: 256,
            ..shape(2000)
        },
    )
    .unwrap();
    assert_eq!(p.form, CallForm::Long);
    assert_eq!((p.position_zero_len, p.position_zero_segments), (2000, 8));
    assert_eq!(p.header_len, 28 + 8 * 24);

    // With items: their 2 segments plus 2 for the 1904-byte reduced Call.
    let items = [item(104, 4096, 2)];
    let p = plan_call(
        T,
        &CallShape {
            items: &items,
            position_zero_segment_max: 1024,
            ..shape(6000)
        },
    )
    .unwrap();
    assert_eq!(p.form, CallForm::Long);
    assert_eq!((p.position_zero_len, p.position_zero_segments), (1904, 2));
    assert_eq!(p.read_segments, 4);
    assert_eq!(p.header_len, encoded_header_len(4, &[], None));
}

#[test]
fn misplaced_items_are_rejected() {
    let cases: [(&[DdpItem], usize); 7] = [
        (&[item(0, 8, 1)], 0),
        (&[item(6, 8, 1)], 0),
        (&[item(8, 8, 0)], 0),
        (&[item(8, 10, 1), item(16, 4, 1)], 1),
        (&[item(8, 0, 1), item(8, 4, 1)], 1),
        (&[item(96, 8, 1)], 0),
        (&[item(96, 5, 1)], 0),
    ];
    for (items, index) in cases {
        assert_eq!(
            plan_call(
                T,
                &CallShape {
                    items,
                    ..shape(100)
                }
            ),
            Err(PlanError::InvalidItem { index }),
            "{items:?}"
        );
    }
    // Ending exactly at the end of the Call, and a zero-length item, are fine.
    for items in [&[item(96, 4, 1)][..], &[item(8, 0, 1), item(12, 4, 1)][..]] {
        assert!(plan_call(
            T,
            &CallShape {
                items,
                ..shape(100)
            }
        )
        .is_ok());
    }
    assert_eq!(
        plan_call(
            T,
            &CallShape {
                position_zero_segment_max: 0,
                ..shape(100)
            }
        ),
        Err(PlanError::ZeroSegmentLimit)
    );
}

/// §4.3.3 / checklist A.8: the Reply chunk is required when the largest Reply, with a header
/// that echoes the Write list (here one 1-segment chunk: 16 + 4 + 28 + 4 = 52 bytes), exceeds
/// the reply threshold.
#[test]
fn reply_chunk_threshold_boundary() {
    let writes = [1u32];
    let mk = |max_reply_len| CallShape {
        write_chunks: &writes,
        max_reply_len,
        reply_chunk_segments: 2,
        ..shape(200)
    };
    for (max, needed) in [(971, false), (972, false), (973, true)] {
        let p = plan_call(T, &mk(max)).unwrap();
        assert_eq!(p.reply_chunk, needed, "max reply {max}");
        let reply = needed.then_some(2);
        assert_eq!(p.header_len, encoded_header_len(0, &writes, reply));
    }
    // The Call header then carries the 2-segment Reply chunk: 16 + 4 + 28 + 40.
    assert_eq!(plan_call(T, &mk(973)).unwrap().header_len, 88);
    // And the Reply chunk counts against the Call threshold: 88 + 936 = 1024 is still Short.
    let p = plan_call(
        T,
        &CallShape {
            call_len: 936,
            ..mk(973)
        },
    )
    .unwrap();
    assert_eq!((p.form, p.send_len()), (CallForm::Short, 1024));
    let p = plan_call(
        T,
        &CallShape {
            call_len: 937,
            ..mk(973)
        },
    )
    .unwrap();
    assert_eq!(p.form, CallForm::Long);
}

/// §3.5.3: results reduced into Write chunks do not count toward the Reply's size, but only if
/// some Write chunk can take them.
#[test]
fn reduced_reply_size() {
    let mk = |reduced, writes: &'static [u32]| CallShape {
        write_chunks: writes,
        max_reply_len: 5000,
        max_reply_reduced_len: reduced,
        ..shape(200)
    };
    static ONE: [u32; 1] = [1];
    static EMPTY: [u32; 1] = [0];
    assert!(!plan_call(T, &mk(Some(900), &ONE)).unwrap().reply_chunk);
    assert!(!plan_call(T, &mk(Some(972), &ONE)).unwrap().reply_chunk);
    assert!(plan_call(T, &mk(Some(973), &ONE)).unwrap().reply_chunk);
    assert!(plan_call(T, &mk(None, &ONE)).unwrap().reply_chunk);
    // An empty Write chunk forces the result inline (§4.3.2.3): nothing is reduced.
    assert!(plan_call(T, &mk(Some(900), &EMPTY)).unwrap().reply_chunk);
}

#[test]
fn impossible_replies_and_calls() {
    assert_eq!(
        plan_call(
            T,
            &CallShape {
                max_reply_len: 5000,
                reply_chunk_segments: 0,
                ..shape(100)
            }
        ),
        Err(PlanError::EmptyReplyChunk)
    );
    // Write list 4 + 40 + 40 = 84; a Long Reply header 16 + 4 + 84 + 24 = 128 > 100.
    assert_eq!(
        plan_call(
            Thresholds {
                call: 1024,
                reply: 100
            },
            &CallShape {
                write_chunks: &[2, 2],
                ..shape(100)
            }
        ),
        Err(PlanError::ReplyHeaderTooLarge {
            header_len: 128,
            threshold: 100
        })
    );
    assert_eq!(
        plan_call(
            Thresholds {
                call: 40,
                reply: 1024
            },
            &shape(100)
        ),
        Err(PlanError::CallHeaderTooLarge {
            header_len: 52,
            threshold: 40
        })
    );
    assert!(!PlanError::EmptyReplyChunk.to_string().is_empty());
}

// ----- plan_reply -----------------------------------------------------------------------------

fn encode(writes: &[&[Segment]], reply: Option<&[Segment]>) -> Vec<u8> {
    let h = Header::msg(
        1,
        1,
        Chunks {
            reads: &[],
            writes,
            reply,
        },
    );
    let mut buf = vec![0u8; h.encoded_len()];
    h.encode(&mut buf).unwrap();
    buf
}

fn seg(length: u32) -> Segment {
    Segment::new(0x55, length, 0x1000)
}

#[test]
fn short_reply_threshold_boundary() {
    let buf = encode(&[], None);
    let v = HeaderView::parse(&buf).unwrap();
    let plan = |len| plan_reply(1024, len, v.write_list(), v.reply_chunk());
    assert_eq!(plan(995).unwrap().send_len(), 1023);
    assert_eq!(
        plan(996),
        Ok(ReplyPlan {
            form: ReplyForm::Short,
            header_len: 28,
            inline_len: 996
        })
    );
    assert_eq!(
        plan(997),
        Err(PlanError::ReplyTooLarge {
            send_len: 1025,
            threshold: 1024,
            reply_chunk_capacity: None
        })
    );
}

/// §3.5.3: with a Reply chunk (echoed even in a Short Reply, G-16) the header is
/// 16 + 4 + 4 + 24 = 48; a payload over 976 bytes goes Long.
#[test]
fn long_reply_threshold_boundary() {
    let reply = [seg(4096)];
    let buf = encode(&[], Some(&reply));
    let v = HeaderView::parse(&buf).unwrap();
    let plan = |len| plan_reply(1024, len, v.write_list(), v.reply_chunk());
    assert_eq!(plan(975).unwrap().form, ReplyForm::Short);
    let p = plan(976).unwrap();
    assert_eq!(
        (p.form, p.header_len, p.send_len()),
        (ReplyForm::Short, 48, 1024)
    );
    assert_eq!(
        plan(977),
        Ok(ReplyPlan {
            form: ReplyForm::Long,
            header_len: 48,
            inline_len: 0
        })
    );
    assert_eq!(plan(977).unwrap().form.proc(), Proc::NoMsg);
    assert_eq!(plan(4096).unwrap().form, ReplyForm::Long);
    assert_eq!(
        plan(4097),
        Err(PlanError::ReplyTooLarge {
            send_len: 48 + 4097,
            threshold: 1024,
            reply_chunk_capacity: Some(4096)
        })
    );
    assert_eq!(p.header_len, v.header_len());
}

/// The Reply header echoes every Write chunk with its segment count (unused ones included) and
/// never has a Read list (§4.3.1).
#[test]
fn reply_header_echoes_the_write_list() {
    let a = [seg(100), seg(100)];
    let reply = [seg(512)];
    let buf = encode(&[&a, &[]], Some(&reply));
    let v = HeaderView::parse(&buf).unwrap();
    // 16 + 4 + (4 + 40 + 8) + 24 = 96.
    let p = plan_reply(256, 160, v.write_list(), v.reply_chunk()).unwrap();
    assert_eq!((p.form, p.header_len), (ReplyForm::Short, 96));
    assert_eq!(p.header_len, v.header_len());
    let p = plan_reply(256, 161, v.write_list(), v.reply_chunk()).unwrap();
    assert_eq!((p.form, p.send_len()), (ReplyForm::Long, 96));
    assert_eq!(
        plan_reply(256, 513, v.write_list(), v.reply_chunk()),
        Err(PlanError::ReplyTooLarge {
            send_len: 96 + 513,
            threshold: 256,
            reply_chunk_capacity: Some(512)
        })
    );
    // A threshold below the header itself: no Reply can be sent at all.
    assert_eq!(
        plan_reply(64, 100, v.write_list(), v.reply_chunk()),
        Err(PlanError::ReplyHeaderTooLarge {
            header_len: 96,
            threshold: 64
        })
    );
}

mod forced {
    //! Forms asked for where smaller ones would fit (`plan_call_forced`).

    use super::*;
    use rpcrdma_proto::plan::{plan_call_forced, Forced};

    const ITEM: [DdpItem; 1] = [DdpItem {
        offset: 48,
        len: 100,
        segments: 1,
    }];

    /// A small Call (fits inline) with one DDP-eligible item.
    fn with_item() -> CallShape<'static> {
        CallShape {
            items: &ITEM,
            ..shape(148)
        }
    }

    fn forced(min_form: Option<CallForm>, reply_chunk: bool) -> Forced {
        Forced {
            min_form,
            reply_chunk,
        }
    }

    #[test]
    fn nothing_forced_is_plan_call() {
        for s in [shape(100), with_item(), shape(5000)] {
            assert_eq!(plan_call_forced(T, &s, Forced::default()), plan_call(T, &s));
            assert_eq!(
                plan_call_forced(T, &s, forced(Some(CallForm::Short), false)),
                plan_call(T, &s)
            );
        }
    }

    #[test]
    fn chunked_reduces_items_that_would_fit_inline() {
        let p = plan_call_forced(T, &with_item(), forced(Some(CallForm::Chunked), false)).unwrap();
        assert_eq!(p.form, CallForm::Chunked);
        assert_eq!(p.read_segments, 1);
        // The reduced Call: 148 less the item's 100 bytes.
        assert_eq!(p.inline_len, 48);
        assert_eq!(p.header_len, encoded_header_len(1, &[], None));
        // Without items a Chunked Call does not exist: Short.
        let p = plan_call_forced(T, &shape(100), forced(Some(CallForm::Chunked), false)).unwrap();
        assert_eq!(p.form, CallForm::Short);
    }

    #[test]
    fn long_whatever_the_size() {
        let p = plan_call_forced(T, &shape(100), forced(Some(CallForm::Long), false)).unwrap();
        assert_eq!(p.form, CallForm::Long);
        assert_eq!((p.inline_len, p.position_zero_len), (0, 100));
        let p = plan_call_forced(T, &with_item(), forced(Some(CallForm::Long), false)).unwrap();
        assert_eq!(p.form, CallForm::Long);
        // The item keeps its chunk; the Position-Zero chunk carries the reduced stream.
        assert_eq!((p.read_segments, p.position_zero_len), (2, 48));
    }

    #[test]
    fn a_reply_chunk_on_request() {
        let p = plan_call_forced(T, &shape(100), forced(None, true)).unwrap();
        assert!(p.reply_chunk);
        assert_eq!(p.form, CallForm::Short);
        assert_eq!(p.header_len, encoded_header_len(0, &[], Some(1)));
        assert!(!plan_call(T, &shape(100)).unwrap().reply_chunk);
    }
}
