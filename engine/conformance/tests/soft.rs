//! The fabric conformance suite on the soft provider: every pair case on queue pairs
//! connected directly and through Unix sockets, and the split cases with their ends in two
//! threads and in two processes.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use rpcrdma_conformance::{self as conformance, SoftEnv};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::Provider;

const T: Duration = Duration::from_secs(5);

fn run_case(env: &SoftEnv, name: &str) {
    let report = conformance::run_matching::<Soft, _>(env, name);
    let ran: Vec<_> = report.cases.iter().filter(|c| c.name == name).collect();
    assert_eq!(ran.len(), 1, "no case named {name}");
    assert!(ran[0].outcome.is_ok(), "{report}");
}

// One test per pair case on each kind of pair, from the suite's one list of cases.
macro_rules! conformance_tests {
    ($($case:ident),* $(,)?) => {
        const CASES: &[&str] = &[$(stringify!($case)),*];
        mod direct {
            $(#[test] fn $case() { super::run_case(&super::SoftEnv::direct(), stringify!($case)); })*
        }
        mod sockets {
            $(#[test] fn $case() { super::run_case(&super::SoftEnv::sockets(), stringify!($case)); })*
        }
    };
}

rpcrdma_conformance::for_each_case!(conformance_tests);

#[test]
fn run_all_reports_every_case() {
    let report = conformance::run_all::<Soft, _>(&SoftEnv::direct());
    assert_eq!(report.cases.len(), CASES.len());
    assert!(report.is_success(), "{report}");
    assert!(report
        .to_string()
        .ends_with(&format!("{} passed, 0 failed", CASES.len())));
}

// ---------------------------------------------------------------------------------------
// Split cases: threads and processes.
// ---------------------------------------------------------------------------------------

#[test]
fn split_cases_on_threads() {
    let dev = Soft::open_device(None).unwrap();
    let addr = SoftAddr::unique("split-threads");
    let mut listener = Soft::listen(&dev, &addr).unwrap();
    let stop = AtomicBool::new(false);
    let report = thread::scope(|s| {
        let passive = s.spawn(|| conformance::split_passive::<Soft>(&dev, &addr, T, &stop));
        let report = conformance::split_active::<Soft, _>(&dev, &mut listener, T, || {
            stop.store(true, Ordering::Relaxed);
        });
        passive.join().unwrap().unwrap();
        report
    });
    let names: Vec<_> = report.cases.iter().map(|c| c.name).collect();
    assert_eq!(names, conformance::SPLIT_ACTIVE_CASES, "{report}");
    assert!(report.is_success(), "{report}");
}

const CHILD_ENV: &str = "RPCRDMA_SOFT_SPLIT_CHILD";

/// Entry point of the child process of `split_cases_on_two_processes`; does nothing in a
/// normal test run.
#[test]
fn split_child_process() {
    let Ok(addr) = std::env::var(CHILD_ENV) else {
        return;
    };
    let addr: SoftAddr = addr.parse().unwrap();
    let dev = Soft::open_device(None).unwrap();
    let never = AtomicBool::new(false);
    // The parent kills this process; returning at all means the connection ended first.
    conformance::split_passive::<Soft>(&dev, &addr, Duration::from_secs(30), &never).unwrap();
}

struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn_child(addr: &SoftAddr) -> KillOnDrop {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--exact",
            "split_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    KillOnDrop(Some(child))
}

#[test]
fn split_cases_on_two_processes() {
    let dev = Soft::open_device(None).unwrap();
    let addr = SoftAddr::unique("split-processes");
    let mut listener = Soft::listen(&dev, &addr).unwrap();
    let mut child = spawn_child(&addr);
    let report = conformance::split_active::<Soft, _>(&dev, &mut listener, T, || child.kill());
    assert_eq!(report.cases.len(), 3, "{report}");
    assert!(report.is_success(), "{report}");
}
