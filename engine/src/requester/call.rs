//! What an RPC is to a caller of the requester: the Call to send ([`CallArgs`]), the reply
//! or the reason there is none ([`Completion`], [`Reply`], [`RpcError`]), and why a Call
//! could not be submitted or cancelled ([`SubmitError`], [`CancelError`]).

use super::*;

/// One RPC to send.
#[derive(Clone, Copy, Debug)]
pub struct CallArgs<'a> {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_num: u32,
    /// XDR-encoded arguments (a multiple of 4 bytes), before the DDP-eligible argument.
    pub args: &'a [u8],
    /// The DDP-eligible argument: an opaque that ends the arguments. Sent in a Read chunk
    /// when the Call would not fit inline otherwise.
    pub bulk_arg: Option<&'a [u8]>,
    /// One Write chunk per DDP-eligible result, with the result's largest length; 0 asks for
    /// the result inline (an empty Write chunk, RFC 8166 §4.3.2.3).
    pub bulk_results: &'a [u32],
    /// Largest inline results (not counting the DDP-eligible results' data).
    pub max_results: u32,
    /// How long to wait for the reply.
    pub timeout: Duration,
    /// The credential (RFC 5531 §8.2, §9): AUTH_NONE by default; AUTH_SYS (its body made
    /// with [`AuthSys::encode`](rpcrdma_proto::rpc::AuthSys::encode)) or any other flavor
    /// with a body of at most 400 bytes. The verifier sent is AUTH_NONE.
    pub cred: OpaqueAuth<'a>,
    /// Forms to use where smaller ones would fit (a Chunked or Long Call, a Reply chunk):
    /// none by default, the thresholds decide (RFC 8166 §3.5).
    pub forced: Forced,
    /// With [`Registration::Mixed`]: expose this RPC's chunks through the regions' own
    /// rkeys (no bind, no invalidation) instead of per-RPC windows. Ignored otherwise.
    pub persistent: bool,
}

impl<'a> CallArgs<'a> {
    /// A Call with inline arguments only, results of at most `max_results` bytes, an
    /// AUTH_NONE credential and a 5-second timeout.
    pub fn new(prog: u32, vers: u32, proc_num: u32, args: &'a [u8], max_results: u32) -> Self {
        CallArgs {
            prog,
            vers,
            proc_num,
            args,
            bulk_arg: None,
            bulk_results: &[],
            max_results,
            timeout: Duration::from_secs(5),
            cred: OpaqueAuth::NONE,
            forced: Forced {
                min_form: None,
                reply_chunk: false,
            },
            persistent: false,
        }
    }
}

/// Why an RPC did not produce a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcError {
    /// No reply in time; the RPC's memory was invalidated before this was reported.
    Timeout,
    /// Cancelled by [`Client::cancel`]; the RPC's memory was invalidated before this was
    /// reported.
    Cancelled,
    /// The connection was lost (with retransmission: and could not be re-established in
    /// the policy's attempts); the RPC's memory is unreachable.
    ConnectionLost,
    /// The responder answered RDMA_ERROR / ERR_VERS with its supported range.
    ErrVers {
        /// Lowest version.
        low: u32,
        /// Highest version.
        high: u32,
    },
    /// The responder answered RDMA_ERROR / ERR_CHUNK.
    ErrChunk,
    /// A Long Reply whose RPC header does not decode.
    BadReply,
    /// The responder answered with a version 2 RDMA2_ERROR (\[V2\] §5.3.3): its code and
    /// details (the responder's limit, the length it needed).
    Rdma2(rpcrdma_proto::v2::RdmaError),
    /// The blocking [`Client::call`] (or `call_in_place`) did not send the Call: it is too
    /// large for any form or the buffers, or invalid ([`SubmitError::TooLarge`],
    /// [`SubmitError::Invalid`]).
    NotSent(SubmitError),
}

impl core::fmt::Display for RpcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for RpcError {}

/// Why a Call could not be submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// No credit (or send-queue room) now, or reconnecting after a loss with
    /// retransmission on: poll and retry.
    WouldBlock,
    /// The Call does not fit any form, or the buffers (RFC 8166 §3.5).
    TooLarge(Option<PlanError>),
    /// Arguments that are not whole XDR units, or more chunks or segments than supported.
    Invalid(&'static str),
    /// The connection is lost (and, with retransmission, the attempts ran out);
    /// [`Client::reconnect`].
    Disconnected,
}

impl core::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for SubmitError {}

/// Why [`Client::cancel`] cancelled nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelError {
    /// No RPC with this XID waits for its reply: it was never submitted on this client, it
    /// has completed, or its completion is already under way (its reply, error or timeout
    /// is in hand, or it was cancelled before).
    NotPending,
}

impl core::fmt::Display for CancelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for CancelError {}

/// A reply, borrowed from the receive buffer (Short Reply) or the Reply chunk (Long Reply)
/// and the Write chunks; valid during the completion callback only.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    /// The RPC reply header (status).
    pub rpc: ReplyHeader<'a>,
    /// The results as received: every result inline, except that a DDP-eligible result
    /// placed in a Write chunk is represented by its opaque length word only.
    pub results: &'a [u8],
    pub(super) bulk: [&'a [u8]; MAX_WRITE_CHUNKS],
    pub(super) n_bulk: usize,
}

impl<'a> Reply<'a> {
    /// The DDP-eligible results received through Write chunks, one per chunk provided
    /// (empty for an unused or empty chunk).
    pub fn bulk(&self) -> &[&'a [u8]] {
        &self.bulk[..self.n_bulk]
    }

    /// Whether the RPC succeeded (MSG_ACCEPTED / SUCCESS).
    pub fn is_success(&self) -> bool {
        self.rpc.is_success()
    }
}

/// A finished RPC.
#[derive(Debug)]
pub struct Completion<'a> {
    /// The tag given to [`Client::submit`].
    pub tag: u64,
    /// The XID it used.
    pub xid: u32,
    /// The reply or why there is none.
    pub result: Result<Reply<'a>, RpcError>,
}
