//! The axes of a sweep and the points they span: list and range syntax for sizes and
//! counts (`64,1k,4k`, or `8..8m` doubling as perftest's `-a` does, `1k..64k:x4` by another
//! factor), and the enumeration of every combination that can run, skipping the ones that
//! cannot (a Short form over its threshold, a Chunked form of an operation without a
//! DDP-eligible item, remote invalidation with persistent registration, which never offers
//! it: RFC 8797 §4.1).

use crate::point::PointConfig;

/// Why an axis did not parse or a sweep is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AxisError {
    /// A value is not a number with an optional `k`, `m` or `g` suffix (KiB, MiB, GiB).
    Number(String),
    /// A range is empty, goes down, or has a factor below 2.
    Range(String),
    /// A word is not one of the axis's choices.
    Choice {
        /// The axis.
        axis: &'static str,
        /// The word.
        word: String,
        /// What it may be.
        allowed: &'static str,
    },
    /// A value is out of the axis's bounds.
    Bounds {
        /// The axis.
        axis: &'static str,
        /// The value.
        value: u64,
        /// What it must be.
        rule: &'static str,
    },
    /// Every combination was skipped.
    Empty,
    /// Persistent registration with remote invalidation forced on, and nothing else asked:
    /// persistent regions are never offered for invalidation (RFC 8797 §4.1).
    PersistentInvalidation,
}

impl core::fmt::Display for AxisError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AxisError::Number(s) => write!(f, "{s:?} is not a size (e.g. 512, 4k, 1m)"),
            AxisError::Range(s) => write!(
                f,
                "{s:?} is not a range (LOW..HIGH, optionally :xFACTOR with a factor of 2 or more)"
            ),
            AxisError::Choice {
                axis,
                word,
                allowed,
            } => write!(f, "--{axis}: {word:?} is not one of {allowed}"),
            AxisError::Bounds { axis, value, rule } => write!(f, "--{axis}: {value} {rule}"),
            AxisError::Empty => f.write_str(
                "no combination of these axes can run (every Short form is over its threshold, or no operation has the forms asked for)",
            ),
            AxisError::PersistentInvalidation => f.write_str(
                "--registration persistent never offers remote invalidation (RFC 8797 §4.1): use --remote-invalidation auto or off",
            ),
        }
    }
}

impl std::error::Error for AxisError {}

/// Parses `512`, `4k`, `1m`, `2g` (binary units).
pub fn parse_size(s: &str) -> Result<u64, AxisError> {
    let t = s.trim();
    let (digits, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c.to_ascii_lowercase()),
        _ => (t, ' '),
    };
    let shift = match unit {
        ' ' => 0,
        'k' => 10,
        'm' => 20,
        'g' => 30,
        _ => return Err(AxisError::Number(s.into())),
    };
    let n: u64 = digits.parse().map_err(|_| AxisError::Number(s.into()))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| AxisError::Number(s.into()))
}

/// Parses a list of values and ranges: `1,2,8`, `8..8m` (doubling), `1k..64k:x4`.
pub fn parse_values(s: &str) -> Result<Vec<u64>, AxisError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once("..") {
            None => out.push(parse_size(part)?),
            Some((lo, rest)) => {
                let (hi, factor) = match rest.split_once(":x") {
                    Some((h, f)) => (
                        h,
                        f.parse::<u64>()
                            .map_err(|_| AxisError::Range(part.into()))?,
                    ),
                    None => (rest, 2),
                };
                let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
                if factor < 2 || lo == 0 || lo > hi {
                    return Err(AxisError::Range(part.into()));
                }
                let mut v = lo;
                while v <= hi {
                    out.push(v);
                    v = match v.checked_mul(factor) {
                        Some(n) => n,
                        None => break,
                    };
                }
            }
        }
    }
    if out.is_empty() {
        return Err(AxisError::Range(s.into()));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Parses a list of words, each one of `allowed` (a comma-separated list for the message).
pub fn parse_choices(
    axis: &'static str,
    s: &str,
    allowed: &'static str,
) -> Result<Vec<String>, AxisError> {
    let mut out: Vec<String> = Vec::new();
    for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if !allowed.split(',').any(|a| a == w) {
            return Err(AxisError::Choice {
                axis,
                word: w.into(),
                allowed,
            });
        }
        if !out.iter().any(|o| o == w) {
            out.push(w.into());
        }
    }
    if out.is_empty() {
        return Err(AxisError::Choice {
            axis,
            word: s.into(),
            allowed,
        });
    }
    Ok(out)
}

/// The operations a sweep knows (and `prog:P:V:N`: another program's procedure without
/// arguments, [`parse_prog`]).
pub const OPS: &str = "null,echo,read,write";

/// `prog:P:V:N` (program, version, procedure: another server's NULL, say
/// `prog:100003:3:0`), as numbers.
pub fn parse_prog(op: &str) -> Option<(u32, u32, u32)> {
    let rest = op.strip_prefix("prog:")?;
    let mut it = rest.split(':').map(|x| x.parse::<u32>().ok());
    match (it.next()??, it.next()??, it.next()??, it.next()) {
        (p, v, n, None) => Some((p, v, n)),
        _ => None,
    }
}

/// The `--op` list: [`OPS`]' words and `prog:P:V:N` procedures, each once.
pub fn parse_ops(s: &str) -> Result<Vec<String>, AxisError> {
    let (progs, known): (Vec<&str>, Vec<&str>) = s
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .partition(|w| w.starts_with("prog:"));
    let mut out = if known.is_empty() {
        Vec::new()
    } else {
        parse_choices("op", &known.join(","), OPS)?
    };
    for p in progs {
        if parse_prog(p).is_none() {
            return Err(AxisError::Choice {
                axis: "op",
                word: p.into(),
                allowed: "null,echo,read,write,prog:P:V:N",
            });
        }
        if !out.iter().any(|o| o == p) {
            out.push(p.into());
        }
    }
    if out.is_empty() {
        return Err(AxisError::Choice {
            axis: "op",
            word: s.into(),
            allowed: "null,echo,read,write,prog:P:V:N",
        });
    }
    Ok(out)
}
/// The forms a sweep can ask for.
pub const FORMS: &str = "auto,short,chunked,long";
/// The registration modes.
pub const REGISTRATIONS: &str = "windows,persistent";
/// The remote invalidation choices.
pub const REMOTE_INVALIDATIONS: &str = "auto,on,off";

/// Whether a point offers remote invalidation (RFC 8797 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteInvalidation {
    /// Where its registration allows: with memory windows, not with persistent regions.
    Auto,
    /// Offered (points with persistent registration are skipped).
    On,
    /// Not offered.
    Off,
}

impl RemoteInvalidation {
    /// Parses `auto`, `on` or `off`.
    pub fn parse(word: &str) -> Option<RemoteInvalidation> {
        match word {
            "auto" => Some(RemoteInvalidation::Auto),
            "on" => Some(RemoteInvalidation::On),
            "off" => Some(RemoteInvalidation::Off),
            _ => None,
        }
    }

    /// Whether a point with `registration` offers it; `None` for a combination that cannot
    /// run.
    fn resolve(self, registration: &str) -> Option<bool> {
        let persistent = registration == "persistent";
        match self {
            RemoteInvalidation::Auto => Some(!persistent),
            RemoteInvalidation::On => (!persistent).then_some(true),
            RemoteInvalidation::Off => Some(false),
        }
    }
}

/// Every axis of a sweep, each a list of values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Axes {
    /// The provider name the points record.
    pub provider: String,
    /// Operations (`null`, `echo`, `read`, `write`, or `prog:P:V:N`).
    pub ops: Vec<String>,
    /// Payload sizes (ignored for `null` and other programs' procedures, which run once at 0).
    pub sizes: Vec<u32>,
    /// RFC 8797 inline thresholds.
    pub inline: Vec<u32>,
    /// Credits.
    pub credits: Vec<u32>,
    /// Depths (RPCs in flight per connection).
    pub depth: Vec<u32>,
    /// Inline-send limits.
    pub inline_sends: Vec<u32>,
    /// `windows`, `persistent`.
    pub registration: Vec<String>,
    /// Remote invalidation offered, not offered, or as the registration allows.
    pub remote_invalidation: Vec<RemoteInvalidation>,
    /// Connections.
    pub conns: Vec<u32>,
    /// Server workers.
    pub workers: Vec<u32>,
    /// Forms: `auto`, `short`, `chunked`, `long`.
    pub forms: Vec<String>,
    /// RPC-over-RDMA versions (1, 2, or 0 for auto).
    pub versions: Vec<u32>,
}

/// Bytes of transport and RPC headers a Short Call or Reply of the built-in program sends
/// besides its payload, at most (RFC 8166 §4.7: 28 bytes of transport header with empty
/// lists; the RPC call header with an AUTH_NONE credential is 40, the reply header 24; the
/// arguments' own words).
const SHORT_OVERHEAD: u64 = 28 + 40 + 16;

/// Whether `op` can run in `form` with a payload of `size` under the threshold `inline`.
pub fn feasible(op: &str, size: u32, inline: u32, form: &str) -> bool {
    let fits = u64::from(size) + SHORT_OVERHEAD <= u64::from(inline);
    match (op, form) {
        (_, "auto") => true,
        // Short: everything inline, both ways.
        ("null", "short") => true,
        (p, "short") if p.starts_with("prog:") => true,
        (_, "short") => fits,
        // Chunked: a DDP-eligible item goes through a chunk (a Read chunk for WRITE's
        // argument, a Write chunk for READ's result); ECHO and NULL have none.
        ("read" | "write", "chunked") => true,
        (_, "chunked") => false,
        // Long: the Call in a Position-Zero Read chunk; READ's result still comes back in
        // its Write chunk.
        (_, "long") => true,
        _ => false,
    }
}

impl Axes {
    /// Every combination that can run, in a stable order (operation, form, threshold, then
    /// the other axes, size last so a line of a plot is measured in one stretch).
    pub fn points(&self) -> Result<Vec<PointConfig>, AxisError> {
        for &i in &self.inline {
            if !(1024..=64 * 1024).contains(&i) || i % 1024 != 0 {
                return Err(AxisError::Bounds {
                    axis: "inline",
                    value: u64::from(i),
                    rule: "must be a multiple of 1024 from 1 KiB to 64 KiB (RFC 8797 §4.2)",
                });
            }
        }
        if let Some(&bad) = self.versions.iter().find(|&&v| v > 2) {
            return Err(AxisError::Bounds {
                axis: "version",
                value: u64::from(bad),
                rule: "must be 1, 2 or auto",
            });
        }
        for (axis, v) in [
            ("credits", &self.credits),
            ("depth", &self.depth),
            ("conns", &self.conns),
            ("workers", &self.workers),
        ] {
            if let Some(&bad) = v.iter().find(|&&x| x == 0) {
                return Err(AxisError::Bounds {
                    axis,
                    value: u64::from(bad),
                    rule: "must be at least 1",
                });
            }
        }
        let mut out = Vec::new();
        for op in &self.ops {
            let sized = matches!(op.as_str(), "echo" | "read" | "write");
            let sizes: &[u32] = if sized { &self.sizes } else { &[0] };
            for form in &self.forms {
                for &version in &self.versions {
                    for &inline in &self.inline {
                        for &credits in &self.credits {
                            for &depth in &self.depth {
                                for &inline_sends in &self.inline_sends {
                                    for registration in &self.registration {
                                        let offered = self.offered(registration);
                                        for &ri in offered.iter().flatten() {
                                            for &conns in &self.conns {
                                                for &workers in &self.workers {
                                                    for &size in sizes {
                                                        if !feasible(op, size, inline, form) {
                                                            continue;
                                                        }
                                                        out.push(PointConfig {
                                                            provider: self.provider.clone(),
                                                            op: op.clone(),
                                                            size,
                                                            inline,
                                                            credits,
                                                            depth,
                                                            inline_sends,
                                                            registration: registration.clone(),
                                                            remote_invalidation: ri,
                                                            conns,
                                                            workers,
                                                            form: form.clone(),
                                                            version,
                                                        });
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        if out.is_empty() {
            let forced_on = self.registration.iter().all(|r| r == "persistent")
                && self.remote_invalidation == [RemoteInvalidation::On];
            return Err(if forced_on {
                AxisError::PersistentInvalidation
            } else {
                AxisError::Empty
            });
        }
        Ok(out)
    }

    /// The remote invalidation settings of the points with `registration`, each once, in
    /// the axis's order (`None`: none can run).
    fn offered(&self, registration: &str) -> [Option<bool>; 2] {
        let mut out = [None; 2];
        let mut n = 0;
        for ri in &self.remote_invalidation {
            if let Some(v) = ri.resolve(registration) {
                if !out[..n].contains(&Some(v)) {
                    out[n] = Some(v);
                    n += 1;
                }
            }
        }
        out
    }
}

/// The (depth, credits) pairs of `points` whose depth exceeds their credits, each once, in
/// order. A connection has at most as many Calls in flight as it has credits (RFC 8166
/// §3.3.1: each Call takes one), so such a point measures that many, not its depth.
pub fn depth_beyond_credits(points: &[PointConfig]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for p in points.iter().filter(|p| p.depth > p.credits) {
        if !out.contains(&(p.depth, p.credits)) {
            out.push((p.depth, p.credits));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths_beyond_the_credits_are_found_once_each() {
        let a = Axes {
            credits: vec![16, 64],
            depth: vec![1, 32, 64],
            ..axes()
        };
        let pts = a.points().unwrap();
        assert_eq!(depth_beyond_credits(&pts), vec![(32, 16), (64, 16)]);
        let within = Axes {
            credits: vec![64],
            ..a
        };
        assert!(depth_beyond_credits(&within.points().unwrap()).is_empty());
    }

    #[test]
    fn other_programs_procedures_are_operations() {
        assert_eq!(parse_prog("prog:100003:3:0"), Some((100_003, 3, 0)));
        assert_eq!(parse_prog("prog:1:2"), None);
        assert_eq!(parse_prog("prog:1:2:3:4"), None);
        assert_eq!(parse_prog("prog:x:2:3"), None);
        let ops = parse_ops("null,prog:100003:3:0,null,prog:100003:3:0").unwrap();
        assert_eq!(ops, vec!["null".to_string(), "prog:100003:3:0".to_string()]);
        assert!(parse_ops("prog:100003:3").is_err());
        assert!(parse_ops("nul").is_err());
        // Run once, at no payload, inline or as a Long Call; never chunked.
        let a = Axes {
            ops: vec!["prog:400100:1:0".into()],
            forms: vec![
                "auto".into(),
                "short".into(),
                "chunked".into(),
                "long".into(),
            ],
            ..axes()
        };
        let pts = a.points().unwrap();
        assert!(pts.iter().all(|p| p.size == 0 && p.form != "chunked"));
        let null = Axes {
            ops: vec!["null".into()],
            ..a.clone()
        };
        assert_eq!(pts.len(), null.points().unwrap().len(), "as NULL's");
    }

    fn axes() -> Axes {
        Axes {
            provider: "soft".into(),
            ops: vec!["null".into(), "echo".into(), "write".into()],
            sizes: vec![64, 4096, 65536],
            inline: vec![4096],
            credits: vec![32],
            depth: vec![1],
            inline_sends: vec![256],
            registration: vec!["windows".into(), "persistent".into()],
            remote_invalidation: vec![RemoteInvalidation::On, RemoteInvalidation::Off],
            conns: vec![1],
            workers: vec![1],
            forms: vec!["short".into(), "chunked".into()],
            versions: vec![1],
        }
    }

    #[test]
    fn sizes_lists_and_ranges() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("4q").is_err() && parse_size("k").is_err() && parse_size("").is_err());
        assert_eq!(parse_values("8..64"), Ok(vec![8, 16, 32, 64]));
        assert_eq!(
            parse_values("1k..64k:x4"),
            Ok(vec![1024, 4096, 16384, 65536])
        );
        assert_eq!(parse_values("64, 1k,64"), Ok(vec![64, 1024]));
        assert_eq!(parse_values("2..8m").unwrap().len(), 23);
        for bad in ["8..4", "0..8", "1..8:x1", "1..8:xq", ""] {
            assert!(parse_values(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn choices_are_checked() {
        assert_eq!(
            parse_choices("op", "read,write,read", OPS),
            Ok(vec!["read".to_string(), "write".to_string()])
        );
        assert!(matches!(
            parse_choices("op", "reed", OPS),
            Err(AxisError::Choice { axis: "op", .. })
        ));
    }

    #[test]
    fn remote_invalidation_follows_the_registration_unless_forced() {
        let mut a = axes();
        a.ops = vec!["null".into()];
        a.forms = vec!["short".into()];
        let offered = |a: &Axes| -> Vec<(String, bool)> {
            a.points()
                .unwrap()
                .iter()
                .map(|p| (p.registration.clone(), p.remote_invalidation))
                .collect()
        };
        a.remote_invalidation = vec![RemoteInvalidation::Auto];
        assert_eq!(
            offered(&a),
            [("windows".into(), true), ("persistent".into(), false)]
        );
        // Auto and off: persistent registration once, windows both ways.
        a.remote_invalidation = vec![RemoteInvalidation::Auto, RemoteInvalidation::Off];
        assert_eq!(
            offered(&a),
            [
                ("windows".into(), true),
                ("windows".into(), false),
                ("persistent".into(), false)
            ]
        );
        // Forced on: persistent points cannot run, and alone they say why.
        a.remote_invalidation = vec![RemoteInvalidation::On];
        assert_eq!(offered(&a), [("windows".into(), true)]);
        a.registration = vec!["persistent".into()];
        assert_eq!(a.points(), Err(AxisError::PersistentInvalidation));
        a.remote_invalidation = vec![RemoteInvalidation::Auto];
        assert_eq!(offered(&a), [("persistent".into(), false)]);
    }

    #[test]
    fn only_combinations_that_can_run() {
        let pts = axes().points().unwrap();
        // No persistent point offers remote invalidation.
        assert!(!pts
            .iter()
            .any(|p| p.registration == "persistent" && p.remote_invalidation));
        // NULL runs once per combination, at size 0, and only Short (it has no item).
        assert!(pts
            .iter()
            .filter(|p| p.op == "null")
            .all(|p| p.size == 0 && p.form == "short"));
        // ECHO has no Chunked form; a Short ECHO of 4 KiB or more is over 4096.
        assert!(pts
            .iter()
            .filter(|p| p.op == "echo")
            .all(|p| p.form == "short" && p.size == 64));
        // WRITE is Chunked at every size, Short only under the threshold.
        let w: Vec<_> = pts.iter().filter(|p| p.op == "write").collect();
        assert_eq!(w.iter().filter(|p| p.form == "chunked").count(), 3 * 3);
        assert_eq!(w.iter().filter(|p| p.form == "short").count(), 3);
    }

    #[test]
    fn bad_axes_are_refused() {
        let mut a = axes();
        a.inline = vec![1500];
        assert!(matches!(
            a.points(),
            Err(AxisError::Bounds { axis: "inline", .. })
        ));
        let mut a = axes();
        a.depth = vec![0];
        assert!(matches!(
            a.points(),
            Err(AxisError::Bounds { axis: "depth", .. })
        ));
        let mut a = axes();
        a.ops = vec!["echo".into()];
        a.forms = vec!["chunked".into()];
        assert_eq!(a.points(), Err(AxisError::Empty));
    }
}
