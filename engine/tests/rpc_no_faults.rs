//! No page faults in steady state on the soft fabric: queue memory is faulted in when a
//! queue is made and when a peer's is mapped, as a device pins it, so a completion queue's
//! producer reaching a page of the ring for the first time costs no fault in the middle of
//! a Send (in either process mapping it).

mod common;

use common::*;
use std::sync::Arc;

use rpcrdma_engine::dispatch::Dispatch;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::requester::CallArgs;

/// Minor page faults taken by this thread so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given, which lives on this stack.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage; RUSAGE_THREAD asks for this thread's counts.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
    u.ru_minflt
}

#[test]
fn null_rpcs_take_no_page_faults_once_every_buffer_was_used() {
    let mut d = Dispatch::new();
    rpcrdma_engine::program::register(&mut d);
    let (mut c, mut s) = soft_pair(Arc::new(d), config(), config()).unwrap();
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    // Every send buffer, receive buffer and receive ring slot has been used once after a
    // few hundred RPCs one at a time; the completion queues (a thousand entries and more,
    // 64 bytes each) are still on their first pages.
    for _ in 0..400 {
        assert!(call(&mut c, &mut s, &null, |comp| comp.result.is_ok()));
    }
    let before = minor_faults();
    // Several times round both completion queues.
    for _ in 0..5000 {
        assert!(call(&mut c, &mut s, &null, |comp| comp.result.is_ok()));
    }
    let faults = minor_faults() - before;
    // Without the faulting-in, 56 (both completion queues' later pages, each in both of
    // its mappings). A stray one from the kernel's own page moves (compaction, migration)
    // is tolerated: seen once in a debug build, never again in many runs.
    assert!(faults <= 4, "{faults} page faults in 5,000 null RPCs");
}
