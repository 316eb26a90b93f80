//! The XDR reader driven by the input itself: the first bytes choose the operations, the rest is
//! decoded. Never panics, never reads past the end.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::xdr::XdrReader;

fuzz_target!(|data: &[u8]| {
    let (ops, input) = data.split_at(data.len().min(16));
    let mut r = XdrReader::new(input);
    for op in ops {
        let ok = match op % 8 {
            0 => r.u32().is_ok(),
            1 => r.u64().is_ok(),
            2 => r.bool().is_ok(),
            3 => r.opaque_var(u32::MAX).is_ok(),
            4 => r.string(255).is_ok(),
            5 => r.array_len(4, u32::MAX).is_ok(),
            6 => r.opaque_fixed((*op as usize) >> 3).is_ok(),
            _ => r.skip((*op as usize) >> 3).is_ok(),
        };
        assert!(r.position() <= input.len());
        if !ok {
            break;
        }
    }
});
