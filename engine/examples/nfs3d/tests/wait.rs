//! nfs3d's connections on workers that wait for events between Calls
//! (`Workers::set_wait`, `--wait-after-us`): a Call wakes the worker through the completion
//! queue, an I/O thread's answer through the connection's bell, and nothing is lost either
//! way — CREATEs (answered by the I/O pool) and a 1 MiB WRITE and READ come back right.

use std::sync::atomic::Ordering;

use rpcrdma_engine::program::{fill_pattern, is_pattern};
use rpcrdma_engine::worker::{WorkerConfig, Workers};
use rpcrdma_proto::xdr::XdrReader;

use super::flow::create;
use super::*;

#[test]
fn calls_and_io_answers_wake_a_waiting_worker() {
    let dir = scratch_dir("wait-export");
    let state = scratch_dir("wait-state");
    let config = Config {
        max_io: MAX_IO,
        max_dir: MAX_DIR,
        read_only: false,
    };
    let export = Arc::new(Export::open(&dir, &state, config).expect("export"));
    let nfs = Nfs::new(
        Arc::clone(&export),
        config,
        DrcLimits::default(),
        no_root_squash(),
    );
    let pool = IoPool::start(2, &nfs).expect("I/O pool");
    let dispatch = Arc::new(server::dispatch(&nfs));
    let (mut srv, addr) = soft_server(dispatch, server_config()).expect("listen");
    let mut workers = Workers::<NfsConn<Soft>>::start(&[WorkerConfig {
        core: None,
        max_conns: 4,
    }])
    .expect("workers");
    // Rest as soon as the clock says the worker is idle: it waits before nearly every event.
    workers.set_wait(Some(Duration::from_nanos(1)));
    // No wait ends by its limit: a lost notification or ring hangs a call until it fails.
    workers.set_wait_limit(Duration::from_secs(600));
    let (n, jobs) = (Arc::clone(&nfs), pool.sender());
    let acceptor = thread::spawn(move || {
        let c = srv.accept(Duration::from_secs(10)).expect("accept");
        workers.assign(NfsConn::new(c, n, jobs)).expect("assign");
        workers
    });
    let device = Soft::open_device(None).expect("soft device");
    let mut c = Client::<Soft>::connect(&device, &addr, client_config()).expect("connect");
    let workers = acceptor.join().expect("acceptor");
    let cred = auth_sys_body(&dir);
    let root = export.root_fh().as_bytes().to_vec();

    wait_for("a first wait", || workers.stats()[0].waits > 0);
    let before = workers.stats()[0];
    const FILES: u32 = 20;
    for i in 0..FILES {
        // The worker waits (armed, past its last look) when each CREATE comes.
        let waits = workers.stats()[0].waits;
        create(&mut c, &cred, &root, &format!("f{i}"));
        wait_for("the worker to wait again", || {
            workers.stats()[0].waits > waits
        });
    }
    let after = workers.stats()[0];
    // Each CREATE woke the worker at least once: for the Call, and again for the I/O
    // thread's answer when the worker was back waiting by then.
    assert!(
        after.wakeups - before.wakeups >= u64::from(FILES),
        "{before:?} {after:?}"
    );
    assert!(nfs.stats.answered.load(Ordering::Relaxed) >= u64::from(FILES));
    for i in 0..FILES {
        assert!(dir.join(format!("f{i}")).exists());
    }

    // A 1 MiB WRITE (Read chunk, pulled while the worker may wait) and READ back.
    let fh = create(&mut c, &cred, &root, "big");
    let mut data = vec![0u8; MAX_IO as usize];
    fill_pattern(9, &mut data);
    let args = enc(|w| {
        w.put_opaque_var(&fh, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(MAX_IO).unwrap();
        w.put_u32(2).unwrap(); // FILE_SYNC
    });
    let mut wr = nfs_call(7, &args, 1024, &cred);
    wr.bulk_arg = Some(&data);
    let (res, _) = call(&mut c, &wr).expect("WRITE");
    assert_eq!(status(&res), 0, "WRITE: NFS3_OK");
    let args = enc(|w| {
        w.put_opaque_var(&fh, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(MAX_IO).unwrap();
    });
    let mut rd = nfs_call(6, &args, 1024, &cred);
    rd.bulk_results = &[MAX_IO];
    let (res, bulk) = call(&mut c, &rd).expect("READ");
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "READ: NFS3_OK");
    assert!(bulk.len() == 1 && is_pattern(9, &bulk[0]) && bulk[0].len() == MAX_IO as usize);

    c.disconnect();
    workers.shutdown(Duration::from_secs(2)).expect("shutdown");
    pool.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&state);
}
