//! Work request ids: what a completion refers to, packed into the 64-bit `wr_id`.
//!
//! Layout: bits 60..64 the kind, 40..60 an index (a pending-table slot, a receive buffer),
//! 0..40 the send-queue sequence number of a signaled send-queue request (0 otherwise).

/// What a work request was posted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A receive; the index is the receive buffer.
    Recv = 1,
    /// A Send (Call, Reply or RDMA_ERROR).
    Send = 2,
    /// A memory window bind.
    Bind = 3,
    /// A Local Invalidate; the index is the pending-table slot.
    LocalInv = 4,
    /// An RDMA Read; the index is the receive buffer whose Call it pulls.
    Read = 5,
    /// An RDMA Write.
    Write = 6,
    /// A receive posted on a shared receive queue; the index is the buffer's id there.
    SrqRecv = 7,
}

const SEQ_BITS: u32 = 40;
const INDEX_BITS: u32 = 20;

/// Packs a `wr_id`.
#[inline]
pub const fn pack(kind: Kind, index: u32, seq: u64) -> u64 {
    ((kind as u64) << (SEQ_BITS + INDEX_BITS))
        | (((index as u64) & ((1 << INDEX_BITS) - 1)) << SEQ_BITS)
        | (seq & ((1 << SEQ_BITS) - 1))
}

/// The kind of a `wr_id`, `None` for one this engine did not make.
#[inline]
pub fn kind(wr_id: u64) -> Option<Kind> {
    Some(match wr_id >> (SEQ_BITS + INDEX_BITS) {
        1 => Kind::Recv,
        2 => Kind::Send,
        3 => Kind::Bind,
        4 => Kind::LocalInv,
        5 => Kind::Read,
        6 => Kind::Write,
        7 => Kind::SrqRecv,
        _ => return None,
    })
}

/// The index of a `wr_id`.
#[inline]
pub const fn index(wr_id: u64) -> u32 {
    ((wr_id >> SEQ_BITS) & ((1 << INDEX_BITS) - 1)) as u32
}

/// The send-queue sequence number of a `wr_id` (0 when none was recorded).
#[inline]
pub const fn seq(wr_id: u64) -> u64 {
    wr_id & ((1 << SEQ_BITS) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let w = pack(Kind::Read, 12345, 987_654_321);
        assert_eq!(kind(w), Some(Kind::Read));
        assert_eq!(index(w), 12345);
        assert_eq!(seq(w), 987_654_321);
        assert_eq!(kind(0), None);
    }
}
