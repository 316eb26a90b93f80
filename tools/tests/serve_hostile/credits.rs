//! More Calls than credits, and requesters that vanish in the middle of an RPC.

use std::thread;
use std::time::Instant;

use rpcrdma_engine::fabric::{MemoryRegion, QueuePair, WcStatus};
use rpcrdma_engine::program::{READ, WRITE};
use rpcrdma_proto::header::{Chunks, HeaderView, ReadSegment, Segment};

use crate::serve_common::msg::*;
use crate::serve_common::serial;

use super::{raw_connect, Server, DATA_LEN, WAIT};

/// More Calls than credits granted: served while the server's receives last, and beyond
/// them the requester's own Send fails (RNR) and only that connection ends. Requesters that
/// vanish mid-RPC (dropped, disconnected, connection cut) with Short Calls, Calls waiting
/// for RDMA Reads or Writes, or many Calls in flight: no reply, no harm.
#[test]
fn credit_overruns_and_peers_gone_mid_rpc() {
    let _serial = serial();
    // Each connection's own receives: on the shared receive queue (serve's default where
    // the device has one) a connection past its grant is ended instead
    // (engine/tests/rpc_srq.rs), since its Calls would take receives the others need.
    let mut srv = Server::start("credits", &["--no-srq"]);
    let addr = srv.soft_addr();
    let mut good = raw_connect(&addr, 8);

    for round in 0..3u32 {
        let mut c = raw_connect(&addr, 512);
        let grant = HeaderView::parse(&c.null_ok(1, "credit overrun"))
            .unwrap()
            .credit();
        let n = 300u32;
        let mut statuses = Vec::new();
        for x in 0..n {
            let id = c.post(&null_call(1000 + x));
            statuses.push(match id {
                Ok(id) => c.wait_send(id, "credit overrun"),
                Err(_) => WcStatus::WrFlushErr,
            });
        }
        let first_bad = statuses.iter().position(|s| *s != WcStatus::Success);
        let mut replies = Vec::new();
        match first_bad {
            None => {
                // The server kept up: every Call beyond the grant was still served.
                for x in 0..n {
                    let m = c.expect(&format!("round {round}: reply {x}"));
                    let r = rpc_reply(&m);
                    assert!(r.is_success());
                    replies.push(r.xid);
                }
                replies.sort();
                assert_eq!(replies, (1000..1000 + n).collect::<Vec<_>>());
                c.null_ok(5000, "credit overrun");
            }
            Some(i) => {
                assert!(
                    i as u32 >= grant,
                    "round {round}: a Send within the grant failed"
                );
                assert_eq!(statuses[i], WcStatus::RnrRetryExcErr, "round {round}: RNR");
                // Whatever was answered before the end is a successful NULL it sent.
                let deadline = Instant::now() + WAIT;
                while c.recv_errors.is_empty() {
                    c.poll();
                    assert!(Instant::now() < deadline, "round {round}: still up");
                    thread::yield_now();
                }
                for m in c.received.drain(..) {
                    let r = rpc_reply(&m);
                    assert!(r.is_success() && (1000..1000 + n).contains(&r.xid));
                }
            }
        }
        srv.assert_alive("credit overrun");
        good.null_ok(100 + round, "credit overrun");
    }

    // Gone mid-RPC.
    for how in 0..3 {
        for what in 0..5 {
            let mut c = raw_connect(&addr, 16);
            c.null_ok(1, "gone mid-RPC");
            let d = c.data_at(0);
            c.data.write_at(0, &[7; 4096]);
            let rd = [ReadSegment::new(WRITE_DATA_POS, d.rkey, 4000, d.addr)];
            let big = [ReadSegment::new(
                WRITE_DATA_POS,
                d.rkey,
                DATA_LEN as u32,
                d.addr,
            )];
            let ws = [Segment::new(d.rkey, 65536, d.addr)];
            let calls: Vec<Vec<u8>> = match what {
                0 => vec![null_call(10)],
                1 => vec![msg_call(
                    10,
                    Chunks {
                        reads: &rd,
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(3, 4000),
                )],
                2 => (0..12).map(|x| null_call(10 + x)).collect(),
                3 => vec![msg_call(
                    10,
                    Chunks {
                        writes: &[&ws],
                        ..Chunks::NONE
                    },
                    READ,
                    &words(65536, 2),
                )],
                _ => vec![msg_call(
                    10,
                    Chunks {
                        reads: &big,
                        ..Chunks::NONE
                    },
                    WRITE,
                    &words(3, DATA_LEN as u32),
                )],
            };
            for m in &calls {
                assert_eq!(c.send(m, "gone mid-RPC"), WcStatus::Success);
            }
            match how {
                0 => drop(c),
                1 => c.qp.disconnect(),
                _ => c.qp.faults().drop_connection(),
            }
            srv.assert_alive(&format!("gone mid-RPC: how {how} what {what}"));
            good.null_ok(200 + 10 * how + what, "gone mid-RPC");
        }
    }
    drop(good);
    let counters = srv.finish("credits");
    assert!(
        counters["errors"]["conn_lost"].as_u64().unwrap() >= 15,
        "{counters}"
    );
}
