//! Measurement harness for rpcrdma: a closed-loop RPC load generator with latency
//! histograms ([`rpc`]; what a run comes down to, its percentiles and the spread of its
//! connections' rates, in [`summary`]) over workloads whose every reply is checked
//! ([`workload`]), the counting allocator that lets a benchmark report heap allocations per
//! RPC ([`alloc`]), the same-run ceilings an RPC is read against ([`limits`], [`ring`]) and
//! the fabric latency probes beneath them ([`fabric_probes`]: the cache-line limit, SEND,
//! RDMA Write and Read ping-pongs over any provider), the verdict on a fault run's RPCs, each
//! of which must complete exactly once ([`exactly_once`]), and what a sweep makes of its
//! measurements: the points and their JSON and CSV forms ([`point`]), the inline/chunked
//! crossovers and the threshold they recommend ([`crossover`]), plots ([`plot`]) and the
//! comparison of two runs ([`report`]).

pub mod alloc;
pub mod axes;
pub mod cost;
pub mod cpu;
pub mod crossover;
pub mod exactly_once;
pub mod fabric_probes;
pub mod fleet;
pub mod footprint;
pub mod limits;
pub mod local;
pub mod plot;
pub mod point;
pub mod report;
pub mod ring;
pub mod rpc;
pub mod summary;
pub mod sweep;
pub mod workload;

pub use rpcrdma_engine as engine;
