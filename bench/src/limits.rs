//! Same-run limits for chunked transfers: what copying a payload from one core's cache to
//! another's costs on this machine, measured beside the RPCs it is compared to. A chunked
//! RPC on the soft fabric moves its payload with one such copy (an RDMA Read or Write is a
//! copy between the peers' memory); its round trip is judged against this and the cache-line
//! round trip (`rpcrdma_engine::fabric::bench::cacheline_pingpong`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Instant;

/// The median time, in nanoseconds, to copy `size` bytes that another core just wrote:
/// a thread pinned to `cores.1` writes the source buffer, then a thread pinned to
/// `cores.0` copies it into its own buffer (only the copy is timed), `iters` times after a
/// few rounds of warm-up. `None` for a size of 0.
pub fn cross_core_copy_ns(size: usize, iters: usize, cores: Option<(usize, usize)>) -> Option<u64> {
    if size == 0 || iters == 0 {
        return None;
    }
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let pin = |k: Option<usize>| {
        if let Some(id) = k.and_then(|k| ids.get(k)) {
            core_affinity::set_for_current(*id);
        }
    };
    let warmup = 8.min(iters);
    let total = iters + warmup;
    // The source; the turn word says whose turn it is (odd: the copier's).
    let src = Mutex::new(vec![0u8; size]);
    let turn = AtomicU64::new(0);
    let mut samples = Vec::with_capacity(iters);
    thread::scope(|s| {
        let (src, turn) = (&src, &turn);
        s.spawn(move || {
            pin(cores.map(|c| c.1));
            for i in 0..total as u64 {
                while turn.load(Ordering::Acquire) != 2 * i {
                    std::hint::spin_loop();
                }
                if let Ok(mut b) = src.lock() {
                    b.fill(i as u8);
                }
                turn.store(2 * i + 1, Ordering::Release);
            }
        });
        let samples = &mut samples;
        s.spawn(move || {
            pin(cores.map(|c| c.0));
            let mut dst = vec![0u8; size];
            for i in 0..total as u64 {
                while turn.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                if let Ok(b) = src.lock() {
                    let t = Instant::now();
                    dst.copy_from_slice(&b);
                    let ns = t.elapsed().as_nanos() as u64;
                    if i as usize >= warmup {
                        samples.push(ns);
                    }
                }
                std::hint::black_box(&dst);
                turn.store(2 * i + 2, Ordering::Release);
            }
        });
    });
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_measured_for_every_payload() {
        assert_eq!(cross_core_copy_ns(0, 10, None), None);
        for size in [1, 4096, 1 << 20] {
            assert!(
                cross_core_copy_ns(size, 20, Some((0, 1))).is_some(),
                "{size} B"
            );
        }
    }
}
