//! Measurement harness for rpcrdma: a closed-loop RPC load generator with latency
//! histograms ([`rpc`]), and the counting allocator that lets a benchmark report heap
//! allocations per RPC ([`alloc`]).

pub mod alloc;
pub mod rpc;

pub use rpcrdma_engine as engine;
