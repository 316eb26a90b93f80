//! What both ends of an RPC-over-RDMA connection share: configuration, the RFC 8797
//! exchange, credit accounting (RFC 8166 §3.3), send-queue slot accounting, work request
//! ids and in-place buffer views.
//!
//! The requester ([`crate::requester`]) and the responder ([`crate::responder`]) are built
//! from these parts; nothing here blocks, locks or allocates after setup.

#![deny(unsafe_code)]

pub mod credits;
pub mod negotiate;
pub mod sq;
pub(crate) mod view;
pub mod wrid;

use std::time::Duration;

pub use credits::{RequesterCredits, ResponderCredits};
pub use negotiate::{Negotiation, NegotiationError};
pub use sq::SendQueue;

use crate::fabric::{ConnectError, FabricError, PostError};
use crate::pool::PoolError;

/// How memory is exposed to the peer for chunks (RFC 8166 §4.4, §8.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Registration {
    /// Each RPC binds memory windows over exactly the buffers it exposes and invalidates
    /// them when it completes (locally, or by the peer's Send With Invalidate). The safe
    /// default.
    Windows,
    /// The pool regions are registered once with remote rights and their rkeys are
    /// advertised directly: no bind, no invalidation. Fast and trusting: the peer may reach
    /// every buffer of the region for the life of the connection (RFC 8166 §8.1.2 advises
    /// against it). Remote invalidation is never offered in this mode.
    Persistent,
}

/// Settings of one connection end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnConfig {
    /// Largest Send this end posts; advertised as the RFC 8797 Send Size and the size of
    /// its send buffers (at least 1024).
    pub send_size: u32,
    /// Largest Send this end can receive; advertised as the Receive Size and the size of
    /// its receive buffers (at least 1024).
    pub recv_size: u32,
    /// Whether this end permits (responder: uses) Send With Invalidate (RFC 8797 §4.1).
    pub remote_invalidation: bool,
    /// Requester: the credits it requests, which is also the size of its pending table.
    /// Responder: the receives it keeps posted, the most it ever grants.
    pub credits: u32,
    /// Responder: the grant it starts with (at most `credits`, at least 1).
    pub initial_grant: u32,
    /// Bytes of each RPC's bulk buffers (requester: one for arguments, one for results;
    /// responder: the pull buffer and the bulk result buffer of each receive).
    pub bulk_size: u32,
    /// Requester: longest segment it advertises; longer chunks are split into several
    /// segments of one window.
    pub max_segment: u32,
    /// Responder: most RDMA Reads outstanding at once (ORD, RFC 8166 §3.3.1).
    pub max_reads: u32,
    /// How chunk memory is exposed.
    pub registration: Registration,
    /// Connection establishment timeout.
    pub connect_timeout: Duration,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            send_size: 4096,
            recv_size: 4096,
            remote_invalidation: true,
            credits: 32,
            initial_grant: 32,
            bulk_size: 256 * 1024,
            max_segment: 64 * 1024,
            max_reads: 8,
            registration: Registration::Windows,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl ConnConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConnError> {
        if self.send_size < 1024 || self.recv_size < 1024 {
            return Err(ConnError::Config(
                "inline sizes must be at least 1024 bytes",
            ));
        }
        if self.credits == 0 || self.credits > 4096 {
            return Err(ConnError::Config("credits must be 1 ..= 4096"));
        }
        if self.bulk_size < 4096 || self.max_segment == 0 || self.max_reads == 0 {
            return Err(ConnError::Config(
                "bulk size, segment and read limits too small",
            ));
        }
        Ok(())
    }
}

/// Why a connection could not be set up or went away.
#[derive(Debug)]
pub enum ConnError {
    /// A setting is out of range.
    Config(&'static str),
    /// The connection steps failed.
    Connect(ConnectError),
    /// Allocating fabric objects failed.
    Fabric(FabricError),
    /// Allocating buffers failed.
    Pool(PoolError),
    /// Posting the initial receives failed.
    Post(PostError),
    /// The connection is not usable (lost, or never established).
    Disconnected,
}

impl core::fmt::Display for ConnError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConnError::Config(why) => write!(f, "bad connection settings: {why}"),
            ConnError::Connect(e) => write!(f, "connecting failed: {e}"),
            ConnError::Fabric(e) => write!(f, "fabric: {e}"),
            ConnError::Pool(e) => write!(f, "buffers: {e}"),
            ConnError::Post(e) => write!(f, "posting receives: {e}"),
            ConnError::Disconnected => f.write_str("connection lost"),
        }
    }
}

impl std::error::Error for ConnError {}

impl From<ConnectError> for ConnError {
    fn from(e: ConnectError) -> Self {
        ConnError::Connect(e)
    }
}
impl From<FabricError> for ConnError {
    fn from(e: FabricError) -> Self {
        ConnError::Fabric(e)
    }
}
impl From<PoolError> for ConnError {
    fn from(e: PoolError) -> Self {
        ConnError::Pool(e)
    }
}
impl From<PostError> for ConnError {
    fn from(e: PostError) -> Self {
        ConnError::Post(e)
    }
}
