//! Which end the local side is, and the inline thresholds and remote invalidation the two
//! ends' private data settle on (RFC 8797 §4.1, §4.2).

use core::fmt;

use super::{parse, PrivateData, DEFAULT_INLINE_THRESHOLD};

/// Which end of the connection the local side is (RFC 8797 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnEnd {
    /// The client, which actively establishes the connection and sends forward-direction Calls.
    Client,
    /// The server, which passively accepts the connection and sends forward-direction Replies.
    Server,
}

impl ConnEnd {
    /// The role of the other end.
    pub const fn peer(self) -> ConnEnd {
        match self {
            ConnEnd::Client => ConnEnd::Server,
            ConnEnd::Server => ConnEnd::Client,
        }
    }
}

/// The transport properties in force on a connection after the exchange (RFC 8797 §4.1, §4.2).
/// They are fixed for the life of the connection and are computed afresh on each new one (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Negotiated {
    /// The client-to-server inline threshold, which bounds the Calls a requester sends in the
    /// forward direction: the smaller of the client's Send Size and the server's Receive Size
    /// (RFC 8797 §4.2).
    pub call_threshold: u32,
    /// The server-to-client inline threshold, which bounds the Replies a responder sends in the
    /// forward direction: the smaller of the server's Send Size and the client's Receive Size
    /// (RFC 8797 §4.2).
    pub reply_threshold: u32,
    /// Whether the responder MAY use RDMA Send with Invalidate for RPC Replies: only when both
    /// peers set R. When either clears it the responder MUST use only RDMA Send (RFC 8797 §4.1).
    /// This covers forward-direction Replies only; backward-direction Replies use plain RDMA Send
    /// (checklist G-12).
    pub remote_invalidation: bool,
}

impl Negotiated {
    /// The properties of a connection on which neither side sent usable private data: 1024 octets
    /// each way and no remote invalidation (RFC 8797 §5.1, RFC 8166 §3.3.3).
    pub const DEFAULT: Negotiated = Negotiated {
        call_threshold: DEFAULT_INLINE_THRESHOLD,
        reply_threshold: DEFAULT_INLINE_THRESHOLD,
        remote_invalidation: false,
    };

    /// The inline threshold for messages the side in `role` sends.
    pub const fn send_threshold(&self, role: ConnEnd) -> u32 {
        match role {
            ConnEnd::Client => self.call_threshold,
            ConnEnd::Server => self.reply_threshold,
        }
    }

    /// The inline threshold for messages the side in `role` receives.
    pub const fn receive_threshold(&self, role: ConnEnd) -> u32 {
        self.send_threshold(role.peer())
    }
}

impl Default for Negotiated {
    /// [`Negotiated::DEFAULT`].
    fn default() -> Self {
        Negotiated::DEFAULT
    }
}

impl fmt::Display for Negotiated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client-to-server inline threshold {}, server-to-client inline threshold {}, remote \
             invalidation {}",
            self.call_threshold,
            self.reply_threshold,
            if self.remote_invalidation {
                "allowed"
            } else {
                "not allowed"
            }
        )
    }
}

/// The thresholds and remote-invalidation permission for a connection, from the private data of
/// both ends (RFC 8797 §4.1, §4.2).
///
/// Each side is first taken as its peer sees it ([`PrivateData::as_received`]): sizes as encoded
/// on the wire, and the defaults for data whose Version is not 1. Both ends therefore compute the
/// same result even when a side's own values are not multiples of 1024, which matters because the
/// requester and the responder must agree on the reply threshold (RFC 8166 §3.3.3, §4.3.3).
pub fn negotiate(client: &PrivateData, server: &PrivateData) -> Negotiated {
    let client = client.as_received();
    let server = server.as_received();
    Negotiated {
        call_threshold: client.send_size.min(server.receive_size),
        reply_threshold: server.send_size.min(client.receive_size),
        remote_invalidation: client.remote_invalidation && server.remote_invalidation,
    }
}

/// The local side's view of [`negotiate`]: `local` is what the side in `role` sent, `peer_bytes`
/// the raw CM private data it received. Absent or invalid peer data counts as
/// [`PrivateData::DEFAULT`] (RFC 8797 §5.1, §5.2).
pub fn negotiate_with_peer(role: ConnEnd, local: &PrivateData, peer_bytes: &[u8]) -> Negotiated {
    let peer = parse(peer_bytes).effective();
    match role {
        ConnEnd::Client => negotiate(local, &peer),
        ConnEnd::Server => negotiate(&peer, local),
    }
}
