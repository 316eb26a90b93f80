//! The header of a REPLY message: `xid`, `mtype` = REPLY and `reply_body` switched on
//! `reply_stat` (RFC 5531 §9), and the replies a server sends with the AUTH_NONE verifier
//! (§10.1).

use super::auth::OpaqueAuth;
use super::direct::auth_body_at;
use super::status::{AcceptStat, AuthStat, RejectedReply};
use super::wire::{bad_msg_type, encode_exact, read_prefix, MSG_PREFIX_LEN};
use super::{MSG_ACCEPTED, MSG_DENIED, REPLY};
use crate::error::{DecodeError, EncodeError};
use crate::xdr::XdrReader;
use crate::xdr::{be32_at, fixed_at};

#[cfg(doc)]
use super::{MAX_AUTH_BYTES, RPC_VERSION};

/// The body of a REPLY message, `reply_body` switched on `reply_stat` (RFC 5531 §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyBody<'a> {
    /// MSG_ACCEPTED (0): the call was authenticated; `accepted_reply`.
    Accepted {
        /// `verf`: the server's verifier.
        verf: OpaqueAuth<'a>,
        /// `reply_data`: the outcome.
        stat: AcceptStat,
    },
    /// MSG_DENIED (1): the call was rejected; `rejected_reply`.
    Denied(RejectedReply),
}

impl ReplyBody<'_> {
    /// The `reply_stat` wire value.
    pub const fn code(&self) -> u32 {
        match self {
            ReplyBody::Accepted { .. } => MSG_ACCEPTED,
            ReplyBody::Denied(_) => MSG_DENIED,
        }
    }

    /// The name RFC 5531 §9 gives the `reply_stat`: `"MSG_ACCEPTED"` or `"MSG_DENIED"`.
    pub const fn name(&self) -> &'static str {
        match self {
            ReplyBody::Accepted { .. } => "MSG_ACCEPTED",
            ReplyBody::Denied(_) => "MSG_DENIED",
        }
    }
}

/// The header of a REPLY message: `xid`, `mtype` = REPLY and `reply_body` (RFC 5531 §9).
///
/// For an accepted SUCCESS reply the procedure's results follow the header;
/// [`ReplyHeader::parse`] returns where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplyHeader<'a> {
    /// `xid`: the transaction ID of the call answered.
    pub xid: u32,
    /// The reply's status and its arm.
    pub body: ReplyBody<'a>,
}

impl<'a> ReplyHeader<'a> {
    /// An accepted reply with the given verifier and outcome.
    pub const fn accepted(xid: u32, verf: OpaqueAuth<'a>, stat: AcceptStat) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Accepted { verf, stat },
        }
    }

    /// Decodes a reply header at the start of `buf` and returns it with the header's length,
    /// the offset at which a SUCCESS reply's results start (for the other statuses nothing
    /// follows).
    ///
    /// An `mtype` other than REPLY, and unknown `reply_stat`, `accept_stat` and `reject_stat`
    /// values, are [`DecodeError::InvalidDiscriminant`]. An unknown `auth_stat` decodes.
    #[inline]
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        match Self::parse_direct(buf) {
            Some(parsed) => Ok(parsed),
            None => Self::parse_reference(buf),
        }
    }

    /// [`ReplyHeader::parse`] by direct loads (RFC 5531 §9 `reply_body`; the verifier body at
    /// most 400 bytes, §8.2): `Some` exactly when the reference decoder succeeds, with the
    /// same result; `None` for anything it would reject.
    #[inline]
    pub(crate) fn parse_direct(buf: &'a [u8]) -> Option<(Self, usize)> {
        // xid, mtype, reply_stat, then verf.flavor and verf.length (accepted) or reject_stat
        // and its first word (denied).
        let w: &[u8; 20] = fixed_at(buf, 0)?;
        if be32_at(w, 4) != REPLY {
            return None;
        }
        let (body, end) = match be32_at(w, 8) {
            MSG_ACCEPTED => {
                let (verf, at) = auth_body_at(buf, 20, be32_at(w, 16))?;
                let verf = OpaqueAuth {
                    flavor: be32_at(w, 12),
                    body: verf,
                };
                let (stat, end) = match be32_at(fixed_at::<4>(buf, at)?, 0) {
                    0 => (AcceptStat::Success, at + 4),
                    1 => (AcceptStat::ProgUnavail, at + 4),
                    2 => {
                        let m: &[u8; 8] = fixed_at(buf, at + 4)?;
                        let (low, high) = (be32_at(m, 0), be32_at(m, 4));
                        (AcceptStat::ProgMismatch { low, high }, at + 12)
                    }
                    3 => (AcceptStat::ProcUnavail, at + 4),
                    4 => (AcceptStat::GarbageArgs, at + 4),
                    5 => (AcceptStat::SystemErr, at + 4),
                    _ => return None,
                };
                (ReplyBody::Accepted { verf, stat }, end)
            }
            MSG_DENIED => match be32_at(w, 12) {
                0 => {
                    let high = be32_at(fixed_at::<4>(buf, 20)?, 0);
                    let low = be32_at(w, 16);
                    (
                        ReplyBody::Denied(RejectedReply::RpcMismatch { low, high }),
                        24,
                    )
                }
                1 => (
                    ReplyBody::Denied(RejectedReply::AuthError(AuthStat(be32_at(w, 16)))),
                    20,
                ),
                _ => return None,
            },
            _ => return None,
        };
        Some((
            ReplyHeader {
                xid: be32_at(w, 0),
                body,
            },
            end,
        ))
    }

    /// The cursor-based decoder: the reference the direct one agrees with, and the source
    /// of the typed error for input the direct one rejects.
    #[cold]
    #[inline(never)]
    pub(super) fn parse_reference(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let (mut r, xid, mtype) = read_prefix(buf)?;
        if mtype != REPLY {
            return Err(bad_msg_type(mtype));
        }
        let reply = Self::decode_body(xid, &mut r)?;
        Ok((reply, r.position()))
    }

    /// Decodes `reply_body` (RFC 5531 §9) after the prefix.
    pub(super) fn decode_body(xid: u32, r: &mut XdrReader<'a>) -> Result<Self, DecodeError> {
        let offset = r.position();
        let body = match r.u32()? {
            MSG_ACCEPTED => ReplyBody::Accepted {
                verf: OpaqueAuth::decode(r)?,
                stat: AcceptStat::decode(r)?,
            },
            MSG_DENIED => ReplyBody::Denied(RejectedReply::decode(r)?),
            value => return Err(DecodeError::InvalidDiscriminant { offset, value }),
        };
        Ok(ReplyHeader { xid, body })
    }

    /// The outcome of an accepted reply, `None` for a denied one.
    pub const fn accept_stat(&self) -> Option<AcceptStat> {
        match self.body {
            ReplyBody::Accepted { stat, .. } => Some(stat),
            ReplyBody::Denied(_) => None,
        }
    }

    /// The server's verifier of an accepted reply, `None` for a denied one.
    pub const fn verf(&self) -> Option<OpaqueAuth<'a>> {
        match self.body {
            ReplyBody::Accepted { verf, .. } => Some(verf),
            ReplyBody::Denied(_) => None,
        }
    }

    /// `true` for MSG_ACCEPTED with SUCCESS: results follow the header.
    pub const fn is_success(&self) -> bool {
        matches!(
            self.body,
            ReplyBody::Accepted {
                stat: AcceptStat::Success,
                ..
            }
        )
    }

    /// Exact encoded size of the header (a SUCCESS reply's results not included).
    pub const fn encoded_len(&self) -> usize {
        MSG_PREFIX_LEN
            + 4
            + match self.body {
                ReplyBody::Accepted { verf, stat } => verf.encoded_len() + stat.encoded_len(),
                ReplyBody::Denied(rej) => rej.encoded_len(),
            }
    }

    /// Encodes the header at the start of `out` and returns its length; for SUCCESS the caller
    /// writes the results after it.
    ///
    /// A verifier body over [`MAX_AUTH_BYTES`] is [`EncodeError::TooLong`]; a buffer shorter
    /// than [`ReplyHeader::encoded_len`] is [`EncodeError::BufferTooSmall`] and nothing is
    /// written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if let ReplyBody::Accepted { verf, .. } = &self.body {
            verf.check()?;
        }
        encode_exact(out, self.encoded_len(), |w| {
            w.put_u32(self.xid)?;
            w.put_u32(REPLY)?;
            w.put_u32(self.body.code())?;
            match self.body {
                ReplyBody::Accepted { verf, stat } => {
                    verf.put(w)?;
                    stat.put(w)
                }
                ReplyBody::Denied(rej) => rej.put(w),
            }
        })
    }
}

/// Replies a server sends without a verifier of its own: accepted replies carry the AUTH_NONE
/// verifier (RFC 5531 §10.1).
impl ReplyHeader<'static> {
    /// MSG_ACCEPTED / SUCCESS: the results follow.
    pub const fn accepted_success(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::Success)
    }

    /// MSG_ACCEPTED / PROG_UNAVAIL.
    pub const fn prog_unavail(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::ProgUnavail)
    }

    /// MSG_ACCEPTED / PROG_MISMATCH with the inclusive range of program versions supported.
    pub const fn prog_mismatch(xid: u32, low: u32, high: u32) -> Self {
        Self::accepted(
            xid,
            OpaqueAuth::NONE,
            AcceptStat::ProgMismatch { low, high },
        )
    }

    /// MSG_ACCEPTED / PROC_UNAVAIL.
    pub const fn proc_unavail(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::ProcUnavail)
    }

    /// MSG_ACCEPTED / GARBAGE_ARGS.
    pub const fn garbage_args(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::GarbageArgs)
    }

    /// MSG_ACCEPTED / SYSTEM_ERR.
    pub const fn system_err(xid: u32) -> Self {
        Self::accepted(xid, OpaqueAuth::NONE, AcceptStat::SystemErr)
    }

    /// MSG_DENIED with the given `rejected_reply`.
    pub const fn denied(xid: u32, rej: RejectedReply) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Denied(rej),
        }
    }

    /// MSG_DENIED / RPC_MISMATCH with the inclusive range of RPC versions supported (2 to 2
    /// for this crate, [`RPC_VERSION`]).
    pub const fn rpc_mismatch(xid: u32, low: u32, high: u32) -> Self {
        Self::denied(xid, RejectedReply::RpcMismatch { low, high })
    }

    /// MSG_DENIED / AUTH_ERROR with the given `auth_stat`.
    pub const fn auth_error(xid: u32, stat: AuthStat) -> Self {
        Self::denied(xid, RejectedReply::AuthError(stat))
    }
}
