//! Wire formats of RPC-over-RDMA: XDR (RFC 4506), ONC RPC version 2 (RFC 5531), the
//! RPC-over-RDMA version 1 transport header (RFC 8166) and its connection private data
//! (RFC 8797), and version 2 (draft-cel-nfsv4-rpcrdma-version-two-09: [`v2`]).
//!
//! This crate does no I/O and holds no `unsafe`. Decoders borrow from the received bytes and
//! never read past them; encoders write into buffers the caller provides. The receive-path
//! decision ([`verdict`]), the reassembly of a reduced Payload stream ([`chunks`]) and the
//! choice of message form ([`plan`]) are pure functions, so every rule can be tested in memory.
//!
//! # A header, decoded and judged
//!
//! A READ's Call as a client sends it: an RDMA_MSG transport header ([`header::Header`])
//! with one Write chunk for the result, then the RPC Call header inline. The receiver decodes
//! the transport header in place ([`header::HeaderView`]: the lists are iterators over the
//! received bytes) and asks for the verdict ([`verdict::judge_call`]): process the Call, or
//! what to answer instead, with the rule it comes from (RFC 8166 §4.5).
//!
//! ```rust
//! use rpcrdma_proto::header::{Chunks, Header, HeaderView, Proc, RdmaError, Segment};
//! use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth};
//! use rpcrdma_proto::verdict::{judge_call, Action};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Encode: the transport header (XID 7, 32 credits asked), then the RPC Call header.
//!     let chunk = [Segment::new(0x21, 65536, 0x40000)]; // handle, length, offset
//!     let writes: [&[Segment]; 1] = [&chunk];
//!     let chunks = Chunks { reads: &[], writes: &writes, reply: None };
//!     let mut buf = [0u8; 256];
//!     let n = Header::msg(7, 32, chunks).encode(&mut buf)?;
//!     let call = CallHeader::new(7, 100_003, 3, 6, OpaqueAuth::NONE, OpaqueAuth::NONE);
//!     let len = n + call.encode(&mut buf[n..])?;
//!     let msg = &buf[..len];
//!
//!     // Decode in place, without copying or allocating.
//!     let view = HeaderView::parse(msg)?;
//!     assert_eq!((view.xid(), view.credit(), view.proc()), (7, 32, Proc::Msg));
//!     let lengths: Vec<u64> = view.write_list().iter().map(|c| c.total_len()).collect();
//!     assert_eq!(lengths, [65536]);
//!     assert_eq!(view.header_len(), n);
//!
//!     // The verdict: every transport check passed; the RPC header is decoded.
//!     let accepted = judge_call(msg).expect("a valid Call");
//!     let (rpc, _) = accepted.call.expect("an RDMA_MSG carries its RPC header");
//!     assert_eq!((rpc.prog, rpc.vers, rpc.proc_num), (100_003, 3, 6));
//!
//!     // The same bytes with rdma_vers 2: a version 1 responder answers ERR_VERS.
//!     let mut other = msg.to_vec();
//!     other[4..8].copy_from_slice(&2u32.to_be_bytes());
//!     let verdict = judge_call(&other).expect_err("not version 1");
//!     assert_eq!(verdict.action, Action::ErrVers { low: 1, high: 1 });
//!     assert!(verdict.reason.contains("RFC 8166 §4.5.1"));
//!     let answer = verdict.rdma_error().expect("an RDMA_ERROR to send");
//!     assert_eq!(answer, RdmaError::Vers { low: 1, high: 1 });
//!     let mut out = [0u8; 64];
//!     let n = Header::error(7, 2, 32, answer).encode(&mut out)?; // XID and version echoed
//!     assert_eq!(HeaderView::parse(&out[..n])?.proc(), Proc::Error);
//!
//!     // Too short to be a transport header at all: dropped without an answer.
//!     assert_eq!(judge_call(&msg[..20]).unwrap_err().action, Action::Discard);
//!     Ok(())
//! }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod any;
pub mod chunks;
pub mod emit;
pub mod error;
pub mod header;
pub mod plan;
pub mod private_data;
pub mod rpc;
pub mod shape;
pub mod v2;
pub mod verdict;
pub mod xdr;

pub use error::{DecodeError, EncodeError};
