//! `rpcrdma serve`: a listener, pinned workers (calling their clients back with
//! `--reverse`), graceful stop, the workers' counters.

use super::*;

/// Runs `rpcrdma serve`.
pub fn serve(args: &ServeArgs) -> ExitCode {
    // Before the device and the buffers: only the program and its libraries are mapped.
    if let Err(e) = rpcrdma_engine::prefault::prefault_mappings() {
        eprintln!("serve: the first connection and Calls will take page faults: {e}");
    }
    let addr = args
        .listen
        .clone()
        .unwrap_or_else(|| args.conn.default_addr());
    on_provider!(
        args.conn.provider,
        args.conn.device.as_deref(),
        |P, open| {
            match open() {
                Ok(d) => serve_on::<P>(d, &addr, args),
                Err(e) => fail("serve", e),
            }
        }
    )
}

/// `rpcrdma serve` on provider `P`: the server listening at `addr` on `device`, its
/// workers started, the service run until stopped, then the workers' counters printed.
fn serve_on<P: Provider>(device: P::Device, addr: &str, args: &ServeArgs) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
    ServerConn<P>: Send,
{
    let addr = match parse_addr::<P>(addr) {
        Ok(a) => a,
        Err(e) => return fail("serve", e),
    };
    let dispatch = if args.count_executions {
        let mut d = rpcrdma_engine::dispatch::Dispatch::new();
        program::register_counted(&mut d);
        Arc::new(d)
    } else {
        program::dispatch()
    };
    let n_workers = args.workers.max(1);
    let config = match args
        .conn
        .server_config::<P>(&device, Version::Auto, n_workers)
    {
        Ok(c) => c,
        Err(e) => return fail("serve", e),
    };
    let mut server = match Server::<P>::listen(device, &addr, dispatch, config) {
        Ok(s) => s,
        Err(e) => return fail(&format!("listen on {addr}"), e),
    };
    let configs: Vec<WorkerConfig> = (0..n_workers)
        .map(|i| WorkerConfig {
            core: args.worker_core(i),
            max_conns: args.conns_per_worker(n_workers),
        })
        .collect();
    let mut workers = match Workers::<Callbacks<P>>::start(&configs) {
        Ok(w) => w,
        Err(e) => return fail("starting workers", e),
    };
    if args.wait_after_us > 0 {
        workers.set_wait(Some(Duration::from_micros(args.wait_after_us)));
    }
    // Refused at the connection manager past this, never accepted and then closed.
    let max_conns = args.max_conns.map_or(workers.capacity() as u64, u64::from);
    eprintln!(
        "rpcrdma serve: program {} v{} on {} ({}), {} worker(s), at most {} connections, \
         {}, {} MiB of shared bulk buffers at most",
        program::PROG,
        program::VERS,
        addr,
        P::NAME,
        workers.len(),
        max_conns,
        config.receives_summary(),
        config.share_config().bulk_limit >> 20,
    );
    // SIGINT and SIGTERM end the service gracefully: Calls in process finish, the
    // connections close, the counters are printed.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("rpcrdma serve: cannot handle signal {sig}: {e}");
        }
    }
    // Reverse results that were wrong or failed, over every connection (`--reverse`).
    let bad_reverse = Arc::new(AtomicU64::new(0));
    let refused = accept_until_stopped(
        &mut server,
        &mut workers,
        args,
        max_conns,
        &stop,
        &bad_reverse,
    );
    let stats = workers.stats();
    if let Err(e) = workers.shutdown(Duration::from_secs(2)) {
        return fail("stopping workers", e);
    }
    let mut out = workers_json(&stats, refused);
    out["registered"] = registered_json(&server.share_stats());
    let bad = bad_reverse.load(Ordering::Relaxed);
    if args.conn.reverse > 0 {
        out["reverse_bad"] = json!(bad);
    }
    println!("{out}");
    if bad > 0 {
        eprintln!("rpcrdma serve: {bad} reverse-direction results were wrong or failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The service: connections accepted (up to `max_conns` live; those past it refused at the
/// connection manager) and handed to the workers, and the workers' counters printed every
/// `--stats-every` seconds, until `stop` is set or `--seconds` have passed; the connections
/// refused.
fn accept_until_stopped<P: Provider>(
    server: &mut Server<P>,
    workers: &mut Workers<Callbacks<P>>,
    args: &ServeArgs,
    max_conns: u64,
    stop: &AtomicBool,
    bad_reverse: &Arc<AtomicU64>,
) -> u64
where
    ServerConn<P>: Send,
{
    // Connections refused because `max_conns` were live.
    let mut refused: u64 = 0;
    let start = Instant::now();
    let mut next_stats = start;
    loop {
        if stop.load(Ordering::Relaxed)
            || (args.seconds > 0 && start.elapsed() >= Duration::from_secs(args.seconds))
        {
            break;
        }
        // The live count when the request came, for the refusal's log line.
        let mut live = 0;
        let admit = |_| {
            live = workers.live_conns();
            live < max_conns
        };
        match server.accept_if(Duration::from_millis(200), admit) {
            Ok(conn) => {
                let n = conn.negotiation();
                eprintln!(
                    "rpcrdma serve: accepted a connection ({n}) in {:.1} ms, {}; {}{}",
                    conn.setup_time().as_secs_f64() * 1e3,
                    conn.memory(),
                    server.share_stats(),
                    conn.confirm_note()
                );
                let conn = Callbacks::new(conn, args.conn.reverse, Arc::clone(bad_reverse));
                if let Err(e) = workers.assign(conn) {
                    eprintln!("rpcrdma serve: connection refused: {e}");
                }
            }
            Err(ConnError::Connect(ConnectError::Timeout)) => {}
            Err(ConnError::Refused { peer }) => {
                refused += 1;
                eprintln!(
                    "rpcrdma serve: refused a connection from {}: {live} connections already \
                     (--max-conns {max_conns})",
                    peer_name(peer, P::NAME)
                );
            }
            Err(e) => eprintln!("rpcrdma serve: a connection attempt failed: {e}"),
        }
        if args.stats_every > 0 && Instant::now() >= next_stats {
            next_stats = Instant::now() + Duration::from_secs(args.stats_every);
            let mut j = workers_json(&workers.stats(), refused);
            j["registered"] = registered_json(&server.share_stats());
            eprintln!("{j}");
        }
    }
    refused
}

/// The registered memory of the server's connections, as JSON.
fn registered_json(s: &ShareStats) -> Value {
    json!({
        "conns": s.conns,
        "total_bytes": s.total_bytes(),
        "per_conn_bytes": s.per_conn_bytes(),
        "held_per_conn_bytes": s.held_per_conn_bytes(),
        "conns_own_bytes": s.conn_bytes,
        "bulk_bytes": s.bulk_bytes,
        "reply_ring_bytes": s.reply_bytes,
        "srq_bytes": s.srq_bytes,
        "srq_reserved": s.srq_reserved,
        "bulk_waits": s.waits,
    })
}

/// The counters `serve` prints: each worker's, and the connections refused past
/// `--max-conns`.
fn workers_json(stats: &[WorkerStats], refused: u64) -> Value {
    json!({
        "refused_max_conns": refused,
        "workers": stats.iter().map(|w| json!({
            "core": w.core, "loops": w.loops, "busy_loops": w.busy_loops,
            "waits": w.waits, "wakeups": w.wakeups,
            "conns": w.conns, "conns_adopted": w.conns_adopted, "conns_dead": w.conns_dead,
            "counters": snapshot_json(&w.rpc),
        })).collect::<Vec<_>>(),
    })
}
