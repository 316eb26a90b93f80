//! Batches: what the peers saw, and the scenarios one batch runs on its connections
//! (sequential messages, bursts, disconnects, churn, bad receivers).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::fabric::soft::SoftAddr;
use rpcrdma_engine::fabric::{MemoryRegion, QueuePair, WcStatus};
use rpcrdma_engine::program::{ECHO, NULL, READ, WRITE};
use rpcrdma_proto::header::{Chunks, HeaderView, ReadSegment, Segment};
use rpcrdma_proto::rpc::ReplyHeader;

use crate::serve_common::hex;
use crate::serve_common::msg::{self, null_call, rpc_reply, w, Rng};

use crate::generate::{pick, Alloc, Gen};
use crate::model::{model_answer, Reply, Want};
use crate::peer::{Pdata, Peer, PeerOpts, DATA_LEN};
use crate::settings::{derive, Cfg};
use crate::{MSGS_PER_BATCH, WAIT};

/// What the peers saw, for the final comparison with the server's counters.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) err_vers: AtomicU64,
    pub(crate) err_chunk: AtomicU64,
    pub(crate) garbage_args: AtomicU64,
    pub(crate) messages: AtomicU64,
    pub(crate) teardowns: AtomicU64,
    pub(crate) overrun_bursts: AtomicU64,
    pub(crate) discards: AtomicU64,
    pub(crate) successes: AtomicU64,
    pub(crate) long_replies: AtomicU64,
    pub(crate) bytes_placed: AtomicU64,
}

impl Seen {
    /// Starts over (a new server counts from zero).
    pub(crate) fn reset(&self) {
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

    pub(crate) fn count(&self, want: &Want) {
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

pub(crate) struct Ctx<'a> {
    pub(crate) addr: SoftAddr,
    pub(crate) cfg: Cfg,
    pub(crate) seed: u64,
    pub(crate) batch: u64,
    pub(crate) seen: &'a Seen,
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
pub(crate) fn batch(ctx: &Ctx<'_>) {
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
