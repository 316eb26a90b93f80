//! Registration with the local portmapper / rpcbind, so that `rpcinfo` and clients that ask
//! find the services: MOUNT v3 on TCP with PMAPPROC_SET (RFC 1833 §3, version 2), and NFS
//! v3 on the RDMA port with RPCBPROC_SET (RFC 1833 §2, version 4) and the netid `"rdma"`,
//! which PMAP v2 cannot express; if rpcbind refuses version 4, NFS v3 is registered with
//! PMAP v2 as TCP on the RDMA port, as the Linux server does for its RDMA listener.
//!
//! Only 127.0.0.1:111 is ever contacted (TCP, short timeouts). rpcbind accepts SET and
//! UNSET from the loopback address only from a reserved source port, so when running as
//! root the connection is bound to one (rustix, no unsafe code); otherwise the request is
//! still made and rpcbind may refuse it, which is reported once.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

use rpcrdma_proto::rpc::{AcceptStat, OpaqueAuth, ReplyBody, ReplyHeader};
use rpcrdma_proto::xdr::XdrReader;

use crate::record;

/// The portmapper's program number.
pub const PMAP_PROG: u32 = 100_000;
/// PMAPPROC_SET / RPCBPROC_SET.
const SET: u32 = 1;
/// PMAPPROC_UNSET / RPCBPROC_UNSET.
const UNSET: u32 = 2;
/// IPPROTO_TCP in a PMAP v2 mapping.
pub const IPPROTO_TCP: u32 = 6;
/// The NFS program.
pub const NFS_PROG: u32 = 100_003;
/// How long connecting, sending and waiting for the answer may take.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Why a registration failed.
#[derive(Debug)]
pub enum RpcbindError {
    /// Nothing answered at the address.
    Unreachable(io::Error),
    /// The exchange failed half-way.
    Io(io::Error),
    /// The answer was not a decodable RPC reply to our Call.
    BadReply,
    /// rpcbind answered with an RPC error (version 4 unsupported, access denied, ...).
    Refused(&'static str),
    /// rpcbind answered FALSE (the mapping exists, or it refused).
    False,
}

impl core::fmt::Display for RpcbindError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RpcbindError::Unreachable(e) => write!(f, "no portmapper at 127.0.0.1:111 ({e})"),
            RpcbindError::Io(e) => write!(f, "portmapper exchange failed: {e}"),
            RpcbindError::BadReply => f.write_str("portmapper sent an undecodable reply"),
            RpcbindError::Refused(why) => write!(f, "portmapper refused: {why}"),
            RpcbindError::False => f.write_str("portmapper answered FALSE"),
        }
    }
}

impl std::error::Error for RpcbindError {}

/// One service to register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// A PMAP v2 mapping (program, version, IP protocol, port).
    V2 {
        /// Program.
        prog: u32,
        /// Version.
        vers: u32,
        /// IPPROTO_TCP or IPPROTO_UDP.
        prot: u32,
        /// Port.
        port: u16,
    },
    /// An rpcbind v4 mapping (program, version, netid, universal address).
    V4 {
        /// Program.
        prog: u32,
        /// Version.
        vers: u32,
        /// The netid (`"rdma"`).
        netid: String,
        /// The universal address, `h1.h2.h3.h4.p1.p2`.
        uaddr: String,
    },
}

/// The universal address of `ip:port` (RFC 1833 §2.2).
pub fn uaddr(ip: Ipv4Addr, port: u16) -> String {
    let o = ip.octets();
    format!(
        "{}.{}.{}.{}.{}.{}",
        o[0],
        o[1],
        o[2],
        o[3],
        port >> 8,
        port & 0xff
    )
}

/// The portmapper client: where rpcbind is (127.0.0.1:111 outside tests).
#[derive(Clone, Debug)]
pub struct Rpcbind {
    addr: SocketAddrV4,
    xid: u32,
}

impl Default for Rpcbind {
    fn default() -> Self {
        Rpcbind::at(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 111))
    }
}

impl Rpcbind {
    /// A client of the portmapper at `addr` (a loopback address).
    pub fn at(addr: SocketAddrV4) -> Rpcbind {
        Rpcbind {
            addr,
            xid: std::process::id().wrapping_mul(0x9e37_79b9),
        }
    }

    /// Registers `m` (SET).
    pub fn set(&mut self, m: &Mapping) -> Result<(), RpcbindError> {
        self.call(SET, m)
    }

    /// Removes `m` (UNSET).
    pub fn unset(&mut self, m: &Mapping) -> Result<(), RpcbindError> {
        self.call(UNSET, m)
    }

    fn call(&mut self, proc_num: u32, m: &Mapping) -> Result<(), RpcbindError> {
        let (vers, args) = match m {
            Mapping::V2 {
                prog,
                vers,
                prot,
                port,
            } => (
                2,
                record::encode(16, |w| {
                    w.put_u32(*prog)?;
                    w.put_u32(*vers)?;
                    w.put_u32(*prot)?;
                    w.put_u32(u32::from(*port))
                }),
            ),
            Mapping::V4 {
                prog,
                vers,
                netid,
                uaddr,
            } => (
                4,
                record::encode(512, |w| {
                    w.put_u32(*prog)?;
                    w.put_u32(*vers)?;
                    w.put_string(netid.as_bytes(), 128)?;
                    w.put_string(uaddr.as_bytes(), 128)?;
                    w.put_string(b"nfs3d", 128)
                }),
            ),
        };
        let args = args.ok_or(RpcbindError::BadReply)?;
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        let msg = record::call(xid, PMAP_PROG, vers, proc_num, OpaqueAuth::NONE, &args);
        let mut s = connect(self.addr)?;
        s.set_read_timeout(Some(TIMEOUT))
            .map_err(RpcbindError::Io)?;
        s.set_write_timeout(Some(TIMEOUT))
            .map_err(RpcbindError::Io)?;
        record::write_record(&mut s, &msg).map_err(RpcbindError::Io)?;
        let reply = record::read_record(&mut s, 4096).map_err(|e| match e {
            record::RecordError::Io(e) => RpcbindError::Io(e),
            _ => RpcbindError::BadReply,
        })?;
        let (h, at) = ReplyHeader::parse(&reply).map_err(|_| RpcbindError::BadReply)?;
        if h.xid != xid {
            return Err(RpcbindError::BadReply);
        }
        match h.body {
            ReplyBody::Accepted {
                stat: AcceptStat::Success,
                ..
            } => {}
            ReplyBody::Accepted { stat, .. } => return Err(RpcbindError::Refused(stat.name())),
            ReplyBody::Denied(r) => return Err(RpcbindError::Refused(r.name())),
        }
        let mut r = XdrReader::new(reply.get(at..).unwrap_or(&[]));
        match r.bool() {
            Ok(true) => Ok(()),
            Ok(false) => Err(RpcbindError::False),
            Err(_) => Err(RpcbindError::BadReply),
        }
    }
}

/// Connects to `addr` from a reserved port when the process may bind one (rpcbind
/// requires it for SET and UNSET), from any port otherwise.
fn connect(addr: SocketAddrV4) -> Result<TcpStream, RpcbindError> {
    use rustix::net::{self as rn, AddressFamily, SocketType};
    for port in (600..1024u16).rev().take(64) {
        let Ok(fd) = rn::socket(AddressFamily::INET, SocketType::STREAM, None) else {
            break;
        };
        let _ = rn::sockopt::set_socket_reuseaddr(&fd, true);
        match rn::bind(&fd, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)) {
            Ok(()) => {}
            Err(rustix::io::Errno::ADDRINUSE) => continue,
            Err(_) => break, // EACCES: not privileged
        }
        // A loopback connect is answered at once (accepted or refused). The same reserved
        // port to the same peer is unusable while its last connection is in TIME_WAIT.
        return match rn::connect(&fd, &addr) {
            Ok(()) => Ok(TcpStream::from(fd)),
            Err(rustix::io::Errno::ADDRNOTAVAIL | rustix::io::Errno::ADDRINUSE) => continue,
            Err(e) => Err(RpcbindError::Unreachable(e.into())),
        };
    }
    TcpStream::connect_timeout(&SocketAddr::V4(addr), TIMEOUT).map_err(RpcbindError::Unreachable)
}

/// The registrations of one nfs3d, undone by [`Registered::unset_all`].
#[derive(Debug)]
pub struct Registered {
    client: Rpcbind,
    done: Vec<Mapping>,
}

impl Registered {
    /// Registers MOUNT v3 on TCP `mount_port` and NFS v3 on RDMA `ip:nfs_port` (see the
    /// module documentation); says on stderr, once, what could not be done.
    pub fn register(
        mut client: Rpcbind,
        mount_port: u16,
        ip: Ipv4Addr,
        nfs_port: u16,
    ) -> Registered {
        let mut done = Vec::new();
        let mount = Mapping::V2 {
            prog: crate::mountd::MOUNT_PROG,
            vers: crate::mountd::MOUNT_V3,
            prot: IPPROTO_TCP,
            port: mount_port,
        };
        let nfs = Mapping::V4 {
            prog: NFS_PROG,
            vers: 3,
            netid: "rdma".into(),
            uaddr: uaddr(ip, nfs_port),
        };
        let nfs_v2 = Mapping::V2 {
            prog: NFS_PROG,
            vers: 3,
            prot: IPPROTO_TCP,
            port: nfs_port,
        };
        match client.set(&mount) {
            Ok(()) => done.push(mount),
            Err(RpcbindError::Unreachable(e)) => {
                eprintln!("nfs3d: no portmapper answers on 127.0.0.1:111 ({e}); not registering");
                return Registered { client, done };
            }
            Err(e) => eprintln!("nfs3d: registering MOUNT v3/tcp with rpcbind: {e}"),
        }
        match client.set(&nfs) {
            Ok(()) => done.push(nfs),
            Err(RpcbindError::Refused(_)) => match client.set(&nfs_v2) {
                Ok(()) => done.push(nfs_v2),
                Err(e) => eprintln!("nfs3d: registering NFS v3 with rpcbind: {e}"),
            },
            Err(e) => eprintln!("nfs3d: registering NFS v3/rdma with rpcbind: {e}"),
        }
        Registered { client, done }
    }

    /// What was registered.
    #[cfg(test)]
    pub fn mappings(&self) -> &[Mapping] {
        &self.done
    }

    /// Unregisters everything registered (at shutdown).
    pub fn unset_all(mut self) {
        for m in std::mem::take(&mut self.done) {
            if let Err(e) = self.client.unset(&m) {
                eprintln!("nfs3d: unregistering {m:?}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A portmapper on a loopback port that answers TRUE and reports (version, procedure,
    /// arguments) of each Call.
    fn fake_portmapper() -> (SocketAddrV4, mpsc::Receiver<(u32, u32, Vec<u8>)>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(addr) = l.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for s in l.incoming().take(4) {
                let mut s = s.unwrap();
                let msg = record::read_record(&mut s, 4096).unwrap();
                let (call, at) = rpcrdma_proto::rpc::CallHeader::parse(&msg).unwrap();
                assert_eq!(call.prog, PMAP_PROG);
                let _ = tx.send((call.vers, call.proc_num, msg[at..].to_vec()));
                let reply = record::reply(&ReplyHeader::accepted_success(call.xid), &[0, 0, 0, 1]);
                record::write_record(&mut s, &reply).unwrap();
            }
        });
        (addr, rx)
    }

    #[test]
    fn registers_mount_and_nfs_rdma_then_unsets_them() {
        let (addr, seen) = fake_portmapper();
        let r = Registered::register(Rpcbind::at(addr), 20048, Ipv4Addr::new(10, 0, 2, 15), 20049);
        assert_eq!(r.mappings().len(), 2);
        let (v, p, args) = seen.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!((v, p), (2, SET));
        let words: Vec<u32> = args
            .chunks(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        assert_eq!(words, [100_005, 3, IPPROTO_TCP, 20048]);
        let (v, p, args) = seen.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!((v, p), (4, SET));
        let mut x = XdrReader::new(&args);
        assert_eq!((x.u32().unwrap(), x.u32().unwrap()), (NFS_PROG, 3));
        assert_eq!(x.string(128).unwrap(), b"rdma");
        assert_eq!(x.string(128).unwrap(), b"10.0.2.15.78.81");
        r.unset_all();
        for _ in 0..2 {
            let (_, p, _) = seen.recv_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!(p, UNSET);
        }
    }

    #[test]
    fn no_portmapper_is_reported_not_fatal() {
        // A port nothing listens on.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(addr) = l.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        drop(l);
        let r = Registered::register(Rpcbind::at(addr), 1, Ipv4Addr::LOCALHOST, 2);
        assert!(r.mappings().is_empty());
        r.unset_all();
    }
}
