//! Wire formats of RPC-over-RDMA: XDR (RFC 4506), ONC RPC version 2 (RFC 5531), the
//! RPC-over-RDMA version 1 transport header (RFC 8166) and its connection private data
//! (RFC 8797), and version 2 (draft-cel-nfsv4-rpcrdma-version-two-09: [`v2`]).
//!
//! This crate does no I/O and holds no `unsafe`. Decoders borrow from the received bytes and
//! never read past them; encoders write into buffers the caller provides. The receive-path
//! decision ([`verdict`]), the reassembly of a reduced Payload stream ([`chunks`]) and the
//! choice of message form ([`plan`]) are pure functions, so every rule can be tested in memory.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chunks;
pub mod error;
pub mod header;
pub mod plan;
pub mod private_data;
pub mod rpc;
pub mod v2;
pub mod verdict;
pub mod xdr;

pub use error::{DecodeError, EncodeError};
