//! MOUNT v3 over TCP (RFC 1813 Appendix I) with a plain `TcpStream` client: MNT returns
//! the export's root handle and the flavors; version and procedure errors are RPC errors;
//! garbage closes that connection only, and the server goes on serving.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::AtomicBool;

use rpcrdma_proto::rpc::{AcceptStat, ReplyBody, ReplyHeader, AUTH_NONE};

use super::*;
use crate::mountd::{Mountd, MOUNT_PROG, MOUNT_V3};
use crate::record;

fn connect(m: &Mountd) -> TcpStream {
    let s = TcpStream::connect_timeout(&m.addr(), Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// One Call; the reply's header and results.
fn rpc(
    s: &mut TcpStream,
    xid: u32,
    vers: u32,
    proc_num: u32,
    cred: OpaqueAuth<'_>,
    args: &[u8],
) -> (ReplyBody<'static>, Vec<u8>) {
    let msg = record::call(xid, MOUNT_PROG, vers, proc_num, cred, args);
    record::write_record(s, &msg).expect("send");
    let reply = record::read_record(s, 1 << 16).expect("reply");
    let (h, at) = ReplyHeader::parse(&reply).expect("reply header");
    assert_eq!(h.xid, xid);
    let body = match h.body {
        ReplyBody::Accepted { stat, .. } => ReplyBody::Accepted {
            verf: OpaqueAuth::NONE,
            stat,
        },
        ReplyBody::Denied(d) => ReplyBody::Denied(d),
    };
    (body, reply[at..].to_vec())
}

fn success() -> ReplyBody<'static> {
    ReplyBody::Accepted {
        verf: OpaqueAuth::NONE,
        stat: AcceptStat::Success,
    }
}

/// Whether the server closed `s` (EOF or reset within the read timeout).
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 16];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

#[test]
fn mnt_returns_the_root_handle_and_garbage_closes_only_its_connection() {
    let dir = scratch_dir("mount-export");
    let state = scratch_dir("mount-state");
    let export = Arc::new(
        Export::open(
            &dir,
            &state,
            Config {
                max_io: MAX_IO,
                max_dir: MAX_DIR,
                read_only: false,
            },
        )
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let m = Mountd::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Arc::clone(&export),
        Policy::default(),
        Arc::clone(&stop),
    )
    .unwrap();
    let cred = auth_sys_body(&dir);
    let sys = OpaqueAuth::new(AUTH_SYS, &cred);

    let mut s = connect(&m);
    let (b, r) = rpc(&mut s, 1, MOUNT_V3, 0, OpaqueAuth::NONE, &[]);
    assert_eq!((b, r.len()), (success(), 0), "NULL");
    // MNT "/": MNT3_OK, the root handle, flavors [AUTH_SYS, AUTH_NONE].
    let path = enc(|w| w.put_string(b"/", 1024).unwrap());
    let (b, r) = rpc(&mut s, 2, MOUNT_V3, 1, sys, &path);
    assert_eq!(b, success());
    let mut x = XdrReader::new(&r);
    assert_eq!(x.u32().unwrap(), 0, "MNT3_OK");
    assert_eq!(x.opaque_var(64).unwrap(), export.root_fh().as_bytes());
    assert_eq!(x.array_len(4, 16).unwrap(), 2);
    assert_eq!((x.u32().unwrap(), x.u32().unwrap()), (AUTH_SYS, AUTH_NONE));
    // AUTH_NONE may mount too, on the same connection.
    let (b, r) = rpc(&mut s, 3, MOUNT_V3, 1, OpaqueAuth::NONE, &path);
    assert_eq!(b, success());
    assert_eq!(XdrReader::new(&r).u32().unwrap(), 0);
    // DUMP lists the mount; EXPORT the one export, groups empty.
    let (_, r) = rpc(&mut s, 4, MOUNT_V3, 2, sys, &[]);
    let mut x = XdrReader::new(&r);
    assert!(x.bool().unwrap());
    assert_eq!(x.string(255).unwrap(), b"nfs3d-test");
    assert_eq!(x.string(1024).unwrap(), b"/");
    let (_, r) = rpc(&mut s, 5, MOUNT_V3, 5, sys, &[]);
    let mut x = XdrReader::new(&r);
    assert!(x.bool().unwrap());
    assert_eq!(x.string(1024).unwrap(), b"/");
    assert!(!x.bool().unwrap(), "no groups");
    assert!(!x.bool().unwrap(), "one export");
    // UMNT and UMNTALL: void; DUMP then lists no mount of this host.
    assert_eq!(rpc(&mut s, 6, MOUNT_V3, 3, sys, &path), (success(), vec![]));
    assert_eq!(rpc(&mut s, 7, MOUNT_V3, 4, sys, &[]), (success(), vec![]));
    let (_, r) = rpc(&mut s, 8, MOUNT_V3, 2, sys, &[]);
    let mut x = XdrReader::new(&r);
    while x.bool().unwrap() {
        assert_ne!(x.string(255).unwrap(), b"nfs3d-test");
        x.string(1024).unwrap();
    }
    // Errors: a path not exported, MOUNT v1, an unknown procedure, garbage arguments.
    let other = enc(|w| w.put_string(b"/not/exported", 1024).unwrap());
    let (b, r) = rpc(&mut s, 9, MOUNT_V3, 1, sys, &other);
    assert_eq!(b, success());
    assert_ne!(XdrReader::new(&r).u32().unwrap(), 0, "not MNT3_OK");
    let (b, _) = rpc(&mut s, 10, 1, 1, sys, &path);
    assert_eq!(
        b,
        ReplyBody::Accepted {
            verf: OpaqueAuth::NONE,
            stat: AcceptStat::ProgMismatch { low: 3, high: 3 }
        }
    );
    let (b, _) = rpc(&mut s, 11, MOUNT_V3, 99, sys, &[]);
    assert!(matches!(
        b,
        ReplyBody::Accepted {
            stat: AcceptStat::ProcUnavail,
            ..
        }
    ));
    let (b, _) = rpc(&mut s, 12, MOUNT_V3, 1, sys, &[0, 0, 0x10]);
    assert!(matches!(
        b,
        ReplyBody::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));

    // Garbage records close their connection.
    let mut g = connect(&m);
    record::write_record(&mut g, b"this is not an RPC call at all").unwrap();
    assert!(closed(&mut g), "garbage closes the connection");
    let mut g = connect(&m);
    std::io::Write::write_all(&mut g, &(0x8000_0000u32 | (1 << 20)).to_be_bytes()).unwrap();
    assert!(
        closed(&mut g),
        "an oversized fragment closes the connection"
    );
    let mut g = connect(&m);
    std::io::Write::write_all(&mut g, &[0xff; 3]).unwrap();
    drop(g);

    // The server still serves, on the old connection and on new ones.
    let (b, r) = rpc(&mut s, 13, MOUNT_V3, 1, sys, &path);
    assert_eq!(b, success());
    let mut x = XdrReader::new(&r);
    assert_eq!(x.u32().unwrap(), 0, "MNT3_OK");
    assert_eq!(x.opaque_var(64).unwrap(), export.root_fh().as_bytes());
    let mut s2 = connect(&m);
    let (b, _) = rpc(&mut s2, 14, MOUNT_V3, 0, OpaqueAuth::NONE, &[]);
    assert_eq!(b, success());
    assert!(m.stats().bad_records.load(Ordering::Relaxed) >= 2);
    m.join();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&state);
}
