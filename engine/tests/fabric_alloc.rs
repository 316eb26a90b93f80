//! The soft fabric's hot path allocates nothing: after warming up, a steady stream of
//! `post_recv`, `post_send` (Sends, RDMA Writes and Reads, signaled and not) and `poll` on
//! both ends goes through the global allocator zero times.

mod counting;

use rpcrdma_engine::fabric::soft::{self, Soft};
use rpcrdma_engine::fabric::{
    Access, CompletionQueue, Device, MemoryRegion, ProtectionDomain, Provider, QpCaps, QpInit,
    QueuePair, RecvWr, SendWr, Wc,
};

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
    let ((), allocs) = counting::counted(|| {
        for i in 1000..21000 {
            round(&mut qa, &mut qb, i);
        }
    });
    assert_eq!(allocs, 0, "allocations on the hot path");
    counting::assert_counter_counts();
}
