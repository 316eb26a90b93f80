//! The version 2 transport header decoder and verdict on arbitrary bytes: never panic, never
//! read out of bounds, and whatever the decoder accepts (but a version 1 ERR_VERS, which has
//! its own layout) re-encodes to the same header bytes (a property list: to the same
//! properties).
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::header::{Chunks, ReadSegment, Segment};
use rpcrdma_proto::v2::props::Property;
use rpcrdma_proto::v2;
use rpcrdma_proto::verdict::Role;

fuzz_target!(|data: &[u8]| {
    for role in [Role::Responder, Role::Requester] {
        let _ = v2::judge(data, role, true);
    }
    let Ok(v) = v2::HeaderView::parse(data) else { return };
    if v.is_v1_err_vers() {
        return;
    }
    let reads: Vec<ReadSegment> = v.read_list().iter().collect();
    let writes: Vec<Vec<Segment>> = v.write_list().iter().map(|c| c.iter().collect()).collect();
    let write_refs: Vec<&[Segment]> = writes.iter().map(|c| c.as_slice()).collect();
    let reply: Option<Vec<Segment>> = v.reply_chunk().map(|c| c.iter().collect());
    let chunks = Chunks { reads: &reads, writes: &write_refs, reply: reply.as_deref() };
    let props: Vec<Property<'_>> = v.props().map(|p| p.properties().collect()).unwrap_or_default();
    let body = match v.body() {
        v2::ViewBody::Chunks { inv_handle, .. } if v.htype().to_u32() == 0 => v2::Body::Msg { inv_handle, chunks },
        v2::ViewBody::Chunks { inv_handle, .. } => v2::Body::NoMsg { inv_handle, chunks },
        v2::ViewBody::Error(e) => v2::Body::Error(e),
        v2::ViewBody::ConnProp(_) => v2::Body::ConnProp(&props),
    };
    let h = v2::Header { xid: v.xid(), vers: v.vers(), credit: v.credit(), flags: v.flags(), body };
    let mut out = vec![0u8; h.encoded_len()];
    h.encode(&mut out).unwrap();
    if let Some(p) = v.props() {
        // XDR padding is not checked on receipt: the properties, not the bytes, must match.
        let again = v2::HeaderView::parse(&out).unwrap();
        assert!(again.props().unwrap().properties().eq(p.properties()));
    } else {
        assert_eq!(&out[..], &data[..v.header_len()]);
    }
});
