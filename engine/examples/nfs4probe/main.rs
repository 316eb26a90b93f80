//! `nfs4probe`: an NFSv4.1 client on the engine's requester that proves its back channel
//! against a real server (the Linux kernel's nfsd): RFC 8167's backward direction on
//! RPC-over-RDMA version 1, as NFSv4.1 callbacks use it.
//!
//! It opens a session whose back channel rides the RDMA connection (EXCHANGE_ID, then
//! CREATE_SESSION with CREATE_SESSION4_FLAG_CONN_BACK_CHAN, RFC 8881 §18.35, §18.36) and
//! serves the callback program from a dispatch table (`Client::connect_serving`): CB_NULL
//! (which the Linux server does not send to a 4.1 client: it takes the back channel as up
//! without a probe) and CB_COMPOUND with CB_SEQUENCE and CB_RECALL (§20). With `--file NAME` it then opens NAME in the export's root for reading,
//! asking for a read delegation, says so on stdout ("read delegation held"), and waits for
//! the server to recall it (a local write to the file breaks the delegation's lease);
//! it returns the delegation (DELEGRETURN), closes the file and ends the session.
//!
//! ```sh
//! nfs4probe --server 10.0.2.15 --port 20049 --file cbfile
//! ```
//!
//! Prints one JSON object of what the back channel carried; exit status 0 when every step
//! passed.

#[path = "../nfs4common/mod.rs"]
mod nfs4common;
mod ops;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rpcrdma_engine::conn::{ConnConfig, Version};
use rpcrdma_engine::dispatch::{Dispatch, Outcome, ProcSpec};
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_proto::rpc::{AuthSys, Gids, OpaqueAuth, AUTH_SYS};
use rpcrdma_proto::xdr::XdrWriter;
use rpcrdma_proto::EncodeError;

use ops::*;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ProviderName {
    Verbs,
    Soft,
}

/// Backward Calls served at once: the back channel's slots.
const BACK_SLOTS: u32 = 4;

#[derive(Parser, Debug)]
#[command(
    name = "nfs4probe",
    about = "An NFSv4.1 client's back channel on the rpcrdma engine"
)]
struct Cli {
    /// The server's address (on soft: its listener's name).
    #[arg(long, default_value = "10.0.2.15")]
    server: String,
    /// The fabric.
    #[arg(long, value_enum, default_value_t = ProviderName::Verbs)]
    provider: ProviderName,
    /// NFS over RDMA's port.
    #[arg(long, default_value_t = 20049)]
    port: u16,
    /// The RDMA device (default: the first).
    #[arg(long)]
    device: Option<String>,
    /// A file in the export's root to open with a read delegation and wait to be recalled.
    #[arg(long)]
    file: Option<String>,
    /// Seconds to keep asking for a delegation (the server grants none during a grace
    /// period).
    #[arg(long, default_value_t = 90)]
    deleg_wait: u64,
    /// Seconds to wait for the recall once the delegation is held.
    #[arg(long, default_value_t = 90)]
    recall_wait: u64,
    /// Seconds to wait for a CB_NULL after CREATE_SESSION. The Linux server sends none to
    /// a 4.1 client (it marks the back channel up without probing it), so none is
    /// required.
    #[arg(long, default_value_t = 2)]
    probe_wait: u64,
    /// Time this many NULL round trips, then as many COMPOUNDs of SEQUENCE, PUTROOTFH and
    /// GETATTR, one after another; their medians are printed (microseconds).
    #[arg(long, default_value_t = 0)]
    rtt: u32,
}

/// What the callback handlers saw.
#[derive(Default)]
struct Seen {
    null: u32,
    compounds: u32,
    cb: CbSeen,
    bad: u32,
}

/// The callback program: CB_NULL and CB_COMPOUND, counting into `seen`.
fn callbacks(seen: &Arc<Mutex<Seen>>) -> Arc<Dispatch> {
    let mut d = Dispatch::new();
    let s = Arc::clone(seen);
    d.register(
        CB_PROGRAM,
        CB_VERSION,
        CB_NULL,
        ProcSpec::plain(0),
        move |_, _| {
            s.lock().unwrap().null += 1;
            Outcome::Success
        },
    );
    let s = Arc::clone(seen);
    d.register(
        CB_PROGRAM,
        CB_VERSION,
        CB_COMPOUND,
        ProcSpec::plain(2048),
        move |req, resp| {
            let mut seen = s.lock().unwrap();
            seen.compounds += 1;
            let Seen { cb, bad, .. } = &mut *seen;
            match answer_cb_compound(req.args, resp.results(), cb) {
                Some(n) => {
                    resp.set_results_len(n);
                    Outcome::Success
                }
                None => {
                    *bad += 1;
                    Outcome::GarbageArgs
                }
            }
        },
    );
    Arc::new(d)
}

/// The forward side: the connection, the credential, the session's slot 0.
struct Nfs4<P: Provider> {
    c: Client<P>,
    cred: Vec<u8>,
    clientid: u64,
    session: SessionId,
    seq: u32,
}

impl<P: Provider> Nfs4<P> {
    /// One COMPOUND of `nops` operations that `ops` writes; its results, walked by `f`.
    fn compound<R>(
        &mut self,
        nops: u32,
        ops: impl FnOnce(&mut XdrWriter<'_>) -> Result<(), EncodeError>,
        f: impl FnOnce(Results<'_>) -> Result<R, String>,
    ) -> Result<R, String> {
        let mut args = Vec::new();
        compound(&mut args, nops, ops);
        if args.is_empty() {
            return Err("the arguments do not fit".into());
        }
        let mut call = CallArgs::new(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, &args, 4096);
        call.cred = OpaqueAuth {
            flavor: AUTH_SYS,
            body: &self.cred,
        };
        self.c
            .call(&call, |r| {
                let r = r.map_err(|e| format!("COMPOUND: {e}"))?;
                if !r.is_success() {
                    return Err(format!("COMPOUND: {:?}", r.rpc));
                }
                f(Results::new(r.results).ok_or("COMPOUND results do not decode")?)
            })
            .map_err(|e| format!("COMPOUND: {e}"))?
    }

    /// A COMPOUND that starts with SEQUENCE on slot 0 (`nops` more operations).
    fn sequenced<R>(
        &mut self,
        nops: u32,
        ops: impl FnOnce(&mut XdrWriter<'_>) -> Result<(), EncodeError>,
        f: impl FnOnce(Results<'_>) -> Result<R, String>,
    ) -> Result<R, String> {
        self.seq += 1;
        let (session, seq) = (self.session, self.seq);
        self.compound(
            nops + 1,
            |w| {
                sequence(w, &session, seq)?;
                ops(w)
            },
            |mut res| {
                // SEQUENCE4resok: the session, sequence, slot, highest and target
                // highest slots, status flags.
                res.next(op::SEQUENCE)?
                    .skip(16 + 5 * 4)
                    .map_err(|e| e.to_string())?;
                f(res)
            },
        )
    }

    /// Polls (serving callbacks) until `done` says so or `wait` passes.
    fn serve_until(&mut self, wait: Duration, mut done: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if done() {
                return true;
            }
            self.c.poll_completions(|_| {});
            if self.c.is_dead() {
                return false;
            }
        }
        done()
    }
}

/// An AUTH_SYS body for root.
fn auth_sys() -> Vec<u8> {
    let mut body = vec![0u8; 64];
    let n = AuthSys {
        stamp: std::process::id(),
        machinename: b"nfs4probe",
        uid: 0,
        gid: 0,
        gids: Gids::default(),
    }
    .encode(&mut body)
    .unwrap_or(0);
    body.truncate(n);
    body
}

/// The session: EXCHANGE_ID, then CREATE_SESSION with the back channel on this
/// connection; returns the connection ready for SEQUENCE.
fn open_session<P: Provider>(c: Client<P>) -> Result<Nfs4<P>, String> {
    let mut n = Nfs4 {
        c,
        cred: auth_sys(),
        clientid: 0,
        session: [0; 16],
        seq: 0,
    };
    let verifier = u64::from(std::process::id()) << 32
        | std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64);
    let owner = format!("nfs4probe-{}", std::process::id());
    let (clientid, seqid) = n.compound(
        1,
        |w| exchange_id(w, verifier, owner.as_bytes()),
        |mut res| {
            let r = res.next(op::EXCHANGE_ID)?;
            Ok((
                r.u64().map_err(|e| e.to_string())?,
                r.u32().map_err(|e| e.to_string())?,
            ))
        },
    )?;
    println!("nfs4probe: EXCHANGE_ID: client {clientid:#x}");
    let fore = Channel {
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 8192,
        max_operations: 16,
        max_requests: 16,
    };
    // The back channel: backward Calls are inline (RFC 8167), so they fit the receives.
    let back = Channel {
        max_request: 4096,
        max_response: 4096,
        max_response_cached: 0,
        max_operations: 4,
        max_requests: BACK_SLOTS,
    };
    let (session, flags, back_got) = n.compound(
        1,
        |w| create_session(w, clientid, seqid, &fore, &back),
        |mut res| {
            let r = res.next(op::CREATE_SESSION)?;
            let sid: SessionId = r
                .opaque_fixed(16)
                .ok()
                .and_then(|s| s.try_into().ok())
                .ok_or("CREATE_SESSION: no session ID")?;
            r.u32().map_err(|e| e.to_string())?;
            let flags = r.u32().map_err(|e| e.to_string())?;
            Channel::read(r).ok_or("CREATE_SESSION: fore channel")?;
            let back = Channel::read(r).ok_or("CREATE_SESSION: back channel")?;
            Ok((sid, flags, back))
        },
    )?;
    println!(
        "nfs4probe: CREATE_SESSION: flags {flags:#x}, back channel {} requests of up to {} bytes",
        back_got.max_requests, back_got.max_request
    );
    if flags & CONN_BACK_CHAN == 0 {
        return Err("the server did not put the back channel on this connection".into());
    }
    n.session = session;
    n.clientid = clientid;
    Ok(n)
}

/// What the run found, printed as JSON at the end.
#[derive(Default)]
struct Found {
    delegation: bool,
    recalled: bool,
    returned: bool,
}

/// Opens `name` for reading with a read delegation (retrying while the server is in a
/// grace period: it refuses OPEN with NFS4ERR_GRACE during its own, and grants no
/// delegation during any, lockd's included), waits for its recall, returns it and closes
/// the file.
fn delegation<P: Provider>(
    n: &mut Nfs4<P>,
    seen: &Arc<Mutex<Seen>>,
    cli: &Cli,
    name: &str,
) -> Result<Found, String> {
    let mut found = Found::default();
    let deadline = Instant::now() + Duration::from_secs(cli.deleg_wait);
    let (fh, open, deleg) = loop {
        match open_file(n, name) {
            Ok((fh, open, Some(deleg))) => break (fh, open, deleg),
            Ok((fh, open, None)) => {
                close(n, &fh, &open)?;
                if Instant::now() >= deadline {
                    println!("nfs4probe: OPEN of {name}: no delegation granted");
                    return Ok(found);
                }
            }
            Err(e)
                if e.contains(&format!("status {NFS4ERR_GRACE}")) && Instant::now() < deadline => {}
            Err(e) => return Err(e),
        }
        n.serve_until(Duration::from_secs(2), || false);
    };
    found.delegation = true;
    println!("nfs4probe: read delegation held on {name}");
    std::io::stdout().flush().ok();
    let recalled = |s: &Arc<Mutex<Seen>>| {
        s.lock()
            .unwrap()
            .cb
            .recalls
            .iter()
            .any(|r| r[4..] == deleg[4..])
    };
    found.recalled = n.serve_until(Duration::from_secs(cli.recall_wait), || recalled(seen));
    println!("nfs4probe: recalled: {}", found.recalled);
    n.sequenced(
        2,
        |w| {
            putfh(w, &fh)?;
            with_stateid(w, op::DELEGRETURN, &deleg)
        },
        |mut res| {
            res.next(op::PUTFH)?;
            res.next(op::DELEGRETURN).map(|_| ())
        },
    )?;
    found.returned = true;
    close(n, &fh, &open)?;
    Ok(found)
}

/// The medians, in microseconds, of `count` NULL round trips and `count` COMPOUNDs of
/// SEQUENCE, PUTROOTFH and GETATTR (type, change, size, fileid), one after another.
fn round_trips<P: Provider>(n: &mut Nfs4<P>, count: u32) -> Result<(f64, f64), String> {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let mut null = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let t = Instant::now();
        let call = CallArgs::new(NFS4_PROGRAM, NFS_V4, 0, &[], 0);
        n.c.call(&call, |r| r.map(|_| ()))
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("NULL: {e:?}"))?;
        null.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mut getattr = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let t = Instant::now();
        n.sequenced(
            2,
            |w| {
                w.put_u32(op::PUTROOTFH)?;
                w.put_u32(op::GETATTR)?;
                // type (1), change (3), size (4); fileid (20).
                w.put_u32(1)?;
                w.put_u32(1 << 1 | 1 << 3 | 1 << 4 | 1 << 20)
            },
            |mut res| {
                res.next(op::PUTROOTFH)?;
                res.next(op::GETATTR).map(|_| ())
            },
        )?;
        getattr.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok((median(null), median(getattr)))
}

/// PUTFH of `fh`.
fn putfh(w: &mut XdrWriter<'_>, fh: &[u8]) -> Result<(), EncodeError> {
    w.put_u32(op::PUTFH)?;
    w.put_opaque_var(fh, 128)
}

/// OPEN of `name` in the export's root for reading, a read delegation asked for: its
/// handle, open stateid and delegation stateid (if one was granted).
#[allow(clippy::type_complexity)]
fn open_file<P: Provider>(
    n: &mut Nfs4<P>,
    name: &str,
) -> Result<(Vec<u8>, StateId, Option<StateId>), String> {
    let clientid = n.clientid;
    n.sequenced(
        3,
        |w| {
            w.put_u32(op::PUTROOTFH)?;
            open_read(w, clientid, b"nfs4probe-open", name.as_bytes())?;
            w.put_u32(op::GETFH)
        },
        |mut res| {
            res.next(op::PUTROOTFH)?;
            let (open, deleg) =
                open_result(res.next(op::OPEN)?).ok_or("OPEN: results do not decode")?;
            let fh = res
                .next(op::GETFH)?
                .opaque_var(128)
                .map_err(|e| e.to_string())?;
            Ok((fh.to_vec(), open, deleg))
        },
    )
}

/// CLOSE of the file `fh` opened with `open`.
fn close<P: Provider>(n: &mut Nfs4<P>, fh: &[u8], open: &StateId) -> Result<(), String> {
    n.sequenced(
        2,
        |w| {
            putfh(w, fh)?;
            with_stateid(w, op::CLOSE, open)
        },
        |mut res| {
            res.next(op::PUTFH)?;
            res.next(op::CLOSE).map(|_| ())
        },
    )
}

/// Ends the session and the client ID (each alone in its COMPOUND, RFC 8881 §18.37,
/// §18.50).
fn close_session<P: Provider>(n: &mut Nfs4<P>) -> Result<(), String> {
    let (session, clientid) = (n.session, n.clientid);
    n.compound(
        1,
        |w| {
            w.put_u32(op::DESTROY_SESSION)?;
            w.put_opaque_fixed(&session)
        },
        |mut res| res.next(op::DESTROY_SESSION).map(|_| ()),
    )?;
    n.compound(
        1,
        |w| {
            w.put_u32(op::DESTROY_CLIENTID)?;
            w.put_u64(clientid)
        },
        |mut res| res.next(op::DESTROY_CLIENTID).map(|_| ()),
    )
}

fn run(cli: &Cli) -> Result<bool, String> {
    match cli.provider {
        ProviderName::Verbs => {
            let addr: SocketAddr = format!("{}:{}", cli.server, cli.port)
                .parse()
                .map_err(|e| format!("bad address: {e}"))?;
            run_on::<Verbs>(cli, &addr)
        }
        // On soft, --server names the listener.
        ProviderName::Soft => {
            let addr: SoftAddr = cli.server.parse().map_err(|e| format!("{e:?}"))?;
            run_on::<Soft>(cli, &addr)
        }
    }
}

fn run_on<P: Provider>(cli: &Cli, addr: &P::Addr) -> Result<bool, String> {
    let device = P::open_device(cli.device.as_deref()).map_err(|e| e.to_string())?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    // The Linux server sends about 4 KB inline: receive 4 KB.
    let cfg = ConnConfig {
        send_size: 4096,
        recv_size: 4096,
        credits: 16,
        initial_grant: 16,
        version: Version::V1,
        reverse_credits: BACK_SLOTS,
        ..ConnConfig::default()
    };
    let c = Client::<P>::connect_serving(&device, addr, cfg, callbacks(&seen))
        .map_err(|e| e.to_string())?;
    let mut n = open_session(c)?;
    let probed = n.serve_until(Duration::from_secs(cli.probe_wait), || {
        seen.lock().unwrap().null > 0
    });
    println!("nfs4probe: CB_NULL on the back channel: {probed}");
    n.sequenced(
        1,
        |w| {
            w.put_u32(op::RECLAIM_COMPLETE)?;
            w.put_bool(false)
        },
        |mut res| res.next(op::RECLAIM_COMPLETE).map(|_| ()),
    )?;
    if cli.rtt > 0 {
        let (null, getattr) = round_trips(&mut n, cli.rtt)?;
        println!("{{\"rtt\":{{\"count\":{},\"null_p50_us\":{null:.1},\"getattr_p50_us\":{getattr:.1}}}}}", cli.rtt);
    }
    let found = match &cli.file {
        Some(name) => delegation(&mut n, &seen, cli, name)?,
        None => Found::default(),
    };
    close_session(&mut n)?;
    let cs = n.c.snapshot();
    n.c.disconnect();
    let s = seen.lock().unwrap();
    println!(
        "{{\"backchannel\":{{\"cb_null\":{},\"cb_compound\":{},\"cb_sequence\":{},\"cb_recall\":{},\"cb_unknown\":{},\"undecodable\":{}}},\"delegation\":{},\"recalled\":{},\"returned\":{},\"reverse_calls\":{},\"reverse_replies\":{},\"credit_overruns\":{},\"discards\":{}}}",
        s.null, s.compounds, s.cb.sequences, s.cb.recalls.len(), s.cb.unknown, s.bad,
        found.delegation, found.recalled, found.returned,
        cs.reverse_calls, cs.reverse_replies, cs.credit_overruns, cs.discards
    );
    let ok = s.bad == 0
        && (cli.file.is_none()
            || (found.delegation && found.recalled && found.returned && s.cb.sequences > 0));
    Ok(ok)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("nfs4probe: {e}");
            ExitCode::FAILURE
        }
    }
}
