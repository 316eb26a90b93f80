//! `rpcrdma conformance`: runs the fabric conformance suite (every pair case, then the split
//! cases with the two ends on two threads) on the soft provider or on the verbs provider
//! (a NIC, or soft-RoCE: `--device rxe0 --addr 10.0.2.15:PORT` in the rxe-vm guest). One line
//! per case; exit status 0 only if every case passed.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use clap::Args as ClapArgs;
use rpcrdma_conformance::{self as conformance, Env, Report, SoftEnv, VerbsEnv};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::{Device, Provider};

use crate::provider::{open_verbs, ProviderChoice};

/// Arguments of `rpcrdma conformance`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The provider under test.
    #[arg(long, value_enum, default_value_t = ProviderChoice::Soft)]
    provider: ProviderChoice,
    /// The RDMA device (verbs; default: the first one).
    #[arg(long)]
    device: Option<String>,
    /// IP address and first port to listen on (verbs); each case takes the next port.
    #[arg(long, default_value = "10.0.2.15:18700")]
    addr: SocketAddr,
    /// Longest wait of any single step, in seconds.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Run only the cases whose name contains this.
    #[arg(long, default_value = "")]
    filter: String,
}

/// Runs the suite; exit status 0 only if every case passed, 1 if one failed, 2 if the
/// provider could not be set up.
pub fn run(args: &Args) -> ExitCode {
    let timeout = Duration::from_secs(args.timeout.max(1));
    let reports = match args.provider {
        ProviderChoice::Soft => {
            let env = SoftEnv::sockets();
            let split_addr = SoftAddr::unique("rpcrdma-conformance-split");
            suite::<Soft, _>(&env, split_addr, &args.filter, timeout)
        }
        ProviderChoice::Verbs => {
            let device = match open_verbs(args.device.as_deref()) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            eprintln!("verbs on {} at {}", device.name(), args.addr);
            let env = VerbsEnv::new(device, args.addr, timeout);
            let split_addr = env.fresh_addr();
            suite::<Verbs, _>(&env, split_addr, &args.filter, timeout)
        }
    };
    let mut ok = true;
    let mut passed = 0;
    let mut total = 0;
    for r in &reports {
        for line in r
            .to_string()
            .lines()
            .filter(|l| l.starts_with("ok") || l.starts_with("FAILED"))
        {
            println!("{line}");
        }
        passed += r.passed();
        total += r.cases.len();
        ok &= r.is_success();
    }
    println!("{passed} passed, {} failed", total - passed);
    if ok && total > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The pair cases, then the split cases on two threads.
fn suite<P: Provider, E: Env<P>>(
    env: &E,
    split_addr: P::Addr,
    filter: &str,
    timeout: Duration,
) -> Vec<Report> {
    let mut reports = vec![conformance::run_matching::<P, E>(env, filter)];
    let mut split_names = conformance::SPLIT_ACTIVE_CASES
        .iter()
        .chain([&conformance::SPLIT_PASSIVE_CASE]);
    if split_names.any(|n| n.contains(filter)) {
        reports.push(split::<P>(env.device(), split_addr, timeout));
    }
    reports
}

fn split<P: Provider>(device: &P::Device, addr: P::Addr, timeout: Duration) -> Report {
    let mut listener = match P::listen(device, &addr) {
        Ok(l) => l,
        Err(e) => {
            return Report {
                provider: P::NAME,
                cases: vec![conformance::CaseReport {
                    name: "split_setup",
                    outcome: Err(format!("listen on {addr}: {e}")),
                    elapsed: Duration::ZERO,
                }],
            }
        }
    };
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let passive = s.spawn(|| conformance::split_passive::<P>(device, &addr, timeout, &stop));
        let mut report = conformance::split_active::<P, _>(device, &mut listener, timeout, || {
            stop.store(true, Ordering::Relaxed);
        });
        stop.store(true, Ordering::Relaxed);
        let outcome = passive
            .join()
            .unwrap_or_else(|_| Err("passive end panicked".into()));
        report.cases.push(conformance::CaseReport {
            name: conformance::SPLIT_PASSIVE_CASE,
            outcome,
            elapsed: Duration::ZERO,
        });
        report
    })
}
