//! The campaign of one configuration around its batches: the fixed cases first, between
//! batches torn-down peers that hold on and requesters killed mid-Send, at the end SIGTERM
//! with hostile peers still connected and the counters compared.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use rpcrdma_engine::fabric::MemoryRegion;
use rpcrdma_engine::program::{MULTI, READ, WRITE};
use rpcrdma_proto::header::{Chunks, ReadSegment, Segment};
use serde_json::Value;

use crate::serve_common::msg::{self, null_call, w, Rng};
use crate::serve_common::{serial, unix_connect};

use crate::batches::{batch, Ctx, Seen};
use crate::model::{model_answer, Want};
use crate::peer::{Peer, PeerOpts, DATA_LEN};
use crate::server::Server;
use crate::settings::{derive, Cfg};
use crate::SERVER_TURN;

pub(crate) fn run_campaign(cfg: Cfg, seed: u64, batches: u64) {
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
pub(crate) fn kill_a_sender(srv: &Server, after: Duration) -> bool {
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
pub(crate) enum Held {
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
