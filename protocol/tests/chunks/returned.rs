//! Requester side: checking what the Reply returned (G-4, G-16, G-17).

use rpcrdma_proto::chunks::{
    check_returned, check_returned_reply, check_returned_write_list, ReturnedChunk, ReturnedError,
    ReturnedForm,
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
