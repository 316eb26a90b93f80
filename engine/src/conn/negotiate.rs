//! The RFC 8797 exchange on connect and accept: what each end advertises and what is in force
//! afterwards.

use rpcrdma_proto::private_data::{self, ConnEnd, Negotiated, PrivateData};
use rpcrdma_proto::v2::props::{Property, Props, ReverseRequests, DEFAULT_RBSIZ};
use rpcrdma_proto::v2::Wire;

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
    /// The version the connection speaks (version 1 until a version 2 exchange, \[V2\] §7).
    pub wire: Wire,
    /// The peer's transport properties on a version 2 connection (\[V2\] §4.2, §5.3.4).
    pub peer: PeerProps,
}

/// What a version 2 peer said of itself in its RDMA2_CONNPROP, defaults for what it left
/// out (\[V2\] §4.2: properties not sent keep their default and never change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerProps {
    /// Receive Buffer Size: the smallest of its posted receives (default 4096).
    pub recv_size: u32,
    /// Reverse Request Support (default RDMA2_RVREQSUP_INLINE).
    pub reverse: ReverseRequests,
}

impl Default for PeerProps {
    fn default() -> Self {
        PeerProps {
            recv_size: DEFAULT_RBSIZ,
            reverse: ReverseRequests::Inline,
        }
    }
}

impl PeerProps {
    /// The properties in `props`, defaults for the ones absent or sent empty (unknown ones
    /// were skipped when the list was decoded).
    pub fn from_props(props: &Props<'_>) -> PeerProps {
        let mut p = PeerProps::default();
        for prop in props.properties() {
            match prop {
                Property::RecvBufSize(Some(n)) => p.recv_size = n,
                Property::ReverseRequests(Some(r)) => p.reverse = r,
                _ => {}
            }
        }
        p
    }
}

/// One line for a log: the version spoken, the two inline thresholds, remote invalidation and,
/// on version 2, the peer's receive size.
impl core::fmt::Display for Negotiation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let n = &self.negotiated;
        write!(
            f,
            "version {}, inline thresholds {} B for Calls and {} B for Replies, remote invalidation {}",
            match self.wire {
                Wire::V1 => 1,
                Wire::V2 => 2,
            },
            n.call_threshold,
            n.reply_threshold,
            if n.remote_invalidation { "on" } else { "off" }
        )?;
        if self.wire == Wire::V2 {
            write!(f, ", the peer's receives {} B", self.peer.recv_size)?;
        }
        Ok(())
    }
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
    pub fn complete(role: ConnEnd, local: PrivateData, peer_bytes: &[u8]) -> Negotiation {
        Negotiation {
            local,
            negotiated: private_data::negotiate_with_peer(role, &local, peer_bytes),
            wire: Wire::V1,
            peer: PeerProps::default(),
        }
    }

    /// Switches the connection to version 2 with the peer's properties `peer` (\[V2\] §4.2.1,
    /// §7.1). What this end sends is bounded by the peer's Receive Buffer Size (4096 when
    /// its RDMA2_CONNPROP left it out), which replaces the RFC 8797 Receive Size; what it
    /// receives keeps the RFC 8797 value (the peer's Send Size, which version 2 does not
    /// exchange, within this end's own receives). Remote invalidation is then decided per
    /// RPC by `rdma_inv_handle` (\[V2\] §3.3), not by the R bit: allowed unless this end
    /// refuses it or advertises regions ([`Registration::Persistent`]).
    pub fn adopt_v2(&mut self, role: ConnEnd, config: &ConnConfig, peer: PeerProps) {
        let out = config.send_size.min(peer.recv_size);
        match role {
            ConnEnd::Client => self.negotiated.call_threshold = out,
            ConnEnd::Server => self.negotiated.reply_threshold = out,
        }
        self.negotiated.remote_invalidation =
            config.remote_invalidation && config.registration != Registration::Persistent;
        self.wire = Wire::V2;
        self.peer = peer;
    }

    /// The version the connection speaks.
    pub fn wire(&self) -> Wire {
        self.wire
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negotiation_reads_as_one_line() {
        let config = ConnConfig::default();
        let local = Negotiation::advertise(&config);
        let peer = PrivateData::new(2048, 8192, false).encode();
        let mut n = Negotiation::complete(ConnEnd::Client, local, &peer);
        assert_eq!(
            n.to_string(),
            format!(
                "version 1, inline thresholds {} B for Calls and {} B for Replies, remote invalidation off",
                config.send_size.min(8192),
                config.recv_size.min(2048)
            )
        );
        n.adopt_v2(
            ConnEnd::Client,
            &config,
            PeerProps {
                recv_size: 16384,
                reverse: ReverseRequests::Inline,
            },
        );
        let line = n.to_string();
        assert!(
            line.starts_with("version 2,") && line.ends_with("the peer's receives 16384 B"),
            "{line}"
        );
    }
}
