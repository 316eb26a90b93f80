//! A client's first steps after MOUNT, over the engine: NULL, GETATTR of the root handle,
//! CREATE, a 1 MiB WRITE through a Read chunk and a 1 MiB READ through a Write chunk (bytes
//! equal, equal to the file on disk, never copied on the server), READDIRPLUS of a
//! 2,000-entry directory through the Reply chunk.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use rpcrdma_engine::program::{fill_pattern, is_pattern};
use rpcrdma_proto::xdr::XdrReader;

use super::*;

const GETATTR: u32 = 1;
const READ: u32 = 6;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const READDIRPLUS: u32 = 17;
/// NF3REG, NF3DIR (RFC 1813 §2.6 ftype3).
const NF3DIR: u32 = 2;

/// CREATE `name` in `dir` (UNCHECKED, mode 0644); its handle.
pub fn create(client: &mut Client<Soft>, cred: &[u8], dir: &[u8], name: &str) -> Vec<u8> {
    let args = enc(|w| {
        diropargs(w, dir, name);
        w.put_u32(0).unwrap(); // UNCHECKED
        sattr_mode(w, 0o644);
    });
    let (res, _) = call(client, &nfs_call(CREATE, &args, 1024, cred)).expect("CREATE");
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "CREATE: NFS3_OK");
    assert!(r.bool().unwrap(), "CREATE returns the handle");
    r.opaque_var(64).unwrap().to_vec()
}

#[test]
fn null_getattr_create_write_read_readdirplus() {
    let srv = TestServer::start(|d| {
        std::fs::create_dir(d.join("many")).unwrap();
        for i in 0..2000 {
            std::fs::write(d.join("many").join(format!("entry-{i:05}")), b"").unwrap();
        }
    });
    let cred = auth_sys_body(&srv.dir);
    let mut c = srv.connect(client_config());

    // NULL, answered inline by the worker.
    let (res, _) = call(&mut c, &nfs_call(0, &[], 0, &cred)).expect("NULL");
    assert!(res.is_empty());

    // GETATTR of the root handle: a directory.
    let root = srv.export.root_fh().as_bytes().to_vec();
    let args = enc(|w| w.put_opaque_var(&root, 64).unwrap());
    let (res, _) = call(&mut c, &nfs_call(GETATTR, &args, 256, &cred)).expect("GETATTR");
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "GETATTR: NFS3_OK");
    assert_eq!(r.u32().unwrap(), NF3DIR, "the root is a directory");
    // Answered by the worker from the kernel's caches (the root's path is always known),
    // where openat2's RESOLVE_CACHED exists (Linux 5.12 on); by an I/O thread otherwise.
    let stats = &srv.nfs.stats;
    assert_eq!(
        stats.on_worker.load(Ordering::Relaxed) + stats.on_worker_missed.load(Ordering::Relaxed),
        1
    );

    // CREATE, then WRITE 1 MiB through a Read chunk (FILE_SYNC).
    let fh = create(&mut c, &cred, &root, "big");
    let mut data = vec![0u8; MAX_IO as usize];
    fill_pattern(42, &mut data);
    let args = enc(|w| {
        w.put_opaque_var(&fh, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(MAX_IO).unwrap();
        w.put_u32(2).unwrap(); // FILE_SYNC
    });
    let mut wr = nfs_call(WRITE, &args, 1024, &cred);
    wr.bulk_arg = Some(&data);
    let before = srv.engine();
    let (res, _) = call(&mut c, &wr).expect("WRITE");
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "WRITE: NFS3_OK");
    skip_wcc(&mut r);
    assert_eq!(r.u32().unwrap(), MAX_IO, "WRITE count");
    let on_disk = std::fs::read(srv.dir.join("big")).unwrap();
    assert!(on_disk == data, "the file holds what was written");

    // READ 1 MiB back through a Write chunk.
    let args = enc(|w| {
        w.put_opaque_var(&fh, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(MAX_IO).unwrap();
    });
    let mut rd = nfs_call(READ, &args, 1024, &cred);
    rd.bulk_results = &[MAX_IO];
    let (res, bulk) = call(&mut c, &rd).expect("READ");
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "READ: NFS3_OK");
    skip_post_op_attr(&mut r);
    assert_eq!(r.u32().unwrap(), MAX_IO, "READ count");
    assert!(r.bool().unwrap(), "READ to the end: eof");
    assert_eq!(bulk.len(), 1, "the data came in the Write chunk");
    assert!(bulk[0].len() == MAX_IO as usize && is_pattern(42, &bulk[0]));
    assert!(bulk[0] == on_disk);
    wait_for("the server's counters", || {
        let e = srv.engine();
        e.rpcs - before.rpcs >= 2
    });
    let after = srv.engine();
    assert!(
        after.chunked_calls > before.chunked_calls,
        "WRITE in a Read chunk"
    );
    assert!(
        after.write_chunks > before.write_chunks,
        "READ in a Write chunk"
    );
    assert!(after.bytes_read - before.bytes_read >= u64::from(MAX_IO));
    assert!(after.bytes_written - before.bytes_written >= u64::from(MAX_IO));
    // Zero copy: the WRITE's data was written from where the RDMA Read put it, the READ's
    // data read straight into the buffer the engine RDMA-Wrote.
    assert_eq!(srv.nfs.stats.args_copies.load(Ordering::Relaxed), 0);
    assert_eq!(srv.nfs.stats.bulk_copies.load(Ordering::Relaxed), 0);

    // READDIRPLUS of 2,000 entries, through the Reply chunk, cookie after cookie.
    let many = lookup(&mut c, &cred, &root, "many");
    let mut names = BTreeSet::new();
    let mut cookie = 0u64;
    let mut verf = [0u8; 8];
    let mut rounds = 0;
    let before = srv.engine();
    loop {
        rounds += 1;
        assert!(rounds < 100, "READDIRPLUS never reached eof");
        let args = enc(|w| {
            w.put_opaque_var(&many, 64).unwrap();
            w.put_u64(cookie).unwrap();
            w.put_opaque_fixed(&verf).unwrap();
            w.put_u32(MAX_DIR).unwrap(); // dircount
            w.put_u32(MAX_DIR).unwrap(); // maxcount
        });
        let (res, _) = call(&mut c, &nfs_call(READDIRPLUS, &args, MAX_DIR + 1024, &cred))
            .expect("READDIRPLUS");
        let mut r = XdrReader::new(&res);
        assert_eq!(r.u32().unwrap(), 0, "READDIRPLUS: NFS3_OK");
        skip_post_op_attr(&mut r);
        verf.copy_from_slice(r.opaque_fixed(8).unwrap());
        while r.bool().unwrap() {
            r.u64().unwrap(); // fileid
            let name = String::from_utf8(r.string(255).unwrap().to_vec()).unwrap();
            cookie = r.u64().unwrap();
            skip_post_op_attr(&mut r);
            if r.bool().unwrap() {
                r.opaque_var(64).unwrap();
            }
            names.insert(name);
        }
        if r.bool().unwrap() {
            break;
        }
    }
    for i in 0..2000 {
        assert!(names.contains(&format!("entry-{i:05}")), "entry {i} listed");
    }
    wait_for("the server's counters", || srv.engine().rpcs > before.rpcs);
    assert!(
        srv.engine().long_replies > before.long_replies,
        "READDIRPLUS answered through the Reply chunk"
    );
    assert_eq!(srv.nfs.stats.system_errs.load(Ordering::Relaxed), 0);
    c.disconnect();
}

/// An AUTH_SYS credential whose body does not decode is refused with MSG_DENIED /
/// AUTH_ERROR / AUTH_BADCRED (RFC 5531 §9), not a SYSTEM_ERR, and nothing runs.
#[test]
fn a_credential_that_does_not_decode_is_auth_badcred() {
    use rpcrdma_proto::rpc::{AuthStat, RejectedReply, ReplyBody};
    let srv = TestServer::start(|_| {});
    let mut c = srv.connect(client_config());
    let root = srv.export.root_fh().as_bytes().to_vec();
    let args = enc(|w| w.put_opaque_var(&root, 64).unwrap());
    // A stamp, then a machine name of 200 bytes in a body of 8.
    let bad = [0u8, 0, 0, 1, 0, 0, 0, 200];
    let body = c
        .call(&nfs_call(GETATTR, &args, 256, &bad), |r| {
            r.map(|r| {
                (
                    r.is_success(),
                    r.rpc.body
                        == ReplyBody::Denied(RejectedReply::AuthError(AuthStat::AUTH_BADCRED)),
                )
            })
        })
        .expect("answered")
        .expect("a reply");
    assert_eq!(body, (false, true), "AUTH_ERROR / AUTH_BADCRED");
    assert_eq!(srv.nfs.stats.auth_errors.load(Ordering::Relaxed), 1);
    assert_eq!(srv.engine().auth_errors, 1);
    // The connection goes on: a good credential is served.
    let cred = auth_sys_body(&srv.dir);
    let (res, _) = call(&mut c, &nfs_call(GETATTR, &args, 256, &cred)).expect("GETATTR");
    assert_eq!(status(&res), 0);
}

#[test]
fn a_memory_export_runs_all_but_read_write_and_listings_on_the_worker() {
    const MKDIR: u32 = 9;
    const REMOVE: u32 = 12;
    const RENAME: u32 = 14;
    const COMMIT: u32 = 21;
    let srv = TestServer::start(|_| {});
    srv.nfs.set_on_worker_all(true);
    let cred = auth_sys_body(&srv.dir);
    let mut c = srv.connect(client_config());
    let root = srv.export.root_fh().as_bytes().to_vec();
    let stats = &srv.nfs.stats;
    let on_worker = || stats.on_worker_jobs.load(Ordering::Relaxed);

    // CREATE and MKDIR on the worker.
    let fh = create(&mut c, &cred, &root, "f");
    let args = enc(|w| {
        diropargs(w, &root, "d");
        sattr_mode(w, 0o755);
    });
    let (res, _) = call(&mut c, &nfs_call(MKDIR, &args, 1024, &cred)).expect("MKDIR");
    assert_eq!(status(&res), 0);
    assert_eq!(on_worker(), 2);
    assert!(srv.dir.join("d").is_dir() && srv.dir.join("f").is_file());

    // WRITE through the pool, COMMIT on the worker.
    let data = vec![7u8; 4096];
    let args = enc(|w| {
        w.put_opaque_var(&fh, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(4096).unwrap();
        w.put_u32(0).unwrap(); // UNSTABLE
    });
    let mut wr = nfs_call(WRITE, &args, 1024, &cred);
    wr.bulk_arg = Some(&data);
    let (res, _) = call(&mut c, &wr).expect("WRITE");
    assert_eq!(status(&res), 0);
    assert_eq!(on_worker(), 2, "WRITE went to an I/O thread");
    let args = enc(|w| {
        w.put_opaque_var(&fh, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(0).unwrap();
    });
    let (res, _) = call(&mut c, &nfs_call(COMMIT, &args, 1024, &cred)).expect("COMMIT");
    assert_eq!(status(&res), 0);
    assert_eq!(on_worker(), 3);
    assert_eq!(std::fs::read(srv.dir.join("f")).unwrap(), data);

    // A listing through the pool.
    let args = enc(|w| {
        w.put_opaque_var(&root, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_opaque_fixed(&[0; 8]).unwrap();
        w.put_u32(4096).unwrap();
        w.put_u32(8192).unwrap();
    });
    let (res, _) = call(&mut c, &nfs_call(READDIRPLUS, &args, 8192, &cred)).expect("READDIRPLUS");
    assert_eq!(status(&res), 0);
    assert_eq!(on_worker(), 3, "READDIRPLUS went to an I/O thread");

    // RENAME and REMOVE on the worker, each executed once, through the duplicate request
    // cache as on an I/O thread.
    let args = enc(|w| {
        diropargs(w, &root, "f");
        diropargs(w, &root, "g");
    });
    let (res, _) = call(&mut c, &nfs_call(RENAME, &args, 1024, &cred)).expect("RENAME");
    assert_eq!(status(&res), 0);
    let args = enc(|w| diropargs(w, &root, "g"));
    let (res, _) = call(&mut c, &nfs_call(REMOVE, &args, 1024, &cred)).expect("REMOVE");
    assert_eq!(status(&res), 0);
    assert_eq!(on_worker(), 5);
    assert!(!srv.dir.join("f").exists() && !srv.dir.join("g").exists());
    let executed = |p: usize| stats.executed[p].load(Ordering::Relaxed);
    assert_eq!(executed(REMOVE as usize), 1);
    assert_eq!(executed(RENAME as usize), 1);
    assert_eq!(
        srv.nfs.drc.stats.misses.load(Ordering::Relaxed),
        4,
        "CREATE, MKDIR, RENAME, REMOVE"
    );
    assert_eq!(stats.system_errs.load(Ordering::Relaxed), 0);
}

#[test]
fn a_worker_leaves_a_handle_it_does_not_know_to_the_pool() {
    let srv = TestServer::start(|d| std::fs::create_dir(d.join("sub")).unwrap());
    srv.nfs.set_on_worker_all(true);
    let cred = auth_sys_body(&srv.dir);
    let mut c = srv.connect(client_config());
    let root = srv.export.root_fh().as_bytes().to_vec();
    let sub = lookup(&mut c, &cred, &root, "sub");
    let fh = create(&mut c, &cred, &sub, "f");
    // Behind the server's back, the directory moves: the file's remembered path is wrong,
    // and only the kernel, given the file's handle, knows where it is now.
    std::fs::rename(srv.dir.join("sub"), srv.dir.join("moved")).unwrap();
    let on_worker = srv.nfs.stats.on_worker_jobs.load(Ordering::Relaxed);
    let (searches, opened) = (srv.export.searches(), srv.export.opened_by_handle());
    let args = enc(|w| w.put_opaque_var(&fh, 64).unwrap());
    let (res, _) = call(&mut c, &nfs_call(GETATTR, &args, 256, &cred)).expect("GETATTR");
    assert_eq!(status(&res), 0, "found by its kernel handle");
    assert_eq!(
        srv.export.opened_by_handle(),
        opened + 1,
        "opened by handle once, by an I/O thread"
    );
    assert_eq!(srv.export.searches(), searches, "no search of the export");
    assert_eq!(
        srv.nfs.stats.on_worker_jobs.load(Ordering::Relaxed),
        on_worker,
        "the worker gave the job up"
    );
    // Its new path is remembered: the worker answers the next one.
    let (res, _) = call(&mut c, &nfs_call(GETATTR, &args, 256, &cred)).expect("GETATTR");
    assert_eq!(status(&res), 0);
    assert_eq!(srv.export.opened_by_handle(), opened + 1);
}
