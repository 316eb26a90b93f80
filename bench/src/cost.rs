//! `rpcrdma bench cost`: instructions per RPC, which do not depend on the host's fast or
//! slow phase as timings do.
//!
//! One thread drives an in-process soft pair (a [`Client`] and its [`ServerConn`]) through
//! a fixed count of RPCs of one [`Form`] at depth 1: the client submits, the server polls
//! until the client's poll sees the reply. The client's and the server's parts run inside
//! the marker functions below, which an instruction counter is switched on around: callgrind
//! (`--toggle-collect`, the counter of machines without a hardware one, such as these VMs
//! and CI) counts the instructions executed inside them ([`callgrind_totals`] reads its
//! output). The application's own data work (making and checking the bulk payload's
//! pattern, in the client's checks and the server's handlers) runs in functions toggled
//! too, which switches the count off while they run: what is counted is the engine and the
//! fabric provider.
//!
//! A committed figure per form ([`Figure`]) lets `make test` fail when a change makes a
//! form more than [`GUARD_PERCENT`] dearer ([`compare`]).

use std::time::Duration;

use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::program;
use rpcrdma_engine::proto::plan::{CallForm, Forced};
use rpcrdma_engine::requester::{CallArgs, Client, Completion, SubmitError};
use rpcrdma_engine::responder::ServerConn;
use rpcrdma_engine::stats::Snapshot;
use serde::{Deserialize, Serialize};

use crate::workload::{Prepared, Workload};

/// How much dearer than its committed figure a form may grow before the guard fails.
pub const GUARD_PERCENT: f64 = 3.0;

/// RPCs run, uncounted, before the counted ones: the pools, rings and caches of the pair
/// reach their steady state (a Call's first use of a slot dresses it, say).
const WARMUP: u32 = 300;

/// One message form measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Form {
    /// Its name in tables and JSON (`op`).
    pub op: &'static str,
    /// Payload bytes (`size`).
    pub size: u32,
    workload: Workload,
    forced: Forced,
}

/// The forms measured, in the order reported: NULL; ECHO of 1 KiB; READ and WRITE of 4 KiB
/// and 64 KiB (a Write chunk and a Read chunk); an ECHO of 1 KiB sent as a Long Call (its
/// reply inline); an ECHO of 8 KiB, whose reply comes through the Reply chunk (its Call is
/// Long too: 8 KiB is past the inline threshold both ways).
pub fn forms() -> Vec<Form> {
    let plain = |op, size, workload| Form {
        op,
        size,
        workload,
        forced: Forced::default(),
    };
    vec![
        plain("null", 0, Workload::Null),
        plain("echo", 1024, Workload::Echo(1024)),
        plain("read", 4096, Workload::Read(4096)),
        plain("write", 4096, Workload::Write(4096)),
        plain("read", 65536, Workload::Read(65536)),
        plain("write", 65536, Workload::Write(65536)),
        Form {
            op: "long-call",
            size: 1024,
            workload: Workload::Echo(1024),
            forced: Forced {
                min_form: Some(CallForm::Long),
                reply_chunk: false,
            },
        },
        Form {
            op: "reply-chunk",
            size: 8192,
            workload: Workload::Echo(8192),
            forced: Forced::default(),
        },
    ]
}

impl Form {
    /// `op:size`, the name the child process is given.
    pub fn key(&self) -> String {
        format!("{}:{}", self.op, self.size)
    }

    /// The form named `key` ([`Form::key`]).
    pub fn by_key(key: &str) -> Option<Form> {
        forms().into_iter().find(|f| f.key() == key)
    }

    /// Its RPCs' arguments and checks.
    pub fn prepared(&self) -> Prepared {
        Prepared::new(self.workload).forced(self.forced, false)
    }
}

/// What a driven run saw: the server connection's counters over the counted RPCs, by
/// which the form is checked to be the one named (a Long Call counted as such, and so on).
#[derive(Clone, Copy, Debug)]
pub struct Driven {
    /// The server connection's counters before the counted RPCs.
    pub before: Snapshot,
    /// And after them.
    pub after: Snapshot,
}

/// Why a run could not be driven.
#[derive(Debug, PartialEq, Eq)]
pub enum DriveError {
    /// The soft pair could not be made.
    Setup(String),
    /// A Call was refused at submission.
    Submit(String),
    /// A reply failed its check (the message says which RPC and why).
    Reply(String),
    /// The server never answered (polls bounded).
    NoReply,
    /// The run did not use the message form it is named for.
    WrongForm(String),
}

impl core::fmt::Display for DriveError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DriveError::Setup(e) => write!(f, "setting up the soft pair: {e}"),
            DriveError::Submit(e) => write!(f, "submitting: {e}"),
            DriveError::Reply(e) => write!(f, "bad reply: {e}"),
            DriveError::NoReply => f.write_str("the server did not answer"),
            DriveError::WrongForm(e) => write!(f, "not the form measured: {e}"),
        }
    }
}

/// Polls of the server (each with a poll of the client) one RPC may take before the run
/// is given up: an answer takes two or three.
const MAX_TURNS: u32 = 10_000;

/// Marks the end of the warm-up: the counter run zeroes its counts on entering it
/// ([`ZERO_BEFORE`]), so that only the RPCs driven after it, which the counts are divided
/// by, are counted.
#[inline(never)]
pub fn cost_counting_starts() {
    std::hint::black_box(());
}

/// The `--zero-before` pattern of callgrind naming [`cost_counting_starts`].
pub const ZERO_BEFORE: &str = "*cost::cost_counting_starts*";

/// The client's submission, counted.
#[inline(never)]
pub fn cost_client_submit(
    c: &mut Client<Soft>,
    call: &CallArgs<'_>,
    prepared: &Prepared,
) -> Result<u32, SubmitError> {
    match prepared.in_place() {
        Some(n) => c.submit_in_place(call, 0, n, |dst| cost_app_data(prepared, dst)),
        None => c.submit(call, 0),
    }
}

/// The server connection's poll, counted.
#[inline(never)]
pub fn cost_server_poll(s: &mut ServerConn<Soft>) -> usize {
    s.poll()
}

/// The client's poll for completions, counted; the reply's check is not
/// ([`cost_app_check`]).
#[inline(never)]
pub fn cost_client_poll(
    c: &mut Client<Soft>,
    prepared: &Prepared,
    failure: &mut Option<String>,
) -> usize {
    c.poll_completions(|done| cost_app_check(prepared, &done, failure))
}

/// The application's making of a WRITE's payload: not counted (toggled off).
#[inline(never)]
pub fn cost_app_data(prepared: &Prepared, dst: &mut [u8]) {
    prepared.fill_bulk(dst);
}

/// The application's check of a reply's results: not counted (toggled off).
#[inline(never)]
pub fn cost_app_check(prepared: &Prepared, done: &Completion<'_>, failure: &mut Option<String>) {
    if let Err(e) = prepared.verify(&done.result) {
        failure.get_or_insert_with(|| format!("{e}"));
    }
}

/// The functions callgrind toggles its count on for the client's part, as
/// `--toggle-collect` patterns. The application's functions are among them: entered from a
/// counted function they switch the count off, and back on when they return.
pub const CLIENT_TOGGLES: &[&str] = &[
    "*cost::cost_client_submit*",
    "*cost::cost_client_poll*",
    "*cost::cost_app_data*",
    "*cost::cost_app_check*",
];

/// The same for the server's part: its poll, and the built-in program's data work.
pub const SERVER_TOGGLES: &[&str] = &["*cost::cost_server_poll*", "*program::data_work*"];

/// Drives `rpcs` counted RPCs of `form` (after `WARMUP` uncounted ones) on a fresh soft
/// pair in this thread, checking every reply.
pub fn drive(form: Form, rpcs: u32) -> Result<Driven, DriveError> {
    let cfg = ConnConfig {
        credits: 32,
        ..ConnConfig::default()
    };
    let (mut srv, addr) =
        soft_server(program::dispatch(), cfg).map_err(|e| DriveError::Setup(e.to_string()))?;
    let (mut c, mut s) =
        connect_to(&mut srv, &addr, cfg).map_err(|e| DriveError::Setup(e.to_string()))?;
    let prepared = form.prepared();
    let call = prepared.call_on(Duration::from_secs(5), c.negotiation());
    for _ in 0..WARMUP {
        one(&mut c, &mut s, &call, &prepared)?;
    }
    let before = s.snapshot();
    cost_counting_starts();
    for _ in 0..rpcs {
        one(&mut c, &mut s, &call, &prepared)?;
    }
    let driven = Driven {
        before,
        after: s.snapshot(),
    };
    check_form(form, &driven, u64::from(rpcs))?;
    Ok(driven)
}

/// One RPC, through the counted functions.
fn one(
    c: &mut Client<Soft>,
    s: &mut ServerConn<Soft>,
    call: &CallArgs<'_>,
    prepared: &Prepared,
) -> Result<(), DriveError> {
    let mut failure = None;
    let mut turns = 0;
    // A slot still held (its reply's window being invalidated, say) frees at a poll.
    while let Err(e) = cost_client_submit(c, call, prepared) {
        turns += 1;
        if !matches!(e, SubmitError::WouldBlock) || turns > MAX_TURNS {
            return Err(DriveError::Submit(format!("{e:?}")));
        }
        cost_server_poll(s);
        cost_client_poll(c, prepared, &mut failure);
    }
    for _ in 0..MAX_TURNS {
        cost_server_poll(s);
        if cost_client_poll(c, prepared, &mut failure) > 0 {
            return match failure {
                None => Ok(()),
                Some(e) => Err(DriveError::Reply(e)),
            };
        }
    }
    Err(DriveError::NoReply)
}

/// Whether the counters say every RPC took the form measured.
pub(crate) fn check_form(form: Form, d: &Driven, rpcs: u64) -> Result<(), DriveError> {
    let (a, b) = (&d.after, &d.before);
    let want = |what: &str, got: u64| {
        if got == rpcs {
            Ok(())
        } else {
            Err(DriveError::WrongForm(format!(
                "{what}: {got} of {rpcs} RPCs ({})",
                form.key()
            )))
        }
    };
    want("replies", a.rpcs - b.rpcs)?;
    match (form.op, form.workload) {
        ("long-call", _) => want("Long Calls", a.long_calls - b.long_calls),
        ("reply-chunk", _) => want("Long replies", a.long_replies - b.long_replies),
        (_, Workload::Read(_)) => want("Write chunks", a.write_chunks - b.write_chunks),
        (_, Workload::Write(_)) => want("chunked Calls", a.chunked_calls - b.chunked_calls),
        _ => want("Short Calls", a.short_calls - b.short_calls),
    }
}

/// Instructions counted by callgrind in one run, and the part of them spent in the fabric
/// provider's source files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// Every instruction counted.
    pub total: u64,
    /// Those whose source lies in the soft provider (`engine/src/fabric/soft/`).
    pub fabric: u64,
}

/// Reads a callgrind output file (one event, `Ir`): the summary, and the self cost of the
/// lines in the soft provider's files (inlined code is attributed to the file it was
/// written in, through `fi=`/`fe=`). The cost line after a `calls=` line is the call's
/// inclusive cost and is skipped (its callee's own lines count it).
pub fn callgrind_totals(text: &str) -> Result<Counted, String> {
    // File names by their compressed ids (functions are numbered apart and not needed).
    let mut files: std::collections::HashMap<String, String> = Default::default();
    // Resolves "(id) name" (defining) or "(id)" (referring) to the name.
    let resolve = |names: &mut std::collections::HashMap<String, String>, spec: &str| -> String {
        let spec = spec.trim();
        if let Some(rest) = spec.strip_prefix('(') {
            if let Some((id, name)) = rest.split_once(')') {
                let name = name.trim();
                if name.is_empty() {
                    return names.get(id).cloned().unwrap_or_default();
                }
                names.insert(id.to_string(), name.to_string());
                return name.to_string();
            }
        }
        spec.to_string()
    };
    let mut total = None;
    let mut file = String::new();
    let mut current = String::new();
    let mut fabric = 0u64;
    let mut skip_next = false;
    for line in text.lines() {
        if let Some(v) = line
            .strip_prefix("summary:")
            .or(line.strip_prefix("totals:"))
        {
            let n = v.split_whitespace().next().unwrap_or("");
            total = Some(n.parse::<u64>().map_err(|_| format!("bad total {v:?}"))?);
            continue;
        }
        if let Some(v) = line.strip_prefix("fl=") {
            file = resolve(&mut files, v);
            current = file.clone();
        } else if let Some(v) = line.strip_prefix("fi=").or(line.strip_prefix("fe=")) {
            current = resolve(&mut files, v);
        } else if line.starts_with("fn=") {
            // A new function's lines start in its own file.
            current = file.clone();
        } else if let Some(v) = line.strip_prefix("cfl=").or(line.strip_prefix("cfi=")) {
            // May name a file that a later `fl=` refers to by id only.
            let _ = resolve(&mut files, v);
        } else if line.starts_with("calls=") {
            skip_next = true;
        } else if line
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'+' || b == b'-' || b == b'*')
        {
            if std::mem::take(&mut skip_next) {
                continue;
            }
            if current.contains("/fabric/soft/") {
                let ir = line.split_whitespace().nth(1).unwrap_or("0");
                fabric += ir.parse::<u64>().unwrap_or(0);
            }
        }
    }
    let total = total.ok_or("no summary line in callgrind's output")?;
    Ok(Counted { total, fabric })
}

/// One form's figures, as `--json` prints them and the committed file holds them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The form's name ([`Form::op`]).
    pub op: String,
    /// Its payload bytes.
    pub size: u32,
    /// The client's instructions per RPC.
    pub client_instructions: f64,
    /// The server's instructions per RPC.
    pub server_instructions: f64,
    /// The part of both spent in the fabric provider, per RPC.
    pub fabric_instructions: f64,
    /// Client and server together, per RPC.
    pub instructions_per_rpc: f64,
}

impl Figure {
    /// The figures of `form` from its client and server runs of `rpcs` RPCs each.
    pub fn of(form: Form, client: Counted, server: Counted, rpcs: u32) -> Figure {
        let per = |n: u64| (n as f64 / f64::from(rpcs.max(1)) * 10.0).round() / 10.0;
        Figure {
            op: form.op.to_string(),
            size: form.size,
            client_instructions: per(client.total),
            server_instructions: per(server.total),
            fabric_instructions: per(client.fabric + server.fabric),
            instructions_per_rpc: per(client.total + server.total),
        }
    }
}

/// The committed figures (`bench/cost-figures.json`): the compiler that built what was
/// counted (another makes other code, and the check is then skipped) and each form's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Committed {
    /// `rustc --version` when they were counted.
    pub rustc: String,
    /// One per form.
    pub forms: Vec<Figure>,
}

/// A form that grew past the guard, or that the committed figures lack.
#[derive(Clone, Debug, PartialEq)]
pub enum Regression {
    /// `now` is more than [`GUARD_PERCENT`] over `committed`.
    Dearer {
        /// `op:size`.
        form: String,
        /// The committed instructions per RPC.
        committed: f64,
        /// Measured now.
        now: f64,
    },
    /// No committed figure for this form.
    Missing(String),
}

impl core::fmt::Display for Regression {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Regression::Dearer {
                form,
                committed,
                now,
            } => write!(
                f,
                "{form}: {now:.0} instructions per RPC, {:+.1}% over the committed {committed:.0} (at most +{GUARD_PERCENT}%)",
                (now / committed - 1.0) * 100.0
            ),
            Regression::Missing(form) => write!(f, "{form}: no committed figure"),
        }
    }
}

/// The forms of `now` that grew more than [`GUARD_PERCENT`] over `committed`, or that
/// `committed` lacks.
pub fn compare(committed: &[Figure], now: &[Figure]) -> Vec<Regression> {
    now.iter()
        .filter_map(|n| {
            let form = format!("{}:{}", n.op, n.size);
            match committed.iter().find(|c| c.op == n.op && c.size == n.size) {
                None => Some(Regression::Missing(form)),
                Some(c)
                    if n.instructions_per_rpc
                        > c.instructions_per_rpc * (1.0 + GUARD_PERCENT / 100.0) =>
                {
                    Some(Regression::Dearer {
                        form,
                        committed: c.instructions_per_rpc,
                        now: n.instructions_per_rpc,
                    })
                }
                Some(_) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form drives, in the form it is named for, with every reply checked.
    #[test]
    fn every_form_drives_in_its_form() {
        for form in forms() {
            if let Err(e) = drive(form, 20) {
                panic!("{}: {e}", form.key());
            }
        }
    }

    /// The summary, the fabric's self cost through inlined files, and call costs skipped.
    #[test]
    fn callgrind_output_is_read() {
        let text = "version: 1\nevents: Ir\n\
            fl=(1) /w/engine/src/requester/submit.rs\nfn=(1) submit\n10 100\n\
            fi=(2) /w/engine/src/fabric/soft/qp/post.rs\n20 30\n+1 5\n\
            fe=(1)\n11 7\n\
            cfl=(2)\ncfn=(2) post_send\ncalls=1 20\n12 999\n\
            fl=(2)\nfn=(2)\n20 40\n\
            summary: 182\n";
        let c = callgrind_totals(text).unwrap();
        assert_eq!(
            c,
            Counted {
                total: 182,
                fabric: 75
            }
        );
        assert!(callgrind_totals("events: Ir\n").is_err());
    }

    /// A form 3% dearer passes, 3.1% fails, a missing one fails.
    #[test]
    fn the_guard_allows_three_percent() {
        let fig = |op: &str, n: f64| Figure {
            op: op.into(),
            size: 0,
            client_instructions: n / 2.0,
            server_instructions: n / 2.0,
            fabric_instructions: 0.0,
            instructions_per_rpc: n,
        };
        let committed = [fig("null", 1000.0)];
        assert!(compare(&committed, &[fig("null", 1030.0)]).is_empty());
        assert_eq!(compare(&committed, &[fig("null", 1031.0)]).len(), 1);
        assert_eq!(
            compare(&committed, &[fig("echo", 10.0)]),
            vec![Regression::Missing("echo:0".into())]
        );
    }
}
