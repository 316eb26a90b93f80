//! Device contexts: finding and opening devices (`ibv_get_device_list`,
//! `rdma_get_devices`), their attributes, and the provider's function table (`Ops`) that the
//! hot path calls. Every object of a device holds its `Context`; this floor takes only
//! the system helpers and the monitor from below.

use std::ffi::CStr;
use std::ptr;

use rdma_sys::*;

use super::monitor::monitor;
use super::sys::{clear_errno, errno, os_err};
use crate::fabric::{DeviceAttr, FabricError};

/// `ibv_post_send` as the provider implements it.
pub(super) type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> i32;
/// `ibv_post_recv` as the provider implements it.
pub(super) type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32;
/// `ibv_post_srq_recv` as the provider implements it.
pub(super) type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32;
/// `ibv_poll_cq` as the provider implements it.
pub(super) type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, i32, *mut ibv_wc) -> i32;
/// `ibv_alloc_mw` as the provider implements it.
pub(super) type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type::Type) -> *mut ibv_mw;
/// `ibv_dealloc_mw` as the provider implements it.
pub(super) type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> i32;

/// The provider operations behind rdma-sys's inline verbs, taken once from the context so
/// that the hot path calls them directly instead of unwrapping an `Option` each time (the
/// inline wrappers panic when an operation is missing).
#[derive(Clone, Copy)]
pub(super) struct Ops {
    pub(super) post_send: PostSendFn,
    pub(super) post_recv: PostRecvFn,
    pub(super) poll_cq: PollCqFn,
    /// None: the provider has no shared receive queues.
    pub(super) post_srq_recv: Option<PostSrqRecvFn>,
    pub(super) alloc_mw: Option<AllocMwFn>,
    pub(super) dealloc_mw: Option<DeallocMwFn>,
}

/// Which memory windows a device supports (`device_cap_flags`, `max_mw`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MwSupport {
    /// Type 1 windows (`IBV_DEVICE_MEM_WINDOW`).
    pub type1: bool,
    /// Type 2A windows (`IBV_DEVICE_MEM_WINDOW_TYPE_2A`).
    pub type2a: bool,
    /// Type 2B windows (`IBV_DEVICE_MEM_WINDOW_TYPE_2B`), the kind this engine binds.
    pub type2b: bool,
    /// Most windows the device holds (`max_mw`).
    pub max_mw: u32,
}

impl MwSupport {
    /// Whether the engine can use windows on the device: type 2 supported and some allowed.
    pub fn usable(&self) -> bool {
        (self.type2a || self.type2b) && self.max_mw > 0
    }

    pub(super) fn from_attr(a: &ibv_device_attr) -> MwSupport {
        let caps = a.device_cap_flags;
        let has = |f: ibv_device_cap_flags| caps & f.0 != 0;
        MwSupport {
            type1: has(ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW),
            type2a: has(ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A),
            type2b: has(ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B),
            max_mw: a.max_mw.max(0) as u32,
        }
    }
}

/// The vendor id of soft-RoCE (rxe) devices.
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;
/// The kernel's `IB_WC_WITH_INVALIDATE`, which rxe reports in user-space completions.
const RXE_KERNEL_WITH_INVALIDATE: u32 = 1 << 2;

/// An open device context and what was learnt about it at open time.
pub(super) struct Context {
    pub(super) ctx: *mut ibv_context,
    /// The array `rdma_get_devices` returned, when the context is rdma_cm's own (it is
    /// released on drop, never the context itself); null when this handle opened the
    /// context with `ibv_open_device` and closes it on drop.
    cm_list: *mut *mut ibv_context,
    pub(super) name: String,
    pub(super) attr: DeviceAttr,
    pub(super) mw: MwSupport,
    /// `max_qp_rd_atom`: RDMA Reads this side may answer at once per queue pair.
    pub(super) max_qp_rd_atom: u8,
    /// `max_qp_init_rd_atom`: RDMA Reads this side may have outstanding per queue pair.
    pub(super) max_qp_init_rd_atom: u8,
    /// `max_srq_sge`: scatter elements of a shared receive queue's receive.
    pub(super) max_srq_sge: u32,
    pub(super) ops: Ops,
    /// The `wc_flags` bits that mean "the completion carries an invalidated rkey". Normally
    /// `IBV_WC_WITH_INV`; soft-RoCE (rxe, vendor 0xffffff) copies the kernel's
    /// `ib_wc_flags` to user space unchanged, where `IB_WC_WITH_INVALIDATE` is bit 2
    /// (seen on Linux 6.1 with rdma-core 44: a Send With Invalidate arrives with flags 0x5).
    pub(super) with_inv_flags: u32,
    /// Whether the monitor watches the context's asynchronous events for this handle.
    watched: bool,
}

// SAFETY: an ibv_context is usable from any thread (libibverbs serialises what needs it);
// the other fields are plain values fixed at open time.
unsafe impl Send for Context {}
// SAFETY: as above; `&Context` only reads the fields and passes the context to
// thread-safe verbs.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        if self.watched {
            if let Some(m) = monitor() {
                m.unwatch_context(self.ctx);
            }
        }
        if self.cm_list.is_null() {
            // SAFETY: we opened the context with ibv_open_device and every object made
            // from it holds an Arc of this Context, so none is left.
            unsafe { ibv_close_device(self.ctx) };
        } else {
            // SAFETY: the list came from rdma_get_devices and is released once; librdmacm
            // keeps the context open for its ids.
            unsafe { rdma_free_devices(self.cm_list) };
        }
    }
}

/// Why no device could be listed: `ibv_get_device_list` returned NULL (errno, usually
/// ENOSYS when the kernel has no RDMA support) or an empty list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum NoDevices {
    /// `ibv_get_device_list` returned NULL with this errno.
    ListFailed(i32),
    /// The list was empty.
    Empty,
}

/// The device list of libibverbs, freed on drop.
pub(super) struct RawDeviceList {
    list: *mut *mut ibv_device,
    len: usize,
}

impl RawDeviceList {
    /// `ibv_get_device_list`; NULL (no RDMA in the kernel: ENOSYS) and an empty list are
    /// both "no devices".
    pub(super) fn get() -> Result<RawDeviceList, NoDevices> {
        let mut n: i32 = 0;
        clear_errno();
        // SAFETY: `n` is a valid out-parameter for the duration of the call.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(NoDevices::ListFailed(errno()));
        }
        let dl = RawDeviceList {
            list,
            len: n.max(0) as usize,
        };
        if dl.len == 0 {
            return Err(NoDevices::Empty);
        }
        Ok(dl)
    }

    /// The devices, in libibverbs's order.
    pub(super) fn iter(&self) -> impl Iterator<Item = *mut ibv_device> + '_ {
        // SAFETY: the list holds `len` valid device pointers while `self` lives.
        (0..self.len).map(move |i| unsafe { *self.list.add(i) })
    }
}

impl Drop for RawDeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once; contexts
        // opened from its devices stay valid (libibverbs reference-counts devices).
        unsafe { ibv_free_device_list(self.list) };
    }
}

/// The name of a device (`ibv_get_device_name`).
pub(super) fn device_name(dev: *mut ibv_device) -> String {
    // SAFETY: `dev` is a valid device of a live list; the name is a NUL-terminated string
    // inside the device structure.
    let p = unsafe { ibv_get_device_name(dev) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated, lives as long as the device.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `ibv_query_device`.
pub(super) fn query_device(ctx: *mut ibv_context) -> Result<ibv_device_attr, FabricError> {
    // SAFETY: plain old data; all zeroes is valid and the call overwrites it.
    let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is an open context; `attr` is a valid out-parameter.
    let rc = unsafe { ibv_query_device(ctx, &mut attr) };
    if rc != 0 {
        return Err(os_err("ibv_query_device", rc));
    }
    Ok(attr)
}

/// `ibv_query_port` (through rdma-sys's `___ibv_query_port`, which checks for the
/// extended operation and falls back to the compatible one).
pub(super) fn query_port(ctx: *mut ibv_context, port: u8) -> Result<ibv_port_attr, FabricError> {
    // SAFETY: plain old data; all zeroes is valid and the call overwrites it.
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is an open context; `attr` is a valid out-parameter of the full size;
    // the wrapper calls the extended query only if the provider has it.
    let rc = unsafe { ___ibv_query_port(ctx, port, &mut attr) };
    if rc != 0 {
        return Err(os_err("ibv_query_port", rc));
    }
    Ok(attr)
}

/// The provider operations of an open context, if the hot-path ones exist.
fn ops_of(ctx: *mut ibv_context) -> Result<Ops, FabricError> {
    // SAFETY: `ctx` is an open context; its ops table is filled by the provider at open
    // time and not changed afterwards.
    let ops = unsafe { &(*ctx).ops };
    let missing = |op: &'static str| FabricError::Os {
        call: op,
        errno: libc::EOPNOTSUPP,
    };
    Ok(Ops {
        post_send: ops.post_send.ok_or_else(|| missing("ibv_post_send"))?,
        post_recv: ops.post_recv.ok_or_else(|| missing("ibv_post_recv"))?,
        poll_cq: ops.poll_cq.ok_or_else(|| missing("ibv_poll_cq"))?,
        post_srq_recv: ops.post_srq_recv,
        alloc_mw: ops.alloc_mw,
        dealloc_mw: ops.dealloc_mw,
    })
}

/// The largest inline payload an RC queue pair of the device accepts, found by creating
/// queue pairs: libibverbs has no attribute for it. 0 if even a small one fails.
pub(super) fn probe_max_inline(ctx: *mut ibv_context) -> u32 {
    // SAFETY: `ctx` is an open context.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    if pd.is_null() {
        return 0;
    }
    // SAFETY: as above; no channel, vector 0.
    let cq = unsafe { ibv_create_cq(ctx, 4, ptr::null_mut(), ptr::null_mut(), 0) };
    if cq.is_null() {
        // SAFETY: `pd` was just allocated and nothing uses it.
        unsafe { ibv_dealloc_pd(pd) };
        return 0;
    }
    let try_inline = |want: u32| -> Option<u32> {
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: want,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: `pd` and `cq` are live objects of this context; `init` is valid for the
        // call and receives the granted capacities.
        let qp = unsafe { ibv_create_qp(pd, &mut init) };
        if qp.is_null() {
            return None;
        }
        // SAFETY: the queue pair was just created and is not used by anything else.
        unsafe { ibv_destroy_qp(qp) };
        Some(init.cap.max_inline_data.max(want))
    };
    let mut best = 0;
    if let Some(got) = try_inline(4096) {
        best = got;
    } else {
        // Largest accepted value in [0, 4096): binary search.
        let (mut lo, mut hi) = (0u32, 4096u32);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            match try_inline(mid) {
                Some(got) => {
                    best = best.max(got);
                    lo = mid;
                }
                None => hi = mid,
            }
        }
        if best == 0 {
            best = try_inline(0).unwrap_or(0);
        }
    }
    // SAFETY: every queue pair on them was destroyed above.
    unsafe {
        ibv_destroy_cq(cq);
        ibv_dealloc_pd(pd);
    }
    best
}

impl Context {
    fn new(ctx: *mut ibv_context, cm_list: *mut *mut ibv_context) -> Result<Context, FabricError> {
        // A context that fails below must still be released: build the handle first.
        let mut c = Context {
            ctx,
            cm_list,
            name: String::new(),
            attr: DeviceAttr {
                max_qp_wr: 0,
                max_sge: 0,
                max_cqe: 0,
                max_inline_data: 0,
                max_msg_sz: 0,
                max_mr_size: 0,
                max_srq_wr: 0,
            },
            mw: MwSupport::default(),
            max_qp_rd_atom: 0,
            max_qp_init_rd_atom: 0,
            max_srq_sge: 0,
            ops: Ops {
                post_send: unsupported_post_send,
                post_recv: unsupported_post_recv,
                poll_cq: unsupported_poll_cq,
                post_srq_recv: None,
                alloc_mw: None,
                dealloc_mw: None,
            },
            with_inv_flags: ibv_wc_flags::IBV_WC_WITH_INV.0,
            watched: false,
        };
        // SAFETY: `ctx` is open; its device pointer is valid while it is.
        c.name = device_name(unsafe { (*ctx).device });
        c.ops = ops_of(ctx)?;
        let a = query_device(ctx)?;
        let mut max_msg_sz = u64::MAX;
        for port in 1..=a.phys_port_cnt.max(1) {
            if let Ok(p) = query_port(ctx, port) {
                max_msg_sz = max_msg_sz.min(u64::from(p.max_msg_sz));
            }
        }
        if max_msg_sz == u64::MAX {
            max_msg_sz = 0;
        }
        c.attr = DeviceAttr {
            max_qp_wr: a.max_qp_wr.max(0) as u32,
            max_sge: a.max_sge.max(0) as u32,
            max_cqe: a.max_cqe.max(0) as u32,
            max_inline_data: probe_max_inline(ctx),
            max_msg_sz,
            max_mr_size: a.max_mr_size,
            // 0 when the provider cannot post to one.
            max_srq_wr: if c.ops.post_srq_recv.is_some() {
                a.max_srq_wr.max(0) as u32
            } else {
                0
            },
        };
        c.mw = MwSupport::from_attr(&a);
        if a.vendor_id == RXE_VENDOR_ID {
            c.with_inv_flags |= RXE_KERNEL_WITH_INVALIDATE;
        }
        c.max_qp_rd_atom = a.max_qp_rd_atom.clamp(0, 255) as u8;
        c.max_qp_init_rd_atom = a.max_qp_init_rd_atom.clamp(0, 255) as u8;
        c.max_srq_sge = a.max_srq_sge.max(0) as u32;
        if let Some(m) = monitor() {
            c.watched = m.watch_context(ctx);
        }
        Ok(c)
    }

    /// Opens the device called `name` (or the first), preferring rdma_cm's own context so
    /// that queue pairs created through rdma_cm may use its protection domains; falls back
    /// to `ibv_open_device` when rdma_cm is not available (then only connection setup
    /// fails).
    pub(super) fn open(name: Option<&str>) -> Result<Context, FabricError> {
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-parameter for the call.
        let list = unsafe { rdma_get_devices(&mut n) };
        if !list.is_null() {
            let mut found = ptr::null_mut();
            for i in 0..n.max(0) as usize {
                // SAFETY: the list holds `n` valid contexts.
                let ctx = unsafe { *list.add(i) };
                if ctx.is_null() {
                    continue;
                }
                // SAFETY: an open context's device pointer is valid.
                let dname = device_name(unsafe { (*ctx).device });
                if name.is_none() || name == Some(dname.as_str()) {
                    found = ctx;
                    break;
                }
            }
            if !found.is_null() {
                return Context::new(found, list);
            }
            // SAFETY: the list came from rdma_get_devices and is released once.
            unsafe { rdma_free_devices(list) };
        }
        let devices = RawDeviceList::get().map_err(|_| FabricError::NoDevice)?;
        let dev = devices
            .iter()
            .find(|&d| name.is_none() || name == Some(device_name(d).as_str()))
            .ok_or(FabricError::NoDevice)?;
        // SAFETY: `dev` is a valid device of a live list.
        let ctx = unsafe { ibv_open_device(dev) };
        if ctx.is_null() {
            return Err(FabricError::last_os("ibv_open_device"));
        }
        Context::new(ctx, ptr::null_mut())
    }
}

unsafe extern "C" fn unsupported_post_send(
    _: *mut ibv_qp,
    _: *mut ibv_send_wr,
    _: *mut *mut ibv_send_wr,
) -> i32 {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn unsupported_post_recv(
    _: *mut ibv_qp,
    _: *mut ibv_recv_wr,
    _: *mut *mut ibv_recv_wr,
) -> i32 {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn unsupported_poll_cq(_: *mut ibv_cq, _: i32, _: *mut ibv_wc) -> i32 {
    -libc::EOPNOTSUPP
}
