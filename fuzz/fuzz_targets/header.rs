//! The transport header decoder on arbitrary bytes: never panics, never reads out of bounds, and
//! whatever it accepts re-encodes to the same header bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::header::{Body, Chunks, Header, HeaderView, Proc, ReadSegment, Segment};

fuzz_target!(|data: &[u8]| {
    let Ok(v) = HeaderView::parse(data) else { return };
    let reads: Vec<ReadSegment> = v.read_list().iter().collect();
    let writes: Vec<Vec<Segment>> = v.write_list().iter().map(|c| c.iter().collect()).collect();
    let write_refs: Vec<&[Segment]> = writes.iter().map(|c| c.as_slice()).collect();
    let reply: Option<Vec<Segment>> = v.reply_chunk().map(|c| c.iter().collect());
    let chunks = Chunks { reads: &reads, writes: &write_refs, reply: reply.as_deref() };
    let body = match v.proc() {
        Proc::Msg => Body::Msg(chunks),
        Proc::NoMsg => Body::NoMsg(chunks),
        Proc::Msgp => {
            let (align, thresh) = v.padded().unwrap();
            Body::Msgp { align, thresh, chunks }
        }
        Proc::Done => Body::Done,
        Proc::Error => Body::Error(v.error().unwrap()),
    };
    let h = Header { xid: v.xid(), vers: v.vers(), credit: v.credit(), body };
    let mut out = vec![0u8; h.encoded_len()];
    h.encode(&mut out).unwrap();
    assert_eq!(&out[..], &data[..v.header_len()]);
});
