//! One measured point of a sweep: the configuration it ran with and what was measured, with
//! its two serialisations — one JSON object per point (`--json`) and one CSV row per point
//! (`--csv`). The JSON schema is this module's types, field for field (`serde`); the README
//! documents it.

use serde::{Deserialize, Serialize};

use crate::summary::{ConnRates, Percentiles};

/// What a point ran: every axis of a sweep.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PointConfig {
    /// The fabric provider (`soft`, `verbs`).
    pub provider: String,
    /// The operation: `null`, `echo`, `read`, `write`, or `prog:P:V:N` for another
    /// program's procedure.
    pub op: String,
    /// Bytes of payload each RPC moves (arguments for `echo`/`write`, results for `read`).
    pub size: u32,
    /// The RFC 8797 Send and Receive size both ends advertised (the inline threshold).
    pub inline: u32,
    /// Credits the requester asked for and the responder granted at most.
    pub credits: u32,
    /// RPCs kept in flight per connection.
    pub depth: u32,
    /// Sends of at most this many bytes were posted inline (`IBV_SEND_INLINE`).
    pub inline_sends: u32,
    /// `windows` (per-RPC memory windows) or `persistent` (regions exposed once).
    pub registration: String,
    /// Whether remote invalidation was offered (RFC 8797 §4.1).
    pub remote_invalidation: bool,
    /// Connections.
    pub conns: u32,
    /// Server workers.
    pub workers: u32,
    /// The message form asked for: `auto` (the requester's choice), `short`, `chunked` or
    /// `long`.
    pub form: String,
    /// The RPC-over-RDMA version both ends were set to (1: RFC 8166; 2: the version 2
    /// draft; 0: auto, each end choosing, see [`Point::spoke`]); runs saved before this axis
    /// existed read as 1.
    #[serde(default = "version_one")]
    pub version: u32,
}

fn version_one() -> u32 {
    1
}

/// CPU time spent per RPC, in nanoseconds, by the client's and the server's threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuPerRpc {
    /// The client threads.
    pub client: f64,
    /// The server workers (`None` when the server is another process).
    pub server: Option<f64>,
}

/// How many of each message form and chunk type the point actually used (the client's
/// counters over the measured phase).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forms {
    /// Short Calls (RDMA_MSG, no chunk).
    pub short_calls: u64,
    /// Calls with Read chunks.
    pub chunked_calls: u64,
    /// Long Calls (Position-Zero Read chunk).
    pub long_calls: u64,
    /// Replies inline.
    pub short_replies: u64,
    /// Replies through the Reply chunk.
    pub long_replies: u64,
    /// Write chunks filled.
    pub write_chunks: u64,
    /// Remote invalidations seen.
    pub remote_invalidations: u64,
}

/// The same-run limits a point is compared to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// A cache-line round trip between the client's and the server's cores.
    pub cacheline_rtt_ns: u64,
    /// A cross-core copy of the point's payload (`None` for points without one).
    pub copy_ns: Option<u64>,
    /// A copy of the point's payload into a buffer another core just read (`None` for
    /// points without one, and in files written before it was measured).
    #[serde(default)]
    pub copy_to_reader_ns: Option<u64>,
    /// Round trips per second of a zero-work message ring on the same two cores at the
    /// point's depth ([`crate::ring`]): null points with one connection and one worker in
    /// this process (`None` for others, and in files written before it was measured).
    #[serde(default)]
    pub ring_rps: Option<f64>,
}

/// A point's ratios to its limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// Median round trip over the cache-line round trip.
    pub p50_to_cacheline: f64,
    /// Median round trip over the cross-core copy of the payload.
    pub p50_to_copy: Option<f64>,
    /// Median round trip over the copy of the payload into a buffer another core read.
    #[serde(default)]
    pub p50_to_copy_to_reader: Option<f64>,
    /// Rate over the zero-work ring's.
    #[serde(default)]
    pub rate_to_ring: Option<f64>,
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// What ran.
    #[serde(flatten)]
    pub config: PointConfig,
    /// Which repetition of the configuration this is (0-based).
    pub rep: u32,
    /// RPCs completed in the measured phase.
    pub rpcs: u64,
    /// Length of the measured phase.
    pub seconds: f64,
    /// RPCs per second.
    pub rate_rps: f64,
    /// Payload bytes per second.
    pub bandwidth_bps: f64,
    /// Round-trip percentiles, less the server's time on the data (`server_work_ns`).
    pub lat_ns: Percentiles,
    /// The time the server said it spent on each RPC's data, left out of `lat_ns`: the
    /// built-in program's timed READ making it and WRITE checking it (`None` for other
    /// points, for data under 512 bytes, and in files written before it was measured).
    #[serde(default)]
    pub server_work_ns: Option<Percentiles>,
    /// CPU time per RPC.
    pub cpu_ns_per_rpc: CpuPerRpc,
    /// The forms actually used.
    pub forms: Forms,
    /// The same-run limits.
    pub limits: Limits,
    /// The ratios to them.
    pub ratios: Ratios,
    /// Each connection's rate, RPCs per second.
    #[serde(default)]
    pub per_conn_rps: Vec<f64>,
    /// The slowest connection's rate, RPCs per second (`None` in files written before it
    /// was reported).
    #[serde(default)]
    pub conn_rate_min: Option<f64>,
    /// The median connection's rate (of an even count of connections, the mean of the
    /// middle two).
    #[serde(default)]
    pub conn_rate_median: Option<f64>,
    /// The fastest connection's rate.
    #[serde(default)]
    pub conn_rate_max: Option<f64>,
    /// `conn_rate_min` over `conn_rate_median`: how fairly the server shared itself among
    /// the connections (1: evenly; issue 33 asks for at least
    /// [`ConnRates::FAIR`]; 0 when the median is 0).
    #[serde(default)]
    pub conn_rate_min_to_median: Option<f64>,
    /// Each in-process server worker's rate, RPCs per second (empty for a remote server).
    #[serde(default)]
    pub per_worker_rps: Vec<f64>,
    /// Memory one connection registered.
    #[serde(default)]
    pub memory_per_conn: MemoryPerConn,
    /// The RPC-over-RDMA version the connections spoke (what `auto` found; 1 for runs saved
    /// before this field).
    #[serde(default = "version_one")]
    pub spoke: u32,
}

/// Bytes of buffers one connection registers at each end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPerConn {
    /// The client's (requester's) buffers.
    pub client: u64,
    /// The in-process server's (`None` for a remote one).
    pub server: Option<u64>,
}

/// Why a file of points could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// A line is not a point (its number, 1-based, and what was wrong).
    Line(usize, String),
    /// The file holds no point.
    Empty,
}

impl core::fmt::Display for ReadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReadError::Line(n, e) => write!(f, "line {n}: not a sweep point: {e}"),
            ReadError::Empty => f.write_str("no sweep point in the file"),
        }
    }
}

impl std::error::Error for ReadError {}

impl Point {
    /// Sets the `conn_rate_*` fields from the distribution of the connections' rates
    /// (`None` clears them).
    pub fn set_conn_rates(&mut self, r: Option<ConnRates>) {
        self.conn_rate_min = r.map(|r| r.min);
        self.conn_rate_median = r.map(|r| r.median);
        self.conn_rate_max = r.map(|r| r.max);
        self.conn_rate_min_to_median = r.map(|r| r.min_to_median());
    }

    /// The point as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads points written one JSON object per line (blank lines skipped), or a JSON
    /// array of them. Failed repetitions (a configuration, `rep` and `error`:
    /// [`Failure`]) are skipped: they measured nothing.
    pub fn read_all(text: &str) -> Result<Vec<Point>, ReadError> {
        let trimmed = text.trim_start();
        // A failed repetition's object: an error and no measurement.
        let failed = |v: &serde_json::Value| v.get("error").is_some() && v.get("rpcs").is_none();
        let points: Vec<Point> = if trimmed.starts_with('[') {
            let bad = |e: serde_json::Error| ReadError::Line(1, e.to_string());
            let values: Vec<serde_json::Value> = serde_json::from_str(trimmed).map_err(bad)?;
            let mut v = Vec::with_capacity(values.len());
            for value in values.into_iter().filter(|x| !failed(x)) {
                v.push(serde_json::from_value(value).map_err(bad)?);
            }
            v
        } else {
            let mut v = Vec::new();
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let bad = |e: serde_json::Error| ReadError::Line(i + 1, e.to_string());
                let value: serde_json::Value = serde_json::from_str(line).map_err(bad)?;
                if failed(&value) {
                    continue;
                }
                v.push(serde_json::from_value(value).map_err(bad)?);
            }
            v
        };
        if points.is_empty() {
            return Err(ReadError::Empty);
        }
        Ok(points)
    }

    /// The CSV header line matching [`csv_row`](Self::csv_row).
    pub fn csv_header() -> &'static str {
        "provider,op,size,inline,credits,depth,inline_sends,registration,remote_invalidation,\
         conns,workers,form,version,spoke,rep,rpcs,seconds,rate_rps,bandwidth_bps,lat_min_ns,lat_p50_ns,\
         lat_p90_ns,lat_p99_ns,lat_p999_ns,lat_max_ns,cpu_client_ns,cpu_server_ns,short_calls,\
         chunked_calls,long_calls,short_replies,long_replies,write_chunks,remote_invalidations,\
         cacheline_rtt_ns,copy_ns,p50_to_cacheline,p50_to_copy,copy_to_reader_ns,\
         p50_to_copy_to_reader,server_work_p50_ns,server_work_p99_ns,ring_rps,rate_to_ring,\
         conn_rate_min,conn_rate_median,conn_rate_max,conn_rate_min_to_median"
    }

    /// The point as one CSV row (no field needs quoting: names are plain words).
    pub fn csv_row(&self) -> String {
        let c = &self.config;
        let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
        let rps = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.1}"));
        let l = &self.lat_ns;
        let f = &self.forms;
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.1},{:.1},{},{},{},{},{},{},{:.1},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{}",
            c.provider,
            c.op,
            c.size,
            c.inline,
            c.credits,
            c.depth,
            c.inline_sends,
            c.registration,
            c.remote_invalidation,
            c.conns,
            c.workers,
            c.form,
            c.version,
            self.spoke,
            self.rep,
            self.rpcs,
            self.seconds,
            self.rate_rps,
            self.bandwidth_bps,
            l.min,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            self.cpu_ns_per_rpc.client,
            opt(self.cpu_ns_per_rpc.server),
            f.short_calls,
            f.chunked_calls,
            f.long_calls,
            f.short_replies,
            f.long_replies,
            f.write_chunks,
            f.remote_invalidations,
            self.limits.cacheline_rtt_ns,
            self.limits.copy_ns.map_or(String::new(), |v| v.to_string()),
            self.ratios.p50_to_cacheline,
            opt(self.ratios.p50_to_copy),
            self.limits
                .copy_to_reader_ns
                .map_or(String::new(), |v| v.to_string()),
            opt(self.ratios.p50_to_copy_to_reader),
            self.server_work_ns
                .map_or(String::new(), |w| w.p50.to_string()),
            self.server_work_ns
                .map_or(String::new(), |w| w.p99.to_string()),
            self.limits
                .ring_rps
                .map_or(String::new(), |r| format!("{r:.0}")),
            opt(self.ratios.rate_to_ring),
            rps(self.conn_rate_min),
            rps(self.conn_rate_median),
            rps(self.conn_rate_max),
            opt(self.conn_rate_min_to_median),
        )
    }
}

/// A repetition of a point whose RPCs failed (a [`crate::rpc::LoadError`]): the sweep went on
/// without it. One JSON line of a sweep's output, beside the points: the point's
/// configuration, `rep` and `error` ([`Point::read_all`] skips it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failure {
    /// The point (flattened into the object, as a [`Point`]'s is).
    #[serde(flatten)]
    pub config: PointConfig,
    /// Its repetition, from 0.
    pub rep: u32,
    /// What failed.
    pub error: String,
}

impl Failure {
    /// The failure as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A point of `op` at `size` with the given form, median latency and rate.
    pub(crate) fn point(op: &str, size: u32, form: &str, rep: u32, p50: u64, rate: f64) -> Point {
        Point {
            config: PointConfig {
                provider: "soft".into(),
                op: op.into(),
                size,
                inline: 4096,
                credits: 32,
                depth: 1,
                inline_sends: 256,
                registration: "windows".into(),
                remote_invalidation: true,
                conns: 1,
                workers: 1,
                form: form.into(),
                version: 1,
            },
            rep,
            rpcs: 1000,
            seconds: 1.0,
            rate_rps: rate,
            bandwidth_bps: rate * f64::from(size),
            lat_ns: Percentiles {
                min: p50 / 2,
                p50,
                p90: p50 + 10,
                p99: p50 + 20,
                p999: p50 + 30,
                max: p50 * 10,
            },
            server_work_ns: None,
            cpu_ns_per_rpc: CpuPerRpc {
                client: 100.0,
                server: Some(90.0),
            },
            forms: Forms {
                short_calls: 1000,
                ..Forms::default()
            },
            limits: Limits {
                cacheline_rtt_ns: 130,
                copy_ns: Some(50),
                copy_to_reader_ns: Some(400),
                ring_rps: None,
            },
            ratios: Ratios {
                p50_to_cacheline: p50 as f64 / 130.0,
                p50_to_copy: Some(p50 as f64 / 50.0),
                p50_to_copy_to_reader: Some(p50 as f64 / 400.0),
                rate_to_ring: None,
            },
            per_conn_rps: vec![rate],
            conn_rate_min: Some(rate),
            conn_rate_median: Some(rate),
            conn_rate_max: Some(rate),
            conn_rate_min_to_median: Some(1.0),
            per_worker_rps: vec![rate],
            memory_per_conn: MemoryPerConn {
                client: 1 << 20,
                server: Some(1 << 20),
            },
            spoke: 1,
        }
    }

    #[test]
    fn json_lines_and_arrays_read_back() {
        let a = point("read", 4096, "auto", 0, 1500, 1e5);
        let b = point("write", 65536, "chunked", 1, 9000, 2e4);
        let lines = format!("{}\n\n{}\n", a.to_json(), b.to_json());
        assert_eq!(Point::read_all(&lines).unwrap(), vec![a.clone(), b.clone()]);
        let array = serde_json::to_string(&vec![a.clone(), b]).unwrap();
        assert_eq!(Point::read_all(&array).unwrap().len(), 2);
        // The configuration is flattened into the point's object.
        let v: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(v["op"], "read");
        assert_eq!(v["lat_ns"]["p50"], 1500);
    }

    #[test]
    fn failed_repetitions_are_skipped() {
        let a = point("read", 4096, "auto", 0, 1500, 1e5);
        let failed = Failure {
            config: a.config.clone(),
            rep: 1,
            error: "no reply within the RPC timeout".into(),
        };
        let lines = format!("{}\n{}\n", a.to_json(), failed.to_json());
        assert_eq!(Point::read_all(&lines).unwrap(), vec![a.clone()]);
        let array = format!("[{},{}]", failed.to_json(), a.to_json());
        assert_eq!(Point::read_all(&array).unwrap(), vec![a]);
        // A file of failures alone holds no point.
        assert!(matches!(
            Point::read_all(&failed.to_json()),
            Err(ReadError::Empty)
        ));
    }

    #[test]
    fn bad_files_are_refused_with_the_line() {
        let a = point("null", 0, "auto", 0, 300, 3e6).to_json();
        match Point::read_all(&format!("{a}\n{{\"op\": 3}}\n")) {
            Err(ReadError::Line(2, _)) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(Point::read_all("\n \n"), Err(ReadError::Empty)));
    }

    #[test]
    fn csv_rows_have_the_header_columns() {
        let columns = Point::csv_header().split(',').count();
        let p = point("echo", 1024, "short", 2, 800, 1e6);
        let row = p.csv_row();
        assert_eq!(row.split(',').count(), columns, "{row}");
        assert!(row.starts_with("soft,echo,1024,4096,"));
        // The connections' rates come last.
        let conn_rates = ",1000000.0,1000000.0,1000000.0,1.000";
        assert!(row.ends_with(conn_rates), "{row}");
        // The row without them.
        let before = |row: &str| row.rsplitn(5, ',').last().unwrap_or_default().to_string();
        assert!(
            before(&row).ends_with(",,,,"),
            "no server work, no ring: {row}"
        );
        let mut timed = point("read", 65536, "chunked", 0, 3000, 1e5);
        timed.server_work_ns = Some(Percentiles {
            p50: 1200,
            p99: 1500,
            ..Percentiles::default()
        });
        let row = timed.csv_row();
        assert_eq!(row.split(',').count(), columns, "{row}");
        assert!(before(&row).ends_with(",1200,1500,,"), "{row}");
        // And it travels through JSON.
        let back = Point::read_all(&timed.to_json()).unwrap();
        assert_eq!(back[0].server_work_ns, timed.server_work_ns);
        // A null point read against the zero-work ring.
        let mut null = point("null", 0, "auto", 0, 4000, 6.4e6);
        null.limits.ring_rps = Some(8.0e6);
        null.ratios.rate_to_ring = Some(0.8);
        let row = null.csv_row();
        assert_eq!(row.split(',').count(), columns, "{row}");
        assert!(before(&row).ends_with(",8000000,0.800"), "{row}");
        let back = Point::read_all(&null.to_json()).unwrap();
        assert_eq!(back[0].limits, null.limits);
        assert_eq!(back[0].ratios, null.ratios);
    }

    /// The connections' rates: set from their distribution, written to JSON and CSV, and
    /// absent (empty columns, `None`) from points read from files written before them.
    #[test]
    fn connection_rates_travel_and_old_points_read_without_them() {
        let mut p = point("null", 0, "auto", 0, 4000, 2e6);
        p.config.conns = 4;
        p.per_conn_rps = vec![4e5, 6e5, 5e5, 5e5];
        p.set_conn_rates(ConnRates::of(&p.per_conn_rps));
        assert_eq!(
            (p.conn_rate_min, p.conn_rate_median, p.conn_rate_max),
            (Some(4e5), Some(5e5), Some(6e5))
        );
        assert_eq!(p.conn_rate_min_to_median, Some(0.8));
        let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["conn_rate_median"], 5e5);
        assert_eq!(v["conn_rate_min_to_median"], 0.8);
        assert_eq!(Point::read_all(&p.to_json()).unwrap(), vec![p.clone()]);
        assert!(p.csv_row().ends_with(",400000.0,500000.0,600000.0,0.800"));
        // A line from before: no conn_rate_* fields.
        let mut old = v.clone();
        for k in [
            "conn_rate_min",
            "conn_rate_median",
            "conn_rate_max",
            "conn_rate_min_to_median",
        ] {
            old.as_object_mut().unwrap().remove(k);
        }
        let back = Point::read_all(&old.to_string()).unwrap();
        let mut want = p.clone();
        want.set_conn_rates(None);
        assert_eq!(back, vec![want.clone()]);
        let row = want.csv_row();
        assert_eq!(
            row.split(',').count(),
            Point::csv_header().split(',').count()
        );
        assert!(row.ends_with(",,,,"), "{row}");
    }
}
