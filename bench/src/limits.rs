//! Same-run limits for chunked transfers: what moving a payload between two cores costs on
//! this machine, measured beside the RPCs it is compared to. A chunked RPC on the soft
//! fabric moves its payload with one copy between the peers' memory (an RDMA Read or
//! Write); its round trip is judged against the cache-line round trip
//! ([`crate::fabric_probes::cacheline_pingpong`]) and two copies of its payload:
//!
//! - [`cross_core_copy_ns`]: bytes another core just wrote, copied into the copier's own
//!   buffer (the cross-core read; the destination stays in the copier's cache);
//! - [`copy_to_reader_ns`]: the copier's own bytes copied into a buffer another core just
//!   read (the cross-core write: every line of the destination is taken from the reader's
//!   cache first), made as the soft fabric makes an RDMA Write (streamed from 24 KiB, as
//!   a NIC's DMA places data). This is what an RDMA Write of READ data into a requester
//!   that checks its data costs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Instant;

use rpcrdma_engine::fabric::reader_copies;

/// The median time, in nanoseconds, to copy `size` bytes that another core just wrote:
/// a thread pinned to `cores.1` writes the source buffer, then a thread pinned to
/// `cores.0` copies it into its own buffer (only the copy is timed), `iters` times after a
/// few rounds of warm-up. `None` for a size of 0.
pub fn cross_core_copy_ns(size: usize, iters: usize, cores: Option<(usize, usize)>) -> Option<u64> {
    let mut dst = vec![0u8; size];
    alternate(
        size,
        iters,
        cores,
        |shared, i| shared.fill(i as u8),
        move |shared, _| {
            let t = Instant::now();
            dst.copy_from_slice(shared);
            let ns = t.elapsed().as_nanos() as u64;
            std::hint::black_box(&dst);
            ns
        },
    )
}

/// The median time, in nanoseconds, to copy `size` bytes into a buffer another core just
/// read: a thread pinned to `cores.1` reads a byte of every cache line of the destination,
/// then a thread pinned to `cores.0` fills its own source (not timed) and copies it into
/// the destination (timed) as the soft fabric places an RDMA Write
/// (`fabric::reader_copies::copy_to_reader`: streaming stores from 24 KiB), `iters` times after a
/// few rounds of warm-up. `None` for a size of 0.
pub fn copy_to_reader_ns(size: usize, iters: usize, cores: Option<(usize, usize)>) -> Option<u64> {
    let mut src = vec![0u8; size];
    alternate(
        size,
        iters,
        cores,
        |shared, _| {
            let sum: u64 = shared.iter().step_by(64).map(|&b| u64::from(b)).sum();
            std::hint::black_box(sum);
        },
        move |shared, i| {
            src.fill(i as u8);
            let t = Instant::now();
            reader_copies::copy_to_reader(shared, &src);
            t.elapsed().as_nanos() as u64
        },
    )
}

/// Two pinned threads taking turns on one shared buffer of `size` bytes: `other` on
/// `cores.1`, then `timed` on `cores.0` (which returns the nanoseconds it measured), `iters`
/// times after a few rounds of warm-up; the median of `timed`'s measurements.
fn alternate(
    size: usize,
    iters: usize,
    cores: Option<(usize, usize)>,
    mut other: impl FnMut(&mut [u8], u64) + Send,
    mut timed: impl FnMut(&mut [u8], u64) -> u64 + Send,
) -> Option<u64> {
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
    // The shared buffer; the turn word says whose turn it is (odd: the timed side's).
    let shared = Mutex::new(vec![0u8; size]);
    let turn = AtomicU64::new(0);
    let mut samples = Vec::with_capacity(iters);
    thread::scope(|s| {
        let (shared, turn) = (&shared, &turn);
        s.spawn(move || {
            pin(cores.map(|c| c.1));
            for i in 0..total as u64 {
                while turn.load(Ordering::Acquire) != 2 * i {
                    std::hint::spin_loop();
                }
                if let Ok(mut b) = shared.lock() {
                    other(&mut b, i);
                }
                turn.store(2 * i + 1, Ordering::Release);
            }
        });
        let samples = &mut samples;
        s.spawn(move || {
            pin(cores.map(|c| c.0));
            for i in 0..total as u64 {
                while turn.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                if let Ok(mut b) = shared.lock() {
                    let ns = timed(&mut b, i);
                    if i as usize >= warmup {
                        samples.push(ns);
                    }
                }
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
    fn both_copies_are_measured_for_every_payload() {
        assert_eq!(cross_core_copy_ns(0, 10, None), None);
        assert_eq!(copy_to_reader_ns(0, 10, None), None);
        for size in [1, 4096, 1 << 20] {
            assert!(
                cross_core_copy_ns(size, 20, Some((0, 1))).is_some(),
                "{size} B"
            );
            assert!(
                copy_to_reader_ns(size, 20, Some((0, 1))).is_some(),
                "{size} B"
            );
        }
    }

    #[test]
    fn the_copy_to_a_reader_lands_in_the_shared_buffer() {
        // The timed side's bytes are what the other side reads next.
        let mut seen = Vec::new();
        let got = alternate(
            64,
            4,
            None,
            |b, _| seen.push(b[0]),
            |b, i| {
                b.fill(i as u8 + 1);
                1
            },
        );
        assert_eq!(got, Some(1));
        // 4 warm-up turns and 4 measured: turn 0 sees the initial zeros, turn k what the
        // timed side wrote in its turn k - 1.
        assert_eq!(seen, (0..8u8).collect::<Vec<_>>());
    }
}
