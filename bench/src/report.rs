//! Two sweeps compared point by point (`rpcrdma report A.json B.json`): for every
//! configuration both ran, the median over its repetitions of the median round trip and of
//! the rate in each run, their ratio (B over A), and a noise estimate from the spread of
//! the repetitions; a configuration whose round trip grew, or whose rate fell, by more
//! than the allowed regression plus that noise is a regression, which makes the command
//! fail so that CI can guard a NIC or a build.

use std::collections::BTreeMap;

use crate::point::{Point, PointConfig};

/// One configuration's repetitions in one run, summarised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Repetitions measured.
    pub reps: usize,
    /// Median over the repetitions of the median round trip, in nanoseconds.
    pub p50_ns: f64,
    /// Median over the repetitions of the rate, in RPCs per second.
    pub rate_rps: f64,
    /// Half the range of the repetitions' median round trips, in percent of their median:
    /// how much this run moved by itself (0 with one repetition).
    pub spread_pct: f64,
    /// Whether the round trips leave out the server's time on the data
    /// ([`Point::server_work_ns`]; runs from before it was measured include it).
    pub work_left_out: bool,
}

/// One configuration in both runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The configuration.
    pub config: PointConfig,
    /// Run A.
    pub a: Summary,
    /// Run B.
    pub b: Summary,
    /// B's median round trip over A's (above 1: slower).
    pub p50_ratio: f64,
    /// B's rate over A's (below 1: slower).
    pub rate_ratio: f64,
    /// The noise allowed on top of the regression threshold: the larger spread of the two
    /// runs, in percent.
    pub noise_pct: f64,
    /// Whether B is slower than A by more than the threshold plus the noise.
    pub regression: bool,
}

/// The comparison of two runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The configurations both runs measured, in configuration order.
    pub rows: Vec<Row>,
    /// Configurations only run A measured.
    pub only_a: Vec<PointConfig>,
    /// Configurations only run B measured.
    pub only_b: Vec<PointConfig>,
    /// The allowed regression, in percent.
    pub max_regression_pct: f64,
}

/// The median of `v` (the mean of the two middle values for an even count; 0 for none).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Groups points by configuration and summarises each group.
fn summarise(points: &[Point]) -> BTreeMap<PointConfig, Summary> {
    let mut groups: BTreeMap<PointConfig, Vec<&Point>> = BTreeMap::new();
    for p in points {
        groups.entry(p.config.clone()).or_default().push(p);
    }
    groups
        .into_iter()
        .map(|(k, ps)| {
            let p50s: Vec<f64> = ps.iter().map(|p| p.lat_ns.p50 as f64).collect();
            let (lo, hi) = p50s
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
            let p50 = median(p50s);
            let spread = if p50 > 0.0 {
                (hi - lo) / 2.0 / p50 * 100.0
            } else {
                0.0
            };
            let s = Summary {
                reps: ps.len(),
                p50_ns: p50,
                rate_rps: median(ps.iter().map(|p| p.rate_rps).collect()),
                spread_pct: spread,
                work_left_out: ps.iter().any(|p| p.server_work_ns.is_some()),
            };
            (k, s)
        })
        .collect()
}

fn ratio(b: f64, a: f64) -> f64 {
    if a > 0.0 {
        b / a
    } else if b > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// Compares run `b` with run `a`, allowing `max_regression_pct` percent.
pub fn compare(a: &[Point], b: &[Point], max_regression_pct: f64) -> Report {
    let sa = summarise(a);
    let mut sb = summarise(b);
    let mut rows = Vec::new();
    let mut only_a = Vec::new();
    for (config, a) in sa {
        let Some(b) = sb.remove(&config) else {
            only_a.push(config);
            continue;
        };
        let noise = a.spread_pct.max(b.spread_pct);
        let allowed = (max_regression_pct + noise) / 100.0;
        let p50_ratio = ratio(b.p50_ns, a.p50_ns);
        let rate_ratio = ratio(b.rate_rps, a.rate_rps);
        let regression = p50_ratio > 1.0 + allowed || rate_ratio < 1.0 / (1.0 + allowed);
        rows.push(Row {
            config,
            a,
            b,
            p50_ratio,
            rate_ratio,
            noise_pct: noise,
            regression,
        });
    }
    Report {
        rows,
        only_a,
        only_b: sb.into_keys().collect(),
        max_regression_pct,
    }
}

/// A configuration in a few words: the axes that usually vary.
pub fn label(c: &PointConfig) -> String {
    format!(
        "{} {} B inline {} credits {} depth {} {}{} conns {} form {} v{}",
        c.op,
        c.size,
        c.inline,
        c.credits,
        c.depth,
        c.registration,
        if c.remote_invalidation { "+ri" } else { "" },
        c.conns,
        c.form,
        c.version
    )
}

impl Report {
    /// The configurations that regressed.
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.regression)
    }

    /// The comparison as an aligned table, then the configurations only one run has and a
    /// verdict line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let labels: Vec<String> = self.rows.iter().map(|r| label(&r.config)).collect();
        let w = labels.iter().map(String::len).max().unwrap_or(0).max(13);
        out.push_str(&format!(
            "{:<w$}  {:>10} {:>10} {:>7}  {:>12} {:>12} {:>7}  {:>6}  verdict\n",
            "configuration", "A p50 ns", "B p50 ns", "B/A", "A RPC/s", "B RPC/s", "B/A", "noise%"
        ));
        for (r, l) in self.rows.iter().zip(&labels) {
            out.push_str(&format!(
                "{:<w$}  {:>10.0} {:>10.0} {:>7.3}  {:>12.0} {:>12.0} {:>7.3}  {:>6.1}  {}\n",
                l,
                r.a.p50_ns,
                r.b.p50_ns,
                r.p50_ratio,
                r.a.rate_rps,
                r.b.rate_rps,
                r.rate_ratio,
                r.noise_pct,
                if r.regression { "REGRESSION" } else { "ok" }
            ));
        }
        for r in self
            .rows
            .iter()
            .filter(|r| r.a.work_left_out != r.b.work_left_out)
        {
            let (left_out, kept) = if r.b.work_left_out {
                ("B", "A")
            } else {
                ("A", "B")
            };
            out.push_str(&format!(
                "note: {}: {left_out}'s round trips leave out the server's time on the data (server_work_ns), {kept}'s include it: the two measure different things\n",
                label(&r.config)
            ));
        }
        for c in &self.only_a {
            out.push_str(&format!("only in A: {}\n", label(c)));
        }
        for c in &self.only_b {
            out.push_str(&format!("only in B: {}\n", label(c)));
        }
        let n = self.regressions().count();
        out.push_str(&format!(
            "{} configurations compared, {} regressed beyond {}% plus noise\n",
            self.rows.len(),
            n,
            self.max_regression_pct
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::point::tests::point;

    #[test]
    fn medians_ratios_and_noise() {
        let a = vec![
            point("read", 4096, "auto", 0, 1000, 1e5),
            point("read", 4096, "auto", 1, 1100, 0.9e5),
            point("read", 4096, "auto", 2, 900, 1.1e5),
        ];
        let b = vec![
            point("read", 4096, "auto", 0, 1200, 0.8e5),
            point("read", 4096, "auto", 1, 1200, 0.8e5),
        ];
        let r = compare(&a, &b, 5.0);
        assert_eq!(r.rows.len(), 1);
        let row = &r.rows[0];
        assert_eq!((row.a.reps, row.b.reps), (3, 2));
        assert_eq!(row.a.p50_ns, 1000.0);
        assert!((row.p50_ratio - 1.2).abs() < 1e-9);
        // A's repetitions spread ±10%: the allowance is 5% + 10%, and 1.2 is beyond it.
        assert!((row.noise_pct - 10.0).abs() < 1e-9);
        assert!(row.regression);
        assert!(r.render().contains("REGRESSION"));
        // With 20% allowed, it is within threshold plus noise.
        assert!(!compare(&a, &b, 20.0).rows[0].regression);
    }

    #[test]
    fn faster_is_never_a_regression_and_rates_count_too() {
        let a = vec![point("write", 65536, "chunked", 0, 10_000, 1e5)];
        let faster = vec![point("write", 65536, "chunked", 0, 8_000, 1.2e5)];
        assert_eq!(compare(&a, &faster, 0.0).regressions().count(), 0);
        // Same median, a third less rate: a regression.
        let slower_rate = vec![point("write", 65536, "chunked", 0, 10_000, 0.66e5)];
        assert_eq!(compare(&a, &slower_rate, 10.0).regressions().count(), 1);
    }

    #[test]
    fn runs_timed_differently_are_told_apart() {
        let old = vec![point("read", 65536, "auto", 0, 6_000, 1e5)];
        let mut new = vec![point("read", 65536, "auto", 0, 4_000, 1e5)];
        let text = compare(&old, &new, 5.0).render();
        assert!(!text.contains("note:"), "{text}");
        new[0].server_work_ns = Some(crate::summary::Percentiles {
            p50: 1_500,
            ..Default::default()
        });
        let text = compare(&old, &new, 5.0).render();
        assert!(
            text.contains("note: read 65536 B") && text.contains("B's round trips leave out"),
            "{text}"
        );
    }

    #[test]
    fn configurations_in_one_run_only_are_listed() {
        let a = vec![
            point("null", 0, "auto", 0, 300, 3e6),
            point("echo", 64, "auto", 0, 400, 2e6),
        ];
        let b = vec![
            point("null", 0, "auto", 0, 300, 3e6),
            point("read", 64, "auto", 0, 500, 2e6),
        ];
        let r = compare(&a, &b, 5.0);
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.only_a[0].op, "echo");
        assert_eq!(r.only_b[0].op, "read");
        let text = r.render();
        assert!(text.contains("only in A: echo") && text.contains("only in B: read"));
    }
}
