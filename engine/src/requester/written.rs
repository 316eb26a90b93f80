//! The Write-list reply path: completes an RPC whose Call provided Write chunks (and no
//! Reply chunk) from a version 1 RDMA_MSG Reply whose only chunks are the Write list
//! echoed — an NFS READ's reply (RFC 8267 §4.2) — without the general path's full verdict.
//! The Reply is accepted by [`verdict::write_reply`] (the full verdict's checks for this
//! shape), its Write list checked against what the Call provided (CHECKLIST G-4, G-17),
//! and the RPC completed at once when the responder invalidated its window (RFC 8797
//! §4.1): the completion, counters and credit are those of the general path (tested in
//! `requester/tests.rs`).

use super::*;

impl<P: Provider> Books<'_, P> {
    /// Completes the RPC answered by the Write-list Reply `w` in receive buffer `ridx` (whose
    /// Send invalidated `inv`) when it is one of these and nothing is left to invalidate;
    /// false, with nothing done, otherwise (the general path takes it).
    pub(super) fn complete_written<F: FnMut(Completion<'_>)>(
        &mut self,
        w: &verdict::WriteReply<'_>,
        ridx: u32,
        inv: Option<u32>,
        f: &mut F,
    ) -> bool {
        let i = (w.xid & self.slot_mask) as usize;
        let Some(slot) = self.slots.get_mut(i) else {
            return false;
        };
        // A Sent RPC that provided Write chunks and no Reply chunk, whose every window the
        // Reply's Send invalidated.
        if slot.xid != w.xid
            || slot.state != CallState::Sent
            || slot.n_writes == 0
            || slot.has_reply_chunk
            || slot.bound.iter().any(|b| b.is_some() && *b != inv)
        {
            return false;
        }
        let prov = slot.provided();
        let mut list = [chunks::ReturnedChunk::ABSENT; MAX_WRITE_CHUNKS];
        if chunks::check_returned_write_list_into(&prov[..slot.n_writes], w.writes, &mut list)
            .is_err()
        {
            return false;
        }
        let stats = &self.stats;
        // Every window still bound was invalidated by the Reply's Send (checked above).
        let invalidated = slot.bound.iter().flatten().count() as u64;
        if invalidated != 0 {
            bump(&stats.remote_invalidations, invalidated);
        }
        // What `deliver` gives: the results inline, each filled chunk's bytes in the result
        // buffer.
        bump(&stats.short_replies, 1);
        let bulk = filled(slot, &list, stats);
        self.batch[1] += 1;
        f(Completion {
            tag: slot.tag,
            xid: slot.xid,
            result: Ok(Reply {
                rpc: w.reply,
                results: w.results,
                bulk,
                n_bulk: slot.n_writes,
            }),
        });
        self.reposts.push(ridx);
        self.credits.on_reply(Some(w.credit));
        slot.bound = [None; 2];
        slot.grant = Some(w.credit);
        slot.outcome = CallOutcome::Reply;
        slot.state = CallState::Free;
        slot.recv_idx = None;
        self.free.put(i as u32, slot);
        true
    }
}
