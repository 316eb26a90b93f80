//! The RFC 8797 exchange on connect and accept: what each end advertises and what is in force
//! afterwards.

use rpcrdma_proto::private_data::{self, Negotiated, PrivateData, Role};

use super::{ConnConfig, Registration};

/// Why the negotiated properties cannot be used by this end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NegotiationError {
    /// The threshold this end must receive is larger than its receive buffers (cannot happen
    /// with a conforming peer, since it is bounded by our own Receive Size).
    ThresholdAboveBuffers,
}

/// The local advertisement and the properties in force on one connection (RFC 8797 §4.1,
/// §4.2). Computed afresh for every connection (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiation {
    /// What this end sent.
    pub local: PrivateData,
    /// The thresholds and the remote-invalidation permission in force.
    pub negotiated: Negotiated,
}

impl Negotiation {
    /// The private data this end advertises for `config`. A persistent-registration end
    /// never sets R: its rkeys are regions, which must not be remotely invalidated.
    pub fn advertise(config: &ConnConfig) -> PrivateData {
        let r = config.remote_invalidation && config.registration == Registration::Windows;
        PrivateData::new(config.send_size, config.recv_size, r)
    }

    /// The properties for the end in `role` that sent `local` and received `peer_bytes`
    /// (absent or invalid peer data counts as the 1024-byte defaults, RFC 8797 §5.1).
    pub fn complete(role: Role, local: PrivateData, peer_bytes: &[u8]) -> Negotiation {
        Negotiation {
            local,
            negotiated: private_data::negotiate_with_peer(role, &local, peer_bytes),
        }
    }

    /// Largest Call the requester may send (client-to-server threshold).
    pub fn call_threshold(&self) -> u32 {
        self.negotiated.call_threshold
    }

    /// Largest Reply the responder may send (server-to-client threshold).
    pub fn reply_threshold(&self) -> u32 {
        self.negotiated.reply_threshold
    }

    /// Whether Replies may use Send With Invalidate (both ends set R, RFC 8797 §4.1).
    pub fn remote_invalidation(&self) -> bool {
        self.negotiated.remote_invalidation
    }
}
