//! `rpcrdma`: the command-line face of the project.
//!
//! - `rpcrdma decode`: a protocol analyser that prints one JSON object describing an
//!   RPC-over-RDMA message (or RFC 8797 private data) and the receive-path verdict.
//! - `rpcrdma demo`: encodes sample messages with the protocol crate, as hex.
//! - `rpcrdma bench proto`: measures the header codec against a same-run memcpy reference.
//! - `rpcrdma bench fabric`: fabric latency (SEND, RDMA Write, RDMA Read) against a same-run
//!   cache-line ping-pong between the same two cores.
//! - `rpcrdma serve`, `rpcrdma call`, `rpcrdma bench rpc`: the engine with the built-in test
//!   program, between processes or in one.
//! - `rpcrdma sweep`: every combination of inline thresholds, sizes, credits, depths,
//!   registration, forms, connections and workers, measured; table, JSON, CSV, plots and the
//!   inline threshold to use. `rpcrdma report`: two sweeps compared, failing on regressions.
//! - `rpcrdma devices`: lists RDMA devices, ports, GIDs and limits (text or JSON).
//! - `rpcrdma conformance`: runs the fabric conformance suite on the soft or verbs provider.

mod bench_cost;
mod bench_fabric;
mod bench_proto;
mod call_generic;
mod callbacks;
mod conformance;
mod decode;
mod decode_v2;
mod demo;
mod devices;
mod hex;
mod provider;
mod render;
mod report_cli;
mod rpc_cli;
mod sweep_cli;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Counts heap allocations so that `bench rpc` can report them per RPC.
#[global_allocator]
static ALLOC: rpcrdma_bench::alloc::Counting = rpcrdma_bench::alloc::Counting;

/// RPC-over-RDMA (RFC 8166, RFC 8797) engine and tools.
#[derive(Parser)]
#[command(name = "rpcrdma", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Decode an RPC-over-RDMA message (or RFC 8797 private data) and print it as JSON with the
    /// receive-path verdict. Exit status 0 whenever a verdict was produced, 2 when the input
    /// cannot be read.
    Decode(decode::Args),
    /// Print sample messages encoded by the protocol crate, as hex.
    Demo {
        /// Which message.
        #[arg(value_enum, default_value_t = demo::Sample::LongCall)]
        sample: demo::Sample,
    },
    /// Benchmarks.
    Bench {
        /// What to measure.
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// List the RDMA devices with their ports, GIDs and limits. Exit status 0, also when
    /// there is none.
    Devices {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run the fabric conformance suite on a provider, one line per case. Exit status 0 only
    /// if every case passed.
    Conformance(conformance::Args),
    /// Serve the built-in test program (NULL, ECHO, READ, WRITE, MULTI) on pinned workers.
    Serve(rpc_cli::ServeArgs),
    /// Call the built-in test program on a server and verify the reply, or any program's
    /// procedure with --prog (arguments as XDR hex or a file, credential, Read and Write
    /// chunks, Reply chunk).
    Call(rpc_cli::CallArgs),
    /// Measure every combination of the axes (each a list or a range): a table with a
    /// progress bar, JSON lines, CSV, a plot, and the inline threshold this fabric should use.
    Sweep(Box<sweep_cli::Args>),
    /// Compare two sweeps (JSON) point by point; exit status 1 on a regression past
    /// --max-regression plus the noise of the repetitions, 2 when a file cannot be read.
    Report(report_cli::Args),
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Transport header encode and decode, against a memcpy of the same bytes.
    Proto {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Fabric latency of SEND, RDMA Write or RDMA Read, against a cache-line ping-pong.
    Fabric(bench_fabric::Args),
    /// RPC round trips and rate with the built-in program, against a cache-line round trip.
    Rpc(rpc_cli::BenchArgs),
    /// Instructions per RPC of each message form (client, server, fabric provider),
    /// counted by callgrind: deterministic where timings are not.
    Cost(bench_cost::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Decode(args) => decode::run(&args),
        Cmd::Demo { sample } => {
            println!("{}", hex::encode(&demo::build(sample)));
            ExitCode::SUCCESS
        }
        Cmd::Bench { what } => match what {
            BenchWhat::Proto { json } => bench_proto::run(json),
            BenchWhat::Fabric(args) => bench_fabric::run(&args),
            BenchWhat::Rpc(args) => rpc_cli::bench(&args),
            BenchWhat::Cost(args) => bench_cost::run(&args),
        },
        Cmd::Devices { json } => devices::run(json),
        Cmd::Conformance(args) => conformance::run(&args),
        Cmd::Serve(args) => rpc_cli::serve(&args),
        Cmd::Call(args) => rpc_cli::call(&args),
        Cmd::Sweep(args) => sweep_cli::run(&args),
        Cmd::Report(args) => report_cli::run(&args),
    }
}
