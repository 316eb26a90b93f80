//! A seeded, randomized hostile-peer campaign against the `rpcrdma serve` PROCESS on the soft
//! fabric. Where `serve_hostile.rs` sends hand-picked bad messages, this test generates them:
//! structured RPC-over-RDMA messages (RDMA_MSG, RDMA_NOMSG, RDMA_MSGP, RDMA_DONE, RDMA_ERROR and
//! unknown procedures) carrying RPC Calls for every procedure of the built-in program with
//! random, garbage or truncated arguments and credentials, Read lists at random positions whose
//! segments name really registered memory, partly registered memory, read-only or
//! unexposed memory, stale and bogus rkeys, zero and huge lengths; Write lists of several
//! chunks of several segments, empty and too-small chunks; Reply chunks too small or absent;
//! then random mutations of all of that. Beside the message stream it runs credit overruns
//! (bursts beyond the grant), abrupt disconnects with RDMA Reads and Writes in flight,
//! connection churn, and peers whose receive side misbehaves (receives smaller than they
//! advertised, none reposted, Send With Invalidate naming bogus rkeys) — on several
//! connections at once.
//!
//! The oracle of each message is a model of the responder (`predict`): the protocol crate's
//! verdict (`judge_call`) for the transport, then the RPC layer and the built-in program's
//! semantics, the chunk placement rules (RFC 8166 §3.4.5, §3.4.6, §3.5.3, §4.3, §4.5.3) and
//! the peer's own memory map (which rkey names which bytes with which rights). It predicts
//! either the exact bytes of the reply Send and the exact bytes the server writes into the
//! peer's memory, or silence (a discard, checked with a NULL probe), or the teardown of that
//! connection without a reply (chunk errors only the RDMA operation finds, §4.5.3, a Send
//! larger than the receive). After each message the peer's whole exposed region must equal
//! the model's copy: nothing written outside the chunks, no XDR pad written.
//!
//! After each batch the server process must be alive, serve a fresh connection (NULL and
//! ECHO), and its threads and descriptors must return to their baseline; its resident memory
//! must stay within a fixed bound of the warmed-up value. Between batches: peers whose
//! connection the server tore down but which keep their end open (the server must let go at
//! once), and requester processes killed with SIGKILL in the middle of streaming Calls. At
//! the end `rpcrdma call` must succeed and SIGTERM, with hostile connections still open (no
//! receives, RDMA Reads just posted, a completion queue never polled, a silent socket, half a
//! handshake), must stop the server cleanly, with counters at least what the peers saw.
//!
//! Two bugs this campaign found stay checked: RDMA Writes of earlier results posted before a
//! later Write chunk or the Reply chunk turned the reply into ERR_CHUNK (the fixed cases, and
//! every modelled ERR_CHUNK, expect no write at all), and connections of requesters killed in
//! the middle of a Send never released (`killed_mid_send` expects every one released; the
//! ignored `killed_senders_never_exhaust_the_server` kills hundreds on demand).
//!
//! The default run is short with a fixed seed. `RPCRDMA_FUZZ_ITERS` (batches, default
//! [`DEFAULT_BATCHES`]), `RPCRDMA_FUZZ_SEED` (decimal or 0x-hex) and `RPCRDMA_FUZZ_CONFIG`
//! (an index into [`CONFIGS`], or `all`) scale it into a campaign. A failure names the seed,
//! the batch, the connection and the message index, and prints the message bytes; the
//! sequential batches reproduce exactly with the same seed (concurrent ones up to timing).
//!
//! Every wait is bounded, nothing asserts a duration, and one server runs at a time.

use std::collections::HashMap;
use std::io::Write;
use std::ops::{Deref, DerefMut, Range};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::fabric::soft::{SoftAddr, SoftMr};
use rpcrdma_engine::fabric::{
    Access, ConnectError, MemoryRegion, ProtectionDomain, QueuePair, WcStatus,
};
use rpcrdma_engine::program::{
    fill_pattern, is_pattern, opaque_len, ECHO, MAX_ECHO, MULTI, NULL, PROG, READ, VERS,
    VERS_TIMED, WRITE,
};
use rpcrdma_proto::chunks::{match_results, place_reply, place_write, Placement, ResultTarget};
use rpcrdma_proto::header::{Body, Chunks, Header, HeaderView, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::plan::{plan_reply, ReplyForm};
use rpcrdma_proto::private_data::PrivateData;
use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth, ReplyHeader, RpcMessage, AUTH_SYS};
use rpcrdma_proto::verdict::{judge_call, Action};
use serde_json::Value;

mod serve_common;
use serve_common::msg::{self, null_call, rpc_reply, set_word, w, Rng};
use serve_common::{
    connect_retrying, describe, hex, serial, unix_connect, ConnOpts, RawConn, ServerProc,
};

/// Batches of the default run.
const DEFAULT_BATCHES: u64 = 8;
/// The default run's seed.
const DEFAULT_SEED: u64 = 0x5eed_f022_0b5e_7701;
/// Sequential messages per connection in one batch.
const MSGS_PER_BATCH: u64 = 120;
/// How long any single expected event may take (generous: the machine may have two cores
/// shared by the busy-polling server and up to four busy peers).
const WAIT: Duration = Duration::from_secs(10);
/// A server is replaced after this long (it is started with a larger `--seconds`).
const SERVER_TURN: Duration = Duration::from_secs(240);
/// The server's own bound on its life, in seconds.
const SERVER_SECONDS: u32 = 600;
/// Resident memory the server may keep above its warmed-up value after any batch.
const RSS_SLACK_KB: u64 = 96 * 1024;

// ---------------------------------------------------------------------------------------
// Settings.

/// A server configuration the campaign runs against.
#[derive(Clone, Copy, Debug)]
struct Cfg {
    name: &'static str,
    /// `--inline`: the server's Send and Receive sizes.
    inline: u32,
    /// `--bulk-size`: its pull and bulk buffers.
    bulk: u32,
    /// `--credits`: its receives and grant.
    credits: u32,
    persistent: bool,
    /// `--workers`.
    workers: u32,
}

const CONFIGS: [Cfg; 5] = [
    Cfg {
        name: "default",
        inline: 4096,
        bulk: 1 << 20,
        credits: 32,
        persistent: false,
        workers: 1,
    },
    Cfg {
        name: "small",
        inline: 1024,
        bulk: 65536,
        credits: 8,
        persistent: false,
        workers: 1,
    },
    Cfg {
        name: "large-inline-persistent",
        inline: 8192,
        bulk: 262_144,
        credits: 64,
        persistent: true,
        workers: 1,
    },
    Cfg {
        name: "two-credits",
        inline: 4096,
        bulk: 131_072,
        credits: 2,
        persistent: false,
        workers: 1,
    },
    Cfg {
        name: "two-workers",
        inline: 4096,
        bulk: 1 << 20,
        credits: 16,
        persistent: false,
        workers: 2,
    },
];

impl Cfg {
    fn args(&self) -> Vec<String> {
        let mut v = vec![
            "--inline".to_string(),
            self.inline.to_string(),
            "--bulk-size".to_string(),
            self.bulk.to_string(),
            "--credits".to_string(),
            self.credits.to_string(),
            "--workers".to_string(),
            self.workers.to_string(),
        ];
        if self.persistent {
            v.push("--persistent".to_string());
        }
        v
    }

    /// The largest reply the server may Send to a peer that can receive `peer_recv` bytes
    /// (RFC 8797 §4.2).
    fn reply_threshold(&self, peer_recv: u32) -> u32 {
        self.inline.min(peer_recv)
    }

    /// Bytes of the bulk buffers each credit owns (`ConnConfig::slot_bulk`, the default
    /// `--slot-bulk-size`).
    fn own(&self) -> usize {
        (rpcrdma_engine::conn::DEFAULT_SLOT_BULK_SIZE as usize).clamp(4096, self.bulk as usize)
    }

    /// Whether the connection shares large buffers of `bulk` bytes (`responder/large.rs`).
    fn shares(&self) -> bool {
        self.own() < self.bulk as usize
    }

    /// Bytes of the reply buffer the Call `h` is answered in (`ServerConn::accept`, and a
    /// large buffer for a Reply chunk larger than a ring entry).
    fn ring_len(&self, h: &HeaderView<'_>) -> usize {
        let entry = self.inline as usize + 1024;
        if !self.shares() {
            return self.inline.max(self.bulk) as usize + 1024;
        }
        match h.reply_chunk() {
            Some(rc) if rc.total_len() + 1024 > entry as u64 => self.bulk as usize,
            _ => entry,
        }
    }

    /// Bytes of the bulk buffer the Call `h`'s DDP-eligible results go to: the credit's
    /// own, or a large one when its Write chunks (64 bytes of alignment each) are larger.
    fn bulk_cap(&self, h: &HeaderView<'_>) -> usize {
        if !self.shares() {
            return self.bulk as usize;
        }
        let writes: u64 = h.write_list().iter().map(|c| c.total_len() + 64).sum();
        if writes > self.own() as u64 {
            self.bulk as usize
        } else {
            self.own()
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// A nonzero seed derived from `base` and `salt` (splitmix64).
fn derive(base: u64, salt: u64) -> u64 {
    let mut z = base ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z | 1
}

// ---------------------------------------------------------------------------------------
// The server process.

/// A running `rpcrdma serve` of one configuration (the shared [`ServerProc`] guard, which it
/// derefs to), warmed up, with its baseline and resident memory tracked.
struct Server {
    proc: ServerProc,
    cfg: Cfg,
    started: Instant,
    rss0: u64,
    rss_max: u64,
}

impl Deref for Server {
    type Target = ServerProc;
    fn deref(&self) -> &ServerProc {
        &self.proc
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut ServerProc {
        &mut self.proc
    }
}

impl Server {
    /// Starts `rpcrdma serve` with `cfg`; returns once a raw connection is served (within
    /// 20 s), `rpcrdma call` succeeds and a fresh connection gets NULL and ECHO answered
    /// exactly, with the baseline and the warmed-up resident memory taken.
    fn start(tag: &str, cfg: Cfg) -> Server {
        let name = format!("rpcrdma-serve-fuzz.{}.{tag}", std::process::id());
        let call_args = vec!["--inline".to_string(), cfg.inline.to_string()];
        let mut proc = ServerProc::spawn(&name, SERVER_SECONDS, cfg.args(), call_args);
        proc.wait_ready(Duration::from_secs(20), |addr| {
            Peer::try_connect(addr, PeerOpts::GOOD)?.null_ok(1, "ready");
            Ok(())
        });
        let mut s = Server {
            proc,
            cfg,
            started: Instant::now(),
            rss0: 0,
            rss_max: 0,
        };
        s.good_calls("warm-up");
        s.fresh_connection_serves("warm-up");
        s.baseline = s.steady();
        s.rss0 = s.rss_kb();
        s.rss_max = s.rss0;
        s
    }

    /// The server's resident memory, KiB.
    fn rss_kb(&self) -> u64 {
        self.status_field("VmRSS:")
    }

    /// Threads and descriptors back to the baseline (bounded wait), resident memory within
    /// its bound.
    fn assert_settled(&mut self, what: &str) {
        self.assert_back_to_baseline(what, Duration::from_secs(20));
        let rss = self.rss_kb();
        self.rss_max = self.rss_max.max(rss);
        assert!(
            rss <= self.rss0 + RSS_SLACK_KB,
            "{what}: server resident memory {rss} KiB, warmed up {} KiB: grows without bound?",
            self.rss0
        );
    }

    /// A fresh raw connection gets NULL and ECHO answered exactly.
    fn fresh_connection_serves(&mut self, what: &str) {
        self.assert_alive(what);
        let mut p = Peer::connect(&self.soft_addr(), PeerOpts::GOOD);
        p.null_ok(0x7000_0001, what);
        let mut data = vec![0u8; 300];
        for (i, b) in data.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5c;
        }
        let mut args = 300u32.to_be_bytes().to_vec();
        args.extend_from_slice(&data);
        let m = msg::msg_call(0x7000_0002, Chunks::NONE, ECHO, &args);
        let want = model_answer(&m, &p, &self.cfg);
        assert!(matches!(want, Want::Reply(_)), "{what}: the model's ECHO");
        p.exchange(&m, &want, &format!("{what}: fresh ECHO"));
        p.null_ok(0x7000_0003, what);
    }

    /// Alive and serving, settled; then SIGTERM stops it with exit status 0; its workers'
    /// final statistics.
    fn finish(self, what: &str) -> Value {
        self.finish_holding(what, |_| Vec::new())
    }

    /// As [`finish`](Self::finish), with the peers `hold` opens (while the server is
    /// settled) still connected when SIGTERM comes.
    fn finish_holding(mut self, what: &str, hold: impl FnOnce(&Server) -> Vec<Held>) -> Value {
        self.good_calls(what);
        self.assert_settled(what);
        let held = hold(&self);
        let v = self.terminate(what);
        drop(held);
        v["workers"].clone()
    }
}

// ---------------------------------------------------------------------------------------
// A raw requester with its own memory map.

/// Bytes of each receive slot and send slot.
const SLOT: usize = 16384;
const SEND_SLOTS: usize = 16;
/// The region chunks name (remote read and write).
const DATA_LEN: usize = 1 << 20;
/// A region exposed for remote read only, and one not exposed at all.
const SIDE_LEN: usize = 65536;

/// How a [`Peer`] connects and what its receive side does.
#[derive(Clone, Copy, Debug)]
struct PeerOpts {
    nrecv: u32,
    /// Bytes of each receive actually posted (a lying peer posts less than it advertises).
    recv_len: u32,
    /// The RFC 8797 private data sent.
    pdata: Pdata,
    /// The R bit (remote invalidation).
    ri: bool,
    /// Completions the peer's completion queue holds.
    cq_depth: u32,
}

/// What a peer puts in its connection's private data.
#[derive(Clone, Copy, Debug)]
enum Pdata {
    /// RFC 8797 data advertising these Send and Receive sizes.
    Sizes(u32),
    /// None at all (RFC 8797 §5.1: 1024 bytes each way).
    Absent,
    /// 56 bytes that hold no RFC 8797 identifier (as absent).
    Junk,
}

impl PeerOpts {
    const GOOD: PeerOpts = PeerOpts {
        nrecv: 32,
        recv_len: SLOT as u32,
        pdata: Pdata::Sizes(8192),
        ri: false,
        cq_depth: 2048,
    };

    /// The shared raw connection's settings.
    fn conn(&self) -> ConnOpts {
        ConnOpts {
            device: "fuzz",
            arena_bytes: 16 << 20,
            slot: SLOT,
            send_slots: SEND_SLOTS,
            nrecv: self.nrecv,
            recv_len: self.recv_len,
            cq_depth: self.cq_depth,
            max_send_wr: 1024,
            data_len: DATA_LEN,
            wait: WAIT,
            // Peers that do not poll their completion queue on purpose: nothing more comes.
            cq_overrun_ends: true,
        }
    }

    /// The Receive size the server negotiates with (RFC 8797 §4.2, §5.1).
    fn peer_recv(&self) -> u32 {
        match self.pdata {
            Pdata::Sizes(n) => PrivateData::new(n, n, self.ri).receive_size,
            Pdata::Absent | Pdata::Junk => 1024,
        }
    }
}

/// A raw requester (the shared [`RawConn`], which it derefs to) with a memory map the model
/// knows: beside the data region, a region exposed for remote read only, one not exposed,
/// a stale rkey, and the model's copy of the data region.
struct Peer {
    conn: RawConn,
    ro: SoftMr,
    hidden: SoftMr,
    stale_key: u32,
    /// What the data region holds, as far as the model knows.
    mirror: Vec<u8>,
    ro_bytes: Vec<u8>,
    opts: PeerOpts,
}

impl Deref for Peer {
    type Target = RawConn;
    fn deref(&self) -> &RawConn {
        &self.conn
    }
}

impl DerefMut for Peer {
    fn deref_mut(&mut self) -> &mut RawConn {
        &mut self.conn
    }
}

/// The peer's memory as the model sees it.
struct MemView<'a> {
    data_key: u32,
    data_addr: u64,
    data: &'a [u8],
    ro_key: u32,
    ro_addr: u64,
    ro: &'a [u8],
}

impl MemView<'_> {
    /// The bytes a remote RDMA Read of `s` returns, `None` for a remote access error.
    fn read(&self, s: &Segment) -> Option<&[u8]> {
        if s.length == 0 {
            return Some(&[]);
        }
        for (key, addr, bytes) in [
            (self.data_key, self.data_addr, self.data),
            (self.ro_key, self.ro_addr, self.ro),
        ] {
            if s.handle == key {
                let off = usize::try_from(s.offset.checked_sub(addr)?).ok()?;
                let end = off.checked_add(s.length as usize)?;
                return bytes.get(off..end);
            }
        }
        None
    }

    /// Where in the data region a remote RDMA Write of `len` bytes to `handle`/`offset`
    /// lands, `None` for a remote access error.
    fn write_at(&self, handle: u32, offset: u64, len: u32) -> Option<usize> {
        if handle != self.data_key {
            return None;
        }
        let off = usize::try_from(offset.checked_sub(self.data_addr)?).ok()?;
        (off.checked_add(len as usize)? <= self.data.len()).then_some(off)
    }
}

impl Peer {
    /// Connects with the settings and private data of `o` (one attempt).
    fn try_connect(addr: &SoftAddr, o: PeerOpts) -> Result<Peer, ConnectError> {
        let pdata: Vec<u8> = match o.pdata {
            Pdata::Sizes(n) => PrivateData::new(n, n, o.ri).encode().to_vec(),
            Pdata::Absent => Vec::new(),
            Pdata::Junk => (0..56u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect(),
        };
        let (conn, (ro, hidden, stale_key, ro_bytes)) =
            RawConn::try_connect(addr, &o.conn(), &pdata, |pd| {
                let ro = pd.alloc_region(SIDE_LEN, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
                let hidden = pd.alloc_region(SIDE_LEN, Access::LOCAL_WRITE)?;
                // A key that named remotely writable memory once: deregistered before any use.
                let stale_key = {
                    let s = pd.alloc_region(
                        4096,
                        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
                    )?;
                    s.rkey()
                };
                let mut ro_bytes = vec![0u8; SIDE_LEN];
                fill_pattern(0xface, &mut ro_bytes);
                ro.write_at(0, &ro_bytes);
                Ok((ro, hidden, stale_key, ro_bytes))
            })?;
        Ok(Peer {
            conn,
            ro,
            hidden,
            stale_key,
            mirror: vec![0; DATA_LEN],
            ro_bytes,
            opts: o,
        })
    }

    /// As [`try_connect`](Self::try_connect), retried for up to [`WAIT`] (the server's
    /// accept loop may be busy for a moment); failing fails the test.
    fn connect(addr: &SoftAddr, o: PeerOpts) -> Peer {
        connect_retrying(WAIT, || Peer::try_connect(addr, o))
    }

    /// The peer's memory as the model sees it.
    fn view(&self) -> MemView<'_> {
        MemView {
            data_key: self.data.rkey(),
            data_addr: self.data.addr(),
            data: &self.mirror,
            ro_key: self.ro.rkey(),
            ro_addr: self.ro.addr(),
            ro: &self.ro_bytes,
        }
    }

    /// Writes `bytes` at `off` of the data region and of the mirror.
    fn put(&mut self, off: usize, bytes: &[u8]) {
        let end = (off + bytes.len()).min(DATA_LEN);
        let n = end.saturating_sub(off);
        if n > 0 {
            self.data.write_at(off, &bytes[..n]);
            self.mirror[off..end].copy_from_slice(&bytes[..n]);
        }
    }

    /// The data region equals the mirror.
    fn check_memory(&self, what: &str) {
        let mut now = vec![0u8; DATA_LEN];
        self.data.read_at(0, &mut now);
        if now != self.mirror {
            let first = (0..DATA_LEN).find(|&i| now[i] != self.mirror[i]).unwrap();
            let last = (0..DATA_LEN).rfind(|&i| now[i] != self.mirror[i]).unwrap();
            let show = |v: &[u8]| hex(&v[first..(first + 32).min(DATA_LEN)]);
            panic!(
                "{what}: the peer's exposed memory is not what the model expects: bytes \
                 {first}..={last} differ (data region at {:#x}); at {first}: expected {} got {}",
                self.data.addr(),
                show(&self.mirror),
                show(&now),
            );
        }
    }

    /// Sends `m` and checks the server does what `want` says; `false` when the connection
    /// is gone (as predicted).
    fn exchange(&mut self, m: &[u8], want: &Want, what: &str) -> bool {
        let st = self.send(m, what);
        match want {
            Want::TornDown => {
                self.expect_torn_down(what);
                false
            }
            Want::Discard => {
                assert_eq!(st, WcStatus::Success, "{what}: sent");
                let probe = m.get(..4).map_or(0, |x| w(x, 0)) ^ 0x4e55_4c4c;
                self.null_ok(probe, &format!("{what} (discarded, then a NULL probe)"));
                self.check_memory(what);
                true
            }
            Want::Reply(r) => {
                assert_eq!(st, WcStatus::Success, "{what}: sent");
                let got = self.expect(what);
                if got != r.send {
                    panic!(
                        "{what}: wrong answer\n  expected {}\n  got      {}\n  ({})",
                        hex(&r.send),
                        hex(&got),
                        describe(&got)
                    );
                }
                for (off, bytes) in &r.writes {
                    self.mirror[*off..*off + bytes.len()].copy_from_slice(bytes);
                }
                self.check_memory(what);
                true
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The model of the responder.

/// What the server must do with one message.
#[derive(Clone, Debug, PartialEq)]
enum Want {
    /// No reply; the connection stays up.
    Discard,
    /// Exactly this Send, after exactly these RDMA Writes into the data region.
    Reply(Reply),
    /// The connection is torn down without a reply.
    TornDown,
}

#[derive(Clone, Debug, PartialEq)]
struct Reply {
    send: Vec<u8>,
    /// (offset in the data region, bytes).
    writes: Vec<(usize, Vec<u8>)>,
}

fn rdma_error(m: &[u8], grant: u32, err: RdmaError) -> Want {
    let h = Header::error(w(m, 0), w(m, 4), grant, err);
    let mut v = vec![0; h.encoded_len()];
    h.encode(&mut v).unwrap();
    Want::Reply(Reply {
        send: v,
        writes: Vec::new(),
    })
}

/// What the handler of the built-in program does.
enum Outcome {
    Success {
        results: Vec<u8>,
        items: Vec<Vec<u8>>,
    },
    Garbage,
    SystemErr,
}

fn arg(a: &[u8], k: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        a.get(4 * k..4 * k + 4)?.try_into().ok()?,
    ))
}

/// `program.rs`'s procedures as specified in its table, with the transport's limits: inline
/// results at most `cap` bytes (the reply buffer left after the headers), DDP-eligible
/// results in a bulk buffer of `bulk` bytes, each aligned to 8.
fn handler(proc_num: u32, a: &[u8], cap: usize, bulk: usize) -> Outcome {
    match proc_num {
        NULL => Outcome::Success {
            results: Vec::new(),
            items: Vec::new(),
        },
        ECHO => {
            let Some(n) = arg(a, 0) else {
                return Outcome::Garbage;
            };
            let len = opaque_len(n as usize);
            if n > MAX_ECHO || a.len() < len {
                return Outcome::Garbage;
            }
            let max = cap.min(opaque_len(MAX_ECHO as usize)) & !3;
            if max < len {
                return Outcome::SystemErr;
            }
            Outcome::Success {
                results: a[..len].to_vec(),
                items: Vec::new(),
            }
        }
        READ => {
            let (Some(n), Some(seed)) = (arg(a, 0), arg(a, 1)) else {
                return Outcome::Garbage;
            };
            if n as usize > bulk {
                return Outcome::SystemErr;
            }
            let mut item = vec![0; n as usize];
            fill_pattern(seed, &mut item);
            Outcome::Success {
                results: n.to_be_bytes().to_vec(),
                items: vec![item],
            }
        }
        WRITE => {
            let (Some(seed), Some(n)) = (arg(a, 0), arg(a, 1)) else {
                return Outcome::Garbage;
            };
            let Some(data) = a.get(8..8 + n as usize) else {
                return Outcome::Garbage;
            };
            let ok = is_pattern(seed, data) as u32;
            let mut results = ok.to_be_bytes().to_vec();
            results.extend_from_slice(&n.to_be_bytes());
            Outcome::Success {
                results,
                items: Vec::new(),
            }
        }
        MULTI => {
            let (Some(k), Some(n)) = (arg(a, 0), arg(a, 1)) else {
                return Outcome::Garbage;
            };
            let mut items = Vec::new();
            let mut used = 0usize;
            for i in 0..k {
                // At most 4 DDP-eligible results (dispatch::MAX_BULK_RESULTS).
                if i >= 4 {
                    return Outcome::SystemErr;
                }
                let start = (used + 7) & !7;
                let end = start + n as usize;
                if end > bulk {
                    return Outcome::SystemErr;
                }
                used = end;
                let mut item = vec![0; n as usize];
                fill_pattern(i + 1, &mut item);
                items.push(item);
            }
            Outcome::Success {
                results: k.to_be_bytes().to_vec(),
                items,
            }
        }
        _ => unreachable!("looked up before"),
    }
}

/// What goes in the reply: the handler's results, or an RPC error.
enum RpcBody<'a> {
    Handler { proc_num: u32, args: &'a [u8] },
    Error(ReplyHeader<'static>),
}

struct Model<'a> {
    mem: &'a MemView<'a>,
    cfg: &'a Cfg,
    grant: u32,
    threshold: u32,
}

/// The model's answer to message `m` from a peer whose memory is `mem`.
fn predict(m: &[u8], mem: &MemView<'_>, cfg: &Cfg, grant: u32, peer_recv: u32) -> Want {
    // A Send larger than the server's receives: the receive fails, the connection ends
    // (RFC 8166 §3.3).
    if m.len() > cfg.inline as usize {
        return Want::TornDown;
    }
    let model = Model {
        mem,
        cfg,
        grant,
        threshold: cfg.reply_threshold(peer_recv),
    };
    model.predict(m)
}

impl Model<'_> {
    fn predict(&self, m: &[u8]) -> Want {
        let call = match judge_call(m) {
            Ok(c) => c,
            Err(v) => {
                return match v.action {
                    Action::Discard => Want::Discard,
                    Action::ErrVers { low, high } => {
                        rdma_error(m, self.grant, RdmaError::Vers { low, high })
                    }
                    Action::ErrChunk => rdma_error(m, self.grant, RdmaError::Chunk),
                    Action::Process => unreachable!("an Err verdict"),
                    Action::GarbageArgs => match HeaderView::parse(m) {
                        Ok(h) => self.build(&h, RpcBody::Error(ReplyHeader::garbage_args(h.xid()))),
                        Err(_) => rdma_error(m, self.grant, RdmaError::Chunk),
                    },
                };
            }
        };
        let h = call.header;
        let stream: Vec<u8>;
        let (c, len) = if call.plan.chunk_count() > 0 {
            let plan = call.plan;
            let total = plan.total_len() as usize;
            // RFC 8166 §8.1.4: too large to pull, ERR_CHUNK before any RDMA Read.
            if total > self.cfg.bulk as usize {
                return rdma_error(m, self.grant, RdmaError::Chunk);
            }
            // Every segment is read: one the peer's memory refuses ends the connection.
            let reads = plan.read_list();
            if reads.iter().any(|rs| self.mem.read(&rs.segment).is_none()) {
                return Want::TornDown;
            }
            let mut s = vec![0u8; total];
            let payload = h.payload();
            let inline = &payload[..plan.inline_len().min(payload.len())];
            let n = plan
                .reassemble(
                    inline,
                    |i, buf| {
                        let seg = reads.get(i).unwrap().segment;
                        buf.copy_from_slice(self.mem.read(&seg).unwrap());
                    },
                    &mut s,
                )
                .expect("the verdict's plan reassembles");
            s.truncate(n);
            stream = s;
            match RpcMessage::parse(&stream) {
                Ok((RpcMessage::Call(c), len)) if c.xid == h.xid() => (c, len),
                Ok((RpcMessage::Call(_), _)) => return rdma_error(m, self.grant, RdmaError::Chunk),
                // As the verdict does for one inline (RFC 8166 §4).
                Ok((RpcMessage::Reply(_), _)) => return Want::Discard,
                Err(_) => {
                    return self.build(&h, RpcBody::Error(ReplyHeader::garbage_args(h.xid())))
                }
            }
        } else {
            match call.call {
                Some((c, len)) => {
                    stream = h.payload().to_vec();
                    (c, len)
                }
                None => return rdma_error(m, self.grant, RdmaError::Chunk),
            }
        };
        let xid = h.xid();
        let body = if !c.is_rpc_v2() {
            RpcBody::Error(ReplyHeader::rpc_mismatch(xid, 2, 2))
        } else if c.prog != PROG {
            RpcBody::Error(ReplyHeader::prog_unavail(xid))
        } else if c.vers != VERS {
            // The fuzzer never calls the timed version (2), which the server also has.
            RpcBody::Error(ReplyHeader::prog_mismatch(xid, VERS, VERS_TIMED))
        } else if c.proc_num > MULTI {
            RpcBody::Error(ReplyHeader::proc_unavail(xid))
        } else {
            RpcBody::Handler {
                proc_num: c.proc_num,
                args: &stream[len..],
            }
        };
        self.build(&h, body)
    }

    /// The reply to the Call `h` (RFC 8166 §4.3, §4.5.3, §3.5.3).
    fn build(&self, h: &HeaderView<'_>, body: RpcBody<'_>) -> Want {
        let m = h.bytes();
        let chunk_error = || rdma_error(m, self.grant, RdmaError::Chunk);
        let wl = h.write_list();
        let rc = h.reply_chunk();
        // The responder's limits: 8 Write chunks, 64 segments per chunk.
        if wl.len() > 8 || wl.iter().any(|c| c.len() > 64) || rc.is_some_and(|c| c.len() > 64) {
            return chunk_error();
        }
        let hlen = 16 + 4 + wl.encoded_len() + rc.map_or(4, |c| 4 + c.encoded_len());
        let ring = self.cfg.ring_len(h);
        let xid = h.xid();
        let (rpc, results, items) = match body {
            RpcBody::Error(r) => (r, Vec::new(), Vec::new()),
            RpcBody::Handler { proc_num, args } => {
                let cap = ring.saturating_sub(hlen + 24);
                let max_results = match proc_num {
                    ECHO => opaque_len(MAX_ECHO as usize),
                    WRITE => 8,
                    _ => 4,
                };
                match handler(
                    proc_num,
                    args,
                    cap.min(max_results) & !3,
                    self.cfg.bulk_cap(h),
                ) {
                    Outcome::Success { results, items } => {
                        (ReplyHeader::accepted_success(xid), results, items)
                    }
                    Outcome::Garbage => (ReplyHeader::garbage_args(xid), Vec::new(), Vec::new()),
                    Outcome::SystemErr => (ReplyHeader::system_err(xid), Vec::new(), Vec::new()),
                }
            }
        };
        let mut payload = vec![0u8; rpc.encoded_len()];
        rpc.encode(&mut payload).unwrap();
        payload.extend_from_slice(&results);

        // Echoes: every chunk unused (zero lengths) until it receives a result.
        let mut echo: Vec<Vec<Segment>> = wl
            .iter()
            .map(|c| c.iter().map(|s| Segment { length: 0, ..s }).collect())
            .collect();
        let mut writes: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut torn = false;
        for (k, target) in match_results(wl, items.len()).enumerate() {
            let item = &items[k];
            let len = item.len() as u32;
            if hlen + payload.len() + 4 > ring {
                return self.after_error(m);
            }
            payload.extend_from_slice(&len.to_be_bytes());
            match target {
                ResultTarget::Chunk { index, chunk } => match place_write(chunk, len) {
                    Ok(fill) => {
                        self.place(fill.placements(), item, &mut writes, &mut torn);
                        let mut left = len;
                        for (e, s) in echo[index].iter_mut().zip(chunk.iter()) {
                            e.length = s.length.min(left);
                            left -= e.length;
                        }
                    }
                    Err(_) => return self.after_error(m),
                },
                ResultTarget::InlineEmptyChunk { .. } | ResultTarget::InlineNoChunk => {
                    let padded = (item.len() + 3) & !3;
                    if hlen + payload.len() + padded > ring {
                        return self.after_error(m);
                    }
                    payload.extend_from_slice(item);
                    payload.resize(payload.len() + padded - item.len(), 0);
                }
            }
        }
        let form = match plan_reply(self.threshold, payload.len() as u32, wl, rc) {
            Ok(p) => p.form,
            Err(_) => return self.after_error(m),
        };
        let mut rc_echo: Vec<Segment> = rc
            .map(|c| c.iter().map(|s| Segment { length: 0, ..s }).collect())
            .unwrap_or_default();
        if form == ReplyForm::Long {
            let c = rc.unwrap();
            match place_reply(c, payload.len() as u32) {
                Ok(fill) => {
                    self.place(fill.placements(), &payload, &mut writes, &mut torn);
                    let mut left = payload.len() as u32;
                    for (e, s) in rc_echo.iter_mut().zip(c.iter()) {
                        e.length = s.length.min(left);
                        left -= e.length;
                    }
                }
                Err(_) => return self.after_error(m),
            }
        }
        if torn {
            return Want::TornDown;
        }
        let echo_refs: Vec<&[Segment]> = echo.iter().map(|v| v.as_slice()).collect();
        let chunks = Chunks {
            reads: &[],
            writes: &echo_refs,
            reply: rc.map(|_| rc_echo.as_slice()),
        };
        let hdr = match form {
            ReplyForm::Short => Header::msg(xid, self.grant, chunks),
            ReplyForm::Long => Header::nomsg(xid, self.grant, chunks),
        };
        let mut send = vec![0u8; hdr.encoded_len()];
        hdr.encode(&mut send).unwrap();
        assert_eq!(send.len(), hlen, "the model's header length");
        if form == ReplyForm::Short {
            send.extend_from_slice(&payload);
        }
        Want::Reply(Reply { send, writes })
    }

    /// The RDMA Writes of `placements` of `src` into the peer's memory; one the memory
    /// refuses ends the connection.
    fn place(
        &self,
        placements: impl Iterator<Item = Placement>,
        src: &[u8],
        writes: &mut Vec<(usize, Vec<u8>)>,
        torn: &mut bool,
    ) {
        for p in placements {
            let bytes = &src[p.src_offset as usize..(p.src_offset + p.len) as usize];
            match self.mem.write_at(p.segment.handle, p.segment.offset, p.len) {
                Some(off) => writes.push((off, bytes.to_vec())),
                None => *torn = true,
            }
        }
    }

    /// ERR_CHUNK found while placing the results: nothing was written before it (the
    /// responder checks every chunk before it posts any RDMA Write), and no rkey the
    /// placement would have used was touched, so none can end the connection.
    fn after_error(&self, m: &[u8]) -> Want {
        rdma_error(m, self.grant, RdmaError::Chunk)
    }
}

fn model_answer(m: &[u8], p: &Peer, cfg: &Cfg) -> Want {
    let grant = p.grant.unwrap_or(cfg.credits);
    predict(m, &p.view(), cfg, grant, p.opts.peer_recv())
}

// ---------------------------------------------------------------------------------------
// The generator of structured hostile messages.

/// Bump allocation of chunk memory inside a window of the data region.
struct Alloc {
    window: Range<usize>,
    next: usize,
}

impl Alloc {
    fn new(window: Range<usize>) -> Alloc {
        Alloc {
            next: window.start,
            window,
        }
    }

    /// An offset for `len` bytes (wrapping to the window's start; a request longer than the
    /// window starts there and runs past it).
    fn take(&mut self, rng: &mut Rng, len: usize) -> usize {
        let gap = [0, 0, 4, 8, 13, 64, 4096][rng.below(7) as usize];
        let mut at = self.next + gap;
        if at + len > self.window.end {
            at = self.window.start + [0, 1, 4, 8][rng.below(4) as usize];
        }
        self.next = (at + len).min(self.window.end);
        at
    }
}

struct Gen<'a> {
    rng: &'a mut Rng,
    p: &'a mut Peer,
    alloc: Alloc,
    cfg: Cfg,
    /// One hostile twist in this many choices.
    hostile: u64,
    /// Only what a burst can carry (no teardowns planned, no oversized Sends).
    tame: bool,
}

/// A size from a list biased to boundaries.
fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
    v[rng.below(v.len() as u64) as usize]
}

impl Gen<'_> {
    fn chance(&mut self, one_in: u64) -> bool {
        self.rng.below(one_in) == 0
    }

    fn twist(&mut self) -> bool {
        !self.tame && self.chance(self.hostile)
    }

    /// Up to `max - 1` random XDR words.
    fn random_words(&mut self, max: u64) -> Vec<u8> {
        let n = 4 * self.rng.below(max) as usize;
        self.random_bytes(n)
    }

    fn random_bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        let seed = self.rng.next() as u32;
        fill_pattern(seed, &mut v);
        v
    }

    /// A key the peer's memory refuses.
    fn bad_key(&mut self) -> u32 {
        match self.rng.below(5) {
            0 => self.p.stale_key,
            1 => self.p.hidden.rkey(),
            2 => self.p.recv.rkey(),
            3 => self.p.data.rkey() ^ (1 << (8 + self.rng.below(24))),
            _ => self.rng.word(),
        }
    }

    /// Read segments carrying `content` at `pos` (RFC 8166 §3.4.5), placed in the data region
    /// in 1 to 3 pieces, maybe twisted.
    fn read_chunk(&mut self, pos: u32, content: &[u8]) -> Vec<ReadSegment> {
        let n = content.len();
        let pieces = if n == 0 {
            1
        } else {
            1 + self.rng.below(3) as usize
        };
        let mut cuts: Vec<usize> = (1..pieces)
            .map(|_| self.rng.below(n as u64 + 1) as usize)
            .collect();
        cuts.push(0);
        cuts.push(n);
        cuts.sort_unstable();
        let key = self.p.data.rkey();
        let base = self.p.data.addr();
        let mut segs = Vec::new();
        for win in cuts.windows(2) {
            let piece = &content[win[0]..win[1]];
            let off = self.alloc.take(self.rng, piece.len());
            self.p.put(off, piece);
            let mut s = ReadSegment::new(pos, key, piece.len() as u32, base + off as u64);
            if self.twist() {
                match self.rng.below(7) {
                    0 => s.segment.handle = self.bad_key(),
                    1 => {
                        // Read-only memory: readable, other content.
                        s.segment.handle = self.p.ro.rkey();
                        let len = s.segment.length.min(SIDE_LEN as u32);
                        s.segment.length = len;
                        s.segment.offset =
                            self.p.ro.addr() + self.rng.below((SIDE_LEN as u64 - len as u64) + 1);
                    }
                    2 => {
                        // Runs past the end of the region (partly registered).
                        s.segment.offset =
                            base + DATA_LEN as u64 - (u64::from(s.segment.length) / 2).max(1);
                    }
                    3 => s.segment.length = pick(self.rng, &[0x7fff_ffff, 1 << 21, u32::MAX]),
                    4 => {
                        s.segment.length = s
                            .segment
                            .length
                            .saturating_sub(1 + self.rng.below(8) as u32)
                    }
                    5 => s.segment.length += 1 + self.rng.below(8) as u32,
                    _ => s.segment.offset = self.rng.next(),
                }
            }
            segs.push(s);
            if self.twist() {
                // A zero-length segment, perhaps naming nothing.
                let k = if self.chance(2) { key } else { self.bad_key() };
                segs.push(ReadSegment::new(pos, k, 0, self.rng.next()));
            }
        }
        if self.twist() {
            let p = match self.rng.below(6) {
                0 => pos + 1 + self.rng.below(3) as u32,
                1 => pos + 4,
                2 => pos.saturating_sub(4),
                3 => 0,
                4 => pos + 4096,
                _ => self.rng.word(),
            };
            for s in &mut segs {
                s.position = p;
            }
        }
        segs
    }

    /// A Write chunk (or Reply chunk) meant for `need` bytes: exactly, roomier, or too small;
    /// 1 to 4 segments (rarely many), maybe twisted.
    fn write_chunk(&mut self, need: u32) -> Vec<Segment> {
        let cap = match self.rng.below(10) {
            0..=4 => need,
            5 => (need + 3) & !3,
            6 | 7 => {
                let extra = if self.tame { 64 } else { 4096 };
                need.saturating_add(1 + self.rng.below(extra) as u32)
            }
            8 if !self.tame => {
                need.saturating_sub(1 + self.rng.below(u64::from(need.max(1))) as u32)
            }
            _ => need,
        };
        let nseg = if !self.tame && self.chance(60) {
            60 + self.rng.below(8) as usize
        } else {
            1 + self.rng.below(4) as usize
        };
        let mut lens = vec![0u32; nseg];
        let mut left = cap;
        for (i, l) in lens.iter_mut().enumerate() {
            *l = if i + 1 == nseg {
                left
            } else {
                self.rng.below(u64::from(left) + 1) as u32
            };
            left -= *l;
        }
        let key = self.p.data.rkey();
        let base = self.p.data.addr();
        let mut segs = Vec::new();
        for l in lens {
            let off = self.alloc.take(self.rng, l as usize);
            let mut s = Segment::new(key, l, base + off as u64);
            if self.twist() {
                match self.rng.below(6) {
                    0 => s.handle = self.bad_key(),
                    1 => s.handle = self.p.ro.rkey(),
                    2 => s.offset = base + DATA_LEN as u64 - (u64::from(l) / 2).max(1),
                    3 => s.length = pick(self.rng, &[0x7fff_ffff, u32::MAX]),
                    4 => s.offset = u64::MAX - self.rng.below(64),
                    _ => s.offset = base + self.rng.below(DATA_LEN as u64),
                }
            }
            segs.push(s);
        }
        segs
    }

    /// An RPC Call header for `proc_num`, maybe with other fields or credentials.
    fn rpc_header(&mut self, xid: u32, proc_num: u32) -> Vec<u8> {
        let mut rpcvers = 2;
        let mut prog = PROG;
        let mut vers = VERS;
        let mut proc_num = proc_num;
        if self.twist() {
            match self.rng.below(4) {
                0 => rpcvers = pick(self.rng, &[0, 1, 3, u32::MAX]),
                1 => prog = pick(self.rng, &[0, 100_003, PROG + 1, u32::MAX]),
                // Not 1 or the timed version 2: versions the server lacks.
                2 => vers = pick(self.rng, &[0, 3, u32::MAX]),
                _ => proc_num = pick(self.rng, &[5, 6, 127, 128, u32::MAX]),
            }
        }
        let sys_body = {
            // AUTH_SYS: stamp, machine name "fuzz", uid, gid, 2 gids.
            let mut b = Vec::new();
            for x in [7u32, 4] {
                b.extend_from_slice(&x.to_be_bytes());
            }
            b.extend_from_slice(b"fuzz");
            for x in [1000u32, 1000, 2, 10, 20] {
                b.extend_from_slice(&x.to_be_bytes());
            }
            b
        };
        let junk_len = self.rng.below(401) as usize;
        let junk = self.random_bytes(junk_len);
        let cred = match self.rng.below(8) {
            0 => OpaqueAuth::new(AUTH_SYS, &sys_body),
            1 => OpaqueAuth::new(pick(self.rng, &[3, 6, 0x7fff_ffff]), &junk),
            _ => OpaqueAuth::NONE,
        };
        let verf = if self.chance(10) {
            OpaqueAuth::new(pick(self.rng, &[0, 1, 6]), &junk[..junk.len().min(64)])
        } else {
            OpaqueAuth::NONE
        };
        let mut h = CallHeader::new(xid, prog, vers, proc_num, cred, verf);
        h.rpcvers = rpcvers;
        let mut v = vec![0; h.encoded_len()];
        h.encode(&mut v).unwrap();
        if self.twist() {
            // Credential length past the message or over 400 bytes, or mtype REPLY.
            match self.rng.below(3) {
                0 => set_word(&mut v, 28, pick(self.rng, &[401, 0xffff, u32::MAX])),
                1 => set_word(&mut v, 4, 1),
                _ => {
                    let k = self.rng.below(v.len() as u64) as usize;
                    v.truncate(k);
                }
            }
        }
        v
    }

    /// Arguments for `proc_num` and the byte range (in the arguments) of a DDP-eligible
    /// opaque's data, when there is one.
    fn args(&mut self, proc_num: u32) -> (Vec<u8>, Option<Range<usize>>) {
        let bulk = self.cfg.bulk;
        let mut a = Vec::new();
        let mut ddp = None;
        match proc_num {
            NULL => {
                if self.chance(5) {
                    a = self.random_words(8);
                }
            }
            ECHO => {
                let n: u32 = if self.tame {
                    pick(self.rng, &[0, 1, 3, 4, 100, 1000, 2000, 3000])
                } else {
                    pick(
                        self.rng,
                        &[
                            0, 1, 3, 4, 5, 100, 1000, 2000, 3000, 4000, 8000, 60_000, 300_000,
                        ],
                    )
                };
                let data = self.random_bytes(n as usize);
                a.extend_from_slice(&n.to_be_bytes());
                a.extend_from_slice(&data);
                a.resize(opaque_len(n as usize), 0);
                ddp = Some(4..4 + n as usize);
                if self.twist() {
                    let bad = pick(self.rng, &[n + 1, n + 8, MAX_ECHO + 1, u32::MAX]);
                    set_word(&mut a, 0, bad);
                }
            }
            READ => {
                let n = if self.tame {
                    pick(self.rng, &[0, 1, 5, 100, 1000, 4096])
                } else {
                    pick(
                        self.rng,
                        &[
                            0,
                            1,
                            5,
                            100,
                            1000,
                            4096,
                            5000,
                            65_536,
                            bulk / 2,
                            bulk,
                            bulk + 1,
                            u32::MAX,
                        ],
                    )
                };
                a.extend_from_slice(&n.to_be_bytes());
                a.extend_from_slice(&(self.rng.next() as u32).to_be_bytes());
            }
            WRITE => {
                let n = if self.tame {
                    pick(self.rng, &[0, 1, 64, 1000, 3000])
                } else {
                    pick(
                        self.rng,
                        &[0, 1, 3, 64, 1000, 4000, 65_536, bulk - 100, bulk - 44, bulk],
                    )
                };
                let seed = self.rng.next() as u32;
                a.extend_from_slice(&seed.to_be_bytes());
                a.extend_from_slice(&n.to_be_bytes());
                let mut data = vec![0u8; n as usize];
                fill_pattern(seed, &mut data);
                if n > 0 && self.chance(6) {
                    let i = self.rng.below(u64::from(n)) as usize;
                    data[i] ^= 0x10;
                }
                a.extend_from_slice(&data);
                a.resize(8 + opaque_len(n as usize) - 4, 0);
                ddp = Some(8..8 + n as usize);
            }
            MULTI => {
                let k = if self.tame {
                    self.rng.below(5) as u32
                } else {
                    pick(self.rng, &[0, 1, 2, 3, 4, 4, 5, 9, u32::MAX])
                };
                let n: u32 = if self.tame {
                    pick(self.rng, &[0, 1, 7, 100, 1000])
                } else {
                    pick(
                        self.rng,
                        &[0, 1, 7, 100, 4096, 70_000, bulk / 4, bulk / 3, bulk],
                    )
                };
                a.extend_from_slice(&k.to_be_bytes());
                a.extend_from_slice(&n.to_be_bytes());
            }
            _ => {
                a = self.random_words(6);
            }
        }
        if self.twist() {
            let k = self.rng.below(a.len() as u64 + 1) as usize;
            a.truncate(k);
            ddp = ddp.filter(|r| r.end <= k);
        }
        (a, ddp)
    }

    /// One generated Call-like message and its label.
    fn message(&mut self) -> (Vec<u8>, String) {
        let xid = self.rng.next() as u32;
        let credit = pick(self.rng, &[0, 1, 2, 32, 128, u32::MAX]);
        let kind = if self.tame {
            ["msg", "msg", "msg", "nomsg", "done", "msgp"][self.rng.below(6) as usize]
        } else {
            match self.rng.below(100) {
                0..=59 => "msg",
                60..=84 => "nomsg",
                85..=88 => "msgp",
                89..=91 => "done",
                92..=94 => "error",
                95..=96 => "unknown-proc",
                _ => "junk",
            }
        };
        match kind {
            "done" => {
                let tail = self.random_words(10);
                let h = Header {
                    xid,
                    vers: 1,
                    credit,
                    body: Body::Done,
                };
                return (msg::message(&h, &tail), "RDMA_DONE".into());
            }
            "error" => {
                let vers = pick(self.rng, &[1, 1, 2, 0, u32::MAX]);
                let err = if self.chance(2) {
                    RdmaError::Chunk
                } else {
                    RdmaError::Vers {
                        low: 1,
                        high: self.rng.word(),
                    }
                };
                let tail = self.random_words(6);
                let h = Header::error(xid, vers, credit, err);
                return (msg::message(&h, &tail), "RDMA_ERROR".into());
            }
            "unknown-proc" => {
                let mut v = null_call(xid);
                set_word(
                    &mut v,
                    12,
                    pick(self.rng, &[5, 6, 255, 0x8000_0000, u32::MAX]),
                );
                let tail = self.random_words(20);
                v.extend_from_slice(&tail);
                return (v, "unknown rdma_proc".into());
            }
            "junk" => {
                let n = self.rng.below(160) as usize;
                let mut v = self.random_bytes(n);
                if v.len() >= 8 && self.chance(2) {
                    set_word(&mut v, 4, 1);
                }
                return (v, "junk".into());
            }
            _ => {}
        }
        // A Call.
        let proc_num = pick(
            self.rng,
            &[NULL, ECHO, READ, READ, WRITE, WRITE, MULTI, MULTI, 9],
        );
        let rpc_xid = if self.twist() { xid ^ 0x100 } else { xid };
        let rpc = self.rpc_header(rpc_xid, proc_num);
        let (args, ddp) = self.args(proc_num);
        let mut unreduced = rpc.clone();
        unreduced.extend_from_slice(&args);
        // The DDP-eligible opaque in the unreduced stream.
        let ddp = ddp.map(|r| r.start + rpc.len()..r.end + rpc.len());
        let budget = self.cfg.inline as usize - 400;
        // Move the DDP item into its own Read chunk, or keep it inline (or in P0).
        let use_chunk =
            ddp.is_some() && ((unreduced.len() > budget && !self.chance(10)) || self.chance(2));
        let mut reads: Vec<ReadSegment> = Vec::new();
        let reduced = match (&ddp, use_chunk) {
            (Some(r), true) => {
                let padded_end = (r.end + 3) & !3;
                let mut content = unreduced[r.clone()].to_vec();
                if self.chance(4) {
                    // Include the XDR pad in the chunk (§3.4.5.2 allows it).
                    content.resize(padded_end - r.start, 0);
                }
                reads.extend(self.read_chunk(r.start as u32, &content));
                let mut red = unreduced[..r.start].to_vec();
                red.extend_from_slice(&unreduced[padded_end.min(unreduced.len())..]);
                red
            }
            _ => unreduced.clone(),
        };
        // Long when asked, or when the reduced stream does not fit inline (sometimes sent
        // anyway: an oversized Send).
        let long = kind == "nomsg"
            || (reduced.len() > budget
                && (self.tame || reduced.len() > SLOT - 4096 || !self.chance(8)));
        let mut inline = reduced.clone();
        if long {
            let p0 = self.read_chunk(0, &reduced);
            // The P0 chunk first or last in the list.
            if self.chance(2) {
                reads.splice(0..0, p0);
            } else {
                reads.extend(p0);
            }
            inline.clear();
            if self.twist() {
                inline = self.random_words(4);
                inline.extend_from_slice(&[0; 4]);
            }
        }
        // Write list.
        let mut writes: Vec<Vec<Segment>> = Vec::new();
        match proc_num {
            READ if !self.chance(6) => {
                let n = arg(&args, 0).unwrap_or(0);
                writes.push(self.write_chunk(n.min(self.cfg.bulk + 16)));
            }
            MULTI => {
                let k = arg(&args, 0).unwrap_or(0).min(6);
                let n = arg(&args, 1).unwrap_or(0).min(self.cfg.bulk + 16);
                let chunks = if self.chance(4) {
                    self.rng.below(u64::from(k) + 1) as u32
                } else {
                    k
                };
                for _ in 0..chunks {
                    if self.chance(8) {
                        writes.push(Vec::new());
                    } else {
                        writes.push(self.write_chunk(n));
                    }
                }
            }
            _ => {
                if self.chance(8) {
                    let need = self.rng.below(5000) as u32;
                    let c = self.write_chunk(need);
                    writes.push(c);
                }
            }
        }
        if self.chance(12) {
            writes.insert(self.rng.below(writes.len() as u64 + 1) as usize, Vec::new());
        }
        if self.twist() && self.chance(3) {
            while writes.len() < 9 {
                writes.push(self.write_chunk(16));
            }
        }
        // Reply chunk, sized for an estimate of the reply.
        let estimate = 28
            + 24
            + match proc_num {
                ECHO => arg(&args, 0).map_or(0, |n| opaque_len(n.min(1 << 21) as usize)),
                READ if writes.is_empty() => 8 + arg(&args, 0).unwrap_or(0).min(1 << 21) as usize,
                _ => 16,
            };
        let reply = if (estimate as u32) > self.cfg.reply_threshold(self.p.opts.peer_recv()) {
            (!self.chance(6)).then(|| self.write_chunk(estimate as u32))
        } else {
            if self.chance(6) {
                let need = self.rng.below(9000) as u32;
                Some(self.write_chunk(need))
            } else {
                None
            }
        };
        let write_refs: Vec<&[Segment]> = writes.iter().map(|v| v.as_slice()).collect();
        let chunks = Chunks {
            reads: &reads,
            writes: &write_refs,
            reply: reply.as_deref(),
        };
        let h = match kind {
            "msgp" => Header {
                xid,
                vers: 1,
                credit,
                body: Body::Msgp {
                    align: pick(self.rng, &[0, 4, 1024]),
                    thresh: pick(self.rng, &[0, 1024, 4096]),
                    chunks,
                },
            },
            _ if long => Header::nomsg(xid, credit, chunks),
            _ => Header::msg(xid, credit, chunks),
        };
        let mut m = msg::message(&h, &inline);
        let label =
            format!(
            "{} proc {proc_num} args {} bytes, {} read segments, {} write chunks, reply chunk {}",
            if long && kind != "msgp" { "RDMA_NOMSG" } else { kind },
            args.len(),
            reads.len(),
            writes.len(),
            reply.as_ref().map_or("none".to_string(), |r| format!("{} segments", r.len())),
        );
        let label = if !self.tame && self.chance(8) {
            self.mutate(&mut m);
            format!("mutated {label}")
        } else {
            label
        };
        m.truncate(SLOT);
        (m, label)
    }

    /// One to three random mutations of the header region.
    fn mutate(&mut self, m: &mut Vec<u8>) {
        for _ in 0..1 + self.rng.below(3) {
            match self.rng.below(6) {
                0 => {
                    let n = self.rng.below(m.len() as u64 + 1) as usize;
                    m.truncate(n);
                }
                1 => {
                    let n = 4 * (1 + self.rng.below(8) as usize);
                    let tail = self.random_bytes(n);
                    m.extend_from_slice(&tail);
                }
                _ if m.len() >= 4 => {
                    let at = 4 * self.rng.below(m.len().min(160) as u64 / 4) as usize;
                    let v = self.rng.word();
                    set_word(m, at, v);
                }
                _ => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Batches.

/// What the peers saw, for the final comparison with the server's counters.
#[derive(Default)]
struct Seen {
    err_vers: AtomicU64,
    err_chunk: AtomicU64,
    garbage_args: AtomicU64,
    messages: AtomicU64,
    teardowns: AtomicU64,
    overrun_bursts: AtomicU64,
    discards: AtomicU64,
    successes: AtomicU64,
    long_replies: AtomicU64,
    bytes_placed: AtomicU64,
}

impl Seen {
    /// Starts over (a new server counts from zero).
    fn reset(&self) {
        for c in [
            &self.err_vers,
            &self.err_chunk,
            &self.garbage_args,
            &self.messages,
            &self.teardowns,
            &self.overrun_bursts,
            &self.discards,
            &self.successes,
            &self.long_replies,
            &self.bytes_placed,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }

    fn count(&self, want: &Want) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        match want {
            Want::TornDown => {
                self.teardowns.fetch_add(1, Ordering::Relaxed);
            }
            Want::Reply(r) if r.send.len() >= 16 && w(&r.send, 12) == 4 => {
                let c = if w(&r.send, 16) == 1 {
                    &self.err_vers
                } else {
                    &self.err_chunk
                };
                c.fetch_add(1, Ordering::Relaxed);
            }
            Want::Reply(r) => {
                let placed: usize = r.writes.iter().map(|(_, b)| b.len()).sum();
                self.bytes_placed
                    .fetch_add(placed as u64, Ordering::Relaxed);
                if let Ok(h) = HeaderView::parse(&r.send) {
                    if h.proc() == rpcrdma_proto::header::Proc::NoMsg {
                        self.long_replies.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok((rh, _)) = ReplyHeader::parse(h.payload()) {
                        let stat = rh.accept_stat();
                        if stat == Some(rpcrdma_proto::rpc::AcceptStat::GarbageArgs) {
                            self.garbage_args.fetch_add(1, Ordering::Relaxed);
                        }
                        if stat == Some(rpcrdma_proto::rpc::AcceptStat::Success) {
                            self.successes.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            Want::Discard => {
                self.discards.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

struct Ctx<'a> {
    addr: SoftAddr,
    cfg: Cfg,
    seed: u64,
    batch: u64,
    seen: &'a Seen,
}

/// `n` generated messages on one connection, each checked against the model; a connection
/// torn down (as predicted) is replaced.
fn sequential(ctx: &Ctx<'_>, conn: u64, n: u64) {
    let mut rng = Rng(derive(ctx.seed, ctx.batch << 8 | conn));
    let hostile = pick(&mut rng, &[5, 10, 25, 100]);
    let opts = PeerOpts {
        pdata: match rng.below(8) {
            0 => Pdata::Absent,
            1 => Pdata::Junk,
            2..=4 => Pdata::Sizes(pick(&mut rng, &[1024, 2048, 3072, 4096, 16384, 262_144])),
            _ => Pdata::Sizes(8192),
        },
        ..PeerOpts::GOOD
    };
    let mut p = Peer::connect(&ctx.addr, opts);
    p.null_ok(1, "first NULL");
    for i in 0..n {
        let (m, label) = {
            let mut g = Gen {
                rng: &mut rng,
                p: &mut p,
                alloc: Alloc::new(0..DATA_LEN),
                cfg: ctx.cfg,
                hostile,
                tame: false,
            };
            g.message()
        };
        let want = model_answer(&m, &p, &ctx.cfg);
        let what = format!(
            "seed {:#x} batch {} conn {conn} msg {i} [{label}] bytes {}",
            ctx.seed,
            ctx.batch,
            hex(&m)
        );
        ctx.seen.count(&want);
        if !p.exchange(&m, &want, &what) {
            p = Peer::connect(&ctx.addr, opts);
            p.null_ok(2, &what);
        } else if rng.below(6) == 0 {
            // No late or duplicate reply is pending.
            p.null_ok(0x0bad_0000 | i as u32, &what);
        }
    }
}

/// Bursts of Calls sent without waiting, beyond the grant: each reply is the model's (matched
/// by XID, any order), or the connection is torn down after a Send found no receive (RNR).
fn burst(ctx: &Ctx<'_>, conn: u64) {
    let mut rng = Rng(derive(ctx.seed, ctx.batch << 8 | conn | 0x80));
    let mut p = Peer::connect(
        &ctx.addr,
        PeerOpts {
            nrecv: 512,
            ..PeerOpts::GOOD
        },
    );
    p.null_ok(1, "burst: first NULL");
    let grant = p.grant.unwrap();
    for round in 0..3u64 {
        let n = grant as u64 + rng.below(2 * grant as u64 + 16);
        let per = DATA_LEN / n as usize;
        let mut expect: HashMap<u32, Reply> = HashMap::new();
        let mut discards = 0;
        let mut sent = Vec::new();
        let mut i = 0;
        let mut tries = 0;
        while (sent.len() as u64) < n && tries < 20 * n {
            tries += 1;
            let (m, label) = {
                let mut g = Gen {
                    rng: &mut rng,
                    p: &mut p,
                    alloc: Alloc::new(i * per..(i + 1) * per),
                    cfg: ctx.cfg,
                    hostile: 8,
                    tame: true,
                };
                g.message()
            };
            let win = i * per..(i + 1) * per;
            if m.len() < 4
                || expect.contains_key(&w(&m, 0))
                || !confined(&m, p.data.rkey(), p.data.addr(), &win)
            {
                continue;
            }
            let want = model_answer(&m, &p, &ctx.cfg);
            if want == Want::TornDown {
                continue;
            }
            match want {
                Want::Reply(r) => {
                    expect.insert(w(&m, 0), r);
                }
                _ => discards += 1,
            }
            sent.push((m, label));
            i += 1;
        }
        let what = format!(
            "seed {:#x} batch {} burst conn {conn} round {round} ({} Calls, grant {grant})",
            ctx.seed,
            ctx.batch,
            sent.len()
        );
        let mut ids = Vec::new();
        let mut failed = false;
        for (m, _) in &sent {
            match p.post(m) {
                Ok(id) => ids.push(id),
                Err(_) => {
                    failed = true;
                    break;
                }
            }
            p.poll();
        }
        let mut statuses = Vec::new();
        for id in ids {
            statuses.push(p.wait_send(id, &what));
        }
        if let Some(k) = statuses.iter().position(|s| *s != WcStatus::Success) {
            failed = true;
            assert!(
                k as u32 >= grant,
                "{what}: Send {k}, within the grant, failed: {:?}",
                statuses[k]
            );
        }
        if sent.len() as u64 > u64::from(grant) {
            ctx.seen.overrun_bursts.fetch_add(1, Ordering::Relaxed);
        }
        // Collect: every reply is the model's for its XID; then a probe.
        // The probe is one more Call: beyond the grant it too may find no receive.
        let probe = 0x5052_0000 | round as u32;
        if !failed {
            let st = match p.post(&null_call(probe)) {
                Ok(id) => p.wait_send(id, &what),
                Err(_) => WcStatus::WrFlushErr,
            };
            if st != WcStatus::Success {
                failed = true;
                assert!(
                    sent.len() as u32 >= grant,
                    "{what}: the probe, within the grant, failed: {st:?}"
                );
            }
        }
        let mut probe_seen = false;
        let deadline = Instant::now() + WAIT;
        while !(probe_seen && expect.is_empty()) {
            p.poll();
            if let Some(m) = p.received.pop_front() {
                assert!(m.len() >= 4, "{what}: a {}-byte reply", m.len());
                let x = w(&m, 0);
                if x == probe && !probe_seen {
                    assert!(rpc_reply(&m).is_success(), "{what}: probe");
                    probe_seen = true;
                    continue;
                }
                let Some(r) = expect.remove(&x) else {
                    panic!("{what}: an unexpected or duplicate reply {}", hex(&m));
                };
                let label = &sent.iter().find(|(s, _)| w(s, 0) == x).unwrap().1;
                assert!(
                    m == r.send,
                    "{what}: reply to {x:#x} [{label}]\n  expected {}\n  got      {}",
                    hex(&r.send),
                    hex(&m)
                );
                for (off, bytes) in &r.writes {
                    p.mirror[*off..*off + bytes.len()].copy_from_slice(bytes);
                }
                ctx.seen.count(&Want::Reply(r));
                continue;
            }
            if !p.recv_errors.is_empty() {
                assert!(failed, "{what}: torn down although every Send was received");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {} replies missing (and the probe: {probe_seen}), connection up",
                expect.len()
            );
            thread::yield_now();
        }
        if failed {
            p.expect_torn_down(&what);
            p = Peer::connect(
                &ctx.addr,
                PeerOpts {
                    nrecv: 512,
                    ..PeerOpts::GOOD
                },
            );
            p.null_ok(1, &what);
        } else {
            p.check_memory(&what);
            for _ in 0..discards {
                ctx.seen.count(&Want::Discard);
            }
        }
    }
}

/// Whether every segment of `m` that names the data region (`key` at `base`) with a nonzero
/// length lies inside `win` (offsets in the region).
fn confined(m: &[u8], key: u32, base: u64, win: &Range<usize>) -> bool {
    let Ok(h) = HeaderView::parse(m) else {
        return true;
    };
    let lo = base + win.start as u64;
    let hi = base + win.end as u64;
    let inside = |s: Segment| {
        s.handle != key || s.length == 0 || (s.offset >= lo && s.end().is_some_and(|e| e <= hi))
    };
    h.read_list().iter().all(|r| inside(r.segment))
        && h.write_list().iter().all(|c| c.iter().all(inside))
        && h.reply_chunk().is_none_or(|c| c.iter().all(inside))
}

/// Calls with RDMA Reads and Writes in flight, then the peer vanishes in one of three ways.
fn disconnects(ctx: &Ctx<'_>, conn: u64) {
    let mut rng = Rng(derive(ctx.seed, ctx.batch << 8 | conn | 0x40));
    for round in 0..6u64 {
        let mut p = Peer::connect(&ctx.addr, PeerOpts::GOOD);
        if rng.below(2) == 0 {
            p.null_ok(1, "disconnects: first NULL");
        }
        let key = p.data.rkey();
        let base = p.data.addr();
        let bulk = ctx.cfg.bulk;
        let len = bulk.min(DATA_LEN as u32 - 4096) - 64;
        let calls = 1 + rng.below(u64::from(ctx.cfg.credits.min(12)));
        for c in 0..calls {
            let xid = 100 + c as u32;
            let m = match rng.below(4) {
                0 => {
                    // WRITE of a large opaque through a Read chunk.
                    let rd = [ReadSegment::new(48, key, len, base)];
                    msg::msg_call(
                        xid,
                        Chunks {
                            reads: &rd,
                            ..Chunks::NONE
                        },
                        WRITE,
                        &msg::words(1, len),
                    )
                }
                1 => {
                    // READ of a large result into a Write chunk.
                    let ws = [Segment::new(key, len, base)];
                    msg::msg_call(
                        xid,
                        Chunks {
                            writes: &[&ws],
                            ..Chunks::NONE
                        },
                        READ,
                        &msg::words(len, 3),
                    )
                }
                2 => {
                    // A Long Call whose P0 chunk is split in many pieces.
                    let mut body = msg::call_header(xid, ECHO);
                    body.extend_from_slice(&2000u32.to_be_bytes());
                    body.resize(body.len() + 2000, 0x33);
                    p.put(0, &body);
                    let segs: Vec<ReadSegment> = (0..8)
                        .map(|k| {
                            let a = k * body.len() / 8;
                            let b = (k + 1) * body.len() / 8;
                            ReadSegment::new(0, key, (b - a) as u32, base + a as u64)
                        })
                        .collect();
                    let rc = [Segment::new(key, 8192, base + 65536)];
                    msg::nomsg(
                        xid,
                        Chunks {
                            reads: &segs,
                            reply: Some(&rc),
                            ..Chunks::NONE
                        },
                    )
                }
                _ => null_call(xid),
            };
            if p.post(&m).is_err() {
                break;
            }
            if rng.below(3) == 0 {
                p.poll();
            }
        }
        match rng.below(4) {
            0 => {}
            1 => thread::yield_now(),
            2 => thread::sleep(Duration::from_micros(rng.below(300))),
            _ => {
                for _ in 0..rng.below(50) {
                    p.poll();
                }
            }
        }
        match (round + rng.below(3)) % 3 {
            0 => drop(p),
            1 => p.qp.disconnect(),
            _ => p.qp.faults().drop_connection(),
        }
        ctx.seen.teardowns.fetch_add(1, Ordering::Relaxed);
    }
}

/// Connect, maybe call, leave; repeatedly.
fn churn(ctx: &Ctx<'_>, conn: u64) {
    let mut rng = Rng(derive(ctx.seed, ctx.batch << 8 | conn | 0x20));
    for i in 0..(10 + rng.below(20)) {
        let mut p = Peer::connect(
            &ctx.addr,
            PeerOpts {
                nrecv: 1 + rng.below(8) as u32,
                ..PeerOpts::GOOD
            },
        );
        if rng.below(2) == 0 {
            p.null_ok(i as u32, "churn");
        }
        match rng.below(3) {
            0 => drop(p),
            1 => p.qp.disconnect(),
            _ => p.qp.faults().drop_connection(),
        }
    }
}

/// Peers whose receive side misbehaves: receives smaller than advertised, receives never
/// reposted, a completion queue that is never polled, and Send With Invalidate of rkeys that
/// are not windows. The server may end such a connection (or answer into the void); it must
/// not suffer, and a good connection is served throughout.
fn bad_receivers(ctx: &Ctx<'_>, conn: u64) {
    let mut rng = Rng(derive(ctx.seed, ctx.batch << 8 | conn | 0x10));
    let mut good = Peer::connect(&ctx.addr, PeerOpts::GOOD);
    good.null_ok(1, "bad receivers: good connection");
    for round in 0..4u32 {
        let kind = rng.below(4);
        let opts = match kind {
            0 => PeerOpts {
                recv_len: pick(&mut rng, &[0, 16, 40, 64]),
                ..PeerOpts::GOOD
            },
            1 => PeerOpts {
                nrecv: rng.below(3) as u32,
                ..PeerOpts::GOOD
            },
            2 => PeerOpts {
                cq_depth: 4,
                ..PeerOpts::GOOD
            },
            _ => PeerOpts {
                ri: true,
                ..PeerOpts::GOOD
            },
        };
        let mut p = Peer::connect(&ctx.addr, opts);
        let key = p.data.rkey();
        let base = p.data.addr();
        for x in 0..(4 + rng.below(12)) as u32 {
            let m = match kind {
                3 => {
                    // The server invalidates the first Write-list handle: a region's key, or
                    // a bogus one.
                    let h = if rng.below(2) == 0 { key } else { rng.word() };
                    let ws = [Segment::new(h, 0, base)];
                    msg::msg_call(
                        x,
                        Chunks {
                            writes: &[&ws],
                            ..Chunks::NONE
                        },
                        NULL,
                        &[],
                    )
                }
                _ => null_call(x),
            };
            if p.post(&m).is_err() {
                break;
            }
            if kind != 2 && kind != 1 {
                p.poll();
            }
        }
        thread::sleep(Duration::from_millis(rng.below(20)));
        good.null_ok(0x600 + round, "bad receivers: good connection meanwhile");
        drop(p);
    }
}

/// One batch: a mix of the scenarios above, on one to four connections at once.
fn batch(ctx: &Ctx<'_>) {
    let mut rng = Rng(derive(ctx.seed, ctx.batch));
    let conns = 1 + rng.below(4);
    let plan: Vec<u64> = (0..conns)
        .map(|c| {
            if c == 0 {
                // The first connection always runs the message stream.
                0
            } else {
                rng.below(5)
            }
        })
        .collect();
    let n = MSGS_PER_BATCH / conns.max(1) + 20;
    thread::scope(|s| {
        let handles: Vec<_> = plan
            .iter()
            .enumerate()
            .map(|(c, &what)| {
                let c = c as u64;
                s.spawn(move || match what {
                    0 => sequential(ctx, c, n),
                    1 => burst(ctx, c),
                    2 => disconnects(ctx, c),
                    3 => churn(ctx, c),
                    _ => bad_receivers(ctx, c),
                })
            })
            .collect();
        for h in handles {
            if let Err(e) = h.join() {
                std::panic::resume_unwind(e);
            }
        }
    });
}

fn run_campaign(cfg: Cfg, seed: u64, batches: u64) {
    let _serial = serial();
    let seen = Seen::default();
    let mut srv = Server::start(&format!("{}-{seed:x}", cfg.name), cfg);
    eprintln!(
        "serve_fuzz: config {} seed {seed:#x} batches {batches}, server pid {}",
        cfg.name,
        srv.pid()
    );
    fixed_cases(&mut srv, &seen);
    for b in 0..batches {
        if srv.started.elapsed() > SERVER_TURN {
            // A fresh server before the old one reaches its own `--seconds`.
            let counters = srv.finish(&format!("seed {seed:#x} before batch {b}"));
            check_counters(&counters, &seen);
            seen.reset();
            srv = Server::start(&format!("{}-{seed:x}-{b}", cfg.name), cfg);
        }
        let ctx = Ctx {
            addr: srv.soft_addr(),
            cfg,
            seed,
            batch: b,
            seen: &seen,
        };
        batch(&ctx);
        let what = format!("seed {seed:#x} after batch {b}");
        srv.assert_alive(&what);
        srv.fresh_connection_serves(&what);
        srv.assert_settled(&what);
        let mut r = rng_for(seed, b);
        if r.below(4) == 0 {
            zombies(&mut srv, seed, b);
        }
        if r.below(3) == 0 {
            killed_mid_send(&mut srv, seed, b);
        }
    }
    if rng_for(seed, batches).below(3) == 0 || batches == 0 {
        zombies(&mut srv, seed, batches);
    }
    let rss = (srv.rss0, srv.rss_max);
    let counters = srv.finish_holding(
        &format!("seed {seed:#x} end (SIGTERM with hostile peers)"),
        |s| hostile_at_shutdown(s, seed),
    );
    check_counters(&counters, &seen);
    eprintln!(
        "serve_fuzz: config {} seed {seed:#x}: {} messages ({} SUCCESS, {} Long replies, {} \
         bytes placed by RDMA Write, {} ERR_VERS, {} ERR_CHUNK, {} GARBAGE_ARGS, {} discarded), {} teardowns, {} overrun bursts, server RSS {} KiB \
         warmed up, {} KiB at most after a batch; counters {}",
        cfg.name,
        seen.messages.load(Ordering::Relaxed),
        seen.successes.load(Ordering::Relaxed),
        seen.long_replies.load(Ordering::Relaxed),
        seen.bytes_placed.load(Ordering::Relaxed),
        seen.err_vers.load(Ordering::Relaxed),
        seen.err_chunk.load(Ordering::Relaxed),
        seen.garbage_args.load(Ordering::Relaxed),
        seen.discards.load(Ordering::Relaxed),
        seen.teardowns.load(Ordering::Relaxed),
        seen.overrun_bursts.load(Ordering::Relaxed),
        rss.0,
        rss.1,
        counters
    );
}

/// Fixed cases first, each against the model, among them the reproducers of RDMA Writes
/// posted before an ERR_CHUNK (the peer's memory must stay untouched).
fn fixed_cases(srv: &mut Server, seen: &Seen) {
    let cfg = srv.cfg;
    let mut p = Peer::connect(&srv.soft_addr(), PeerOpts::GOOD);
    p.null_ok(1, "fixed cases");
    let (key, base) = (p.data.rkey(), p.data.addr());
    let fits = [Segment::new(key, 100, base)];
    let short = [Segment::new(key, 50, base + 4096)];
    let empty: [Segment; 0] = [];
    // Larger than the reply threshold.
    let n2 = cfg.reply_threshold(PeerOpts::GOOD.peer_recv()) + 100;
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "MULTI of two 100-byte results: first Write chunk fits, second too small",
            msg::msg_call(
                0xf1,
                Chunks {
                    writes: &[&fits, &short],
                    ..Chunks::NONE
                },
                MULTI,
                &msg::words(2, 100),
            ),
            true,
        ),
        (
            "MULTI of two results over the reply threshold: first in a Write chunk, second \
             inline (empty chunk) needing a Reply chunk the Call lacks",
            msg::msg_call(
                0xf2,
                Chunks {
                    writes: &[&[Segment::new(key, n2, base + 8192)], &empty],
                    ..Chunks::NONE
                },
                MULTI,
                &msg::words(2, n2),
            ),
            true,
        ),
        (
            "READ of 100 bytes into a fitting Write chunk",
            msg::msg_call(
                0xf3,
                Chunks {
                    writes: &[&fits],
                    ..Chunks::NONE
                },
                READ,
                &msg::words(100, 9),
            ),
            false,
        ),
    ];
    for (name, m, err_chunk) in cases {
        let want = model_answer(&m, &p, &cfg);
        match &want {
            Want::Reply(r) => {
                let is_err_chunk = r.send.len() == 20 && w(&r.send, 12) == 4;
                assert_eq!(is_err_chunk, err_chunk, "{name}: the model's answer");
                assert_eq!(r.writes.is_empty(), err_chunk, "{name}: the model's writes");
            }
            other => panic!("{name}: the model predicts {other:?}"),
        }
        seen.count(&want);
        assert!(p.exchange(&m, &want, &format!("fixed case: {name}")));
    }
    p.null_ok(2, "fixed cases");
}

/// Requester processes killed (SIGKILL) at a random moment while they stream large Calls:
/// often in the middle of a Send, after it claimed the server's completion slot and before
/// it published it. The server must release every such connection (threads, descriptors)
/// and go on serving.
fn killed_mid_send(srv: &mut Server, seed: u64, batch: u64) {
    let mut rng = rng_for(seed, batch ^ 0x6b);
    for k in 0..(2 + rng.below(4)) {
        let ready = kill_a_sender(srv, Duration::from_micros(rng.below(5000)));
        assert!(
            ready,
            "seed {seed:#x} batch {batch} child {k}: never connected"
        );
    }
    let what = format!("seed {seed:#x} batch {batch}: requesters killed mid-Send");
    srv.assert_alive(&what);
    srv.fresh_connection_serves(&what);
    srv.assert_settled(&what);
}

/// Starts a child requester ([`hostile_child_sender`]) and kills it with SIGKILL `after`
/// it is connected and streaming; whether it got connected.
fn kill_a_sender(srv: &Server, after: Duration) -> bool {
    {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "hostile_child_sender",
                "--ignored",
                "--nocapture",
            ])
            .env("RPCRDMA_FUZZ_CHILD", &srv.addr)
            .env("RPCRDMA_FUZZ_CHILD_LEN", srv.cfg.inline.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child requester");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.contains("child ready") {
                    let _ = tx.send(());
                }
            }
        });
        let ready = rx.recv_timeout(Duration::from_secs(20)).is_ok();
        thread::sleep(after);
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
        ready
    }
}

/// Hundreds of requesters killed mid-Send, on demand (`cargo test --release -p
/// rpcrdma-tools --test serve_fuzz -- --ignored killed_senders_never_exhaust_the_server`):
/// each leaves its connection's completion queue stuck behind an unpublished slot, which the
/// server must notice by the queue pair's state and drop; every tenth kill, a new connection
/// must be served and no connection may stay wedged. Before that was fixed, the worker held
/// 64 wedged connections after some 350 kills and served no new one.
#[test]
#[ignore = "a long run (400 processes killed), on demand"]
fn killed_senders_never_exhaust_the_server() {
    let _serial = serial();
    let cfg = CONFIGS[env_u64("RPCRDMA_FUZZ_CONFIG").unwrap_or(1) as usize % CONFIGS.len()];
    let mut srv = Server::start("exhaust", cfg);
    let (_, f0) = srv.baseline;
    let mut rng = Rng(derive(DEFAULT_SEED, 0xe7));
    for kills in 1..=400u32 {
        // A child that never got served is the symptom itself: look at once.
        let ready = kill_a_sender(&srv, Duration::from_micros(rng.below(3000)));
        srv.assert_alive("killing senders");
        if ready && kills % 10 != 0 {
            continue;
        }
        thread::sleep(Duration::from_millis(500));
        let (_, f) = srv.usage();
        // Each wedged connection keeps 7 descriptors (three memfds of its own, three of the
        // peer's, its socket).
        let wedged = (f.saturating_sub(f0)) / 7;
        let served = match Peer::try_connect(&srv.soft_addr(), PeerOpts::GOOD) {
            Ok(mut p) => {
                p.send(&null_call(1), "probe") == WcStatus::Success
                    && p.next_message("probe").is_some()
            }
            Err(_) => false,
        };
        eprintln!(
            "{kills} kills: {wedged} connections wedged, server resident memory {} KiB; a new \
             connection served: {served}",
            srv.rss_kb()
        );
        assert!(
            served && wedged == 0,
            "after {kills} requesters killed mid-Send the server holds {wedged} wedged \
             connections; a new one served: {served}"
        );
    }
}

/// The child process of [`killed_mid_send`]: streams Calls as large as the server takes,
/// as many in flight as granted, until killed (or 30 s). Does nothing unless started so.
#[test]
#[ignore = "the child process of the campaign's killed requesters"]
fn hostile_child_sender() {
    let Ok(addr) = std::env::var("RPCRDMA_FUZZ_CHILD") else {
        return;
    };
    let len: usize = std::env::var("RPCRDMA_FUZZ_CHILD_LEN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let mut p = Peer::connect(&addr.parse().unwrap(), PeerOpts::GOOD);
    p.null_ok(1, "child");
    let grant = p.grant.unwrap().min(32);
    println!("child ready");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut outstanding = 0;
    let mut xid = 2u32;
    while Instant::now() < deadline {
        while outstanding < grant {
            let mut m = null_call(xid);
            // NULL ignores its arguments: the rest is there to make the copy long.
            m.resize(len.min(SLOT), 0xa5);
            xid = xid.wrapping_add(1);
            if p.post(&m).is_err() {
                return;
            }
            outstanding += 1;
        }
        p.poll();
        outstanding -= p.received.len() as u32;
        p.received.clear();
        p.send_done.clear();
        if !p.recv_errors.is_empty() {
            return;
        }
    }
}

fn rng_for(seed: u64, batch: u64) -> Rng {
    Rng(derive(seed, batch << 16 | 0xbeef))
}

/// Peers whose connection the server tore down (their Calls name memory they do not
/// expose) but which keep their own end open: the server must let go of each at once, its
/// threads and descriptors back to the baseline while the peers still hold theirs.
fn zombies(srv: &mut Server, seed: u64, batch: u64) {
    let mut rng = rng_for(seed, batch ^ 0x7a);
    let cfg = srv.cfg;
    let mut held = Vec::new();
    for i in 0..(2 + rng.below(6)) {
        let mut p = Peer::connect(&srv.soft_addr(), PeerOpts::GOOD);
        p.null_ok(1, "zombie");
        let key = match rng.below(3) {
            0 => p.stale_key,
            1 => p.hidden.rkey(),
            _ => p.recv.rkey(),
        };
        let rd = [ReadSegment::new(48, key, 64, p.data.addr())];
        let m = msg::msg_call(
            2,
            Chunks {
                reads: &rd,
                ..Chunks::NONE
            },
            WRITE,
            &msg::words(1, 64),
        );
        let want = model_answer(&m, &p, &cfg);
        assert_eq!(
            want,
            Want::TornDown,
            "the model of a Read from unexposed memory"
        );
        let what = format!("seed {seed:#x} batch {batch} zombie {i}");
        assert!(!p.exchange(&m, &want, &what));
        held.push(p);
    }
    srv.assert_settled(&format!(
        "seed {seed:#x} batch {batch}: {} torn-down peers still holding their end",
        held.len()
    ));
    drop(held);
}

/// Something kept connected to the server while it is stopped.
#[allow(dead_code)]
enum Held {
    Peer(Box<Peer>),
    Socket(UnixStream),
}

/// Connections left in bad states for the SIGTERM: a peer without receives whose Calls were
/// answered into nothing, one with Calls whose large RDMA Reads were just posted, one with a
/// completion queue it never polls, an idle one, a silent socket and one with half a
/// handshake.
fn hostile_at_shutdown(srv: &Server, seed: u64) -> Vec<Held> {
    let mut rng = rng_for(seed, 0xdead);
    let addr = srv.soft_addr();
    let mut held = Vec::new();
    let mut norecv = Peer::connect(
        &addr,
        PeerOpts {
            nrecv: 0,
            ..PeerOpts::GOOD
        },
    );
    for x in 0..3 {
        let _ = norecv.post(&null_call(x));
    }
    held.push(Held::Peer(Box::new(norecv)));
    let mut pulling = Peer::connect(&addr, PeerOpts::GOOD);
    let (key, base) = (pulling.data.rkey(), pulling.data.addr());
    let len = srv.cfg.bulk.min(DATA_LEN as u32) - 64;
    for x in 0..srv.cfg.credits.min(8) {
        let rd = [ReadSegment::new(48, key, len, base)];
        let m = msg::msg_call(
            x,
            Chunks {
                reads: &rd,
                ..Chunks::NONE
            },
            WRITE,
            &msg::words(1, len),
        );
        let _ = pulling.post(&m);
    }
    held.push(Held::Peer(Box::new(pulling)));
    let mut deaf = Peer::connect(
        &addr,
        PeerOpts {
            cq_depth: 2,
            ..PeerOpts::GOOD
        },
    );
    for x in 0..(4 + rng.below(8) as u32) {
        let _ = deaf.post(&null_call(x));
    }
    held.push(Held::Peer(Box::new(deaf)));
    held.push(Held::Peer(Box::new(Peer::connect(&addr, PeerOpts::GOOD))));
    held.push(Held::Socket(unix_connect(&srv.addr)));
    let mut half = unix_connect(&srv.addr);
    let _ = half.write_all(b"SRD1\x01");
    held.push(Held::Socket(half));
    held
}

/// The server counted at least the errors the peers received.
fn check_counters(workers: &Value, seen: &Seen) {
    let counters = workers;
    let get = |k: &str| -> u64 {
        workers
            .as_array()
            .expect("workers")
            .iter()
            .map(|w| {
                w["counters"]["errors"][k]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{k} in {w}"))
            })
            .sum()
    };
    for (k, v) in [
        ("err_vers", &seen.err_vers),
        ("err_chunk", &seen.err_chunk),
        ("garbage_args", &seen.garbage_args),
    ] {
        let v = v.load(Ordering::Relaxed);
        assert!(
            get(k) >= v,
            "the server counted {} {k}, the peers received {v}: {counters}",
            get(k)
        );
    }
}

/// The campaign: seeded structured hostile traffic against `rpcrdma serve` (see the module
/// documentation).
#[test]
fn seeded_hostile_peers_against_rpcrdma_serve() {
    let batches = env_u64("RPCRDMA_FUZZ_ITERS").unwrap_or(DEFAULT_BATCHES);
    let seed = env_u64("RPCRDMA_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let configs: Vec<Cfg> = match std::env::var("RPCRDMA_FUZZ_CONFIG").ok().as_deref() {
        Some("all") => CONFIGS.to_vec(),
        Some(i) => {
            vec![CONFIGS[i.trim().parse::<usize>().expect("RPCRDMA_FUZZ_CONFIG") % CONFIGS.len()]]
        }
        None => vec![CONFIGS[0]],
    };
    for cfg in configs {
        run_campaign(cfg, seed, batches);
    }
}
