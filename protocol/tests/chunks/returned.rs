//! Requester side: checking what the Reply returned (G-4, G-16, G-17).

use rpcrdma_proto::chunks::{
    check_returned, check_returned_reply, check_returned_write_list,
    check_returned_write_list_into, ReturnedChunk, ReturnedError, ReturnedForm,
};
use rpcrdma_proto::header::Segment;

use super::{encode, seg, view};

#[test]
fn returned_write_chunk_is_checked_against_provisioning() {
    let provisioned = [seg(1, 100), seg(2, 100)];
    let check = |lens: &[u32]| {
        let segs: Vec<Segment> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| seg(i as u32 + 1, l))
            .collect();
        let buf = encode(&[], &[&segs], None);
        let v = view(&buf);
        let c = v.write_list().iter().next().unwrap();
        check_returned(&provisioned, c)
    };
    assert_eq!(
        check(&[100, 30]),
        Ok(ReturnedChunk {
            form: ReturnedForm::Filled,
            total: 130
        })
    );
    assert_eq!(
        check(&[0, 0]),
        Ok(ReturnedChunk {
            form: ReturnedForm::Unused,
            total: 0
        })
    );
    // Legacy form: count zero for an unused chunk (G-17).
    assert_eq!(
        check(&[]),
        Ok(ReturnedChunk {
            form: ReturnedForm::Unused,
            total: 0
        })
    );
    // Longer than provisioned: never trusted (G-17).
    assert_eq!(
        check(&[100, 101]),
        Err(ReturnedError::TooLong {
            chunk: 0,
            segment: 1,
            provisioned: 100,
            returned: 101
        })
    );
    assert_eq!(
        check(&[10]),
        Err(ReturnedError::SegmentCount {
            chunk: 0,
            provisioned: 2,
            returned: 1
        })
    );
}

/// G-4: the returned length must be the item's; up to roundup(item) is tolerated.
#[test]
fn returned_length_against_item_length() {
    let r = |total| ReturnedChunk {
        form: ReturnedForm::Filled,
        total,
    };
    assert_eq!(r(126).item_len(126), Ok(126));
    assert_eq!(r(128).item_len(126), Ok(126), "RFC 5666 roundup");
    assert_eq!(
        r(129).item_len(126),
        Err(ReturnedError::ItemLength {
            item_len: 126,
            returned: 129
        })
    );
    assert_eq!(
        r(125).item_len(126),
        Err(ReturnedError::ItemLength {
            item_len: 126,
            returned: 125
        })
    );
    assert_eq!(r(128).item_len(128), Ok(128));
    assert!(r(132).item_len(128).is_err());
    assert_eq!(r(0).item_len(0), Ok(0));
    assert!(r(u32::MAX as u64 + 1).item_len(u32::MAX).is_ok());
}

#[test]
fn returned_write_list() {
    let a = [seg(1, 100)];
    let b = [seg(2, 50), seg(3, 50)];
    let provisioned: [&[Segment]; 3] = [&a, &[], &b];

    // Chunk 0 filled, chunk 1 empty, chunk 2 unused.
    let r0 = [seg(1, 60)];
    let r2 = [seg(2, 0), seg(3, 0)];
    let buf = encode(&[], &[&r0, &[], &r2], None);
    let v = view(&buf);
    let list = check_returned_write_list(&provisioned, v.write_list()).unwrap();
    assert_eq!(list.provisioned(), 3);
    assert_eq!(
        list.get(0),
        Some(ReturnedChunk {
            form: ReturnedForm::Filled,
            total: 60
        })
    );
    assert_eq!(list.get(1).unwrap().form, ReturnedForm::Empty);
    assert_eq!(list.get(2).unwrap().form, ReturnedForm::Unused);
    assert_eq!(list.get(3), None);

    // A shorter list is tolerated; the missing chunks are absent.
    let buf = encode(&[], &[&r0], None);
    let v = view(&buf);
    let list = check_returned_write_list(&provisioned, v.write_list()).unwrap();
    assert_eq!(list.get(2).unwrap().form, ReturnedForm::Absent);
    assert!(list.get(2).unwrap().item_len(1).is_err());

    // More chunks than provided.
    let buf = encode(&[], &[&r0, &[], &r2, &r0], None);
    let v = view(&buf);
    assert_eq!(
        check_returned_write_list(&provisioned, v.write_list()).unwrap_err(),
        ReturnedError::ExtraChunks {
            provisioned: 3,
            returned: 4
        }
    );

    // Errors name the chunk.
    let bad = [seg(2, 50), seg(3, 51)];
    let buf = encode(&[], &[&r0, &[], &bad], None);
    let v = view(&buf);
    assert_eq!(
        check_returned_write_list(&provisioned, v.write_list()).unwrap_err(),
        ReturnedError::TooLong {
            chunk: 2,
            segment: 1,
            provisioned: 50,
            returned: 51
        }
    );
    // A provisioned empty chunk that comes back with segments.
    let buf = encode(&[], &[&r0, &r0], None);
    let v = view(&buf);
    assert_eq!(
        check_returned_write_list(&provisioned, v.write_list()).unwrap_err(),
        ReturnedError::SegmentCount {
            chunk: 1,
            provisioned: 0,
            returned: 1
        }
    );
}

/// G-16: a provided Reply chunk may come back echoed or absent; an unprovided one may not.
#[test]
fn returned_reply_chunk() {
    let provisioned = [seg(7, 1024), seg(8, 1024)];
    let returned = [seg(7, 1024), seg(8, 500)];
    let buf = encode(&[], &[], Some(&returned));
    let v = view(&buf);
    assert_eq!(
        check_returned_reply(Some(&provisioned), v.reply_chunk()),
        Ok(ReturnedChunk {
            form: ReturnedForm::Filled,
            total: 1524
        })
    );
    assert_eq!(
        check_returned_reply(None, v.reply_chunk()),
        Err(ReturnedError::UnexpectedReplyChunk)
    );
    assert_eq!(
        check_returned_reply(Some(&provisioned), None).unwrap().form,
        ReturnedForm::Absent
    );
    assert_eq!(
        check_returned_reply(None, None).unwrap().form,
        ReturnedForm::Absent
    );
    let too_long = [seg(7, 1025), seg(8, 0)];
    let buf = encode(&[], &[], Some(&too_long));
    let v = view(&buf);
    assert!(matches!(
        check_returned_reply(Some(&provisioned), v.reply_chunk()),
        Err(ReturnedError::TooLong { segment: 0, .. })
    ));
    for e in [
        ReturnedError::UnexpectedReplyChunk,
        ReturnedError::ExtraChunks {
            provisioned: 1,
            returned: 2,
        },
    ] {
        assert!(!e.to_string().is_empty());
    }
}

/// Segment lists of up to three segments, lengths around a few small values so that
/// returned lengths fall below, at and above what was provided.
fn segs() -> impl proptest::strategy::Strategy<Value = Vec<Segment>> {
    use proptest::prelude::*;
    prop::collection::vec((1u32..4, 0u32..4), 0..3)
        .prop_map(|v| v.into_iter().map(|(h, l)| seg(h, l * 50)).collect())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    /// The one-walk check (with its one-segment fast path) accepts exactly the lists the
    /// general check accepts, with the same error, and records what `get` gives for every
    /// provided chunk.
    #[test]
    fn the_one_walk_check_agrees_with_the_general_one(
        provided in proptest::collection::vec(segs(), 0..3),
        returned in proptest::collection::vec(segs(), 0..4),
    ) {
        let prov: Vec<&[Segment]> = provided.iter().map(Vec::as_slice).collect();
        let ret: Vec<&[Segment]> = returned.iter().map(Vec::as_slice).collect();
        let buf = encode(&[], &ret, None);
        let v = view(&buf);
        let mut out = [ReturnedChunk { form: ReturnedForm::Empty, total: 7 }; 4];
        let fast = check_returned_write_list_into(&prov, v.write_list(), &mut out);
        match check_returned_write_list(&prov, v.write_list()) {
            Err(e) => proptest::prop_assert_eq!(fast, Err(e)),
            Ok(list) => {
                proptest::prop_assert_eq!(fast, Ok(()));
                for (i, o) in out.iter().enumerate().take(prov.len()) {
                    proptest::prop_assert_eq!(Some(*o), list.get(i));
                }
                // Nothing written past the chunks provided.
                proptest::prop_assert!(out[prov.len()..].iter().all(|o| o.total == 7));
            }
        }
    }
}

/// The one-segment fast path: filled, unused, too long.
#[test]
fn one_segment_returned_against_one_provided() {
    let p = [seg(9, 4096)];
    let prov: [&[Segment]; 1] = [&p];
    let mut out = [ReturnedChunk {
        form: ReturnedForm::Absent,
        total: 0,
    }];
    for (len, want) in [
        (4096, Ok(ReturnedForm::Filled)),
        (100, Ok(ReturnedForm::Filled)),
        (0, Ok(ReturnedForm::Unused)),
        (4097, Err(())),
    ] {
        let r = [seg(9, len)];
        let buf = encode(&[], &[&r], None);
        let got = check_returned_write_list_into(&prov, view(&buf).write_list(), &mut out);
        match want {
            Ok(form) => {
                assert_eq!(got, Ok(()));
                assert_eq!(
                    out[0],
                    ReturnedChunk {
                        form,
                        total: u64::from(len)
                    }
                );
            }
            Err(()) => assert_eq!(
                got,
                Err(ReturnedError::TooLong {
                    chunk: 0,
                    segment: 0,
                    provisioned: 4096,
                    returned: 4097
                })
            ),
        }
    }
}
