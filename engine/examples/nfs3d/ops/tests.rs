//! The procedures on a real directory, through [`run`] with encoded arguments, as a client
//! would call them: handles across a restart, forged and stale handles, every escape a
//! client could try, names that are refused, EXCLUSIVE CREATE's retransmission, directory
//! paging within the client's counts, READ/WRITE/COMMIT, and hostile argument bytes.

use std::path::{Path, PathBuf};

use rpcrdma_proto::xdr::{XdrReader, XdrWriter};

use super::{proc, run, run_cached, Caller, Config, Export};
use crate::xdr::{Fattr, Stat};

const CONFIG: Config = Config {
    max_io: 1 << 20,
    max_dir: 1 << 20,
    read_only: false,
};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("nfs3d-ops-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("export")).unwrap();
        Dir(d)
    }
    fn export(&self) -> PathBuf {
        self.0.join("export")
    }
    fn open(&self) -> Export {
        Export::open(&self.export(), &self.0.join("state"), CONFIG).unwrap()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn args(f: impl FnOnce(&mut XdrWriter<'_>)) -> Vec<u8> {
    let mut b = vec![0u8; 1 << 21];
    let mut w = XdrWriter::new(&mut b);
    f(&mut w);
    let n = w.position();
    b.truncate(n);
    b
}

/// Runs a procedure; returns the results and READ's data.
fn call(e: &Export, p: u32, a: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut res = vec![0u8; super::max_results(p, &CONFIG) as usize];
    let mut bulk = vec![0u8; 1 << 20];
    let done = run(e, &Caller::root(), p, a, &mut res, Some(&mut bulk)).expect("decodes");
    res.truncate(done.results_len);
    bulk.truncate(done.bulk_len.unwrap_or(0));
    (res, bulk)
}

fn status(res: &[u8]) -> u32 {
    u32::from_be_bytes(res[..4].try_into().unwrap())
}

fn fh_arg(fh: &[u8]) -> Vec<u8> {
    args(|w| w.put_opaque_var(fh, 64).unwrap())
}

fn dirop(fh: &[u8], name: &[u8]) -> Vec<u8> {
    args(|w| {
        w.put_opaque_var(fh, 64).unwrap();
        w.put_opaque_var(name, 1024).unwrap();
    })
}

/// LOOKUP: the status and, when found, the handle and attributes.
fn lookup(e: &Export, dir: &[u8], name: &[u8]) -> (u32, Option<(Vec<u8>, Fattr)>) {
    let (res, _) = call(e, proc::LOOKUP, &dirop(dir, name));
    let mut r = XdrReader::new(&res);
    let s = r.u32().unwrap();
    if s != 0 {
        return (s, None);
    }
    let fh = r.opaque_var(64).unwrap().to_vec();
    assert!(r.bool().unwrap());
    (s, Some((fh, Fattr::decode(&mut r).unwrap())))
}

/// CREATE (`how` 0 UNCHECKED, 1 GUARDED, 2 EXCLUSIVE with `verf`): status and handle.
fn create(e: &Export, dir: &[u8], name: &[u8], how: u32, verf: u64) -> (u32, Option<Vec<u8>>) {
    let a = args(|w| {
        w.put_opaque_var(dir, 64).unwrap();
        w.put_opaque_var(name, 1024).unwrap();
        w.put_u32(how).unwrap();
        if how == 2 {
            w.put_u64(verf).unwrap();
        } else {
            for v in [1u32, 0o644, 0, 0, 0, 0, 0] {
                w.put_u32(v).unwrap();
            }
        }
    });
    let (res, _) = call(e, proc::CREATE, &a);
    let mut r = XdrReader::new(&res);
    let s = r.u32().unwrap();
    let fh = (s == 0 && r.bool().unwrap()).then(|| r.opaque_var(64).unwrap().to_vec());
    (s, fh)
}

fn mkdir(e: &Export, dir: &[u8], name: &[u8]) -> (u32, Option<Vec<u8>>) {
    let a = args(|w| {
        w.put_opaque_var(dir, 64).unwrap();
        w.put_opaque_var(name, 1024).unwrap();
        for v in [0u32; 6] {
            w.put_u32(v).unwrap();
        }
    });
    let (res, _) = call(e, proc::MKDIR, &a);
    let mut r = XdrReader::new(&res);
    let s = r.u32().unwrap();
    let fh = (s == 0 && r.bool().unwrap()).then(|| r.opaque_var(64).unwrap().to_vec());
    (s, fh)
}

fn getattr(e: &Export, fh: &[u8]) -> (u32, Option<Fattr>) {
    let (res, _) = call(e, proc::GETATTR, &fh_arg(fh));
    let mut r = XdrReader::new(&res);
    let s = r.u32().unwrap();
    (s, (s == 0).then(|| Fattr::decode(&mut r).unwrap()))
}

fn write(e: &Export, fh: &[u8], off: u64, data: &[u8], stable: u32) -> (u32, u32, [u8; 8]) {
    let a = args(|w| {
        w.put_opaque_var(fh, 64).unwrap();
        w.put_u64(off).unwrap();
        w.put_u32(data.len() as u32).unwrap();
        w.put_u32(stable).unwrap();
        w.put_opaque_var(data, u32::MAX).unwrap();
    });
    let (res, _) = call(e, proc::WRITE, &a);
    let mut r = XdrReader::new(&res);
    let s = r.u32().unwrap();
    if s != 0 {
        return (s, 0, [0; 8]);
    }
    r.skip(4 + 24 + 4 + 84).unwrap();
    assert_eq!(r.u32().unwrap(), data.len() as u32);
    let committed = r.u32().unwrap();
    (s, committed, crate::xdr::verf(&mut r).unwrap())
}

fn read(e: &Export, fh: &[u8], off: u64, count: u32) -> (u32, Vec<u8>, bool) {
    let a = args(|w| {
        w.put_opaque_var(fh, 64).unwrap();
        w.put_u64(off).unwrap();
        w.put_u32(count).unwrap();
    });
    let (res, data) = call(e, proc::READ, &a);
    let mut r = XdrReader::new(&res);
    let s = r.u32().unwrap();
    if s != 0 {
        return (s, Vec::new(), false);
    }
    r.skip(4 + 84).unwrap();
    assert_eq!(r.u32().unwrap() as usize, data.len());
    (s, data, r.bool().unwrap())
}

#[test]
fn handles_survive_a_restart_and_forged_or_stale_ones_are_refused() {
    let d = Dir::new("handles");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let (_, sub) = mkdir(&e, &root, b"sub");
    let sub = sub.unwrap();
    let (s, f) = create(&e, &sub, b"file", 1, 0);
    assert_eq!(s, 0);
    let f = f.unwrap();
    let before = getattr(&e, &f).1.unwrap();
    drop(e);
    // A new server process: nothing cached, the same key; the handle is found again.
    let e = d.open();
    assert_eq!(e.root_fh().as_bytes(), &root[..]);
    assert_eq!(getattr(&e, &f).1.unwrap().fileid, before.fileid);
    // Forged: a flipped byte, a wrong length, another server's key.
    let mut bad = f.clone();
    bad[14] ^= 1;
    assert_eq!(getattr(&e, &bad).0, Stat::BadHandle as u32);
    assert_eq!(getattr(&e, &f[..20]).0, Stat::BadHandle as u32);
    let other = Dir::new("other");
    let e2 = other.open();
    assert_eq!(getattr(&e2, &f).0, Stat::BadHandle as u32);
    // Stale: the file is gone (and a new one in its place is another object).
    std::fs::remove_file(d.export().join("sub/file")).unwrap();
    std::fs::write(d.export().join("sub/file"), b"new").unwrap();
    assert_eq!(getattr(&e, &f).0, Stat::Stale as u32);
}

#[test]
fn handles_of_removed_objects_are_stale_without_a_search() {
    let d = Dir::new("gone");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let (_, f) = create(&e, &root, b"f", 1, 0);
    let (_, sub) = mkdir(&e, &root, b"sub");
    let (res, _) = call(&e, proc::REMOVE, &dirop(&root, b"f"));
    assert_eq!(status(&res), 0);
    let (res, _) = call(&e, proc::RMDIR, &dirop(&root, b"sub"));
    assert_eq!(status(&res), 0);
    let before = e.searches();
    assert_eq!(getattr(&e, &f.unwrap()).0, Stat::Stale as u32);
    assert_eq!(getattr(&e, &sub.unwrap()).0, Stat::Stale as u32);
    assert_eq!(
        e.searches(),
        before,
        "answered from what the server removed"
    );
}

#[test]
fn kept_directory_descriptors_never_answer_for_another_directory() {
    let d = Dir::new("kept");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let (_, sub) = mkdir(&e, &root, b"sub");
    let sub = sub.unwrap();
    let (_, f) = create(&e, &sub, b"f", 1, 0);
    let f = f.unwrap();
    let fid = getattr(&e, &f).1.unwrap().fileid;
    // Behind the server's back: `sub` moves away and a new `sub` takes its path, holding a
    // file of the same name. The kept descriptor of `sub` (the old one) still finds the
    // old file, which is the handle's object.
    std::fs::rename(d.export().join("sub"), d.export().join("moved")).unwrap();
    std::fs::create_dir(d.export().join("sub")).unwrap();
    std::fs::write(d.export().join("sub/f"), b"other").unwrap();
    assert_eq!(getattr(&e, &f).1.unwrap().fileid, fid);
    // A file created in the new `sub` (found by a LOOKUP through its path) resolves: a miss
    // in the kept descriptor looks again in the directory the path names now.
    let (s, found) = lookup(&e, &root, b"sub");
    assert_eq!(s, 0);
    let (new_sub, _) = found.unwrap();
    let (s, g) = lookup(&e, &new_sub, b"f");
    assert_eq!(s, 0);
    let (g, gattr) = g.unwrap();
    assert_ne!(gattr.fileid, fid);
    assert_eq!(getattr(&e, &g).1.unwrap().fileid, gattr.fileid);
    // The old file, removed behind the server's back with its directory: stale, not the
    // new file at its old path.
    std::fs::remove_dir_all(d.export().join("moved")).unwrap();
    assert_eq!(getattr(&e, &f).0, Stat::Stale as u32);
    // Through the server: a directory renamed, then another made at its old name; a file
    // created in each resolves to itself.
    let (_, a) = mkdir(&e, &root, b"a");
    let a = a.unwrap();
    let (_, fa) = create(&e, &a, b"x", 1, 0);
    let fa = fa.unwrap();
    let ren = args(|w| {
        w.put_opaque_var(&root, 64).unwrap();
        w.put_opaque_var(b"a", 1024).unwrap();
        w.put_opaque_var(&root, 64).unwrap();
        w.put_opaque_var(b"b", 1024).unwrap();
    });
    assert_eq!(status(&call(&e, proc::RENAME, &ren).0), 0);
    let (_, a2) = mkdir(&e, &root, b"a");
    let (_, fa2) = create(&e, &a2.unwrap(), b"x", 1, 0);
    let fa2 = fa2.unwrap();
    let (x1, x2) = (getattr(&e, &fa).1.unwrap(), getattr(&e, &fa2).1.unwrap());
    assert_ne!(x1.fileid, x2.fileid);
    assert!(d.export().join("b/x").exists() && d.export().join("a/x").exists());
}

#[test]
fn a_listing_continues_from_its_snapshot_while_the_directory_is_unchanged() {
    let d = Dir::new("snapshot");
    let e = d.open();
    std::fs::create_dir(d.export().join("many")).unwrap();
    for i in 0..300 {
        std::fs::write(d.export().join("many").join(format!("f{i:03}")), b"").unwrap();
    }
    let root = e.root_fh().as_bytes().to_vec();
    let (_, Some((many, _))) = lookup(&e, &root, b"many") else {
        panic!("many");
    };
    // Paged: every continuation is answered from the first page's snapshot.
    let reused = || e.listings.reused.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(list_all(&e, &many, 4096).len(), 300);
    let pages = reused();
    assert!(
        pages > 3,
        "{pages} continuations answered from the snapshot"
    );
    // A change between two pages: the continuation reads the directory again and finds
    // an entry made meanwhile past its cookie.
    let (first, verf, _) = readdirplus(&e, &many, 0, [0; 8], 4096);
    let mut cookie = first.last().expect("a first page").1;
    let late = (0..)
        .map(|i| format!("late{i}"))
        .find(|n| e.cookie(n.as_bytes()) > cookie)
        .unwrap();
    // Past the clock tick of the directory's last change: its times show this one even
    // where the kernel keeps coarse timestamps.
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(d.export().join("many").join(&late), b"").unwrap();
    let before = reused();
    let mut names = Vec::new();
    let mut eof = false;
    while !eof {
        let a = args(|w| {
            w.put_opaque_var(&many, 64).unwrap();
            w.put_u64(cookie).unwrap();
            w.put_opaque_fixed(&verf).unwrap();
            w.put_u32(1 << 19).unwrap();
            w.put_u32(1 << 20).unwrap();
        });
        let (res, _) = call(&e, proc::READDIR, &a);
        let mut r = XdrReader::new(&res);
        assert_eq!(r.u32().unwrap(), 0);
        assert!(r.bool().unwrap());
        r.skip(84).unwrap();
        crate::xdr::verf(&mut r).unwrap();
        while r.bool().unwrap() {
            r.u64().unwrap();
            names.push(r.string(255).unwrap().to_vec());
            cookie = r.u64().unwrap();
        }
        eof = r.bool().unwrap();
    }
    assert!(
        names.contains(&late.into_bytes()),
        "the entry made meanwhile"
    );
    assert_eq!(reused(), before, "the changed directory was read again");
}

#[test]
fn no_way_out_of_the_export() {
    let d = Dir::new("escape");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let root_id = getattr(&e, &root).1.unwrap().fileid;
    // `..` of the root is the root.
    let (s, up) = lookup(&e, &root, b"..");
    assert_eq!((s, up.unwrap().1.fileid), (0, root_id));
    let (_, sub) = mkdir(&e, &root, b"sub");
    let (s, up) = lookup(&e, &sub.unwrap(), b"..");
    assert_eq!((s, up.unwrap().1.fileid), (0, root_id));
    // A symbolic link out of the export is read, never followed.
    std::os::unix::fs::symlink("/etc", d.export().join("out")).unwrap();
    let (s, out) = lookup(&e, &root, b"out");
    let (out_fh, out_attr) = out.unwrap();
    assert_eq!((s, out_attr.ftype), (0, 5), "a link (NF3LNK)");
    let (res, _) = call(&e, proc::READLINK, &fh_arg(&out_fh));
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0);
    r.skip(4 + 84).unwrap();
    assert_eq!(r.string(4096).unwrap(), b"/etc");
    assert_eq!(lookup(&e, &out_fh, b"passwd").0, Stat::NotDir as u32);
    assert_eq!(read(&e, &out_fh, 0, 100).0, Stat::Inval as u32);
    assert_ne!(create(&e, &out_fh, b"x", 0, 0).0, 0);
    assert!(!Path::new("/etc/x").exists());
    // Names that would leave the directory or are not names are refused.
    for bad in [&b"a/b"[..], b".", b"..", b"", b"x\0y", &[b'n'; 256]] {
        assert_ne!(create(&e, &root, bad, 1, 0).0, 0, "{bad:?}");
        assert_ne!(mkdir(&e, &root, bad).0, 0, "{bad:?}");
    }
    assert_eq!(lookup(&e, &root, b"../etc").0, Stat::NoEnt as u32);
    let (res, _) = call(&e, proc::REMOVE, &dirop(&root, b".."));
    assert_eq!(status(&res), Stat::Inval as u32);
    let a = args(|w| {
        w.put_opaque_var(&root, 64).unwrap();
        w.put_opaque_var(b"sub", 1024).unwrap();
        w.put_opaque_var(&root, 64).unwrap();
        w.put_opaque_var(b"../moved", 1024).unwrap();
    });
    assert_eq!(status(&call(&e, proc::RENAME, &a).0), Stat::Inval as u32);
    assert!(d.export().join("sub").is_dir());
    // A hard link's name is checked like any other.
    let (_, f) = create(&e, &root, b"f", 1, 0);
    let a = args(|w| {
        w.put_opaque_var(&f.unwrap(), 64).unwrap();
        w.put_opaque_var(&root, 64).unwrap();
        w.put_opaque_var(b"../g", 1024).unwrap();
    });
    assert_eq!(status(&call(&e, proc::LINK, &a).0), Stat::Inval as u32);
    assert!(!d.0.join("g").exists());
}

#[test]
fn exclusive_create_is_idempotent_for_its_verifier_only() {
    let d = Dir::new("excl");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let (s1, a) = create(&e, &root, b"x", 2, 0x1122_3344_5566_7788);
    let (s2, b) = create(&e, &root, b"x", 2, 0x1122_3344_5566_7788);
    assert_eq!((s1, s2), (0, 0));
    assert_eq!(a, b, "a retransmission gets the same file");
    assert_eq!(create(&e, &root, b"x", 2, 99).0, Stat::Exist as u32);
    assert_eq!(
        create(&e, &root, b"x", 1, 0).0,
        Stat::Exist as u32,
        "GUARDED"
    );
    assert_eq!(create(&e, &root, b"x", 0, 0).0, 0, "UNCHECKED");
}

#[test]
fn unchecked_create_of_an_existing_file_keeps_its_owner_and_mode() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let d = Dir::new("unchecked");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let path = d.export().join("kept");
    std::fs::write(&path, b"contents").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = std::fs::metadata(&path).unwrap();
    // The caller (root) asks for mode 0644: it does not apply to the existing file.
    let (s, fh) = create(&e, &root, b"kept", 0, 0);
    assert_eq!(s, 0);
    assert!(fh.is_some());
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_eq!(after.permissions().mode() & 0o7777, 0o640);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"contents",
        "no size asked: not truncated"
    );
    // A new file is the caller's, with the mode asked for.
    let (s, _) = create(&e, &root, b"new", 0, 0);
    assert_eq!(s, 0);
    let m = std::fs::metadata(d.export().join("new")).unwrap();
    assert_eq!((m.uid(), m.permissions().mode() & 0o777), (0, 0o644));
    // A directory there is NFS3ERR_EXIST.
    std::fs::create_dir(d.export().join("dir")).unwrap();
    assert_eq!(create(&e, &root, b"dir", 0, 0).0, Stat::Exist as u32);
}

#[test]
fn read_write_commit() {
    let d = Dir::new("io");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let (_, f) = create(&e, &root, b"data", 1, 0);
    let f = f.unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let (s, committed, v1) = write(&e, &f, 0, &data[..200_000], 2);
    assert_eq!((s, committed), (0, 2), "FILE_SYNC");
    let (s, committed, v2) = write(&e, &f, 200_000, &data[200_000..], 0);
    assert_eq!((s, committed), (0, 0), "UNSTABLE");
    assert_eq!(v1, v2);
    assert_eq!(std::fs::read(d.export().join("data")).unwrap(), data);
    let (s, got, eof) = read(&e, &f, 100_000, 150_000);
    assert_eq!((s, eof), (0, false));
    assert_eq!(got, &data[100_000..250_000]);
    let (s, got, eof) = read(&e, &f, 250_000, 100_000);
    assert_eq!((s, got.len(), eof), (0, 50_000, true));
    let a = args(|w| {
        w.put_opaque_var(&f, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(0).unwrap();
    });
    let (res, _) = call(&e, proc::COMMIT, &a);
    assert_eq!(status(&res), 0);
    assert_eq!(&res[res.len() - 8..], &v1, "COMMIT's verifier is WRITE's");
    // A restart changes the write verifier.
    let e2 = d.open();
    assert_ne!(write(&e2, &f, 0, b"x", 2).2, v1);
    // Directories are not read.
    assert_eq!(read(&e, &root, 0, 10).0, Stat::IsDir as u32);
}

/// One READDIRPLUS page of `dir` from `cookie`: each entry's name, cookie and handle, the
/// cookie verifier and eof; the reply is at most `maxcount` bytes.
type Page = (Vec<(Vec<u8>, u64, Vec<u8>)>, [u8; 8], bool);

fn readdirplus(e: &Export, dir: &[u8], cookie: u64, verf: [u8; 8], maxcount: u32) -> Page {
    let a = args(|w| {
        w.put_opaque_var(dir, 64).unwrap();
        w.put_u64(cookie).unwrap();
        w.put_opaque_fixed(&verf).unwrap();
        w.put_u32(maxcount / 2).unwrap();
        w.put_u32(maxcount).unwrap();
    });
    let (res, _) = call(e, proc::READDIRPLUS, &a);
    assert!(res.len() <= maxcount as usize, "{} > {maxcount}", res.len());
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0);
    assert!(r.bool().unwrap());
    r.skip(84).unwrap();
    let verf = crate::xdr::verf(&mut r).unwrap();
    let mut entries = Vec::new();
    while r.bool().unwrap() {
        r.u64().unwrap();
        let name = r.string(255).unwrap().to_vec();
        let cookie = r.u64().unwrap();
        assert!(r.bool().unwrap());
        r.skip(84).unwrap();
        assert!(r.bool().unwrap());
        entries.push((name, cookie, r.opaque_var(64).unwrap().to_vec()));
    }
    (entries, verf, r.bool().unwrap())
}

/// Lists `dir` with READDIRPLUS in replies of at most `maxcount` bytes; every name.
/// Lists `dir` with READDIRPLUS in pages of `maxcount` bytes: every name but `.` and `..`,
/// which must come first, with cookies 1 and 2.
fn list_all(e: &Export, dir: &[u8], maxcount: u32) -> Vec<Vec<u8>> {
    let (mut cookie, mut verf, mut names, mut eof) = (0u64, [0u8; 8], Vec::new(), false);
    let mut first = true;
    while !eof {
        let (entries, v, end) = readdirplus(e, dir, cookie, verf, maxcount);
        assert!(end || !entries.is_empty(), "progress");
        if first {
            assert_eq!(entries[0].0, b".");
            assert_eq!(entries[0].1, 1);
            assert_eq!(entries[1].0, b"..");
            assert_eq!(entries[1].1, 2);
            first = false;
        }
        verf = v;
        eof = end;
        for (name, c, _) in entries {
            if name != b"." && name != b".." {
                names.push(name);
            }
            cookie = c;
        }
    }
    names
}

#[test]
fn directories_page_within_the_clients_counts() {
    let d = Dir::new("list");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    for i in 0..2500 {
        std::fs::write(d.export().join(format!("entry-{i:05}")), b"").unwrap();
    }
    let mut names = list_all(&e, &root, 8192);
    assert_eq!(names.len(), 2500);
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 2500, "each name once");
    // Too small for a single entry.
    let a = args(|w| {
        w.put_opaque_var(&root, 64).unwrap();
        w.put_u64(0).unwrap();
        w.put_u64(0).unwrap();
        w.put_u32(100).unwrap();
        w.put_u32(200).unwrap();
    });
    assert_eq!(
        status(&call(&e, proc::READDIRPLUS, &a).0),
        Stat::TooSmall as u32
    );
    // A cookie verifier this server never gave.
    let a = args(|w| {
        w.put_opaque_var(&root, 64).unwrap();
        w.put_u64(5).unwrap();
        w.put_u64(0xdead).unwrap();
        w.put_u32(4096).unwrap();
    });
    assert_eq!(
        status(&call(&e, proc::READDIR, &a).0),
        Stat::BadCookie as u32
    );
}

#[test]
fn hostile_arguments_never_panic() {
    let d = Dir::new("fuzz");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let (_, f) = create(&e, &root, b"f", 1, 0);
    let f = f.unwrap();
    let mut seed = 0x1234_5678_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut res = vec![0u8; 1 << 20];
    let mut bulk = vec![0u8; 1 << 20];
    for p in 0..24u32 {
        for _ in 0..300 {
            // A valid handle, then random words of random length; or random bytes.
            let mut a = if next() % 2 == 0 {
                fh_arg(&f)
            } else {
                fh_arg(&root)
            };
            for _ in 0..(next() % 12) {
                a.extend_from_slice(&((next() % 300) as u32).to_be_bytes());
            }
            if next() % 3 == 0 {
                a.truncate((next() % (a.len() as u64 + 1)) as usize);
            }
            let _ = run(&e, &Caller::root(), p, &a, &mut res, Some(&mut bulk));
        }
    }
}

/// GETATTR, ACCESS or LOOKUP on the worker's cached reach: its results, or `None` when it
/// deferred to the pool.
fn call_cached(e: &Export, p: u32, a: &[u8]) -> Option<Vec<u8>> {
    let mut res = vec![0u8; super::max_results(p, &CONFIG) as usize];
    let done = run_cached(e, &Caller::root(), p, a, &mut res)?.expect("decodes");
    res.truncate(done.results_len);
    Some(res)
}

#[test]
fn the_workers_cached_reach_answers_as_the_pool_does_or_defers() {
    let d = Dir::new("cached");
    std::fs::create_dir(d.export().join("sub")).unwrap();
    std::fs::write(d.export().join("sub/f"), b"data").unwrap();
    std::os::unix::fs::symlink("/etc", d.export().join("sub/out")).unwrap();
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    // Warm: the pool's reach first, so that every object is in the kernel's caches.
    let (_, sub) = lookup(&e, &root, b"sub");
    let sub = sub.unwrap().0;
    let (_, f) = lookup(&e, &sub, b"f");
    let f = f.unwrap().0;
    let (_, out) = lookup(&e, &sub, b"out");
    let out = out.unwrap().0;
    // A kernel without RESOLVE_CACHED (before 5.12) defers everything: the pool answers.
    let Some(first) = call_cached(&e, proc::GETATTR, &fh_arg(&root)) else {
        assert!(call_cached(&e, proc::LOOKUP, &dirop(&root, b"sub")).is_none());
        eprintln!("openat2 RESOLVE_CACHED is not supported here: everything deferred");
        return;
    };
    assert_eq!(first, call(&e, proc::GETATTR, &fh_arg(&root)).0);
    // The same bytes as the pool's, for every cached object and the link (never followed).
    for (p, a) in [
        (proc::GETATTR, fh_arg(&sub)),
        (proc::GETATTR, fh_arg(&f)),
        (proc::GETATTR, fh_arg(&out)),
        (proc::LOOKUP, dirop(&root, b"sub")),
        (proc::LOOKUP, dirop(&sub, b"f")),
        (proc::LOOKUP, dirop(&sub, b"out")),
        (proc::LOOKUP, dirop(&sub, b"..")),
        (proc::LOOKUP, dirop(&root, b"..")),
        (proc::LOOKUP, dirop(&root, b".")),
        (proc::LOOKUP, dirop(&root, b"a/b")),
        (
            proc::ACCESS,
            args(|w| {
                w.put_opaque_var(&f, 64).unwrap();
                w.put_u32(0x3f).unwrap();
            }),
        ),
    ] {
        let cached = call_cached(&e, p, &a).unwrap_or_else(|| panic!("proc {p} deferred"));
        assert_eq!(cached, call(&e, p, &a).0, "proc {p}");
    }
    let (s, attr) = getattr(&e, &out);
    assert_eq!((s, attr.unwrap().ftype), (0, 5), "the link itself (NF3LNK)");
    // Through a link: NOTDIR, never followed.
    let through = call_cached(&e, proc::LOOKUP, &dirop(&out, b"passwd"));
    assert_eq!(through.map(|r| status(&r)), Some(Stat::NotDir as u32));
    // A name the kernel knows is not there: NOENT from the cache, or deferred; never found.
    let missing = dirop(&sub, b"missing");
    let _ = call(&e, proc::LOOKUP, &missing);
    if let Some(r) = call_cached(&e, proc::LOOKUP, &missing) {
        assert_eq!(status(&r), Stat::NoEnt as u32);
    }
    // A forged handle: BADHANDLE at once.
    let mut forged = f.clone();
    forged[10] ^= 1;
    let r = call_cached(&e, proc::GETATTR, &fh_arg(&forged)).expect("answered");
    assert_eq!(status(&r), Stat::BadHandle as u32);
    // A valid handle the path cache does not know (a restarted server): the pool searches.
    let fresh = d.open();
    assert!(call_cached(&fresh, proc::GETATTR, &fh_arg(&f)).is_none());
    assert_eq!(getattr(&fresh, &f).0, 0);
    assert!(call_cached(&fresh, proc::GETATTR, &fh_arg(&f)).is_some());
    // Removed behind the server's back: deferred (the pool answers STALE), never wrong.
    std::fs::remove_file(d.export().join("sub/f")).unwrap();
    assert!(call_cached(&e, proc::GETATTR, &fh_arg(&f)).is_none());
    assert_eq!(getattr(&e, &f).0, Stat::Stale as u32);
    // Other procedures never run there.
    assert!(call_cached(&e, proc::READ, &fh_arg(&root)).is_none());
}

/// Not a test: the cost of listing 2,000 entries with READDIRPLUS in replies of about the
/// kernel client's size (`cargo test --release --example nfs3d listing_cost -- --ignored
/// --nocapture`), for profiling.
#[test]
#[ignore]
fn listing_cost() {
    let d = Dir::new("cost");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    for i in 0..2000 {
        std::fs::write(d.export().join(format!("entry-{i:05}")), b"").unwrap();
    }
    let rounds = 200;
    let t0 = std::time::Instant::now();
    for _ in 0..rounds {
        assert_eq!(list_all(&e, &root, 128 * 1024).len(), 2000);
    }
    let per = t0.elapsed() / rounds;
    println!(
        "listing of 2000 entries: {per:?} ({:?} per entry)",
        per / 2000
    );
}

/// Lists `dir` with READDIRPLUS in one reply: each entry's name and handle, by name.
fn list_handles(e: &Export, dir: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (entries, _, eof) = readdirplus(e, dir, 0, [0; 8], 64 * 1024);
    assert!(eof, "one reply holds them all");
    let mut out: Vec<_> = entries
        .into_iter()
        .filter(|(n, _, _)| n != b"." && n != b"..")
        .map(|(n, _, fh)| (n, fh))
        .collect();
    out.sort();
    out
}

/// A listing remembers where the objects it names are: their handles resolve without a
/// search of the export, for objects the server had never seen and after a rename behind
/// its back (the next listing remembers the new name).
#[test]
fn listed_handles_resolve_without_a_search() {
    let d = Dir::new("listed");
    let e = d.open();
    let root = e.root_fh().as_bytes().to_vec();
    let (_, sub) = mkdir(&e, &root, b"sub");
    let sub = sub.unwrap();
    for n in ["x", "y", "z"] {
        std::fs::write(d.export().join("sub").join(n), n).unwrap();
    }
    let before = e.searches();
    let listed = list_handles(&e, &sub);
    assert_eq!(listed.len(), 3);
    for (name, fh) in &listed {
        assert_eq!(getattr(&e, fh).0, 0, "{name:?}");
    }
    assert_eq!(e.searches(), before, "every listed handle was remembered");
    std::fs::rename(d.export().join("sub/x"), d.export().join("sub/w")).unwrap();
    let again = list_handles(&e, &sub);
    let names: Vec<&[u8]> = again.iter().map(|(n, _)| n.as_slice()).collect();
    assert_eq!(names, [b"w".as_slice(), b"y", b"z"]);
    assert_eq!(again[0].1, listed[0].1, "the same object, the same handle");
    let (st, attr) = getattr(&e, &again[0].1);
    assert_eq!((st, attr.map(|a| a.size)), (0, Some(1)));
    assert_eq!(e.searches(), before, "the new name was remembered");
}

/// The cost of resolving a handle right after a restart, on an export of
/// `NFS3D_RESOLVE_FILES` files (default 1,000,000, in 1,000 directories, on /dev/shm):
/// by the kernel's handle (what `resolve` does) against a search of the export (what it
/// did before handles were the kernel's). A measurement, not a check of time (`cargo test
/// --release --example nfs3d resolve_after_restart_cost -- --ignored --nocapture`).
#[test]
#[ignore]
fn resolve_after_restart_cost() {
    let n: usize = std::env::var("NFS3D_RESOLVE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let base = Path::new("/dev/shm").join(format!("nfs3d-resolve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let export = base.join("export");
    let per_dir = 1000;
    let dirs = n.div_ceil(per_dir);
    let t0 = std::time::Instant::now();
    for d in 0..dirs {
        let dir = export.join(format!("d{d:04}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir.min(n - d * per_dir) {
            std::fs::File::create(dir.join(format!("f{f:04}"))).unwrap();
        }
    }
    println!("made {n} files in {dirs} directories in {:?}", t0.elapsed());
    let state = base.join("state");
    // Files spread over the export: the first and last directories made, and between.
    let picks: Vec<(String, String)> = [0, dirs / 4, dirs / 2, 3 * dirs / 4, dirs - 1]
        .iter()
        .map(|&d| (format!("d{d:04}"), format!("f{:04}", per_dir.min(n) / 2)))
        .collect();
    let handles: Vec<Vec<u8>> = {
        let e = Export::open(&export, &state, CONFIG).unwrap();
        let root = e.root_fh().as_bytes().to_vec();
        picks
            .iter()
            .map(|(d, f)| {
                let (_, Some((d, _))) = lookup(&e, &root, d.as_bytes()) else {
                    panic!("{d}");
                };
                let (_, Some((f, _))) = lookup(&e, &d, f.as_bytes()) else {
                    panic!("{f}");
                };
                f
            })
            .collect()
    };
    // A restart: a new server, nothing in its caches.
    let e = Export::open(&export, &state, CONFIG).unwrap();
    for ((d, f), fh) in picks.iter().zip(&handles) {
        let t = std::time::Instant::now();
        let (s, _) = getattr(&e, fh);
        let by_handle = t.elapsed();
        assert_eq!(s, 0);
        let (id, _) = e.key.open(fh, e.root_id.dev).unwrap();
        let t = std::time::Instant::now();
        let found = e.search(id);
        let searched = t.elapsed();
        println!(
            "{n} files, {d}/{f}: first GETATTR after a restart {by_handle:?} (by kernel \
             handle); a search of the export {searched:?}{}",
            if found.is_some() {
                ""
            } else {
                " and gave up (its bound: NFS3ERR_STALE)"
            }
        );
    }
    assert_eq!(
        (e.opened_by_handle(), e.searches()),
        (picks.len() as u64, 0)
    );
    std::fs::remove_dir_all(&base).unwrap();
}
