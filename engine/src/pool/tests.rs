use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::fabric::soft::{self, Soft, SoftConfig, SoftCq, SoftDevice, SoftPd};
use crate::fabric::{
    CompletionQueue, Device, QpCaps, QpInit, QueuePair, RecvWr, SendWr, Wc, WcOpcode, WcStatus,
};

type Pool = BufferPool<Soft>;

/// A protection domain of a default soft device.
fn domain() -> SoftPd {
    Soft::open_device(None).unwrap().alloc_pd().unwrap()
}

fn pool(buf_size: usize, count: u32) -> Pool {
    Pool::new(
        &domain(),
        PoolConfig::new(buf_size, count, Access::LOCAL_WRITE),
    )
    .unwrap()
}

/// Polls `cq` for one completion, at most five seconds.
fn poll_one(cq: &mut SoftCq) -> Wc {
    let mut wc = [Wc::default()];
    let deadline = Instant::now() + Duration::from_secs(5);
    while cq.poll(&mut wc).unwrap() == 0 {
        assert!(Instant::now() < deadline, "no completion");
        thread::yield_now();
    }
    wc[0]
}

/// Waits until `done()` holds, at most `limit`.
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::yield_now();
    }
}

// Compile-time facts about the types' thread-safety.
trait AmbiguousIfSync<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

#[test]
fn thread_safety_is_encoded_in_types() {
    fn send<T: Send>() {}
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    send::<Pool>();
    // Resolves only because `BufferPool` is not `Sync` (a `Sync` type would match both impls).
    <Pool as AmbiguousIfSync<_>>::check();
    send_sync_clone::<ReturnPath<Soft>>();
    send::<Buf<Soft>>();
    fn sync<T: Sync>() {}
    sync::<Buf<Soft>>();
    // The pool pointer, the buffer's address and scatter-gather element (kept so that the
    // hot paths reach them in one load), its index; `Option` costs nothing (non-null niche).
    assert_eq!(core::mem::size_of::<Buf<Soft>>(), 40);
    assert_eq!(core::mem::size_of::<Option<Buf<Soft>>>(), 40);
}

#[test]
fn alloc_to_exhaustion_and_back() {
    let pool = pool(256, 8);
    assert_eq!(
        (pool.capacity(), pool.available(), pool.buf_size()),
        (8, 8, 256)
    );
    for round in 0..3 {
        let bufs: Vec<_> = (0..8).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(pool.available(), 0);
        let err = pool.alloc().unwrap_err();
        assert_eq!(err, PoolError::Exhausted { capacity: 8 });
        let mut seen: Vec<_> = bufs.iter().map(Buf::index).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..8).collect::<Vec<_>>());
        for b in bufs {
            pool.free(b);
        }
        assert_eq!(pool.available(), 8);
        let s = pool.stats();
        assert_eq!(
            (s.allocated, s.freed_local, s.exhausted),
            (8 * (round + 1), s.allocated, round + 1)
        );
        assert_eq!(s.outstanding(), 0);
    }
}

#[test]
fn exhaustion_is_a_typed_error() {
    let pool = pool(64, 1);
    let held = pool.alloc().unwrap();
    let err = pool.alloc().unwrap_err();
    assert!(matches!(err, PoolError::Exhausted { capacity: 1 }));
    assert_eq!(
        err.to_string(),
        "buffer pool exhausted: all 1 buffers are in use"
    );
    assert!(pool.lease().is_err());
    assert_eq!(pool.stats().exhausted, 2);
    pool.free(held);
    assert!(pool.alloc().is_ok());
}

#[test]
fn fresh_pool_hands_out_buffers_in_address_order() {
    let pool = pool(100, 4);
    let addrs: Vec<_> = (0..4)
        .map(|_| pool.alloc().unwrap())
        .map(|b| b.addr())
        .collect();
    assert!(addrs.windows(2).all(|w| w[1] == w[0] + 128), "{addrs:x?}");
}

#[test]
fn invalid_configurations_are_refused() {
    let pd = domain();
    let bad = |c: PoolConfig| match Pool::new(&pd, c) {
        Err(PoolError::InvalidConfig(why)) => why,
        other => panic!("{c:?} gave {other:?}"),
    };
    let ok = PoolConfig::new(64, 4, Access::LOCAL_WRITE);
    bad(PoolConfig { buf_size: 0, ..ok });
    bad(PoolConfig {
        buf_size: u32::MAX as usize + 1,
        ..ok
    });
    bad(PoolConfig { count: 0, ..ok });
    bad(PoolConfig {
        count: u32::MAX,
        ..ok
    });
    bad(ok.with_align(48));
    bad(ok.with_align(0));
    bad(ok.with_max_region_len(63));
    let huge = PoolConfig::new(1, 1 << 25, Access::LOCAL_WRITE).with_max_region_len(usize::MAX);
    assert_eq!(bad(huge.with_align(1 << 40)), "pool size overflows usize");
}

/// The distance between 4 KiB buffers with the default alignment: one line more than a
/// page, so that consecutive buffers start in different cache sets.
const PADDED_4K: usize = 4096 + 64;

#[test]
fn fabric_errors_are_passed_on_and_nothing_leaks() {
    // Three keys, index 0 unused: room for two regions.
    let config = SoftConfig {
        max_keys: 3,
        ..SoftConfig::default()
    };
    let pd = SoftDevice::with_config("tiny", config).alloc_pd().unwrap();
    let three_regions =
        PoolConfig::new(4096, 12, Access::LOCAL_WRITE).with_max_region_len(4 * PADDED_4K);
    let err = Pool::new(&pd, three_regions).unwrap_err();
    assert_eq!(
        err,
        PoolError::Fabric(FabricError::Exhausted("memory keys"))
    );
    assert!(std::error::Error::source(&err).is_some());
    assert!(err.to_string().contains("memory keys"), "{err}");
    // The two regions of the failed attempt were deregistered: two fit again.
    let two_regions = Pool::new(
        &pd,
        PoolConfig {
            count: 8,
            ..three_regions
        },
    )
    .unwrap();
    assert_eq!(two_regions.regions().len(), 2);

    let err = Pool::new(
        &domain(),
        PoolConfig::new(64, 1, Access::REMOTE_WRITE), // without LOCAL_WRITE
    )
    .unwrap_err();
    assert!(
        matches!(err, PoolError::Fabric(FabricError::InvalidArgument(_))),
        "{err}"
    );
}

#[test]
fn sge_and_address_math_in_one_region() {
    let pool = pool(1000, 5);
    // 1000 rounds up to 1024, a multiple of SET_SPREAD: one more line spreads the buffers'
    // first lines over the cache sets.
    assert_eq!(pool.stride(), 1024 + 64);
    assert_eq!(pool.regions().len(), 1);
    let mr = &pool.regions()[0];
    assert_eq!(mr.len(), 5 * 1088);
    let bufs: Vec<_> = (0..5).map(|_| pool.alloc().unwrap()).collect();
    for b in &bufs {
        let i = b.index() as usize;
        assert_eq!(b.region_offset(), i * 1088);
        assert_eq!(b.addr(), mr.addr() + (i * 1088) as u64);
        assert_eq!(b.sge(), Sge::new(b.addr(), 1000, mr.lkey()));
        assert_eq!(b.sge_span(10, 90), Sge::new(b.addr() + 10, 90, mr.lkey()));
        assert_eq!(b.sge_span(1000, 0).addr, b.addr() + 1000);
        assert_eq!(b.remote(), None, "local-only pool");
        assert_eq!(b.size(), 1000);
        assert_eq!(b.addr() % 64, 0);
    }
    for b in bufs {
        pool.free(b);
    }
}

#[test]
fn sge_and_address_math_across_regions() {
    // 10 buffers of 4 KiB, at most 3 to a region: regions of 3, 3, 3 and 1 buffers.
    let pd = domain();
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let pool = Pool::new(
        &pd,
        PoolConfig::new(4096, 10, access).with_max_region_len(3 * PADDED_4K + 17),
    )
    .unwrap();
    assert_eq!(pool.stride(), PADDED_4K);
    assert_eq!(pool.regions().len(), 4);
    let lens: Vec<_> = pool.regions().iter().map(|r| r.len()).collect();
    let s = PADDED_4K;
    assert_eq!(lens, [3 * s, 3 * s, 3 * s, s]);
    let bufs: Vec<_> = (0..10).map(|_| pool.alloc().unwrap()).collect();
    for b in &bufs {
        let (r, slot) = (b.index() as usize / 3, b.index() as usize % 3);
        let mr = &pool.regions()[r];
        assert!(core::ptr::eq(b.region(), mr));
        assert_eq!(b.region_offset(), slot * s);
        assert_eq!(
            b.sge(),
            Sge::new(mr.addr() + (slot * s) as u64, 4096, mr.lkey())
        );
        assert_eq!(b.remote(), Some(RemoteAddr::new(b.addr(), mr.rkey())));
    }
    let mut keys: Vec<_> = pool.regions().iter().map(|r| r.lkey()).collect();
    keys.dedup();
    assert_eq!(keys.len(), 4, "one key per region");
}

#[test]
fn memory_window_bind_covers_the_buffer() {
    let pd = domain();
    let access = Access::LOCAL_WRITE | Access::MW_BIND;
    let pool = Pool::new(&pd, PoolConfig::new(512, 2, access)).unwrap();
    let mw = pd.alloc_mw().unwrap();
    let b = pool.alloc().unwrap();
    let bind = b.mw_bind(&mw, Access::REMOTE_WRITE);
    assert_eq!(
        (bind.addr, bind.len, bind.rkey),
        (b.addr(), 512, mw.next_rkey())
    );
    assert!(core::ptr::eq(bind.mr, b.region()));
    assert_eq!(bind.access, Access::REMOTE_WRITE);
    pool.free(b);
}

/// Two connected soft queue pairs, each with its own domain and completion queue.
struct Link {
    pds: (SoftPd, SoftPd),
    qps: (soft::SoftQp, soft::SoftQp),
    cqs: (SoftCq, SoftCq),
}

fn link() -> Link {
    let dev = Soft::open_device(None).unwrap();
    let (cqa, cqb) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
    let (pda, pdb) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
    let caps = QpCaps::default();
    let qps = soft::pair(
        &pda,
        QpInit::new(&cqa, &cqa, caps),
        &pdb,
        QpInit::new(&cqb, &cqb, caps),
    )
    .unwrap();
    Link {
        pds: (pda, pdb),
        qps,
        cqs: (cqa, cqb),
    }
}

/// Pool buffers as the fabric sees them: receives land in the posted buffer, Sends gather
/// from a span, RDMA Write and Read reach exactly the buffer at its remote address.
#[test]
fn buffers_carry_sends_writes_and_reads_on_the_soft_fabric() {
    let Link {
        pds: (pda, pdb),
        qps: (mut qa, mut qb),
        cqs: (mut cqa, mut cqb),
    } = link();
    let local = Pool::new(&pda, PoolConfig::new(256, 4, Access::LOCAL_WRITE)).unwrap();
    let remote_rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let exposed = Pool::new(&pdb, PoolConfig::new(256, 4, remote_rights)).unwrap();

    // A Send into a posted pool buffer; the receive's wr_id is the buffer's index.
    let _skip = exposed.alloc().unwrap(); // so the receive buffer is not the first one
    let rx = exposed.alloc().unwrap();
    qb.post_recv(&RecvWr::new(u64::from(rx.index()), &[rx.sge()]))
        .unwrap();
    let mut tx = local.alloc().unwrap();
    tx.write_at(0, b"call #1 and trailing bytes not sent");
    qa.post_send(&SendWr::send(1, &[tx.sge_span(0, 7)]).signaled())
        .unwrap();
    let wc = poll_one(&mut cqb);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!((wc.wr_id, wc.byte_len), (u64::from(rx.index()), 7));
    assert_eq!(poll_one(&mut cqa).status, WcStatus::Success);
    let mut got = [0; 8];
    rx.read_at(0, &mut got);
    assert_eq!(&got, b"call #1\0");

    // RDMA Write to another exposed buffer at its remote address, then Read it back.
    let target = exposed.alloc().unwrap();
    let at = target.remote().expect("remotely accessible pool");
    qa.post_send(&SendWr::write(2, &[tx.sge_span(0, 7)], at.offset(249)).signaled())
        .unwrap();
    assert_eq!(poll_one(&mut cqa).status, WcStatus::Success);
    let mut got = [0; 7];
    target.read_at(249, &mut got);
    assert_eq!(&got, b"call #1");
    let mut sink = local.alloc().unwrap();
    sink.write_at(0, &[0xee; 256]);
    qa.post_send(&SendWr::read(3, &[sink.sge_span(100, 7)], at.offset(249)).signaled())
        .unwrap();
    let wc = poll_one(&mut cqa);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaRead)
    );
    // SAFETY: the Read has completed and nothing else is posted over `sink`.
    let bytes = unsafe { sink.as_slice() };
    assert_eq!(&bytes[100..107], b"call #1");
    assert!(bytes[..100].iter().chain(&bytes[107..]).all(|&b| b == 0xee));
    for b in [tx, sink] {
        local.free(b);
    }
    for b in [rx, target, _skip] {
        exposed.free(b);
    }
    drop((qa, qb));
}

/// A window bound with `Buf::mw_bind` exposes exactly the buffer: a peer writes inside it
/// and is refused one byte past its end.
#[test]
fn memory_window_over_a_buffer_on_the_soft_fabric() {
    let Link {
        pds: (pda, pdb),
        qps: (mut qa, mut qb),
        cqs: (mut cqa, mut cqb),
    } = link();
    let src = Pool::new(&pda, PoolConfig::new(64, 1, Access::LOCAL_WRITE)).unwrap();
    let rights = Access::LOCAL_WRITE | Access::MW_BIND;
    let pool = Pool::new(&pdb, PoolConfig::new(128, 3, rights)).unwrap();
    let mw = pdb.alloc_mw().unwrap();
    let before = pool.alloc().unwrap();
    let exposed = pool.alloc().unwrap();
    let after = pool.alloc().unwrap();
    let bind = exposed.mw_bind(&mw, Access::REMOTE_WRITE);
    let rkey = bind.rkey;
    qb.post_send(&SendWr::bind_mw(9, bind).signaled()).unwrap();
    assert_eq!(poll_one(&mut cqb).status, WcStatus::Success);
    assert_eq!(mw.rkey(), rkey);

    let mut s = src.alloc().unwrap();
    s.write_at(0, &[0x42; 64]);
    let window = RemoteAddr::new(exposed.addr(), rkey);
    qa.post_send(&SendWr::write(1, &[s.sge_span(0, 64)], window.offset(64)).signaled())
        .unwrap();
    assert_eq!(poll_one(&mut cqa).status, WcStatus::Success);
    let mut got = [0; 128];
    exposed.read_at(0, &mut got);
    assert!(got[..64].iter().all(|&b| b == 0) && got[64..].iter().all(|&b| b == 0x42));

    qa.post_send(&SendWr::write(2, &[s.sge_span(0, 2)], window.offset(127)).signaled())
        .unwrap();
    assert_eq!(poll_one(&mut cqa).status, WcStatus::RemAccessErr);
    for b in [&before, &after] {
        b.read_at(0, &mut got);
        assert!(got.iter().all(|&b| b == 0), "a neighbour was written");
    }
    drop((qa, qb));
}

#[test]
fn bytes_round_trip_and_stay_inside_the_buffer() {
    let pool = pool(16, 3);
    let mut a = pool.alloc().unwrap();
    let mut b = pool.alloc().unwrap();
    let c = pool.alloc().unwrap();
    a.write_at(0, &[0xaa; 16]);
    b.write_at(4, b"hello");
    let mut out = [0u8; 16];
    b.read_at(0, &mut out);
    assert_eq!(&out, b"\0\0\0\0hello\0\0\0\0\0\0\0");
    a.read_at(0, &mut out);
    assert_eq!(out, [0xaa; 16]);
    c.read_at(0, &mut out);
    assert_eq!(out, [0; 16]);
    // SAFETY: no work request or peer can reach these buffers: the mock has no queue pairs.
    unsafe {
        b.as_mut_slice()[15] = 7;
        assert_eq!(b.as_slice()[4..9], *b"hello");
        assert_eq!(b.as_slice().len(), 16);
    }
    b.read_at(15, &mut out[..1]);
    assert_eq!(out[0], 7);
    for x in [a, b, c] {
        pool.free(x);
    }
}

#[test]
#[should_panic(expected = "outside a buffer of 16 bytes")]
fn writes_past_the_buffer_panic() {
    let pool = pool(16, 2);
    let mut b = pool.alloc().unwrap();
    b.write_at(10, &[0; 7]);
}

#[test]
#[should_panic(expected = "outside a buffer of 16 bytes")]
fn sge_spans_past_the_buffer_panic() {
    let pool = pool(16, 2);
    let b = pool.alloc().unwrap();
    let _ = b.sge_span(usize::MAX, 2);
}

#[test]
fn lease_frees_locally_on_drop_and_detaches() {
    let pool = pool(64, 2);
    {
        let mut lease = pool.lease().unwrap();
        lease.write_at(0, b"x");
        assert_eq!(pool.available(), 1);
        assert!(format!("{lease:?}").starts_with("Lease(Buf"));
    }
    assert_eq!(pool.available(), 2);
    assert_eq!(pool.stats().freed_local, 1);
    let buf = pool.lease().unwrap().into_buf();
    assert_eq!(pool.available(), 1);
    pool.free(buf);
    assert_eq!(pool.available(), 2);
    assert_eq!(pool.stats().returned_remote, 0);
}

#[test]
fn dropped_buffers_come_back_through_the_return_list() {
    let pool = pool(64, 4);
    let bufs: Vec<_> = (0..4).map(|_| pool.alloc().unwrap()).collect();
    drop(bufs);
    assert_eq!(pool.available(), 0, "not reclaimed yet");
    assert_eq!(pool.stats().outstanding(), 4);
    assert_eq!(pool.reclaim(), 4);
    assert_eq!(pool.reclaim(), 0);
    assert_eq!(pool.available(), 4);
    let s = pool.stats();
    assert_eq!((s.returned_remote, s.outstanding()), (4, 0));
    // alloc reclaims by itself when the free stack is empty.
    let held: Vec<_> = (0..4).map(|_| pool.alloc().unwrap()).collect();
    let rp = pool.return_path();
    for b in held {
        rp.send_back(b);
    }
    assert_eq!(pool.available(), 0);
    assert!(pool.alloc().is_ok());
    assert_eq!(pool.available(), 3);
}

#[test]
fn send_back_all_pushes_a_chain_and_routes_strangers() {
    let ours = pool(64, 8);
    let theirs = pool(64, 2);
    let rp = ours.return_path();
    let mut batch: Vec<_> = (0..5).map(|_| ours.alloc().unwrap()).collect();
    batch.insert(2, theirs.alloc().unwrap());
    assert!(!rp.owns(&batch[2]) && rp.owns(&batch[0]));
    assert_eq!(rp.send_back_all(batch), 5);
    assert_eq!(rp.send_back_all(Vec::new()), 0);
    assert_eq!(ours.reclaim(), 5);
    assert_eq!(theirs.reclaim(), 1);
    assert_eq!((ours.available(), theirs.available()), (8, 2));
}

#[test]
fn freeing_a_foreign_buffer_sends_it_home() {
    let a = pool(64, 2);
    let b = pool(64, 2);
    let x = b.alloc().unwrap();
    assert!(!a.owns(&x) && b.owns(&x));
    a.free(x);
    assert_eq!((a.available(), a.stats().freed_local), (2, 0));
    assert_eq!(b.reclaim(), 1);
    assert_eq!(b.available(), 2);
}

/// Leaks the pool's shared state on purpose (what a leak checker reports for this test).
#[test]
fn buffers_outlive_a_dropped_pool() {
    let pool = pool(32, 2);
    let rp = pool.return_path();
    let mut b = pool.alloc().unwrap();
    drop(pool);
    b.write_at(0, b"still here");
    let mut out = [0; 10];
    b.read_at(0, &mut out);
    assert_eq!(&out, b"still here");
    assert_eq!(rp.stats().outstanding(), 1);
    rp.send_back(b);
}

#[test]
fn stats_are_readable_from_another_thread() {
    let pool = pool(64, 4);
    let rp = pool.return_path();
    let held = [pool.alloc().unwrap(), pool.alloc().unwrap()];
    let stats = thread::spawn(move || rp.stats()).join().unwrap();
    assert_eq!(
        (stats.capacity, stats.buf_size, stats.allocated),
        (4, 64, 2)
    );
    assert_eq!(stats.outstanding(), 2);
    assert!(format!("{pool:?}").contains("available: 2"));
    for b in held {
        pool.free(b);
    }
}

#[test]
fn pool_moves_to_its_worker_thread() {
    let pool = pool(64, 4);
    let rp = pool.return_path();
    let b = pool.alloc().unwrap();
    let (tx, rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        // Wait for the buffer the builder thread kept to come back, then work.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.reclaim() == 0 {
            assert!(Instant::now() < deadline, "buffer never came back");
            thread::yield_now();
        }
        let more = pool.alloc().unwrap();
        let free_while_held = pool.available();
        pool.free(more);
        tx.send((free_while_held, pool.available())).unwrap();
    });
    rp.send_back(b);
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("worker hung");
    assert_eq!(got, (3, 4));
    wait_until(Duration::from_secs(10), "the worker to end", || {
        worker.is_finished()
    });
    worker.join().unwrap();
    assert_eq!(rp.stats().outstanding(), 0);
}

/// The owner allocates, tags and hands buffers to two returner threads, which check the tag
/// and send them back, one by one or in batches, while the owner keeps allocating.
#[test]
fn cross_thread_return_under_contention() {
    const CAP: u32 = 32;
    const ITERS: u64 = 20_000;
    let pool = pool(64, CAP);
    let held: Arc<Vec<AtomicBool>> = Arc::new((0..CAP).map(|_| AtomicBool::new(false)).collect());
    let mut senders = Vec::new();
    let mut workers = Vec::new();
    for t in 0..2 {
        let (tx, rx) = mpsc::channel::<Buf<Soft>>();
        let rp = pool.return_path();
        let held = Arc::clone(&held);
        senders.push(tx);
        workers.push(thread::spawn(move || {
            let mut batch = Vec::with_capacity(4);
            let take = |b: Buf<Soft>, batch: &mut Vec<Buf<Soft>>| {
                let mut tag = [0; 8];
                b.read_at(0, &mut tag);
                assert_eq!(
                    u64::from_le_bytes(tag) % u64::from(CAP),
                    u64::from(b.index())
                );
                assert!(held[b.index() as usize].swap(false, Ordering::SeqCst));
                if t == 0 {
                    rp.send_back(b);
                } else {
                    batch.push(b);
                    if batch.len() == 4 {
                        rp.send_back_all(batch.drain(..));
                    }
                }
            };
            loop {
                match rx.recv_timeout(Duration::from_secs(10)) {
                    Ok(b) => take(b, &mut batch),
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => panic!("returner {t} starved"),
                }
                while let Ok(b) = rx.try_recv() {
                    take(b, &mut batch);
                }
                // Nothing queued right now: do not sit on a partial batch.
                rp.send_back_all(batch.drain(..));
            }
            rp.send_back_all(batch);
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..ITERS {
        let mut b = loop {
            match pool.alloc() {
                Ok(b) => break b,
                Err(PoolError::Exhausted { .. }) => {
                    assert!(Instant::now() < deadline, "pool never refilled");
                    thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert!(
            !held[b.index() as usize].swap(true, Ordering::SeqCst),
            "handed out twice"
        );
        b.write_at(
            0,
            &(i * u64::from(CAP) + u64::from(b.index())).to_le_bytes(),
        );
        if i % 3 == 2 {
            assert!(held[b.index() as usize].swap(false, Ordering::SeqCst));
            pool.free(b);
        } else {
            senders[(i % 2) as usize].send(b).unwrap();
        }
        if i % 64 == 0 {
            pool.reclaim();
        }
    }
    drop(senders);
    for w in &workers {
        wait_until(Duration::from_secs(20), "returners to finish", || {
            w.is_finished()
        });
    }
    for w in workers {
        w.join().unwrap();
    }
    pool.reclaim();
    assert_eq!(pool.available(), CAP);
    let s = pool.stats();
    assert_eq!(s.allocated, ITERS);
    assert_eq!(s.freed_local + s.returned_remote, ITERS);
    assert_eq!(s.freed_local, ITERS / 3);
    assert_eq!(s.outstanding(), 0);
}

#[derive(Clone, Debug)]
enum Op {
    Alloc,
    Lease,
    Free(usize),
    Drop(usize),
    SendBackAll(usize),
    Reclaim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Alloc),
        1 => Just(Op::Lease),
        2 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::SendBackAll),
        1 => Just(Op::Reclaim),
    ]
}

proptest! {
    /// Whatever the order of allocations and the ways buffers come back, no buffer is handed
    /// out while held, buffers never overlap, exhaustion happens exactly when every buffer is
    /// held, and the counters agree with the model.
    #[test]
    fn no_buffer_is_handed_out_twice(
        count in 1u32..24,
        buf_size in 1usize..80,
        per_region in 1u32..8,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let stride = buf_size.div_ceil(8) * 8;
        let cfg = PoolConfig::new(buf_size, count, Access::LOCAL_WRITE)
            .with_align(8)
            .with_max_region_len(per_region as usize * stride);
        let pool = Pool::new(&domain(), cfg).unwrap();
        let mut held: Vec<Buf<Soft>> = Vec::new();
        let mut pending = 0u32; // sent back, not reclaimed
        let (mut allocs, mut fails) = (0u64, 0u64);
        let stamp = |b: &mut Buf<Soft>| {
            let v = vec![b.index() as u8 ^ 0x5a; b.size()];
            b.write_at(0, &v);
        };
        let check = |b: &Buf<Soft>| {
            let mut v = vec![0; b.size()];
            b.read_at(0, &mut v);
            assert!(v.iter().all(|&x| x == b.index() as u8 ^ 0x5a), "buffer {} overwritten", b.index());
        };
        for op in ops {
            match op {
                Op::Alloc | Op::Lease => {
                    // An empty free stack makes the pool reclaim everything sent back.
                    let reclaims = pool.available() == 0;
                    let got = if matches!(op, Op::Alloc) {
                        pool.alloc()
                    } else {
                        pool.lease().map(Lease::into_buf)
                    };
                    match got {
                        Ok(mut b) => {
                            prop_assert!(held.iter().all(|h| h.index() != b.index()));
                            prop_assert!(b.index() < count);
                            stamp(&mut b);
                            held.push(b);
                            allocs += 1;
                            if reclaims {
                                pending = 0;
                            }
                        }
                        Err(e) => {
                            prop_assert_eq!(e, PoolError::Exhausted { capacity: count });
                            prop_assert_eq!(held.len() as u32, count);
                            fails += 1;
                        }
                    }
                }
                Op::Free(i) | Op::Drop(i) if !held.is_empty() => {
                    let b = held.swap_remove(i % held.len());
                    check(&b);
                    if matches!(op, Op::Free(_)) {
                        pool.free(b);
                    } else {
                        drop(b);
                        pending += 1;
                    }
                }
                Op::SendBackAll(n) => {
                    let n = n % (held.len() + 1);
                    let batch: Vec<_> = held.drain(..n).collect();
                    batch.iter().for_each(check);
                    prop_assert_eq!(pool.return_path().send_back_all(batch), n as u32);
                    pending += n as u32;
                }
                Op::Reclaim => {
                    prop_assert_eq!(pool.reclaim(), pending);
                    pending = 0;
                }
                _ => {}
            }
            prop_assert_eq!(pool.available() + pending + held.len() as u32, count);
            let s = pool.stats();
            prop_assert_eq!((s.allocated, s.exhausted), (allocs, fails));
            prop_assert_eq!(s.outstanding(), u64::from(pending) + held.len() as u64);
        }
        for b in held {
            check(&b);
            pool.free(b);
        }
        pool.reclaim();
        prop_assert_eq!(pool.available(), count);
    }
}

/// Prints the cost of an alloc+free pair (and of the returner's side of a cross-thread
/// return). Run with
/// `cargo test -p rpcrdma-engine --release pool::tests::bench -- --ignored --nocapture`.
#[test]
#[ignore = "micro-benchmark; prints figures, asserts nothing about speed"]
fn bench_alloc_free_pairs() {
    use std::hint::black_box;
    const N: u64 = 20_000_000;
    const BATCH: usize = 32;
    let pool = pool(4096, 1024);
    let report = |what: &str, pairs: u64, t: Duration| {
        println!("{what:<62} {:>7.2} ns", t.as_nanos() as f64 / pairs as f64);
    };

    // Owner thread, one at a time.
    for _ in 0..2 {
        let t = Instant::now();
        for _ in 0..N {
            let b = pool.alloc().unwrap();
            pool.free(black_box(b));
        }
        report("owner: alloc + free", N, t.elapsed());
    }

    // Owner thread, batches.
    let mut batch: Vec<Buf<Soft>> = Vec::with_capacity(BATCH);
    let t = Instant::now();
    for _ in 0..N / BATCH as u64 {
        batch.extend((0..BATCH).map(|_| pool.alloc().unwrap()));
        for b in batch.drain(..) {
            pool.free(black_box(b));
        }
    }
    report("owner: 32 allocs then 32 frees", N, t.elapsed());

    // The return path without contention: drop on the owner thread, reclaim by alloc.
    let t = Instant::now();
    for _ in 0..N / BATCH as u64 {
        batch.extend((0..BATCH).map(|_| pool.alloc().unwrap()));
        for b in batch.drain(..) {
            drop(black_box(b));
        }
    }
    report(
        "one thread, remote path: alloc + drop (CAS push), reclaim",
        N,
        t.elapsed(),
    );
    pool.reclaim();

    // Two threads: the owner allocates batches and hands them over through a mailbox; the
    // other thread sends them back one by one (send_back) or as one chain (send_back_all).
    // The owner's figure is the throughput of the pair; the returner's is its own cost.
    for chained in [false, true] {
        let n = N / 4;
        let mailbox = Arc::new(Mutex::new(Vec::<Buf<Soft>>::with_capacity(1024)));
        let stop = Arc::new(AtomicBool::new(false));
        let returner = {
            let (mailbox, stop, rp) = (Arc::clone(&mailbox), Arc::clone(&stop), pool.return_path());
            thread::spawn(move || {
                let mut local = Vec::with_capacity(1024);
                let deadline = Instant::now() + Duration::from_secs(120);
                let (mut busy, mut returned) = (Duration::ZERO, 0u64);
                loop {
                    core::mem::swap(&mut *mailbox.lock().unwrap(), &mut local);
                    if local.is_empty() {
                        if stop.load(Ordering::Acquire) {
                            return (busy, returned);
                        }
                        assert!(Instant::now() < deadline, "benchmark hung");
                        thread::yield_now();
                        continue;
                    }
                    returned += local.len() as u64;
                    let t = Instant::now();
                    if chained {
                        rp.send_back_all(local.drain(..));
                    } else {
                        local.drain(..).for_each(|b| rp.send_back(b));
                    }
                    busy += t.elapsed();
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let t = Instant::now();
        let mut done = 0;
        while done < n {
            match pool.alloc() {
                Ok(b) => {
                    batch.push(b);
                    done += 1;
                }
                Err(_) => {
                    assert!(Instant::now() < deadline, "benchmark hung");
                    thread::yield_now();
                }
            }
            if batch.len() == BATCH {
                mailbox.lock().unwrap().append(&mut batch);
            }
        }
        let elapsed = t.elapsed();
        mailbox.lock().unwrap().append(&mut batch);
        stop.store(true, Ordering::Release);
        wait_until(Duration::from_secs(30), "the returner", || {
            returner.is_finished()
        });
        let (busy, returned) = returner.join().unwrap();
        // What the returner saw only after it stopped goes home too.
        drop(core::mem::take(&mut *mailbox.lock().unwrap()));
        let how = if chained {
            "send_back_all"
        } else {
            "send_back"
        };
        report(
            &format!("two threads: owner alloc, returner {how} (pair)"),
            n,
            elapsed,
        );
        report(
            &format!("  returner's own cost per buffer ({how})"),
            returned,
            busy,
        );
        wait_until(Duration::from_secs(10), "every buffer home", || {
            pool.reclaim();
            pool.available() == pool.capacity()
        });
    }
}
