//! `rpcrdma bench cost --conns N --cache`: what an RPC costs when many connections take
//! turns, counted rather than timed: instructions, and the misses of a simulated cache
//! hierarchy sized as this host's core (callgrind's cache simulation).
//!
//! A server with a thousand connections, each with one RPC in flight, touches every
//! connection's state, rings and buffers once per RPC, a thousand connections apart: what
//! one connection keeps warm in its caches no longer fits, and the RPC pays in cache misses
//! what its instructions do not show. Timed, the effect drowns in this host's fast and slow
//! phases (1,000 connections at depth 1 measured anywhere from 117,000 to 550,000 null RPCs a
//! second within minutes); counted in a simulated cache, it is the same from run to run.
//!
//! One thread drives `N` client connections to one in-process soft server in rounds: every
//! client submits one RPC, every server connection is polled once (each answers its Call),
//! every client is polled for its reply. Between two touches of a connection's state lie
//! the other `N - 1` connections' RPCs, as in a worker serving `N` connections at depth 1.
//! The parts run inside the same marker functions as [`crate::cost`]'s, so callgrind counts
//! the client's and the server's parts apart.

use std::time::Duration;

use rpcrdma_engine::conn::{ConnConfig, ConnError};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr, SoftConfig, SoftDevice};
use rpcrdma_engine::fabric::{Device, Provider};
use rpcrdma_engine::loopback::connect_on;
use rpcrdma_engine::program;
use rpcrdma_engine::requester::{CallArgs, Client, SubmitError};
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::stats::Snapshot;
use serde::{Deserialize, Serialize};

use crate::cost::{
    check_form, cost_client_poll, cost_client_submit, cost_counting_starts, cost_server_poll,
    DriveError, Driven, Form,
};
use crate::workload::Prepared;

/// Rounds run before the counted ones, at least (every connection's pools and rings in
/// use); a run of few connections takes more, up to the single pair's 300 RPCs.
const MIN_WARMUP_ROUNDS: u32 = 3;

/// Bytes of each client's arena (address space; pages are taken as used): room for a
/// connection's receives, send buffers and the 64 KiB READs' and WRITEs' chunk memory.
const CLIENT_ARENA: usize = 16 << 20;

/// The server's shared bulk buffers: `rpcrdma serve`'s default `--bulk-pool` of one worker.
const SERVER_BULK_POOL: u64 = 64 << 20;

/// Polls of every server and client one round may take before the run is declared stuck.
const MAX_ROUND_TURNS: u32 = 1000;

/// The simulated caches (callgrind `--I1`, `--D1`, `--LL`): this host's core, an AMD EPYC
/// with 32 KiB first-level caches and 1 MiB of second level per core. Its last level (32
/// MiB, shared by both cores) is not simulated: callgrind models two levels, and the second
/// is the one that connections' working sets overflow first.
pub const CACHE_ARGS: &[&str] = &[
    "--cache-sim=yes",
    "--I1=32768,8,64",
    "--D1=32768,8,64",
    "--LL=1048576,8,64",
];

/// Drives `rounds` counted rounds of `form` over `conns` connections with `credits`
/// credits each (after the warm-up rounds), checking every reply and, by the server
/// connections' counters, that every RPC took the form named (as [`crate::cost::drive`]).
pub fn drive_many(
    form: Form,
    conns: u32,
    credits: u32,
    srq: bool,
    rounds: u32,
) -> Result<(), DriveError> {
    let cfg = ConnConfig {
        credits,
        ..ConnConfig::default()
    };
    let setup = |e: ConnError| DriveError::Setup(e.to_string());
    // The server as `rpcrdma serve` makes it with one worker: shared bulk buffers, and a
    // shared receive queue unless `srq` is false.
    // The device is opened once: for its shared receive queues' size, then for the server.
    let server_device = Soft::open_device(None).map_err(|e| DriveError::Setup(e.to_string()))?;
    let srv_cfg = cfg
        .for_server(
            1,
            SERVER_BULK_POOL,
            server_device.attr().max_srq_wr,
            Some(srq),
        )
        .map_err(setup)?;
    let addr = SoftAddr::unique("rpc");
    let mut srv =
        Server::listen(server_device, &addr, program::dispatch(), srv_cfg).map_err(setup)?;
    let mut clients = Vec::with_capacity(conns as usize);
    let mut servers = Vec::with_capacity(conns as usize);
    // Each client has a protection domain of its own: arenas of the default 16 GiB of
    // address space each would not fit a thousand of them under callgrind.
    let device = SoftDevice::with_config(
        "soft0",
        SoftConfig {
            arena_bytes: CLIENT_ARENA,
            ..SoftConfig::default()
        },
    );
    for _ in 0..conns {
        let (c, s) = connect_on(device.clone(), &mut srv, &addr, cfg).map_err(setup)?;
        clients.push(c);
        servers.push(s);
    }
    let Some(first) = clients.first() else {
        return Err(DriveError::Setup("no connection to drive".into()));
    };
    let prepared = form.prepared();
    let call = prepared.call_on(Duration::from_secs(30), first.negotiation());
    let warmup = MIN_WARMUP_ROUNDS.max(300 / conns);
    let mut round = Round {
        clients: &mut clients,
        servers: &mut servers,
        prepared: &prepared,
        done: vec![false; conns as usize],
    };
    for _ in 0..warmup {
        round.run(&call)?;
    }
    let before = round.counters();
    cost_counting_starts();
    for _ in 0..rounds {
        round.run(&call)?;
    }
    let driven = Driven {
        before,
        after: round.counters(),
    };
    check_form(form, &driven, u64::from(rounds) * u64::from(conns))
}

/// The connections of a run and what their RPCs send.
struct Round<'a> {
    clients: &'a mut [Client<Soft>],
    servers: &'a mut [ServerConn<Soft>],
    prepared: &'a Prepared,
    /// Which clients have their reply this round.
    done: Vec<bool>,
}

impl Round<'_> {
    /// The server connections' counters, added up.
    fn counters(&self) -> Snapshot {
        let mut all = Snapshot::default();
        for s in self.servers.iter() {
            all.add(&s.snapshot());
        }
        all
    }

    /// One RPC on every connection: all submitted, all answered, all replies taken.
    fn run(&mut self, call: &CallArgs<'_>) -> Result<(), DriveError> {
        let mut failure = None;
        for (c, s) in self.clients.iter_mut().zip(self.servers.iter_mut()) {
            let mut turns = 0;
            // A slot still held (a window being invalidated) frees at a poll.
            while let Err(e) = cost_client_submit(c, call, self.prepared) {
                turns += 1;
                if !matches!(e, SubmitError::WouldBlock) || turns > MAX_ROUND_TURNS {
                    return Err(DriveError::Submit(format!("{e:?}")));
                }
                cost_server_poll(s);
                cost_client_poll(c, self.prepared, &mut failure);
            }
        }
        for s in self.servers.iter_mut() {
            cost_server_poll(s);
        }
        let mut waiting: usize = self.clients.len();
        let done = &mut self.done;
        done.fill(false);
        for _ in 0..MAX_ROUND_TURNS {
            for (i, c) in self.clients.iter_mut().enumerate() {
                if !done[i] && cost_client_poll(c, self.prepared, &mut failure) > 0 {
                    done[i] = true;
                    waiting -= 1;
                }
            }
            if let Some(e) = failure {
                return Err(DriveError::Reply(e));
            }
            if waiting == 0 {
                return Ok(());
            }
            // A reply not there yet (a Read or a Write still to be done): the servers again.
            for s in self.servers.iter_mut() {
                cost_server_poll(s);
            }
        }
        Err(DriveError::NoReply)
    }
}

/// What callgrind counted in one run with its cache simulation: instructions and the
/// misses of each simulated level, instruction fetches and data together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events {
    /// Instructions executed (`Ir`).
    pub instructions: u64,
    /// First-level misses (`I1mr + D1mr + D1mw`).
    pub l1_misses: u64,
    /// Second-level misses (`ILmr + DLmr + DLmw`).
    pub l2_misses: u64,
}

/// Reads the `events:` line and the `summary:` (or `totals:`) line of a callgrind output
/// run with `--cache-sim=yes`.
pub fn callgrind_events(text: &str) -> Result<Events, String> {
    let mut names: Vec<&str> = Vec::new();
    let mut values: Option<Vec<u64>> = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("events:") {
            names = v.split_whitespace().collect();
        } else if let Some(v) = line
            .strip_prefix("summary:")
            .or(line.strip_prefix("totals:"))
        {
            let parsed: Result<Vec<u64>, _> = v.split_whitespace().map(str::parse).collect();
            values = Some(parsed.map_err(|_| format!("bad summary {v:?}"))?);
        }
    }
    let values = values.ok_or("no summary line in callgrind's output")?;
    let get = |name: &str| -> Result<u64, String> {
        let i = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("callgrind counted no {name} (was --cache-sim=yes given?)"))?;
        // A summary may end early: the events after its last value are zero.
        Ok(values.get(i).copied().unwrap_or(0))
    };
    Ok(Events {
        instructions: get("Ir")?,
        l1_misses: get("I1mr")? + get("D1mr")? + get("D1mw")?,
        l2_misses: get("ILmr")? + get("DLmr")? + get("DLmw")?,
    })
}

/// One form's figures over many connections, per RPC, as `--json` prints them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Footprint {
    /// The form's name ([`Form::op`]).
    pub op: String,
    /// Its payload bytes.
    pub size: u32,
    /// Connections taking turns.
    pub conns: u32,
    /// Credits each connection asked for (its rings and pools are sized by them).
    pub credits: u32,
    /// The client's instructions per RPC.
    pub client_instructions: f64,
    /// The server's.
    pub server_instructions: f64,
    /// The client's first-level cache misses per RPC.
    pub client_l1_misses: f64,
    /// The client's second-level misses per RPC.
    pub client_l2_misses: f64,
    /// The server's first-level misses per RPC.
    pub server_l1_misses: f64,
    /// The server's second-level misses per RPC.
    pub server_l2_misses: f64,
}

impl Footprint {
    /// The figures of `form` from its client and server runs of `rpcs` RPCs each.
    pub fn of(
        form: Form,
        conns: u32,
        credits: u32,
        client: Events,
        server: Events,
        rpcs: u64,
    ) -> Footprint {
        let per = |n: u64| (n as f64 / rpcs.max(1) as f64 * 10.0).round() / 10.0;
        Footprint {
            op: form.op.to_string(),
            size: form.size,
            conns,
            credits,
            client_instructions: per(client.instructions),
            server_instructions: per(server.instructions),
            client_l1_misses: per(client.l1_misses),
            client_l2_misses: per(client.l2_misses),
            server_l1_misses: per(server.l1_misses),
            server_l2_misses: per(server.l2_misses),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_connections_drive_every_form() {
        for srq in [true, false] {
            for form in crate::cost::forms() {
                drive_many(form, 5, 8, srq, 4)
                    .unwrap_or_else(|e| panic!("{} (srq {srq}): {e}", form.key()));
            }
        }
    }

    #[test]
    fn no_connection_is_a_setup_error() {
        let form = crate::cost::forms()[0];
        assert!(matches!(
            drive_many(form, 0, 8, true, 4),
            Err(DriveError::Setup(_))
        ));
    }

    #[test]
    fn callgrind_cache_events_are_read() {
        let text = "version: 1\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n\
                    fl=(1) a.rs\nfn=(1) f\n1 10 2 3 1 1 0 1 0 0\n\
                    summary: 5000 900 400 7 30 20 2 10 5\n";
        let e = callgrind_events(text).unwrap();
        assert_eq!(
            e,
            Events {
                instructions: 5000,
                l1_misses: 57,
                l2_misses: 17
            }
        );
        // Without the cache simulation there is nothing to report.
        let err = callgrind_events("events: Ir\nsummary: 5000\n").unwrap_err();
        assert!(err.contains("I1mr"), "{err}");
    }
}
