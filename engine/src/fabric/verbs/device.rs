//! The device handle, [`VerbsDevice`]: an open context (`context.rs`) shared by everything
//! made from it, and the [`Device`] calls that make protection domains (`pd.rs`) and
//! completion queues (`cq.rs`).

use std::sync::Arc;

use super::context::{Context, MwSupport};
use super::cq::VerbsCq;
use super::marker::Verbs;
use super::pd::VerbsPd;
use crate::fabric::{Device, DeviceAttr, FabricError};

/// An opened RDMA device (`struct ibv_context`).
pub struct VerbsDevice {
    pub(super) ctx: Arc<Context>,
}

impl VerbsDevice {
    /// Memory window support of the device.
    pub fn mw_support(&self) -> MwSupport {
        self.ctx.mw
    }

    /// RDMA Reads a queue pair may answer (`max_qp_rd_atom`) and initiate
    /// (`max_qp_init_rd_atom`) at once.
    pub fn rd_atom(&self) -> (u8, u8) {
        (self.ctx.max_qp_rd_atom, self.ctx.max_qp_init_rd_atom)
    }
}

impl core::fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsDevice")
            .field("name", &self.ctx.name)
            .field("attr", &self.ctx.attr)
            .field("mw", &self.ctx.mw)
            .finish()
    }
}

impl Device<Verbs> for VerbsDevice {
    fn name(&self) -> &str {
        &self.ctx.name
    }

    fn attr(&self) -> DeviceAttr {
        self.ctx.attr
    }

    fn alloc_pd(&self) -> Result<VerbsPd, FabricError> {
        VerbsPd::new(&self.ctx)
    }

    fn create_cq(&self, min_depth: u32) -> Result<VerbsCq, FabricError> {
        VerbsCq::new(&self.ctx, min_depth)
    }
}
