//! `rpcrdma bench cost`: instructions per RPC of each message form, counted by callgrind
//! around the client's and the server's parts of an in-process soft pair
//! (`rpcrdma_bench::cost`); `--check FILE` fails when a form grew more than 3% over the
//! committed figures, `--write FILE` writes them.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args as ClapArgs;
use rpcrdma_bench::cost::{self, Committed, Counted, Figure, Form};

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
    /// Internal: drive one form in this process (run under callgrind by the parent).
    #[arg(long, hide = true, value_name = "OP:SIZE")]
    child: Option<String>,
}

/// Runs the benchmark (or, with `--child`, one form's driven RPCs).
pub fn run(args: &Args) -> ExitCode {
    if let Some(key) = &args.child {
        return child(key, args.rpcs);
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
    let mut figures = Vec::with_capacity(forms.len());
    for form in forms {
        let counted = count(form, args.rpcs, cost::CLIENT_TOGGLES)
            .and_then(|c| Ok((c, count(form, args.rpcs, cost::SERVER_TOGGLES)?)));
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
    if args.json {
        match serde_json::to_string(&figures) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("bench cost: {e}");
                return ExitCode::from(2);
            }
        }
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

/// Runs this program's `--child` for `form` under callgrind, counting inside `toggles`.
fn count(form: Form, rpcs: u32, toggles: &[&str]) -> Result<Counted, String> {
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
    cmd.arg(&exe)
        .args(["bench", "cost", "--rpcs", &rpcs.to_string(), "--child"])
        .arg(form.key());
    let output = cmd.output().map_err(|e| format!("running valgrind: {e}"))?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !output.status.success() {
        return Err(format!(
            "the counted run failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let text = text.map_err(|e| format!("reading callgrind's output: {e}"))?;
    cost::callgrind_totals(&text)
}

/// Drives one form in this process.
fn child(key: &str, rpcs: u32) -> ExitCode {
    let Some(form) = Form::by_key(key) else {
        eprintln!("bench cost: no form {key:?}");
        return ExitCode::from(2);
    };
    match cost::drive(form, rpcs) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench cost: {key}: {e}");
            ExitCode::FAILURE
        }
    }
}
