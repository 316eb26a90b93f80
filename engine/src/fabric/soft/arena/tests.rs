//! The arena's tests: the span allocator, zeroed regions, key resolution, and a window's
//! bind and invalidation.

use super::spans::SpanAlloc;
use super::*;
use crate::fabric::Access;

fn domain() -> Domain {
    Domain::create(1 << 20, 64, 7).unwrap()
}

#[test]
fn span_allocator_coalesces() {
    let mut a = SpanAlloc {
        free: vec![(0, 40)],
        fresh_from: 0,
    };
    let x = a.alloc(10).unwrap();
    let y = a.alloc(10).unwrap();
    let z = a.alloc(10).unwrap();
    assert_eq!((x, y, z), ((0, 0), (10, 0), (20, 0)), "all fresh");
    a.release(y.0, 10);
    a.release(x.0, 10);
    a.release(z.0, 10);
    assert_eq!(a.free, vec![(0, 40)]);
    assert_eq!(a.alloc(41), None);
    // Handed out again: the 30 bytes used before must be zeroed, the last 5 need not.
    assert_eq!(a.alloc(35), Some((0, 30)));
    a.release(0, 35);
    assert_eq!(a.alloc(5), Some((0, 5)));
    assert_eq!(a.alloc(20), Some((5, 20)));
    assert_eq!(a.alloc(15), Some((25, 10)));
}

/// A region handed out again reads as zero, whatever the one before it held; a fresh
/// one reads as zero without being written.
#[test]
fn regions_read_as_zero() {
    let d = domain();
    let access = Access::LOCAL_WRITE;
    let r = d.alloc_region(3 * PAGE, access).unwrap();
    let p = d.view().map.mapping().span(r.off, 3 * PAGE as u64).unwrap();
    // SAFETY: the region's span, owned by this test.
    unsafe { std::ptr::write_bytes(p, 0xab, 3 * PAGE) };
    d.free_region(r.index, r.key, r.off, 3 * PAGE);
    let again = d.alloc_region(4 * PAGE, access).unwrap();
    assert_eq!(again.off, r.off, "the same memory, first fit");
    let q = d
        .view()
        .map
        .mapping()
        .span(again.off, 4 * PAGE as u64)
        .unwrap();
    // SAFETY: as above.
    let bytes = unsafe { std::slice::from_raw_parts(q, 4 * PAGE) };
    assert!(bytes.iter().all(|&b| b == 0));
}

#[test]
fn region_keys_resolve_and_check() {
    let d = domain();
    let r = d
        .alloc_region(100, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let v = d.view();
    assert!(v
        .resolve_local(r.key, r.va, 100, Access::LOCAL_WRITE)
        .is_ok());
    assert!(
        v.resolve_local(r.key, r.va + 1, 100, Access::NONE).is_err(),
        "past the end"
    );
    assert!(
        v.resolve_local(r.key ^ 1, r.va, 1, Access::NONE).is_err(),
        "stale key"
    );
    assert!(v
        .resolve_remote(r.key, r.va, 8, Access::REMOTE_READ, 0)
        .is_ok());
    assert!(v
        .resolve_remote(r.key, r.va, 8, Access::REMOTE_WRITE, 0)
        .is_err());
    assert!(
        v.invalidate(r.key).is_err(),
        "regions cannot be invalidated"
    );
    d.free_region(r.index, r.key, r.off, 100);
    assert!(v.resolve_local(r.key, r.va, 1, Access::NONE).is_err());
    let again = d.alloc_region(100, Access::LOCAL_WRITE).unwrap();
    assert_eq!(again.index, r.index);
    assert_ne!(again.key, r.key, "a reused entry gets a new key");
}

#[test]
fn window_bind_invalidate_cycle() {
    let d = domain();
    let r = d
        .alloc_region(8192, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let (mw, key) = d.alloc_window().unwrap();
    let req = BindReq {
        mw_index: mw,
        mw_rkey: key,
        new_rkey: key + 1,
        mr_lkey: r.key,
        addr: r.va + 4096,
        len: 100,
        access: Access::REMOTE_WRITE,
        qp_num: 9,
    };
    let k1 = d.bind(&req).unwrap();
    assert_eq!(k1 >> 8, key >> 8);
    let v = d.view();
    assert!(v
        .resolve_remote(k1, r.va + 4096, 100, Access::REMOTE_WRITE, 9)
        .is_ok());
    assert!(
        v.resolve_remote(k1, r.va + 4096, 100, Access::REMOTE_WRITE, 8)
            .is_err(),
        "other qp"
    );
    assert!(
        v.resolve_remote(k1, r.va + 4096, 101, Access::REMOTE_WRITE, 9)
            .is_err(),
        "bounds"
    );
    assert!(
        v.resolve_remote(k1, r.va + 4096, 1, Access::REMOTE_READ, 9)
            .is_err(),
        "rights"
    );
    assert!(
        d.bind(&BindReq { mw_rkey: k1, ..req }).is_err(),
        "type 2 rebind while bound"
    );
    v.invalidate(k1).unwrap();
    assert!(v.invalidate(k1).is_err(), "second invalidation");
    assert!(v
        .resolve_remote(k1, r.va + 4096, 1, Access::REMOTE_WRITE, 9)
        .is_err());
    d.free_region(r.index, r.key, r.off, 8192);
    d.free_window(mw);
}
