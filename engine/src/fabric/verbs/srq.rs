//! Shared receive queues on verbs (to come: `create_srq` refuses for now).

use crate::fabric::{BadWr, FabricError, PostError, RecvWr, SharedReceiveQueue};

/// A verbs shared receive queue.
#[derive(Debug)]
pub struct VerbsSrq {
    _private: (),
}

impl VerbsSrq {
    pub(crate) fn create(_max_wr: u32, _max_sge: u32) -> Result<VerbsSrq, FabricError> {
        Err(FabricError::InvalidArgument(
            "shared receive queues are not wired to verbs yet",
        ))
    }
}

impl SharedReceiveQueue for VerbsSrq {
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
