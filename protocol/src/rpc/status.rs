//! The outcomes a reply carries (RFC 5531 §9): `accept_stat` of an accepted reply, and the
//! `rejected_reply` of a denied one with its `auth_stat`.

use crate::error::{DecodeError, EncodeError};
use crate::xdr::{XdrReader, XdrWriter};

/// The `reply_data` of an accepted reply: `accept_stat` and its arm (RFC 5531 §9,
/// `accepted_reply`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcceptStat {
    /// SUCCESS (0): the procedure ran; its results follow the header.
    Success,
    /// PROG_UNAVAIL (1): the program is not exported.
    ProgUnavail,
    /// PROG_MISMATCH (2): the program version is not supported.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL (3): the program does not support the procedure.
    ProcUnavail,
    /// GARBAGE_ARGS (4): the arguments could not be decoded.
    GarbageArgs,
    /// SYSTEM_ERR (5): an error on the server such as a memory allocation failure.
    SystemErr,
}

impl AcceptStat {
    /// The `accept_stat` wire value.
    pub const fn code(self) -> u32 {
        match self {
            AcceptStat::Success => 0,
            AcceptStat::ProgUnavail => 1,
            AcceptStat::ProgMismatch { .. } => 2,
            AcceptStat::ProcUnavail => 3,
            AcceptStat::GarbageArgs => 4,
            AcceptStat::SystemErr => 5,
        }
    }

    /// The name RFC 5531 §9 gives the status, e.g. `"PROG_MISMATCH"`.
    pub const fn name(self) -> &'static str {
        match self {
            AcceptStat::Success => "SUCCESS",
            AcceptStat::ProgUnavail => "PROG_UNAVAIL",
            AcceptStat::ProgMismatch { .. } => "PROG_MISMATCH",
            AcceptStat::ProcUnavail => "PROC_UNAVAIL",
            AcceptStat::GarbageArgs => "GARBAGE_ARGS",
            AcceptStat::SystemErr => "SYSTEM_ERR",
        }
    }

    /// Encoded size: the status word, plus `mismatch_info` for PROG_MISMATCH.
    pub(super) const fn encoded_len(self) -> usize {
        match self {
            AcceptStat::ProgMismatch { .. } => 12,
            _ => 4,
        }
    }

    pub(super) fn decode(r: &mut XdrReader<'_>) -> Result<Self, DecodeError> {
        let offset = r.position();
        Ok(match r.u32()? {
            0 => AcceptStat::Success,
            1 => AcceptStat::ProgUnavail,
            2 => AcceptStat::ProgMismatch {
                low: r.u32()?,
                high: r.u32()?,
            },
            3 => AcceptStat::ProcUnavail,
            4 => AcceptStat::GarbageArgs,
            5 => AcceptStat::SystemErr,
            value => return Err(DecodeError::InvalidDiscriminant { offset, value }),
        })
    }

    pub(super) fn put(self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.code())?;
        if let AcceptStat::ProgMismatch { low, high } = self {
            w.put_u32(low)?;
            w.put_u32(high)?;
        }
        Ok(())
    }
}

/// Why authentication failed, `auth_stat` (RFC 5531 §9).
///
/// A newtype rather than an enum: a reply carrying a value this crate does not name still
/// decodes, and [`AuthStat::name`] returns `None` for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AuthStat(pub u32);

impl AuthStat {
    /// AUTH_OK (0): success.
    pub const AUTH_OK: AuthStat = AuthStat(0);
    /// AUTH_BADCRED (1): bad credential (seal broken).
    pub const AUTH_BADCRED: AuthStat = AuthStat(1);
    /// AUTH_REJECTEDCRED (2): the client must begin a new session.
    pub const AUTH_REJECTEDCRED: AuthStat = AuthStat(2);
    /// AUTH_BADVERF (3): bad verifier (seal broken).
    pub const AUTH_BADVERF: AuthStat = AuthStat(3);
    /// AUTH_REJECTEDVERF (4): verifier expired or replayed.
    pub const AUTH_REJECTEDVERF: AuthStat = AuthStat(4);
    /// AUTH_TOOWEAK (5): rejected for security reasons.
    pub const AUTH_TOOWEAK: AuthStat = AuthStat(5);
    /// AUTH_INVALIDRESP (6): bogus response verifier (a client-side failure).
    pub const AUTH_INVALIDRESP: AuthStat = AuthStat(6);
    /// AUTH_FAILED (7): reason unknown (a client-side failure).
    pub const AUTH_FAILED: AuthStat = AuthStat(7);
    /// AUTH_KERB_GENERIC (8): Kerberos generic error (deprecated, RFC 2695).
    pub const AUTH_KERB_GENERIC: AuthStat = AuthStat(8);
    /// AUTH_TIMEEXPIRE (9): time of credential expired (deprecated, RFC 2695).
    pub const AUTH_TIMEEXPIRE: AuthStat = AuthStat(9);
    /// AUTH_TKT_FILE (10): problem with ticket file (deprecated, RFC 2695).
    pub const AUTH_TKT_FILE: AuthStat = AuthStat(10);
    /// AUTH_DECODE (11): cannot decode authenticator (deprecated, RFC 2695).
    pub const AUTH_DECODE: AuthStat = AuthStat(11);
    /// AUTH_NET_ADDR (12): wrong net address in ticket (deprecated, RFC 2695).
    pub const AUTH_NET_ADDR: AuthStat = AuthStat(12);
    /// RPCSEC_GSS_CREDPROBLEM (13): no credentials for user (RFC 2203).
    pub const RPCSEC_GSS_CREDPROBLEM: AuthStat = AuthStat(13);
    /// RPCSEC_GSS_CTXPROBLEM (14): problem with context (RFC 2203).
    pub const RPCSEC_GSS_CTXPROBLEM: AuthStat = AuthStat(14);

    /// The name RFC 5531 §9 gives the value, e.g. `"AUTH_BADCRED"`, or `None` for a value it
    /// does not define.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "AUTH_OK",
            1 => "AUTH_BADCRED",
            2 => "AUTH_REJECTEDCRED",
            3 => "AUTH_BADVERF",
            4 => "AUTH_REJECTEDVERF",
            5 => "AUTH_TOOWEAK",
            6 => "AUTH_INVALIDRESP",
            7 => "AUTH_FAILED",
            8 => "AUTH_KERB_GENERIC",
            9 => "AUTH_TIMEEXPIRE",
            10 => "AUTH_TKT_FILE",
            11 => "AUTH_DECODE",
            12 => "AUTH_NET_ADDR",
            13 => "RPCSEC_GSS_CREDPROBLEM",
            14 => "RPCSEC_GSS_CTXPROBLEM",
            _ => return None,
        })
    }
}

/// The body of a denied reply, `rejected_reply` (RFC 5531 §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectedReply {
    /// RPC_MISMATCH (0): the RPC version is not supported; the inclusive range supported.
    RpcMismatch {
        /// Lowest RPC version supported.
        low: u32,
        /// Highest RPC version supported.
        high: u32,
    },
    /// AUTH_ERROR (1): the server refuses to authenticate the caller.
    AuthError(AuthStat),
}

impl RejectedReply {
    /// The `reject_stat` wire value.
    pub const fn code(self) -> u32 {
        match self {
            RejectedReply::RpcMismatch { .. } => 0,
            RejectedReply::AuthError(_) => 1,
        }
    }

    /// The name RFC 5531 §9 gives the `reject_stat`: `"RPC_MISMATCH"` or `"AUTH_ERROR"`.
    pub const fn name(self) -> &'static str {
        match self {
            RejectedReply::RpcMismatch { .. } => "RPC_MISMATCH",
            RejectedReply::AuthError(_) => "AUTH_ERROR",
        }
    }

    /// Encoded size: the status word and its arm.
    pub(super) const fn encoded_len(self) -> usize {
        match self {
            RejectedReply::RpcMismatch { .. } => 12,
            RejectedReply::AuthError(_) => 8,
        }
    }

    pub(super) fn decode(r: &mut XdrReader<'_>) -> Result<Self, DecodeError> {
        let offset = r.position();
        Ok(match r.u32()? {
            0 => RejectedReply::RpcMismatch {
                low: r.u32()?,
                high: r.u32()?,
            },
            1 => RejectedReply::AuthError(AuthStat(r.u32()?)),
            value => return Err(DecodeError::InvalidDiscriminant { offset, value }),
        })
    }

    pub(super) fn put(self, w: &mut XdrWriter<'_>) -> Result<(), EncodeError> {
        w.put_u32(self.code())?;
        match self {
            RejectedReply::RpcMismatch { low, high } => {
                w.put_u32(low)?;
                w.put_u32(high)
            }
            RejectedReply::AuthError(stat) => w.put_u32(stat.0),
        }
    }
}
