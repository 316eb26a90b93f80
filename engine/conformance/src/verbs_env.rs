//! The suite's environment on the verbs provider.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use rpcrdma_engine::fabric::verbs::{Verbs, VerbsDevice};

use super::Env;

/// The conformance suite's environment on the verbs provider: one device, listeners on
/// consecutive ports of one IP address (10.0.2.15 in the soft-RoCE guest), connections
/// through rdma_cm.
pub struct VerbsEnv {
    device: VerbsDevice,
    ip: IpAddr,
    next_port: AtomicU16,
    timeout: Duration,
}

impl VerbsEnv {
    /// An environment on `device` that listens on `base` and the ports after it, with waits
    /// of at most `timeout`.
    pub fn new(device: VerbsDevice, base: SocketAddr, timeout: Duration) -> VerbsEnv {
        VerbsEnv {
            device,
            ip: base.ip(),
            next_port: AtomicU16::new(base.port()),
            timeout,
        }
    }
}

impl core::fmt::Debug for VerbsEnv {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsEnv")
            .field("device", &self.device)
            .field("ip", &self.ip)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Env<Verbs> for VerbsEnv {
    fn device(&self) -> &VerbsDevice {
        &self.device
    }

    fn fresh_addr(&self) -> SocketAddr {
        let mut port = self.next_port.fetch_add(1, Ordering::Relaxed);
        if port == 0 {
            port = self.next_port.fetch_add(1, Ordering::Relaxed);
        }
        SocketAddr::new(self.ip, port)
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Longer than the soft provider's: a device (and rxe under emulation) may deliver an
    /// unexpected completion late.
    fn quiet_period(&self) -> Duration {
        Duration::from_millis(100)
    }
}
