//! `rpcrdma call`: one connection, verified calls of the built-in program (or any
//! program's procedure), one JSON line each.

use super::*;

/// Runs `rpcrdma call`.
pub fn call(args: &CallArgs) -> ExitCode {
    let addr = args
        .connect
        .clone()
        .unwrap_or_else(|| args.conn.default_addr());
    on_provider!(
        args.conn.provider,
        args.conn.device.as_deref(),
        |P, open| {
            match open() {
                Ok(d) => call_on::<P>(&d, &addr, args),
                Err(e) => fail("call", e),
            }
        }
    )
}

fn call_on<P: Provider>(device: &P::Device, addr: &str, args: &CallArgs) -> ExitCode
where
    P::Addr: FromStr,
    <P::Addr as FromStr>::Err: std::fmt::Display,
{
    let addr = match parse_addr::<P>(addr) {
        Ok(a) => a,
        Err(e) => return fail("call", e),
    };
    let mut client = match connect_one::<P>(device, &addr, args.conn.config()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}", connect_failure(&addr, &e));
            return ExitCode::FAILURE;
        }
    };
    if args.generic.prog.is_some() {
        let timeout = Duration::from_millis(args.timeout_ms);
        let code = crate::call_generic::run(&mut client, &args.generic, args.count, timeout);
        println!("{}", client_summary(&client));
        client.disconnect();
        return code;
    }
    let prepared = Prepared::new(args.workload.0);
    let mut call = prepared.call(Duration::from_millis(args.timeout_ms));
    let negotiation = client.negotiation();
    prepared.fit_to(
        &mut call,
        negotiation.reply_threshold(),
        negotiation.wire().extra(),
    );
    let mut ok = true;
    for i in 0..args.count.max(1) {
        let t = Instant::now();
        let verdict = client.call(&call, |r| prepared.verify(&r).map_err(|e| e.to_string()));
        let ns = t.elapsed().as_nanos() as u64;
        // The server's time on READ's or WRITE's data, which `latency_ns` includes.
        let (status, error, work) = match verdict {
            Ok(Ok(work)) => ("ok", None, work),
            Ok(Err(e)) => ("bad_reply", Some(e), 0),
            Err(e) => ("rpc_error", Some(e.to_string()), 0),
        };
        ok &= status == "ok";
        println!(
            "{}",
            json!({
                "call": i, "provider": P::NAME, "proc": args.workload.0.name(),
                "arg_size": args.workload.0.arg_size(), "res_size": args.workload.0.res_size(),
                "status": status, "error": error, "latency_ns": ns,
                "server_work_ns": work,
            })
        );
    }
    println!("{}", client_summary(&client));
    client.disconnect();
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The last line of `call`: the client's counters and the RPC-over-RDMA version its
/// connection speaks.
fn client_summary<P: Provider>(client: &Client<P>) -> serde_json::Value {
    json!({
        "client": snapshot_json(&client.snapshot()),
        "rpcrdma_version": client.negotiation().wire().number(),
    })
}
