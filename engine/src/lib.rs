//! The RPC-over-RDMA engine: ONC RPC carried over RDMA with RFC 8166 (version 1), RFC 8797
//! (connection private data) and the version 2 draft, on the wire formats of
//! [`rpcrdma_proto`].
//!
//! A server is a [dispatch table](dispatch) of handlers that read their arguments where they
//! were received and write their results into registered memory; [`requester::Client`] sends
//! the Calls in the smallest message form that fits (Short, Read chunks, Long) and receives
//! large results through Write chunks. Both ends run over a [`fabric::Provider`]: `soft`
//! (RDMA over shared memory, for machines without a NIC) or `verbs` (libibverbs and
//! librdmacm, behind the default `verbs` feature), chosen at compile time.
//!
//! # A soft pair: NULL, and a READ through a Write chunk
//!
//! One process, one thread: a server and a client on the soft fabric, a dispatch table of
//! two procedures, and the two RPCs driven by polling both ends. A READ's data is written
//! by the handler into the server's registered memory and arrives in the client's by RDMA
//! Write, through the Write chunk the Call provided (RFC 8166 §3.4.6).
//!
//! ```rust
//! use std::sync::Arc;
//!
//! use rpcrdma_engine::conn::ConnConfig;
//! use rpcrdma_engine::dispatch::{Dispatch, Outcome, ProcSpec};
//! use rpcrdma_engine::loopback::{connect_to, soft_server};
//! use rpcrdma_engine::program::{encode_words, fill_pattern, is_pattern, word};
//! use rpcrdma_engine::program::{NULL, PROG, READ, VERS};
//! use rpcrdma_engine::requester::CallArgs;
//!
//! // The server's dispatch table: NULL, and READ(n, seed), whose n bytes are DDP-eligible.
//! let mut table = Dispatch::new();
//! table.register(PROG, VERS, NULL, ProcSpec::plain(0), |_, _| Outcome::Success);
//! let spec = ProcSpec { ddp_results: 1, ..ProcSpec::plain(4) };
//! table.register(PROG, VERS, READ, spec, |req, resp| {
//!     let (Some(n), Some(seed)) = (word(req.args, 0), word(req.args, 4)) else {
//!         return Outcome::GarbageArgs;
//!     };
//!     let Some(data) = resp.push_bulk(n as usize) else {
//!         return Outcome::SystemErr;
//!     };
//!     fill_pattern(seed, data); // in registered memory, which the RDMA Write reads
//!     resp.write_results(&n.to_be_bytes());
//!     Outcome::Success
//! });
//!
//! // A server and a client, connected over the soft fabric (RDMA over shared memory).
//! let cfg = ConnConfig::default();
//! let (mut server, addr) = soft_server(Arc::new(table), cfg).expect("listen");
//! let (mut client, mut conn) = connect_to(&mut server, &addr, cfg).expect("connect");
//!
//! let args = encode_words(65536, 7); // READ 64 KiB of seed 7's pattern
//! let mut read = CallArgs::new(PROG, VERS, READ, &args, 8);
//! read.bulk_results = &[65536]; // one Write chunk, for READ's data
//! let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
//! for (tag, call) in [null, read].iter().enumerate() {
//!     client.submit(call, tag as u64).expect("submit");
//!     let mut done = false;
//!     while !done {
//!         conn.poll(); // the server's end, which a worker thread polls in a server
//!         client.poll_completions(|c| {
//!             let reply = c.result.expect("a reply");
//!             assert!(reply.is_success());
//!             if c.tag == 1 {
//!                 assert!(is_pattern(7, reply.bulk()[0])); // in the client's memory
//!             }
//!             done = true;
//!         });
//!     }
//! }
//! assert_eq!(conn.snapshot().write_chunks, 1);
//! ```
//!
//! `engine/examples/blockstore.rs` is a complete block store built the same way, and the
//! built-in test program ([`program::dispatch`]) is what `rpcrdma serve` exports.
//!
//! # On a NIC: the verbs provider
//!
//! The same client over libibverbs and librdmacm (a NIC, or soft-RoCE), calling a server
//! started with `rpcrdma serve --provider verbs --device rxe0 --listen 10.0.2.15:20049`;
//! [`Client::call`](requester::Client::call) is the blocking form of submit and poll. A
//! server listens with [`Server::listen`](responder::Server::listen), accepts, and hands
//! its connections to pinned [`Workers`](worker::Workers).
//!
//! ```rust,no_run
//! # #[cfg(feature = "verbs")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use rpcrdma_engine::conn::ConnConfig;
//! use rpcrdma_engine::fabric::verbs::Verbs;
//! use rpcrdma_engine::fabric::Provider;
//! use rpcrdma_engine::program::{encode_words, is_pattern, PROG, READ, VERS};
//! use rpcrdma_engine::requester::{CallArgs, Client};
//!
//! let device = Verbs::open_device(Some("rxe0"))?; // None: the first device
//! let addr = "10.0.2.15:20049".parse()?;
//! let mut client = Client::<Verbs>::connect(&device, &addr, ConnConfig::default())?;
//!
//! let args = encode_words(65536, 7);
//! let mut read = CallArgs::new(PROG, VERS, READ, &args, 8);
//! read.bulk_results = &[65536];
//! let ok = client.call(&read, |reply| {
//!     reply.is_ok_and(|r| r.is_success() && is_pattern(7, r.bulk()[0]))
//! })?;
//! assert!(ok);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "verbs"))]
//! # fn main() {}
//! ```
//!
//! # Modules
//!
//! The fabric ([`fabric`]: the traits and both providers), the pre-registered buffer pools
//! ([`pool`]), connection setup and credits ([`conn`]), the client ([`requester`]), the
//! server ([`responder`], [`dispatch`]), the polling workers ([`worker`]), the counters
//! ([`stats`]), the cycle-counter clock ([`clock`]) and a server's start ([`prefault`]);
//! [`program`] and [`loopback`] serve tests, examples and the `rpcrdma` command.
//! `docs/ARCHITECTURE.md` in the repository says what each module holds, how data flows
//! through them and where each rule of the specifications lives.

pub use rpcrdma_proto as proto;

pub mod clock;
pub mod conn;
pub mod dispatch;
pub mod fabric;
pub mod loopback;
pub mod pool;
pub mod prefault;
pub mod program;
pub mod requester;
pub mod responder;
pub mod stats;
pub mod worker;
pub mod wrid;
