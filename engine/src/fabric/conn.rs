//! Connection and queue pair parameters: private data of the connection steps and why a
//! connection could not be established, queue pair capacities and states, device limits.

use core::fmt;

use super::error::{FabricError, PostError};
use super::Provider;

/// The opaque private data bytes carried by a connection manager step
/// (`rdma_conn_param.private_data`), such as the encoded RFC 8797 RPC-over-RDMA private
/// data, which the protocol crate decodes into its own `private_data::PrivateData`. Fixed
/// capacity: no allocation.
///
/// rdma_cm over InfiniBand and RoCE carries at most [`CmPrivateBytes::CONNECT_MAX`] bytes in
/// a connect request, [`CmPrivateBytes::ACCEPT_MAX`] in an accept and
/// [`CmPrivateBytes::REJECT_MAX`] in a reject, and the receiving side sees the whole field,
/// zero-padded to that size, whatever length the sender gave. Providers deliver peer private
/// data padded the same way, so consumers must find their data by its own framing (RFC 8797
/// §5.2 searches for its format identifier), never by the length.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CmPrivateBytes {
    len: u8,
    bytes: [u8; CmPrivateBytes::CAPACITY],
}

impl CmPrivateBytes {
    /// The largest private data any step carries.
    pub const CAPACITY: usize = 196;
    /// Private data of a connect request (IB CM REQ less the rdma_cm header).
    pub const CONNECT_MAX: usize = 56;
    /// Private data of an accept (IB CM REP).
    pub const ACCEPT_MAX: usize = 196;
    /// Private data of a reject (IB CM REJ).
    pub const REJECT_MAX: usize = 148;

    /// No private data.
    pub const EMPTY: CmPrivateBytes = CmPrivateBytes {
        len: 0,
        bytes: [0; CmPrivateBytes::CAPACITY],
    };

    /// Private data holding `bytes`, if they fit in `max` bytes (one of the step maxima).
    pub fn new(bytes: &[u8], max: usize) -> Result<CmPrivateBytes, ConnectError> {
        let max = max.min(Self::CAPACITY);
        if bytes.len() > max {
            return Err(ConnectError::PrivateDataTooLong {
                len: bytes.len(),
                max,
            });
        }
        let mut pd = Self::EMPTY;
        pd.bytes[..bytes.len()].copy_from_slice(bytes);
        pd.len = bytes.len() as u8;
        Ok(pd)
    }

    /// The same bytes zero-padded to `len` (no-op if already that long or longer), as a
    /// receiver of this step's private data sees them.
    pub fn padded(mut self, len: usize) -> CmPrivateBytes {
        let len = len.min(Self::CAPACITY);
        if usize::from(self.len) < len {
            self.len = len as u8;
        }
        self
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for CmPrivateBytes {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl fmt::Debug for CmPrivateBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmPrivateBytes(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Why establishing a connection failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectError {
    /// Nothing happened within the timeout.
    Timeout,
    /// No listener at the address (`RDMA_CM_EVENT_UNREACHABLE` or a refused connection).
    Unreachable,
    /// The peer rejected the connection, with its private data (`RDMA_CM_EVENT_REJECTED`).
    Rejected(Box<CmPrivateBytes>),
    /// Private data longer than the connection step carries.
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// The step's maximum.
        max: usize,
    },
    /// The peer broke the connection protocol.
    Protocol(&'static str),
    /// Creating the local resources failed.
    Fabric(FabricError),
    /// The `prepare` callback refused to post a receive.
    Prepare(PostError),
}

impl From<FabricError> for ConnectError {
    fn from(e: FabricError) -> Self {
        ConnectError::Fabric(e)
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Timeout => f.write_str("connection timed out"),
            ConnectError::Unreachable => f.write_str("no listener at the address"),
            ConnectError::Rejected(pd) => {
                write!(
                    f,
                    "connection rejected ({} bytes of private data)",
                    pd.len()
                )
            }
            ConnectError::PrivateDataTooLong { len, max } => {
                write!(f, "{len} bytes of private data exceed the maximum {max}")
            }
            ConnectError::Protocol(why) => write!(f, "connection protocol error: {why}"),
            ConnectError::Fabric(e) => write!(f, "{e}"),
            ConnectError::Prepare(e) => write!(f, "preparing the queue pair failed: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Capacities of a queue pair (`struct ibv_qp_cap`). Providers may grant more than asked;
/// [`QueuePair::caps`](super::QueuePair::caps) tells what was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter-gather elements per send work request.
    pub max_send_sge: u32,
    /// Scatter-gather elements per receive work request.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 2,
            max_inline_data: 128,
        }
    }
}

/// What a queue pair is created with (`struct ibv_qp_init_attr` for an RC queue pair).
pub struct QpInit<'a, P: Provider> {
    /// The completion queue of send work requests.
    pub send_cq: &'a P::Cq,
    /// The completion queue of receive work requests; may be the same as `send_cq`.
    pub recv_cq: &'a P::Cq,
    /// Requested capacities.
    pub caps: QpCaps,
    /// Every send work request produces a completion, signaled or not (`sq_sig_all`).
    pub sig_all: bool,
    /// The reliable connection's acknowledgement timeout exponent (4.096 µs × 2^n before
    /// an unacknowledged packet is sent again; IB spec. §9.7.6.1.3); 0 keeps the
    /// connection manager's. Providers without transport retries ignore it.
    pub ack_timeout: u8,
    /// A shared receive queue the queue pair takes its receives from
    /// ([`SharedReceiveQueue`](super::SharedReceiveQueue)), made in the same protection
    /// domain; `None`: a receive queue of its own, of `caps.max_recv_wr`.
    pub srq: Option<&'a P::Srq>,
}

impl<'a, P: Provider> QpInit<'a, P> {
    /// A queue pair on `send_cq` and `recv_cq` with capacities `caps`, signaling only
    /// requests flagged signaled.
    pub fn new(send_cq: &'a P::Cq, recv_cq: &'a P::Cq, caps: QpCaps) -> Self {
        QpInit {
            send_cq,
            recv_cq,
            caps,
            sig_all: false,
            ack_timeout: 0,
            srq: None,
        }
    }
}

impl<P: Provider> Clone for QpInit<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Provider> Copy for QpInit<'_, P> {}

impl<P: Provider> fmt::Debug for QpInit<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QpInit")
            .field("caps", &self.caps)
            .field("sig_all", &self.sig_all)
            .finish_non_exhaustive()
    }
}

/// The state of a queue pair (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    Reset,
    /// `IBV_QPS_INIT`: created, not connected; receives may be posted.
    Init,
    /// `IBV_QPS_RTR`: ready to receive.
    Rtr,
    /// `IBV_QPS_RTS`: connected; both queues work.
    Rts,
    /// `IBV_QPS_SQD`: send queue drained.
    Sqd,
    /// `IBV_QPS_SQE`: send queue error.
    Sqe,
    /// `IBV_QPS_ERR`: every request, posted or to be posted, completes with
    /// [`WcStatus::WrFlushErr`](super::WcStatus::WrFlushErr).
    Err,
}

/// Limits of a device (from `struct ibv_device_attr` and the port's `max_msg_sz`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceAttr {
    /// Largest queue depth.
    pub max_qp_wr: u32,
    /// Largest scatter-gather list.
    pub max_sge: u32,
    /// Largest completion queue.
    pub max_cqe: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
    /// Largest message (Send or RDMA operation).
    pub max_msg_sz: u64,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Largest shared receive queue (0: the device has none).
    pub max_srq_wr: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_limits_and_padding() {
        let pd = CmPrivateBytes::new(b"hello", CmPrivateBytes::CONNECT_MAX).unwrap();
        assert_eq!(pd.as_bytes(), b"hello");
        let padded = pd.padded(CmPrivateBytes::CONNECT_MAX);
        assert_eq!(padded.len(), 56);
        assert_eq!(&padded.as_bytes()[..5], b"hello");
        assert!(padded.as_bytes()[5..].iter().all(|&b| b == 0));
        assert_eq!(
            CmPrivateBytes::new(&[0; 57], CmPrivateBytes::CONNECT_MAX),
            Err(ConnectError::PrivateDataTooLong { len: 57, max: 56 })
        );
        assert!(CmPrivateBytes::new(&[1; 196], CmPrivateBytes::ACCEPT_MAX).is_ok());
        assert!(CmPrivateBytes::EMPTY.is_empty());
        assert_eq!(
            format!("{:?}", CmPrivateBytes::new(&[0xab, 1], 56).unwrap()),
            "CmPrivateBytes(ab01)"
        );
    }
}
