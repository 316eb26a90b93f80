//! A clock for measurement loops: the processor's time-stamp counter, calibrated against
//! the monotonic clock, where it ticks at a steady rate; the monotonic clock otherwise.
//!
//! Why: a round trip measured in a loop pays for its own clock readings. On these machines
//! `clock_gettime` costs about 25 ns in a KVM guest (its vDSO reads kvmclock) and about
//! 1 µs in the soft-RoCE guest under TCG, whose kernel marks the TSC unstable and reads the
//! HPET; `rdtsc` costs about 10 ns in both. perftest (`get_cycles`) and ucx_perftest
//! (`ucs_get_time`) time with the counter too, so comparisons with them are fair only if
//! this side does the same.
//!
//! A stamp is meaningful only against another taken on the same core: a measurement loop
//! pins its thread. The counter is used only if two calibrations agree on its rate (within
//! 1%); a machine whose counter stops, jumps or changes speed gets the monotonic clock.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A reading of the [`Clock`]: ticks of its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// A stamp of `ticks` of its clock's source (for tests and replays).
    pub const fn from_ticks(ticks: u64) -> Stamp {
        Stamp(ticks)
    }

    /// Its ticks.
    pub const fn ticks(self) -> u64 {
        self.0
    }
}

/// Where stamps come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The time-stamp counter, at `ticks_per_us` (calibrated).
    Tsc,
    /// The monotonic clock (`Instant`), in nanoseconds since the clock was made.
    Monotonic,
}

/// A cheap clock for stamping round trips (see the module docs). Copy it into each
/// measuring thread; [`Clock::get`] calibrates once per process.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    source: Source,
    /// Nanoseconds per tick, as a 32.32 fixed-point multiplier (Tsc only).
    mult: u64,
    origin: Instant,
}

/// How long each of the two calibration spells lasts.
const CALIBRATION: Duration = Duration::from_millis(10);

impl Clock {
    /// The process's clock, calibrated on first use (about 20 ms).
    pub fn get() -> Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        *CLOCK.get_or_init(Clock::calibrate)
    }

    /// A clock that reads the monotonic clock (for comparisons, and where the counter is
    /// not trusted).
    pub fn monotonic() -> Clock {
        Clock {
            source: Source::Monotonic,
            mult: 0,
            origin: Instant::now(),
        }
    }

    fn calibrate() -> Clock {
        let Some(first) = tsc_rate(CALIBRATION) else {
            return Clock::monotonic();
        };
        let Some(second) = tsc_rate(CALIBRATION) else {
            return Clock::monotonic();
        };
        // Ticks per nanosecond, twice: they must agree, and be plausible (10 MHz .. 20 GHz).
        let agree = (first - second).abs() <= first * 0.01;
        let rate = (first + second) / 2.0;
        if !agree || !(0.01..=20.0).contains(&rate) {
            return Clock::monotonic();
        }
        Clock {
            source: Source::Tsc,
            mult: ((1u64 << 32) as f64 / rate) as u64,
            origin: Instant::now(),
        }
    }

    /// Where this clock's stamps come from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Now.
    #[inline(always)]
    pub fn now(&self) -> Stamp {
        match self.source {
            Source::Tsc => Stamp(read_tsc().unwrap_or(0)),
            Source::Monotonic => Stamp(self.origin.elapsed().as_nanos() as u64),
        }
    }

    /// Nanoseconds from `from` to `to` (0 if `to` is earlier).
    #[inline]
    pub fn nanos(&self, from: Stamp, to: Stamp) -> u64 {
        let d = to.0.saturating_sub(from.0);
        match self.source {
            Source::Tsc => ((u128::from(d) * u128::from(self.mult)) >> 32) as u64,
            Source::Monotonic => d,
        }
    }

    /// Nanoseconds since `from`.
    #[inline]
    pub fn nanos_since(&self, from: Stamp) -> u64 {
        self.nanos(from, self.now())
    }
}

/// The counter's ticks per nanosecond over a spell of `spell`, or `None` without one.
/// Each end is a counter reading bracketed by two of the monotonic clock's, taken again if
/// the thread was held up between them, so a preemption costs accuracy only within the spell.
fn tsc_rate(spell: Duration) -> Option<f64> {
    let (t0, c0) = paired_reading()?;
    while t0.elapsed() < spell {
        std::hint::spin_loop();
    }
    let (t1, c1) = paired_reading()?;
    let ns = t1.duration_since(t0).as_nanos() as f64;
    (c1 > c0 && ns > 0.0).then(|| (c1 - c0) as f64 / ns)
}

/// The monotonic clock and the counter read at nearly the same moment (within 20 µs).
fn paired_reading() -> Option<(Instant, u64)> {
    for _ in 0..100 {
        let before = Instant::now();
        let c = read_tsc()?;
        let after = Instant::now();
        let gap = after.duration_since(before);
        if gap <= Duration::from_micros(20) {
            return Some((before + gap / 2, c));
        }
    }
    None
}

/// The time-stamp counter.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_tsc() -> Option<u64> {
    // SAFETY: RDTSC has no preconditions and touches no memory; it is available on every
    // x86-64 processor (CR4.TSD, which could make it fault in user mode, is not set by Linux).
    Some(unsafe { core::arch::x86_64::_rdtsc() })
}

/// No counter on this architecture: the monotonic clock is used.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn read_tsc() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_sleep_within_its_bounds() {
        for clock in [Clock::get(), Clock::monotonic()] {
            let a = clock.now();
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(20));
            let b = clock.now();
            let real = t.elapsed().as_nanos() as u64;
            let measured = clock.nanos(a, b);
            // At least the sleep; at most what the monotonic clock saw around it, plus the
            // calibration's error (1%) and a reading's cost.
            assert!(
                measured >= 19_000_000,
                "{:?}: {measured} ns",
                clock.source()
            );
            assert!(
                measured <= real + real / 50 + 100_000,
                "{:?}: {measured} ns of {real}",
                clock.source()
            );
            assert_eq!(clock.nanos(b, a), 0, "an earlier stamp gives 0");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn uses_the_counter_where_it_is_steady() {
        // x86-64 machines that run these tests have a steady counter (a KVM guest's is
        // invariant; TCG derives it from the host's clock).
        assert_eq!(Clock::get().source(), Source::Tsc);
    }
}
