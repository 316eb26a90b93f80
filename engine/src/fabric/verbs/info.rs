//! Device listing for people: every device with its ports, GIDs and limits
//! (`rpcrdma devices`). Uses libibverbs only, so it works where rdma_cm does not.

use std::ffi::CStr;
use std::net::Ipv6Addr;

use rdma_sys::*;

use super::context::{
    device_name, probe_max_inline, query_device, query_port, MwSupport, NoDevices, RawDeviceList,
};

/// The devices found, or why there are none.
#[derive(Clone, Debug, Default)]
pub struct DeviceList {
    /// The devices, in libibverbs's order.
    pub devices: Vec<DeviceInfo>,
    /// Why the list is empty, when it is.
    pub reason: Option<String>,
}

/// One device.
#[derive(Clone, Debug, Default)]
pub struct DeviceInfo {
    /// Device name (`ibv_get_device_name`), e.g. `rxe0`, `mlx5_0`.
    pub name: String,
    /// Node type (`ibv_node_type_str`), e.g. `CA` or `RNIC`.
    pub node_type: String,
    /// Node GUID, as `ibv_devinfo` prints it.
    pub node_guid: String,
    /// Firmware version.
    pub fw_ver: String,
    /// Vendor id (IEEE OUI).
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// The device's ports.
    pub ports: Vec<PortInfo>,
    /// The limits that matter to this engine.
    pub limits: Limits,
    /// Why the device could not be opened or queried, if it could not.
    pub error: Option<String>,
}

/// One port of a device.
#[derive(Clone, Debug, Default)]
pub struct PortInfo {
    /// Port number (from 1).
    pub port: u8,
    /// Logical state, e.g. `PORT_ACTIVE`.
    pub state: &'static str,
    /// Physical state, e.g. `LINK_UP`.
    pub phys_state: &'static str,
    /// `InfiniBand`, `Ethernet` (RoCE) or `Unspecified`.
    pub link_layer: &'static str,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Largest MTU in bytes.
    pub max_mtu: u32,
    /// Local identifier (InfiniBand only).
    pub lid: u16,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Size of the GID table.
    pub gid_tbl_len: u32,
    /// Non-empty GID table entries.
    pub gids: Vec<GidInfo>,
}

/// One GID table entry.
#[derive(Clone, Debug, Default)]
pub struct GidInfo {
    /// Index in the port's table (the `sgid_index` of address vectors).
    pub index: u32,
    /// The GID, written as an IPv6 address (RoCE GIDs are IP addresses).
    pub gid: String,
    /// `IB/RoCE v1` or `RoCE v2`, from sysfs, if known.
    pub gid_type: Option<String>,
    /// The network device of a RoCE GID, from sysfs, if known.
    pub netdev: Option<String>,
}

/// Device limits (from `ibv_query_device`, plus the probed inline size).
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// Queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Scatter-gather elements per work request.
    pub max_sge: u32,
    /// Scatter-gather elements per RDMA Read.
    pub max_sge_rd: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Bytes per memory region.
    pub max_mr_size: u64,
    /// Protection domains.
    pub max_pd: u32,
    /// RDMA Reads a queue pair answers at once.
    pub max_qp_rd_atom: u32,
    /// RDMA Reads a queue pair initiates at once.
    pub max_qp_init_rd_atom: u32,
    /// Largest inline payload of an RC queue pair (probed by creating queue pairs), if the
    /// probe could run.
    pub max_inline_data: Option<u32>,
    /// Memory window support.
    pub mw: MwSupport,
    /// Atomic operations: `NONE`, `HCA` or `GLOB`.
    pub atomic_cap: &'static str,
}

fn port_state(s: u32) -> &'static str {
    match s {
        0 => "PORT_NOP",
        1 => "PORT_DOWN",
        2 => "PORT_INIT",
        3 => "PORT_ARMED",
        4 => "PORT_ACTIVE",
        5 => "PORT_ACTIVE_DEFER",
        _ => "PORT_UNKNOWN",
    }
}

fn phys_state(s: u8) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION_TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY_TEST",
        _ => "UNKNOWN",
    }
}

fn link_layer(l: u8) -> &'static str {
    match l {
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "Unspecified",
    }
}

fn mtu_bytes(m: u32) -> u32 {
    if (1..=5).contains(&m) {
        128 << m
    } else {
        0
    }
}

fn node_type(t: ibv_node_type::Type) -> String {
    // SAFETY: ibv_node_type_str returns a static string for every value.
    let p = unsafe { ibv_node_type_str(t) };
    if p.is_null() {
        return "unknown".into();
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn guid_string(be: u64) -> String {
    let v = u64::from_be(be);
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        v >> 48,
        (v >> 32) & 0xffff,
        (v >> 16) & 0xffff,
        v & 0xffff
    )
}

fn c_chars(chars: &[core::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn sysfs_line(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn gids(ctx: *mut ibv_context, port: u8, len: i32, sysfs: &str) -> Vec<GidInfo> {
    let mut out = Vec::new();
    for index in 0..len.clamp(0, 4096) {
        // SAFETY: plain old data; all zeroes is valid.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; `gid` is a valid out-parameter.
        if unsafe { ibv_query_gid(ctx, port, index, &mut gid) } != 0 {
            continue;
        }
        // SAFETY: every bit pattern is a valid byte array.
        let raw = unsafe { gid.raw };
        if raw.iter().all(|&b| b == 0) {
            continue;
        }
        let base = format!("{sysfs}/ports/{port}/gid_attrs");
        out.push(GidInfo {
            index: index as u32,
            gid: Ipv6Addr::from(raw).to_string(),
            gid_type: sysfs_line(&format!("{base}/types/{index}")),
            netdev: sysfs_line(&format!("{base}/ndevs/{index}")),
        });
    }
    out
}

fn describe(dev: *mut ibv_device) -> DeviceInfo {
    let mut info = DeviceInfo {
        name: device_name(dev),
        ..DeviceInfo::default()
    };
    // SAFETY: `dev` is a valid device of a live list.
    let (ntype, sysfs) = unsafe { ((*dev).node_type, c_chars(&(*dev).ibdev_path)) };
    info.node_type = node_type(ntype);
    // SAFETY: as above.
    let ctx = unsafe { ibv_open_device(dev) };
    if ctx.is_null() {
        info.error = Some(format!(
            "ibv_open_device: {}",
            std::io::Error::last_os_error()
        ));
        return info;
    }
    match query_device(ctx) {
        Ok(a) => {
            info.node_guid = guid_string(a.node_guid);
            info.fw_ver = c_chars(&a.fw_ver);
            info.vendor_id = a.vendor_id;
            info.vendor_part_id = a.vendor_part_id;
            info.hw_ver = a.hw_ver;
            let n = |v: i32| v.max(0) as u32;
            info.limits = Limits {
                max_qp: n(a.max_qp),
                max_qp_wr: n(a.max_qp_wr),
                max_sge: n(a.max_sge),
                max_sge_rd: n(a.max_sge_rd),
                max_cq: n(a.max_cq),
                max_cqe: n(a.max_cqe),
                max_mr: n(a.max_mr),
                max_mr_size: a.max_mr_size,
                max_pd: n(a.max_pd),
                max_qp_rd_atom: n(a.max_qp_rd_atom),
                max_qp_init_rd_atom: n(a.max_qp_init_rd_atom),
                max_inline_data: None,
                mw: MwSupport::from_attr(&a),
                atomic_cap: match a.atomic_cap {
                    ibv_atomic_cap::IBV_ATOMIC_HCA => "HCA",
                    ibv_atomic_cap::IBV_ATOMIC_GLOB => "GLOB",
                    _ => "NONE",
                },
            };
            for port in 1..=a.phys_port_cnt {
                match query_port(ctx, port) {
                    Ok(p) => info.ports.push(PortInfo {
                        port,
                        state: port_state(p.state),
                        phys_state: phys_state(p.phys_state),
                        link_layer: link_layer(p.link_layer),
                        active_mtu: mtu_bytes(p.active_mtu),
                        max_mtu: mtu_bytes(p.max_mtu),
                        lid: p.lid,
                        max_msg_sz: p.max_msg_sz,
                        gid_tbl_len: p.gid_tbl_len.max(0) as u32,
                        gids: gids(ctx, port, p.gid_tbl_len, &sysfs),
                    }),
                    Err(e) => info.error = Some(e.to_string()),
                }
            }
            let inline = probe_max_inline(ctx);
            info.limits.max_inline_data = (inline > 0).then_some(inline);
        }
        Err(e) => info.error = Some(e.to_string()),
    }
    // SAFETY: opened above; everything made from it was destroyed.
    unsafe { ibv_close_device(ctx) };
    info
}

/// Lists every RDMA device with its ports, GIDs and limits. With no device (no RDMA in the
/// kernel: `ibv_get_device_list` returns NULL with ENOSYS; or no device configured) the
/// list is empty and `reason` says why.
pub fn list_devices() -> DeviceList {
    match RawDeviceList::get() {
        Ok(list) => DeviceList {
            devices: list.iter().map(describe).collect(),
            reason: None,
        },
        Err(NoDevices::ListFailed(errno)) => {
            let why = if errno == libc::ENOSYS {
                "ibv_get_device_list: the kernel has no RDMA support (ENOSYS)".to_string()
            } else {
                format!(
                    "ibv_get_device_list: {}",
                    std::io::Error::from_raw_os_error(errno)
                )
            };
            DeviceList {
                devices: Vec::new(),
                reason: Some(why),
            }
        }
        Err(NoDevices::Empty) => DeviceList {
            devices: Vec::new(),
            reason: Some(
                "libibverbs sees no device; for soft-RoCE: rdma link add rxe0 type rxe netdev <if>"
                    .into(),
            ),
        },
    }
}
