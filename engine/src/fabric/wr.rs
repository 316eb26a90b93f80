//! Work requests: what a consumer posts to a queue pair's send and receive queues
//! (`struct ibv_send_wr`, `struct ibv_recv_wr`, `struct ibv_sge`).
//!
//! Work requests are plain values that borrow their scatter-gather lists for the duration of
//! the post call only: the provider copies what it needs into its queues before the post
//! returns, as `ibv_post_send` does.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use super::access::Access;
use super::Provider;

/// One scatter-gather element: `length` bytes at virtual address `addr` of the registration
/// named by `lkey` (`struct ibv_sge`, same layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Sge {
    /// Start address, in the address space of the process that registered the memory.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of the memory region the bytes belong to.
    pub lkey: u32,
}

impl Sge {
    /// An element of `length` bytes at `addr` of the region with `lkey`.
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }
}

/// The target of a one-sided operation: a virtual address in the peer's address space and
/// the remote key that grants access to it (`wr.rdma.remote_addr`, `wr.rdma.rkey`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// Start address in the peer's address space.
    pub addr: u64,
    /// Remote key of the peer's region or window.
    pub rkey: u32,
}

impl RemoteAddr {
    /// The remote span at `addr` under `rkey`.
    pub const fn new(addr: u64, rkey: u32) -> RemoteAddr {
        RemoteAddr { addr, rkey }
    }

    /// The same key, `delta` bytes further on.
    pub const fn offset(self, delta: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr + delta,
            rkey: self.rkey,
        }
    }
}

/// Flags of a send work request (`enum ibv_send_flags`, without `IBV_SEND_INLINE`, which is
/// expressed by [`Payload::Inline`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SendFlags(u32);

impl SendFlags {
    /// No flag: an unsignaled request, which produces a completion only if it fails.
    pub const NONE: SendFlags = SendFlags(0);
    /// Wait for earlier RDMA Reads on this queue to complete before starting
    /// (`IBV_SEND_FENCE`).
    pub const FENCE: SendFlags = SendFlags(1);
    /// Produce a completion when the request succeeds (`IBV_SEND_SIGNALED`).
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    /// Set the solicited-event bit on the message (`IBV_SEND_SOLICITED`).
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);

    /// The raw `ibv_send_flags` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets.
    pub const fn union(self, other: SendFlags) -> SendFlags {
        SendFlags(self.0 | other.0)
    }
}

impl BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        self.union(rhs)
    }
}

impl BitOrAssign for SendFlags {
    fn bitor_assign(&mut self, rhs: SendFlags) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for SendFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = [""; 3];
        let mut n = 0;
        for (flag, name) in [
            (SendFlags::FENCE, "FENCE"),
            (SendFlags::SIGNALED, "SIGNALED"),
            (SendFlags::SOLICITED, "SOLICITED"),
        ] {
            if self.contains(flag) {
                parts[n] = name;
                n += 1;
            }
        }
        if n == 0 {
            f.write_str("NONE")
        } else {
            f.write_str(&parts[..n].join("|"))
        }
    }
}

/// Where the bytes of a send, RDMA Write or RDMA Read come from (or go to, for a Read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Gathered from (for a Read: scattered into) registered memory, at most the queue
    /// pair's `max_send_sge` elements.
    Sges(&'a [Sge]),
    /// Copied out of this slice while the request is posted (`IBV_SEND_INLINE`); at most the
    /// queue pair's `max_inline_data` bytes; not allowed for RDMA Read.
    Inline(&'a [u8]),
}

impl Payload<'_> {
    /// No bytes at all.
    pub const EMPTY: Payload<'static> = Payload::Sges(&[]);

    /// The total number of bytes named.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sges(sges) => sges.iter().map(|s| u64::from(s.length)).sum(),
            Payload::Inline(bytes) => bytes.len() as u64,
        }
    }

    /// Whether no byte is named.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The binding a `BIND_MW` work request establishes (`struct ibv_mw_bind_info` plus the new
/// rkey of `wr.bind_mw`).
pub struct MwBind<'a, P: Provider> {
    /// The type 2 window to bind; it must be unbound (freshly allocated or invalidated).
    pub mw: &'a P::Mw,
    /// The window's rkey after the bind: the window's current rkey with a new low byte,
    /// usually [`inc_rkey`]`(mw.rkey())`. Only the low byte is taken from this value.
    pub rkey: u32,
    /// The region the window exposes part of; it must grant [`Access::MW_BIND`].
    pub mr: &'a P::Mr,
    /// Start of the exposed span (a virtual address inside `mr`).
    pub addr: u64,
    /// Length of the exposed span; not zero.
    pub len: u64,
    /// Remote rights of the window (a subset of [`Access::WINDOW_RIGHTS`]); write rights
    /// need the region to grant [`Access::LOCAL_WRITE`].
    pub access: Access,
}

impl<P: Provider> Clone for MwBind<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Provider> Copy for MwBind<'_, P> {}

impl<P: Provider> fmt::Debug for MwBind<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MwBind")
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// The operation of a send work request (`enum ibv_wr_opcode`, the subset an RC queue pair
/// of this engine uses).
pub enum SendOp<'a, P: Provider> {
    /// `IBV_WR_SEND`: consume the peer's next receive.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`: a Send whose receive completion carries `imm`.
    SendWithImm {
        /// Immediate data, in host order (providers convert to and from the wire's big
        /// endian).
        imm: u32,
    },
    /// `IBV_WR_SEND_WITH_INV`: a Send that invalidates `rkey` at the peer before its
    /// receive completes; the completion reports the rkey.
    SendWithInv {
        /// The peer's rkey to invalidate (a memory window's).
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE`: place the payload at `remote` without the peer's CPU.
    RdmaWrite {
        /// Where the bytes go in the peer's memory.
        remote: RemoteAddr,
    },
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: an RDMA Write that then consumes the peer's next
    /// receive, whose completion carries `imm` and the written length.
    RdmaWriteWithImm {
        /// Where the bytes go in the peer's memory.
        remote: RemoteAddr,
        /// Immediate data, in host order.
        imm: u32,
    },
    /// `IBV_WR_RDMA_READ`: fetch bytes from `remote` into the local scatter list.
    RdmaRead {
        /// Where the bytes come from in the peer's memory.
        remote: RemoteAddr,
    },
    /// `IBV_WR_LOCAL_INV`: invalidate one of this host's rkeys (a memory window's).
    LocalInv {
        /// The rkey to invalidate.
        rkey: u32,
    },
    /// `IBV_WR_BIND_MW`: bind a type 2 memory window.
    BindMw(MwBind<'a, P>),
}

impl<P: Provider> Clone for SendOp<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Provider> Copy for SendOp<'_, P> {}

impl<P: Provider> fmt::Debug for SendOp<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendOp::Send => f.write_str("Send"),
            SendOp::SendWithImm { imm } => write!(f, "SendWithImm({imm:#x})"),
            SendOp::SendWithInv { rkey } => write!(f, "SendWithInv({rkey:#x})"),
            SendOp::RdmaWrite { remote } => write!(f, "RdmaWrite({remote:?})"),
            SendOp::RdmaWriteWithImm { remote, imm } => {
                write!(f, "RdmaWriteWithImm({remote:?}, {imm:#x})")
            }
            SendOp::RdmaRead { remote } => write!(f, "RdmaRead({remote:?})"),
            SendOp::LocalInv { rkey } => write!(f, "LocalInv({rkey:#x})"),
            SendOp::BindMw(bind) => write!(f, "BindMw({bind:?})"),
        }
    }
}

/// A send work request (`struct ibv_send_wr` without the list link).
pub struct SendWr<'a, P: Provider> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp<'a, P>,
    /// The bytes to send or write, or the destination of a read. Ignored by `LocalInv` and
    /// `BindMw`.
    pub payload: Payload<'a>,
    /// Signaling, fencing and solicited-event flags.
    pub flags: SendFlags,
}

impl<P: Provider> Clone for SendWr<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Provider> Copy for SendWr<'_, P> {}

impl<P: Provider> fmt::Debug for SendWr<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendWr")
            .field("wr_id", &self.wr_id)
            .field("op", &self.op)
            .field("payload", &self.payload)
            .field("flags", &self.flags)
            .finish()
    }
}

impl<'a, P: Provider> SendWr<'a, P> {
    /// A request with the given parts and no flags (unsignaled).
    pub const fn new(wr_id: u64, op: SendOp<'a, P>, payload: Payload<'a>) -> Self {
        SendWr {
            wr_id,
            op,
            payload,
            flags: SendFlags::NONE,
        }
    }

    /// A Send of the bytes gathered from `sges`.
    pub const fn send(wr_id: u64, sges: &'a [Sge]) -> Self {
        Self::new(wr_id, SendOp::Send, Payload::Sges(sges))
    }

    /// A Send of `bytes`, copied inline.
    pub const fn send_inline(wr_id: u64, bytes: &'a [u8]) -> Self {
        Self::new(wr_id, SendOp::Send, Payload::Inline(bytes))
    }

    /// A Send With Invalidate of `rkey` carrying the bytes gathered from `sges`.
    pub const fn send_with_inv(wr_id: u64, sges: &'a [Sge], rkey: u32) -> Self {
        Self::new(wr_id, SendOp::SendWithInv { rkey }, Payload::Sges(sges))
    }

    /// An RDMA Write of the bytes gathered from `sges` to `remote`.
    pub const fn write(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr) -> Self {
        Self::new(wr_id, SendOp::RdmaWrite { remote }, Payload::Sges(sges))
    }

    /// An RDMA Write With Immediate of the bytes gathered from `sges` to `remote`.
    pub const fn write_with_imm(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr, imm: u32) -> Self {
        Self::new(
            wr_id,
            SendOp::RdmaWriteWithImm { remote, imm },
            Payload::Sges(sges),
        )
    }

    /// An RDMA Read from `remote` into `sges`.
    pub const fn read(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr) -> Self {
        Self::new(wr_id, SendOp::RdmaRead { remote }, Payload::Sges(sges))
    }

    /// A Local Invalidate of `rkey`.
    pub const fn local_inv(wr_id: u64, rkey: u32) -> Self {
        Self::new(wr_id, SendOp::LocalInv { rkey }, Payload::EMPTY)
    }

    /// A memory window bind.
    pub const fn bind_mw(wr_id: u64, bind: MwBind<'a, P>) -> Self {
        Self::new(wr_id, SendOp::BindMw(bind), Payload::EMPTY)
    }

    /// The same request with `SIGNALED` added.
    pub const fn signaled(self) -> Self {
        self.with_flags(SendFlags::SIGNALED)
    }

    /// The same request with `flags` added.
    pub const fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = self.flags.union(flags);
        self
    }
}

/// A receive work request (`struct ibv_recv_wr` without the list link).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming Send's bytes are scattered, at most the queue pair's
    /// `max_recv_sge` elements; may be empty for a receive that only an RDMA Write With
    /// Immediate (or a zero-length Send) will consume.
    pub sges: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive into `sges`.
    pub const fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        RecvWr { wr_id, sges }
    }
}

/// The rkey a memory window gets from its next bind: same index, low byte plus one
/// (`ibv_inc_rkey`).
pub const fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_rotates_the_low_byte_only() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
    }

    #[test]
    fn sge_layout_matches_ibv_sge() {
        assert_eq!(core::mem::size_of::<Sge>(), 16);
        assert_eq!(core::mem::align_of::<Sge>(), 8);
    }

    #[test]
    fn payload_length() {
        let sges = [Sge::new(0, 3, 1), Sge::new(8, 5, 1)];
        assert_eq!(Payload::Sges(&sges).len(), 8);
        assert_eq!(Payload::Inline(b"abc").len(), 3);
        assert!(Payload::EMPTY.is_empty());
        assert_eq!(
            format!("{:?}", SendFlags::SIGNALED | SendFlags::FENCE),
            "FENCE|SIGNALED"
        );
    }
}
