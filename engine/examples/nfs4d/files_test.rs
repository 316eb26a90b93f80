//! nfs4d end to end on the soft fabric: a client on the engine mounts the export as the
//! Linux client does (PUTROOTFH, GETFH, GETATTR), creates a file with OPEN, writes it
//! through a Read chunk, reads it back through a Write chunk, lists the directory, locks a
//! range against a second owner, closes, renames and removes the file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::dispatch::{Dispatch, Outcome, ProcSpec};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_proto::rpc::OpaqueAuth;
use rpcrdma_proto::xdr::XdrReader;

use crate::attrs::a;
use crate::nfs4common::words;
use crate::session::{op, status};
use crate::{serve, Cli, NFS4_PROGRAM, NFSPROC4_COMPOUND, NFS_V4};

/// A COMPOUND being built.
struct C {
    buf: Vec<u8>,
    n: u32,
}

impl C {
    fn new() -> C {
        // tag "", minor version 1, the count patched at the end.
        C {
            buf: words(&[0, 1, 0]),
            n: 0,
        }
    }
    fn op(mut self, opnum: u32, args: &[u8]) -> C {
        self.buf.extend(opnum.to_be_bytes());
        self.buf.extend(args);
        self.n += 1;
        self
    }
    fn done(mut self) -> Vec<u8> {
        self.buf[8..12].copy_from_slice(&self.n.to_be_bytes());
        self.buf
    }
}

fn opaque(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as u32).to_be_bytes().to_vec();
    v.extend(b);
    v.resize(4 + b.len().div_ceil(4) * 4, 0);
    v
}

fn bitmap(attrs: &[u32]) -> Vec<u8> {
    let mut m = [0u32; 2];
    for &n in attrs {
        m[(n / 32) as usize] |= 1 << (n % 32);
    }
    words(&[2, m[0], m[1]])
}

struct Session {
    c: Client<Soft>,
    sid: Vec<u8>,
    seq: u32,
    cred: Vec<u8>,
}

impl Session {
    /// Runs a COMPOUND after SEQUENCE; its status and the results after SEQUENCE's.
    /// `bulk_arg` travels in a Read chunk, `read` asks for a Write chunk of that size.
    fn run(&mut self, c: C, bulk_arg: Option<&[u8]>, read: u32) -> (u32, Vec<u8>, Vec<u8>) {
        self.seq += 1;
        let mut seq = self.sid.clone();
        seq.extend(words(&[self.seq, 0, 0, 0]));
        let body = c.done();
        // SEQUENCE first: rebuild with it ahead of the operations given.
        let mut args = words(&[0, 1, body_count(&body) + 1]);
        args.extend(op::SEQUENCE.to_be_bytes());
        args.extend(&seq);
        args.extend(&body[12..]);
        let bulk = [read];
        let mut call = CallArgs::new(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, &args, 65536);
        call.bulk_arg = bulk_arg;
        if read > 0 {
            call.bulk_results = &bulk;
        }
        call.cred = OpaqueAuth {
            flavor: 1,
            body: &self.cred,
        };
        call.timeout = Duration::from_secs(10);
        self.c
            .call(&call, |r| {
                let r = r.unwrap();
                let res = r.results;
                let st = u32::from_be_bytes(res[..4].try_into().unwrap());
                // status, tag "", count, SEQUENCE's op, status and 36 bytes of results.
                let rest = res.get(12 + 8 + 36..).unwrap_or_default().to_vec();
                let data = r.bulk().first().map(|b| b.to_vec()).unwrap_or_default();
                (st, rest, data)
            })
            .unwrap()
    }
}

fn body_count(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[8..12].try_into().unwrap())
}

/// Reads a result: operation number and status, checked OK.
fn ok(r: &mut XdrReader<'_>, opnum: u32) {
    assert_eq!(r.u32().unwrap(), opnum, "operation");
    assert_eq!(r.u32().unwrap(), status::OK, "status of {opnum}");
}

fn open_args(owner: &[u8], name: &[u8]) -> Vec<u8> {
    // seqid, share BOTH, deny NONE, owner, OPEN4_CREATE UNCHECKED4 with mode 0644,
    // CLAIM_NULL name.
    let mut a = words(&[0, 3, 0, 0, 0]);
    a.extend(opaque(owner));
    a.extend(words(&[1, 0]));
    a.extend(bitmap(&[crate::attrs::a::MODE]));
    a.extend(opaque(&0o644u32.to_be_bytes()));
    a.extend(words(&[0]));
    a.extend(opaque(name));
    a
}

/// A server on a fresh export: its directory, state directory, address, stop flag and
/// thread.
struct Served {
    dir: std::path::PathBuf,
    state: std::path::PathBuf,
    addr: SoftAddr,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<String, String>>,
}

fn start(test: &str) -> Served {
    let dir = std::env::temp_dir().join(format!("nfs4d-{test}-{}", std::process::id()));
    start_in(test, dir)
}

/// A server on the export `dir` (kept from a server before, with its state).
fn start_in(test: &str, dir: std::path::PathBuf) -> Served {
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.with_extension("state");
    let name = format!("@nfs4d-{test}-{}-{:?}", std::process::id(), Instant::now());
    let cli = Cli::parse_from([
        "nfs4d",
        "--export",
        dir.to_str().unwrap(),
        "--listen",
        &name,
        "--provider",
        "soft",
        "--no-root-squash",
        "--state-dir",
        state.to_str().unwrap(),
        "--grace",
        "30",
    ]);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let s = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        serve::<Soft>(&cli, &s, |a: &SoftAddr| tx.send(a.clone()).unwrap())
    });
    let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    Served {
        dir,
        state,
        addr,
        stop,
        thread,
    }
}

impl Served {
    /// Stops the server, its export and state kept: its report.
    fn halt(self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap().unwrap()
    }

    /// Stops the server and removes its export and state: its report.
    fn stop(self) -> String {
        let (dir, state) = (self.dir.clone(), self.state.clone());
        let report = self.halt();
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&state);
        report
    }
}

/// EXCHANGE_ID as `owner` and CREATE_SESSION (its back channel on the connection with
/// `back`), as root over AUTH_SYS.
fn session(c: Client<Soft>, owner: &[u8], back: bool) -> Session {
    let mut s = Session {
        c,
        sid: Vec::new(),
        seq: 0,
        // AUTH_SYS as root (not squashed): stamp, machine "", uid 0, gid 0, no groups.
        cred: words(&[0, 0, 0, 0, 0]),
    };
    let mut eid = vec![1u8; 8];
    eid.extend(opaque(owner));
    eid.extend(words(&[0, 0, 0]));
    let args = C::new().op(op::EXCHANGE_ID, &eid).done();
    let call = CallArgs::new(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, &args, 4096);
    let r = s.c.call(&call, |r| r.unwrap().results.to_vec()).unwrap();
    assert_eq!(&r[..4], &[0; 4]);
    let mut cs = r[20..32].to_vec();
    cs.extend(words(&[if back {
        crate::session::CONN_BACK_CHAN
    } else {
        0
    }]));
    for _ in 0..2 {
        cs.extend(words(&[0, 1 << 20, 1 << 20, 8192, 16, 8, 0]));
    }
    cs.extend(words(&[CB_PROGRAM, 1, 0]));
    let args = C::new().op(op::CREATE_SESSION, &cs).done();
    let call = CallArgs::new(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, &args, 4096);
    let r = s.c.call(&call, |r| r.unwrap().results.to_vec()).unwrap();
    assert_eq!(&r[..4], &[0; 4], "CREATE_SESSION");
    s.sid = r[20..36].to_vec();
    s
}

/// The callback program the tests' clients name.
const CB_PROGRAM: u32 = 0x4000_0000;

#[test]
fn a_client_creates_writes_reads_lists_locks_and_removes_a_file() {
    let srv = start("files");
    let dir = srv.dir.clone();
    let device = Soft::open_device(None).unwrap();
    let c = Client::<Soft>::connect(&device, &srv.addr, ConnConfig::default()).unwrap();
    let mut s = session(c, b"files-test", false);
    // The root: its handle and attributes.
    let c = C::new()
        .op(op::PUTROOTFH, &[])
        .op(op::GETFH, &[])
        .op(op::GETATTR, &bitmap(&[a::TYPE, a::FILEID]));
    let (st, res, _) = s.run(c, None, 0);
    assert_eq!(st, status::OK);
    let mut r = XdrReader::new(&res);
    ok(&mut r, op::PUTROOTFH);
    ok(&mut r, op::GETFH);
    let root = r.opaque_var(128).unwrap().to_vec();
    ok(&mut r, op::GETATTR);
    let n = r.array_len(4, 4).unwrap(); // the bitmap
    r.skip(4 * n as usize).unwrap();
    assert_eq!(r.u32().unwrap(), 12, "type and fileid");
    assert_eq!(r.u32().unwrap(), 2, "a directory");
    // OPEN creates "f"; its handle.
    let c = C::new()
        .op(op::PUTFH, &opaque(&root))
        .op(op::OPEN, &open_args(b"o1", b"f"))
        .op(op::GETFH, &[]);
    let (st, res, _) = s.run(c, None, 0);
    assert_eq!(st, status::OK);
    let mut r = XdrReader::new(&res);
    ok(&mut r, op::PUTFH);
    ok(&mut r, op::OPEN);
    let stateid = r.opaque_fixed(16).unwrap().to_vec();
    r.skip(4 + 16 + 4).unwrap(); // cinfo, rflags
    let n = r.array_len(4, 4).unwrap(); // attrset
    r.skip(4 * n as usize + 4).unwrap(); // and no delegation
    ok(&mut r, op::GETFH);
    let fh = r.opaque_var(128).unwrap().to_vec();
    // WRITE 64 KiB through a Read chunk, FILE_SYNC.
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut wa = stateid.clone();
    wa.extend(0u64.to_be_bytes());
    wa.extend(words(&[2]));
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::WRITE, &wa);
    let (st, res, _) = s.run(c, Some(&data), 0);
    assert_eq!(st, status::OK, "WRITE");
    let mut r = XdrReader::new(&res);
    ok(&mut r, op::PUTFH);
    ok(&mut r, op::WRITE);
    assert_eq!(r.u32().unwrap(), 65536);
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), data);
    // READ it back through a Write chunk.
    let mut ra = stateid.clone();
    ra.extend(0u64.to_be_bytes());
    ra.extend(words(&[65536]));
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::READ, &ra);
    let (st, res, got) = s.run(c, None, 65536);
    assert_eq!(st, status::OK, "READ");
    let mut r = XdrReader::new(&res);
    ok(&mut r, op::PUTFH);
    ok(&mut r, op::READ);
    assert!(r.bool().unwrap(), "eof");
    assert_eq!(got, data);
    // READDIR lists it.
    let mut rd = 0u64.to_be_bytes().to_vec();
    rd.extend([0u8; 8]);
    rd.extend(words(&[8192, 8192]));
    rd.extend(bitmap(&[a::FILEID]));
    let c = C::new().op(op::PUTFH, &opaque(&root)).op(op::READDIR, &rd);
    let (st, res, _) = s.run(c, None, 0);
    assert_eq!(st, status::OK, "READDIR");
    assert!(res.windows(4).any(|w| w == b"f\0\0\0"), "f listed");
    // A write lock on [0, 100) by one owner; a second owner is denied.
    let mut lk = words(&[2, 0]);
    lk.extend(0u64.to_be_bytes());
    lk.extend(100u64.to_be_bytes());
    lk.extend(words(&[1, 0]));
    lk.extend(&stateid);
    lk.extend(words(&[0, 0, 0]));
    lk.extend(opaque(b"lock-owner-1"));
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::LOCK, &lk);
    assert_eq!(s.run(c, None, 0).0, status::OK, "LOCK");
    let mut lt = words(&[2]);
    lt.extend(50u64.to_be_bytes());
    lt.extend(10u64.to_be_bytes());
    lt.extend(words(&[0, 0]));
    lt.extend(opaque(b"lock-owner-2"));
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::LOCKT, &lt);
    assert_eq!(s.run(c, None, 0).0, status::DENIED, "LOCKT");
    // CLOSE, RENAME, REMOVE.
    let mut cl = words(&[0]);
    cl.extend(&stateid);
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::CLOSE, &cl);
    assert_eq!(s.run(c, None, 0).0, status::OK, "CLOSE");
    let mut rn = opaque(b"f");
    rn.extend(opaque(b"g"));
    let c = C::new()
        .op(op::PUTFH, &opaque(&root))
        .op(op::SAVEFH, &[])
        .op(op::RENAME, &rn);
    assert_eq!(s.run(c, None, 0).0, status::OK, "RENAME");
    assert!(dir.join("g").exists());
    let c = C::new()
        .op(op::PUTFH, &opaque(&root))
        .op(op::REMOVE, &opaque(b"g"));
    assert_eq!(s.run(c, None, 0).0, status::OK, "REMOVE");
    assert!(!dir.join("g").exists());
    // A name that is not there.
    let c = C::new()
        .op(op::PUTFH, &opaque(&root))
        .op(op::LOOKUP, &opaque(b"nothing"));
    assert_eq!(s.run(c, None, 0).0, status::NOENT);
    let report = srv.stop();
    assert!(report.contains("\"open_states\":0"), "{report}");
    assert!(
        report.contains("\"OPEN\":1,") && report.contains("\"WRITE\":1,"),
        "{report}"
    );
}

/// Client A's callback program: CB_NULL, and CB_COMPOUND with CB_SEQUENCE answered and
/// CB_RECALL's stateid recorded in `recalled`.
fn callbacks(recalled: Arc<std::sync::Mutex<Vec<Vec<u8>>>>) -> Arc<Dispatch> {
    let mut d = Dispatch::new();
    d.register(CB_PROGRAM, 1, 0, ProcSpec::plain(0), |_, _| {
        Outcome::Success
    });
    d.register(CB_PROGRAM, 1, 1, ProcSpec::plain(512), move |req, resp| {
        let mut r = XdrReader::new(req.args);
        let tag = r.opaque_var(64).unwrap().to_vec();
        r.skip(8).unwrap(); // minor version, callback_ident
        let n = r.u32().unwrap();
        assert_eq!(r.u32().unwrap(), 11, "CB_SEQUENCE");
        let sid = r.opaque_fixed(16).unwrap().to_vec();
        let (seq, slot) = (r.u32().unwrap(), r.u32().unwrap());
        r.skip(12).unwrap(); // highest slot, cachethis, no referring calls
        let mut out = words(&[0]);
        out.extend(opaque(&tag));
        out.extend(words(&[n, 11, 0]));
        out.extend(&sid);
        out.extend(words(&[seq, slot, 0, 0]));
        if n == 2 {
            assert_eq!(r.u32().unwrap(), 4, "CB_RECALL");
            let stateid = r.opaque_fixed(16).unwrap().to_vec();
            recalled.lock().unwrap().push(stateid);
            out.extend(words(&[4, 0]));
        }
        resp.write_results(&out);
        Outcome::Success
    });
    Arc::new(d)
}

/// OPEN of `name` in the root with share `access`, without create: its status and, on
/// success, the open stateid and the delegation type and stateid.
fn open(
    s: &mut Session,
    root: &[u8],
    owner: &[u8],
    name: &[u8],
    access: u32,
) -> (u32, Vec<u8>, u32, Vec<u8>) {
    let mut a = words(&[0, access, 0, 0, 0]);
    a.extend(opaque(owner));
    a.extend(words(&[0, 0]));
    a.extend(opaque(name));
    let c = C::new().op(op::PUTFH, &opaque(root)).op(op::OPEN, &a);
    let (st, res, _) = s.run(c, None, 0);
    if st != status::OK {
        return (st, Vec::new(), 0, Vec::new());
    }
    let mut r = XdrReader::new(&res);
    ok(&mut r, op::PUTFH);
    ok(&mut r, op::OPEN);
    let sid = r.opaque_fixed(16).unwrap().to_vec();
    r.skip(4 + 16 + 4).unwrap();
    let n = r.array_len(4, 4).unwrap();
    r.skip(4 * n as usize).unwrap();
    let kind = r.u32().unwrap();
    let deleg = if kind == 1 {
        r.opaque_fixed(16).unwrap().to_vec()
    } else {
        Vec::new()
    };
    (st, sid, kind, deleg)
}

/// Client A, whose back channel answers, is given a read delegation of a file; client B
/// opening it for writing waits (NFS4ERR_DELAY) while the server recalls it with
/// CB_RECALL over A's back channel; A returns it, and B's open goes through.
#[test]
fn a_read_delegation_is_recalled_when_another_client_opens_for_writing() {
    let srv = start("deleg");
    std::fs::write(srv.dir.join("d"), b"delegated").unwrap();
    let device = Soft::open_device(None).unwrap();
    let recalled = Arc::new(std::sync::Mutex::new(Vec::new()));
    let cfg = ConnConfig {
        reverse_credits: 4,
        ..ConnConfig::default()
    };
    let ca =
        Client::<Soft>::connect_serving(&device, &srv.addr, cfg, callbacks(Arc::clone(&recalled)))
            .unwrap();
    let mut a = session(ca, b"client-a", true);
    let cb = Client::<Soft>::connect(&device, &srv.addr, ConnConfig::default()).unwrap();
    let mut b = session(cb, b"client-b", false);
    let c = C::new().op(op::PUTROOTFH, &[]).op(op::GETFH, &[]);
    let (st, res, _) = a.run(c, None, 0);
    assert_eq!(st, status::OK);
    let root = res[16..].to_vec();
    let root = XdrReader::new(&root).opaque_var(128).unwrap().to_vec();
    // A's callback path: CB_NULL and CB_SEQUENCE answered, and taken in by the server.
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.c.snapshot().reverse_replies < 2 {
        a.c.poll_completions(|_| {});
        assert!(Instant::now() < deadline, "callbacks: {:?}", a.c.snapshot());
    }
    std::thread::sleep(Duration::from_millis(200));
    let (st, _, kind, deleg) = open(&mut a, &root, b"oa", b"d", 1);
    assert_eq!((st, kind), (status::OK, 1), "A holds a read delegation");
    // B's open for writing waits for the recall.
    assert_eq!(open(&mut b, &root, b"ob", b"d", 2).0, status::DELAY);
    let deadline = Instant::now() + Duration::from_secs(10);
    while recalled.lock().unwrap().is_empty() {
        a.c.poll_completions(|_| {});
        assert!(Instant::now() < deadline, "no CB_RECALL");
    }
    assert_eq!(
        recalled.lock().unwrap()[0],
        deleg,
        "the delegation's stateid"
    );
    // Still waiting until A returns it.
    assert_eq!(open(&mut b, &root, b"ob", b"d", 2).0, status::DELAY);
    let c = C::new().op(op::PUTROOTFH, &[]).op(op::DELEGRETURN, &deleg);
    assert_eq!(a.run(c, None, 0).0, status::OK, "DELEGRETURN");
    assert_eq!(open(&mut b, &root, b"ob", b"d", 2).0, status::OK);
    let report = srv.stop();
    assert!(
        report.contains(
            "\"delegations\":{\"granted\":1,\"recalled\":1,\"returned\":1,\"revoked\":0}"
        ),
        "{report}"
    );
    // CB_NULL and CB_SEQUENCE first, then CB_COMPOUND(CB_SEQUENCE, CB_RECALL): all
    // answered.
    assert!(
        report.contains("\"backchannel\":{\"calls\":3,\"replies\":3,\"errors\":0,\"cb_null\":1,\"cb_sequence\":1,\"cb_recall_sent\":1,\"cb_recall\":1}"),
        "{report}"
    );
}

/// The root's handle.
fn root_of(s: &mut Session) -> Vec<u8> {
    let c = C::new().op(op::PUTROOTFH, &[]).op(op::GETFH, &[]);
    let (st, res, _) = s.run(c, None, 0);
    assert_eq!(st, status::OK);
    XdrReader::new(&res[16..]).opaque_var(128).unwrap().to_vec()
}

/// A client with a file open and a range locked; the server restarts: in its grace
/// period the client reclaims both (OPEN with CLAIM_PREVIOUS, LOCK with `reclaim`), a
/// client recorded after the restart cannot open (NFS4ERR_GRACE) until the reclaiming
/// client's RECLAIM_COMPLETE ends the period.
#[test]
fn opens_and_locks_are_reclaimed_in_the_grace_period_after_a_restart() {
    let srv = start("restart");
    let dir = srv.dir.clone();
    let device = Soft::open_device(None).unwrap();
    let c = Client::<Soft>::connect(&device, &srv.addr, ConnConfig::default()).unwrap();
    let mut a = session(c, b"restart-a", false);
    let root = root_of(&mut a);
    let c = C::new()
        .op(op::PUTFH, &opaque(&root))
        .op(op::OPEN, &open_args(b"oa", b"kept"))
        .op(op::GETFH, &[]);
    let (st, res, _) = a.run(c, None, 0);
    assert_eq!(st, status::OK);
    let mut r = XdrReader::new(&res);
    ok(&mut r, op::PUTFH);
    ok(&mut r, op::OPEN);
    r.skip(16 + 4 + 16 + 4).unwrap(); // stateid, cinfo, rflags
    let n = r.array_len(4, 4).unwrap();
    r.skip(4 * n as usize + 4).unwrap(); // attrset, no delegation
    ok(&mut r, op::GETFH);
    let fh = r.opaque_var(128).unwrap().to_vec();
    drop(a);
    srv.halt();

    let srv = start_in("restart", dir);
    let c = Client::<Soft>::connect(&device, &srv.addr, ConnConfig::default()).unwrap();
    let mut a = session(c, b"restart-a", false);
    let c = Client::<Soft>::connect(&device, &srv.addr, ConnConfig::default()).unwrap();
    let mut b = session(c, b"restart-b", false);
    // B, not recorded before the restart, waits.
    assert_eq!(open(&mut b, &root, b"ob", b"kept", 1).0, status::GRACE);
    // A reclaims its open (CLAIM_PREVIOUS, no delegation) and a lock.
    let mut prev = words(&[0, 3, 0, 0, 0]);
    prev.extend(opaque(b"oa"));
    prev.extend(words(&[0, 1, 0]));
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::OPEN, &prev);
    let (st, res, _) = a.run(c, None, 0);
    assert_eq!(st, status::OK, "OPEN CLAIM_PREVIOUS");
    let sid = res[16..32].to_vec();
    let mut lk = words(&[2, 1]);
    lk.extend(0u64.to_be_bytes());
    lk.extend(10u64.to_be_bytes());
    lk.extend(words(&[1, 0]));
    lk.extend(&sid);
    lk.extend(words(&[0, 0, 0]));
    lk.extend(opaque(b"la"));
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::LOCK, &lk);
    assert_eq!(a.run(c, None, 0).0, status::OK, "LOCK reclaim");
    // A new lock is refused meanwhile, and B's reclaim is not its to make.
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::OPEN, &prev);
    assert_eq!(b.run(c, None, 0).0, status::RECLAIM_BAD);
    let c = C::new().op(op::RECLAIM_COMPLETE, &words(&[0]));
    assert_eq!(a.run(c, None, 0).0, status::OK);
    // The period is over: B opens, and finds A's lock.
    let (st, bsid, _, _) = open(&mut b, &root, b"ob", b"kept", 1);
    assert_eq!(st, status::OK);
    let _ = bsid;
    let mut lt = words(&[1]);
    lt.extend(5u64.to_be_bytes());
    lt.extend(1u64.to_be_bytes());
    lt.extend(words(&[0, 0]));
    lt.extend(opaque(b"lb"));
    let c = C::new().op(op::PUTFH, &opaque(&fh)).op(op::LOCKT, &lt);
    assert_eq!(b.run(c, None, 0).0, status::DENIED, "A's reclaimed lock");
    srv.stop();
}
