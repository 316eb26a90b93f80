//! Tests of the whole provider, above every floor: the no-device paths (they run
//! everywhere). Those that need a device and only the public API (two queue pairs on one
//! shared receive queue) are the conformance crate's (`engine/conformance/tests/verbs.rs`).

use super::cmid::EventChannel;
use super::{list_devices, Verbs};
use crate::fabric::{Device, FabricError, Provider};

/// On a machine without RDMA (the development host), every entry point reports "no
/// device" cleanly instead of failing obscurely or panicking.
#[test]
fn no_device_paths_are_clean() {
    let list = list_devices();
    if !list.devices.is_empty() {
        eprintln!("RDMA devices present; the no-device checks do not apply");
        return;
    }
    assert!(list.reason.is_some());
    match Verbs::open_device(None) {
        Err(FabricError::NoDevice) => {}
        Err(e) => panic!("expected NoDevice, got {e}"),
        Ok(d) => panic!("opened {} with no device listed", d.name()),
    }
    assert_eq!(
        Verbs::open_device(Some("rxe0")).err(),
        Some(FabricError::NoDevice)
    );
    match EventChannel::new() {
        Err(FabricError::NoDevice) => {}
        Err(e) => panic!("rdma_create_event_channel: expected NoDevice, got {e}"),
        Ok(_) => eprintln!("rdma_cm is available without devices"),
    }
}
