//! ONC RPC version 2 message headers (RFC 5531).
//!
//! [`RpcMessage`], [`CallHeader`] and [`ReplyHeader`] decode the header of a received RPC
//! message in place (zero copy, no allocation) and report where the procedure's arguments or
//! results start; the same types describe a header to send and encode it into a
//! caller-provided buffer after computing its exact size. The shapes follow the XDR of
//! RFC 5531 §9:
//!
//! ```text
//! call   xid CALL(0)  rpcvers prog vers proc  cred(flavor len body)  verf(flavor len body)
//! reply  xid REPLY(1) MSG_ACCEPTED(0) verf(flavor len body) accept_stat [low high]
//! reply  xid REPLY(1) MSG_DENIED(1)   RPC_MISMATCH(0) low high | AUTH_ERROR(1) auth_stat
//! ```
//!
//! Credentials and verifiers are carried as [`OpaqueAuth`] whatever their flavor;
//! [`AuthSys`] decodes and encodes the body of an AUTH_SYS credential (RFC 5531 appendix A).
//!
//! The code is split by concern: the shared constants and [`flavor_name`] live here;
//! `auth` holds [`OpaqueAuth`], `auth_sys` the AUTH_SYS body ([`AuthSys`], [`Gids`]),
//! `call` the CALL header, `status` the `accept_stat`, `auth_stat` and `rejected_reply`
//! values, `reply` the REPLY header, `message` the `rpc_msg` switch ([`RpcMessage`]);
//! `wire` and `direct` hold the helpers the encoders and decoders share.

mod auth;
mod auth_sys;
mod call;
mod direct;
mod message;
mod reply;
mod status;
mod wire;

pub use auth::OpaqueAuth;
pub use auth_sys::{AuthSys, Gids, GidsIter};
pub use call::CallHeader;
pub use message::RpcMessage;
pub use reply::{ReplyBody, ReplyHeader};
pub use status::{AcceptStat, AuthStat, RejectedReply};

/// The only RPC protocol version: `rpcvers` "MUST be equal to 2" (RFC 5531 §9).
pub const RPC_VERSION: u32 = 2;
/// Largest body of an `opaque_auth`, in bytes (RFC 5531 §8.2: `opaque body<400>`).
pub const MAX_AUTH_BYTES: usize = 400;
/// Size of a Call header with AUTH_NONE credential and verifier (RFC 5531 §9: xid, CALL,
/// rpcvers, prog, vers, proc, two empty `opaque_auth`s).
pub const AUTH_NONE_CALL_LEN: usize = 40;
/// Size of an accepted Reply header with the AUTH_NONE verifier (RFC 5531 §9: xid, REPLY,
/// MSG_ACCEPTED, verifier flavor and length, accept_stat).
pub const AUTH_NONE_ACCEPTED_LEN: usize = 24;
/// Largest `machinename` of an AUTH_SYS credential, in bytes (RFC 5531 appendix A:
/// `string machinename<255>`).
pub const MAX_MACHINENAME_LEN: usize = 255;
/// Largest number of supplementary groups in an AUTH_SYS credential (RFC 5531 appendix A:
/// `unsigned int gids<16>`).
pub const MAX_GIDS: usize = 16;

/// `msg_type` CALL (RFC 5531 §9).
pub const CALL: u32 = 0;
/// `msg_type` REPLY (RFC 5531 §9).
pub const REPLY: u32 = 1;

/// `reply_stat` MSG_ACCEPTED (RFC 5531 §9).
pub const MSG_ACCEPTED: u32 = 0;
/// `reply_stat` MSG_DENIED (RFC 5531 §9).
pub const MSG_DENIED: u32 = 1;

/// `auth_flavor` AUTH_NONE: no authentication (RFC 5531 §9, §10.1).
pub const AUTH_NONE: u32 = 0;
/// `auth_flavor` AUTH_SYS: Unix-style credentials (RFC 5531 §9, appendix A).
pub const AUTH_SYS: u32 = 1;
/// `auth_flavor` AUTH_SHORT: a short-hand verifier a server may return for AUTH_SYS
/// (RFC 5531 §9, appendix A).
pub const AUTH_SHORT: u32 = 2;
/// `auth_flavor` AUTH_DH: Diffie-Hellman authentication (RFC 5531 §9; RFC 2695).
pub const AUTH_DH: u32 = 3;
/// `auth_flavor` RPCSEC_GSS (RFC 5531 §9; RFC 2203).
pub const RPCSEC_GSS: u32 = 6;

/// Encoded size of the smallest call header: six words plus two empty AUTH_NONE
/// `opaque_auth`s.
pub const MIN_CALL_LEN: usize = 40;
/// Encoded size of the smallest reply header: a MSG_DENIED AUTH_ERROR (five words).
pub const MIN_REPLY_LEN: usize = 20;

/// The RFC 5531 §9 name of an `auth_flavor`, e.g. `"AUTH_SYS"`, or `None` for a flavor the
/// RFC's enum does not list.
pub const fn flavor_name(flavor: u32) -> Option<&'static str> {
    match flavor {
        AUTH_NONE => Some("AUTH_NONE"),
        AUTH_SYS => Some("AUTH_SYS"),
        AUTH_SHORT => Some("AUTH_SHORT"),
        AUTH_DH => Some("AUTH_DH"),
        RPCSEC_GSS => Some("RPCSEC_GSS"),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
