//! The RPC-over-RDMA engine: fabrics, buffer pools, connections, requester, responder and
//! workers. Built on the wire formats of [`rpcrdma_proto`].

pub use rpcrdma_proto as proto;

pub mod fabric;
pub mod pool;
