//! The same-run ceiling of RPC-sized message passing between two cores: a zero-work message
//! ring. Two pinned threads exchange messages of a null RPC's sizes the way the soft fabric
//! carries them (each message in its own cache lines, announced by a 64-byte completion
//! entry that the receiver polls), with no transport header to parse, no dispatch, no
//! receive to post and no credit to count: the client keeps `depth` Calls in flight, the
//! server answers each as soon as it sees it. What it measures is what the machine charges
//! for moving those lines between the two cores; an RPC engine on the same cores can only
//! approach it.
//!
//! It tells a host's phases apart where the cache-line round trip cannot: on a virtual
//! machine whose two vCPUs sometimes share a core complex and sometimes do not, the ring's
//! rate at depth 32 moves by a factor of four, and an RPC rate is read against it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::proto::header::MIN_HEADER_LEN;
use rpcrdma_engine::proto::rpc::{AUTH_NONE_ACCEPTED_LEN, AUTH_NONE_CALL_LEN};

/// Bytes of a null Call: the RDMA_MSG header with three empty lists (RFC 8166 §4.7) and an
/// RPC Call header with AUTH_NONE (RFC 5531 §9).
pub const NULL_CALL_BYTES: usize = MIN_HEADER_LEN + AUTH_NONE_CALL_LEN;
/// Bytes of a null Reply: the same transport header and an accepted RPC Reply header.
pub const NULL_REPLY_BYTES: usize = MIN_HEADER_LEN + AUTH_NONE_ACCEPTED_LEN;
/// Largest message the ring carries (it models short messages only).
pub const MAX_MESSAGE: usize = 128;
/// How long a side waits for the other before giving up (a run normally takes milliseconds).
const WAIT_LIMIT: Duration = Duration::from_secs(5);
/// How long a run may take before it is cut short (it normally takes milliseconds; on cores
/// shared with other busy threads each round trip can wait for a scheduler tick).
const RUN_LIMIT: Duration = Duration::from_secs(1);

const WORDS: usize = MAX_MESSAGE / 8;

/// A completion entry: one cache line, published by its `seq`.
#[repr(C, align(64))]
struct Entry {
    /// Position + 1 once the message is written.
    seq: AtomicU64,
}

/// A message slot: its own cache lines, apart from the entries, aligned to a pair of lines
/// (what an adjacent-line prefetcher fetches together).
#[repr(C, align(128))]
struct MessageSlot {
    words: [AtomicU64; WORDS],
}

/// One direction: entries and message slots, used in turn, for messages of `words` words.
struct Lane {
    entries: Box<[Entry]>,
    slots: Box<[MessageSlot]>,
    mask: u64,
    words: usize,
}

impl Lane {
    /// A lane of `size` (a power of two) entries for messages of `bytes` (1 to
    /// [`MAX_MESSAGE`]).
    fn new(size: usize, bytes: usize) -> Lane {
        Lane {
            entries: (0..size)
                .map(|_| Entry {
                    seq: AtomicU64::new(0),
                })
                .collect(),
            slots: (0..size)
                .map(|_| MessageSlot {
                    words: [const { AtomicU64::new(0) }; WORDS],
                })
                .collect(),
            mask: size as u64 - 1,
            words: bytes.div_ceil(8).clamp(1, WORDS),
        }
    }

    /// Writes message `i` (every word a function of `i` and its place), then publishes it.
    #[inline]
    fn send(&self, i: u64) {
        let k = (i & self.mask) as usize;
        for (w, word) in self.slots[k].words[..self.words].iter().enumerate() {
            word.store(i ^ w as u64, Ordering::Relaxed);
        }
        self.entries[k].seq.store(i + 1, Ordering::Release);
    }

    /// Whether message `i` is published.
    #[inline]
    fn ready(&self, i: u64) -> bool {
        self.entries[(i & self.mask) as usize]
            .seq
            .load(Ordering::Acquire)
            == i + 1
    }

    /// Reads published message `i`'s first and last words (so every line of a message of up
    /// to two lines, as a receiver that looks at a header and what follows it); false if
    /// either is not what `send` wrote.
    #[inline]
    fn read(&self, i: u64) -> bool {
        let slot = &self.slots[(i & self.mask) as usize];
        let last = self.words - 1;
        slot.words[0].load(Ordering::Relaxed) == i
            && slot.words[last].load(Ordering::Relaxed) == i ^ last as u64
    }
}

/// What the ring measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RingLimit {
    /// Calls kept in flight.
    pub depth: usize,
    /// Round trips timed (fewer than asked when the run was cut short).
    pub round_trips: u64,
    /// Round trips per second.
    pub rate_rps: f64,
    /// Mean time per round trip at this depth, in nanoseconds (at depth 1, the round trip).
    pub ns_per_round_trip: f64,
}

/// Why the ring measured nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// A depth of 0, no round trips, or an empty message or one past [`MAX_MESSAGE`].
    Shape,
    /// A side waited past its limit: the other is not running (two threads pinned to one
    /// busy core, or stopped).
    Stalled,
    /// A message read back was not the one written (a defect of the ring).
    Corrupt,
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RingError::Shape => "message ring: depth, count or message size out of range",
            RingError::Stalled => "message ring: a side stopped answering",
            RingError::Corrupt => "message ring: a message read back differs from the one sent",
        })
    }
}

impl std::error::Error for RingError {}

/// Runs the zero-work ring: a client thread on `cores.0` keeps `depth` Calls of
/// `call_bytes` in flight, a server thread on `cores.1` answers each with `reply_bytes`
/// (in batches, as it finds them); `round_trips` are timed after a tenth as many of
/// warm-up (timing starts earlier if the warm-up takes a tenth of a second), or as many as
/// fit in a second. Every message is checked by a word of each of its lines.
pub fn message_ring(
    depth: usize,
    call_bytes: usize,
    reply_bytes: usize,
    round_trips: u64,
    cores: Option<(usize, usize)>,
) -> Result<RingLimit, RingError> {
    let sizes = 1..=MAX_MESSAGE;
    if depth == 0
        || round_trips == 0
        || !sizes.contains(&call_bytes)
        || !sizes.contains(&reply_bytes)
    {
        return Err(RingError::Shape);
    }
    let size = (2 * depth).max(64).next_power_of_two();
    let (calls, replies) = (Lane::new(size, call_bytes), Lane::new(size, reply_bytes));
    let warmup = (round_trips / 10).max(1);
    let total = warmup + round_trips;
    let stop = AtomicBool::new(false);
    let (calls, replies, stop) = (&calls, &replies, &stop);
    let (server, client) = thread::scope(|s| {
        let server = s.spawn(move || -> Result<(), RingError> {
            if let Some((_, core)) = cores {
                crate::fleet::pin(core);
            }
            let mut next = 0;
            while next < total {
                wait(|| calls.ready(next), stop)?;
                let mut end = next + 1;
                while end < total && calls.ready(end) {
                    end += 1;
                }
                for i in next..end {
                    if !calls.read(i) {
                        stop.store(true, Ordering::Relaxed);
                        return Err(RingError::Corrupt);
                    }
                }
                for i in next..end {
                    replies.send(i);
                }
                next = end;
            }
            Ok(())
        });
        let client = s.spawn(move || -> Result<(Duration, u64), RingError> {
            if let Some((core, _)) = cores {
                crate::fleet::pin(core);
            }
            let (mut sent, mut got) = (0, 0);
            let begun = Instant::now();
            // Timing starts after the warm-up, or after a tenth of the run's time limit.
            let mut timed_from: Option<(u64, Instant)> = None;
            // Where the run ends: `round_trips` after timing starts (before the warm-up is
            // over, when a tenth of the time limit passed first).
            let mut end = total;
            let mut next_look = 1024;
            while got < end {
                while sent < end && sent - got < depth as u64 {
                    calls.send(sent);
                    sent += 1;
                }
                let slow = wait(|| replies.ready(got), stop)?;
                while got < sent.min(end) && replies.ready(got) {
                    if !replies.read(got) {
                        stop.store(true, Ordering::Relaxed);
                        return Err(RingError::Corrupt);
                    }
                    got += 1;
                    if timed_from.is_none() && got == warmup {
                        timed_from = Some((got, Instant::now()));
                    }
                }
                // A run that shares its cores with other busy threads crawls: cut it short
                // and keep what was measured (a clock reading every 1024 round trips, and
                // after every wait long enough to have yielded the core).
                if got >= next_look || slow {
                    next_look = got + 1024;
                    let spent = begun.elapsed();
                    if timed_from.is_none() && spent > RUN_LIMIT / 10 {
                        timed_from = Some((got, Instant::now()));
                        end = got + round_trips;
                    } else if spent > RUN_LIMIT {
                        break;
                    }
                }
            }
            // Done (or cut short): the server, waiting for Calls that will not come, stops.
            stop.store(true, Ordering::Relaxed);
            let (from, start) = timed_from.unwrap_or((got, Instant::now()));
            Ok((start.elapsed(), got - from))
        });
        (server.join(), client.join())
    });
    let (took, measured) = match (server, client) {
        // A corrupt Call found by the server stops the client too: its error is the cause.
        (Ok(Err(e @ RingError::Corrupt)), _) | (_, Ok(Err(e))) => return Err(e),
        // The server saw the client's stop after answering every Call it was sent.
        (Ok(_), Ok(Ok(done))) => done,
        _ => return Err(RingError::Stalled),
    };
    if measured == 0 {
        return Err(RingError::Stalled);
    }
    let secs = took.as_secs_f64().max(1e-9);
    Ok(RingLimit {
        depth,
        round_trips: measured,
        rate_rps: measured as f64 / secs,
        ns_per_round_trip: secs * 1e9 / measured as f64,
    })
}

/// The ring for a null RPC at `depth` on `cores` (client, server), with as many round trips
/// as take a few tens of milliseconds on these hosts in either phase.
pub fn null_ring(depth: usize, cores: (usize, usize)) -> Result<RingLimit, RingError> {
    let round_trips = if depth >= 8 { 400_000 } else { 100_000 };
    message_ring(
        depth,
        NULL_CALL_BYTES,
        NULL_REPLY_BYTES,
        round_trips,
        Some(cores),
    )
}

/// The ring measured on both sides of a run: the better of the two is the ceiling; two that
/// differ by more than half say that the host changed phase meanwhile (these hosts move
/// between a fast and a slow phase within minutes), and then no ratio to either means much.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bracket {
    /// The faster measurement.
    pub best: RingLimit,
    /// The other one.
    pub other: RingLimit,
}

impl Bracket {
    /// The bracket of two measurements, or of the one there is.
    pub fn of(a: Option<RingLimit>, b: Option<RingLimit>) -> Option<Bracket> {
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (Some(r), None) | (None, Some(r)) => (r, r),
            (None, None) => return None,
        };
        let (best, other) = if a.rate_rps >= b.rate_rps {
            (a, b)
        } else {
            (b, a)
        };
        Some(Bracket { best, other })
    }

    /// Whether the two measurements differ by more than half.
    pub fn phase_changed(&self) -> bool {
        self.best.rate_rps > 1.5 * self.other.rate_rps
    }
}

/// Spins until `done`, yielding now and then (a long wait means the other side may share
/// this core), giving up past [`WAIT_LIMIT`] or when the other side stopped (and then
/// telling it to stop too). `Ok(true)` if it yielded.
#[inline]
fn wait(mut done: impl FnMut() -> bool, stop: &AtomicBool) -> Result<bool, RingError> {
    let mut spins = 0u32;
    let mut since: Option<Instant> = None;
    // No PAUSE between looks: the engine's pollers spin without one, and on some cores it
    // takes tens of cycles, which the ceiling would then count.
    while !done() {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) {
            // Long waits only: the other side may share this core (unpinned tests).
            thread::yield_now();
            if stop.load(Ordering::Relaxed) {
                return Err(RingError::Stalled);
            }
            if since.get_or_insert_with(Instant::now).elapsed() > WAIT_LIMIT {
                stop.store(true, Ordering::Relaxed);
                return Err(RingError::Stalled);
            }
        }
    }
    Ok(spins >= 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_messages_are_the_wire_sizes() {
        assert_eq!((NULL_CALL_BYTES, NULL_REPLY_BYTES), (68, 52));
    }

    #[test]
    fn the_ring_measures_every_depth_it_is_given() {
        for depth in [1, 4, 32, 200] {
            let r = message_ring(depth, NULL_CALL_BYTES, NULL_REPLY_BYTES, 2_000, None)
                .unwrap_or_else(|e| panic!("depth {depth}: {e}"));
            assert_eq!(r.depth, depth);
            // All of them, or (on cores other tests keep busy) those timed once the warm-up
            // had taken a tenth of the time limit.
            assert!(r.round_trips > 0 && r.round_trips <= 2_000, "{r:?}");
            assert!(r.rate_rps > 0.0 && r.rate_rps.is_finite(), "{r:?}");
            let product = r.rate_rps * r.ns_per_round_trip / 1e9;
            assert!((product - 1.0).abs() < 1e-6, "{r:?}");
        }
    }

    #[test]
    fn a_run_on_one_shared_core_is_cut_short_with_what_it_measured() {
        // Both threads on core 0: each round trip waits for the other to be scheduled.
        for depth in [1, 32] {
            let r = message_ring(
                depth,
                NULL_CALL_BYTES,
                NULL_REPLY_BYTES,
                50_000_000,
                Some((0, 0)),
            )
            .expect("a rate from the round trips made before the cut");
            assert!(r.round_trips > 0 && r.round_trips < 50_000_000, "{r:?}");
            assert!(r.rate_rps > 0.0, "{r:?}");
        }
    }

    #[test]
    fn a_bracket_keeps_the_better_and_sees_a_phase_change() {
        let at = |rate_rps: f64| RingLimit {
            depth: 32,
            round_trips: 1000,
            rate_rps,
            ns_per_round_trip: 1e9 / rate_rps,
        };
        assert_eq!(Bracket::of(None, None), None);
        let one = Bracket::of(Some(at(8e6)), None).unwrap();
        assert_eq!((one.best, one.other), (at(8e6), at(8e6)));
        assert!(!one.phase_changed());
        let near = Bracket::of(Some(at(8e6)), Some(at(10e6))).unwrap();
        assert_eq!((near.best.rate_rps, near.other.rate_rps), (10e6, 8e6));
        assert!(!near.phase_changed());
        let far = Bracket::of(Some(at(36e6)), Some(at(8e6))).unwrap();
        assert_eq!(far.best.rate_rps, 36e6);
        assert!(far.phase_changed());
    }

    #[test]
    fn shapes_it_cannot_run_are_refused() {
        assert_eq!(message_ring(0, 68, 52, 10, None), Err(RingError::Shape));
        assert_eq!(message_ring(1, 68, 52, 0, None), Err(RingError::Shape));
        assert_eq!(
            message_ring(1, MAX_MESSAGE + 1, 52, 10, None),
            Err(RingError::Shape)
        );
        assert_eq!(message_ring(1, 68, 0, 10, None), Err(RingError::Shape));
    }

    #[test]
    fn a_message_is_checked_in_each_of_its_lines() {
        let lane = Lane::new(64, NULL_CALL_BYTES);
        lane.send(5);
        assert!(lane.ready(5) && !lane.ready(6));
        assert!(lane.read(5));
        // A line left from another message is caught, the first or the second.
        lane.slots[5].words[8].store(0, Ordering::Relaxed);
        assert!(!lane.read(5));
        lane.send(5);
        lane.slots[5].words[0].store(69, Ordering::Relaxed);
        assert!(!lane.read(5));
        // Message 69 reuses slot 5: its own words read back.
        lane.send(69);
        assert!(lane.read(69));
    }
}
