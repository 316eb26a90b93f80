//! Zero heap allocations per RPC in steady state: null RPCs, Read-chunk and Write-chunk
//! RPCs with per-RPC memory windows, both ends driven in this thread.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::requester::CallArgs;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_rpcs_do_not_allocate() {
    let (mut c, mut s) = soft_pair(dispatch(), config(), config()).unwrap();
    let data = pattern(3, 20_000);
    let seed = 3u32.to_be_bytes();
    let read_args = [20_000u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    let mut write = CallArgs::new(PROG, VERS, WRITE, &seed, 8);
    write.bulk_arg = Some(&data);
    let mut read = CallArgs::new(PROG, VERS, READ, &read_args, 4);
    read.bulk_results = &[20_000];
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
        assert!(call(c, s, &read, |comp| comp.result.unwrap().bulk()[0]
            .len()
            == 20_000));
    };
    for _ in 0..50 {
        round(&mut c, &mut s);
    }
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..500 {
        round(&mut c, &mut s);
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0, "allocations per RPC");
    assert!(c.snapshot().registrations > 0 && c.snapshot().remote_invalidations > 0);
    // The counter does count.
    COUNTING.store(true, Ordering::SeqCst);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(
        std::hint::black_box(10),
    )));
    COUNTING.store(false, Ordering::SeqCst);
    assert!(ALLOCS.load(Ordering::SeqCst) >= 1);
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
