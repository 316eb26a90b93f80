//! Versions at the responder (\[V2\] §7): a connection speaks the version of its first
//! message that decodes when the server takes either, RDMA2_CONNPROP is noted and answered,
//! and version 2's judging of Calls and its errors.
//!
//! Decisions where the draft is silent (CHECKLIST G-13 f): an RDMA2_CONNPROP takes a
//! receive like a Call and is answered, as the server's own first message, by this end's
//! RDMA2_CONNPROP echoing its XID with RPCRDMA2_F_RESPONSE and the current grant; a
//! version 1 message on a connection that speaks version 2 is answered ERR_VERS 2..2 in
//! version 1's layout (the client "MUST NOT change the version", §7.3).
//!
//! While the version is open, only a message that decodes as version 2 commits the
//! connection to version 2 ([`decodes_as_v2`]): §7 has the client open with "a single valid
//! RPC-over-RDMA message with the value two (2) in the rdma_vers field", and §7.3 binds the
//! server to "the same RPC-over-RDMA protocol version that the client uses to send its
//! Calls" — a header that does not parse is neither. Such a message (a hostile peer's
//! version 1 layout with `rdma_vers` 2, say) is refused with the RDMA2_ERROR version 2's
//! verdict gives it, RDMA2_ERR_BAD_XDR or RDMA2_ERR_INVAL_HTYPE, echoing its XID and
//! version: §5.3.3 makes that error a MUST for a responder that "recognizes the value in
//! the rdma_start.rdma_vers field" but cannot parse the header, which this server, taking
//! version 2, is. Not ERR_VERS: that says the version is not supported (RFC 8166 §4.5.1;
//! \[V2\] §7.2), which would be false here and would make a version 2 client fall back. The
//! connection stays open: a valid version 1 Call that follows is answered in version 1 (as
//! Linux's svcrdma, which takes version 1 only, keeps such a connection usable after its
//! ERR_VERS 1..1), a valid version 2 message in version 2.

use rpcrdma_proto::v2;
use rpcrdma_proto::v2::props::Property;
use rpcrdma_proto::v2::{flags, Htype, RPCRDMA_VERSION_TWO};

use super::*;
use crate::conn::{PeerProps, Version, Wire};

/// The version state of a connection at the responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Version 1, decided: the hot path.
    V1,
    /// Version 2, decided.
    V2,
    /// Either, until the first message says which.
    Open,
}

impl Mode {
    pub(super) fn for_config(version: Version) -> Mode {
        match version {
            Version::V1 => Mode::V1,
            Version::V2 => Mode::V2,
            Version::Auto => Mode::Open,
        }
    }
}

use rpcrdma_proto::xdr::word_at as word;

impl<P: Provider> ServerConn<P> {
    /// The message in receive `idx` on a connection that is not (yet) plain version 1:
    /// decides the version if still open, notes an RDMA2_CONNPROP, drops reverse-direction
    /// responses, and hands Calls (and what must be refused) to the answer and pull paths.
    pub(super) fn on_message_versioned(&mut self, idx: u32) {
        let i = idx as usize;
        let bytes = view::bytes(&self.recv[i], self.slots[i].byte_len as usize);
        let vers = word(bytes, 4);
        let htype = word(bytes, 12);
        // rdma_flags, in version 2 only (version 1 has its read list there).
        let response = vers == Some(RPCRDMA_VERSION_TWO)
            && word(bytes, 16).is_some_and(|f| f & flags::RESPONSE != 0);
        let connprop = htype == Some(Htype::ConnProp.to_u32()) && !response;
        let peer = if connprop {
            v2::HeaderView::parse(bytes)
                .ok()
                .and_then(|h| h.props())
                .map(|p| PeerProps::from_props(&p))
        } else {
            None
        };
        // Judged before anything else is decided (module docs).
        let undecodable_v2 =
            self.mode == Mode::Open && vers == Some(RPCRDMA_VERSION_TWO) && !decodes_as_v2(bytes);
        if !response {
            self.note_overrun();
        }
        if self.mode == Mode::Open && vers != Some(RPCRDMA_VERSION_TWO) {
            self.mode = Mode::V1;
            return self.on_call_v1(idx);
        }
        if undecodable_v2 {
            // Refused in version 2 without deciding the version (module docs; [V2] §5.3.3,
            // §7): no pull, whatever its lists say.
            self.slots[i].open_v2 = true;
            return self.answer_or_defer(idx);
        }
        if vers == Some(RPCRDMA_VERSION_TWO) && self.negotiation.wire() != Wire::V2 {
            // The first version 2 message (an open server's, or a version 2 server's first):
            // the defaults until an RDMA2_CONNPROP says otherwise.
            self.enter_v2(PeerProps::default());
        }
        if vers != Some(RPCRDMA_VERSION_TWO) {
            // Refused by the answer path (ERR_VERS).
            return self.answer_or_defer(idx);
        }
        if connprop {
            if let Some(peer) = peer {
                bump(&self.io.stats.connprops_received, 1);
                self.enter_v2(peer);
            }
            // Answered (or refused, if its properties are malformed) by the answer path.
            return self.answer_or_defer(idx);
        }
        if response {
            // A reply or error about a Call this end made (reverse direction, §3.2).
            return self.on_reverse_reply(idx, Wire::V2);
        }
        // A Call: classified once, in version 2 (`on_call_in`).
        self.on_call_in(idx, Wire::V2)
    }

    /// Makes the connection speak version 2 with the peer's properties.
    fn enter_v2(&mut self, peer: PeerProps) {
        if self.mode != Mode::V2 || self.negotiation.wire() != Wire::V2 {
            bump(&self.io.stats.v2_connections, 1);
        }
        self.mode = Mode::V2;
        self.io.wire = Wire::V2;
        let config = self.config;
        self.negotiation.adopt_v2(ConnEnd::Server, &config, peer);
    }
}

/// Whether `bytes`, a message with `rdma_vers` 2, decodes as a version 2 message: its
/// header parses in version 2's layout (not as the fixed layout of a version 1 ERR_VERS,
/// CHECKLIST G-13 a) and version 2's verdict finds nothing malformed in it — no
/// RDMA2_ERR_BAD_XDR or RDMA2_ERR_INVAL_HTYPE, the errors of a transport header that
/// "cannot be parsed" or whose type is unknown (\[V2\] §5.3.3). Only such a message commits
/// an open connection to version 2 (module docs). Judged only while the version is open.
fn decodes_as_v2(bytes: &[u8]) -> bool {
    let parses = v2::HeaderView::parse(bytes).is_ok_and(|h| !h.is_v1_err_vers());
    parses
        && !matches!(
            v2::judge(bytes, verdict::Role::Responder, false).action,
            v2::Action::Error(v2::RdmaError::BadXdr | v2::RdmaError::InvalHtype)
        )
}

/// The verdict on the Call `bytes` in the connection's version: resumed from `summary` when
/// it was judged as its pull started (the receive buffer is unchanged since), else judged
/// now (RFC 8166 §4.5; \[V2\] §5).
pub(super) fn judged<'a>(
    bytes: &'a [u8],
    summary: Option<&CallSummary>,
    wire: Wire,
) -> Result<AcceptedCall<'a>, Refusal> {
    if let Some(call) = summary.and_then(|s| verdict::resume_call(bytes, s)) {
        return Ok(call);
    }
    rpcrdma_proto::shape::judge_call_in(bytes, wire)
}

/// The answer to a version 2 message that is not a Call to run (`v`): this end's
/// RDMA2_CONNPROP for the peer's, an RDMA2_ERROR, GARBAGE_ARGS, or nothing.
pub(super) fn answer_refused_v2<P: Provider>(
    io: &mut FabricSide<P>,
    ring: &mut Buf<P>,
    bytes: &[u8],
    g: &General<'_>,
    v: v2::Verdict,
    echo: &mut Echo,
    run: &mut HandlerContext<'_, '_>,
) -> ReplyAction {
    match v.action {
        v2::Action::Properties => {
            let xid = word(bytes, 0).unwrap_or(0);
            let props = [Property::RecvBufSize(Some(g.recv_size))];
            let h = v2::Header {
                flags: flags::RESPONSE,
                ..v2::Header::connprop(xid, g.at.grant, &props)
            };
            match h.encode(view::bytes_mut(ring)) {
                Ok(n) => {
                    bump(&io.stats.connprops_sent, 1);
                    ReplyAction::Send {
                        len: n as u32,
                        inv: None,
                    }
                }
                Err(_) => ReplyAction::Fatal,
            }
        }
        v2::Action::Error(e) => reply::rdma_error(io, ring, bytes, g.at.grant, WireError::V2(e)),
        v2::Action::GarbageArgs => garbage_args(io, ring, bytes, g, echo, run),
        v2::Action::Call
        | v2::Action::Reply
        | v2::Action::PeerError(_)
        | v2::Action::FallBack { .. }
        | v2::Action::Discard => {
            bump(&io.stats.discards, 1);
            ReplyAction::Nothing
        }
    }
}
