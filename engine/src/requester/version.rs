//! Version negotiation at the requester (\[V2\] §7): a connection configured for version 2
//! opens with RDMA2_CONNPROP, the server's answer decides the connection's version, and
//! servers found without version 2 are remembered.
//!
//! The opening message is this end's transport properties (Receive Buffer Size, Reverse
//! Request Support; \[V2\] §4.2, §5.3.4), 36 bytes, well within the 1024 bytes a version 1
//! server receives (§7). Decisions where the draft is silent (CHECKLIST G-13 f): the
//! opening RDMA2_CONNPROP takes one credit and carries a fresh XID; the server answers it
//! with its own RDMA2_CONNPROP echoing that XID with RPCRDMA2_F_RESPONSE and its grant in
//! `rdma_credit`, which is the "valid non-error message that grants client credits" after
//! which the client may send more than one message (§7). A version 1 server answers
//! ERR_VERS with the same XID (RFC 8166 §4.5.1), in version 1's fixed layout (G-13 a).

use std::sync::Mutex;

use rpcrdma_proto::v2;
use rpcrdma_proto::v2::props::{Property, ReverseRequests};
use rpcrdma_proto::v2::Htype;

use super::*;
use crate::conn::{PeerProps, Version, Wire};

/// Servers (by address) that answered a version 2 opening with ERR_VERS, or not at all:
/// later connections to them start in version 1 (\[V2\] §7.2, to avoid a negotiation loop).
/// Touched only while connecting.
static VERSION_1_SERVERS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remembered_v1(addr: &str) -> bool {
    VERSION_1_SERVERS
        .lock()
        .map(|l| l.iter().any(|a| a == addr))
        .unwrap_or(false)
}

fn remember_v1(addr: &str) {
    if let Ok(mut l) = VERSION_1_SERVERS.lock() {
        if !l.iter().any(|a| a == addr) {
            l.push(addr.to_owned());
        }
    }
}

/// Forgets every server remembered as version 1 only (for tests that start a server of
/// another version at the same address).
pub fn forget_version_1_servers() {
    if let Ok(mut l) = VERSION_1_SERVERS.lock() {
        l.clear();
    }
}

/// What the opening exchange found.
enum Opening {
    /// The server speaks version 2: its properties.
    V2(PeerProps),
    /// The server speaks versions `low..=high`, without 2.
    Without2 { low: u32, high: u32 },
}

impl<P: Provider> Client<P> {
    /// Decides the version of the connection just established (every receive posted,
    /// nothing sent yet): version 1 at once, or the version 2 opening exchange, bounded by
    /// `timeout`.
    pub(super) fn choose_version(&mut self, timeout: Duration) -> Result<(), ConnError> {
        self.wire = Wire::V1;
        let addr = self.addr.to_string();
        let try_v2 = match self.config.version {
            Version::V1 => false,
            Version::V2 => true,
            Version::Auto => !remembered_v1(&addr),
        };
        if !try_v2 {
            return Ok(());
        }
        match self.open_v2(timeout) {
            Ok(Opening::V2(peer)) => {
                let config = self.config;
                self.negotiation.adopt_v2(ConnEnd::Client, &config, peer);
                self.wire = Wire::V2;
                bump(&self.stats.v2_connections, 1);
                Ok(())
            }
            Ok(Opening::Without2 { low, high }) => {
                remember_v1(&addr);
                bump(&self.stats.version_fallbacks, 1);
                if self.config.version == Version::V2 {
                    self.drop_qp();
                    return Err(ConnError::Version { low, high });
                }
                // The same connection goes on in version 1 ([V2] §7.2).
                Ok(())
            }
            Err(ConnError::VersionTimeout) if self.config.version == Version::Auto => {
                // No answer: taken for a server without version 2 (§7.2). Its receive may
                // be lost with the message, so the connection starts over in version 1.
                remember_v1(&addr);
                bump(&self.stats.version_fallbacks, 1);
                self.drop_qp();
                self.establish(timeout)
            }
            Err(e) => {
                self.drop_qp();
                Err(e)
            }
        }
    }

    /// Ends the queue pair of a connection given up while it was being set up.
    fn drop_qp(&mut self) {
        if let Some(qp) = self.qp.as_mut() {
            qp.disconnect();
        }
        self.qp = None;
        self.dead = true;
        self.early.clear();
        while matches!(self.cq.poll(&mut self.wc), Ok(n) if n > 0) {}
    }

    /// Sends RDMA2_CONNPROP and waits (at most `timeout`) for the answer to it.
    fn open_v2(&mut self, timeout: Duration) -> Result<Opening, ConnError> {
        let deadline = Instant::now() + timeout;
        let xid = first_generation();
        let reverse = if self.serving.is_some() {
            ReverseRequests::Inline
        } else {
            ReverseRequests::None
        };
        let props = [
            Property::RecvBufSize(Some(self.config.recv_size)),
            Property::ReverseRequests(Some(reverse)),
        ];
        let header = v2::Header::connprop(xid, self.config.credits, &props);
        let len = header
            .encode(view::bytes_mut(&mut self.ctl))
            .map_err(|_| ConnError::Config("RDMA2_CONNPROP does not fit the control buffer"))?;
        let qp = self.qp.as_mut().ok_or(ConnError::Disconnected)?;
        let sge = self.ctl.sge_span(0, len as u32);
        let wr = SendWr::<P>::new(
            wrid::pack(Kind::Send, CTL_INDEX, 0),
            SendOp::Send,
            Payload::Sges(core::slice::from_ref(&sge)),
        )
        .signaled();
        qp.post_send(&wr)?;
        bump(&self.stats.connprops_sent, 1);
        let mut sent = false;
        let mut found = None;
        while found.is_none() || !sent {
            let n = self
                .cq
                .poll(&mut self.wc)
                .map_err(|_| ConnError::Disconnected)?;
            for k in 0..n {
                let wc = self.wc[k];
                if wc.status != WcStatus::Success {
                    return Err(ConnError::Disconnected);
                }
                match wrid::kind(wc.wr_id) {
                    Some(Kind::Send) if wrid::index(wc.wr_id) == CTL_INDEX => sent = true,
                    Some(Kind::Recv) => {
                        let r = wrid::index(wc.wr_id);
                        let bytes = view::bytes(&self.recv[r as usize], wc.byte_len as usize);
                        match found
                            .is_none()
                            .then(|| opening_answer(bytes, xid))
                            .flatten()
                        {
                            Some(answer) => {
                                found = Some(answer);
                                if let Some(qp) = self.qp.as_mut() {
                                    conn::repost_recvs::<P>(qp, &self.recv, &[r])?;
                                }
                            }
                            // Anything else (the server's first reverse-direction Calls, or
                            // what a broken peer sends) is judged by the first poll, as any
                            // message received later would be.
                            None => self.early.push(wc),
                        }
                    }
                    _ => {}
                }
            }
            // Checked on every pass, busy or not: a peer sending anything but the answer
            // cannot hold the connect past its timeout.
            if Instant::now() > deadline {
                if found.is_none() {
                    return Err(ConnError::VersionTimeout);
                }
                // Answered; its Send's completion, still to come, is ignored like any Send's.
                break;
            }
            if n == 0 {
                std::hint::spin_loop();
            }
        }
        let (opening, grant) = found.ok_or(ConnError::VersionTimeout)?;
        if let Opening::V2(_) = opening {
            // The answer granted credits: the client may send more than one message (§7).
            self.credits.reset();
            self.credits.take();
            self.credits.on_reply(Some(grant));
        }
        Ok(opening)
    }
}

/// The work request index of the control buffer's Send (no pending-table slot has it).
const CTL_INDEX: u32 = (1 << 20) - 1;

/// The server's answer to the opening RDMA2_CONNPROP `xid`, with its grant: its own
/// RDMA2_CONNPROP (version 2), or ERR_VERS (version 1's layout, or RDMA2_ERR_VERS) without
/// 2 in its range; `None` for anything else (dropped).
fn opening_answer(bytes: &[u8], xid: u32) -> Option<(Opening, u32)> {
    let h = v2::HeaderView::parse(bytes).ok()?;
    if h.xid() != xid {
        return None;
    }
    match (h.htype(), h.body()) {
        (Htype::ConnProp, v2::ViewBody::ConnProp(props)) if h.is_response() => {
            Some((Opening::V2(PeerProps::from_props(&props)), h.credit()))
        }
        (Htype::Error, v2::ViewBody::Error(v2::RdmaError::Vers { low, high }))
            if !(low..=high).contains(&rpcrdma_proto::v2::RPCRDMA_VERSION_TWO) =>
        {
            Some((Opening::Without2 { low, high }, h.credit()))
        }
        _ => None,
    }
}
