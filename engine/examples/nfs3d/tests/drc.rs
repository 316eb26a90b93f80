//! The duplicate request cache across a reconnect: CREATE (GUARDED), REMOVE and RENAME are
//! in progress on slowed I/O threads when the server drops the connection; the client
//! retransmits them with their XIDs on a new connection (RFC 5531 §9, RFC 8166 §3.3.3);
//! each is executed exactly once and each reply is the original success, not the EXIST or
//! NOENT a second execution would give.

use std::collections::HashMap;

use rpcrdma_engine::conn::RetransmitPolicy;

use super::*;

const CREATE: u32 = 8;
const REMOVE: u32 = 12;
const RENAME: u32 = 14;

#[test]
fn retransmitted_non_idempotent_calls_execute_once() {
    let srv = TestServer::start(|d| {
        std::fs::write(d.join("victim"), b"v").unwrap();
        std::fs::write(d.join("old"), b"o").unwrap();
    });
    let cred = auth_sys_body(&srv.dir);
    let cfg = ConnConfig {
        retransmit: Some(RetransmitPolicy {
            max_attempts: 20,
            attempt_timeout: Duration::from_secs(1),
            backoff: Duration::from_millis(20),
            ..RetransmitPolicy::default()
        }),
        ..client_config()
    };
    let mut c = srv.connect(cfg);
    let root = srv.export.root_fh().as_bytes().to_vec();
    // Warm-up: the grant beyond the first credit.
    call(&mut c, &nfs_call(0, &[], 0, &cred)).expect("NULL");
    call(&mut c, &nfs_call(0, &[], 0, &cred)).expect("NULL");

    let create = enc(|w| {
        diropargs(w, &root, "fresh");
        w.put_u32(1).unwrap(); // GUARDED
        sattr_mode(w, 0o644);
    });
    let remove = enc(|w| diropargs(w, &root, "victim"));
    let rename = enc(|w| {
        diropargs(w, &root, "old");
        diropargs(w, &root, "renamed");
    });
    srv.nfs.set_io_delay(Duration::from_millis(1500));
    let calls = [
        (CREATE, nfs_call(CREATE, &create, 1024, &cred)),
        (REMOVE, nfs_call(REMOVE, &remove, 1024, &cred)),
        (RENAME, nfs_call(RENAME, &rename, 1024, &cred)),
    ];
    let mut xids = HashMap::new();
    for (p, a) in &calls {
        xids.insert(*p, c.submit(a, u64::from(*p)).expect("submit"));
    }
    let mut replies: HashMap<u64, Result<u32, RpcError>> = HashMap::new();
    let poll = |c: &mut Client<Soft>, replies: &mut HashMap<u64, Result<u32, RpcError>>| {
        c.poll_completions(|x| {
            let r = x.result.map(|r| status(r.results));
            replies.insert(x.tag, r);
        });
    };
    // Every original is executing (in progress in the cache) ...
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.nfs.drc.stats.misses.load(Ordering::Relaxed) < 3 {
        poll(&mut c, &mut replies);
        assert!(Instant::now() < deadline, "the originals did not start");
    }
    assert!(replies.is_empty());
    // ... when the server drops the connection under them.
    srv.drop_connection();
    let deadline = Instant::now() + Duration::from_secs(20);
    while replies.len() < 3 {
        poll(&mut c, &mut replies);
        assert!(Instant::now() < deadline, "replies: {replies:?}");
    }
    srv.nfs.set_io_delay(Duration::ZERO);
    for p in [CREATE, REMOVE, RENAME] {
        assert_eq!(
            replies[&u64::from(p)],
            Ok(0),
            "procedure {p}: the original NFS3_OK, replayed"
        );
        let s = &srv.nfs.stats;
        assert_eq!(
            s.executed[p as usize].load(Ordering::Relaxed),
            1,
            "{p} executed once"
        );
        assert_eq!(
            s.calls[p as usize].load(Ordering::Relaxed),
            2,
            "{p} received twice"
        );
    }
    let d = &srv.nfs.drc.stats;
    assert_eq!(d.hits.load(Ordering::Relaxed), 3);
    assert_eq!(d.misses.load(Ordering::Relaxed), 3);
    assert!(
        d.waits.load(Ordering::Relaxed) >= 1,
        "a duplicate waited for its original"
    );
    assert!(c.snapshot().retransmits >= 3);
    assert!(c.snapshot().reconnects >= 1);
    // The directory: each operation done once.
    assert!(srv.dir.join("fresh").exists());
    assert!(!srv.dir.join("victim").exists());
    assert!(!srv.dir.join("old").exists());
    assert_eq!(std::fs::read(srv.dir.join("renamed")).unwrap(), b"o");
    // The connection serves on.
    call(&mut c, &nfs_call(0, &[], 0, &cred)).expect("NULL after the reconnect");
    c.disconnect();
}
