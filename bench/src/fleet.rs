//! Many connections driven by several client threads: the connections are shared out
//! among the threads as evenly as they go, each thread pinned and polling its share in
//! turn ([`rpc::run_many`]), all starting their loops at once; their runs merged into one
//! report (one histogram of every round trip) with each thread's and each connection's
//! part.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::requester::Client;

use crate::cpu;
use crate::rpc::{self, Gates, LoadConfig, LoadError, LoadReport, Prepared, Progress};
use crate::summary::Percentiles;

/// What one client thread did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadRun {
    /// The core it was pinned to, if any.
    pub core: Option<usize>,
    /// Connections it drove.
    pub conns: usize,
    /// RPCs it completed in the measured phase.
    pub rpcs: u64,
    /// Its CPU time over the whole run (warm-up and drain included), if the system tells.
    pub cpu: Option<Duration>,
}

/// A run of several threads: the merged report and each thread's part.
#[derive(Clone, Debug)]
pub struct FleetReport {
    /// Every connection's round trips in one histogram, rates summed, counters summed,
    /// `per_conn` in the order of the connections given.
    pub total: LoadReport,
    /// Each client thread, in order (thread `i` drove the `i`th share of the connections).
    pub threads: Vec<ThreadRun>,
}

/// The core of the `i`th of a run's threads when the first is pinned to `first` on a
/// machine of `ncores` cores and every `stride`th core after it is taken by this run.
pub fn core_of(first: usize, i: usize, stride: usize, ncores: usize) -> usize {
    (first + i * stride.max(1)) % ncores.max(1)
}

/// Pins the calling thread to `core` if the machine has it.
pub fn pin(core: usize) {
    if let Some(id) = core_affinity::get_core_ids().and_then(|ids| ids.get(core).copied()) {
        core_affinity::set_for_current(id);
    }
}

/// Cores of this machine (at least 1).
pub fn cores() -> usize {
    core_affinity::get_core_ids().map_or(1, |c| c.len().max(1))
}

/// Splits `n` connections among `threads` threads: the first `n % threads` get one more.
fn shares(n: usize, threads: usize) -> Vec<usize> {
    let t = threads.clamp(1, n.max(1));
    (0..t).map(|i| n / t + usize::from(i < n % t)).collect()
}

/// Runs the mix `forms` (see [`rpc::run_many`]) on `clients` from `cores.len()` threads (thread `i` pinned to
/// `cores[i]` when it is `Some`), as `cfg` says. With `cfg.sever_every`, each thread drops
/// one of its connections in turn every `sever_every × threads`, so that the run as a whole
/// drops one every `sever_every`. `allocations` is read around the first thread's
/// measured phase (every thread starts its loop once all have made their state, and none
/// drains or reports before all have measured: [`Gates`]), and the count is divided by
/// every thread's RPCs. `progress` sees the sum of every thread's. A run whose measured
/// phase completed no RPC on any thread is [`LoadError::NoneMeasured`].
pub fn run<P: Provider>(
    clients: &mut [Client<P>],
    forms: &[Prepared],
    cfg: LoadConfig,
    cores: &[Option<usize>],
    allocations: fn() -> Option<u64>,
    progress: impl Fn(Progress) + Sync,
) -> Result<FleetReport, LoadError>
where
    Client<P>: Send,
{
    if clients.is_empty() {
        return Err(LoadError::Config("no connection to load"));
    }
    let shares = shares(clients.len(), cores.len().max(1));
    let t = shares.len();
    let cfg = LoadConfig {
        sever_every: cfg.sever_every.map(|e| e * t as u32),
        ..cfg
    };
    let done: Vec<AtomicU64> = (0..t).map(|_| AtomicU64::new(0)).collect();
    let gates = Gates::new(t);
    let mut rest = clients;
    let mut groups = Vec::with_capacity(t);
    for &n in &shares {
        let (group, tail) = rest.split_at_mut(n);
        groups.push(group);
        rest = tail;
    }
    let runs: Vec<(ThreadRun, Result<LoadReport, LoadError>)> = thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(i, group)| {
                let core = cores.get(i).copied().flatten();
                let (gates, done, progress) = (&gates, &done, &progress);
                s.spawn(move || {
                    if let Some(c) = core {
                        pin(c);
                    }
                    let cpu0 = cpu::thread_cpu();
                    let counted: fn() -> Option<u64> = if i == 0 { allocations } else { || None };
                    let conns = group.len();
                    let r = rpc::run_many(group, forms, cfg, Some(gates), counted, |p| {
                        done[i].store(p.rpcs, Ordering::Relaxed);
                        if i == 0 {
                            progress(Progress {
                                rpcs: done.iter().map(|d| d.load(Ordering::Relaxed)).sum(),
                                ..p
                            });
                        }
                    });
                    let cpu = cpu0
                        .zip(cpu::thread_cpu())
                        .map(|(a, b)| b.saturating_sub(a));
                    let run = ThreadRun {
                        core,
                        conns,
                        rpcs: r.as_ref().map_or(0, |r| r.rpcs),
                        cpu,
                    };
                    (run, r)
                })
            })
            .collect();
        // Made before any thread measures: nothing here allocates while they do.
        let mut out = Vec::with_capacity(t);
        for h in handles {
            out.push(
                h.join()
                    .unwrap_or_else(|_| (ThreadRun::default(), Err(LoadError::Stalled))),
            );
        }
        out
    });
    let mut threads = Vec::with_capacity(t);
    let mut reports = Vec::with_capacity(t);
    for (run, r) in runs {
        threads.push(run);
        reports.push(r?);
    }
    Ok(FleetReport {
        total: rpc::measured(merge(reports))?,
        threads,
    })
}

/// One report of several threads' runs.
fn merge(mut reports: Vec<LoadReport>) -> LoadReport {
    let mut total = reports.remove(0);
    let first_rpcs = total.rpcs;
    for r in &reports {
        // Same bounds everywhere: adding cannot fail.
        let _ = total.hist.add(&r.hist);
        let _ = total.server_work.add(&r.server_work);
        total.rpcs += r.rpcs;
        total.seconds = total.seconds.max(r.seconds);
        total.client.add(&r.client);
        total.per_conn.extend_from_slice(&r.per_conn);
        total.faults.add(&r.faults);
    }
    // The first thread's count covers every thread's allocations in its measured phase.
    total.allocs_per_rpc = total
        .allocs_per_rpc
        .map(|a| a * first_rpcs as f64 / total.rpcs.max(1) as f64);
    // Over the longest thread's measured phase, as each connection's rate is.
    total.rate_rps = total.rpcs as f64 / total.seconds.max(1e-9);
    total.lat_ns = Percentiles::of(&total.hist);
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_shared_evenly() {
        assert_eq!(shares(5, 2), vec![3, 2]);
        assert_eq!(shares(4, 4), vec![1, 1, 1, 1]);
        // More threads than connections: one connection each.
        assert_eq!(shares(2, 8), vec![1, 1]);
        assert_eq!(shares(1, 0), vec![1]);
        assert_eq!(shares(7, 3).iter().sum::<usize>(), 7);
    }

    /// A server that never answers: the measured phase completes nothing, and the run says
    /// so instead of reporting a rate of 0 (the Calls fail by their timeout in the drain).
    #[test]
    fn a_measured_phase_without_a_completion_is_an_error() {
        use rpcrdma_engine::conn::ConnConfig;
        use rpcrdma_engine::dispatch::Dispatch;
        use std::sync::Arc;
        use std::time::Duration;
        let cfg = ConnConfig::default();
        let (client, _silent) =
            rpcrdma_engine::loopback::soft_pair(Arc::new(Dispatch::new()), cfg, cfg).unwrap();
        let mut clients = vec![client];
        let load = LoadConfig::new(
            2,
            Duration::from_millis(30),
            Duration::ZERO,
            Duration::from_millis(100),
        );
        let prepared = crate::workload::Prepared::new(crate::workload::Workload::Null);
        let r = run(
            &mut clients,
            core::slice::from_ref(&prepared),
            load,
            &[None],
            || None,
            |_| {},
        );
        match r {
            Err(LoadError::NoneMeasured { phase, outside }) => {
                assert!(phase >= Duration::from_millis(30), "{phase:?}");
                // The one Call in flight (one credit until a first Reply grants more,
                // RFC 8166 §3.3.1) failed by its timeout, after the phase.
                assert_eq!(outside, 1);
            }
            other => panic!(
                "expected NoneMeasured, got {:?}",
                other.map(|r| r.total.rpcs)
            ),
        }
        let e = LoadError::NoneMeasured {
            phase: Duration::from_millis(30),
            outside: 2,
        };
        assert!(e
            .to_string()
            .contains("no RPC completed in the 0.03 s measured phase"));
    }

    #[test]
    fn cores_wrap_around_the_machine() {
        assert_eq!(core_of(0, 0, 2, 2), 0);
        assert_eq!(core_of(0, 1, 2, 2), 0);
        assert_eq!(core_of(1, 1, 1, 4), 2);
        assert_eq!(core_of(3, 2, 1, 4), 1);
    }
}
