//! Every Call runs as its caller, through the engine's own requester sending crafted
//! AUTH_SYS credentials over the soft fabric (RFC 1813 §4.4): a Call claiming a user gets
//! that user's rights after the export's options map it, never the server's. The checks
//! follow the issue's, made on a default export (root squashed): client root cannot create
//! in a root-owned 0755 directory, a file created by uid 1000 is owned by 1000:1000, uid
//! 1001 cannot chmod, truncate, write, rename or remove uid 1000's file, a claimed uid 0 is
//! the anonymous user; then `--all-squash`, `--ro` and the worker's cached LOOKUP, and
//! LINK, MKNOD and `.`/`..` as the kernel's nfsd serves them.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use rpcrdma_proto::rpc::{AuthSys, Gids};
use rpcrdma_proto::xdr::XdrReader;

use super::*;

const SETATTR: u32 = 2;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const MKNOD: u32 = 11;
const REMOVE: u32 = 12;
const RENAME: u32 = 14;
const LINK: u32 = 15;
const READDIR: u32 = 16;
const ACCESS: u32 = 4;
/// nfsstat3 values (RFC 1813 §2.6).
const PERM: u32 = 1;
const ACCES: u32 = 13;
const ROFS: u32 = 30;

/// An AUTH_SYS credential body claiming `uid`, `gid` and `groups`.
fn cred(uid: u32, gid: u32, groups: &[u32]) -> Vec<u8> {
    let sys = AuthSys {
        stamp: 7,
        machinename: b"crafted",
        uid,
        gid,
        gids: Gids::new(groups).expect("at most 16 groups"),
    };
    let mut body = vec![0u8; sys.encoded_len()];
    sys.encode(&mut body).expect("AUTH_SYS");
    body
}

/// The export: a root-owned 0755 root, a sticky world-writable `tmp` (1777) and a 0777
/// `open`, as a server's administrator would lay them out.
fn layout(d: &Path) {
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, mode) in [("tmp", 0o1777), ("open", 0o777)] {
        std::fs::create_dir(d.join(name)).unwrap();
        std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// CREATE (GUARDED, mode 0644): the status and the handle.
fn try_create(c: &mut Client<Soft>, cred: &[u8], dir: &[u8], name: &str) -> (u32, Vec<u8>) {
    let args = enc(|w| {
        diropargs(w, dir, name);
        w.put_u32(1).unwrap(); // GUARDED
        sattr_mode(w, 0o644);
    });
    let (res, _) = call(c, &nfs_call(CREATE, &args, 1024, cred)).expect("CREATE");
    let mut r = XdrReader::new(&res);
    let s = r.u32().unwrap();
    let fh = if s == 0 && r.bool().unwrap() {
        r.opaque_var(64).unwrap().to_vec()
    } else {
        Vec::new()
    };
    (s, fh)
}

/// A procedure's status.
fn status_of(c: &mut Client<Soft>, cred: &[u8], proc_num: u32, args: &[u8]) -> u32 {
    let (res, _) = call(c, &nfs_call(proc_num, args, 4096, cred)).expect("the Call");
    status(&res)
}

/// SETATTR of the mode alone.
fn chmod_args(fh: &[u8], mode: u32) -> Vec<u8> {
    enc(|w| {
        w.put_opaque_var(fh, 64).unwrap();
        sattr_mode(w, mode);
        w.put_bool(false).unwrap(); // no guard
    })
}

/// SETATTR of the size alone.
fn truncate_args(fh: &[u8], size: u64) -> Vec<u8> {
    enc(|w| {
        w.put_opaque_var(fh, 64).unwrap();
        for _ in 0..3 {
            w.put_bool(false).unwrap(); // mode, uid, gid
        }
        w.put_bool(true).unwrap();
        w.put_u64(size).unwrap();
        w.put_u32(0).unwrap();
        w.put_u32(0).unwrap();
        w.put_bool(false).unwrap();
    })
}

/// An inline WRITE of `data` at 0 (FILE_SYNC).
fn write_args(fh: &[u8], data: &[u8]) -> Vec<u8> {
    enc(|w| {
        w.put_opaque_var(fh, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(data.len() as u32).unwrap();
        w.put_u32(2).unwrap();
        w.put_opaque_var(data, 1 << 20).unwrap();
    })
}

fn rename_args(dir: &[u8], from: &str, to: &str) -> Vec<u8> {
    enc(|w| {
        diropargs(w, dir, from);
        diropargs(w, dir, to);
    })
}

/// A server exporting a directory that `fill` lays out, with the options `policy`, a
/// client of it and the root's handle; `None` (the test says it is skipped) when this
/// process is not root, which acting as callers needs.
fn started(
    policy: Policy,
    fill: impl FnOnce(&Path),
) -> Option<(TestServer, Client<Soft>, Vec<u8>)> {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: nfs3d acts as its callers only as root");
        return None;
    }
    let srv = TestServer::start_with(policy, fill);
    let c = srv.connect(client_config());
    let root = srv.export.root_fh().as_bytes().to_vec();
    Some((srv, c, root))
}

#[test]
fn a_call_gets_the_rights_of_its_caller_never_the_servers() {
    let Some((srv, mut c, root)) = started(Policy::default(), layout) else {
        return;
    };
    let (u1000, u1001, u0) = (
        cred(1000, 1000, &[1000]),
        cred(1001, 1001, &[]),
        cred(0, 0, &[0]),
    );
    let tmp = lookup(&mut c, &u1000, &root, "tmp");

    // Client root is squashed: it cannot create in the root-owned 0755 root...
    let squashed = srv.nfs.stats.squashed.load(Ordering::Relaxed);
    assert_eq!(try_create(&mut c, &u0, &root, "by-root").0, ACCES);
    assert!(!srv.dir.join("by-root").exists());
    assert!(srv.nfs.stats.squashed.load(Ordering::Relaxed) > squashed);
    // ...and what it creates where anyone may belongs to the anonymous user.
    let (s, _) = try_create(&mut c, &u0, &tmp, "by-root");
    assert_eq!(s, 0);
    let m = std::fs::metadata(srv.dir.join("tmp/by-root")).unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (65534, 65534),
        "root squashed to nobody"
    );

    // uid 1000's file is uid 1000's.
    let (s, mine) = try_create(&mut c, &u1000, &tmp, "mine");
    assert_eq!(s, 0);
    let m = std::fs::metadata(srv.dir.join("tmp/mine")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 1000));
    assert_eq!(m.mode() & 0o7777, 0o644);

    // uid 1001 may not chmod, truncate, write, rename or remove it (sticky directory).
    let denied = srv.nfs.stats.denied.load(Ordering::Relaxed);
    assert_eq!(
        status_of(&mut c, &u1001, SETATTR, &chmod_args(&mine, 0o666)),
        PERM
    );
    assert_eq!(
        status_of(&mut c, &u1001, SETATTR, &truncate_args(&mine, 0)),
        ACCES
    );
    assert_eq!(
        status_of(&mut c, &u1001, WRITE, &write_args(&mine, b"x")),
        ACCES
    );
    assert_eq!(
        status_of(&mut c, &u1001, RENAME, &rename_args(&tmp, "mine", "theirs")),
        PERM
    );
    let rm = enc(|w| diropargs(w, &tmp, "mine"));
    assert_eq!(status_of(&mut c, &u1001, REMOVE, &rm), PERM);
    let m = std::fs::metadata(srv.dir.join("tmp/mine")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o644, "the mode is unchanged");
    assert!(srv.nfs.stats.denied.load(Ordering::Relaxed) >= denied + 5);
    // Claiming to be root does not help either.
    assert_eq!(
        status_of(&mut c, &u0, SETATTR, &chmod_args(&mine, 0o666)),
        PERM
    );
    // The owner may, even a write to a file its mode makes read-only (as Linux's nfsd).
    assert_eq!(
        status_of(&mut c, &u1000, SETATTR, &chmod_args(&mine, 0o444)),
        0
    );
    assert_eq!(
        status_of(&mut c, &u1000, WRITE, &write_args(&mine, b"owner")),
        0
    );
    assert_eq!(std::fs::read(srv.dir.join("tmp/mine")).unwrap(), b"owner");
    assert_eq!(
        status_of(&mut c, &u1000, RENAME, &rename_args(&tmp, "mine", "kept")),
        0
    );

    // ACCESS answers for the mapped caller: nobody may not modify the root.
    let args = enc(|w| {
        w.put_opaque_var(&root, 64).unwrap();
        w.put_u32(0x3f).unwrap();
    });
    let (res, _) = call(&mut c, &nfs_call(ACCESS, &args, 256, &u0)).unwrap();
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0);
    skip_post_op_attr(&mut r);
    assert_eq!(r.u32().unwrap() & 0x04, 0, "no MODIFY for squashed root");
}

/// A polling worker keeps the server's credentials (the kernel refuses its writes to the
/// RDMA device otherwise): it answers GETATTR for anyone and LOOKUP for root (not
/// squashed), and leaves another caller's LOOKUP to an I/O thread, which checks the
/// search right as that caller.
#[test]
fn a_worker_looks_up_only_as_the_server_and_lookup_needs_search_permission() {
    let Some((srv, mut c, root)) = started(no_root_squash(), |d| {
        layout(d);
        std::fs::create_dir(d.join("private")).unwrap();
        std::fs::write(d.join("private/secret"), b"s").unwrap();
        std::fs::set_permissions(d.join("private"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
    }) else {
        return;
    };
    srv.nfs.set_on_worker_all(true);
    let (u1000, u0) = (cred(1000, 1000, &[]), cred(0, 0, &[]));
    let stats = &srv.nfs.stats;
    let counts = || {
        (
            stats.on_worker.load(Ordering::Relaxed),
            stats.on_worker_missed.load(Ordering::Relaxed),
        )
    };
    let private = lookup(&mut c, &u1000, &root, "private");
    // Twice each: the second would be in the kernel's caches.
    for _ in 0..2 {
        let args = enc(|w| diropargs(w, &private, "secret"));
        let before = counts();
        assert_eq!(
            status_of(&mut c, &u1000, 3, &args),
            ACCES,
            "no search right"
        );
        let after = counts();
        assert_eq!(after.0, before.0, "not answered on the worker");
        assert_eq!(after.1, before.1 + 1, "handed to an I/O thread");
        let before = counts();
        assert_eq!(status_of(&mut c, &u0, 3, &args), 0, "root may search");
        assert_eq!(counts().0, before.0 + 1, "root's LOOKUP on the worker");
    }
    // GETATTR asks for no right: answered on the worker for anyone.
    let before = counts();
    let args = enc(|w| w.put_opaque_var(&private, 64).unwrap());
    assert_eq!(status_of(&mut c, &u1000, 1, &args), 0);
    assert_eq!(counts().0, before.0 + 1);
}

#[test]
fn all_squash_and_read_only_exports() {
    let all = Policy {
        all_squash: true,
        anon_uid: 4242,
        anon_gid: 4343,
        ..Policy::default()
    };
    let Some((srv, mut c, root)) = started(all, layout) else {
        return;
    };
    let u1000 = cred(1000, 1000, &[]);
    let open = lookup(&mut c, &u1000, &root, "open");
    assert_eq!(try_create(&mut c, &u1000, &open, "f").0, 0);
    let m = std::fs::metadata(srv.dir.join("open/f")).unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (4242, 4343),
        "every caller is anonymous"
    );
    drop(c);
    drop(srv);

    let ro = Policy {
        read_only: true,
        root_squash: false,
        ..Policy::default()
    };
    let Some((srv, mut c, root)) = started(ro, |d| {
        layout(d);
        std::fs::write(d.join("open/f"), b"data").unwrap();
    }) else {
        return;
    };
    let owner = auth_sys_body(&srv.dir);
    let open = lookup(&mut c, &owner, &root, "open");
    let f = lookup(&mut c, &owner, &open, "f");
    assert_eq!(try_create(&mut c, &owner, &open, "g").0, ROFS);
    assert_eq!(
        status_of(&mut c, &owner, WRITE, &write_args(&f, b"x")),
        ROFS
    );
    assert_eq!(
        status_of(&mut c, &owner, SETATTR, &chmod_args(&f, 0o600)),
        ROFS
    );
    let rm = enc(|w| diropargs(w, &open, "f"));
    assert_eq!(status_of(&mut c, &owner, REMOVE, &rm), ROFS);
    assert_eq!(std::fs::read(srv.dir.join("open/f")).unwrap(), b"data");
}

#[test]
fn link_mknod_and_the_dot_entries() {
    let Some((srv, mut c, root)) = started(Policy::default(), layout) else {
        return;
    };
    let u1000 = cred(1000, 1000, &[]);
    let open = lookup(&mut c, &u1000, &root, "open");
    let (_, f) = try_create(&mut c, &u1000, &open, "f");
    // LINK: a second name for the same file.
    let args = enc(|w| {
        w.put_opaque_var(&f, 64).unwrap();
        diropargs(w, &open, "g");
    });
    assert_eq!(status_of(&mut c, &u1000, LINK, &args), 0);
    let (a, b) = (
        std::fs::metadata(srv.dir.join("open/f")).unwrap(),
        std::fs::metadata(srv.dir.join("open/g")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    // MKNOD: a FIFO and a socket for anyone; a device only for root (squashed here).
    let mknod = |ftype: u32, name: &str| {
        enc(|w| {
            diropargs(w, &open, name);
            w.put_u32(ftype).unwrap();
            sattr_mode(w, 0o640);
            if ftype == 3 || ftype == 4 {
                w.put_u32(1).unwrap();
                w.put_u32(3).unwrap();
            }
        })
    };
    assert_eq!(status_of(&mut c, &u1000, MKNOD, &mknod(7, "fifo")), 0);
    assert_eq!(status_of(&mut c, &u1000, MKNOD, &mknod(6, "sock")), 0);
    use std::os::unix::fs::FileTypeExt;
    let m = std::fs::symlink_metadata(srv.dir.join("open/fifo")).unwrap();
    assert!(m.file_type().is_fifo());
    assert_eq!((m.uid(), m.mode() & 0o7777), (1000, 0o640));
    assert!(std::fs::symlink_metadata(srv.dir.join("open/sock"))
        .unwrap()
        .file_type()
        .is_socket());
    assert_eq!(status_of(&mut c, &u1000, MKNOD, &mknod(4, "null")), PERM);
    assert_eq!(
        status_of(&mut c, &u1000, MKNOD, &mknod(1, "regular")),
        10007,
        "NFS3ERR_BADTYPE"
    );
    // READDIR lists "." and ".." first.
    let args = enc(|w| {
        w.put_opaque_var(&open, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_opaque_fixed(&[0; 8]).unwrap();
        w.put_u32(4096).unwrap();
    });
    let (res, _) = call(&mut c, &nfs_call(READDIR, &args, 8192, &u1000)).unwrap();
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0);
    skip_post_op_attr(&mut r);
    r.skip(8).unwrap();
    let mut names = Vec::new();
    while r.bool().unwrap() {
        r.u64().unwrap();
        names.push(String::from_utf8(r.opaque_var(255).unwrap().to_vec()).unwrap());
        r.u64().unwrap();
    }
    assert_eq!(&names[..2], [".", ".."]);
    names.sort();
    assert_eq!(names, [".", "..", "f", "fifo", "g", "sock"]);
}
