//! The inline-threshold answer of a sweep: per operation and inline threshold, the payload
//! size from which moving the payload through a chunk (RDMA Read or Write, RFC 8166 §3.4)
//! beats sending it inline in the Send (§3.5.1), and the threshold this fabric should
//! advertise (RFC 8797 §4.2) as a result.
//!
//! Only points that forced both forms at the same size are compared (`--force-form short`
//! and `--force-form chunked`, everything else equal), by the median over repetitions of
//! their median round trips.

use std::collections::BTreeMap;

use crate::point::{Point, PointConfig};
use crate::report::median;

/// Where chunked overtakes inline for one configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Crossover {
    /// The configuration, with `size`, `form` set to 0 and `""`.
    pub config: PointConfig,
    /// The smallest measured size from which the chunked form was at least as fast at
    /// every larger measured size; `None` when inline won at every size where both were
    /// measured.
    pub size: Option<u32>,
    /// The sizes where both forms were measured: (size, inline p50 ns, chunked p50 ns).
    pub compared: Vec<(u32, f64, f64)>,
}

/// The crossovers of every configuration that measured both forms.
pub fn crossovers(points: &[Point]) -> Vec<Crossover> {
    // (config without size and form) -> size -> (inline p50s, chunked p50s)
    type Sides = (Vec<f64>, Vec<f64>);
    let mut groups: BTreeMap<PointConfig, BTreeMap<u32, Sides>> = BTreeMap::new();
    for p in points {
        let side = match p.config.form.as_str() {
            "short" => 0,
            "chunked" => 1,
            _ => continue,
        };
        let mut key = p.config.clone();
        key.size = 0;
        key.form = String::new();
        let e = groups
            .entry(key)
            .or_default()
            .entry(p.config.size)
            .or_default();
        let v = if side == 0 { &mut e.0 } else { &mut e.1 };
        v.push(p.lat_ns.p50 as f64);
    }
    groups
        .into_iter()
        .filter_map(|(config, sizes)| {
            let compared: Vec<(u32, f64, f64)> = sizes
                .into_iter()
                .filter(|(_, (i, c))| !i.is_empty() && !c.is_empty())
                .map(|(s, (i, c))| (s, median(i), median(c)))
                .collect();
            if compared.is_empty() {
                return None;
            }
            // The first size of the final run of sizes where chunked is not slower.
            let mut size = None;
            for &(s, inline, chunked) in compared.iter().rev() {
                if chunked <= inline {
                    size = Some(s);
                } else {
                    break;
                }
            }
            Some(Crossover {
                config,
                size,
                compared,
            })
        })
        .collect()
}

/// The inline threshold a sweep recommends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recommendation {
    /// The RFC 8797 Send/Receive size: a multiple of 1 KiB, 1 KiB to 64 KiB.
    pub bytes: u32,
    /// Whether inline won at every size measured, so that this is a lower bound (the
    /// threshold that keeps the largest compared size inline); a sweep to larger sizes
    /// would tell more.
    pub at_least: bool,
}

/// The inline threshold to advertise, from the crossovers: the smallest RFC 8797 size that
/// keeps inline every payload below the latest crossover of any operation, so that no
/// operation sends through a chunk what it would have sent faster inline (RFC 8166 §3.5
/// bounds the whole Send, headers included). Where inline never lost, the threshold that
/// keeps the largest compared size inline, as a lower bound. `None` without crossovers.
pub fn recommended_threshold(crossovers: &[Crossover]) -> Option<Recommendation> {
    let mut latest = 0u32;
    let mut at_least = false;
    for c in crossovers {
        match c.size {
            Some(s) => latest = latest.max(s),
            None => {
                at_least = true;
                latest = latest.max(c.compared.last()?.0);
            }
        }
    }
    if crossovers.is_empty() {
        return None;
    }
    // Room for the transport and RPC headers beside the payload.
    let with_headers = u64::from(latest) + 256;
    Some(Recommendation {
        bytes: (with_headers.div_ceil(1024) * 1024).clamp(1024, 64 * 1024) as u32,
        at_least,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::point::tests::point;

    fn both(op: &str, size: u32, inline: u64, chunked: u64) -> Vec<Point> {
        vec![
            point(op, size, "short", 0, inline, 1.0),
            point(op, size, "chunked", 0, chunked, 1.0),
        ]
    }

    #[test]
    fn the_crossover_is_where_chunked_stays_ahead() {
        let mut pts = Vec::new();
        pts.extend(both("echo", 1024, 500, 900));
        pts.extend(both("echo", 4096, 900, 1000));
        // A noisy win, then a loss: not the crossover yet.
        pts.extend(both("echo", 8192, 1500, 1400));
        pts.extend(both("echo", 16384, 2000, 2100));
        pts.extend(both("echo", 32768, 4000, 2500));
        pts.extend(both("echo", 65536, 8000, 3000));
        pts.push(point("echo", 65536, "auto", 0, 3000, 1.0));
        let c = crossovers(&pts);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].size, Some(32768));
        assert_eq!(c[0].compared.len(), 6);
        assert_eq!(
            recommended_threshold(&c),
            Some(Recommendation {
                bytes: 33 * 1024,
                at_least: false
            })
        );
    }

    #[test]
    fn every_operation_counts_and_inline_may_never_lose() {
        let mut pts = Vec::new();
        pts.extend(both("read", 2048, 800, 700));
        pts.extend(both("read", 4096, 1200, 900));
        pts.extend(both("write", 2048, 800, 900));
        pts.extend(both("write", 4096, 1200, 1300));
        let c = crossovers(&pts);
        assert_eq!(c.len(), 2);
        let read = c.iter().find(|x| x.config.op == "read").unwrap();
        let write = c.iter().find(|x| x.config.op == "write").unwrap();
        assert_eq!((read.size, write.size), (Some(2048), None));
        // WRITE never crossed over up to 4 KiB: at least what keeps 4 KiB inline.
        assert_eq!(
            recommended_threshold(&c),
            Some(Recommendation {
                bytes: 5 * 1024,
                at_least: true
            })
        );
        assert_eq!(recommended_threshold(&[]), None);
    }
}
