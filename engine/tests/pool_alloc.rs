//! The buffer pool allocates nothing once built: a counting global allocator watches
//! steady-state alloc/free on the owner thread and the cross-thread return path.
//!
//! Each thread counts its own allocations, and only while it has switched counting on, so
//! neither the test harness's threads nor the other tests running in parallel disturb the
//! figures.

mod counting;

use counting::counted;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_engine::fabric::soft::{self, Soft};
use rpcrdma_engine::fabric::{
    Access, CompletionQueue, Device, Provider, QpCaps, QpInit, QueuePair, RecvWr, SendWr, Wc,
    WcStatus,
};
use rpcrdma_engine::pool::{Buf, BufferPool, PoolConfig, PoolError};

fn pool(count: u32) -> BufferPool<Soft> {
    let pd = Soft::open_device(None).unwrap().alloc_pd().unwrap();
    BufferPool::new(&pd, PoolConfig::new(2048, count, Access::LOCAL_WRITE)).unwrap()
}

#[test]
fn pool_test_allocator_counts() {
    let (v, n) = counted(|| vec![1u8; 10]);
    assert_eq!((v.len(), n), (10, 1));
}

#[test]
fn pool_owner_steady_state_allocates_nothing() {
    const CAP: usize = 64;
    let pool = pool(CAP as u32);
    let mut held: Vec<Buf<Soft>> = Vec::with_capacity(CAP);
    let ((), n) = counted(|| {
        for round in 0..1_000u32 {
            // Fill, overflow (typed back-pressure), write, drain: free, lease and drop.
            while let Ok(b) = pool.alloc() {
                held.push(b);
            }
            assert!(matches!(pool.alloc(), Err(PoolError::Exhausted { .. })));
            for (i, b) in held.iter_mut().enumerate() {
                b.write_at(0, &round.to_le_bytes());
                let _ = b.sge();
                if i % 2 == 0 {
                    let mut out = [0; 4];
                    b.read_at(0, &mut out);
                }
            }
            for (i, b) in held.drain(..).enumerate() {
                match i % 3 {
                    0 => pool.free(b),
                    1 => drop(b), // the return list, reclaimed by the next alloc
                    _ => pool.return_path().send_back(b),
                }
            }
            drop(pool.lease().unwrap());
            pool.reclaim();
            let _ = pool.stats();
        }
    });
    assert_eq!(n, 0, "allocations in the steady state");
    assert_eq!(pool.available(), CAP as u32);
    assert_eq!(
        pool.stats().exhausted,
        2_000,
        "the fill loop and the probe both hit the limit"
    );
}

#[test]
fn pool_cross_thread_return_allocates_nothing() {
    const CAP: u32 = 64;
    const ITERS: u64 = 50_000;
    let pool = pool(CAP);
    // The hand-over: a mailbox with room for every buffer (a futex mutex, no allocation).
    let mailbox = Arc::new(Mutex::new(Vec::<Buf<Soft>>::with_capacity(CAP as usize)));
    let stop = Arc::new(AtomicBool::new(false));
    let returner = {
        let (mailbox, stop, rp) = (Arc::clone(&mailbox), Arc::clone(&stop), pool.return_path());
        thread::spawn(move || {
            let mut local = Vec::with_capacity(CAP as usize);
            counted(|| {
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut chained = false;
                while !stop.load(Ordering::Acquire) {
                    assert!(Instant::now() < deadline, "returner timed out");
                    std::mem::swap(&mut *mailbox.lock().unwrap(), &mut local);
                    if chained {
                        rp.send_back_all(local.drain(..));
                    } else {
                        local.drain(..).for_each(|b| rp.send_back(b));
                    }
                    chained = !chained;
                    thread::yield_now();
                }
                let _ = rp.stats();
            })
            .1
        })
    };
    let mut batch = Vec::with_capacity(8);
    let ((), n) = counted(|| {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut done = 0;
        while done < ITERS {
            match pool.alloc() {
                Ok(b) => {
                    batch.push(b);
                    done += 1;
                }
                Err(PoolError::Exhausted { .. }) => {
                    assert!(Instant::now() < deadline, "owner timed out");
                    thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
            if batch.len() == batch.capacity() {
                mailbox.lock().unwrap().append(&mut batch);
            }
        }
        mailbox.lock().unwrap().append(&mut batch);
    });
    stop.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !returner.is_finished() {
        assert!(Instant::now() < deadline, "returner did not stop");
        thread::yield_now();
    }
    let returner_allocations = returner.join().unwrap();
    // Whatever the returner had not picked up before it stopped goes home now.
    drop(std::mem::take(&mut *mailbox.lock().unwrap()));
    pool.reclaim();
    assert_eq!(n, 0, "owner allocations");
    assert_eq!(returner_allocations, 0, "returner allocations");
    assert_eq!(pool.available(), CAP);
    let s = pool.stats();
    assert_eq!(s.allocated, ITERS);
    assert!(s.returned_remote > 0);
    assert_eq!(s.outstanding(), 0);
}

/// A worker's loop on the soft fabric: receive buffers from one pool posted, Sends gathered
/// from another pool's buffers, completions turning back into frees.
#[test]
fn pool_worker_loop_on_the_soft_fabric_allocates_nothing() {
    const DEPTH: usize = 16;
    let dev = Soft::open_device(None).unwrap();
    let (cqa, cqb) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let (pda, pdb) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let caps = QpCaps::default();
    let (mut qa, mut qb) = soft::pair(
        &pda,
        QpInit::new(&cqa, &cqa, caps),
        &pdb,
        QpInit::new(&cqb, &cqb, caps),
    )
    .unwrap();
    let (mut cqa, mut cqb) = (cqa, cqb);
    let sends =
        BufferPool::<Soft>::new(&pda, PoolConfig::new(1024, 8, Access::LOCAL_WRITE)).unwrap();
    let recvs =
        BufferPool::<Soft>::new(&pdb, PoolConfig::new(1024, 32, Access::LOCAL_WRITE)).unwrap();
    // Posted receives, by buffer index; the wr_id of a receive is its buffer's index.
    let mut posted: Vec<Option<Buf<Soft>>> = (0..32).map(|_| None).collect();
    let post_recv = |qb: &mut soft::SoftQp, posted: &mut Vec<Option<Buf<Soft>>>| {
        let b = recvs.alloc().unwrap();
        qb.post_recv(&RecvWr::new(u64::from(b.index()), &[b.sge()]))
            .unwrap();
        let i = b.index() as usize;
        posted[i] = Some(b);
    };
    for _ in 0..DEPTH {
        post_recv(&mut qb, &mut posted);
    }
    let mut wc = [Wc::default(); 8];
    let poll = |cq: &mut soft::SoftCq, wc: &mut [Wc; 8]| -> Wc {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if cq.poll(&mut wc[..1]).unwrap() == 1 {
                assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
                return wc[0];
            }
            assert!(Instant::now() < deadline, "no completion");
        }
    };
    let mut round = |i: u32| {
        let mut tx = sends.alloc().unwrap();
        tx.write_at(0, &i.to_le_bytes());
        qa.post_send(&SendWr::send(u64::from(i), &[tx.sge_span(0, 4)]).signaled())
            .unwrap();
        let done = poll(&mut cqb, &mut wc);
        let rx = posted[done.wr_id as usize].take().unwrap();
        let mut got = [0; 4];
        rx.read_at(0, &mut got);
        assert_eq!(u32::from_le_bytes(got), i);
        recvs.free(rx);
        post_recv(&mut qb, &mut posted);
        assert_eq!(poll(&mut cqa, &mut wc).wr_id, u64::from(i));
        sends.free(tx);
    };
    for i in 0..64 {
        round(i); // warm up
    }
    let ((), n) = counted(|| {
        for i in 64..10_000 {
            round(i);
        }
    });
    assert_eq!(n, 0, "allocations in the worker loop");
}
