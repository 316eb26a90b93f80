//! Hand-made soft handshakes and the connections they open: broken handshakes refused,
//! silent and churning connections, handshakes abandoned after ACCEPT.

use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use rpcrdma_engine::fabric::{ConnectError, QueuePair, WcStatus};
use rpcrdma_proto::private_data;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use crate::serve_common::msg::*;
use crate::serve_common::{serial, unix_connect, RawConn};

use super::{raw_connect, raw_try_connect, Server, WAIT};

// The soft provider's handshake, as the server reads it (engine/src/fabric/soft/conn.rs):
// one 208-byte message "SRD1", kind, private data length, two bytes of padding, the private
// data; HELLO carries three memfds (arena, queue pair, completion queue) and the completion
// queue's bell (a datagram socket; any descriptor is taken, ringing it only ever fails) with
// SCM_RIGHTS, the server answers ACCEPT (kind 2) with its own four, the client confirms with
// READY.
const MSG_LEN: usize = 208;
const HELLO: u8 = 1;
const ACCEPT: u8 = 2;
const READY: u8 = 4;
/// How long the server gives a connected socket to deliver its HELLO (conn.rs), plus slack.
const HELLO_WAIT: Duration = Duration::from_secs(10);

fn handshake(kind: u8, pd: &[u8]) -> [u8; MSG_LEN] {
    let mut m = [0u8; MSG_LEN];
    m[..4].copy_from_slice(b"SRD1");
    m[4] = kind;
    m[5] = pd.len() as u8;
    m[8..8 + pd.len()].copy_from_slice(pd);
    m
}

fn send_with_fds(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(5))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    }
    let n = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )
    .expect("sendmsg");
    assert_eq!(n, bytes.len());
}

/// What the server sends back before closing: `None` when it closes (or resets) without a
/// word within `limit`, else the bytes.
fn answer(sock: &mut UnixStream, limit: Duration) -> Option<Vec<u8>> {
    sock.set_read_timeout(Some(limit)).unwrap();
    let mut buf = vec![0; MSG_LEN];
    match sock.read(&mut buf) {
        Ok(0) => None,
        Ok(n) => Some(buf[..n].to_vec()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
        Err(e) => panic!("the server neither answered nor closed: {e}"),
    }
}

/// A copy of one of this process's soft memfds (`kind`: "pd", "qp" or "cq": any live one
/// has a valid header and geometry), as a new memfd sealed against shrinking or not.
fn copy_memfd(kind: &str, seal: bool) -> OwnedFd {
    let want = format!("/memfd:rpcrdma-soft-{kind} (deleted)");
    let src = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want))
        .unwrap_or_else(|| panic!("no {want} in this process"));
    let mut f = File::open(src.path()).unwrap();
    let len = f.metadata().unwrap().len();
    // Headers, key table and rings sit at the start; the rest (region bytes) may stay zero.
    let mut head = vec![0; len.min(4 << 20) as usize];
    f.read_exact(&mut head).unwrap();
    let flags = if seal {
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING
    } else {
        MemfdFlags::CLOEXEC
    };
    let fd = rustix::fs::memfd_create(format!("hostile-copy-{kind}"), flags).unwrap();
    let mut copy = File::from(fd);
    copy.set_len(len).unwrap();
    copy.write_all(&head).unwrap();
    if seal {
        rustix::fs::fcntl_add_seals(&copy, SealFlags::SHRINK).unwrap();
    }
    OwnedFd::from(copy)
}

/// Copies of a live connection's arena, queue pair and completion queue, and a bell.
fn copies(seal: bool) -> [OwnedFd; 4] {
    let (bell, _) = std::os::unix::net::UnixDatagram::pair().unwrap();
    [
        copy_memfd("pd", seal),
        copy_memfd("qp", seal),
        copy_memfd("cq", seal),
        OwnedFd::from(bell),
    ]
}

fn hello_with(s: &UnixStream, fds: &[OwnedFd]) {
    let pdata = private_data::PrivateData::new(4096, 4096, false).encode();
    let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    send_with_fds(s, &handshake(HELLO, &pdata), &b);
}

/// A complete hand-made handshake with copies of valid memfds: ACCEPT comes back, READY
/// goes out, then the socket closes (the server's connection dies with it).
fn handshake_then_close(srv: &Server) {
    let mut s = unix_connect(&srv.addr);
    hello_with(&s, &copies(true));
    let got = answer(&mut s, WAIT).expect("ACCEPT");
    assert_eq!(&got[..5], &[b'S', b'R', b'D', b'1', ACCEPT], "ACCEPT");
    s.write_all(&handshake(READY, &[])).unwrap();
}

/// A server whose connections are light (64 KiB bulk buffers instead of 1 MiB: each one
/// touches about 8 MiB instead of 128), for the tests that open many.
fn light_server(tag: &str) -> Server {
    Server::start(tag, &["--bulk-size", "65536"])
}

/// Broken soft handshakes: the server closes each bad attempt without accepting it (in
/// particular shared memory the client could still shrink under the server's mapping,
/// which would crash it with SIGBUS on the next access) and keeps serving; the memfds it
/// hands out cannot be shrunk either. A HELLO delivered in pieces, slower than the server's
/// accept timeout, is still accepted.
#[test]
fn broken_handshakes_are_refused() {
    let _serial = serial();
    let mut srv = light_server("handshakes");
    let addr = srv.soft_addr();
    let pdata = private_data::PrivateData::new(4096, 4096, false).encode();

    // The server's memfds, which this process holds while connected (and ours, which the
    // server holds), are sealed: ftruncate to a smaller size fails with EPERM.
    let mut live = raw_connect(&addr, 8);
    live.null_ok(1, "handshakes: live connection");
    let mut sealed = 0;
    for e in std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
    {
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !link.to_string_lossy().starts_with("/memfd:rpcrdma-soft-") {
            continue;
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(e.path())
            .unwrap();
        let len = f.metadata().unwrap().len();
        let err = f
            .set_len(len / 2)
            .expect_err("a soft memfd could be shrunk");
        assert_eq!(err.raw_os_error(), Some(1), "EPERM (sealed): {link:?}");
        sealed += 1;
    }
    assert!(sealed >= 6, "ours and the server's: {sealed}");
    live.null_ok(2, "handshakes: live connection");

    type Attempt = (&'static str, Box<dyn Fn(&mut UnixStream)>);
    let attempts: Vec<Attempt> = vec![
        (
            "connect and close at once",
            Box::new(|_s: &mut UnixStream| {}),
        ),
        (
            "bad magic",
            Box::new(|s: &mut UnixStream| {
                let mut m = handshake(HELLO, &[]);
                m[..4].copy_from_slice(b"SRD9");
                s.write_all(&m).unwrap()
            }),
        ),
        (
            "private data length 255",
            Box::new(|s: &mut UnixStream| {
                let mut m = handshake(HELLO, &[]);
                m[5] = 255;
                s.write_all(&m).unwrap()
            }),
        ),
        (
            "READY instead of HELLO",
            Box::new(|s: &mut UnixStream| s.write_all(&handshake(READY, &[])).unwrap()),
        ),
        (
            "HELLO without descriptors",
            Box::new(move |s: &mut UnixStream| s.write_all(&handshake(HELLO, &pdata)).unwrap()),
        ),
        (
            "HELLO with unsealed copies of valid memfds",
            Box::new(|s: &mut UnixStream| hello_with(s, &copies(false))),
        ),
        (
            "HELLO with sealed memfds of garbage",
            Box::new(|s: &mut UnixStream| {
                let mk = || {
                    let fd = rustix::fs::memfd_create("junk", MemfdFlags::ALLOW_SEALING).unwrap();
                    let mut f = File::from(fd);
                    f.write_all(&[0xa5; 8192]).unwrap();
                    rustix::fs::fcntl_add_seals(&f, SealFlags::SHRINK).unwrap();
                    OwnedFd::from(f)
                };
                hello_with(s, &[mk(), mk(), mk(), mk()]);
            }),
        ),
        (
            "HELLO with empty sealed memfds",
            Box::new(|s: &mut UnixStream| {
                let mk = || {
                    let fd = rustix::fs::memfd_create("empty", MemfdFlags::ALLOW_SEALING).unwrap();
                    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
                    fd
                };
                hello_with(s, &[mk(), mk(), mk(), mk()]);
            }),
        ),
        (
            "HELLO with regular files",
            Box::new(|s: &mut UnixStream| {
                let exe = std::env::current_exe().unwrap();
                let fds: Vec<OwnedFd> = (0..4)
                    .map(|_| OwnedFd::from(File::open(&exe).unwrap()))
                    .collect();
                hello_with(s, &fds);
            }),
        ),
        (
            "HELLO with three descriptors",
            Box::new(|s: &mut UnixStream| {
                let [a, b, c, _] = copies(true);
                hello_with(s, &[a, b, c]);
            }),
        ),
        (
            "HELLO with five descriptors",
            Box::new(|s: &mut UnixStream| {
                let [a, b, c, d] = copies(true);
                hello_with(s, &[a, b, c, d, copy_memfd("cq", true)]);
            }),
        ),
    ];
    for (name, attempt) in &attempts {
        let mut s = unix_connect(&srv.addr);
        attempt(&mut s);
        // Longer than the server keeps an incomplete HELLO (5 s): what it does not take as a
        // request it may close only then.
        let got = answer(&mut s, HELLO_WAIT);
        assert_eq!(got, None, "{name}: the server answered instead of closing");
        srv.assert_alive(name);
        live.null_ok(3, name);
    }

    // The control for the unsealed case: the same copies, sealed, are accepted (so the
    // refusal above is the seal check).
    handshake_then_close(&srv);
    srv.assert_alive("hand-made handshake");

    // A HELLO in two pieces, the second after longer than the server's accept timeout
    // (200 ms): still a request, accepted (the server keeps the half-received HELLO).
    let mut s = unix_connect(&srv.addr);
    let m = handshake(HELLO, &pdata);
    s.write_all(&m[..100]).unwrap();
    thread::sleep(Duration::from_millis(700));
    let fds = copies(true);
    let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    send_with_fds(&s, &m[100..], &b);
    let got = answer(&mut s, WAIT).expect("a slow HELLO is accepted");
    assert_eq!(got[4], ACCEPT);
    s.write_all(&handshake(READY, &[])).unwrap();
    drop(s);

    live.null_ok(4, "handshakes: live connection");
    drop(live);
    srv.finish("handshakes");
}

/// Silent, half-open and churning connections: silent sockets and sockets that sent part of
/// a HELLO hold nobody up (a good client is served at once meanwhile) and are closed by the
/// server on its own; an established connection that sends nothing costs nothing; 120
/// connect/disconnect cycles and a burst of more connections than the worker takes (64:
/// serve's default `--max-conns`, past which it rejects them at the connection manager)
/// leave the server serving with its threads and descriptors back to the baseline.
#[test]
fn silent_and_churning_connections() {
    let _serial = serial();
    let mut srv = light_server("connections");
    let addr = srv.soft_addr();
    let mut live = raw_connect(&addr, 8);
    live.null_ok(1, "connections: live connection");

    // 40 silent sockets and 40 with half a HELLO, then a good client: it is served within
    // its own connect timeout (`raw_connect` gives up after WAIT; 80 × the server's accept
    // timeout would be 16 s).
    let mut idle: Vec<UnixStream> = (0..80).map(|_| unix_connect(&srv.addr)).collect();
    for s in idle.iter_mut().skip(40) {
        s.write_all(&handshake(HELLO, &[])[..100]).unwrap();
    }
    let established = raw_connect(&addr, 8);
    let mut c = raw_connect(&addr, 8);
    c.null_ok(2, "while silent connections are open");
    srv.good_calls("while silent connections are open");
    live.null_ok(3, "connections: live connection");
    for (i, s) in idle.iter_mut().enumerate() {
        assert_eq!(
            answer(s, HELLO_WAIT),
            None,
            "silent socket {i}: closed by the server, not kept"
        );
    }
    drop(idle);
    drop(established);
    drop(c);
    srv.assert_alive("silent connections");

    // Churn: connect, maybe call, leave in one of three ways.
    for i in 0..120u32 {
        let mut c = raw_connect(&addr, 4);
        if i % 2 == 0 {
            c.null_ok(i, "churn");
        }
        match i % 3 {
            0 => drop(c),
            1 => c.qp.disconnect(),
            _ => c.qp.faults().drop_connection(),
        }
    }
    srv.assert_alive("churn");
    live.null_ok(6, "connections: live connection");

    // A burst of more connections than the worker takes: the extra ones are rejected at
    // the connection manager (serve's default --max-conns, the workers' 64), every one
    // accepted is served; then all of them go. `live` holds a place, and connections of
    // the churn not yet dropped as dead may hold more.
    let mut burst: Vec<RawConn> = Vec::new();
    let mut rejected = 0;
    for i in 0..72 {
        match raw_try_connect(&addr, 4) {
            Ok(c) => burst.push(c),
            Err(ConnectError::Rejected(_)) => rejected += 1,
            Err(e) => panic!("burst {i}: neither accepted nor rejected: {e:?}"),
        }
    }
    assert!(rejected >= 72 - 63, "past 64 live, rejected: {rejected}");
    assert!(
        burst.len() >= 56,
        "most of the burst is accepted: {}",
        burst.len()
    );
    for (i, c) in burst.iter_mut().enumerate() {
        let what = format!("burst {i}");
        assert_eq!(
            c.send(&null_call(i as u32), &what),
            WcStatus::Success,
            "{what}"
        );
        let m = c
            .next_message(&what)
            .unwrap_or_else(|| panic!("{what}: accepted, then not served: {:?}", c.recv_errors));
        assert!(rpc_reply(&m).is_success(), "{what}");
    }
    drop(burst);
    srv.assert_alive("burst");
    live.null_ok(7, "connections: live connection");
    drop(live);
    srv.finish("connections");
}

/// A soft handshake that fails after the server has sent ACCEPT (the client closes before
/// READY, or READY comes after the accept timeout, 200 ms in `rpcrdma serve`) must leave
/// nothing behind: `ServerConn::accept` drops the buffers it took before their pools (a
/// pool dropped with buffers out deliberately leaks its memory), so the connection's arena
/// memfd and the pages its pools touched go away.
#[test]
fn abandoned_handshakes_leak_nothing() {
    let _serial = serial();
    let srv = light_server("abandoned");
    let mut live = raw_connect(&srv.soft_addr(), 8);
    live.null_ok(1, "abandoned: live connection");
    for i in 0..3 {
        // Closed right after ACCEPT.
        let mut s = unix_connect(&srv.addr);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT).expect("ACCEPT")[4], ACCEPT);
        drop(s);
        // READY later than the server waits.
        let mut s = unix_connect(&srv.addr);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT).expect("ACCEPT")[4], ACCEPT);
        thread::sleep(Duration::from_millis(500));
        let _ = s.write_all(&handshake(READY, &[]));
        drop(s);
        // HELLO again instead of READY.
        let mut s = unix_connect(&srv.addr);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT).expect("ACCEPT")[4], ACCEPT);
        hello_with(&s, &copies(true));
        assert_eq!(answer(&mut s, WAIT), None);
        live.null_ok(2 + i, "abandoned: live connection");
    }
    drop(live);
    srv.finish("abandoned");
}
