//! The generator of structured hostile messages.

use std::ops::Range;

use rpcrdma_engine::fabric::MemoryRegion;
use rpcrdma_engine::program::{
    fill_pattern, opaque_len, ECHO, MAX_ECHO, MULTI, NULL, PROG, READ, VERS, WRITE,
};
use rpcrdma_proto::header::{Body, Chunks, Header, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::rpc::{CallHeader, OpaqueAuth, AUTH_SYS};

use crate::serve_common::msg::{self, null_call, set_word, Rng};

use crate::model::arg;
use crate::peer::{Peer, DATA_LEN, SIDE_LEN, SLOT};
use crate::settings::Cfg;

/// Bump allocation of chunk memory inside a window of the data region.
pub(crate) struct Alloc {
    window: Range<usize>,
    next: usize,
}

impl Alloc {
    pub(crate) fn new(window: Range<usize>) -> Alloc {
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

pub(crate) struct Gen<'a> {
    pub(crate) rng: &'a mut Rng,
    pub(crate) p: &'a mut Peer,
    pub(crate) alloc: Alloc,
    pub(crate) cfg: Cfg,
    /// One hostile twist in this many choices.
    pub(crate) hostile: u64,
    /// Only what a burst can carry (no teardowns planned, no oversized Sends).
    pub(crate) tame: bool,
}

/// A size from a list biased to boundaries.
pub(crate) fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
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
    pub(crate) fn message(&mut self) -> (Vec<u8>, String) {
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
