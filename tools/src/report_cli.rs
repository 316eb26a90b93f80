//! `rpcrdma report A.json B.json`: two sweeps compared point by point
//! (`rpcrdma_bench::report`); the exit status fails past `--max-regression` so that CI can
//! guard a NIC or a build.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;
use rpcrdma_bench::point::Point;
use rpcrdma_bench::report::compare;

/// `rpcrdma report`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The reference run (`rpcrdma sweep --json FILE`).
    a: PathBuf,
    /// The run to judge.
    b: PathBuf,
    /// Percent by which B may be slower than A (median round trip up, or rate down) beyond
    /// the noise of the repetitions before the report fails.
    #[arg(long, default_value_t = 10.0)]
    max_regression: f64,
}

fn read(path: &PathBuf) -> Result<Vec<Point>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Point::read_all(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `rpcrdma report`: exit status 0 when nothing regressed, 1 when something did, 2 when
/// a file cannot be read.
pub fn run(args: &Args) -> ExitCode {
    let (a, b) = match (read(&args.a), read(&args.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("report: {e}");
            return ExitCode::from(2);
        }
    };
    let r = compare(&a, &b, args.max_regression);
    print!("{}", r.render());
    if r.rows.is_empty() {
        eprintln!("report: the two runs have no configuration in common");
        return ExitCode::from(2);
    }
    if r.regressions().next().is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
