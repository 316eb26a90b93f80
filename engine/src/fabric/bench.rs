//! Latency probes of the fabric, as library functions for `rpcrdma bench fabric`: the
//! shared-memory limit (one cache line bounced between two pinned threads) and a SEND
//! ping-pong over any provider. Both report half round trips, each sample including one
//! clock read, so their numbers compare directly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

use super::conformance::{Env, Side};
use super::soft::SoftEnv;
use super::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, Provider, QpCaps, QpInit,
    QueuePair, RecvWr, SendWr, Wc,
};

/// Latency percentiles of a run, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Samples taken.
    pub samples: usize,
    /// Fastest sample.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Slowest sample.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: f64,
}

impl Latency {
    /// The statistics of `samples` (nanoseconds), sorting them.
    pub fn from_samples(samples: &mut [u64]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Latency {
            samples: samples.len(),
            min_ns: samples[0],
            p50_ns: at(0.50),
            p90_ns: at(0.90),
            p99_ns: at(0.99),
            max_ns: samples[samples.len() - 1],
            mean_ns: samples.iter().sum::<u64>() as f64 / samples.len() as f64,
        }
    }
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} min={}ns p50={}ns p90={}ns p99={}ns max={}ns mean={:.1}ns",
            self.samples,
            self.min_ns,
            self.p50_ns,
            self.p90_ns,
            self.p99_ns,
            self.max_ns,
            self.mean_ns
        )
    }
}

/// Two distinct cores to pin the two sides on, if the machine has two.
fn two_cores() -> Option<(core_affinity::CoreId, core_affinity::CoreId)> {
    let ids = core_affinity::get_core_ids()?;
    match ids.as_slice() {
        [a, b, ..] => Some((*a, *b)),
        _ => None,
    }
}

fn pin(core: Option<core_affinity::CoreId>) {
    if let Some(c) = core {
        core_affinity::set_for_current(c);
    }
}

#[repr(align(128))]
struct Line(AtomicU64);

/// Bounces one cache line between two threads pinned to different cores, `iters` round trips
/// after a warm-up, and reports half round trips: the floor any shared-memory fabric pays per
/// message.
pub fn cacheline_pingpong(iters: usize) -> Latency {
    let line = Line(AtomicU64::new(0));
    let cores = two_cores();
    let warmup = iters / 10 + 100;
    let total = warmup + iters;
    let mut samples = vec![0u64; iters];
    thread::scope(|s| {
        let line = &line;
        s.spawn(move || {
            pin(cores.map(|c| c.1));
            for i in 0..total as u64 {
                while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        });
        // The measuring side runs on its own thread too: pinning the caller would shrink the
        // affinity of every thread it starts later.
        let samples = &mut samples;
        s.spawn(move || {
            pin(cores.map(|c| c.0));
            let mut t = Instant::now();
            for i in 0..total as u64 {
                line.0.store(2 * i + 1, Ordering::Release);
                while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
                let now = Instant::now();
                if i as usize >= warmup {
                    samples[i as usize - warmup] = (now - t).as_nanos() as u64 / 2;
                }
                t = now;
            }
        });
    });
    Latency::from_samples(&mut samples)
}

const RECVS: usize = 32;
const SIGNAL_EVERY: u64 = 16;

/// Ping-pongs `msg_size`-byte SENDs between two queue pairs connected by `env`, each side on
/// its own pinned thread busy-polling one completion queue, `iters` round trips after a
/// warm-up; reports half round trips. Sends are signaled one in 16; receives are reposted
/// off the critical path (the echo side answers before reposting, the measuring side
/// reposts while its next message travels), as a run-to-completion worker does.
pub fn send_pingpong<P: Provider, E: Env<P>>(
    env: &E,
    iters: usize,
    msg_size: usize,
) -> Result<Latency, String> {
    let dev = env.device();
    let e = |what: &'static str| move |err: super::FabricError| format!("{what}: {err}");
    let cq_a = dev.create_cq(256).map_err(e("create cq"))?;
    let cq_b = dev.create_cq(256).map_err(e("create cq"))?;
    let pd_a = dev.alloc_pd().map_err(e("alloc pd"))?;
    let pd_b = dev.alloc_pd().map_err(e("alloc pd"))?;
    let slot = msg_size.max(64).next_multiple_of(64);
    let mr_a = pd_a
        .alloc_region(slot * (RECVS + 1), Access::LOCAL_WRITE)
        .map_err(e("alloc region"))?;
    let mr_b = pd_b
        .alloc_region(slot * (RECVS + 1), Access::LOCAL_WRITE)
        .map_err(e("alloc region"))?;
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: RECVS as u32,
        max_inline_data: 0,
        ..QpCaps::default()
    };
    let (mut qa, mut qb) = env.pair(
        Side {
            pd: &pd_a,
            init: QpInit::new(&cq_a, &cq_a, caps),
        },
        Side {
            pd: &pd_b,
            init: QpInit::new(&cq_b, &cq_b, caps),
        },
    )?;
    for i in 0..RECVS {
        let r = RecvWr::new(i as u64, &[]);
        qa.post_recv(&RecvWr {
            sges: &[mr_a.sge(i * slot, slot as u32)],
            ..r
        })
        .map_err(|e| e.to_string())?;
        qb.post_recv(&RecvWr {
            sges: &[mr_b.sge(i * slot, slot as u32)],
            ..r
        })
        .map_err(|e| e.to_string())?;
    }
    let warmup = iters / 10 + 100;
    let total = warmup + iters;
    let cores = two_cores();
    let mut samples = vec![0u64; iters];
    let timeout = env.timeout();

    // One side's loop body: wait for a receive (failing on any error), repost it, then
    // (the echo side) answer.
    fn wait_recv<P: Provider>(
        cq: &mut P::Cq,
        wc: &mut [Wc; 8],
        timeout: std::time::Duration,
    ) -> Result<u64, String> {
        let mut idle = 0u32;
        let mut since: Option<Instant> = None;
        loop {
            let n = cq.poll(wc).map_err(|e| e.to_string())?;
            let mut got = None;
            for c in &wc[..n] {
                if !c.status.is_ok() {
                    return Err(format!("ping-pong completion {c:?}"));
                }
                if c.is_recv() {
                    got = Some(c.wr_id);
                }
            }
            if let Some(id) = got {
                return Ok(id);
            }
            // Look at the clock only now and then, to keep it out of the measured path.
            idle = idle.wrapping_add(1);
            if idle.is_multiple_of(4096) {
                let start = *since.get_or_insert_with(Instant::now);
                if start.elapsed() > timeout {
                    return Err("ping-pong timed out".into());
                }
            }
        }
    }

    let send_at = RECVS * slot;
    let result = thread::scope(|s| -> Result<(), String> {
        let echo = s.spawn(|| -> Result<(), String> {
            pin(cores.map(|c| c.1));
            let mut cq = cq_b;
            let mut wc = [Wc::default(); 8];
            let sge = [mr_b.sge(send_at, msg_size as u32)];
            for i in 0..total as u64 {
                let id = wait_recv::<P>(&mut cq, &mut wc, timeout)? as usize;
                // Answer first, then repost: a run-to-completion worker's order.
                let mut wr = SendWr::send(i, &sge);
                if i % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
                    wr = wr.signaled();
                }
                qb.post_send(&wr).map_err(|e| e.to_string())?;
                qb.post_recv(&RecvWr::new(id as u64, &[mr_b.sge(id * slot, slot as u32)]))
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        });
        let samples = &mut samples;
        let measure = s.spawn(move || -> Result<(), String> {
            pin(cores.map(|c| c.0));
            let mut cq = cq_a;
            let mut wc = [Wc::default(); 8];
            let sge = [mr_a.sge(send_at, msg_size as u32)];
            let mut repost: Option<usize> = None;
            let mut t = Instant::now();
            for i in 0..total as u64 {
                let mut wr = SendWr::send(i, &sge);
                if i % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
                    wr = wr.signaled();
                }
                qa.post_send(&wr).map_err(|e| e.to_string())?;
                // The previous answer's receive goes back while this message travels.
                if let Some(id) = repost.take() {
                    qa.post_recv(&RecvWr::new(id as u64, &[mr_a.sge(id * slot, slot as u32)]))
                        .map_err(|e| e.to_string())?;
                }
                let id = wait_recv::<P>(&mut cq, &mut wc, timeout)? as usize;
                let now = Instant::now();
                if i as usize >= warmup {
                    samples[i as usize - warmup] = (now - t).as_nanos() as u64 / 2;
                }
                t = now;
                repost = Some(id);
            }
            Ok(())
        });
        let measured = measure
            .join()
            .map_err(|_| "measuring thread panicked".to_string());
        let echoed = echo.join().map_err(|_| "echo thread panicked".to_string());
        measured??;
        echoed?
    });
    result?;
    Ok(Latency::from_samples(&mut samples))
}

/// [`send_pingpong`] on the soft provider, over a direct in-process pair.
pub fn soft_send_pingpong(iters: usize, msg_size: usize) -> Result<Latency, String> {
    send_pingpong(&SoftEnv::direct(), iters, msg_size)
}
