//! Latency probes of the fabric, as library functions for `rpcrdma bench fabric` and the
//! same-run limits of [`crate::limits`] and [`crate::sweep`]: the shared-memory limit (one
//! cache line bounced between two pinned threads), and over any provider a SEND ping-pong, an
//! RDMA Write ping-pong (each side polls its memory for the peer's write, as perftest's
//! `ib_write_lat` does) and RDMA Read latency (one side reads, the other's CPU does nothing,
//! as `ib_read_lat`). The ping-pongs report half round trips, RDMA Read whole ones (a Read is
//! a round trip); each sample includes one clock read, of the cycle counter where it is steady
//! ([`rpcrdma_engine::clock`]), as perftest's `get_cycles`. The ping-pongs can post messages
//! inline ([`measure_inline`]); by default they do not, as perftest's `ib_send_lat` did not on
//! soft-RoCE ("Max inline data: 0\[B\]" in its header).

use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_conformance::{Env, Side, SoftEnv};
use rpcrdma_engine::clock::Clock;
use rpcrdma_engine::fabric::{
    Access, CompletionQueue, Device, FabricError, MemoryRegion, Payload, ProtectionDomain,
    Provider, QpCaps, QpInit, QueuePair, RecvWr, RemoteAddr, SendOp, SendWr, Wc,
};

/// The operation a fabric latency probe measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// SEND ping-pong (two-sided: each message consumes a posted receive).
    Send,
    /// RDMA Write ping-pong, each side polling its memory for the peer's write.
    Write,
    /// RDMA Read issued by one side; the other side's CPU takes no part.
    Read,
}

impl Op {
    /// The operation's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
        }
    }

    /// Whether a sample is half a round trip (the ping-pongs) or a whole one (Read).
    pub fn half_round_trip(self) -> bool {
        !matches!(self, Op::Read)
    }
}

/// Measures `op` with `size`-byte messages, `iters` samples after a warm-up, nothing
/// posted inline.
pub fn measure<P: Provider, E: Env<P>>(
    env: &E,
    op: Op,
    iters: usize,
    size: usize,
) -> Result<Latency, String> {
    measure_inline(env, op, iters, size, 0)
}

/// [`measure`], posting SENDs and RDMA Writes of up to `inline` bytes inline
/// (`IBV_SEND_INLINE`) when the device allows that much (RDMA Reads never are).
pub fn measure_inline<P: Provider, E: Env<P>>(
    env: &E,
    op: Op,
    iters: usize,
    size: usize,
    inline: usize,
) -> Result<Latency, String> {
    match op {
        Op::Send => send_pingpong(env, iters, size, inline),
        Op::Write => write_pingpong(env, iters, size, inline),
        Op::Read => read_latency(env, iters, size),
    }
}

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
    /// 99.9th percentile.
    pub p999_ns: u64,
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
            p999_ns: at(0.999),
            max_ns: samples[samples.len() - 1],
            mean_ns: samples.iter().sum::<u64>() as f64 / samples.len() as f64,
        }
    }
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} min={}ns p50={}ns p90={}ns p99={}ns p99.9={}ns max={}ns mean={:.1}ns",
            self.samples,
            self.min_ns,
            self.p50_ns,
            self.p90_ns,
            self.p99_ns,
            self.p999_ns,
            self.max_ns,
            self.mean_ns
        )
    }
}

/// The unmeasured warm-up for `iters` measured samples, and the whole run's length.
fn run_length(iters: usize) -> (usize, usize) {
    let warmup = iters / 10 + 100;
    (warmup, warmup + iters)
}

/// Whether the probes pin their two threads to the first two cores (see [`set_pinning`]).
static PINNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Pins the probes' two threads to the first two cores (the default), or leaves them where
/// the scheduler puts them, as perftest's `ib_*_lat` are unless run under `taskset`. Applies
/// to every probe started afterwards in this process.
pub fn set_pinning(on: bool) {
    PINNING.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Two distinct cores to pin the two sides on, if the machine has two and pinning is on.
fn two_cores() -> Option<(core_affinity::CoreId, core_affinity::CoreId)> {
    if !PINNING.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
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

/// The longest a cache-line ping-pong runs: when another thread keeps one of the two cores
/// busy (a server busy-polling on the same machine), each round trip waits for a scheduler
/// tick and 200,000 of them would take minutes.
const PINGPONG_MAX: Duration = Duration::from_secs(2);

/// Bounces one cache line between two threads pinned to different cores, `iters` round trips
/// after a warm-up (or as many as two seconds allow), and reports half round trips: the
/// floor any shared-memory fabric pays per message.
pub fn cacheline_pingpong(iters: usize) -> Latency {
    let line = Line(AtomicU64::new(0));
    let stop = AtomicBool::new(false);
    let cores = two_cores();
    let (warmup, total) = run_length(iters);
    // Every round trip's time, the warm-up's included (used only if the run is cut short
    // before the warm-up ends).
    let mut samples = vec![0u64; total];
    let mut done = 0usize;
    thread::scope(|s| {
        let (line, stop) = (&line, &stop);
        s.spawn(move || {
            pin(cores.map(|c| c.1));
            for i in 0..total as u64 {
                while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        });
        // The measuring side runs on its own thread too: pinning the caller would shrink the
        // affinity of every thread it starts later.
        let (samples, done) = (&mut samples, &mut done);
        s.spawn(move || {
            pin(cores.map(|c| c.0));
            let clock = Clock::get();
            let start = Instant::now();
            let mut t = clock.now();
            for (i, sample) in samples.iter_mut().enumerate() {
                line.0.store(2 * i as u64 + 1, Ordering::Release);
                while line.0.load(Ordering::Acquire) != 2 * i as u64 + 2 {
                    std::hint::spin_loop();
                }
                let now = clock.now();
                *sample = clock.nanos(t, now) / 2;
                t = now;
                *done = i + 1;
                if i % 256 == 255 && start.elapsed() > PINGPONG_MAX {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    // The measured round trips, or all of them when the warm-up was not even finished.
    let from = if done > warmup { warmup } else { 0 };
    Latency::from_samples(&mut samples[from..done])
}

const RECVS: usize = 32;

/// The inline size to ask a queue pair for: `max` (at most what the device allows) when
/// `size` fits it, else 0 (gathered from memory).
fn inline_for<P: Provider>(dev: &P::Device, size: usize, max: usize) -> u32 {
    let cap = (dev.attr().max_inline_data as usize).min(max);
    if size <= cap {
        cap as u32
    } else {
        0
    }
}

const SIGNAL_EVERY: u64 = 16;

/// Ping-pongs `msg_size`-byte SENDs between two queue pairs connected by `env`, each side on
/// its own pinned thread busy-polling one completion queue, `iters` round trips after a
/// warm-up; reports half round trips. Sends are signaled one in 16; receives are reposted
/// off the critical path (the echo side answers before reposting, the measuring side
/// reposts while its next message travels), as a run-to-completion worker does.
/// Sends of up to `inline` bytes are posted inline when the device allows that much.
pub fn send_pingpong<P: Provider, E: Env<P>>(
    env: &E,
    iters: usize,
    msg_size: usize,
    inline: usize,
) -> Result<Latency, String> {
    let dev = env.device();
    let e = |what: &'static str| move |err: FabricError| format!("{what}: {err}");
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
        max_inline_data: inline_for::<P>(dev, msg_size, inline),
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
    post_recvs::<P>([&mut qa, &mut qb], [&mr_a, &mr_b], slot)?;
    let (warmup, total) = run_length(iters);
    let cores = two_cores();
    let mut samples = vec![0u64; iters];
    let timeout = env.timeout();

    let send_at = RECVS * slot;
    // Inline when both queue pairs were granted room for the message.
    let inline = msg_size <= inline
        && msg_size <= qa.caps().max_inline_data.min(qb.caps().max_inline_data) as usize;
    let (bytes_a, bytes_b) = (vec![0xa5u8; msg_size], vec![0x5au8; msg_size]);
    let result = thread::scope(|s| -> Result<(), String> {
        let echo = s.spawn(|| -> Result<(), String> {
            pin(cores.map(|c| c.1));
            let mut cq = cq_b;
            let mut wc = [Wc::default(); 8];
            let sge = [mr_b.sge(send_at, msg_size as u32)];
            for i in 0..total as u64 {
                let id = wait_recv::<P>(&mut cq, &mut wc, timeout)? as usize;
                // Answer first, then repost: a run-to-completion worker's order.
                let mut wr = if inline {
                    SendWr::send_inline(i, &bytes_b)
                } else {
                    SendWr::send(i, &sge)
                };
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
            let clock = Clock::get();
            let mut t = clock.now();
            for i in 0..total as u64 {
                let mut wr = if inline {
                    SendWr::send_inline(i, &bytes_a)
                } else {
                    SendWr::send(i, &sge)
                };
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
                let now = clock.now();
                if i as usize >= warmup {
                    samples[i as usize - warmup] = clock.nanos(t, now) / 2;
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

/// Posts [`RECVS`] receives of `slot` bytes on each of [`send_pingpong`]'s queue pairs,
/// the `i`th at `i * slot` of its side's region, the two sides in turn.
fn post_recvs<P: Provider>(
    [qa, qb]: [&mut P::Qp; 2],
    [mr_a, mr_b]: [&P::Mr; 2],
    slot: usize,
) -> Result<(), String> {
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
    Ok(())
}

/// One side's loop body of [`send_pingpong`]: waits for a receive (failing on any error),
/// which the caller reposts and (the echo side) answers.
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

/// [`send_pingpong`] on the soft provider, over a direct in-process pair.
pub fn soft_send_pingpong(iters: usize, msg_size: usize) -> Result<Latency, String> {
    send_pingpong(&SoftEnv::direct(), iters, msg_size, 0)
}

/// What both sides of a one-sided probe own: a completion queue, a domain, a region the peer
/// may access, and the queue pairs connected by `env`.
struct OneSided<P: Provider> {
    /// Offset of the second half of each region (the half the peer accesses).
    half: usize,
    cq: [P::Cq; 2],
    mr: [P::Mr; 2],
    qp: [P::Qp; 2],
    _pd: [P::Pd; 2],
}

fn one_sided<P: Provider, E: Env<P>>(
    env: &E,
    size: usize,
    inline: usize,
) -> Result<OneSided<P>, String> {
    let dev = env.device();
    let e = |what: &'static str| move |err: FabricError| format!("{what}: {err}");
    let cq = [
        dev.create_cq(256).map_err(e("create cq"))?,
        dev.create_cq(256).map_err(e("create cq"))?,
    ];
    let pd = [
        dev.alloc_pd().map_err(e("alloc pd"))?,
        dev.alloc_pd().map_err(e("alloc pd"))?,
    ];
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    // Two halves: the bytes this side sends (or reads into), then the bytes the peer writes
    // (or reads).
    let len = 2 * size.max(64).next_multiple_of(64);
    let mr = [
        pd[0].alloc_region(len, access).map_err(e("alloc region"))?,
        pd[1].alloc_region(len, access).map_err(e("alloc region"))?,
    ];
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 1,
        max_inline_data: inline_for::<P>(dev, size, inline),
        ..QpCaps::default()
    };
    let (qa, qb) = env.pair(
        Side {
            pd: &pd[0],
            init: QpInit::new(&cq[0], &cq[0], caps),
        },
        Side {
            pd: &pd[1],
            init: QpInit::new(&cq[1], &cq[1], caps),
        },
    )?;
    Ok(OneSided {
        half: len / 2,
        cq,
        mr,
        qp: [qa, qb],
        _pd: pd,
    })
}

/// Polls `cq` without waiting, failing on an unsuccessful completion; returns how many
/// completions it took.
fn drain<C: CompletionQueue>(cq: &mut C, wc: &mut [Wc; 8]) -> Result<usize, String> {
    let n = cq.poll(wc).map_err(|e| e.to_string())?;
    for c in &wc[..n] {
        if !c.status.is_ok() {
            return Err(format!("completion {c:?}"));
        }
    }
    Ok(n)
}

/// The sequence mark the `i`th write carries in its last byte: never 0 (the memory's first
/// value) and never the previous mark.
fn mark(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Spins until the last byte of the peer-written half of `mr` is `want`, polling `cq` (to
/// notice errors) every 4096 spins.
fn wait_mark<P: Provider>(
    mr: &P::Mr,
    at: usize,
    want: u8,
    cq: &mut P::Cq,
    wc: &mut [Wc; 8],
    timeout: std::time::Duration,
) -> Result<(), String> {
    let mut byte = [0u8; 1];
    let mut idle = 0u32;
    let mut since: Option<Instant> = None;
    loop {
        // The peer (or the device) writes this memory behind the compiler's back: keep the
        // load inside the loop and order the payload after it.
        compiler_fence(Ordering::SeqCst);
        mr.read_at(at, &mut byte);
        if byte[0] == want {
            fence(Ordering::Acquire);
            return Ok(());
        }
        idle = idle.wrapping_add(1);
        // The completion queue is looked at rarely while waiting, to notice a failed write
        // (both sides drain it after each of their own posts), as perftest's write_lat
        // polls it only after posting: on rxe a poll takes the queue's lock. (In the TCG
        // guest some runs' p50 still sits 60–70% above their minimum, with this as with a
        // poll every 64 spins; perftest's typical latency varies as much between runs.)
        if idle.is_multiple_of(4096) {
            drain(cq, wc)?;
            let start = *since.get_or_insert_with(Instant::now);
            if start.elapsed() > timeout {
                return Err("write ping-pong timed out".into());
            }
        }
    }
}

/// Ping-pongs `msg_size`-byte RDMA Writes: each side writes its message into the peer's
/// region (the last byte carrying a sequence mark) and the peer, polling that byte, answers
/// with its own write. Writes are signaled one in 16. Reports half round trips.
/// Writes of up to `inline` bytes are posted inline when the device allows that much.
pub fn write_pingpong<P: Provider, E: Env<P>>(
    env: &E,
    iters: usize,
    msg_size: usize,
    inline: usize,
) -> Result<Latency, String> {
    let size = msg_size.max(1);
    let OneSided {
        half,
        cq: [cq_a, cq_b],
        mr: [mr_a, mr_b],
        qp: [qa, qb],
        _pd,
    } = one_sided(env, size, inline)?;
    let (warmup, total) = run_length(iters);
    let cores = two_cores();
    let timeout = env.timeout();
    let mut samples = vec![0u64; iters];
    // Inline when both queue pairs were granted room for the message.
    let inline =
        size <= inline && size <= qa.caps().max_inline_data.min(qb.caps().max_inline_data) as usize;
    // Side `me` writes from the first half of its region (or, inline, from `local`) into
    // the second half of the peer's.
    fn step<P: Provider>(
        qp: &mut P::Qp,
        mine: &P::Mr,
        local: Option<&mut [u8]>,
        peer: RemoteAddr,
        size: usize,
        i: u64,
    ) -> Result<(), String> {
        let sge = [mine.sge(0, size as u32)];
        let mut wr = match local {
            Some(bytes) => {
                bytes[size - 1] = mark(i);
                SendWr::new(
                    i,
                    SendOp::RdmaWrite { remote: peer },
                    Payload::Inline(bytes),
                )
            }
            None => {
                mine.write_at(size - 1, &[mark(i)]);
                SendWr::write(i, &sge, peer)
            }
        };
        if i % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
            wr = wr.signaled();
        }
        qp.post_send(&wr).map_err(|e| e.to_string())
    }
    let at_a = mr_a.remote(half);
    let at_b = mr_b.remote(half);
    thread::scope(|s| -> Result<(), String> {
        let (mr_a, mr_b) = (&mr_a, &mr_b);
        let echo = s.spawn(move || -> Result<(), String> {
            pin(cores.map(|c| c.1));
            let (mut cq, mut qp) = (cq_b, qb);
            let mut wc = [Wc::default(); 8];
            let mut local = vec![0x5au8; size];
            for i in 0..total as u64 {
                wait_mark::<P>(mr_b, half + size - 1, mark(i), &mut cq, &mut wc, timeout)?;
                let bytes = inline.then_some(&mut local[..]);
                step::<P>(&mut qp, mr_b, bytes, at_a, size, i)?;
                drain(&mut cq, &mut wc)?;
            }
            Ok(())
        });
        let samples = &mut samples;
        let measure = s.spawn(move || -> Result<(), String> {
            pin(cores.map(|c| c.0));
            let (mut cq, mut qp) = (cq_a, qa);
            let mut wc = [Wc::default(); 8];
            let mut local = vec![0xa5u8; size];
            let clock = Clock::get();
            let mut t = clock.now();
            for i in 0..total as u64 {
                let bytes = inline.then_some(&mut local[..]);
                step::<P>(&mut qp, mr_a, bytes, at_b, size, i)?;
                wait_mark::<P>(mr_a, half + size - 1, mark(i), &mut cq, &mut wc, timeout)?;
                let now = clock.now();
                if i as usize >= warmup {
                    samples[i as usize - warmup] = clock.nanos(t, now) / 2;
                }
                t = now;
                drain(&mut cq, &mut wc)?;
            }
            Ok(())
        });
        let measured = measure
            .join()
            .map_err(|_| "measuring thread panicked".to_string());
        let echoed = echo.join().map_err(|_| "echo thread panicked".to_string());
        measured??;
        echoed?
    })?;
    Ok(Latency::from_samples(&mut samples))
}

/// Times `msg_size`-byte RDMA Reads, one at a time, each signaled and waited for, from a
/// thread pinned to the first core; the target side only keeps its queue pair open. Reports
/// whole round trips.
pub fn read_latency<P: Provider, E: Env<P>>(
    env: &E,
    iters: usize,
    msg_size: usize,
) -> Result<Latency, String> {
    let size = msg_size.max(1);
    let OneSided {
        half,
        cq: [cq_a, _cq_b],
        mr: [mr_a, mr_b],
        qp: [qa, _qb],
        _pd,
    } = one_sided(env, size, 0)?;
    let (warmup, total) = run_length(iters);
    let cores = two_cores();
    let timeout = env.timeout();
    let from = mr_b.remote(half);
    let mut samples = vec![0u64; iters];
    thread::scope(|s| {
        let samples = &mut samples;
        let mr_a = &mr_a;
        s.spawn(move || -> Result<(), String> {
            pin(cores.map(|c| c.0));
            let (mut cq, mut qp) = (cq_a, qa);
            let mut wc = [Wc::default(); 8];
            let sge = [mr_a.sge(0, size as u32)];
            let clock = Clock::get();
            let limit = timeout.as_nanos() as u64;
            for i in 0..total as u64 {
                let t = clock.now();
                qp.post_send(&SendWr::read(i, &sge, from).signaled())
                    .map_err(|e| e.to_string())?;
                let mut idle = 0u32;
                while drain(&mut cq, &mut wc)? == 0 {
                    idle = idle.wrapping_add(1);
                    if idle.is_multiple_of(4096) && clock.nanos_since(t) > limit {
                        return Err("RDMA Read timed out".into());
                    }
                }
                if i as usize >= warmup {
                    samples[i as usize - warmup] = clock.nanos_since(t);
                }
            }
            Ok(())
        })
        .join()
        .map_err(|_| "reading thread panicked".to_string())?
    })?;
    Ok(Latency::from_samples(&mut samples))
}
