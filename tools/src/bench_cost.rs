//! `rpcrdma bench cost`: instructions per RPC of each message form, counted by callgrind
//! around the client's and the server's parts of an in-process soft pair
//! (`rpcrdma_bench::cost`); `--check FILE` fails when a form grew more than 3% over the
//! committed figures, `--write FILE` writes them.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args as ClapArgs;
use rpcrdma_bench::cost::{self, Committed, Figure, Form};
use rpcrdma_bench::footprint::{self, Footprint};

/// `rpcrdma bench cost` options.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Print JSON (one object per form) instead of a table.
    #[arg(long)]
    json: bool,
    /// Counted RPCs per form (after 300 uncounted ones).
    #[arg(long, default_value_t = 2000)]
    rpcs: u32,
    /// Compare with the figures committed in FILE: exit status 1 when a form costs more
    /// than 3% over its figure.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// Write the figures measured to FILE (the committed figures are updated on purpose,
    /// in the commit that earns the change).
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
    /// Only the forms named (`op:size`, as `null:0` or `read:4096`), repeatable.
    #[arg(long = "form", value_name = "OP:SIZE")]
    forms: Vec<String>,
    /// Connections taking turns, each with one RPC in flight: what an RPC costs when a
    /// server serves many (`rpcrdma_bench::footprint`). Reported apart from the committed
    /// figures, which are those of one connection.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    conns: u32,
    /// Credits each connection asks for with `--conns` (its rings and pools are sized by
    /// them).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    credits: u32,
    /// With `--conns`: the server posts a receive queue per connection instead of sharing
    /// one (`rpcrdma serve --no-srq`; by default it shares one, as `serve` does).
    #[arg(long)]
    no_srq: bool,
    /// Simulate this host's core's caches too (callgrind `--cache-sim`) and report the
    /// misses of each level per RPC beside the instructions.
    #[arg(long)]
    cache: bool,
    /// Internal: drive one form in this process (run under callgrind by the parent).
    #[arg(long, hide = true, value_name = "OP:SIZE")]
    child: Option<String>,
}

impl Args {
    /// Whether the run is the many-connection one (`--conns` past 1, or `--cache`), reported
    /// apart from the committed figures.
    fn many(&self) -> bool {
        self.conns > 1 || self.cache
    }
}

/// Runs the benchmark (or, with `--child`, one form's driven RPCs).
pub fn run(args: &Args) -> ExitCode {
    if let Some(key) = &args.child {
        return child(key, args);
    }
    if !callgrind_available() {
        // These VMs have no hardware instruction counter (perf_event_open answers ENOENT
        // for PERF_COUNT_HW_INSTRUCTIONS), so callgrind is the only counter.
        eprintln!(
            "bench cost: SKIPPED: no instruction counter (valgrind's callgrind is not installed); nothing was checked"
        );
        return ExitCode::SUCCESS;
    }
    let forms: Vec<Form> = if args.forms.is_empty() {
        cost::forms()
    } else {
        let mut v = Vec::new();
        for k in &args.forms {
            match Form::by_key(k) {
                Some(f) => v.push(f),
                None => {
                    eprintln!("bench cost: no form {k:?}; the forms are {}", keys());
                    return ExitCode::from(2);
                }
            }
        }
        v
    };
    if args.no_srq && !args.many() {
        eprintln!("bench cost: --no-srq is for the runs of --conns or --cache (the figures of one connection use no shared receive queue)");
        return ExitCode::from(2);
    }
    if args.many() {
        if args.check.is_some() || args.write.is_some() {
            eprintln!("bench cost: --check and --write are for the figures of one connection, without --cache");
            return ExitCode::from(2);
        }
        return footprints(args, &forms);
    }
    let mut figures = Vec::with_capacity(forms.len());
    for form in forms {
        let counted = count_both(form, args, cost::callgrind_totals);
        match counted {
            Ok((client, server)) => {
                let f = Figure::of(form, client, server, args.rpcs);
                if !args.json {
                    eprintln!(
                        "{:<12} {:>6} B  client {:>8.1}  server {:>8.1}  fabric {:>8.1}  total {:>8.1}",
                        f.op,
                        f.size,
                        f.client_instructions,
                        f.server_instructions,
                        f.fabric_instructions,
                        f.instructions_per_rpc
                    );
                }
                figures.push(f);
            }
            Err(e) => {
                eprintln!("bench cost: {}: {e}", form.key());
                return ExitCode::from(2);
            }
        }
    }
    if args.json && !print_json(serde_json::to_string(&figures)) {
        return ExitCode::from(2);
    }
    if let Some(path) = &args.write {
        let committed = Committed {
            rustc: rustc_version(),
            forms: figures.clone(),
        };
        let text = serde_json::to_string_pretty(&committed).unwrap_or_default() + "\n";
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("bench cost: writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
        eprintln!("bench cost: figures written to {}", path.display());
    }
    match &args.check {
        Some(path) => check(path, &figures),
        None => ExitCode::SUCCESS,
    }
}

/// The forms' names, for an error message.
fn keys() -> String {
    cost::forms()
        .iter()
        .map(Form::key)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Compares with the committed figures in `path`.
fn check(path: &Path, figures: &[Figure]) -> ExitCode {
    let committed: Committed = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench cost: reading {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let rustc = rustc_version();
    if committed.rustc != rustc {
        // Another compiler makes other code: the counts are not comparable.
        eprintln!(
            "bench cost: SKIPPED the check: the figures in {} were counted with {}, this is {rustc}; nothing was checked",
            path.display(),
            committed.rustc
        );
        return ExitCode::SUCCESS;
    }
    let regressions = cost::compare(&committed.forms, figures);
    if regressions.is_empty() {
        eprintln!(
            "bench cost: every form within {}% of {}",
            cost::GUARD_PERCENT,
            path.display()
        );
        return ExitCode::SUCCESS;
    }
    for r in &regressions {
        eprintln!("bench cost: REGRESSION {r}");
    }
    eprintln!(
        "bench cost: update {} in the commit that earns the change (rpcrdma bench cost --write {})",
        path.display(),
        path.display()
    );
    ExitCode::from(1)
}

/// `rustc --version`, or "unknown".
fn rustc_version() -> String {
    Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Whether `valgrind --tool=callgrind` can be run.
fn callgrind_available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `--conns` or `--cache`: each form's instructions and simulated cache misses per RPC
/// over that many connections taking turns.
fn footprints(args: &Args, forms: &[Form]) -> ExitCode {
    let rounds = rounds(args);
    let rpcs = u64::from(rounds) * u64::from(args.conns);
    let mut all = Vec::with_capacity(forms.len());
    for &form in forms {
        let counted = count_both(form, args, footprint::callgrind_events);
        let (client, server) = match counted {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bench cost: {}: {e}", form.key());
                return ExitCode::from(2);
            }
        };
        let f = Footprint::of(form, args.conns, args.credits, client, server, rpcs);
        if !args.json {
            eprintln!(
                "{:<12} {:>6} B  {} conns, {} credits  client {:>8.1} instr {:>6.1} L1 {:>6.1} L2  server {:>8.1} instr {:>6.1} L1 {:>6.1} L2  (per RPC)",
                f.op,
                f.size,
                f.conns,
                f.credits,
                f.client_instructions,
                f.client_l1_misses,
                f.client_l2_misses,
                f.server_instructions,
                f.server_l1_misses,
                f.server_l2_misses
            );
        }
        all.push(f);
    }
    if args.json && !print_json(serde_json::to_string(&all)) {
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

/// Prints the figures encoded as JSON on standard output; false (said on standard error)
/// if they could not be encoded.
fn print_json(encoded: serde_json::Result<String>) -> bool {
    match encoded {
        Ok(s) => {
            println!("{s}");
            true
        }
        Err(e) => {
            eprintln!("bench cost: {e}");
            false
        }
    }
}

/// Counted rounds over `--conns` connections: `--rpcs` RPCs in all, at least one round.
fn rounds(args: &Args) -> u32 {
    (args.rpcs / args.conns).max(1)
}

/// The client's and the server's parts of `form`, each counted in a run of its own and read
/// from callgrind's output by `read`.
fn count_both<T>(
    form: Form,
    args: &Args,
    read: fn(&str) -> Result<T, String>,
) -> Result<(T, T), String> {
    let client = read(&count(form, args, cost::CLIENT_TOGGLES)?)?;
    let server = read(&count(form, args, cost::SERVER_TOGGLES)?)?;
    Ok((client, server))
}

/// Runs this program's `--child` for `form` under callgrind, counting inside `toggles`;
/// returns callgrind's output.
fn count(form: Form, args: &Args, toggles: &[&str]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let out = std::env::temp_dir().join(format!(
        "rpcrdma-cost-{}-{}.callgrind",
        std::process::id(),
        form.key().replace(':', "-")
    ));
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg("--quiet")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--collect-atstart=no")
        .arg(format!("--zero-before={}", cost::ZERO_BEFORE));
    for t in toggles {
        cmd.arg(format!("--toggle-collect={t}"));
    }
    if args.cache {
        cmd.args(footprint::CACHE_ARGS);
    }
    if args.conns > 1 {
        // Each connection is made by a client thread while the driving thread accepts and
        // spins: under valgrind's default scheduling that handover took seconds a
        // connection, with fair scheduling milliseconds.
        cmd.arg("--fair-sched=yes");
        // Every soft queue pair has a thread watching its connection's socket: two a
        // connection, beyond valgrind's default 500 threads at 250 connections.
        cmd.arg(format!("--max-threads={}", 4 * args.conns + 100));
    }
    cmd.arg(&exe)
        .args(["bench", "cost", "--rpcs", &args.rpcs.to_string()])
        .args(["--conns", &args.conns.to_string()])
        .args(["--credits", &args.credits.to_string()])
        .args(args.no_srq.then_some("--no-srq"))
        // The child drives the many-connection run (`Args::many`) for one connection too.
        .args(args.cache.then_some("--cache"))
        .arg("--child")
        .arg(form.key());
    let output = cmd.output().map_err(|e| format!("running valgrind: {e}"))?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !output.status.success() {
        // Its end says why (valgrind's own reports can run to thousands of lines).
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.trim().lines().collect();
        let tail = lines[lines.len().saturating_sub(12)..].join("\n");
        return Err(format!(
            "the counted run failed ({}): {tail}",
            output.status
        ));
    }
    text.map_err(|e| format!("reading callgrind's output: {e}"))
}

/// Drives one form in this process.
fn child(key: &str, args: &Args) -> ExitCode {
    let Some(form) = Form::by_key(key) else {
        eprintln!("bench cost: no form {key:?}");
        return ExitCode::from(2);
    };
    let driven = if args.many() {
        footprint::drive_many(form, args.conns, args.credits, !args.no_srq, rounds(args))
    } else {
        cost::drive(form, args.rpcs).map(|_| ())
    };
    match driven {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench cost: {key}: {e}");
            ExitCode::FAILURE
        }
    }
}
