//! The MOUNT protocol, version 3 (RFC 1813 Appendix I), over TCP with record marking
//! (RFC 5531 §11): how a client gets the export's root file handle before it speaks NFS
//! over RDMA (`mount -o proto=rdma,mountproto=tcp,mountport=N`).
//!
//! One listener thread accepts connections; each connection is served by a thread of its
//! own (at most [`MAX_CONNS`] at once; more are closed at once), which reads bounded
//! records (fragments over 64 KiB are refused) with a read timeout and closes the
//! connection on anything it cannot parse as an RPC Call. Nothing a peer sends can panic
//! or block the listener.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use rpcrdma_proto::rpc::{AuthStat, CallHeader, ReplyHeader, AUTH_NONE, AUTH_SYS, RPC_VERSION};
use rpcrdma_proto::xdr::XdrReader;

use crate::ops::Export;
use crate::policy::Policy;
use crate::record::{self, RecordError};

/// The MOUNT program (RFC 1813 Appendix I).
pub const MOUNT_PROG: u32 = 100_005;
/// Its version 3.
pub const MOUNT_V3: u32 = 3;
/// MOUNTPROC3_NULL.
pub const MOUNTPROC3_NULL: u32 = 0;
/// MOUNTPROC3_MNT: dirpath → mountres3.
pub const MOUNTPROC3_MNT: u32 = 1;
/// MOUNTPROC3_DUMP: → mountlist.
pub const MOUNTPROC3_DUMP: u32 = 2;
/// MOUNTPROC3_UMNT: dirpath → void.
pub const MOUNTPROC3_UMNT: u32 = 3;
/// MOUNTPROC3_UMNTALL: → void.
pub const MOUNTPROC3_UMNTALL: u32 = 4;
/// MOUNTPROC3_EXPORT: → exports.
pub const MOUNTPROC3_EXPORT: u32 = 5;
/// MNTPATHLEN: longest dirpath.
pub const MNTPATHLEN: u32 = 1024;
/// MNTNAMLEN: longest host name.
pub const MNTNAMLEN: u32 = 255;
/// FHSIZE3: longest fhandle3.
pub const FHSIZE3: u32 = 64;
/// mountstat3 MNT3_OK.
pub const MNT3_OK: u32 = 0;
/// mountstat3 MNT3ERR_ACCES: a client the export does not allow.
pub const MNT3ERR_ACCES: u32 = 13;

/// Most connections served at once.
pub const MAX_CONNS: usize = 32;
/// Longest a connection may stay silent in the middle of or between records.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the listener waits for a connection before looking at the stop flag.
const ACCEPT_WAIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};
/// Largest record accepted (MOUNT messages are a few hundred bytes).
pub const MAX_RECORD: usize = 64 * 1024;
/// Most entries the mount list (DUMP) keeps.
const MAX_MOUNTS: usize = 256;

/// The MOUNT server's counters.
#[derive(Debug, Default)]
pub struct MountStats {
    /// Connections accepted.
    pub conns: AtomicU64,
    /// Connections refused (over [`MAX_CONNS`]).
    pub refused: AtomicU64,
    /// Calls answered.
    pub calls: AtomicU64,
    /// MNT calls that returned a handle.
    pub mounts: AtomicU64,
    /// MNT calls refused (MNT3ERR_ACCES): a client the export does not allow.
    pub denied: AtomicU64,
    /// Connections closed for an unparsable or oversized record.
    pub bad_records: AtomicU64,
}

/// What the connection threads share.
struct MountdShared {
    export: Arc<Export>,
    /// The clients allowed (`--allow`).
    policy: Policy,
    /// (host, dirpath) of each MNT not yet UMNTed, for DUMP.
    mounts: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
    stats: MountStats,
    active: AtomicUsize,
    stop: Arc<AtomicBool>,
}

/// A running MOUNT server.
pub struct Mountd {
    addr: SocketAddr,
    shared: Arc<MountdShared>,
    thread: Option<JoinHandle<()>>,
}

impl core::fmt::Debug for Mountd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mountd").field("addr", &self.addr).finish()
    }
}

impl Mountd {
    /// Listens on `addr` (port 0: any) and serves `export` to the clients `policy`
    /// allows until `stop` is set.
    pub fn start(
        addr: SocketAddr,
        export: Arc<Export>,
        policy: Policy,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Mountd> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(MountdShared {
            export,
            policy,
            mounts: Mutex::new(Vec::new()),
            stats: MountStats::default(),
            active: AtomicUsize::new(0),
            stop,
        });
        let s = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name("nfs3d-mountd".into())
            .spawn(move || listen(&listener, &s))?;
        Ok(Mountd {
            addr,
            shared,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its counters.
    pub fn stats(&self) -> &MountStats {
        &self.shared.stats
    }

    /// Stops accepting (the stop flag must be set) and waits for the listener thread;
    /// connection threads end at their next record or read timeout.
    pub fn join(mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn listen(listener: &TcpListener, shared: &Arc<MountdShared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if shared.active.load(Ordering::Relaxed) >= MAX_CONNS {
                    shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                    continue; // dropped: closed
                }
                shared.active.fetch_add(1, Ordering::Relaxed);
                shared.stats.conns.fetch_add(1, Ordering::Relaxed);
                let s = Arc::clone(shared);
                let spawned = thread::Builder::new()
                    .name("nfs3d-mountd-conn".into())
                    .spawn(move || {
                        serve_conn(stream, peer, &s);
                        s.active.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    shared.active.fetch_sub(1, Ordering::Relaxed);
                }
            }
            // Waits for the next connection in poll(2), not a sleep: a mount's MOUNT call
            // is accepted at once (a 20 ms sleep here added up to 20 ms to every mount).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(listener, PollFlags::IN)];
                let _ = poll(&mut fds, Some(&ACCEPT_WAIT));
            }
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn serve_conn(mut stream: TcpStream, peer: SocketAddr, shared: &MountdShared) {
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(READ_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(READ_TIMEOUT)).is_err()
    {
        return;
    }
    let _ = stream.set_nodelay(true);
    while !shared.stop.load(Ordering::Relaxed) {
        let msg = match record::read_record(&mut stream, MAX_RECORD) {
            Ok(m) => m,
            Err(RecordError::Closed) => return,
            Err(RecordError::TooLong(_)) => {
                shared.stats.bad_records.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(RecordError::Io(_)) => return,
        };
        let Some(reply) = answer(&msg, peer, shared) else {
            shared.stats.bad_records.fetch_add(1, Ordering::Relaxed);
            return;
        };
        shared.stats.calls.fetch_add(1, Ordering::Relaxed);
        if record::write_record(&mut stream, &reply).is_err() {
            return;
        }
    }
}

/// The reply to one Call, or `None` when the record is not an RPC Call (the connection is
/// closed then).
fn answer(msg: &[u8], peer: SocketAddr, shared: &MountdShared) -> Option<Vec<u8>> {
    let (call, at) = CallHeader::parse(msg).ok()?;
    let xid = call.xid;
    // RFC 5531 §9: the RPC version first, then program, version and procedure.
    if call.rpcvers != RPC_VERSION {
        return Some(record::reply(
            &ReplyHeader::rpc_mismatch(xid, RPC_VERSION, RPC_VERSION),
            &[],
        ));
    }
    if call.prog != MOUNT_PROG {
        return Some(record::reply(&ReplyHeader::prog_unavail(xid), &[]));
    }
    if call.vers != MOUNT_V3 {
        return Some(record::reply(
            &ReplyHeader::prog_mismatch(xid, MOUNT_V3, MOUNT_V3),
            &[],
        ));
    }
    // AUTH_SYS (its body must decode) or AUTH_NONE (RFC 1813 Appendix I: MNT returns the
    // flavors the server accepts); anything else is too weak for a mount.
    let host: Vec<u8> = match call.cred.flavor {
        AUTH_NONE => peer.ip().to_string().into_bytes(),
        AUTH_SYS => match call.cred.auth_sys() {
            Some(Ok(sys)) if !sys.machinename.is_empty() => sys.machinename.to_vec(),
            Some(Ok(_)) => peer.ip().to_string().into_bytes(),
            _ => {
                return Some(record::reply(
                    &ReplyHeader::auth_error(xid, AuthStat::AUTH_BADCRED),
                    &[],
                ))
            }
        },
        _ if call.proc_num == MOUNTPROC3_NULL => Vec::new(),
        _ => {
            return Some(record::reply(
                &ReplyHeader::auth_error(xid, AuthStat::AUTH_TOOWEAK),
                &[],
            ))
        }
    };
    let args = msg.get(at..)?;
    let results = match call.proc_num {
        MOUNTPROC3_NULL => Some(Vec::new()),
        MOUNTPROC3_MNT if !shared.policy.allows(Some(peer.ip())) => {
            dirpath(args)?;
            shared.stats.denied.fetch_add(1, Ordering::Relaxed);
            Some(MNT3ERR_ACCES.to_be_bytes().to_vec())
        }
        MOUNTPROC3_MNT => mnt(args, host, shared),
        MOUNTPROC3_DUMP => dump(shared),
        MOUNTPROC3_UMNT => umnt(args, &host, shared),
        MOUNTPROC3_UMNTALL => {
            lock(&shared.mounts).retain(|(h, _)| *h != host);
            Some(Vec::new())
        }
        MOUNTPROC3_EXPORT => export(),
        _ => return Some(record::reply(&ReplyHeader::proc_unavail(xid), &[])),
    };
    Some(match results {
        Some(r) => record::reply(&ReplyHeader::accepted_success(xid), &r),
        None => record::reply(&ReplyHeader::garbage_args(xid), &[]),
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The single `dirpath` argument, all of the arguments.
fn dirpath(args: &[u8]) -> Option<&[u8]> {
    let mut r = XdrReader::new(args);
    let path = r.string(MNTPATHLEN).ok()?;
    (r.remaining() == 0).then_some(path)
}

/// MNT: `mountres3` — MNT3_OK with the handle and the flavors [AUTH_SYS, AUTH_NONE], or
/// the error status alone.
fn mnt(args: &[u8], host: Vec<u8>, shared: &MountdShared) -> Option<Vec<u8>> {
    let path = dirpath(args)?;
    match shared.export.mnt(path) {
        Ok(fh) => {
            shared.stats.mounts.fetch_add(1, Ordering::Relaxed);
            let mut mounts = lock(&shared.mounts);
            if !mounts.iter().any(|(h, p)| *h == host && p == path) {
                if mounts.len() >= MAX_MOUNTS {
                    mounts.remove(0);
                }
                mounts.push((host, path.to_vec()));
            }
            drop(mounts);
            record::encode(256, |w| {
                w.put_u32(MNT3_OK)?;
                w.put_opaque_var(fh.as_bytes(), FHSIZE3)?;
                w.put_u32(2)?;
                w.put_u32(AUTH_SYS)?;
                w.put_u32(AUTH_NONE)
            })
        }
        Err(stat) => Some(stat.to_be_bytes().to_vec()),
    }
}

fn umnt(args: &[u8], host: &[u8], shared: &MountdShared) -> Option<Vec<u8>> {
    let path = dirpath(args)?;
    lock(&shared.mounts).retain(|(h, p)| !(h == host && p == path));
    Some(Vec::new())
}

/// DUMP: `mountlist`, a linked list of (hostname, directory).
fn dump(shared: &MountdShared) -> Option<Vec<u8>> {
    let mounts = lock(&shared.mounts);
    let size = mounts
        .iter()
        .map(|(h, p)| 12 + h.len() + p.len() + 8)
        .sum::<usize>()
        + 4;
    record::encode(size, |w| {
        for (h, p) in mounts.iter() {
            w.put_bool(true)?;
            w.put_string(h, MNTNAMLEN)?;
            w.put_string(p, MNTPATHLEN)?;
        }
        w.put_bool(false)
    })
}

/// EXPORT: `exports`, the one export (mounted as `/`) with no groups (everyone).
fn export() -> Option<Vec<u8>> {
    record::encode(64, |w| {
        w.put_bool(true)?;
        w.put_string(b"/", MNTPATHLEN)?;
        w.put_bool(false)?; // ex_groups: empty list
        w.put_bool(false) // no next export
    })
}
