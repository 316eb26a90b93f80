//! Sample messages built with the protocol crate's encoders, for `make run` and for people
//! learning the wire format.

use rpcrdma_proto::header::{Chunks, Header, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth};

/// The samples `rpcrdma demo` can print.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Sample {
    /// RDMA_NOMSG with a two-segment Position-Zero Read chunk and a Reply chunk (RFC 8166 §3.5.3).
    LongCall,
    /// RDMA_MSG carrying an NFSv3 NULL Call inline (RFC 8166 §3.5.1).
    ShortCall,
    /// RDMA_ERROR ERR_VERS answering a version 2 probe (RFC 8166 §4.5.1).
    ErrVers,
}

/// Encodes the sample.
pub fn build(sample: Sample) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let n = match sample {
        Sample::LongCall => {
            let reads = [
                ReadSegment::new(0, 0x1000_0101, 4096, 0x7f00_0000_1000),
                ReadSegment::new(0, 0x1000_0202, 1028, 0x7f00_0000_3000),
            ];
            let reply = [Segment::new(0x2000_0303, 8192, 0x7f00_0001_0000)];
            let h = Header::nomsg(
                0x1c2d_3e4f,
                32,
                Chunks {
                    reads: &reads,
                    writes: &[],
                    reply: Some(&reply),
                },
            );
            h.encode(&mut buf).expect("sample fits")
        }
        Sample::ShortCall => {
            let h = Header::msg(0x0000_0042, 32, Chunks::NONE);
            let n = h.encode(&mut buf).expect("sample fits");
            let call = CallHeader::new(
                0x0000_0042,
                100_003,
                3,
                0,
                OpaqueAuth::NONE,
                OpaqueAuth::NONE,
            );
            n + call.encode(&mut buf[n..]).expect("sample fits")
        }
        Sample::ErrVers => {
            let h = Header::error(0x0a0b_0c0d, 2, 32, RdmaError::Vers { low: 1, high: 1 });
            h.encode(&mut buf).expect("sample fits")
        }
    };
    buf.truncate(n);
    buf
}
