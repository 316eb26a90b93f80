//! Posting receives: writing a receive into the ring, and flushing what was posted to a queue
//! pair in the error state.

use super::SoftQp;
use crate::fabric::{PostError, RecvWr};

impl SoftQp {
    /// Writes one receive into the ring without the error-state check that must follow.
    #[inline(always)]
    pub(super) fn produce_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        if self.srq.is_some() {
            return Err(srq_refusal());
        }
        if wr.sges.len() > self.caps.max_recv_sge as usize {
            return Err(PostError::TooManySge {
                given: wr.sges.len(),
                max: self.caps.max_recv_sge,
            });
        }
        if self.rq_outstanding() >= u64::from(self.caps.max_recv_wr) {
            return Err(PostError::QueueFull);
        }
        self.mem.produce(self.rq_posted, wr.wr_id, wr.sges);
        self.rq_posted += 1;
        Ok(())
    }

    /// After receives were written: a queue pair that is (or just went) in the error state
    /// flushes them at once.
    #[inline]
    pub(super) fn flush_if_error(&mut self) {
        if self.mem.must_flush_after_post() {
            self.mem.flush(self.recv_cq.ring());
        }
    }
}

/// A receive posted to a queue pair made with a shared receive queue (kept off the posting
/// path).
#[cold]
fn srq_refusal() -> PostError {
    PostError::InvalidWr("the queue pair takes its receives from a shared receive queue")
}
