//! The suite's environment on the soft provider.

use rpcrdma_engine::fabric::soft::{pair, Soft, SoftAddr, SoftConfig, SoftDevice, SoftQp};

use super::{connect_pair, Env, Side};

/// The conformance suite's environment on the soft provider: queue pairs connected either
/// directly (`rpcrdma_engine::fabric::soft::pair`) or through Unix sockets with the full
/// handshake.
#[derive(Debug)]
pub struct SoftEnv {
    device: SoftDevice,
    direct: bool,
}

impl SoftEnv {
    /// Pairs connected directly, in process.
    pub fn direct() -> SoftEnv {
        SoftEnv {
            device: SoftDevice::with_config("soft0", SoftConfig::default()),
            direct: true,
        }
    }

    /// Pairs connected through a listener and a Unix socket, with the watchdogs.
    pub fn sockets() -> SoftEnv {
        SoftEnv {
            device: SoftDevice::with_config("soft0", SoftConfig::default()),
            direct: false,
        }
    }
}

impl Env<Soft> for SoftEnv {
    fn device(&self) -> &SoftDevice {
        &self.device
    }

    fn fresh_addr(&self) -> SoftAddr {
        SoftAddr::unique("conformance")
    }

    fn pair(&self, a: Side<'_, Soft>, b: Side<'_, Soft>) -> Result<(SoftQp, SoftQp), String> {
        if self.direct {
            pair(a.pd, a.init, b.pd, b.init).map_err(|e| format!("pair: {e}"))
        } else {
            let (qa, _, qb, _) = connect_pair(self, a, b, &[], &[])?;
            Ok((qa, qb))
        }
    }
}
