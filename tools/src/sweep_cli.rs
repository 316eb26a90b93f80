//! `rpcrdma sweep`: the arguments and the printing; the sweep itself is
//! `rpcrdma_bench::sweep`, its axes `rpcrdma_bench::axes`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rpcrdma_bench::axes::{self, Axes, AxisError, RemoteInvalidation};
use rpcrdma_bench::crossover::{crossovers, recommended_threshold, Crossover};
use rpcrdma_bench::point::{Point, PointConfig};
use rpcrdma_bench::sweep::{self, Settings, Step, Target};
use rpcrdma_bench::{plot, report};
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::responder::ServerConn;

use crate::provider::{on_provider, ProviderChoice};

/// `rpcrdma sweep`: every combination of the axes, each a list (`a,b,c`) or a range
/// (`LOW..HIGH` doubling, `LOW..HIGH:xF`).
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Operations: null, echo, read, write, and prog:P:V:N for another program's procedure
    /// without arguments (a NULL: prog:100003:3:0 is NFSv3's, the kernel's nfsd included).
    #[arg(long, default_value = "null,echo,read,write")]
    op: String,
    /// Payload sizes (bytes, k, m): e.g. `64,1k,4k` or `8..8m` (perftest -a's doubling).
    #[arg(long, default_value = "64..64k:x4")]
    sizes: String,
    /// RFC 8797 inline thresholds (Send and Receive sizes), 1k to 64k.
    #[arg(long, default_value = "4k")]
    inline: String,
    /// Credits.
    #[arg(long, default_value = "32")]
    credits: String,
    /// RPCs in flight per connection.
    #[arg(long, default_value = "1")]
    depth: String,
    /// Sends up to this size posted inline (IBV_SEND_INLINE).
    #[arg(long, default_value = "256")]
    inline_sends: String,
    /// windows (per-RPC memory windows), persistent (regions exposed once).
    #[arg(long, default_value = "windows")]
    registration: String,
    /// auto (offered with windows, not with persistent regions, which never offer it:
    /// RFC 8797 §4.1), on, off.
    #[arg(long, default_value = "auto")]
    remote_invalidation: String,
    /// Connections, each with its own client thread.
    #[arg(long, default_value = "1")]
    conns: String,
    /// Server workers (in-process server).
    #[arg(long, default_value = "1")]
    workers: String,
    /// RPC-over-RDMA versions both ends are set to: 1 (RFC 8166), 2 (the version 2 draft),
    /// auto (the client tries 2 and falls back; the JSON's `spoke` says what was spoken);
    /// `1,2` measures each point in both, in the same run.
    #[arg(long, default_value = "1")]
    version: String,
    /// Message forms: auto (the thresholds decide), short, chunked, long; `short,chunked`
    /// measures both sides of the threshold at every size and finds the crossover.
    #[arg(long, default_value = "auto")]
    force_form: String,
    /// Repetitions of each point (the report's noise estimate comes from them).
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Measured seconds per point and repetition.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Warm-up seconds before each measurement.
    #[arg(long, default_value_t = 0.1)]
    warmup: f64,
    /// Largest bulk payload of one RPC (default: each point's payload with its headers,
    /// at least the engine's default).
    #[arg(long)]
    bulk_size: Option<u32>,
    /// Bytes of the bulk buffers every credit owns (chunks beyond share --large-bufs).
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_SLOT_BULK_SIZE)]
    slot_bulk_size: u32,
    /// Buffers of the bulk size each connection's RPCs share (at least 3).
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_LARGE_BUFS)]
    large_bufs: u32,
    /// The reliable connection's acknowledgement timeout exponent (verbs): an
    /// unacknowledged packet is sent again after 4.096 us x 2^N. 0 (the default) keeps
    /// rdma_cm's.
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_ACK_TIMEOUT, value_parser = clap::value_parser!(u8).range(0..=i64::from(rpcrdma_engine::conn::MAX_ACK_TIMEOUT)))]
    ack_timeout: u8,
    /// The fabric.
    #[arg(long, value_enum, default_value_t = ProviderChoice::Soft)]
    provider: ProviderChoice,
    /// The verbs device (default: the first).
    #[arg(long)]
    device: Option<String>,
    /// Measure a server running elsewhere (`rpcrdma serve`) at this address instead of one
    /// started in this process.
    #[arg(long)]
    connect: Option<String>,
    /// Where the in-process server listens (soft: @name; verbs: IP:PORT, one port per
    /// point from there).
    #[arg(long)]
    listen: Option<String>,
    /// The first client thread's core; the server's workers take the next ones.
    #[arg(long, default_value_t = 0)]
    first_core: usize,
    /// Client threads sharing each point's connections (default: one per connection).
    #[arg(long)]
    client_threads: Option<usize>,
    /// Write every point as one JSON object per line to FILE (`-`: standard output, the
    /// table then goes to standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write every point as a CSV row to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Plot latency and bandwidth against size to FILE (.svg, or .html for a page).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

fn u32s(axis: &'static str, s: &str) -> Result<Vec<u32>, AxisError> {
    axes::parse_values(s)?
        .into_iter()
        .map(|v| {
            u32::try_from(v).map_err(|_| AxisError::Bounds {
                axis,
                value: v,
                rule: "is too large",
            })
        })
        .collect()
}

impl Args {
    fn axes(&self) -> Result<Axes, AxisError> {
        let sizes = u32s("sizes", &self.sizes)?;
        if let Some(&s) = sizes.iter().find(|&&s| s > 8 << 20) {
            return Err(AxisError::Bounds {
                axis: "sizes",
                value: u64::from(s),
                rule: "is over 8 MiB",
            });
        }
        Ok(Axes {
            provider: self.provider.name().into(),
            ops: axes::parse_ops(&self.op)?,
            sizes,
            inline: u32s("inline", &self.inline)?,
            credits: u32s("credits", &self.credits)?,
            depth: u32s("depth", &self.depth)?,
            inline_sends: u32s("inline-sends", &self.inline_sends)?,
            registration: axes::parse_choices(
                "registration",
                &self.registration,
                axes::REGISTRATIONS,
            )?,
            remote_invalidation: axes::parse_choices(
                "remote-invalidation",
                &self.remote_invalidation,
                axes::REMOTE_INVALIDATIONS,
            )?
            .iter()
            .filter_map(|w| RemoteInvalidation::parse(w))
            .collect(),
            conns: u32s("conns", &self.conns)?,
            workers: u32s("workers", &self.workers)?,
            forms: axes::parse_choices("force-form", &self.force_form, axes::FORMS)?,
            versions: axes::parse_choices("version", &self.version, "1,2,auto")?
                .iter()
                .map(|v| match v.as_str() {
                    "auto" => 0,
                    "2" => 2,
                    _ => 1,
                })
                .collect(),
        })
    }
}

/// Where the table goes: standard output, or standard error when the JSON does.
struct Out {
    to_stderr: bool,
}

impl Out {
    fn line(&self, s: &str) {
        if self.to_stderr {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
    }
}

fn header() -> String {
    format!(
        "{:>6} {:>9} {:>6} {:>4} {:>5} {:>3} {:>7} {:>1} {:>5} {:>3}  {:>9} {:>9} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "op", "bytes", "inline", "cred", "depth", "con", "form", "v", "reg", "rep", "p50 ns", "p99 ns", "p99.9 ns",
        "max ns", "RPC/s", "MB/s", "cpu c ns", "cpu s ns", "p50/line", "p50/copy", "rps/ring", "min/med", "MiB/conn", "work ns"
    )
}

fn row(p: &Point) -> String {
    let c = &p.config;
    // The same-run limits: a cache-line round trip between the cores, a cross-core copy of
    // the payload (points with one) and the zero-work ring's rate (null points).
    let copy = p
        .ratios
        .p50_to_copy
        .map_or("-".to_string(), |r| format!("{r:.2}"));
    format!(
        "{:>6} {:>9} {:>6} {:>4} {:>5} {:>3} {:>7} {:>1} {:>5} {:>3}  {:>9} {:>9} {:>9} {:>9} {:>11.0} {:>11.1} {:>8.0} {:>8} {:>8.2} {:>8} {:>8} {:>8} {:>8.1} {:>8}",
        c.op,
        c.size,
        c.inline,
        c.credits,
        c.depth,
        c.conns,
        c.form,
        match c.version {
            0 => "a".to_string(),
            v => v.to_string(),
        },
        // Registration: mw+ri (windows, remotely invalidated), mw (windows, local
        // invalidation), pers (persistent regions).
        match (c.registration.as_str(), c.remote_invalidation) {
            ("persistent", _) => "pers",
            (_, true) => "mw+ri",
            _ => "mw",
        },
        p.rep,
        p.lat_ns.p50,
        p.lat_ns.p99,
        p.lat_ns.p999,
        p.lat_ns.max,
        p.rate_rps,
        p.bandwidth_bps / 1e6,
        p.cpu_ns_per_rpc.client,
        p.cpu_ns_per_rpc
            .server
            .map_or("-".to_string(), |s| format!("{s:.0}")),
        p.ratios.p50_to_cacheline,
        copy,
        // The rate over the zero-work ring's (null points of one connection and worker).
        p.ratios
            .rate_to_ring
            .map_or("-".to_string(), |r| format!("{r:.2}")),
        // How evenly the connections were served: the slowest one's rate over the median
        // one's (points of several connections).
        p.conn_rate_min_to_median
            .filter(|_| c.conns > 1)
            .map_or("-".to_string(), |r| format!("{r:.2}")),
        (p.memory_per_conn.client + p.memory_per_conn.server.unwrap_or(0)) as f64
            / f64::from(1 << 20),
        // The server's time on the data (median), which the round trips leave out.
        p.server_work_ns
            .map_or("-".to_string(), |w| w.p50.to_string()),
    )
}

fn create(path: &PathBuf) -> Result<Box<dyn Write>, String> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(std::io::stdout()));
    }
    File::create(path)
        .map(|f| Box::new(BufWriter::new(f)) as Box<dyn Write>)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `rpcrdma sweep`.
pub fn run(args: &Args) -> ExitCode {
    // The plot's format, from its file name, refused before anything runs.
    let plot = match &args.plot {
        Some(path) => match plot::Format::of(path) {
            Some(format) => Some((path.as_path(), format)),
            None => {
                eprintln!(
                    "sweep: --plot {}: the plot is an SVG image (FILE.svg) or a page holding one (FILE.html)",
                    path.display()
                );
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let points = match args.axes().and_then(|a| a.points()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sweep: {e}");
            return ExitCode::from(2);
        }
    };
    for (depth, credits) in axes::depth_beyond_credits(&points) {
        eprintln!(
            "sweep: note: at --depth {depth} with --credits {credits}, a connection has at most {credits} Calls in flight (one credit each, RFC 8166 §3.3.1): those points measure depth {credits}"
        );
    }
    on_provider!(args.provider, args.device.as_deref(), |P, open| {
        run_on::<P>(args, &points, plot, &open)
    })
}

/// `rpcrdma sweep` on provider `P`: the output files opened, every point run under a
/// progress bar (each printed and written as it ends), then the crossovers, the
/// recommended inline threshold and the plot.
fn run_on<P: Provider>(
    args: &Args,
    points: &[PointConfig],
    plot: Option<(&Path, plot::Format)>,
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    let settings = settings(args);
    let target = target(args);
    let json_stdout = args.json.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let out = Out {
        to_stderr: json_stdout,
    };
    let mut files = match Files::create(args, plot) {
        Ok(f) => f,
        Err(e) => return fail(&e),
    };
    let result = sweep_shown::<P>(points, &settings, &target, open, &out, &mut files);
    let (measured, failed) = match result {
        Ok(s) => (s.points, s.failed),
        Err(e) => return fail(&e),
    };
    let cross = crossovers(&measured);
    print_crossovers(&out, &cross, &measured);
    print_threshold(&out, &cross, &args.force_form);
    if let Some((path, format, file)) = files.plot.as_mut() {
        let title = format!("rpcrdma sweep, {}", P::NAME);
        if let Err(e) = write_plot(&out, path, *format, file, &measured, &cross, &title) {
            return fail(&e);
        }
    }
    if !failed.is_empty() {
        return fail(&format!(
            "{} of {} repetition(s) failed (the FAILED lines); the rest were measured",
            failed.len(),
            failed.len() + measured.len()
        ));
    }
    ExitCode::SUCCESS
}

/// How each point runs, from the arguments.
fn settings(args: &Args) -> Settings {
    Settings {
        seconds: args.seconds,
        warmup: args.warmup,
        reps: args.reps.max(1),
        bulk_size: args.bulk_size,
        slot_bulk_size: args.slot_bulk_size,
        large_bufs: args.large_bufs,
        ack_timeout: args.ack_timeout,
        first_core: args.first_core,
        timeout: Duration::from_secs(5),
        client_threads: args.client_threads,
    }
}

/// The server measured: `--connect`'s, or one in this process at `--listen` (by default
/// `@rpcrdma-sweep.PID` on soft, this process's id keeping sweeps apart, and port 20100 on
/// verbs).
fn target(args: &Args) -> Target {
    match &args.connect {
        Some(a) => Target::Connect(a.clone()),
        None => Target::InProcess(args.listen.clone().unwrap_or_else(|| {
            let soft_name = format!("rpcrdma-sweep.{}", std::process::id());
            args.provider.local_addr(&soft_name, 20100)
        })),
    }
}

/// The files a sweep writes: the points as JSON lines and as CSV rows, and the plot.
struct Files<'a> {
    /// `--json`'s.
    json: Option<Box<dyn Write>>,
    /// `--csv`'s, its header written.
    csv: Option<Box<dyn Write>>,
    /// `--plot`'s: its name, its format and the file, written at the end.
    plot: Option<(&'a Path, plot::Format, File)>,
}

impl<'a> Files<'a> {
    /// Creates every file asked for (the plot's too, so that a name that cannot be written
    /// fails before the run rather than after it) and writes the CSV header.
    fn create(args: &Args, plot: Option<(&'a Path, plot::Format)>) -> Result<Files<'a>, String> {
        let json = args.json.as_ref().map(create).transpose()?;
        let mut csv = args.csv.as_ref().map(create).transpose()?;
        let plot = match plot {
            Some((path, format)) => match File::create(path) {
                Ok(f) => Some((path, format, f)),
                Err(e) => return Err(format!("{}: {e}", path.display())),
            },
            None => None,
        };
        if let Some(c) = csv.as_mut() {
            if writeln!(c, "{}", Point::csv_header()).is_err() {
                return Err("writing the CSV file".into());
            }
        }
        Ok(Files { json, csv, plot })
    }
}

/// Runs the sweep under a progress bar: each repetition measured printed as a row of the
/// table and written to the JSON and CSV files, each failed one printed on standard error
/// and written to the JSON; the files flushed at the end. An error stops the sweep or
/// failed to write.
fn sweep_shown<P: Provider>(
    points: &[PointConfig],
    settings: &Settings,
    target: &Target,
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    out: &Out,
    files: &mut Files<'_>,
) -> Result<sweep::Swept, String>
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    let total = (points.len() * settings.reps as usize) as u64;
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "sweep [{bar:40}] {pos}/{len} points, {elapsed} ({eta} left) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.suspend(|| out.line(&header()));
    let (json, csv) = (&mut files.json, &mut files.csv);
    let mut write_error = None;
    let result = sweep::run::<P>(points, settings, target, open, |_, step| {
        bar.inc(1);
        match step {
            Step::Measured(p) => {
                bar.suspend(|| out.line(&row(p)));
                bar.set_message(report::label(&p.config));
                if let Some(j) = json.as_mut() {
                    if writeln!(j, "{}", p.to_json()).is_err() {
                        write_error.get_or_insert("writing the JSON file");
                    }
                }
                if let Some(c) = csv.as_mut() {
                    if writeln!(c, "{}", p.csv_row()).is_err() {
                        write_error.get_or_insert("writing the CSV file");
                    }
                }
            }
            Step::Failed(f) => {
                // On standard error, whichever way the table goes.
                bar.suspend(|| eprintln!("{}", failure_line(f)));
                // In the JSON beside the points (read back, it is skipped); the CSV holds
                // measurements only.
                if let Some(j) = json.as_mut() {
                    if writeln!(j, "{}", f.to_json()).is_err() {
                        write_error.get_or_insert("writing the JSON file");
                    }
                }
            }
        }
    });
    bar.finish_and_clear();
    for w in [json.as_mut(), csv.as_mut()].into_iter().flatten() {
        if w.flush().is_err() {
            write_error.get_or_insert("flushing an output file");
        }
    }
    let swept = result.map_err(|e| e.to_string())?;
    match write_error {
        Some(e) => Err(e.to_string()),
        None => Ok(swept),
    }
}

/// Prints each crossover: the size from which the chunked form was at least as fast as
/// inline, or that inline won at every size compared (and whether larger sizes were swept
/// that could not be compared).
fn print_crossovers(out: &Out, cross: &[Crossover], measured: &[Point]) {
    for c in cross {
        out.line(&match c.size {
            Some(s) => format!(
                "crossover: {} at inline {}: chunked at least as fast as inline from {s} B",
                c.config.op, c.config.inline
            ),
            None => {
                let largest = c.compared.last().map_or(0, |x| x.0);
                let swept = measured
                    .iter()
                    .filter(|p| p.config.op == c.config.op)
                    .map(|p| p.config.size)
                    .max()
                    .unwrap_or(0);
                format!(
                    "crossover: {} at inline {}: inline faster at every size compared (up to {largest} B){}",
                    c.config.op,
                    c.config.inline,
                    if swept > largest {
                        "; larger sizes do not fit inline at this threshold: add a larger --inline to compare them"
                    } else {
                        ""
                    }
                )
            }
        });
    }
}

/// Prints the inline threshold the crossovers recommend, or why there is none
/// (`force_form`: the `--force-form` asked for).
fn print_threshold(out: &Out, cross: &[Crossover], force_form: &str) {
    match recommended_threshold(cross) {
        Some(t) => out.line(&format!(
            "recommended inline threshold for this fabric: {}{} B (RFC 8797 Send/Receive size){}",
            if t.at_least { "at least " } else { "" },
            t.bytes,
            if t.at_least {
                "; inline won at every size compared: sweep larger sizes, with an --inline that holds them, to find the crossover"
            } else {
                ""
            }
        )),
        None if force_form.contains("short") && force_form.contains("chunked") => {
            out.line("no size was measured in both the short and the chunked form")
        }
        None => out.line("(add --force-form short,chunked to find the inline threshold)"),
    }
}

/// Draws the plot into `file` (at `path`) and says where it is; with nothing to plot (no
/// point with a payload), removes the file and says so.
fn write_plot(
    out: &Out,
    path: &Path,
    format: plot::Format,
    file: &mut File,
    measured: &[Point],
    cross: &[Crossover],
    title: &str,
) -> Result<(), String> {
    match plot::render(format, measured, cross, title) {
        Ok(body) => {
            if let Err(e) = file.write_all(body.as_bytes()) {
                return Err(format!("writing the plot: {e}"));
            }
            out.line(&format!("plot: {}", path.display()));
        }
        Err(plot::PlotError::Nothing) => {
            let _ = std::fs::remove_file(path);
            out.line("plot: nothing to plot (no payload)");
        }
        Err(e) => return Err(e.to_string()),
    }
    Ok(())
}

/// The line printed on standard error for a repetition whose RPCs failed.
fn failure_line(f: &sweep::Failure) -> String {
    format!(
        "FAILED {} rep {}: {}",
        report::label(&f.config),
        f.rep,
        f.error
    )
}

fn fail(e: &str) -> ExitCode {
    eprintln!("sweep: {e}");
    ExitCode::FAILURE
}
