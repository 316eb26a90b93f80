//! Raw RPC-over-RDMA peers for hostile-peer tests: a client and a server built directly on
//! the soft fabric, with their own registered buffers and receives, that send hand-built
//! messages (encoded with `rpcrdma_proto::header::Header`) and report everything they
//! receive, unjudged.
#![allow(dead_code)]

mod msg;
pub use msg::*;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rpcrdma_engine::fabric::soft::{Soft, SoftAddr, SoftCq, SoftListener, SoftMr, SoftPd, SoftQp};
use rpcrdma_engine::fabric::{
    Access, CmPrivateBytes, CompletionQueue, ConnRequest, Device, Listener, MemoryRegion,
    ProtectionDomain, Provider, QpCaps, QpInit, QueuePair, RecvWr, RemoteAddr, SendWr, Sge, Wc,
    WcStatus,
};
use rpcrdma_engine::responder::ServerConn;
use rpcrdma_proto::private_data;

/// Size of each receive buffer and send slot.
pub const SLOT: usize = 8192;
/// Send slots (a send slot is reused round-robin; soft Sends copy at post time).
const SEND_SLOTS: usize = 8;
/// Bytes of the region exposed to the peer for chunks.
pub const DATA_LEN: usize = 1 << 20;

const RECV_TAG: u64 = 1 << 63;

/// The buffers and queues shared by both raw roles.
pub struct Ends {
    pub qp: SoftQp,
    cq: SoftCq,
    recv: SoftMr,
    send: SoftMr,
    /// Memory with remote read and write rights, advertised in chunks (its rkey is valid
    /// for the whole connection).
    pub data: SoftMr,
    /// Scratch memory for the raw end's own RDMA Reads and Writes.
    pub scratch: SoftMr,
    nrecv: u32,
    next_send: u64,
    /// Messages received, oldest first.
    pub received: VecDeque<Vec<u8>>,
    /// Completions of send work requests (Send, RDMA Read/Write), oldest first.
    pub send_done: VecDeque<Wc>,
    /// Receive completions in error.
    pub recv_errors: Vec<WcStatus>,
    _pd: SoftPd,
}

fn caps(nrecv: u32) -> QpCaps {
    QpCaps {
        max_send_wr: 256,
        max_recv_wr: nrecv.max(1),
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// The regions of a raw end: receive slots, send slots, remote-accessible data, scratch.
type Regions = (SoftMr, SoftMr, SoftMr, SoftMr);

/// A raw end's domain, completion queue and regions.
fn resources(device: &<Soft as Provider>::Device, nrecv: u32) -> (SoftPd, SoftCq, Regions) {
    let pd = device.alloc_pd().unwrap();
    let cq = device.create_cq(1024).unwrap();
    let regions = regions(&pd, nrecv);
    (pd, cq, regions)
}

fn regions(pd: &SoftPd, nrecv: u32) -> Regions {
    let recv = pd
        .alloc_region(SLOT * nrecv.max(1) as usize, Access::LOCAL_WRITE)
        .unwrap();
    let send = pd
        .alloc_region(SLOT * SEND_SLOTS, Access::LOCAL_WRITE)
        .unwrap();
    let data = pd
        .alloc_region(
            DATA_LEN,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .unwrap();
    let scratch = pd.alloc_region(DATA_LEN, Access::LOCAL_WRITE).unwrap();
    (recv, send, data, scratch)
}

fn post_recvs(
    qp: &mut SoftQp,
    recv: &SoftMr,
    nrecv: u32,
) -> Result<(), rpcrdma_engine::fabric::PostError> {
    for i in 0..nrecv {
        let sge = [recv.sge(i as usize * SLOT, SLOT as u32)];
        qp.post_recv(&RecvWr::new(RECV_TAG | u64::from(i), &sge))?;
    }
    Ok(())
}

impl Ends {
    fn new(qp: SoftQp, cq: SoftCq, pd: SoftPd, regions: Regions, nrecv: u32) -> Ends {
        let (recv, send, data, scratch) = regions;
        Ends {
            qp,
            cq,
            recv,
            send,
            data,
            scratch,
            nrecv,
            next_send: 0,
            received: VecDeque::new(),
            send_done: VecDeque::new(),
            recv_errors: Vec::new(),
            _pd: pd,
        }
    }

    /// Moves every available completion into `received` / `send_done`, reposting receives.
    pub fn poll(&mut self) -> usize {
        let mut wc = [Wc::default(); 16];
        let mut total = 0;
        loop {
            let n = self.cq.poll(&mut wc).expect("raw cq");
            for w in &wc[..n] {
                if w.wr_id & RECV_TAG != 0 {
                    let i = (w.wr_id & !RECV_TAG) as usize;
                    if w.status != WcStatus::Success {
                        self.recv_errors.push(w.status);
                        continue;
                    }
                    let mut m = vec![0; w.byte_len as usize];
                    self.recv.read_at(i * SLOT, &mut m);
                    self.received.push_back(m);
                    let sge = [self.recv.sge(i * SLOT, SLOT as u32)];
                    let _ = self.qp.post_recv(&RecvWr::new(w.wr_id, &sge));
                } else {
                    self.send_done.push_back(*w);
                }
            }
            total += n;
            if n < wc.len() {
                return total;
            }
        }
    }

    fn slot_sge(&mut self, bytes: &[u8]) -> (u64, Sge) {
        assert!(bytes.len() <= SLOT);
        let id = self.next_send;
        self.next_send += 1;
        let off = (id as usize % SEND_SLOTS) * SLOT;
        self.send.write_at(off, bytes);
        (id, self.send.sge(off, bytes.len() as u32))
    }

    /// Posts a signaled Send of `bytes` (with invalidation of `inv` if set); returns the
    /// status of the post (the completion is collected by [`poll`](Self::poll)).
    pub fn post(
        &mut self,
        bytes: &[u8],
        inv: Option<u32>,
    ) -> Result<u64, rpcrdma_engine::fabric::PostError> {
        let (id, sge) = self.slot_sge(bytes);
        let sges = [sge];
        let wr = match inv {
            Some(rkey) => SendWr::send_with_inv(id, &sges, rkey),
            None => SendWr::send(id, &sges),
        };
        self.qp.post_send(&wr.signaled())?;
        Ok(id)
    }

    /// Waits (bounded) for the completion of send work request `id` and returns its status.
    pub fn wait_send(&mut self, id: u64) -> WcStatus {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.poll();
            if let Some(p) = self.send_done.iter().position(|w| w.wr_id == id) {
                return self.send_done.remove(p).unwrap().status;
            }
            assert!(Instant::now() < deadline, "send {id} never completed");
            std::thread::yield_now();
        }
    }

    /// Sends `bytes` and returns the Send's completion status.
    pub fn send(&mut self, bytes: &[u8]) -> WcStatus {
        match self.post(bytes, None) {
            Ok(id) => self.wait_send(id),
            Err(_) => WcStatus::WrFlushErr,
        }
    }

    /// An RDMA Write of `len` bytes of scratch memory (filled with `fill`) to `remote`;
    /// returns the completion status.
    pub fn rdma_write(&mut self, remote: RemoteAddr, len: u32, fill: u8) -> WcStatus {
        self.rdma_write_bytes(remote, &vec![fill; len as usize])
    }

    /// An RDMA Write of `data` (through scratch memory) to `remote`; returns the status.
    pub fn rdma_write_bytes(&mut self, remote: RemoteAddr, data: &[u8]) -> WcStatus {
        let len = data.len() as u32;
        self.scratch.write_at(0, data);
        let id = self.next_send;
        self.next_send += 1;
        let sges = [self.scratch.sge(0, len)];
        if self
            .qp
            .post_send(&SendWr::write(id, &sges, remote).signaled())
            .is_err()
        {
            return WcStatus::WrFlushErr;
        }
        self.wait_send(id)
    }

    /// An RDMA Read of `len` bytes from `remote` into scratch memory; returns the status
    /// and the bytes.
    pub fn rdma_read(&mut self, remote: RemoteAddr, len: u32) -> (WcStatus, Vec<u8>) {
        let id = self.next_send;
        self.next_send += 1;
        let sges = [self.scratch.sge(0, len)];
        if self
            .qp
            .post_send(&SendWr::read(id, &sges, remote).signaled())
            .is_err()
        {
            return (WcStatus::WrFlushErr, vec![]);
        }
        let st = self.wait_send(id);
        let mut out = vec![0; len as usize];
        self.scratch.read_at(0, &mut out);
        (st, out)
    }

    /// The remote address of `offset` in the data region.
    pub fn data_at(&self, offset: usize) -> RemoteAddr {
        self.data.remote(offset)
    }
}

/// A raw requester connected to a real responder.
pub struct RawClient {
    pub ends: Ends,
    /// The responder's RFC 8797 private data.
    pub peer: CmPrivateBytes,
}

impl RawClient {
    /// Connects to `addr`, posting `nrecv` receives of [`SLOT`] bytes, advertising RFC 8797
    /// private data with 8 KiB inline sizes and no R bit (its chunks name a region, which
    /// cannot be invalidated remotely).
    pub fn connect(addr: &SoftAddr, nrecv: u32) -> RawClient {
        let device = Soft::open_device(None).unwrap();
        let (pd, cq, regions) = resources(&device, nrecv);
        let pdata = private_data::PrivateData::new(SLOT as u32, SLOT as u32, false).encode();
        let (qp, peer) = Soft::connect(
            &pd,
            addr,
            QpInit::new(&cq, &cq, caps(nrecv)),
            &pdata,
            Duration::from_secs(5),
            |qp| post_recvs(qp, &regions.0, nrecv),
        )
        .expect("raw connect");
        RawClient {
            ends: Ends::new(qp, cq, pd, regions, nrecv),
            peer,
        }
    }

    /// Sends `bytes`; returns the Send's status.
    pub fn send(&mut self, bytes: &[u8]) -> WcStatus {
        self.ends.send(bytes)
    }

    /// Drives `server` and this end until a message arrives; panics after 5 s.
    pub fn expect(&mut self, server: &mut ServerConn<Soft>) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            server.poll();
            self.ends.poll();
            if let Some(m) = self.ends.received.pop_front() {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "no message from the server in 5 s: {:?} {:?} dead {}",
                server.snapshot(),
                self.ends.recv_errors,
                server.is_dead()
            );
        }
    }

    /// Waits for a message while someone else drives the server; panics after 5 s.
    pub fn expect_alone(&mut self) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.ends.poll();
            if let Some(m) = self.ends.received.pop_front() {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "no message from the server in 5 s"
            );
            std::thread::yield_now();
        }
    }

    /// Drives `server` a while and asserts that nothing arrived.
    pub fn expect_nothing(&mut self, server: &mut ServerConn<Soft>) {
        for _ in 0..200 {
            server.poll();
        }
        self.ends.poll();
        assert!(
            self.ends.received.is_empty(),
            "unexpected message: {:02x?}",
            self.ends.received.front()
        );
    }

    /// A NULL Call with `xid` must come back as an accepted SUCCESS reply.
    pub fn null_ok(&mut self, server: &mut ServerConn<Soft>, xid: u32) {
        let st = self.send(&null_call(xid));
        assert_eq!(st, WcStatus::Success);
        let m = self.expect(server);
        let r = rpc_reply(&m);
        assert_eq!(r.xid, xid);
        assert!(r.is_success(), "NULL failed: {r:?}");
    }
}

/// A raw responder that accepts one real requester at a time.
pub struct RawServer {
    listener: SoftListener,
    device: <Soft as Provider>::Device,
    pub addr: SoftAddr,
}

impl RawServer {
    /// Listens at a fresh address.
    pub fn listen() -> RawServer {
        let addr = SoftAddr::unique("raw-srv");
        let device = Soft::open_device(None).unwrap();
        let listener = Soft::listen(&device, &addr).unwrap();
        RawServer {
            listener,
            device,
            addr,
        }
    }

    /// Accepts one connection, advertising the R bit when `swi`; returns the connection
    /// and the client's private data.
    pub fn accept(&mut self, swi: bool) -> (Ends, CmPrivateBytes) {
        let nrecv = 64;
        let req = self.listener.get_request(Duration::from_secs(5)).unwrap();
        let peer = req.private_data();
        let (pd, cq, regions) = resources(&self.device, nrecv);
        let pdata = private_data::PrivateData::new(SLOT as u32, SLOT as u32, swi).encode();
        let qp = req
            .accept(
                &pd,
                QpInit::new(&cq, &cq, caps(nrecv)),
                &pdata,
                Duration::from_secs(5),
                |qp| post_recvs(qp, &regions.0, nrecv),
            )
            .unwrap();
        (Ends::new(qp, cq, pd, regions, nrecv), peer)
    }
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Threads of this process.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}
