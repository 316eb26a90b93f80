//! Hostile peers against the `rpcrdma serve` PROCESS on the soft fabric. Each test starts the
//! real binary (killed by its guard whatever happens), connects raw peers built in this
//! process directly on the engine's public fabric API, and sends what no well-behaved
//! requester sends: truncated and garbage transport headers, unsupported versions, chunk lists
//! with hostile counts, chunks naming bogus or too-short memory, more Calls than credits,
//! Calls followed by an abrupt disconnect, broken soft handshakes (including shared memory a
//! peer could still shrink), silent connections, and connection churn. After each case it
//! asserts the exact reply where RFC 8166 defines one (checked against the protocol crate's
//! verdict), that a torn-down connection gets no reply, and that the server process is alive
//! and still serves; at the end, that `rpcrdma call` NULL and ECHO succeed, that the server's
//! thread and descriptor counts are back to their baseline, and that SIGTERM stops it cleanly
//! with counters that match what was sent.
//!
//! Every wait is bounded; the tests take a lock so that one server runs at a time (each one
//! busy-polls a core).
//!
//! By concern: `messages` (malformed and random messages, each with its verdict),
//! `chunk_memory` (chunks naming bogus or too-short memory), `credits` (credit overruns, peers
//! gone mid-RPC), `handshakes` (broken and abandoned soft handshakes, silent and churning
//! connections), `versions` (a first message that does not decode as version 2 leaves the
//! connection's version open); the server process, the raw requester and the exchange they
//! share are here.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use rpcrdma_engine::fabric::soft::SoftAddr;
use rpcrdma_engine::fabric::{ConnectError, WcStatus};
use rpcrdma_proto::private_data;
use serde_json::Value;

#[path = "../serve_common/mod.rs"]
mod serve_common;
use serve_common::msg::*;
use serve_common::{connect_retrying, ConnOpts, RawConn, ServerProc};

mod chunk_memory;
mod credits;
mod handshakes;
mod messages;
mod versions;

/// How long any single expected event may take.
const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// The server process.

/// A running `rpcrdma serve` (the shared [`ServerProc`] guard, which it derefs to), warmed up
/// with its baseline taken.
struct Server(ServerProc);

impl Deref for Server {
    type Target = ServerProc;
    fn deref(&self) -> &ServerProc {
        &self.0
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut ServerProc {
        &mut self.0
    }
}

impl Server {
    /// Starts `rpcrdma serve` with `extra` arguments; returns once a raw connection is served
    /// (within 15 s) and `rpcrdma call` succeeds, with the baseline taken.
    fn start(tag: &str, extra: &[&str]) -> Server {
        let name = format!("rpcrdma-serve-hostile.{}.{tag}", std::process::id());
        let mut s = ServerProc::spawn(&name, 300, extra, Vec::new());
        // Ready when a raw connection is accepted.
        s.wait_ready(Duration::from_secs(15), |addr| {
            raw_try_connect(addr, 8)?.null_ok(1, "ready");
            Ok(())
        });
        // Warm up (first-use allocations and lazily started threads), then the baseline.
        s.good_calls("warm-up");
        s.baseline = s.steady();
        Server(s)
    }

    /// Everything a test ends with: alive, serving, back to the baseline (within 15 s); then
    /// SIGTERM stops it gracefully (exit status 0) and its final counters are returned.
    fn finish(mut self, what: &str) -> Value {
        self.good_calls(what);
        self.assert_back_to_baseline(what, Duration::from_secs(15));
        self.good_calls(what);
        let v = self.terminate(what);
        v["workers"][0]["counters"].clone()
    }
}

// ---------------------------------------------------------------------------------------
// A raw requester on the soft fabric: the shared `RawConn` with this file's settings.

/// Size of each receive buffer and send slot.
const SLOT: usize = 8192;
/// Bytes of the region advertised in chunks (remote read and write).
const DATA_LEN: usize = 1 << 20;

/// Connection settings of this file's raw requesters with `nrecv` receives.
fn raw_opts(nrecv: u32) -> ConnOpts {
    ConnOpts {
        device: "hostile",
        arena_bytes: 8 << 20,
        slot: SLOT,
        send_slots: 8,
        nrecv,
        recv_len: SLOT as u32,
        cq_depth: 1024,
        max_send_wr: 512,
        data_len: DATA_LEN,
        wait: WAIT,
        cq_overrun_ends: false,
    }
}

/// Connects a raw requester with `nrecv` receives of [`SLOT`] bytes and RFC 8797 private
/// data (8 KiB inline sizes, no remote invalidation: its chunks name a plain region).
fn raw_try_connect(addr: &SoftAddr, nrecv: u32) -> Result<RawConn, ConnectError> {
    let pdata = private_data::PrivateData::new(SLOT as u32, SLOT as u32, false).encode();
    RawConn::try_connect(addr, &raw_opts(nrecv), &pdata, |_| Ok(())).map(|(c, ())| c)
}

/// As [`raw_try_connect`], one attempt (at most [`WAIT`]): failing fails the test.
fn raw_connect(addr: &SoftAddr, nrecv: u32) -> RawConn {
    connect_retrying(Duration::ZERO, || raw_try_connect(addr, nrecv))
}

// ---------------------------------------------------------------------------------------
// Messages: the builders and reply checks shared with the engine's in-process hostile-peer
// tests (`msg`), and one exchange over a raw connection.

/// Sends `bytes`, checks the answer is exactly `e` (for a discard: the next message is the
/// reply to a NULL sent after it), and that the connection still serves a NULL.
fn exchange(c: &mut RawConn, name: &str, bytes: &[u8], grant: u32, e: Expect, probe: u32) {
    assert_eq!(c.send(bytes, name), WcStatus::Success, "{name}: sent");
    if e != Expect::Discard {
        let m = c.expect(name);
        check_reply(name, &m, bytes, grant, e);
    }
    c.null_ok(probe, name);
}
