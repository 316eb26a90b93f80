//! Opening the verbs device a command asked for, with a message that says what exists when it
//! cannot be opened.

use rpcrdma_engine::fabric::verbs::{list_devices, Verbs, VerbsDevice};
use rpcrdma_engine::fabric::{FabricError, Provider};

/// Opens the RDMA device called `name` (or the first one). The error is one line for the
/// user: no device at all (and why), no device of that name (and which exist), or the
/// provider's own error.
pub fn open_verbs(name: Option<&str>) -> Result<VerbsDevice, String> {
    match Verbs::open_device(name) {
        Ok(d) => Ok(d),
        Err(FabricError::NoDevice) => {
            let list = list_devices();
            Err(match (name, list.devices.is_empty()) {
                (_, true) => format!(
                    "no RDMA devices found ({})",
                    list.reason.as_deref().unwrap_or("empty list")
                ),
                (Some(name), false) => format!(
                    "no RDMA device named {name}; found: {}",
                    list.devices
                        .iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                (None, false) => "no usable RDMA device".to_string(),
            })
        }
        Err(e) => Err(format!("opening the RDMA device: {e}")),
    }
}
