//! Connection establishment of the soft provider, over a Unix socket, with rdma_cm's steps and
//! private data sizes:
//!
//! ```text
//! client                                   listener
//!   create QP (Init), prepare (post recvs)
//!   HELLO  pd[56] + fds(arena, qp, cq, bell[, srq])
//!                                         -> get_request: map the client's memory
//!                                            accept: create QP, prepare, state RTR
//!          <-  ACCEPT pd[196] + fds           (or REJECT pd[148])
//!   map, state RTS
//!   READY                               ->   state RTS
//! ```
//!
//! A queue pair made with a shared receive queue names the queue in its header
//! (`QpInfo::srq_id`) and sends the queue's memfd fifth; the receiving end maps it (once per
//! connection), checks that it is the queue named, and claims the queue pair's receives from
//! it. A queue pair without one sends four descriptors, and a fifth is refused.
//!
//! After the handshake the socket carries nothing; each side's watchdog thread blocks on it
//! and flushes its queue pair when it reaches end of stream (the peer closed it, or died).
//!
//! The listener never waits on one client: like rdma_cm, which hands over only complete
//! connect requests, it keeps the sockets it accepted until their HELLO has fully arrived
//! (reading it piecemeal, without blocking) or `HELLO_TIMEOUT` (5 s) has passed, and
//! returns the first complete, valid request. A client that connects and sends nothing,
//! part of a message or a malformed one (bad magic, wrong kind, wrong descriptors, shared
//! memory it could still shrink) is dropped without affecting anyone else; a request whose
//! HELLO arrives after a `get_request` timed out is returned by the next one.

use std::fmt;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::arena::ArenaView;
use super::cq::CqRing;
use super::mem::SoftPd;
use super::peer::PeerLink;
use super::qp::SoftQp;
use super::rq::QpMem;
use super::srq::SrqMem;
use super::sys::{poll_readable, recv_some_with_fds, recv_with_fds, send_with_fds, Mapping};
use super::{Soft, SoftDevice};
use crate::fabric::{
    CmPrivateBytes, ConnRequest, ConnectError, FabricError, Listener, PostError, QpInit,
};

/// Where a soft listener listens: a name in the abstract Unix socket namespace (nothing in
/// the file system, gone with the listener) or a socket file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SoftAddr {
    /// An abstract socket name (written `@name`).
    Abstract(String),
    /// A socket file.
    Path(PathBuf),
}

impl SoftAddr {
    /// A fresh abstract name, unique in this process and host run: `rpcrdma-soft.PID.N.tag`.
    pub fn unique(tag: &str) -> SoftAddr {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        SoftAddr::Abstract(format!("rpcrdma-soft.{}.{n}.{tag}", std::process::id()))
    }

    fn to_std(&self) -> io::Result<SocketAddr> {
        match self {
            SoftAddr::Abstract(name) => SocketAddr::from_abstract_name(name.as_bytes()),
            SoftAddr::Path(p) => SocketAddr::from_pathname(p),
        }
    }
}

impl fmt::Display for SoftAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SoftAddr::Abstract(name) => write!(f, "@{name}"),
            SoftAddr::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

impl std::str::FromStr for SoftAddr {
    type Err = std::convert::Infallible;

    /// `@name` is an abstract name, anything else a path.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.strip_prefix('@') {
            Some(name) => SoftAddr::Abstract(name.to_owned()),
            None => SoftAddr::Path(PathBuf::from(s)),
        })
    }
}

const MSG_MAGIC: [u8; 4] = *b"SRD1";
const MSG_LEN: usize = 208;
const HELLO: u8 = 1;
const ACCEPT: u8 = 2;
const REJECT: u8 = 3;
const READY: u8 = 4;

/// How long an accepted socket may take to deliver its whole HELLO before it is closed.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Accepted sockets waiting for their HELLO, at most; when more arrive, the oldest waiting
/// one is closed (a flood of silent clients cannot take every descriptor or lock out a
/// client that sends its request at once).
const MAX_PENDING: usize = 64;

fn encode(kind: u8, data: &[u8]) -> [u8; MSG_LEN] {
    let mut m = [0u8; MSG_LEN];
    m[..4].copy_from_slice(&MSG_MAGIC);
    m[4] = kind;
    m[5] = data.len() as u8;
    m[8..8 + data.len()].copy_from_slice(data);
    m
}

/// A handshake message's kind and private data.
fn decode(m: &[u8; MSG_LEN]) -> Result<(u8, CmPrivateBytes), ConnectError> {
    if m[..4] != MSG_MAGIC {
        return Err(ConnectError::Protocol("bad handshake magic"));
    }
    let len = usize::from(m[5]);
    if len > CmPrivateBytes::CAPACITY {
        return Err(ConnectError::Protocol("bad private data length"));
    }
    let pd = CmPrivateBytes::new(&m[8..8 + len], CmPrivateBytes::CAPACITY)?;
    Ok((m[4], pd))
}

fn io_err(e: io::Error) -> ConnectError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ConnectError::Timeout,
        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => ConnectError::Unreachable,
        _ => ConnectError::Fabric(FabricError::Os {
            call: "socket",
            errno: e.raw_os_error().unwrap_or(0),
        }),
    }
}

fn remaining(deadline: Instant) -> Result<Duration, ConnectError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(ConnectError::Timeout)
    } else {
        Ok(left)
    }
}

/// Receives one handshake message (and its descriptors) before `deadline`.
fn recv_msg(
    sock: &UnixStream,
    deadline: Instant,
) -> Result<(u8, CmPrivateBytes, Vec<OwnedFd>), ConnectError> {
    sock.set_read_timeout(Some(remaining(deadline)?))
        .map_err(io_err)?;
    let mut m = [0u8; MSG_LEN];
    let fds = recv_with_fds(sock.as_raw_fd(), &mut m, MAX_PEER_FDS)
        .map_err(io_err)?
        .ok_or(ConnectError::Protocol(
            "peer closed the connection during setup",
        ))?;
    let (kind, pd) = decode(&m)?;
    Ok((kind, pd, fds))
}

/// Descriptors each end sends with its HELLO or ACCEPT: arena, queue pair, completion queue
/// and that queue's bell, then the shared receive queue's memory if the queue pair has one.
const MAX_PEER_FDS: usize = 5;

/// The largest of a peer's queue pair and completion queue memories that is faulted in when
/// connecting (see `Mapping::populate`): a queue of 64 credits takes some 100 KiB.
const PEER_POPULATE_MAX: usize = 4 << 20;

/// Maps a peer's arena, queue pair, completion queue and shared receive queue (if its queue
/// pair names one) from the descriptors it sent.
fn map_peer(mut fds: Vec<OwnedFd>) -> Result<PeerLink, ConnectError> {
    let srq_fd = if fds.len() == MAX_PEER_FDS {
        fds.pop()
    } else {
        None
    };
    let [arena, qp, cq, bell]: [OwnedFd; 4] = fds
        .try_into()
        .map_err(|_| ConnectError::Protocol("expected four or five descriptors"))?;
    let arena = ArenaView::open(Mapping::of_peer(arena)?)?;
    let mem = Mapping::from_fd(qp)?;
    mem.populate_upto(PEER_POPULATE_MAX);
    let mem = QpMem::open(Arc::new(mem))?;
    let srq = match (mem.srq_id(), srq_fd) {
        (0, None) => None,
        (0, Some(_)) => {
            return Err(ConnectError::Protocol(
                "a shared receive queue for a queue pair without one",
            ))
        }
        (_, None) => {
            return Err(ConnectError::Protocol(
                "no shared receive queue for a queue pair made with one",
            ))
        }
        (id, Some(fd)) => Some(SrqMem::open(Mapping::of_peer(fd)?, id)?),
    };
    let cq = Mapping::from_fd(cq)?;
    cq.populate_upto(PEER_POPULATE_MAX);
    let recv_cq = CqRing::open(Arc::new(cq), bell)?;
    let qp_num = mem.info().qp_num.load(Ordering::Relaxed);
    Ok(PeerLink {
        mem,
        arena,
        recv_cq,
        qp_num,
        srq,
    })
}

/// A soft listener.
pub struct SoftListener {
    listener: UnixListener,
    addr: SoftAddr,
    /// Accepted sockets whose HELLO has not fully arrived.
    pending: Vec<Pending>,
}

/// An accepted socket and the part of its HELLO received so far.
struct Pending {
    sock: UnixStream,
    msg: [u8; MSG_LEN],
    got: usize,
    fds: Vec<OwnedFd>,
    /// When it is closed if the HELLO is still incomplete.
    until: Instant,
}

/// What reading a pending socket gave.
enum Progress {
    /// More of the HELLO is still to come.
    Partial,
    /// The whole message is in.
    Complete,
    /// End of stream, a socket error or too many descriptors: the client is dropped.
    Failed,
}

impl Pending {
    fn new(sock: UnixStream) -> Pending {
        Pending {
            sock,
            msg: [0; MSG_LEN],
            got: 0,
            fds: Vec::new(),
            until: Instant::now() + HELLO_TIMEOUT,
        }
    }

    /// Takes what has arrived, without blocking.
    fn read(&mut self) -> Progress {
        let room = MAX_PEER_FDS.saturating_sub(self.fds.len());
        match recv_some_with_fds(self.sock.as_raw_fd(), &mut self.msg[self.got..], room) {
            Ok((0, _)) => Progress::Failed,
            Ok((n, fds)) => {
                self.got += n;
                self.fds.extend(fds);
                if self.got == MSG_LEN {
                    Progress::Complete
                } else {
                    Progress::Partial
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Progress::Partial,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Progress::Partial,
            Err(_) => Progress::Failed,
        }
    }

    /// The connect request this complete HELLO makes, mapping the client's memory.
    fn into_request(self) -> Result<SoftConnRequest, ConnectError> {
        let (kind, pd) = decode(&self.msg)?;
        if kind != HELLO {
            return Err(ConnectError::Protocol("expected a connect request"));
        }
        let peer = map_peer(self.fds)?;
        Ok(SoftConnRequest {
            sock: self.sock,
            peer,
            private_data: pd.padded(CmPrivateBytes::CONNECT_MAX),
        })
    }
}

impl fmt::Debug for SoftListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SoftListener({})", self.addr)
    }
}

impl SoftListener {
    pub(crate) fn bind(
        _device: &SoftDevice,
        addr: &SoftAddr,
    ) -> Result<SoftListener, ConnectError> {
        let listener = UnixListener::bind_addr(&addr.to_std().map_err(io_err)?).map_err(io_err)?;
        listener.set_nonblocking(true).map_err(io_err)?;
        Ok(SoftListener {
            listener,
            addr: addr.clone(),
            pending: Vec::new(),
        })
    }

    /// The address listened on.
    pub fn addr(&self) -> &SoftAddr {
        &self.addr
    }
}

impl Drop for SoftListener {
    fn drop(&mut self) {
        if let SoftAddr::Path(p) = &self.addr {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl SoftListener {
    /// Accepts every connection waiting on the listening socket.
    fn accept_waiting(&mut self) -> Result<(), ConnectError> {
        loop {
            let sock = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The client went away between connect and accept.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(e) => return Err(io_err(e)),
            };
            // Blocking, for the rest of the handshake (which has its own timeouts); the
            // HELLO is read without waiting.
            sock.set_nonblocking(false).map_err(io_err)?;
            if self.pending.len() >= MAX_PENDING {
                let oldest = (0..self.pending.len())
                    .min_by_key(|&i| self.pending[i].until)
                    .expect("pending is full");
                self.pending.swap_remove(oldest);
            }
            self.pending.push(Pending::new(sock));
        }
    }
}

impl Listener<Soft> for SoftListener {
    fn get_request(&mut self, timeout: Duration) -> Result<SoftConnRequest, ConnectError> {
        let deadline = Instant::now() + timeout;
        let mut fds: Vec<RawFd> = Vec::new();
        let mut ready: Vec<bool> = Vec::new();
        loop {
            let now = Instant::now();
            // Clients that did not deliver their request in time are closed.
            self.pending.retain(|p| p.until > now);
            let wake = self
                .pending
                .iter()
                .map(|p| p.until)
                .fold(deadline, Instant::min);
            fds.clear();
            fds.push(self.listener.as_raw_fd());
            fds.extend(self.pending.iter().map(|p| p.sock.as_raw_fd()));
            ready.clear();
            ready.resize(fds.len(), false);
            poll_readable(&fds, &mut ready, wake.saturating_duration_since(now)).map_err(io_err)?;
            // Pending sockets first (from the back, so that removals keep the indices of
            // those still to look at), then new connections.
            for i in (0..self.pending.len()).rev() {
                if !ready[i + 1] {
                    continue;
                }
                match self.pending[i].read() {
                    Progress::Partial => {}
                    Progress::Failed => {
                        self.pending.swap_remove(i);
                    }
                    Progress::Complete => {
                        // A malformed request, or shared memory that cannot be mapped
                        // safely, counts as no request: the client is dropped.
                        if let Ok(req) = self.pending.swap_remove(i).into_request() {
                            return Ok(req);
                        }
                    }
                }
            }
            if ready[0] {
                self.accept_waiting()?;
            }
            if Instant::now() >= deadline {
                return Err(ConnectError::Timeout);
            }
        }
    }
}

/// A connection request received by a [`SoftListener`].
pub struct SoftConnRequest {
    sock: UnixStream,
    peer: PeerLink,
    private_data: CmPrivateBytes,
}

impl fmt::Debug for SoftConnRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftConnRequest")
            .field("private_data", &self.private_data)
            .finish()
    }
}

impl ConnRequest<Soft> for SoftConnRequest {
    fn private_data(&self) -> CmPrivateBytes {
        self.private_data
    }

    /// Always `None`: soft addresses are names of Unix sockets, not IP addresses, and a
    /// client connects from no address of its own.
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }

    fn accept<F>(
        self,
        pd: &SoftPd,
        init: QpInit<'_, Soft>,
        private_data: &[u8],
        timeout: Duration,
        prepare: F,
    ) -> Result<SoftQp, ConnectError>
    where
        F: FnOnce(&mut SoftQp) -> Result<(), PostError>,
    {
        let deadline = Instant::now() + timeout;
        let data = CmPrivateBytes::new(private_data, CmPrivateBytes::ACCEPT_MAX)?;
        let mut qp = SoftQp::create(pd, init)?;
        prepare(&mut qp).map_err(ConnectError::Prepare)?;
        qp.set_ready_to_receive();
        let (fds, n) = qp.fds_for_peer();
        send_with_fds(
            self.sock.as_raw_fd(),
            &encode(ACCEPT, data.as_bytes()),
            &fds[..n],
        )
        .map_err(io_err)?;
        let (kind, _, _) = recv_msg(&self.sock, deadline)?;
        if kind != READY {
            return Err(ConnectError::Protocol("expected the client's confirmation"));
        }
        qp.establish(self.peer, Some(self.sock)).map_err(io_err)?;
        Ok(qp)
    }

    fn reject(mut self, private_data: &[u8]) -> Result<(), ConnectError> {
        let data = CmPrivateBytes::new(private_data, CmPrivateBytes::REJECT_MAX)?;
        self.sock
            .write_all(&encode(REJECT, data.as_bytes()))
            .map_err(io_err)?;
        Ok(())
    }
}

/// The client side: see [`Provider::connect`](crate::fabric::Provider::connect).
pub(crate) fn connect<F>(
    pd: &SoftPd,
    addr: &SoftAddr,
    init: QpInit<'_, Soft>,
    private_data: &[u8],
    timeout: Duration,
    prepare: F,
) -> Result<(SoftQp, CmPrivateBytes), ConnectError>
where
    F: FnOnce(&mut SoftQp) -> Result<(), PostError>,
{
    let deadline = Instant::now() + timeout;
    let data = CmPrivateBytes::new(private_data, CmPrivateBytes::CONNECT_MAX)?;
    let sock = UnixStream::connect_addr(&addr.to_std().map_err(io_err)?).map_err(io_err)?;
    sock.set_write_timeout(Some(remaining(deadline)?))
        .map_err(io_err)?;
    let mut qp = SoftQp::create(pd, init)?;
    prepare(&mut qp).map_err(ConnectError::Prepare)?;
    let (fds, n) = qp.fds_for_peer();
    send_with_fds(sock.as_raw_fd(), &encode(HELLO, data.as_bytes()), &fds[..n]).map_err(io_err)?;
    let (kind, reply, fds) = recv_msg(&sock, deadline)?;
    match kind {
        ACCEPT => {}
        REJECT => {
            return Err(ConnectError::Rejected(Box::new(
                reply.padded(CmPrivateBytes::REJECT_MAX),
            )))
        }
        _ => return Err(ConnectError::Protocol("expected an accept or a reject")),
    }
    let peer = map_peer(fds)?;
    // The listener may send as soon as it reads the confirmation: be ready to receive first.
    qp.set_ready_to_receive();
    (&sock).write_all(&encode(READY, &[])).map_err(io_err)?;
    qp.establish(peer, Some(sock)).map_err(io_err)?;
    Ok((qp, reply.padded(CmPrivateBytes::ACCEPT_MAX)))
}

/// Connects two queue pairs of this process directly, without a socket: the fastest way to
/// get a pair for tests and benchmarks on threads. A queue pair made with a shared receive
/// queue (`QpInit::srq`) shares its memory with the peer as it is. Dropping either queue pair (or
/// [`disconnect`](crate::fabric::QueuePair::disconnect)) moves the other to the error state.
pub fn pair(
    pd_a: &SoftPd,
    init_a: QpInit<'_, Soft>,
    pd_b: &SoftPd,
    init_b: QpInit<'_, Soft>,
) -> Result<(SoftQp, SoftQp), FabricError> {
    let mut a = SoftQp::create(pd_a, init_a)?;
    let mut b = SoftQp::create(pd_b, init_b)?;
    let la = a.link_for_peer();
    let lb = b.link_for_peer();
    a.establish(lb, None).map_err(|e| FabricError::Os {
        call: "establish",
        errno: e.raw_os_error().unwrap_or(0),
    })?;
    b.establish(la, None).map_err(|e| FabricError::Os {
        call: "establish",
        errno: e.raw_os_error().unwrap_or(0),
    })?;
    Ok((a, b))
}
