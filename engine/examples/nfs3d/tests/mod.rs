//! In-process tests of nfs3d on the soft fabric: the engine's `Client` speaks NFSv3 (its
//! own encoders below, written from RFC 1813 independently of `ops`) to the real dispatch
//! table, I/O pool and connection driver, on a server thread that can drop its connection
//! under the client (for the duplicate request cache).

mod drc;
mod flow;
mod identity;
mod mount;
mod wait;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::loopback::soft_server;
use rpcrdma_engine::requester::{CallArgs, Client, Reply, RpcError};
use rpcrdma_engine::stats::{Counters, Snapshot};
use rpcrdma_engine::worker::Drive;
use rpcrdma_proto::rpc::{AuthSys, Gids, OpaqueAuth, AUTH_SYS};
use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

use crate::drc::DrcLimits;
use crate::ops::{Config, Export};
use crate::policy::Policy;
use crate::server::conn::NfsConn;
use crate::server::io::IoPool;
use crate::server::{self, Nfs, NFS_PROG, NFS_V3};

/// Largest READ/WRITE of the tests' server.
pub const MAX_IO: u32 = 1 << 20;
/// Largest READDIR(PLUS) reply of the tests' server.
pub const MAX_DIR: u32 = 256 * 1024;

/// A fresh, empty directory under the system's temporary directory.
pub fn scratch_dir(what: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let p = std::env::temp_dir().join(format!(
        "nfs3d-test-{}-{what}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("scratch directory");
    p
}

/// What the server thread is told.
enum Cmd {
    /// Disconnect the newest connection and accept the next one.
    DropAndAccept,
}

/// An nfs3d server (dispatch, I/O pool, drivers) on its own thread, on the soft fabric.
pub struct TestServer {
    pub dir: PathBuf,
    state: PathBuf,
    pub nfs: Arc<Nfs>,
    pub export: Arc<Export>,
    pub addr: SoftAddr,
    cmds: Sender<Cmd>,
    acks: Receiver<()>,
    counters: Receiver<Arc<Counters>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pool: Option<IoPool>,
}

/// The server's connection settings (nfs3d's own).
pub fn server_config() -> ConnConfig {
    crate::conn_config(16, MAX_IO, 4096, true)
}

/// A client's: 4 KiB inline, room for a 1 MiB READ or WRITE.
pub fn client_config() -> ConnConfig {
    ConnConfig {
        credits: 16,
        bulk_size: MAX_IO + 8192,
        ..ConnConfig::default()
    }
}

/// The options of the tests' exports: root not squashed, as the tests call as the owner of
/// the exported directory (root, in CI).
pub fn no_root_squash() -> Policy {
    Policy {
        root_squash: false,
        ..Policy::default()
    }
}

impl TestServer {
    /// Exports a fresh directory (which `fill` may populate first), root not squashed.
    pub fn start(fill: impl FnOnce(&Path)) -> TestServer {
        TestServer::start_with(no_root_squash(), fill)
    }

    /// Exports a fresh directory (which `fill` may populate first) with the options
    /// `policy`.
    pub fn start_with(policy: Policy, fill: impl FnOnce(&Path)) -> TestServer {
        let dir = scratch_dir("export");
        let state = scratch_dir("state");
        fill(&dir);
        let config = Config {
            max_io: MAX_IO,
            max_dir: MAX_DIR,
            read_only: policy.read_only,
        };
        let export = Arc::new(Export::open(&dir, &state, config).expect("export"));
        let nfs = Nfs::new(Arc::clone(&export), config, DrcLimits::default(), policy);
        let pool = IoPool::start(4, &nfs).expect("I/O pool");
        let dispatch = Arc::new(server::dispatch(&nfs));
        let (mut srv, addr) = soft_server(dispatch, server_config()).expect("listen");
        let (cmd_tx, cmd_rx) = mpsc::channel();
        let (ack_tx, ack_rx) = mpsc::channel();
        let (cnt_tx, cnt_rx) = mpsc::channel();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (n, jobs, st) = (Arc::clone(&nfs), pool.sender(), Arc::clone(&stop));
        let thread = thread::spawn(move || {
            let mut conns: Vec<NfsConn<Soft>> = Vec::new();
            let accept = |srv: &mut rpcrdma_engine::responder::Server<Soft>,
                          conns: &mut Vec<NfsConn<Soft>>| {
                if let Ok(c) = srv.accept(Duration::from_secs(5)) {
                    let _ = cnt_tx.send(c.stats());
                    conns.push(NfsConn::new(c, Arc::clone(&n), jobs.clone()));
                }
            };
            accept(&mut srv, &mut conns);
            let _ = ack_tx.send(());
            let mut idle = 0u32;
            while !st.load(Ordering::Relaxed) {
                if let Ok(Cmd::DropAndAccept) = cmd_rx.try_recv() {
                    if let Some(c) = conns.last_mut() {
                        c.conn_mut().disconnect();
                    }
                    accept(&mut srv, &mut conns);
                    let _ = ack_tx.send(());
                }
                let mut work = 0;
                for c in conns.iter_mut() {
                    work += c.poll();
                }
                if work == 0 {
                    idle += 1;
                    if idle > 256 {
                        thread::sleep(Duration::from_micros(50));
                    }
                } else {
                    idle = 0;
                }
            }
            for c in conns.iter_mut() {
                c.close();
            }
        });
        TestServer {
            dir,
            state,
            nfs,
            export,
            addr,
            cmds: cmd_tx,
            acks: ack_rx,
            counters: cnt_rx,
            stop,
            thread: Some(thread),
            pool: Some(pool),
        }
    }

    /// Connects a client (the server thread accepts it).
    pub fn connect(&self, cfg: ConnConfig) -> Client<Soft> {
        let device = Soft::open_device(None).expect("soft device");
        let c = Client::<Soft>::connect(&device, &self.addr, cfg).expect("connect");
        self.acks
            .recv_timeout(Duration::from_secs(10))
            .expect("accepted");
        c
    }

    /// Drops the server's connection under the client and accepts its next one (without
    /// waiting for it).
    pub fn drop_connection(&self) {
        self.cmds.send(Cmd::DropAndAccept).expect("server thread");
    }

    /// The engine's counters summed over the server's connections so far.
    pub fn engine(&self) -> Snapshot {
        let mut sum = Snapshot::default();
        while let Ok(c) = self.counters.try_recv() {
            COUNTERS.with(|v| v.borrow_mut().push(c));
        }
        COUNTERS.with(|v| {
            for c in v.borrow().iter() {
                sum.add(&c.snapshot());
            }
        });
        sum
    }
}

thread_local! {
    static COUNTERS: std::cell::RefCell<Vec<Arc<Counters>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = self.pool.take() {
            p.shutdown();
        }
        COUNTERS.with(|v| v.borrow_mut().clear());
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

// ---------------------------------------------------------------------------------------
// NFSv3 on the client side (RFC 1813 §3.3), encoded and decoded here.

/// The caller's AUTH_SYS credential body: the owner of the exported directory.
pub fn auth_sys_body(dir: &Path) -> Vec<u8> {
    let md = std::fs::metadata(dir).expect("export metadata");
    let sys = AuthSys {
        stamp: 1,
        machinename: b"nfs3d-test",
        uid: md.uid(),
        gid: md.gid(),
        gids: Gids::EMPTY,
    };
    let mut body = vec![0u8; sys.encoded_len()];
    sys.encode(&mut body).expect("AUTH_SYS");
    body
}

/// XDR-encodes with `f`.
pub fn enc(f: impl FnOnce(&mut XdrWriter<'_>)) -> Vec<u8> {
    let mut buf = vec![0u8; 8192];
    let n = {
        let mut w = XdrWriter::new(&mut buf);
        f(&mut w);
        w.position()
    };
    buf.truncate(n);
    buf
}

/// `diropargs3`: a directory handle and a name.
pub fn diropargs(w: &mut XdrWriter<'_>, dir: &[u8], name: &str) {
    w.put_opaque_var(dir, 64).unwrap();
    w.put_string(name.as_bytes(), 255).unwrap();
}

/// A `sattr3` that sets only the mode.
pub fn sattr_mode(w: &mut XdrWriter<'_>, mode: u32) {
    w.put_bool(true).unwrap();
    w.put_u32(mode).unwrap();
    for _ in 0..3 {
        w.put_bool(false).unwrap(); // uid, gid, size
    }
    w.put_u32(0).unwrap(); // atime: DONT_CHANGE
    w.put_u32(0).unwrap(); // mtime: DONT_CHANGE
}

/// Skips a `post_op_attr`.
pub fn skip_post_op_attr(r: &mut XdrReader<'_>) {
    if r.bool().unwrap() {
        r.skip(84).unwrap();
    }
}

/// Skips a `wcc_data`.
pub fn skip_wcc(r: &mut XdrReader<'_>) {
    if r.bool().unwrap() {
        r.skip(24).unwrap();
    }
    skip_post_op_attr(r);
}

/// The `nfsstat3` that starts every NFSv3 result.
pub fn status(results: &[u8]) -> u32 {
    XdrReader::new(results).u32().unwrap()
}

/// An NFSv3 Call with an AUTH_SYS credential.
pub fn nfs_call<'a>(proc_num: u32, args: &'a [u8], max: u32, cred: &'a [u8]) -> CallArgs<'a> {
    let mut c = CallArgs::new(NFS_PROG, NFS_V3, proc_num, args, max);
    c.cred = OpaqueAuth::new(AUTH_SYS, cred);
    c.timeout = Duration::from_secs(20);
    c
}

/// One blocking call; the reply's results and bulk, copied.
pub fn call(
    client: &mut Client<Soft>,
    args: &CallArgs<'_>,
) -> Result<(Vec<u8>, Vec<Vec<u8>>), RpcError> {
    client.call(args, |r: Result<Reply<'_>, RpcError>| {
        r.map(|r| {
            assert!(r.is_success(), "RPC accepted with SUCCESS");
            (
                r.results.to_vec(),
                r.bulk().iter().map(|b| b.to_vec()).collect(),
            )
        })
    })?
}

/// Polls until `f` holds (10 s at most).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// LOOKUP: the handle of `name` in `dir`.
pub fn lookup(client: &mut Client<Soft>, cred: &[u8], dir: &[u8], name: &str) -> Vec<u8> {
    let args = enc(|w| diropargs(w, dir, name));
    let (res, _) = call(client, &nfs_call(3, &args, 1024, cred)).expect("LOOKUP");
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "LOOKUP {name}: NFS3_OK");
    r.opaque_var(64).unwrap().to_vec()
}
