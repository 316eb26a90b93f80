//! `--conns N`: N connections held open at once, each checked with NULL, GETATTR of the
//! root and, with `--read-file`, a LOOKUP and a READ through a Write chunk.

use super::*;

/// Bytes `--conns` reads on each connection: one Write chunk.
const CONNS_READ: u32 = 64 * 1024;

/// `--conns N`: N connections held open at once, each checked (see [`Cli::conns`]); the
/// failed checks' count.
pub(crate) fn run_conns(
    cli: &Cli,
    cred: OpaqueAuth<'_>,
    device: &<Verbs as Provider>::Device,
    addr: &SocketAddr,
    n: usize,
) -> Result<usize, String> {
    let cfg = ConnConfig {
        send_size: 4096,
        recv_size: 4096,
        credits: 4,
        initial_grant: 4,
        bulk_size: CONNS_READ + 4096,
        slot_bulk_size: CONNS_READ + 4096,
        version: cli.version,
        ..ConnConfig::default()
    };
    let mut checks = Checks { failed: 0 };
    let t = Instant::now();
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        match Client::<Verbs>::connect(device, addr, cfg) {
            Ok(c) => clients.push(c),
            Err(e) => {
                checks.check(&format!("{n} connections open at once"), false, || {
                    format!("connection {i} of {n}: {e}")
                });
                break;
            }
        }
    }
    let connect_ms = t.elapsed().as_secs_f64() * 1e3;
    if clients.len() == n {
        checks.check(
            &format!(
                "{n} connections open at once ({connect_ms:.0} ms, {:.1} ms each, {} KiB registered by each here)",
                connect_ms / n as f64,
                clients[0].registered_bytes() >> 10
            ),
            true,
            String::new,
        );
    }
    let root = mount(cli, cred)?;
    let fh_args = xdr(|w| w.put_opaque_var(&root, 64));
    let want = match (&cli.read_file, &cli.local) {
        (Some(name), Some(l)) => std::fs::read(l.join(name)).ok().map(|mut v| {
            v.truncate(CONNS_READ as usize);
            v
        }),
        _ => None,
    };
    let mut bad: Vec<String> = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let failed = check_conn(cli, c, cred, &root, &fh_args, want.as_deref());
        bad.extend(failed.into_iter().map(|w| format!("connection {i}: {w}")));
    }
    let what = if cli.read_file.is_some() {
        "NULL, GETATTR, LOOKUP and a 64 KiB READ through a Write chunk"
    } else {
        "NULL and GETATTR"
    };
    let served = clients.len()
        - bad
            .iter()
            .map(|b| b.split(':').next())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
    checks.check(
        &format!(
            "{served} of {n} connections served ({what}), {:.0} ms in all",
            t.elapsed().as_secs_f64() * 1e3
        ),
        bad.is_empty() && clients.len() == n,
        || bad.iter().take(8).cloned().collect::<Vec<_>>().join("; "),
    );
    for c in &mut clients {
        c.disconnect();
    }
    Ok(checks.failed)
}

/// The checks of one of `--conns`' connections: NULL, GETATTR of the root (`fh_args`), and
/// with `--read-file` a LOOKUP and a READ of [`CONNS_READ`] bytes compared with `want`;
/// what failed, in order.
fn check_conn(
    cli: &Cli,
    c: &mut Client<Verbs>,
    cred: OpaqueAuth<'_>,
    root: &[u8],
    fh_args: &[u8],
    want: Option<&[u8]>,
) -> Vec<String> {
    let mut bad = Vec::new();
    let mut why = |w: String| bad.push(w);
    match nfs(c, CallArgs::new(NFS, V3, 0, &[], 0), |r| r.is_success()) {
        Ok(true) => {}
        Ok(false) => why("NULL not SUCCESS".into()),
        Err(e) => why(format!("NULL: {e}")),
    }
    let mut a = CallArgs::new(NFS, V3, GETATTR, fh_args, 256);
    a.cred = cred;
    match nfs(c, a, |r| {
        let (s, mut x) = status(r.results);
        (s, x.u32().unwrap_or(0))
    }) {
        Ok((0, 2)) => {}
        Ok(other) => why(format!("GETATTR of the root: {other:?}")),
        Err(e) => why(format!("GETATTR: {e}")),
    }
    let Some(name) = &cli.read_file else {
        return bad;
    };
    let fh = match lookup(c, cred, root, name) {
        Ok(Some(fh)) => fh,
        Ok(None) => {
            why(format!("LOOKUP {name}: not found"));
            return bad;
        }
        Err(e) => {
            why(format!("LOOKUP {name}: {e}"));
            return bad;
        }
    };
    let args = xdr(|w| {
        w.put_opaque_var(&fh, 64)?;
        w.put_u64(0)?;
        w.put_u32(CONNS_READ)
    });
    let mut a = CallArgs::new(NFS, V3, READ, &args, 256);
    a.cred = cred;
    let chunk = [CONNS_READ];
    a.bulk_results = &chunk;
    match nfs(c, a, |r| {
        let (s, _) = status(r.results);
        (s, r.bulk().first().map(|b| b.to_vec()))
    }) {
        Ok((0, Some(got))) if want == Some(&got[..]) => {}
        Ok((s, got)) => why(format!(
            "READ of {name}: status {s}, {} bytes{}",
            got.map_or(0, |g| g.len()),
            if want.is_none() {
                " (no --local copy to compare)"
            } else {
                ", not equal"
            }
        )),
        Err(e) => why(format!("READ of {name}: {e}")),
    }
    bad
}
