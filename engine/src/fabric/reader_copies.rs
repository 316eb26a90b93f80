//! Copies into memory another agent will read next: a peer's receive buffer or RDMA Write
//! target on the soft fabric, or a requester's registered buffer that the server's RDMA
//! Read will take. A large payload is written with non-temporal (streaming) stores, as a
//! NIC's DMA places it: the lines are not kept in this core's cache, and taking them from
//! another core's cache does not wait for each line's invalidation in turn.
//!
//! Measured on the development machine (AMD EPYC, two cores of one complex, `rpcrdma bench
//! rpc`, soft fabric, depth 1): an RDMA Write of 64 KiB into a requester that had read the
//! previous result, 9.8 µs cached against 2.0 µs streamed (READ of 64 KiB: p50 10.0 µs to
//! 4.9; of 1 MiB: 127 µs to 63). The writer's copy into a buffer the reader has just read,
//! plus the reader's read of every byte after it (four independent loads per 32 bytes),
//! cached against streamed, in a quiet phase of the host: 16 KiB 1.5–1.7 µs against
//! 2.1–2.5, where fetching streamed bytes from memory costs the reader more than the
//! invalidations save; 24 KiB 2.9–3.1 against 2.6–2.7; 32 KiB 4.3–5.4 against 2.9–3.8;
//! 64 KiB 8.2–10.5 against 4.9. So RDMA Writes and bulk arguments, whose targets are such
//! buffers, are streamed from 24 KiB ([`STREAM_MIN`]): a soft READ of 24 KiB and 32 KiB
//! (Write chunk) and a WRITE of the same sizes (Read chunk) took 0.24–0.56 times as long.
//! Sends fill receives that rotate through a ring, and the receiver reads them at once: a
//! WRITE of 24–40 KiB sent inline took 20–34% longer streamed in a quiet phase, so Sends
//! are streamed from 48 KiB ([`STREAM_MIN_SEND`]). When the host is busy, cached copies of
//! 16–48 KiB between the two cores take three to four times as long; streamed ones do not.
//!
//! Another machine of the same kind (AMD EPYC, two vCPUs whose placement changes within
//! minutes: a cache-line round trip of 40–100 ns in one phase, 400 ns in the other) showed
//! the opposite in its fast phase: READ of 64 KiB p50 2.3 µs streamed against 1.3 µs
//! cached, of 1 MiB 30 µs against 17 µs, and in the slow phase cached at least as fast. So
//! `copy_to_peer` does not decide once: each thread keeps what the two kinds of copy have
//! cost it per KiB (`Costs`) and takes the cheaper, trying the other every `EXPLORE`th
//! copy (32), so that a change of phase is followed.

/// RDMA Write payloads, and bulk arguments a requester copies for the server's RDMA Read,
/// of at least this many bytes are streamed: their target is a buffer its reader used a
/// moment ago (a requester's result buffer, read after each reply; its argument buffer,
/// pulled by each Call's RDMA Read), whose lines a cached copy must take from the reader's
/// cache one invalidation at a time.
pub const STREAM_MIN: usize = 24 * 1024;

/// Sends of at least this many bytes are streamed into the receive they fill. Receives
/// rotate through a ring of many buffers, so a cached copy mostly finds a receive's lines
/// out of its reader's private cache and is cheaper than into a buffer just read; the
/// reader then reads every byte at once, in the round trip.
pub const STREAM_MIN_SEND: usize = 48 * 1024;

/// Bulk arguments a requester copies into its registered memory are streamed up to this
/// size. Above it the server's RDMA Read of the bytes from memory costs more than the
/// invalidations the streaming saves, because a server core reading that much has evicted
/// most of the previous payload's lines from its own cache anyway: a WRITE of 1 MiB took
/// 111 µs streamed against 96 µs cached, one of 256 KiB 32 µs against 44, one of 64 KiB
/// 8.2 µs against 11.4.
pub const STREAM_MAX_ARGS: usize = 512 * 1024;

/// The arguments of a Long Call (RFC 8166 §3.5.3: the whole Call in a position-zero Read
/// chunk) are streamed up to this size. The server pulls the Call and then works through
/// it, and beyond this the fetch of streamed bytes from memory cost it more than the
/// invalidations saved: ECHOs sent as Long Calls took, streamed, 0.79–0.90 times as long at
/// 32 KiB and 0.73–1.13 times (median 0.86) at 64 KiB in six alternated rounds, but 1.17–1.43
/// times at 96 KiB and 1.40–1.59 times at 256 KiB in three.
pub const STREAM_MAX_LONG: usize = 64 * 1024;

/// Copies `src` into `dst` (the same length), a requester's registered buffer whose bytes
/// the server will read: streamed from [`STREAM_MIN`] to [`STREAM_MAX_ARGS`] bytes, copied
/// plainly otherwise.
///
/// # Panics
///
/// If the lengths differ, as `copy_from_slice`.
pub fn copy_for_wire(dst: &mut [u8], src: &[u8]) {
    copy_streamed_within(dst, src, STREAM_MAX_ARGS);
}

/// [`copy_for_wire`] for the arguments of a Long Call: streamed from [`STREAM_MIN`] to
/// [`STREAM_MAX_LONG`] bytes.
///
/// # Panics
///
/// If the lengths differ, as `copy_from_slice`.
pub fn copy_call_for_wire(dst: &mut [u8], src: &[u8]) {
    copy_streamed_within(dst, src, STREAM_MAX_LONG);
}

/// Copies `src` into `dst`, streamed from [`STREAM_MIN`] to `max` bytes.
fn copy_streamed_within(dst: &mut [u8], src: &[u8], max: usize) {
    assert_eq!(dst.len(), src.len(), "copy for the wire: lengths differ");
    if (STREAM_MIN..=max).contains(&src.len()) {
        // SAFETY: `src` and `dst` are valid for `len` bytes each, and a shared and a
        // mutable borrow cannot overlap.
        unsafe { stream_copy(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
    } else {
        dst.copy_from_slice(src);
    }
}

/// Copies `src` into `dst` (the same length), memory another core or agent reads next, as
/// the soft fabric places RDMA Writes (`copy_to_peer`: from [`STREAM_MIN`] bytes, the
/// cheaper of a streamed and a cached copy for this thread). Benchmarks use it for the
/// same-run limit of such a copy.
///
/// # Panics
///
/// If the lengths differ, as `copy_from_slice`.
pub fn copy_to_reader(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_to_reader: lengths differ");
    // SAFETY: `src` and `dst` are valid for `len` bytes each (and cannot overlap).
    unsafe { copy_to_peer(src.as_ptr(), dst.as_mut_ptr(), src.len(), STREAM_MIN) }
}

/// Copies `len` bytes into a peer's memory: when `len` is at least `min` ([`STREAM_MIN`]
/// or [`STREAM_MIN_SEND`]) and the spans do not overlap, by a streamed copy (as a NIC's DMA
/// places it) or a cached one, whichever has been cheaper for this thread and this kind of
/// copy ([`Costs`], timed with the time-stamp counter); by `ptr::copy` otherwise. Every
/// byte is visible before any store that follows (the completion that announces it).
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes (they may overlap).
/// The bytes may be accessed concurrently by a peer; they are plain bytes, so a race can
/// only tear the data, as on a NIC.
#[inline]
pub(crate) unsafe fn copy_to_peer(src: *const u8, dst: *mut u8, len: usize, min: usize) {
    let (s, d) = (src as usize, dst as usize);
    if len >= min && (s + len <= d || d + len <= s) {
        let kind = usize::from(min != STREAM_MIN);
        let costs = COSTS.with(|c| c.get()[kind]);
        let streamed = costs.stream();
        let start = ticks();
        if streamed {
            // SAFETY: forwarded to the caller's contract; the spans do not overlap.
            unsafe { stream_copy(src, dst, len) }
        } else {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
        }
        let spent = ticks().wrapping_sub(start);
        COSTS.with(|c| {
            let mut all = c.get();
            all[kind].record(streamed, spent, len);
            c.set(all);
        });
    } else {
        // SAFETY: forwarded to the caller's contract.
        unsafe { std::ptr::copy(src, dst, len) }
    }
}

/// One copy in this many takes the kind [`Costs`] finds dearer, to notice when it becomes
/// the cheaper one.
pub(crate) const EXPLORE: u32 = 32;

/// What large copies into a peer's memory have cost one thread, for one kind of target
/// (RDMA Write targets, or receives): ticks per KiB of a cached and of a streamed copy,
/// each an average weighted 1/8 to the latest copy of its kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Costs {
    /// Copies recorded.
    n: u32,
    /// Ticks per KiB: cached, streamed (0: not measured yet).
    per_kib: [u64; 2],
}

impl Costs {
    /// Whether the next copy streams: each kind is measured once first (cached, then
    /// streamed); then the cheaper one, but every [`EXPLORE`]th copy the other.
    pub(crate) fn stream(&self) -> bool {
        match self.per_kib {
            [0, _] => false,
            [_, 0] => true,
            [cached, streamed] => (streamed < cached) != self.n.is_multiple_of(EXPLORE),
        }
    }

    /// Counts a copy of `len` bytes (at least 1 KiB) that took `ticks`, `streamed` or not.
    /// A copy that took more than twice its kind's average (an interrupt, a preemption)
    /// counts as twice the average: one such copy must not make the other kind look cheaper
    /// for the hundreds of copies its average needs to come back, while a real change of
    /// cost still moves the average an eighth of the way per copy.
    pub(crate) fn record(&mut self, streamed: bool, ticks: u64, len: usize) {
        let sample = (ticks.saturating_mul(1024) / (len as u64).max(1)).max(1);
        let avg = &mut self.per_kib[usize::from(streamed)];
        *avg = if *avg == 0 {
            sample
        } else {
            (*avg * 7 + sample.min(*avg * 2)).div_ceil(8)
        };
        self.n = self.n.wrapping_add(1);
    }
}

std::thread_local! {
    /// This thread's [`Costs`]: RDMA Write targets, then receives.
    static COSTS: std::cell::Cell<[Costs; 2]> = const {
        std::cell::Cell::new([Costs { n: 0, per_kib: [0, 0] }; 2])
    };
}

/// The time-stamp counter; 0 off x86-64, where both kinds of copy are the same plain copy
/// and the choice does not matter.
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC reads a counter; it has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Copies `len` bytes with streaming stores of 16 bytes (SSE2, which every x86-64 CPU has)
/// from the first 16-byte boundary of `dst`, the unaligned head and the tail by plain
/// copies, then `SFENCE`: streaming stores are weakly ordered, and the fence makes them
/// visible before any later store. A plain copy on other architectures.
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and the two spans
/// must not overlap.
#[inline(never)]
unsafe fn stream_copy(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = dst.align_offset(16).min(len);
        // SAFETY: every access stays within the caller's `len` bytes at `src` and `dst`,
        // which do not overlap; the streamed stores are to 16-byte aligned addresses
        // (`dst + head` is aligned and each step adds 64); loads may be unaligned.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 64 <= len {
                let s = src.add(i).cast::<__m128i>();
                let d = dst.add(i).cast::<__m128i>();
                let (a, b, c, e) = (
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                );
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
                i += 64;
            }
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded to the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streamed copies give the same bytes as `memmove` at the sizes around the streaming
    /// threshold, at several alignments of source and destination within 16 bytes, and
    /// leave the bytes just outside the span alone; overlapping spans are copied as
    /// `memmove`.
    #[test]
    fn copy_to_peer_is_memmove() {
        let big = STREAM_MIN + 300;
        let init: Vec<u8> = (0..3 * big as u32).map(|i| (i * 13 + 5) as u8).collect();
        for len in [
            0,
            100,
            STREAM_MIN - 1,
            STREAM_MIN,
            STREAM_MIN + 1,
            STREAM_MIN + 63,
            STREAM_MIN_SEND,
            big,
        ] {
            for (s, d) in [(0, big + 64), (3, big + 71), (17, big + 80), (big + 5, 9)] {
                let mut want = init.clone();
                want.copy_within(s..s + len, d);
                let mut got = init.clone();
                let p = got.as_mut_ptr();
                // SAFETY: both spans lie within `got` (at most big + 80 + big of 3 big).
                unsafe { copy_to_peer(p.add(s), p.add(d), len, STREAM_MIN) };
                assert!(got == want, "len {len}, from {s} to {d}");
            }
        }
        let mut want = init.clone();
        want.copy_within(0..big, 100);
        let mut got = init.clone();
        let p = got.as_mut_ptr();
        // SAFETY: both spans lie within `got`.
        unsafe { copy_to_peer(p, p.add(100), big, STREAM_MIN) };
        assert!(got == want, "overlapping spans");
    }

    /// The choice follows the costs: each kind measured once, then the cheaper, the other
    /// every `EXPLORE`th copy; when the costs cross, the choice follows within a few
    /// explorations.
    #[test]
    fn copies_take_the_kind_that_costs_less() {
        let mut c = Costs::default();
        assert!(!c.stream(), "cached first");
        c.record(false, 2000, 64 << 10);
        assert!(c.stream(), "then streamed");
        c.record(true, 1000, 64 << 10);
        // Streamed costs half: streamed, but for one copy in EXPLORE.
        let mut streamed = 0;
        for _ in 0..4 * EXPLORE {
            let s = c.stream();
            streamed += u32::from(s);
            c.record(s, if s { 1000 } else { 2000 }, 64 << 10);
        }
        assert_eq!(streamed, 4 * EXPLORE - 4);
        // The phase changes: streamed now costs four times cached.
        let mut last = Vec::new();
        for _ in 0..16 * EXPLORE {
            let s = c.stream();
            last.push(s);
            c.record(s, if s { 4000 } else { 1000 }, 64 << 10);
        }
        let tail = &last[last.len() - 2 * EXPLORE as usize..];
        assert_eq!(
            tail.iter().filter(|&&s| s).count(),
            2,
            "cached but for explorations"
        );
        // A single cached copy a hundred times as long (a preemption) does not make
        // streaming look cheaper.
        let mut c = Costs::default();
        c.record(false, 1000, 64 << 10);
        c.record(true, 1500, 64 << 10);
        c.record(false, 100_000, 64 << 10);
        assert!(!c.stream(), "{c:?}");
        // Per KiB: a copy twice as long of twice the bytes costs the same.
        let (mut a, mut b) = (Costs::default(), Costs::default());
        a.record(false, 1000, 32 << 10);
        b.record(false, 2000, 64 << 10);
        assert_eq!(a.per_kib, b.per_kib);
    }

    /// The safe forms copy every size exactly, streamed or not.
    #[test]
    fn safe_forms_copy() {
        for len in [
            0,
            64,
            STREAM_MIN,
            STREAM_MIN + 5,
            STREAM_MAX_LONG,
            STREAM_MAX_LONG + 1,
            STREAM_MAX_ARGS,
            STREAM_MAX_ARGS + 3,
        ] {
            let src: Vec<u8> = (0..len as u32).map(|i| (i * 7 + 1) as u8).collect();
            let mut dst = vec![0u8; len + 1];
            copy_for_wire(&mut dst[1..], &src);
            assert!(dst[1..] == src[..], "len {len}");
            assert_eq!(dst[0], 0);
            let mut again = vec![0u8; len + 1];
            copy_to_reader(&mut again[1..], &src);
            assert!(again == dst, "len {len}");
            let mut call = vec![0u8; len + 1];
            copy_call_for_wire(&mut call[1..], &src);
            assert!(call == dst, "len {len}");
        }
    }
}
