//! The fabric provider a command runs on: the choice on its command line (`--provider`,
//! [`ProviderChoice`]), opening the chosen provider's device with a message for the user when
//! it cannot be opened ([`open_soft`], [`open_verbs`]), and [`on_provider!`], which runs code
//! generic over the provider on the one chosen.

use clap::ValueEnum;
use rpcrdma_engine::fabric::soft::{Soft, SoftDevice};
use rpcrdma_engine::fabric::verbs::{list_devices, Verbs, VerbsDevice};
use rpcrdma_engine::fabric::{FabricError, Provider};

/// The fabric provider chosen with `--provider`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderChoice {
    /// RDMA over shared memory, in this machine (addresses: @NAME).
    Soft,
    /// libibverbs and librdmacm: a NIC or soft-RoCE (addresses: IP:PORT).
    Verbs,
}

impl ProviderChoice {
    /// The provider's name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ProviderChoice::Soft => "soft",
            ProviderChoice::Verbs => "verbs",
        }
    }

    /// The address a server of this machine listens at by default: the abstract socket
    /// `@soft_name` on soft, every interface at `verbs_port` on verbs.
    pub fn local_addr(self, soft_name: &str, verbs_port: u16) -> String {
        match self {
            ProviderChoice::Soft => format!("@{soft_name}"),
            ProviderChoice::Verbs => format!("0.0.0.0:{verbs_port}"),
        }
    }
}

/// Runs `$body` on the provider `$choice` (a [`ProviderChoice`]) names. Inside it, `$P` is
/// the provider's type ([`Soft`] or [`Verbs`]) and `$open` a
/// `Fn() -> Result<$P::Device, String>` (and `Sync`) that opens its device: [`open_soft`], or
/// [`open_verbs`] of `$device` (an `Option<&str>`, the device `--device` named).
///
/// ```ignore
/// on_provider!(args.provider, args.device.as_deref(), |P, open| bench_on::<P>(args, open))
/// ```
///
/// The body is compiled once per provider, as a `match` with one arm each would be; this
/// writes that `match` once for every command that opens a device and then runs generic code.
macro_rules! on_provider {
    ($choice:expr, $device:expr, |$P:ident, $open:ident| $body:expr) => {
        match $choice {
            $crate::provider::ProviderChoice::Soft => {
                type $P = ::rpcrdma_engine::fabric::soft::Soft;
                let $open = $crate::provider::open_soft;
                $body
            }
            $crate::provider::ProviderChoice::Verbs => {
                type $P = ::rpcrdma_engine::fabric::verbs::Verbs;
                let device: Option<&str> = $device;
                let $open = move || $crate::provider::open_verbs(device);
                $body
            }
        }
    };
}
pub(crate) use on_provider;

/// Opens the soft provider's device (it fails only when the system refuses it memory or
/// descriptors); the error is one line for the user.
pub fn open_soft() -> Result<SoftDevice, String> {
    Soft::open_device(None).map_err(|e| format!("soft fabric: {e}"))
}

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
