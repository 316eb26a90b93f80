//! The soft fabric's hot path allocates nothing: after warming up, a steady stream of
//! `post_recv`, `post_send` (Sends, RDMA Writes and Reads, signaled and not) and `poll` on
//! both ends goes through the global allocator zero times.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rpcrdma_engine::fabric::soft::{self, Soft};
use rpcrdma_engine::fabric::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, Provider, QpCaps, QpInit,
    QueuePair, RecvWr, SendWr, Wc,
};

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
fn hot_path_does_not_allocate() {
    let dev = Soft::open_device(None).unwrap();
    let (cqa, cqb) = (dev.create_cq(256).unwrap(), dev.create_cq(256).unwrap());
    let (pda, pdb) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
        ..QpCaps::default()
    };
    let (mut qa, mut qb) = soft::pair(
        &pda,
        QpInit::new(&cqa, &cqa, caps),
        &pdb,
        QpInit::new(&cqb, &cqb, caps),
    )
    .unwrap();
    let (mut cqa, mut cqb) = (cqa, cqb);
    let ma = pda.alloc_region(1 << 16, Access::LOCAL_WRITE).unwrap();
    let mb = pdb
        .alloc_region(
            1 << 16,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let mut wc = [Wc::default(); 32];
    for i in 0..16u64 {
        qb.post_recv(&RecvWr::new(i, &[mb.sge(i as usize * 1024, 1024)]))
            .unwrap();
    }

    let mut round = |qa: &mut soft::SoftQp, qb: &mut soft::SoftQp, i: u64| {
        let send = [ma.sge(0, 256)];
        let signaled = i % 8 == 7;
        let mut wr = SendWr::send(i, &send);
        if signaled {
            wr = wr.signaled();
        }
        qa.post_send(&wr).unwrap();
        let wsge = [ma.sge(512, 128)];
        let write = SendWr::write(i, &wsge, mb.remote(32768));
        qa.post_send(&write).unwrap();
        let rsge = [ma.sge(1024, 128)];
        let read = SendWr::read(i, &rsge, mb.remote(32768));
        qa.post_send(&if signaled { read.signaled() } else { read })
            .unwrap();
        let mut got = 0;
        while got == 0 {
            let n = cqb.poll(&mut wc).unwrap();
            for c in &wc[..n] {
                assert!(c.status.is_ok(), "{c:?}");
                qb.post_recv(&RecvWr::new(
                    c.wr_id,
                    &[mb.sge(c.wr_id as usize * 1024, 1024)],
                ))
                .unwrap();
                got += 1;
            }
        }
        if signaled {
            let mut seen = 0;
            while seen < 2 {
                seen += cqa.poll(&mut wc).unwrap();
            }
        }
    };

    for i in 0..1000 {
        round(&mut qa, &mut qb, i);
    }
    COUNTING.store(true, Ordering::SeqCst);
    for i in 1000..21000 {
        round(&mut qa, &mut qb, i);
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        0,
        "allocations on the hot path"
    );
    // The counter does count.
    COUNTING.store(true, Ordering::SeqCst);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(
        std::hint::black_box(10),
    )));
    COUNTING.store(false, Ordering::SeqCst);
    assert!(ALLOCS.load(Ordering::SeqCst) >= 1);
}
