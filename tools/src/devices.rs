//! `rpcrdma devices`: the RDMA devices of this machine, their ports, GIDs and the limits that
//! matter to the engine, as text or JSON. With no device it says so and succeeds.

use std::process::ExitCode;

use rpcrdma_engine::fabric::verbs::{list_devices, DeviceInfo, DeviceList, PortInfo};
use serde_json::{json, Value};

/// Prints the device list; exit status 0 (also when there is no device).
pub fn run(json: bool) -> ExitCode {
    let list = list_devices();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&list)).unwrap_or_default()
        );
    } else {
        print!("{}", to_text(&list));
    }
    ExitCode::SUCCESS
}

fn no_devices_message(list: &DeviceList) -> String {
    format!(
        "no RDMA devices found ({})",
        list.reason.as_deref().unwrap_or("the device list is empty")
    )
}

fn port_json(p: &PortInfo) -> Value {
    json!({
        "port": p.port,
        "state": p.state,
        "phys_state": p.phys_state,
        "link_layer": p.link_layer,
        "active_mtu": p.active_mtu,
        "max_mtu": p.max_mtu,
        "lid": p.lid,
        "max_msg_sz": p.max_msg_sz,
        "gid_tbl_len": p.gid_tbl_len,
        "gids": p.gids.iter().map(|g| json!({
            "index": g.index,
            "gid": g.gid,
            "type": g.gid_type,
            "netdev": g.netdev,
        })).collect::<Vec<_>>(),
    })
}

fn device_json(d: &DeviceInfo) -> Value {
    let l = &d.limits;
    json!({
        "name": d.name,
        "node_type": d.node_type,
        "node_guid": d.node_guid,
        "fw_ver": d.fw_ver,
        "vendor_id": d.vendor_id,
        "vendor_part_id": d.vendor_part_id,
        "hw_ver": d.hw_ver,
        "ports": d.ports.iter().map(port_json).collect::<Vec<_>>(),
        "limits": {
            "max_qp": l.max_qp,
            "max_qp_wr": l.max_qp_wr,
            "max_sge": l.max_sge,
            "max_sge_rd": l.max_sge_rd,
            "max_cq": l.max_cq,
            "max_cqe": l.max_cqe,
            "max_mr": l.max_mr,
            "max_mr_size": l.max_mr_size,
            "max_pd": l.max_pd,
            "max_qp_rd_atom": l.max_qp_rd_atom,
            "max_qp_init_rd_atom": l.max_qp_init_rd_atom,
            "max_inline_data": l.max_inline_data,
            "atomic_cap": l.atomic_cap,
            "memory_windows": {
                "type1": l.mw.type1,
                "type2a": l.mw.type2a,
                "type2b": l.mw.type2b,
                "max_mw": l.mw.max_mw,
                "usable": l.mw.usable(),
            },
        },
        "error": d.error,
    })
}

fn to_json(list: &DeviceList) -> Value {
    let mut v = json!({ "devices": list.devices.iter().map(device_json).collect::<Vec<_>>() });
    if list.devices.is_empty() {
        v["message"] = Value::String(no_devices_message(list));
    }
    v
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn to_text(list: &DeviceList) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if list.devices.is_empty() {
        let _ = writeln!(s, "{}", no_devices_message(list));
        return s;
    }
    for d in &list.devices {
        let _ = writeln!(
            s,
            "{}: {} node, GUID {}, firmware {}, vendor {:#x} part {}",
            d.name,
            d.node_type,
            if d.node_guid.is_empty() {
                "?"
            } else {
                &d.node_guid
            },
            if d.fw_ver.is_empty() { "?" } else { &d.fw_ver },
            d.vendor_id,
            d.vendor_part_id
        );
        if let Some(e) = &d.error {
            let _ = writeln!(s, "  error: {e}");
        }
        for p in &d.ports {
            let _ = writeln!(
                s,
                "  port {}: {} ({}), link layer {}, active MTU {} (max {}), max message {} bytes",
                p.port, p.state, p.phys_state, p.link_layer, p.active_mtu, p.max_mtu, p.max_msg_sz
            );
            if p.gids.is_empty() {
                let _ = writeln!(s, "    no GIDs (table of {})", p.gid_tbl_len);
            }
            for g in &p.gids {
                let _ = writeln!(
                    s,
                    "    GID {:>3}: {:<40} {:<12} {}",
                    g.index,
                    g.gid,
                    g.gid_type.as_deref().unwrap_or("-"),
                    g.netdev.as_deref().unwrap_or("")
                );
            }
        }
        let l = &d.limits;
        let _ = writeln!(
            s,
            "  limits: max_qp {}, max_qp_wr {}, max_sge {} (RDMA Read {}), max_cqe {}, max_mr {}, \
             max_mr_size {}, max_pd {}, RDMA Read depth {}/{}",
            l.max_qp,
            l.max_qp_wr,
            l.max_sge,
            l.max_sge_rd,
            l.max_cqe,
            l.max_mr,
            l.max_mr_size,
            l.max_pd,
            l.max_qp_rd_atom,
            l.max_qp_init_rd_atom
        );
        let _ = writeln!(
            s,
            "  max inline data: {}",
            l.max_inline_data
                .map_or("unknown (probe failed)".to_string(), |n| format!(
                    "{n} bytes"
                ))
        );
        let _ = writeln!(
            s,
            "  memory windows: type 1 {}, type 2A {}, type 2B {}, max_mw {}{}",
            yes_no(l.mw.type1),
            yes_no(l.mw.type2a),
            yes_no(l.mw.type2b),
            l.mw.max_mw,
            if l.mw.usable() {
                ""
            } else {
                " (not usable: the engine needs type 2 windows)"
            }
        );
        let _ = writeln!(s, "  atomics: {}", l.atomic_cap);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_list_says_so() {
        let list = DeviceList {
            devices: Vec::new(),
            reason: Some("because".into()),
        };
        assert_eq!(to_text(&list), "no RDMA devices found (because)\n");
        let v = to_json(&list);
        assert_eq!(v["devices"], json!([]));
        assert_eq!(v["message"], "no RDMA devices found (because)");
    }
}
