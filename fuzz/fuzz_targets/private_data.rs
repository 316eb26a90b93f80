//! The RFC 8797 parser on arbitrary bytes: never panics; data it finds re-encodes to the bytes
//! it was found in, but for the reserved bits, which receivers ignore.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::private_data::{parse, Parsed, RESERVED_MASK};

fuzz_target!(|data: &[u8]| {
    if let Parsed::Present { data: d, offset } = parse(data) {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&data[offset..offset + 8]);
        raw[5] &= !RESERVED_MASK;
        assert_eq!(d.encode(), raw);
    }
});
