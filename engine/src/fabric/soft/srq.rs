//! Shared receive queues on the soft provider (to come: `create_srq` refuses for now).

use crate::fabric::{BadWr, FabricError, PostError, RecvWr, SharedReceiveQueue};

/// A soft shared receive queue.
#[derive(Debug)]
pub struct SoftSrq {
    _private: (),
}

impl SoftSrq {
    pub(crate) fn create(_max_wr: u32, _max_sge: u32) -> Result<SoftSrq, FabricError> {
        Err(FabricError::InvalidArgument(
            "the soft provider has no shared receive queues yet",
        ))
    }
}

impl SharedReceiveQueue for SoftSrq {
    fn post_recv_list(&self, _wrs: &[RecvWr<'_>]) -> Result<(), BadWr> {
        Err(BadWr {
            index: 0,
            error: PostError::InvalidWr("no shared receive queue"),
        })
    }

    fn depth(&self) -> u32 {
        0
    }

    fn arm_limit(&self, _limit: u32) -> Result<(), FabricError> {
        Ok(())
    }

    fn take_limit_event(&self) -> bool {
        false
    }
}
