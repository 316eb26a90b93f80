//! Work completions (`struct ibv_wc`, `enum ibv_wc_status`, `enum ibv_wc_opcode`).

use core::fmt;

/// The status of a work completion, one variant per `enum ibv_wc_status` value, with the
/// same numbering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`: the work request completed.
    #[default]
    Success = 0,
    /// `IBV_WC_LOC_LEN_ERR`: a message was longer than the receive buffer, or a send longer
    /// than the port's maximum message size.
    LocLenErr = 1,
    /// `IBV_WC_LOC_QP_OP_ERR`: an internal queue pair consistency error, e.g. a receive whose
    /// scatter list names memory that is not a valid writable registration.
    LocQpOpErr = 2,
    /// `IBV_WC_LOC_EEC_OP_ERR`: end-to-end context error (RD only).
    LocEecOpErr = 3,
    /// `IBV_WC_LOC_PROT_ERR`: a scatter-gather element named memory outside its region or
    /// without the needed rights.
    LocProtErr = 4,
    /// `IBV_WC_WR_FLUSH_ERR`: the queue pair was in the error state; the request was not
    /// executed.
    WrFlushErr = 5,
    /// `IBV_WC_MW_BIND_ERR`: a memory window bind was refused.
    MwBindErr = 6,
    /// `IBV_WC_BAD_RESP_ERR`: an unexpected transport response.
    BadRespErr = 7,
    /// `IBV_WC_LOC_ACCESS_ERR`: a protection error on a local RDMA Read destination.
    LocAccessErr = 8,
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder found the request invalid (for instance a
    /// message longer than its receive buffer).
    RemInvReqErr = 9,
    /// `IBV_WC_REM_ACCESS_ERR`: the responder refused a one-sided access (bad rkey, rights or
    /// bounds).
    RemAccessErr = 10,
    /// `IBV_WC_REM_OP_ERR`: the responder could not complete the operation (for instance its
    /// receive was malformed).
    RemOpErr = 11,
    /// `IBV_WC_RETRY_EXC_ERR`: transport retries exhausted; the peer is gone or not
    /// answering.
    RetryExcErr = 12,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retries exhausted; the peer had no
    /// receive posted.
    RnrRetryExcErr = 13,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`: reliable datagram domain violation (RD only).
    LocRddViolErr = 14,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`: invalid RD request (RD only).
    RemInvRdReqErr = 15,
    /// `IBV_WC_REM_ABORT_ERR`: the responder aborted the operation.
    RemAbortErr = 16,
    /// `IBV_WC_INV_EECN_ERR`: invalid end-to-end context number (RD only).
    InvEecnErr = 17,
    /// `IBV_WC_INV_EEC_STATE_ERR`: invalid end-to-end context state (RD only).
    InvEecStateErr = 18,
    /// `IBV_WC_FATAL_ERR`: a fatal device error.
    FatalErr = 19,
    /// `IBV_WC_RESP_TIMEOUT_ERR`: the response timed out.
    RespTimeoutErr = 20,
    /// `IBV_WC_GENERAL_ERR`: any other error.
    GeneralErr = 21,
    /// `IBV_WC_TM_ERR`: tag matching error.
    TmErr = 22,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`: tag matching rendezvous incomplete.
    TmRndvIncomplete = 23,
}

impl WcStatus {
    const ALL: [WcStatus; 24] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
        WcStatus::TmErr,
        WcStatus::TmRndvIncomplete,
    ];

    /// The `ibv_wc_status` value.
    pub const fn to_raw(self) -> u32 {
        self as u32
    }

    /// The status for an `ibv_wc_status` value, if it is one this enum knows.
    pub const fn from_raw(raw: u32) -> Option<WcStatus> {
        if (raw as usize) < Self::ALL.len() {
            Some(Self::ALL[raw as usize])
        } else {
            None
        }
    }

    /// Whether the work request succeeded.
    pub const fn is_ok(self) -> bool {
        matches!(self, WcStatus::Success)
    }

    /// The string `ibv_wc_status_str` gives for the status.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
            WcStatus::TmErr => "TM error",
            WcStatus::TmRndvIncomplete => "TM software rendezvous",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a successful work completion completed (`enum ibv_wc_opcode`, same numbering).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcOpcode {
    /// `IBV_WC_SEND`: a Send, Send With Immediate or Send With Invalidate.
    #[default]
    Send = 0,
    /// `IBV_WC_RDMA_WRITE`: an RDMA Write, with or without immediate.
    RdmaWrite = 1,
    /// `IBV_WC_RDMA_READ`: an RDMA Read.
    RdmaRead = 2,
    /// `IBV_WC_COMP_SWAP`: an atomic compare and swap.
    CompSwap = 3,
    /// `IBV_WC_FETCH_ADD`: an atomic fetch and add.
    FetchAdd = 4,
    /// `IBV_WC_BIND_MW`: a memory window bind.
    BindMw = 5,
    /// `IBV_WC_LOCAL_INV`: a local invalidation.
    LocalInv = 6,
    /// `IBV_WC_RECV`: a receive consumed by a Send.
    Recv = 128,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a receive consumed by an RDMA Write With Immediate.
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    /// The `ibv_wc_opcode` value.
    pub const fn to_raw(self) -> u32 {
        self as u32
    }

    /// The opcode for an `ibv_wc_opcode` value, if it is one this enum knows.
    pub const fn from_raw(raw: u32) -> Option<WcOpcode> {
        Some(match raw {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::CompSwap,
            4 => WcOpcode::FetchAdd,
            5 => WcOpcode::BindMw,
            6 => WcOpcode::LocalInv,
            128 => WcOpcode::Recv,
            129 => WcOpcode::RecvRdmaWithImm,
            _ => return None,
        })
    }

    /// Whether the completion belongs to the receive queue (`opcode & IBV_WC_RECV`).
    pub const fn is_recv(self) -> bool {
        self.to_raw() & 128 != 0
    }
}

/// A work completion (`struct ibv_wc`, the fields an RC queue pair fills).
///
/// As in verbs, only `wr_id`, `status` and `qp_num` are meaningful when `status` is not
/// [`WcStatus::Success`]; `opcode`, `byte_len`, `imm` and `invalidated_rkey` describe
/// successful completions only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Wc {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// Bytes received (receive completions: the Send's length, or the RDMA Write's length for
    /// `RecvRdmaWithImm`); providers may also fill it for sends and RDMA operations, but
    /// only receive completions are guaranteed.
    pub byte_len: u32,
    /// Immediate data of a Send With Immediate or RDMA Write With Immediate, host order
    /// (`IBV_WC_WITH_IMM`).
    pub imm: Option<u32>,
    /// The rkey a Send With Invalidate invalidated at this host (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    /// The local queue pair the work request was posted to.
    pub qp_num: u32,
    /// Provider-specific error detail (`vendor_err`); 0 if none.
    pub vendor_err: u32,
}

impl Wc {
    /// Whether the completion is for a receive work request.
    pub fn is_recv(&self) -> bool {
        self.opcode.is_recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_numbering_matches_verbs() {
        assert_eq!(WcStatus::Success.to_raw(), 0);
        assert_eq!(WcStatus::WrFlushErr.to_raw(), 5);
        assert_eq!(WcStatus::RemAccessErr.to_raw(), 10);
        assert_eq!(WcStatus::RnrRetryExcErr.to_raw(), 13);
        assert_eq!(WcStatus::GeneralErr.to_raw(), 21);
        for raw in 0..24 {
            assert_eq!(WcStatus::from_raw(raw).unwrap().to_raw(), raw);
        }
        assert_eq!(WcStatus::from_raw(24), None);
    }

    #[test]
    fn opcode_numbering_matches_verbs() {
        for raw in [0, 1, 2, 3, 4, 5, 6, 128, 129] {
            assert_eq!(WcOpcode::from_raw(raw).unwrap().to_raw(), raw);
        }
        assert!(WcOpcode::RecvRdmaWithImm.is_recv());
        assert!(!WcOpcode::RdmaRead.is_recv());
        assert_eq!(WcOpcode::from_raw(7), None);
    }
}
