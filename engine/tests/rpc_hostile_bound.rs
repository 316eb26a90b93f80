//! Alone in its binary (it counts the process's file descriptors and threads): bad
//! connections served by a worker are torn down and dropped, their resources return, the
//! worker keeps serving a well-behaved connection, and nothing grows with their number.

mod common;
mod raw;

use std::time::{Duration, Instant};

use common::*;
use raw::*;
use rpcrdma_engine::fabric::soft::{Soft, SoftAddr};
use rpcrdma_engine::fabric::{MemoryRegion, WcStatus};
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::requester::CallArgs;
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::worker::{WorkerConfig, Workers};
use rpcrdma_proto::header::{Chunks, ReadSegment, Segment};

fn raw_connect(srv: &mut Server<Soft>, addr: &SoftAddr) -> (RawClient, ServerConn<Soft>) {
    let a = addr.clone();
    let t = std::thread::spawn(move || RawClient::connect(&a, 8));
    let conn = srv.accept(Duration::from_secs(5)).expect("accept");
    (t.join().expect("raw connect"), conn)
}

fn args(a: u32, b: u32) -> Vec<u8> {
    [a.to_be_bytes(), b.to_be_bytes()].concat()
}

/// One bad connection on the worker: a NULL is served, then a Call naming a bogus rkey
/// (kind `i % 4`) ends the connection; the raw peer sees its receives flushed.
fn one_bad(
    srv: &mut Server<Soft>,
    addr: &SoftAddr,
    workers: &mut Workers<ServerConn<Soft>>,
    i: u32,
) {
    let (mut c, conn) = raw_connect(srv, addr);
    workers.assign(conn).unwrap();
    assert_eq!(c.send(&null_call(1)), WcStatus::Success);
    assert!(rpc_reply(&c.expect_alone()).is_success());
    let d = c.ends.data_at(0);
    c.ends.data.write_at(0, &[0; 64]);
    let m = match i % 4 {
        0 => {
            let rd = [ReadSegment::new(48, d.rkey ^ 0x100, 64, d.addr)];
            msg_call(
                2,
                Chunks {
                    reads: &rd,
                    ..Chunks::NONE
                },
                WRITE,
                &args(1, 64),
            )
        }
        1 => {
            let rd = [ReadSegment::new(48, d.rkey, 64, d.addr + (DATA_LEN as u64))];
            msg_call(
                2,
                Chunks {
                    reads: &rd,
                    ..Chunks::NONE
                },
                WRITE,
                &args(1, 64),
            )
        }
        2 => {
            let ws = [Segment::new(0x00ab_cd00, 4096, d.addr)];
            msg_call(
                2,
                Chunks {
                    writes: &[&ws],
                    ..Chunks::NONE
                },
                READ,
                &args(4096, 1),
            )
        }
        _ => {
            // Gone mid-RPC: the Call needs an RDMA Read, the peer disconnects at once.
            let rd = [ReadSegment::new(48, d.rkey, 64, d.addr)];
            msg_call(
                2,
                Chunks {
                    reads: &rd,
                    ..Chunks::NONE
                },
                WRITE,
                &args(1, 64),
            )
        }
    };
    assert_eq!(c.send(&m), WcStatus::Success);
    if i % 4 == 3 {
        drop(c);
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.ends.recv_errors.is_empty() {
        c.ends.poll();
        assert!(
            Instant::now() < deadline,
            "bad connection {i} not torn down"
        );
        std::thread::yield_now();
    }
    assert!(c.ends.received.is_empty(), "no reply to a failed Call");
}

fn wait_dead(workers: &Workers<ServerConn<Soft>>, dead: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = &workers.stats()[0];
        if st.conns_dead >= dead {
            assert_eq!(st.conns_dead, dead);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {dead} dropped",
            st.conns_dead
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn bad_connections_return_their_resources_and_the_worker_keeps_serving() {
    let (mut srv, addr) = soft_server(dispatch(), config()).unwrap();
    let mut workers = Workers::<ServerConn<Soft>>::start(&[WorkerConfig {
        core: None,
        max_conns: 4,
    }])
    .unwrap();
    let (mut good, good_conn) = connect_to(&mut srv, &addr, config()).unwrap();
    workers.assign(good_conn).unwrap();
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let read_args = args(3000, 5);
    let mut read = CallArgs::new(PROG, VERS, READ, &read_args, 4);
    read.bulk_results = &[3000];
    // Warm up (first-use allocations, lazily created state), then take the baseline.
    for i in 0..4 {
        one_bad(&mut srv, &addr, &mut workers, i);
    }
    wait_dead(&workers, 4);
    let (fds0, threads0) = (open_fds(), threads());
    let n = 24;
    for i in 0..n {
        one_bad(&mut srv, &addr, &mut workers, i);
        // The well-behaved connection on the same worker is served throughout.
        let ok = good
            .call(&read, |r| r.unwrap().bulk()[0] == pattern(5, 3000))
            .unwrap();
        assert!(ok, "good connection after bad connection {i}");
        assert_eq!(good.call(&null, |r| r.unwrap().is_success()), Ok(true));
    }
    wait_dead(&workers, 4 + u64::from(n));
    let st = &workers.stats()[0];
    assert_eq!(st.conns, 1, "only the good connection is left");
    assert_eq!(st.rpc.conn_lost, 4 + u64::from(n));
    // Every bad connection's file descriptors (arenas, queues, sockets) and watchdog
    // thread are gone.
    assert_eq!(open_fds(), fds0, "file descriptors");
    assert_eq!(threads(), threads0, "threads");
    assert_eq!(good.snapshot().conn_lost, 0);
    workers.shutdown(Duration::from_secs(1)).unwrap();
}
