//! Protection domains: the handle [`VerbsPd`] and the [`ProtectionDomain`] calls that make
//! regions and windows (`mem.rs`) and shared receive queues (`srq.rs`) in it.

use std::sync::Arc;

use rdma_sys::*;

use super::context::Context;
use super::marker::Verbs;
use super::mem::{PdInner, VerbsMr, VerbsMw};
use super::srq::VerbsSrq;
use crate::fabric::{Access, FabricError, ProtectionDomain};

/// A protection domain (`struct ibv_pd`).
pub struct VerbsPd {
    pub(super) inner: Arc<PdInner>,
}

impl VerbsPd {
    pub(super) fn new(ctx: &Arc<Context>) -> Result<VerbsPd, FabricError> {
        // SAFETY: the context is open while the Arc lives.
        let pd = unsafe { ibv_alloc_pd(ctx.ctx) };
        if pd.is_null() {
            return Err(FabricError::last_os("ibv_alloc_pd"));
        }
        Ok(VerbsPd {
            inner: Arc::new(PdInner {
                pd,
                ctx: ctx.clone(),
            }),
        })
    }
}

impl core::fmt::Debug for VerbsPd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerbsPd")
            .field("device", &self.inner.ctx.name)
            .finish()
    }
}

impl ProtectionDomain<Verbs> for VerbsPd {
    fn alloc_region(&self, len: usize, access: Access) -> Result<VerbsMr, FabricError> {
        VerbsMr::new(&self.inner, len, access)
    }

    fn alloc_mw(&self) -> Result<VerbsMw, FabricError> {
        VerbsMw::new(&self.inner)
    }

    fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<VerbsSrq, FabricError> {
        VerbsSrq::create(&self.inner, max_wr, max_sge)
    }
}
