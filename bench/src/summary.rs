//! What a run's measurements come down to, for a load run ([`crate::rpc`]) and a sweep's
//! point ([`crate::point`]) alike: latency percentiles, and how evenly the connections were
//! served. Below both, so that neither imports the other.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Percentiles of times in nanoseconds: of round trips (`lat_ns`), or of the server's time
/// on the data (`server_work_ns`). A point's, and a load run's
/// ([`LoadReport::lat_ns`](crate::rpc::LoadReport::lat_ns)); `{min, p50, p90, p99, p999,
/// max}` in JSON, `bench rpc --json`'s as a sweep point's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Fastest.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Slowest.
    pub max: u64,
}

impl Percentiles {
    /// The percentiles of a histogram (all zero for an empty one).
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// How evenly a run's connections were served: the distribution of their rates over the
/// measured phase (each connection's RPCs completed in it over its length). A fair server
/// keeps the slowest connection at least [`ConnRates::FAIR`] times the median.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnRates {
    /// Connections counted.
    pub conns: usize,
    /// The slowest connection's rate, RPCs per second.
    pub min: f64,
    /// The median connection's rate (of an even count, the mean of the middle two).
    pub median: f64,
    /// The fastest connection's rate.
    pub max: f64,
}

impl ConnRates {
    /// The least [`min_to_median`](Self::min_to_median) of a fair run (issue 33: the
    /// slowest connection at least half as fast as the median one).
    pub const FAIR: f64 = 0.5;

    /// The distribution of `rates` (one per connection, RPCs per second); `None` for no
    /// connection. Not for measured loops: it sorts a copy.
    pub fn of(rates: &[f64]) -> Option<ConnRates> {
        let mut sorted = rates.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let median = if n.is_multiple_of(2) {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        } else {
            sorted[n / 2]
        };
        Some(ConnRates {
            conns: n,
            min,
            median,
            max,
        })
    }

    /// The slowest connection's rate over the median's: 1 when every connection went as
    /// fast, 0 when the median connection completed nothing (half of them or more starved).
    pub fn min_to_median(&self) -> f64 {
        if self.median > 0.0 {
            self.min / self.median
        } else {
            0.0
        }
    }

    /// Whether the slowest connection went at least [`FAIR`](Self::FAIR) times as fast as
    /// the median one.
    pub fn fair(&self) -> bool {
        self.min_to_median() >= Self::FAIR
    }
}
