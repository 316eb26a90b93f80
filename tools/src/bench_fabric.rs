//! `rpcrdma bench fabric`: the fabric's latency for one operation and message size, beside a
//! plain shared-memory cache-line ping-pong between the same two cores measured in the same
//! run (`limit_ns_p50`), so that runs on a shared, noisy machine compare as ratios.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, ValueEnum};
use rpcrdma_bench::fabric_probes::{self as probes, Latency, Op};
use rpcrdma_conformance::{Env, SoftEnv, VerbsEnv};
use rpcrdma_engine::fabric::Provider;
use serde_json::json;

use crate::provider::{open_verbs, ProviderChoice};

/// The operation to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OpArg {
    /// SEND ping-pong between two threads (half round trips).
    Send,
    /// RDMA Write ping-pong, each side polling its memory (half round trips).
    Write,
    /// RDMA Read latency (whole round trips).
    Read,
}

impl From<OpArg> for Op {
    fn from(o: OpArg) -> Op {
        match o {
            OpArg::Send => Op::Send,
            OpArg::Write => Op::Write,
            OpArg::Read => Op::Read,
        }
    }
}

/// Arguments of `rpcrdma bench fabric`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The provider to measure.
    #[arg(long, value_enum, default_value_t = ProviderChoice::Soft)]
    provider: ProviderChoice,
    /// The operation.
    #[arg(long, value_enum, default_value_t = OpArg::Send)]
    op: OpArg,
    /// Message sizes in bytes: one, or a comma-separated list (one report each).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    size: Vec<usize>,
    /// Samples per size, after a warm-up of a tenth as many.
    #[arg(long, default_value_t = 100_000)]
    iters: usize,
    /// The RDMA device (verbs; default: the first one).
    #[arg(long)]
    device: Option<String>,
    /// IP address and port to listen on (verbs).
    #[arg(long, default_value = "10.0.2.15:18900")]
    addr: SocketAddr,
    /// Post SENDs and RDMA Writes of up to this many bytes inline (`IBV_SEND_INLINE`, within
    /// what the device allows; perftest's defaults are 236 and 220, though on soft-RoCE its
    /// `ib_send_lat` posted nothing inline); 0: gathered from registered memory.
    #[arg(long, default_value_t = 0)]
    inline: usize,
    /// Print one JSON object per size instead of a line of text.
    #[arg(long)]
    json: bool,
    /// Leave the two threads where the scheduler puts them instead of pinning them to the
    /// first two cores (perftest's `ib_*_lat` pin nothing unless run under `taskset`).
    #[arg(long)]
    no_pin: bool,
}

/// Runs the probe for each size; exit status 0 when every run finished, 1 when one failed,
/// 2 when the provider could not be set up or the arguments are unusable.
pub fn run(args: &Args) -> ExitCode {
    if args.iters == 0 || args.size.iter().any(|&s| s == 0 || s > 1 << 30) {
        eprintln!("--iters must be positive and every --size between 1 and 1 GiB");
        return ExitCode::from(2);
    }
    match args.provider {
        ProviderChoice::Soft => sweep(&SoftEnv::direct(), args),
        ProviderChoice::Verbs => match open_verbs(args.device.as_deref()) {
            Ok(device) => sweep(
                &VerbsEnv::new(device, args.addr, Duration::from_secs(10)),
                args,
            ),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
    }
}

fn sweep<P: Provider, E: Env<P>>(env: &E, args: &Args) -> ExitCode {
    let op = Op::from(args.op);
    probes::set_pinning(!args.no_pin);
    for &size in &args.size {
        // The reference first and last, so that a change of machine load during the run
        // shows as a spread between the two.
        let before = probes::cacheline_pingpong(args.iters);
        let lat = match probes::measure_inline(env, op, args.iters, size, args.inline) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("{} {} {size} B: {e}", P::NAME, op.name());
                return ExitCode::FAILURE;
            }
        };
        let after = probes::cacheline_pingpong(args.iters);
        let limit = before.p50_ns.min(after.p50_ns);
        print_report(P::NAME, op, size, args, &lat, limit, args.json);
    }
    ExitCode::SUCCESS
}

fn print_report(
    provider: &str,
    op: Op,
    size: usize,
    args: &Args,
    lat: &Latency,
    limit: u64,
    json: bool,
) {
    let ratio = lat.p50_ns as f64 / limit.max(1) as f64;
    let kind = if op.half_round_trip() {
        "half_round_trip"
    } else {
        "round_trip"
    };
    if json {
        let v = json!({
            "provider": provider,
            "op": op.name(),
            "size": size,
            "iters": args.iters,
            "inline_max": args.inline,
            "pinned": !args.no_pin,
            "lat_ns": {
                "min": lat.min_ns,
                "p50": lat.p50_ns,
                "p90": lat.p90_ns,
                "p99": lat.p99_ns,
                "p999": lat.p999_ns,
                "max": lat.max_ns,
            },
            "limit_ns_p50": limit,
            "ratio_p50": (ratio * 100.0).round() / 100.0,
            "sample": kind,
        });
        println!("{v}");
    } else {
        println!(
            "{provider} {} {size:>7} B: p50 {} ns ({ratio:.2}x the {limit} ns cache-line limit), \
             min {} p90 {} p99 {} p99.9 {} max {} ns [{kind}, {} samples]",
            op.name(),
            lat.p50_ns,
            lat.min_ns,
            lat.p90_ns,
            lat.p99_ns,
            lat.p999_ns,
            lat.max_ns,
            lat.samples
        );
    }
}
