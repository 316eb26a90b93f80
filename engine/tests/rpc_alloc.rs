//! Zero heap allocations per RPC in steady state: null RPCs, Read-chunk and Write-chunk
//! RPCs with per-RPC memory windows, Long Calls with a Reply chunk, cancelled RPCs and
//! deferred answers, both ends driven in this thread.

mod common;
mod counting;

use common::*;
use std::sync::{Arc, Mutex};

use rpcrdma_engine::dispatch::{Deferred, Dispatch, Outcome, ProcSpec};
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::requester::{CallArgs, RpcError};

/// A NULL procedure that defers its answer, leaving its ticket here.
const LATER: u32 = 0x2000_0778;
static TICKET: Mutex<Option<Deferred>> = Mutex::new(None);

#[test]
fn steady_state_rpcs_do_not_allocate() {
    let mut d = Dispatch::new();
    rpcrdma_engine::program::register(&mut d);
    d.register(LATER, VERS, NULL, ProcSpec::plain(8), |_, resp| {
        *TICKET.lock().unwrap() = Some(resp.deferred());
        Outcome::Deferred
    });
    let (mut c, mut s) = soft_pair(Arc::new(d), config(), config()).unwrap();
    let later = CallArgs::new(LATER, VERS, NULL, &[], 8);
    let data = pattern(3, 20_000);
    let seed = 3u32.to_be_bytes();
    let read_args = [20_000u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let mut write = CallArgs::new(PROG, VERS, WRITE, &seed, 8);
    write.bulk_arg = Some(&data);
    let write_in_place = CallArgs::new(PROG, VERS, WRITE, &seed, 8);
    let mut read = CallArgs::new(PROG, VERS, READ, &read_args, 4);
    read.bulk_results = &[20_000];
    // Larger than both inline thresholds: a Position-Zero Long Call and a Long Reply.
    let big = opaque(&pattern(5, 6000));
    let echo = CallArgs::new(PROG, VERS, ECHO, &big, big.len() as u32);
    let round = |c: &mut _, s: &mut _| {
        // 16 null RPCs in flight, then one of each chunked form.
        let mut done = 0;
        for t in 0..16 {
            while c_submit(c, &null, t).is_err() {
                s_poll(s);
                done += c_poll(c);
            }
        }
        while done < 16 {
            s_poll(s);
            done += c_poll(c);
        }
        assert!(call(c, s, &write, |comp| comp.result.unwrap().results[3] == 1));
        // The same WRITE with its data written in place (zero copy).
        c.submit_in_place(&write_in_place, 97, 20_000, |d| fill_pattern(3, d))
            .unwrap();
        assert!(drive(c, s, |comp| comp.result.unwrap().results[3] == 1));
        assert!(call(c, s, &read, |comp| comp.result.unwrap().bulk()[0]
            .len()
            == 20_000));
        assert!(call(c, s, &echo, |comp| comp.result.unwrap().results == big));
        // A deferred answer, completed with two words of results.
        c_submit(c, &later, 98).unwrap();
        let mut polls = 0u32;
        let ticket = loop {
            s_poll(s);
            if let Some(t) = TICKET.lock().unwrap().take() {
                break t;
            }
            polls += 1;
            assert!(
                polls < 10_000_000,
                "the deferred Call never reached its handler"
            );
        };
        s.complete(ticket, |_, resp| {
            resp.write_results(&[0, 0, 0, 1, 0, 0, 0, 2]);
            Outcome::Success
        })
        .unwrap();
        let mut answered = 0;
        while answered == 0 {
            polls += 1;
            assert!(polls < 10_000_000, "no answer to the deferred Call");
            c.poll_completions(|comp| {
                assert_eq!(comp.result.unwrap().results, [0, 0, 0, 1, 0, 0, 0, 2]);
                answered += 1;
            });
        }
        // A cancelled RPC completes at the next poll; its late reply frees the credit.
        let xid = c_submit(c, &null, 99).unwrap();
        c.cancel(xid).unwrap();
        let mut cancelled = 0;
        c.poll_completions(|comp| {
            assert_eq!(comp.result.err(), Some(RpcError::Cancelled));
            cancelled += 1;
        });
        assert_eq!(cancelled, 1);
        while c.in_flight() > 0 {
            s_poll(s);
            assert_eq!(c_poll(c), 0, "a late reply completes nothing");
        }
    };
    for _ in 0..50 {
        round(&mut c, &mut s);
    }
    let ((), allocs) = counting::counted(|| {
        for _ in 0..500 {
            round(&mut c, &mut s);
        }
    });
    assert_eq!(allocs, 0, "allocations per RPC");
    let st = c.snapshot();
    assert!(st.registrations > 0 && st.remote_invalidations > 0);
    assert_eq!(
        (st.long_calls, st.long_replies, st.cancels),
        (550, 550, 550)
    );
    counting::assert_counter_counts();
}

type C = rpcrdma_engine::requester::Client<rpcrdma_engine::fabric::soft::Soft>;
type S = rpcrdma_engine::responder::ServerConn<rpcrdma_engine::fabric::soft::Soft>;

fn c_submit(
    c: &mut C,
    a: &CallArgs<'_>,
    t: u64,
) -> Result<u32, rpcrdma_engine::requester::SubmitError> {
    c.submit(a, t)
}
fn c_poll(c: &mut C) -> usize {
    let mut n = 0;
    c.poll_completions(|comp| {
        assert!(comp.result.is_ok());
        n += 1;
    });
    n
}
fn s_poll(s: &mut S) {
    s.poll();
}
