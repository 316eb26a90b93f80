//! The RPC-over-RDMA engine: fabrics, buffer pools, connections, requester, responder and
//! workers. Built on the wire formats of [`rpcrdma_proto`].

pub use rpcrdma_proto as proto;

pub mod clock;
pub mod conn;
pub mod dispatch;
pub mod fabric;
pub mod loopback;
pub mod pool;
pub mod program;
pub mod requester;
pub mod responder;
pub mod stats;
pub mod worker;
