//! Reverse-direction RPC under load, shared by the version 1 (RFC 8167) and version 2
//! ([V2] §3.2) tests.

use std::time::Duration;

use rpcrdma_engine::conn::{ConnConfig, Version, Wire};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::loopback::soft_server;
use rpcrdma_engine::requester::{CallArgs, Client};
use rpcrdma_engine::responder::ReverseCallError;

use super::*;

/// Reverse-direction Calls (RFC 8167 on version 1, [V2] §3.2 on version 2) interleaved with forward Calls under load: the
/// server calls its client (the built-in program's ECHO, served from the client's table)
/// while the client keeps all 16 of its forward credits in use; every reverse result is checked,
/// neither direction overruns its credits, and the server never has more reverse Calls
/// out than the client granted.
pub fn under_load(server: Version, client: Version, wire: Wire) {
    let rev = 4;
    let (mut srv, addr) = soft_server(
        dispatch(),
        ConnConfig {
            reverse_credits: rev,
            credits: 16,
            initial_grant: 16,
            version: server,
            ..ConnConfig::default()
        },
    )
    .unwrap();
    let ccfg = ConnConfig {
        reverse_credits: rev,
        credits: 16,
        version: client,
        ..ConnConfig::default()
    };
    let a = addr.clone();
    let client = std::thread::spawn(move || {
        let device = <Soft as rpcrdma_engine::fabric::Provider>::open_device(None).unwrap();
        let mut c = Client::<Soft>::connect_serving(&device, &a, ccfg, dispatch()).unwrap();
        assert_eq!(c.negotiation().wire(), wire);
        // 4000 forward Calls, 16 in flight (every credit): NULL and a 200-byte ECHO in turn.
        let payload = opaque(&pattern(3, 200));
        let c_stats = c.stats();
        let (mut sent, mut done) = (0u64, 0u64);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while done < 4000 {
            while sent < 4000 && sent - done < 16 {
                let a = if sent % 2 == 0 {
                    CallArgs::new(PROG, VERS, NULL, &[], 0)
                } else {
                    CallArgs::new(PROG, VERS, ECHO, &payload, 256)
                };
                match c.submit(&a, sent) {
                    Ok(_) => sent += 1,
                    Err(_) => break,
                }
            }
            c.poll_completions(|x| {
                let r = x
                    .result
                    .unwrap_or_else(|e| panic!("forward reply: {e:?} {:?}", c_stats.snapshot()));
                if x.tag % 2 == 1 {
                    assert_eq!(r.results, &payload[..]);
                }
                done += 1;
            });
            assert!(
                std::time::Instant::now() < deadline,
                "forward calls stalled"
            );
        }
        // Keep serving reverse Calls until the server says it is done (it disconnects).
        while !c.is_dead() && std::time::Instant::now() < deadline {
            c.poll_completions(|_| {});
        }
        c.snapshot()
    });
    let mut s = srv.accept(Duration::from_secs(5)).unwrap();
    let args: Vec<Vec<u8>> = (0..16)
        .map(|i| opaque(&pattern(i, 64 + 4 * i as usize)))
        .collect();
    let (mut sent, mut done, mut most) = (0u64, 0u64, 0u32);
    // A hang detector only: generous for a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done < 2000 {
        s.poll();
        if sent < 2000 {
            match s.call_reverse(PROG, VERS, ECHO, &args[(sent % 16) as usize], sent) {
                Ok(_) => sent += 1,
                Err(ReverseCallError::WouldBlock) | Err(ReverseCallError::VersionUndecided) => {}
                Err(e) => panic!("reverse call: {e} {:?}", s.snapshot()),
            }
        }
        most = most.max(s.reverse_in_flight());
        assert!(s.reverse_in_flight() <= s.reverse_granted().max(1));
        s.take_reverse(|r| {
            let got = r.result.expect("reverse reply");
            assert_eq!(
                got,
                &args[(r.tag % 16) as usize][..],
                "reverse result {}",
                r.tag
            );
            done += 1;
        });
        assert!(
            std::time::Instant::now() < deadline,
            "reverse calls stalled: sent {sent} done {done} in flight {} granted {} server {:?}",
            s.reverse_in_flight(),
            s.reverse_granted(),
            s.snapshot()
        );
    }
    assert_eq!(
        s.reverse_granted(),
        rev,
        "the client's grant arrived with its Replies"
    );
    assert!(
        most <= rev && most > 1,
        "reverse Calls in flight at once: {most}"
    );
    // The client finishes its forward Calls while we keep polling.
    let t_end = std::time::Instant::now() + Duration::from_secs(60);
    // Every forward Call answered (and, on version 2, the client's RDMA2_CONNPROP).
    let answered = |x: &rpcrdma_engine::stats::Snapshot| x.rpcs >= 4000 + x.connprops_sent;
    while !answered(&s.snapshot()) && std::time::Instant::now() < t_end {
        s.poll();
    }
    s.disconnect();
    while !client.is_finished() {
        s.poll();
    }
    let cs = client.join().unwrap();
    let ss = s.snapshot();
    assert_eq!(ss.credit_overruns, 0);
    assert_eq!((ss.reverse_calls, ss.reverse_replies), (2000, 2000));
    assert_eq!((cs.reverse_calls, cs.reverse_replies), (2000, 2000));
    // Every answer counts, the RDMA2_CONNPROP answering a version 2 client's included.
    assert_eq!(ss.rpcs, 4000 + ss.connprops_sent);
    assert_eq!(ss.discards + cs.discards, 0);
}
