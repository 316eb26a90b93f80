//! `nfs4d`: an NFSv4.1 server on the engine (RFC 8881), first step. It speaks NFSv4.1's
//! session layer and calls its clients back over RDMA:
//!
//! - COMPOUND with EXCHANGE_ID, CREATE_SESSION (its back channel on the connection it
//!   came on when the client asks, CREATE_SESSION4_FLAG_CONN_BACK_CHAN), SEQUENCE with a
//!   slot table whose replies are replayed for retransmissions (exactly once, §2.10.6),
//!   RECLAIM_COMPLETE, DESTROY_SESSION, DESTROY_CLIENTID (`session.rs`);
//! - for each session with a back channel, CB_NULL and then a CB_COMPOUND holding
//!   CB_SEQUENCE, sent in RFC 8167's backward direction on version 1
//!   (`ServerConn::call_reverse_as`), their answers counted (`backchannel.rs`);
//! - every other operation answered NFS4ERR_NOTSUPP: the file operations are not
//!   implemented yet, so a client cannot mount the export.
//!
//! ```sh
//! nfs4d --export /srv/nfs --listen 10.0.2.15:20051 --provider verbs
//! ```
//!
//! On SIGINT or SIGTERM (or after `--seconds`) it prints its counters as one JSON line,
//! `"backchannel"` among them.

mod backchannel;
#[path = "../nfs4common/mod.rs"]
mod nfs4common;
mod session;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rpcrdma_engine::conn::{ConnConfig, Version};
use rpcrdma_engine::dispatch::{Dispatch, Outcome, ProcSpec};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::verbs::Verbs;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::responder::{Server, ServerConn};

use backchannel::Callbacks;
use session::{State, MAX_COMPOUND};

/// NFSv4's program, version and procedures (RFC 8881 §16).
const NFS4_PROGRAM: u32 = 100_003;
const NFS_V4: u32 = 4;
const NFSPROC4_NULL: u32 = 0;
const NFSPROC4_COMPOUND: u32 = 1;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProviderName {
    Verbs,
    Soft,
}

#[derive(Parser, Debug)]
#[command(
    name = "nfs4d",
    about = "An NFSv4.1 server on the rpcrdma engine (sessions and callbacks)"
)]
struct Cli {
    /// The directory to export as the pseudo-root `/` (checked; its files are not served
    /// yet).
    #[arg(long)]
    export: std::path::PathBuf,
    /// Address to listen on (IP:PORT on verbs, a name on soft).
    #[arg(long)]
    listen: String,
    /// The fabric.
    #[arg(long, value_enum, default_value_t = ProviderName::Verbs)]
    provider: ProviderName,
    /// The RDMA device (verbs; default: the first).
    #[arg(long)]
    device: Option<String>,
    /// Stop after this many seconds (0: at SIGINT or SIGTERM).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !cli.export.is_dir() {
        eprintln!("nfs4d: --export {}: not a directory", cli.export.display());
        return std::process::ExitCode::FAILURE;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("nfs4d: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let r = match cli.provider {
        ProviderName::Verbs => serve::<Verbs>(&cli, &stop, |_| {}),
        ProviderName::Soft => serve::<Soft>(&cli, &stop, |_| {}),
    };
    match r {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nfs4d: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// NULL and COMPOUND, run against `state`.
fn dispatch(state: &Arc<Mutex<State>>) -> Arc<Dispatch> {
    let mut d = Dispatch::new();
    d.register(
        NFS4_PROGRAM,
        NFS_V4,
        NFSPROC4_NULL,
        ProcSpec::plain(0),
        |_, _| Outcome::Success,
    );
    let s = Arc::clone(state);
    d.register(
        NFS4_PROGRAM,
        NFS_V4,
        NFSPROC4_COMPOUND,
        ProcSpec::plain(MAX_COMPOUND),
        move |req, resp| {
            let conn = resp.deferred().connection();
            let n = s.lock().unwrap().compound(conn, req.args, resp.results());
            resp.set_results_len(n);
            Outcome::Success
        },
    );
    Arc::new(d)
}

/// Listens, accepts, polls every connection and calls back every session's client
/// until `stop` is set (or `--seconds` pass); `listening` is called once it listens. The
/// counters, as a JSON line.
fn serve<P: Provider>(
    cli: &Cli,
    stop: &AtomicBool,
    listening: impl FnOnce(&P::Addr),
) -> Result<String, String>
where
    P::Addr: std::str::FromStr,
{
    let device = P::open_device(cli.device.as_deref()).map_err(|e| e.to_string())?;
    let addr = cli
        .listen
        .parse::<P::Addr>()
        .map_err(|_| format!("bad --listen {:?}", cli.listen))?;
    let boot = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs() as u32);
    let state = Arc::new(Mutex::new(State::new(boot)));
    // Callbacks are inline (RFC 8167): a few outstanding per connection.
    let cfg = ConnConfig {
        send_size: 4096,
        recv_size: 4096,
        credits: 32,
        initial_grant: 32,
        version: Version::V1,
        reverse_credits: 4,
        ..ConnConfig::default()
    };
    let mut server = Server::<P>::listen(device, &addr, dispatch(&state), cfg)
        .map_err(|e| format!("listen on {}: {e}", cli.listen))?;
    eprintln!(
        "nfs4d: NFSv4.1 on {} exporting {}",
        cli.listen,
        cli.export.display()
    );
    listening(&addr);
    let end = (cli.seconds > 0).then(|| Instant::now() + Duration::from_secs(cli.seconds));
    let mut conns: Vec<ServerConn<P>> = Vec::new();
    let mut callbacks = Callbacks::default();
    let mut next_accept = Instant::now();
    let mut done = Vec::new();
    while !stop.load(Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
        let now = Instant::now();
        if now >= next_accept {
            // Connection requests looked for every millisecond, without blocking the polls
            // (an idle server waits for them instead).
            let wait = if conns.is_empty() { 50 } else { 0 };
            if let Ok(c) = server.accept(Duration::from_millis(wait)) {
                eprintln!("nfs4d: accepted connection {}", c.id());
                conns.push(c);
            }
            next_accept = now + Duration::from_millis(1);
            for c in conns.iter_mut() {
                c.housekeep(now);
            }
        }
        for c in conns.iter_mut() {
            c.poll();
        }
        {
            let mut st = state.lock().unwrap();
            callbacks.add(std::mem::take(&mut st.new_back_channels));
            callbacks.drive(&mut conns, &st);
        }
        conns.retain(|c| {
            if c.is_dead() {
                done.push(c.snapshot());
                false
            } else {
                true
            }
        });
    }
    let reverse_calls: u64 = conns
        .iter()
        .map(|c| c.snapshot())
        .chain(done)
        .map(|s| s.reverse_calls)
        .sum();
    Ok(format!(
        "{{\"sessions\":{},\"backchannel\":{},\"reverse_calls\":{}}}",
        state.lock().unwrap().sessions(),
        callbacks.json(),
        reverse_calls
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_engine::fabric::soft::SoftAddr;
    use rpcrdma_engine::requester::{CallArgs, Client};
    use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

    /// The callback program of the test's client: CB_NULL, and CB_COMPOUND answered with
    /// its CB_SEQUENCE echoed.
    fn callback_table() -> Arc<Dispatch> {
        let mut d = Dispatch::new();
        d.register(0x4000_0000, 1, 0, ProcSpec::plain(0), |_, _| {
            Outcome::Success
        });
        d.register(0x4000_0000, 1, 1, ProcSpec::plain(512), |req, resp| {
            let mut r = XdrReader::new(req.args);
            let tag = r.opaque_var(64).unwrap().to_vec();
            r.skip(12).unwrap(); // minor version, callback_ident, one operation
            assert_eq!(r.u32().unwrap(), 11, "CB_SEQUENCE");
            let sid = r.opaque_fixed(16).unwrap().to_vec();
            let (seq, slot) = (r.u32().unwrap(), r.u32().unwrap());
            let out = resp.results();
            let mut w = XdrWriter::new(out);
            w.put_u32(0).unwrap();
            w.put_opaque_var(&tag, 64).unwrap();
            for v in [1, 11, 0] {
                w.put_u32(v).unwrap();
            }
            w.put_opaque_fixed(&sid).unwrap();
            for v in [seq, slot, 0, 0] {
                w.put_u32(v).unwrap();
            }
            let n = w.position();
            resp.set_results_len(n);
            Outcome::Success
        });
        Arc::new(d)
    }

    /// One COMPOUND of one operation; its results.
    fn compound(c: &mut Client<Soft>, opnum: u32, args: &[u8]) -> Vec<u8> {
        let mut a = vec![0u8; 512];
        let mut w = XdrWriter::new(&mut a);
        w.put_opaque_var(b"", 8).unwrap();
        w.put_u32(1).unwrap();
        w.put_u32(1).unwrap();
        w.put_u32(opnum).unwrap();
        w.put_raw(args).unwrap();
        let n = w.position();
        let call = CallArgs::new(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, &a[..n], 1024);
        c.call(&call, |r| r.unwrap().results.to_vec()).unwrap()
    }

    /// A client opens a session with its back channel on its connection: the server calls
    /// it back (CB_NULL, then CB_SEQUENCE) in RFC 8167's backward direction, and counts
    /// both answered.
    #[test]
    fn a_session_with_a_back_channel_is_called_back() {
        let dir = std::env::temp_dir();
        let name = format!("@nfs4d-test-{}", std::process::id());
        let cli = Cli::parse_from([
            "nfs4d",
            "--export",
            dir.to_str().unwrap(),
            "--listen",
            &name,
            "--provider",
            "soft",
        ]);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = Arc::clone(&stop);
        let server = std::thread::spawn(move || {
            serve::<Soft>(&cli, &s, |a: &SoftAddr| tx.send(a.clone()).unwrap())
        });
        let addr = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let device = Soft::open_device(None).unwrap();
        let cfg = ConnConfig {
            reverse_credits: 4,
            ..ConnConfig::default()
        };
        let mut c = Client::<Soft>::connect_serving(&device, &addr, cfg, callback_table()).unwrap();
        // EXCHANGE_ID: verifier, owner, no flags, SP4_NONE, no implementation ID.
        let mut a = vec![1u8; 8];
        a.extend([0, 0, 0, 2, b'c', b'1', 0, 0]);
        a.extend([0u8; 12]);
        let r = compound(&mut c, 42, &a);
        assert_eq!(&r[..4], &[0; 4]);
        let (id, seq) = (&r[20..28], &r[28..32]);
        // CREATE_SESSION with CONN_BACK_CHAN, callbacks in AUTH_NONE.
        let mut a = [id, seq].concat();
        a.extend(2u32.to_be_bytes());
        for _ in 0..2 {
            for v in [0u32, 4096, 4096, 0, 8, 4, 0] {
                a.extend(v.to_be_bytes());
            }
        }
        for v in [0x4000_0000u32, 1, 0] {
            a.extend(v.to_be_bytes());
        }
        let r = compound(&mut c, 43, &a);
        assert_eq!(&r[..4], &[0; 4], "CREATE_SESSION");
        // The session used (SEQUENCE on slot 0): CB_SEQUENCE waits for that.
        let mut a = r[20..36].to_vec();
        a.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let r = compound(&mut c, 53, &a);
        assert_eq!(&r[..4], &[0; 4], "SEQUENCE");
        // Both callbacks served while the client polls.
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.snapshot().reverse_replies < 2 {
            c.poll_completions(|_| {});
            assert!(Instant::now() < deadline, "callbacks: {:?}", c.snapshot());
        }
        // The server took the CB_SEQUENCE answer in on its next polls.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let report = server.join().unwrap().unwrap();
        assert!(
            report.contains("\"backchannel\":{\"calls\":2,\"replies\":2,\"errors\":0,\"cb_null\":1,\"cb_sequence\":1}"),
            "{report}"
        );
    }
}
