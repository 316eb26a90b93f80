//! A raw requester with its own memory map: the peer's settings and private data, the
//! memory the model knows, and one exchange checked against the model.

use std::ops::{Deref, DerefMut};

use rpcrdma_engine::fabric::soft::{SoftAddr, SoftMr};
use rpcrdma_engine::fabric::{Access, ConnectError, MemoryRegion, ProtectionDomain, WcStatus};
use rpcrdma_engine::program::fill_pattern;
use rpcrdma_proto::header::Segment;
use rpcrdma_proto::private_data::PrivateData;

use crate::serve_common::msg::w;
use crate::serve_common::{connect_retrying, describe, hex, ConnOpts, RawConn};

use crate::model::Want;
use crate::WAIT;

/// Bytes of each receive slot and send slot.
pub(crate) const SLOT: usize = 16384;
const SEND_SLOTS: usize = 16;
/// The region chunks name (remote read and write).
pub(crate) const DATA_LEN: usize = 1 << 20;
/// A region exposed for remote read only, and one not exposed at all.
pub(crate) const SIDE_LEN: usize = 65536;

/// How a [`Peer`] connects and what its receive side does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerOpts {
    pub(crate) nrecv: u32,
    /// Bytes of each receive actually posted (a lying peer posts less than it advertises).
    pub(crate) recv_len: u32,
    /// The RFC 8797 private data sent.
    pub(crate) pdata: Pdata,
    /// The R bit (remote invalidation).
    pub(crate) ri: bool,
    /// Completions the peer's completion queue holds.
    pub(crate) cq_depth: u32,
}

/// What a peer puts in its connection's private data.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pdata {
    /// RFC 8797 data advertising these Send and Receive sizes.
    Sizes(u32),
    /// None at all (RFC 8797 §5.1: 1024 bytes each way).
    Absent,
    /// 56 bytes that hold no RFC 8797 identifier (as absent).
    Junk,
}

impl PeerOpts {
    pub(crate) const GOOD: PeerOpts = PeerOpts {
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
    pub(crate) fn peer_recv(&self) -> u32 {
        match self.pdata {
            Pdata::Sizes(n) => PrivateData::new(n, n, self.ri).receive_size,
            Pdata::Absent | Pdata::Junk => 1024,
        }
    }
}

/// A raw requester (the shared [`RawConn`], which it derefs to) with a memory map the model
/// knows: beside the data region, a region exposed for remote read only, one not exposed,
/// a stale rkey, and the model's copy of the data region.
pub(crate) struct Peer {
    conn: RawConn,
    pub(crate) ro: SoftMr,
    pub(crate) hidden: SoftMr,
    pub(crate) stale_key: u32,
    /// What the data region holds, as far as the model knows.
    pub(crate) mirror: Vec<u8>,
    ro_bytes: Vec<u8>,
    pub(crate) opts: PeerOpts,
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
pub(crate) struct MemView<'a> {
    data_key: u32,
    data_addr: u64,
    data: &'a [u8],
    ro_key: u32,
    ro_addr: u64,
    ro: &'a [u8],
}

impl MemView<'_> {
    /// The bytes a remote RDMA Read of `s` returns, `None` for a remote access error.
    pub(crate) fn read(&self, s: &Segment) -> Option<&[u8]> {
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
    pub(crate) fn write_at(&self, handle: u32, offset: u64, len: u32) -> Option<usize> {
        if handle != self.data_key {
            return None;
        }
        let off = usize::try_from(offset.checked_sub(self.data_addr)?).ok()?;
        (off.checked_add(len as usize)? <= self.data.len()).then_some(off)
    }
}

impl Peer {
    /// Connects with the settings and private data of `o` (one attempt).
    pub(crate) fn try_connect(addr: &SoftAddr, o: PeerOpts) -> Result<Peer, ConnectError> {
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
    pub(crate) fn connect(addr: &SoftAddr, o: PeerOpts) -> Peer {
        connect_retrying(WAIT, || Peer::try_connect(addr, o))
    }

    /// The peer's memory as the model sees it.
    pub(crate) fn view(&self) -> MemView<'_> {
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
    pub(crate) fn put(&mut self, off: usize, bytes: &[u8]) {
        let end = (off + bytes.len()).min(DATA_LEN);
        let n = end.saturating_sub(off);
        if n > 0 {
            self.data.write_at(off, &bytes[..n]);
            self.mirror[off..end].copy_from_slice(&bytes[..n]);
        }
    }

    /// The data region equals the mirror.
    pub(crate) fn check_memory(&self, what: &str) {
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
    pub(crate) fn exchange(&mut self, m: &[u8], want: &Want, what: &str) -> bool {
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
