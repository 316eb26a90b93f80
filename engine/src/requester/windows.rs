//! Memory windows: bound over the buffers an RPC exposes, invalidated before the RPC
//! completes unless the reply's Send With Invalidate already did (RFC 8166 §4.4.1, §8.1.3;
//! RFC 8797 §4.1).

use super::*;

impl<P: Provider> Client<P> {
    /// Posts Local Invalidates for the RPC's windows still bound (the last one signaled)
    /// and finishes the RPC when none is left (RFC 8166 §4.4.1, §8.1.3).
    pub(super) fn invalidate<F: FnMut(Completion<'_>)>(&mut self, idx: u32, f: &mut F) {
        match self.post_invalidates(idx) {
            Ok(true) => {}
            Ok(false) => self.finish(idx, f),
            Err(()) => self.lose(f),
        }
    }

    /// Marks the slot `Invalidating` and posts Local Invalidates for its windows still
    /// bound, the last one signaled: true if it posted any (the RPC finishes when the last
    /// completes), false if none was bound; `Err` if the queue pair is gone or refused a
    /// post (the connection must be ended).
    pub(super) fn post_invalidates(&mut self, idx: u32) -> Result<bool, ()> {
        let slot = &mut self.slots[idx as usize];
        // Before posting: a loss while posting then delivers the reply already in hand
        // (`lose`'s Invalidating arm) instead of sending the Call again.
        slot.state = CallState::Invalidating;
        slot.invalidating_since = None;
        let pending: [Option<u32>; 2] = slot.bound;
        let count = pending.iter().flatten().count();
        if count == 0 {
            return Ok(false);
        }
        let Some(qp) = self.qp.as_mut() else {
            return Err(());
        };
        let mut left = count;
        for rkey in pending.iter().flatten() {
            left -= 1;
            let (seq, _) = self.sq.post(left == 0);
            let mut wr = SendWr::local_inv(
                wrid::pack(Kind::LocalInv, idx, if left == 0 { seq } else { 0 }),
                *rkey,
            );
            if left == 0 {
                wr = wr.signaled();
            }
            if qp.post_send(&wr).is_err() {
                bump(&self.stats.post_refused, 1);
                return Err(());
            }
            bump(&self.stats.local_invalidations, 1);
        }
        slot.bound = [None; 2];
        Ok(true)
    }
}

/// Binds `mw` over the first `len` bytes of `buf` with `access` (one BIND_MW work request,
/// signaled when the send queue asks for it) and returns the window's new rkey.
pub(super) fn bind_window<P: Provider>(
    qp: &mut P::Qp,
    sq: &mut SendQueue,
    mw: &P::Mw,
    buf: &Buf<P>,
    len: u64,
    access: Access,
    idx: u32,
) -> Result<u32, crate::fabric::PostError> {
    let rkey = mw.next_rkey();
    let bind = MwBind {
        mw,
        rkey,
        mr: buf.region(),
        addr: buf.addr(),
        len,
        access,
    };
    let (seq, sig) = sq.post(false);
    let mut wr = SendWr::bind_mw(wrid::pack(Kind::Bind, idx, if sig { seq } else { 0 }), bind);
    if sig {
        wr = wr.signaled();
    }
    qp.post_send(&wr)?;
    Ok(rkey)
}
