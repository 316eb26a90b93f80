//! `nfs3probe`: a small NFSv3 client on the engine's requester, to prove it against real
//! NFS/RDMA servers (the Linux kernel's nfsd, or nfs3d): MOUNT over TCP (RFC 1813 Appendix
//! I, RFC 5531 record marking) for the root handle, then over RPC-over-RDMA with an AUTH_SYS
//! credential NULL, GETATTR, LOOKUP, a READ through a Write chunk, a WRITE through a Read
//! chunk (FILE_SYNC) and a READDIRPLUS of a large directory through the Reply chunk, each
//! checked against the exported directory as this machine sees it; or `--null-bench N`,
//! N NULL round trips with their percentiles; or `--getattr-bench N` (after MOUNT), N
//! GETATTRs of the root, a procedure that reaches the server's file system.
//!
//! Or `--conns N`: N connections held open at once, each checked with NULL, GETATTR and a
//! READ.
//!
//! ```sh
//! nfs3probe --server 10.0.2.15 --port 20049 --mountport 20048 --export /export \
//!     --local /export --read-file data --write-file out --list-dir many --entries 2000
//! nfs3probe --server 10.0.2.15 --port 20049 --null-bench 2000
//! ```
//!
//! Exit status 0 when every check passed, 1 otherwise (each failure says what differed).

mod conns;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rpcrdma_engine::conn::{ConnConfig, Version};
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::requester::{CallArgs, Client, Reply};
use rpcrdma_proto::rpc::{AuthSys, CallHeader, Gids, OpaqueAuth, ReplyHeader, AUTH_SYS};
use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

use conns::run_conns;

const NFS: u32 = 100_003;
const MOUNT: u32 = 100_005;
const V3: u32 = 3;
const GETATTR: u32 = 1;
const LOOKUP: u32 = 3;
const READ: u32 = 6;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const REMOVE: u32 = 12;
const READDIRPLUS: u32 = 17;
const FSINFO: u32 = 19;
/// One READDIRPLUS reply: the last cookie, the verifier, eof, the names.
type Page = (u64, [u8; 8], bool, Vec<Vec<u8>>);

#[derive(Parser, Debug)]
#[command(name = "nfs3probe", about = "An NFSv3 client on the rpcrdma engine")]
struct Cli {
    /// The server's address.
    #[arg(long, default_value = "10.0.2.15")]
    server: String,
    /// NFS over RDMA's port.
    #[arg(long, default_value_t = 20049)]
    port: u16,
    /// MOUNT's TCP port.
    #[arg(long, default_value_t = 20048)]
    mountport: u16,
    /// The export's path, as MOUNT knows it.
    #[arg(long, default_value = "/")]
    export: String,
    /// The exported directory as this machine sees it (to check data against).
    #[arg(long)]
    local: Option<PathBuf>,
    /// A file of the export to READ (1 MiB from offset 0) and compare.
    #[arg(long)]
    read_file: Option<String>,
    /// A file to CREATE and WRITE (1 MiB, FILE_SYNC), then compare on this machine.
    #[arg(long)]
    write_file: Option<String>,
    /// A directory to list with READDIRPLUS, expecting `--entries` names.
    #[arg(long)]
    list_dir: Option<String>,
    /// How many entries `--list-dir` holds.
    #[arg(long, default_value_t = 2000)]
    entries: usize,
    /// The RDMA device.
    #[arg(long)]
    device: Option<String>,
    /// Time N NULL round trips instead (prints one JSON line).
    #[arg(long)]
    null_bench: Option<usize>,
    /// Time N GETATTRs of the export's root instead (MOUNT first; prints one JSON line): the
    /// round trip of a procedure that reaches the file system.
    #[arg(long)]
    getattr_bench: Option<usize>,
    /// Time N CREATEs of new files in the export's root, then N REMOVEs of them, instead
    /// (MOUNT first; prints one JSON line): round trips of procedures that change the file
    /// system (which nfs3d hands to its I/O threads).
    #[arg(long)]
    create_bench: Option<usize>,
    /// RPC-over-RDMA version: 1, 2, or auto (2 if the server speaks it, else 1 on the same
    /// connection).
    #[arg(long, default_value = "1")]
    version: Version,
    /// Open N connections at once and hold them all while each is checked: NULL, GETATTR
    /// of the export's root (after one MOUNT), and with --read-file a LOOKUP and a READ of
    /// its first 64 KiB through a Write chunk (compared with --local's copy); then close
    /// them all. Each connection asks for few credits and small buffers.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    conns: Option<u32>,
}

/// An AUTH_SYS credential body for root on this machine.
fn auth_sys(out: &mut [u8]) -> usize {
    AuthSys {
        stamp: std::process::id(),
        machinename: b"nfs3probe",
        uid: 0,
        gid: 0,
        gids: Gids::default(),
    }
    .encode(out)
    .unwrap_or(0)
}

/// Encodes with an XDR writer into a fresh vector.
fn xdr(f: impl FnOnce(&mut XdrWriter<'_>) -> Result<(), rpcrdma_proto::EncodeError>) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut buf);
    let n = f(&mut w).map(|()| w.position()).unwrap_or(0);
    buf.truncate(n);
    buf
}

/// MNT over TCP: the export's root handle.
fn mount(cli: &Cli, cred: OpaqueAuth<'_>) -> Result<Vec<u8>, String> {
    let addr: SocketAddr = format!("{}:{}", cli.server, cli.mountport)
        .parse()
        .map_err(|e| format!("bad MOUNT address: {e}"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("MOUNT connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let xid = 0x6e66_7331;
    let mut msg = vec![0u8; 4 + 1024];
    let h = CallHeader::new(xid, MOUNT, V3, 1, cred, OpaqueAuth::NONE)
        .encode(&mut msg[4..])
        .map_err(|e| e.to_string())?;
    let args = xdr(|w| w.put_string(cli.export.as_bytes(), 1024));
    msg[4 + h..4 + h + args.len()].copy_from_slice(&args);
    let len = h + args.len();
    msg.truncate(4 + len);
    msg[..4].copy_from_slice(&(0x8000_0000 | len as u32).to_be_bytes());
    s.write_all(&msg).map_err(|e| format!("MOUNT send: {e}"))?;
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark)
        .map_err(|e| format!("MOUNT reply: {e}"))?;
    let n = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
    if n > 65_536 {
        return Err(format!("MOUNT reply record of {n} bytes"));
    }
    let mut reply = vec![0u8; n];
    s.read_exact(&mut reply)
        .map_err(|e| format!("MOUNT reply: {e}"))?;
    let (rh, used) = ReplyHeader::parse(&reply).map_err(|e| format!("MOUNT reply: {e}"))?;
    if !rh.is_success() || rh.xid != xid {
        return Err(format!("MOUNT refused: {rh:?}"));
    }
    let mut r = XdrReader::new(&reply[used..]);
    let status = r.u32().map_err(|e| e.to_string())?;
    if status != 0 {
        return Err(format!(
            "MNT of {} answered mountstat3 {status}",
            cli.export
        ));
    }
    Ok(r.opaque_var(64).map_err(|e| e.to_string())?.to_vec())
}

/// The checks of one run.
struct Checks {
    failed: usize,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, why: impl FnOnce() -> String) {
        if ok {
            println!("nfs3probe: PASS {name}");
        } else {
            println!("nfs3probe: FAIL {name}: {}", why());
            self.failed += 1;
        }
    }
}

/// One NFS call, blocking; `f` reads the reply.
fn nfs<P: Provider, R>(
    c: &mut Client<P>,
    call: CallArgs<'_>,
    f: impl FnOnce(&Reply<'_>) -> R,
) -> Result<R, String> {
    let proc_num = call.proc_num;
    c.call(&call, |r| r.map(|r| f(&r)))
        .map_err(|e| format!("procedure {proc_num}: {e}"))?
        .map_err(|e| format!("procedure {proc_num}: {e}"))
}

/// Skips a `post_op_attr` (RFC 1813 §2.6): present or not.
fn skip_post_op_attr(x: &mut XdrReader<'_>) {
    if x.bool().unwrap_or(false) {
        x.skip(84).ok();
    }
}

/// Skips a `wcc_data`: a `pre_op_attr` (present or not), then a `post_op_attr`.
fn skip_wcc(x: &mut XdrReader<'_>) {
    if x.bool().unwrap_or(false) {
        x.skip(24).ok();
    }
    skip_post_op_attr(x);
}

/// The status word and a reader after it.
fn status(results: &[u8]) -> (u32, XdrReader<'_>) {
    let mut r = XdrReader::new(results);
    (r.u32().unwrap_or(u32::MAX), r)
}

/// Times `n` calls of `call`, each of which must answer `true`; the latencies in ns.
fn time_calls(
    n: usize,
    mut call: impl FnMut() -> Result<bool, String>,
) -> Result<Vec<u64>, String> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        if !call()? {
            return Err(format!("call {i} of {n} did not succeed"));
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Ok(lat)
}

/// `{"n":..,"p50":..,"p90":..,"p99":..,"min":..}` of latencies in ns.
fn percentiles(mut lat: Vec<u64>) -> String {
    if lat.is_empty() {
        return "{\"n\":0}".into();
    }
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    format!(
        "{{\"n\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"min\":{}}}",
        lat.len(),
        q(0.5),
        q(0.9),
        q(0.99),
        lat[0]
    )
}

/// Probes the server as the command line asks (see the module's doc): `--conns`, one of
/// the benchmarks, or the checks; the failed checks' count.
fn run(cli: &Cli) -> Result<usize, String> {
    let mut body = [0u8; 64];
    let n = auth_sys(&mut body);
    let cred = OpaqueAuth {
        flavor: AUTH_SYS,
        body: &body[..n],
    };
    let device = Verbs::open_device(cli.device.as_deref()).map_err(|e| e.to_string())?;
    let addr = format!("{}:{}", cli.server, cli.port)
        .parse()
        .map_err(|e| format!("bad address: {e}"))?;
    if let Some(n) = cli.conns {
        return run_conns(cli, cred, &device, &addr, n as usize);
    }
    let mut c = connect(cli, &device, &addr)?;
    if let Some(n) = cli.null_bench {
        let lat = time_calls(n, || nfs(&mut c, null_args(cred), |r| r.is_success()))?;
        println!("{{\"null_rtt_ns\":{}}}", percentiles(lat));
        c.disconnect();
        return Ok(0);
    }
    let root = mount(cli, cred)?;
    if bench_mounted(cli, &mut c, cred, &root)? {
        c.disconnect();
        return Ok(0);
    }
    let mut checks = Checks { failed: 0 };
    let (rtmax, wtmax) = check_root(&mut c, cred, &root, &mut checks)?;
    check_read(cli, &mut c, cred, &root, rtmax, &mut checks)?;
    check_write(cli, &mut c, cred, &root, wtmax, &mut checks)?;
    check_list(cli, &mut c, cred, &root, &mut checks)?;
    let s = c.snapshot();
    println!(
        "nfs3probe: client counters: chunked_calls {} write_chunks {} long_replies {} remote_invalidations {} local_invalidations {}",
        s.chunked_calls, s.write_chunks, s.long_replies, s.remote_invalidations, s.local_invalidations
    );
    if cli.list_dir.is_some() {
        checks.check("a Reply chunk was used", s.long_replies > 0, || {
            "none".into()
        });
    }
    c.disconnect();
    Ok(checks.failed)
}

/// The connection of the checks and benchmarks, its RPC-over-RDMA version printed.
fn connect(
    cli: &Cli,
    device: &<Verbs as Provider>::Device,
    addr: &SocketAddr,
) -> Result<Client<Verbs>, String> {
    // The Linux server sends about 4 KB inline whatever a client advertises: receive 4 KB.
    let cfg = ConnConfig {
        send_size: 4096,
        recv_size: 4096,
        credits: 32,
        initial_grant: 32,
        bulk_size: (1 << 20) + 65536,
        version: cli.version,
        ..ConnConfig::default()
    };
    let c = Client::<Verbs>::connect(device, addr, cfg).map_err(|e| e.to_string())?;
    let s = c.snapshot();
    println!(
        "nfs3probe: RPC-over-RDMA version {} (asked {}; openings sent {}, fallbacks {})",
        c.negotiation().wire().number(),
        cli.version.name(),
        s.connprops_sent,
        s.version_fallbacks
    );
    Ok(c)
}

/// A NULL call with the credential `cred`.
fn null_args(cred: OpaqueAuth<'_>) -> CallArgs<'_> {
    let mut a = CallArgs::new(NFS, V3, 0, &[], 0);
    a.cred = cred;
    a
}

/// The arguments of a CREATE of `name` in the directory `dir` (UNCHECKED, mode 0644).
fn create_args(dir: &[u8], name: &str) -> Vec<u8> {
    xdr(|w| {
        w.put_opaque_var(dir, 64)?;
        w.put_string(name.as_bytes(), 255)?;
        w.put_u32(0)?; // UNCHECKED
        for v in [1u32, 0o644, 0, 0, 0, 0, 0] {
            w.put_u32(v)?; // mode set; uid, gid, size unset; atime, mtime unchanged
        }
        Ok(())
    })
}

/// LOOKUP of `name` in the directory `dir`: its handle, or `None` when the server answers
/// an error.
fn lookup(
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    dir: &[u8],
    name: &str,
) -> Result<Option<Vec<u8>>, String> {
    let args = xdr(|w| {
        w.put_opaque_var(dir, 64)?;
        w.put_string(name.as_bytes(), 255)
    });
    let mut a = CallArgs::new(NFS, V3, LOOKUP, &args, 512);
    a.cred = cred;
    nfs(c, a, |r| {
        let (s, mut x) = status(r.results);
        (s == 0)
            .then(|| x.opaque_var(64).map(<[u8]>::to_vec).ok())
            .flatten()
    })
}

/// [`lookup`] of `name` in `dir` as a check ("LOOKUP name", failed as "not found").
fn lookup_checked(
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    dir: &[u8],
    name: &str,
    checks: &mut Checks,
) -> Result<Option<Vec<u8>>, String> {
    let fh = lookup(c, cred, dir, name)?;
    checks.check(&format!("LOOKUP {name}"), fh.is_some(), || {
        "not found".into()
    });
    Ok(fh)
}

/// `--getattr-bench` or `--create-bench`, whichever was asked, on the export whose root
/// handle is `root`; its JSON line printed. False when neither was asked.
fn bench_mounted(
    cli: &Cli,
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    root: &[u8],
) -> Result<bool, String> {
    if let Some(n) = cli.getattr_bench {
        let fh_args = xdr(|w| w.put_opaque_var(root, 64));
        let lat = time_calls(n, || {
            let mut a = CallArgs::new(NFS, V3, GETATTR, &fh_args, 256);
            a.cred = cred;
            nfs(c, a, |r| status(r.results).0 == 0)
        })?;
        println!("{{\"getattr_rtt_ns\":{}}}", percentiles(lat));
        return Ok(true);
    }
    let Some(n) = cli.create_bench else {
        return Ok(false);
    };
    let name = |i: usize| format!("create-bench-{}-{i}", std::process::id());
    let mut i = 0;
    let create = time_calls(n, || {
        let args = create_args(root, &name(i));
        i += 1;
        let mut a = CallArgs::new(NFS, V3, CREATE, &args, 512);
        a.cred = cred;
        nfs(c, a, |r| status(r.results).0 == 0)
    })?;
    let mut i = 0;
    let remove = time_calls(n, || {
        let args = xdr(|w| {
            w.put_opaque_var(root, 64)?;
            w.put_string(name(i).as_bytes(), 255)
        });
        i += 1;
        let mut a = CallArgs::new(NFS, V3, REMOVE, &args, 512);
        a.cred = cred;
        nfs(c, a, |r| status(r.results).0 == 0)
    })?;
    println!(
        "{{\"create_rtt_ns\":{},\"remove_rtt_ns\":{}}}",
        percentiles(create),
        percentiles(remove)
    );
    Ok(true)
}

/// The checks of the export's root: MNT's handle, NULL, GETATTR (a directory) and FSINFO;
/// the server's largest READ and WRITE, clamped to 4 KiB..=1 MiB.
fn check_root(
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    root: &[u8],
    checks: &mut Checks,
) -> Result<(u32, u32), String> {
    let fh_args = xdr(|w| w.put_opaque_var(root, 64));
    checks.check("MNT", !root.is_empty(), || "no handle".into());
    let ok = nfs(c, null_args(cred), |r| r.is_success())?;
    checks.check("NULL", ok, || "not SUCCESS".into());
    let mut a = CallArgs::new(NFS, V3, GETATTR, &fh_args, 256);
    a.cred = cred;
    let ftype = nfs(c, a, |r| {
        let (s, mut x) = status(r.results);
        (s, x.u32().unwrap_or(0))
    })?;
    checks.check("GETATTR of the root", ftype == (0, 2), || {
        format!("{ftype:?}")
    });
    // FSINFO: the server's largest READ and WRITE (the kernel's nfsd takes 512 KiB over RDMA).
    let mut a = CallArgs::new(NFS, V3, FSINFO, &fh_args, 256);
    a.cred = cred;
    let (rtmax, wtmax) = nfs(c, a, |r| {
        let (s, mut x) = status(r.results);
        if s != 0 {
            return (0, 0);
        }
        skip_post_op_attr(&mut x);
        let rt = x.u32().unwrap_or(0);
        x.skip(8).ok();
        (rt, x.u32().unwrap_or(0))
    })?;
    checks.check("FSINFO", rtmax > 0 && wtmax > 0, || {
        format!("rtmax {rtmax} wtmax {wtmax}")
    });
    Ok((rtmax.clamp(4096, 1 << 20), wtmax.clamp(4096, 1 << 20)))
}

/// `--read-file`: LOOKUP, then 1 MiB in READs of at most `rtmax`, each through a Write
/// chunk, compared with `--local`'s copy.
fn check_read(
    cli: &Cli,
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    root: &[u8],
    rtmax: u32,
    checks: &mut Checks,
) -> Result<(), String> {
    let Some(name) = &cli.read_file else {
        return Ok(());
    };
    let Some(fh) = lookup_checked(c, cred, root, name, checks)? else {
        return Ok(());
    };
    let mut got: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut bad = None;
    while got.len() < 1 << 20 && bad.is_none() {
        let n = rtmax.min((1 << 20) - got.len() as u32);
        let args = xdr(|w| {
            w.put_opaque_var(&fh, 64)?;
            w.put_u64(got.len() as u64)?;
            w.put_u32(n)
        });
        let mut a = CallArgs::new(NFS, V3, READ, &args, 256);
        a.cred = cred;
        let chunk = [n];
        a.bulk_results = &chunk;
        let piece = nfs(c, a, |r| {
            let (s, mut x) = status(r.results);
            skip_post_op_attr(&mut x);
            let count = x.u32().unwrap_or(0);
            (s, count, r.bulk().first().map(|b| b.to_vec()))
        })?;
        match piece {
            (0, k, Some(b)) if k > 0 && b.len() == k as usize => got.extend_from_slice(&b),
            other => bad = Some((other.0, other.1)),
        }
    }
    let want = cli
        .local
        .as_ref()
        .and_then(|l| std::fs::read(l.join(name)).ok())
        .map(|mut v| {
            v.truncate(1 << 20);
            v
        });
    checks.check(
        &format!("READ 1 MiB through Write chunks of {rtmax} B, bytes equal"),
        bad.is_none() && want.as_deref() == Some(&got[..]),
        || format!("status/count {bad:?}, {} bytes read", got.len()),
    );
    Ok(())
}

/// `--write-file`: CREATE, then 1 MiB in FILE_SYNC WRITEs of at most `wtmax`, each through
/// a Read chunk, compared with what `--local` holds after.
fn check_write(
    cli: &Cli,
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    root: &[u8],
    wtmax: u32,
    checks: &mut Checks,
) -> Result<(), String> {
    let Some(name) = &cli.write_file else {
        return Ok(());
    };
    let args = create_args(root, name);
    let mut a = CallArgs::new(NFS, V3, CREATE, &args, 512);
    a.cred = cred;
    let fh = nfs(c, a, |r| {
        let (s, mut x) = status(r.results);
        (s == 0 && x.bool().unwrap_or(false))
            .then(|| x.opaque_var(64).map(<[u8]>::to_vec).ok())
            .flatten()
    })?;
    checks.check(&format!("CREATE {name}"), fh.is_some(), || {
        "no handle".into()
    });
    let Some(fh) = fh else {
        return Ok(());
    };
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut res = (0, 0, 2);
    let mut off = 0usize;
    while off < data.len() && res.0 == 0 {
        let n = (wtmax as usize).min(data.len() - off);
        let args = xdr(|w| {
            w.put_opaque_var(&fh, 64)?;
            w.put_u64(off as u64)?;
            w.put_u32(n as u32)?;
            w.put_u32(2) // FILE_SYNC
        });
        let mut a = CallArgs::new(NFS, V3, WRITE, &args, 256);
        a.cred = cred;
        a.bulk_arg = Some(&data[off..off + n]);
        let r = nfs(c, a, |r| {
            let (s, mut x) = status(r.results);
            skip_wcc(&mut x);
            (s, x.u32().unwrap_or(0), x.u32().unwrap_or(9))
        })?;
        res = (r.0, res.1 + r.1, r.2.min(res.2));
        off += n;
    }
    let on_disk = cli
        .local
        .as_ref()
        .and_then(|l| std::fs::read(l.join(name)).ok());
    checks.check(
        &format!(
            "WRITE 1 MiB through Read chunks of {wtmax} B, FILE_SYNC, bytes on the server equal"
        ),
        res == (0, 1 << 20, 2) && on_disk.as_deref() == Some(&data[..]),
        || {
            format!(
                "status/count/committed {res:?}, file {} bytes",
                on_disk.map_or(0, |d| d.len())
            )
        },
    );
    Ok(())
}

/// `--list-dir`: LOOKUP, then READDIRPLUS from the start to eof (at most 1000 calls),
/// expecting `--entries` names besides `.` and `..`.
fn check_list(
    cli: &Cli,
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    root: &[u8],
    checks: &mut Checks,
) -> Result<(), String> {
    let Some(dir) = &cli.list_dir else {
        return Ok(());
    };
    let Some(dfh) = lookup_checked(c, cred, root, dir, checks)? else {
        return Ok(());
    };
    let mut names = std::collections::BTreeSet::new();
    let (mut cookie, mut verf, mut calls) = (0u64, [0u8; 8], 0);
    let mut eof = false;
    while !eof && calls < 1000 {
        calls += 1;
        let page = readdirplus(c, cred, &dfh, cookie, verf)?;
        cookie = page.0;
        verf = page.1;
        eof = page.2;
        names.extend(page.3.into_iter().filter(|n| n != b"." && n != b".."));
    }
    checks.check(
        &format!(
            "READDIRPLUS of {} entries through the Reply chunk ({calls} calls)",
            cli.entries
        ),
        names.len() == cli.entries && eof,
        || format!("{} names, eof {eof}", names.len()),
    );
    Ok(())
}

/// One READDIRPLUS of the directory `dfh` from `cookie` (dircount 32 KiB, maxcount 64 KiB).
fn readdirplus(
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    dfh: &[u8],
    cookie: u64,
    verf: [u8; 8],
) -> Result<Page, String> {
    let args = xdr(|w| {
        w.put_opaque_var(dfh, 64)?;
        w.put_u64(cookie)?;
        w.put_opaque_fixed(&verf)?;
        w.put_u32(32 * 1024)?;
        w.put_u32(64 * 1024)
    });
    let mut a = CallArgs::new(NFS, V3, READDIRPLUS, &args, 64 * 1024);
    a.cred = cred;
    nfs(c, a, |r| -> Result<Page, String> {
        let (s, mut x) = status(r.results);
        if s != 0 {
            return Err(format!("READDIRPLUS status {s}"));
        }
        let e = |e: rpcrdma_proto::DecodeError| e.to_string();
        if x.bool().map_err(e)? {
            x.skip(84).map_err(e)?;
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(x.opaque_fixed(8).map_err(e)?);
        let mut got = Vec::new();
        let mut last = cookie;
        while x.bool().map_err(e)? {
            x.u64().map_err(e)?;
            got.push(x.string(255).map_err(e)?.to_vec());
            last = x.u64().map_err(e)?;
            if x.bool().map_err(e)? {
                x.skip(84).map_err(e)?;
            }
            if x.bool().map_err(e)? {
                x.opaque_var(64).map_err(e)?;
            }
        }
        Ok((last, v, x.bool().map_err(e)?, got))
    })?
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(n) => {
            println!("nfs3probe: {n} check(s) failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("nfs3probe: FAIL {e}");
            ExitCode::FAILURE
        }
    }
}
