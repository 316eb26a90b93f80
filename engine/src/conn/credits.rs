//! Credit accounting (RFC 8166 §3.3).
//!
//! A credit is the capability to have one RPC in process at the responder. The requester
//! asks for credits in every Call; the responder grants them in every Reply; the grant is a
//! limit, not a delta (§3.3.1).

/// The requester's side: how many Calls it may have unacknowledged.
///
/// It starts from one credit (§3.3.3 MUST), never exceeds `min(requested, granted)` Calls
/// in flight (§3.3.1 MUST NOT), takes every valid Reply's credit value as the new grant
/// (clamping 0 to 1, CHECKLIST G-6) and ignores the credit field of RDMA_ERROR (G-15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequesterCredits {
    requested: u32,
    granted: u32,
    in_flight: u32,
}

impl RequesterCredits {
    /// A fresh connection: `requested` credits asked for, one assumed granted.
    pub fn new(requested: u32) -> RequesterCredits {
        RequesterCredits {
            requested: requested.max(1),
            granted: 1,
            in_flight: 0,
        }
    }

    /// The value to put in each Call's `rdma_credit`.
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// The latest grant.
    pub fn granted(&self) -> u32 {
        self.granted
    }

    /// Calls sent whose credit has not come back.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// New Calls allowed now: `min(requested, granted) − in flight` (§3.3.1).
    pub fn available(&self) -> u32 {
        self.requested
            .min(self.granted)
            .saturating_sub(self.in_flight)
    }

    /// Takes a credit for a Call about to be sent; false if none is available.
    pub fn take(&mut self) -> bool {
        if self.available() == 0 {
            return false;
        }
        self.in_flight += 1;
        true
    }

    /// A Reply (or RDMA_ERROR) arrived for a Call in flight: its credit comes back. `grant`
    /// is the Reply's `rdma_credit`, `None` for an RDMA_ERROR (G-15).
    pub fn on_reply(&mut self, grant: Option<u32>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(g) = grant {
            self.granted = g.max(1);
        }
    }

    /// Gives back a credit taken for a Call that was never sent.
    pub fn untake(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// A new connection resets the accounting (§3.3.3; V2 §8.2).
    pub fn reset(&mut self) {
        self.granted = 1;
        self.in_flight = 0;
    }
}

/// The responder's side: the grant it advertises and the receives behind it.
///
/// The grant never exceeds the receives posted plus those in process (§3.3.1, IMPL §4.4,
/// CHECKLIST D16/D17), is never zero (§3.3.1 MUST NOT), and an increase is effected (the
/// receives are posted) before the next Reply is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderCredits {
    receives: u32,
    grant: u32,
    limit: u32,
}

impl ResponderCredits {
    /// `receives` receive buffers, all posted, advertising `grant` (clamped to
    /// `1..=receives`).
    pub fn new(receives: u32, grant: u32) -> ResponderCredits {
        let grant = grant.clamp(1, receives.max(1));
        ResponderCredits {
            receives,
            grant,
            limit: grant,
        }
    }

    /// The value to put in each Reply's `rdma_credit`.
    pub fn grant(&self) -> u32 {
        self.grant
    }

    /// Receive buffers owned by the connection (posted or in process).
    pub fn receives(&self) -> u32 {
        self.receives
    }

    /// Changes the grant, clamped to `1..=receives`; returns the grant in force. Every
    /// receive buffer is always posted or in process, so an increase up to `receives` is
    /// effected at once.
    pub fn set_grant(&mut self, grant: u32) -> u32 {
        self.grant = grant.clamp(1, self.receives.max(1));
        self.limit = self.limit.max(self.grant);
        self.grant
    }

    /// The most Calls the requester may have outstanding (received, reply not yet posted)
    /// without breaking §3.3.1: the largest grant advertised on this connection. Version 1
    /// has no acknowledgement of a grant, so after a decrease a requester that has not yet
    /// received a Reply carrying it may still use the old one: more than this is certainly
    /// an overrun, less may still be one.
    pub fn overrun_limit(&self) -> u32 {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requester_starts_from_one_and_follows_the_grant() {
        let mut c = RequesterCredits::new(8);
        assert_eq!(c.available(), 1);
        assert!(c.take());
        assert!(!c.take());
        c.on_reply(Some(4));
        assert_eq!(c.available(), 4);
        for _ in 0..4 {
            assert!(c.take());
        }
        assert!(!c.take());
        c.on_reply(Some(0)); // clamped to 1 (G-6)
        assert_eq!(c.granted(), 1);
        assert_eq!(c.available(), 0, "3 in flight above a grant of 1");
        c.on_reply(None);
        c.on_reply(None);
        c.on_reply(None);
        assert_eq!(c.available(), 1, "RDMA_ERROR keeps the grant (G-15)");
        c.on_reply(Some(100));
        assert_eq!(c.available(), 8, "never above the requested value");
    }

    #[test]
    fn responder_grant_is_bounded_by_receives_and_never_zero() {
        let mut r = ResponderCredits::new(16, 40);
        assert_eq!(r.grant(), 16);
        assert_eq!(r.set_grant(0), 1);
        assert_eq!(r.set_grant(5), 5);
        assert_eq!(r.overrun_limit(), 16, "the largest grant advertised");
        let mut r = ResponderCredits::new(16, 2);
        assert_eq!(r.overrun_limit(), 2);
        r.set_grant(6);
        r.set_grant(3);
        assert_eq!(r.overrun_limit(), 6);
    }
}
