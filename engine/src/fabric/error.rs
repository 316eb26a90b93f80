//! Errors of the fabric interface. Failures of work requests are not errors of a call: they
//! arrive as [`Wc`](super::Wc) statuses. The errors here are the synchronous refusals,
//! but for the connection steps' [`ConnectError`](super::ConnectError), which carries a
//! rejection's private data and so is beside it in `conn.rs` (which imports this file;
//! this file imports none of its siblings).

use core::fmt;

/// Why a post call refused a work request. Nothing of the refused request was queued (as
/// when `ibv_post_send` returns an error and sets `bad_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// Every slot of the queue is taken: the queue depth counts each request from its post
    /// until its completion (or the completion of a later signaled request on the same
    /// queue) has been polled.
    QueueFull,
    /// More scatter-gather elements than the queue pair's `max_send_sge`/`max_recv_sge`.
    TooManySge {
        /// Elements in the request.
        given: usize,
        /// The queue pair's limit.
        max: u32,
    },
    /// Inline payload larger than the queue pair's `max_inline_data`.
    InlineTooLarge {
        /// Bytes in the request.
        given: usize,
        /// The queue pair's limit.
        max: u32,
    },
    /// The request is malformed for its operation (for instance an inline RDMA Read).
    InvalidWr(&'static str),
    /// Sends are not accepted before the connection is established.
    NotConnected,
    /// The provider's post call failed with this errno.
    Os(i32),
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PostError::QueueFull => f.write_str("work queue full"),
            PostError::TooManySge { given, max } => {
                write!(
                    f,
                    "{given} scatter-gather elements exceed the maximum {max}"
                )
            }
            PostError::InlineTooLarge { given, max } => {
                write!(f, "{given} inline bytes exceed the maximum {max}")
            }
            PostError::InvalidWr(why) => write!(f, "invalid work request: {why}"),
            PostError::NotConnected => f.write_str("queue pair not connected"),
            PostError::Os(errno) => write!(f, "post failed with errno {errno}"),
        }
    }
}

impl std::error::Error for PostError {}

/// A post call on a list of work requests refused the one at `index`; the requests before
/// it were posted, it and the ones after it were not (the `bad_wr` of verbs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadWr {
    /// Position of the refused request in the list.
    pub index: usize,
    /// Why it was refused.
    pub error: PostError,
}

impl fmt::Display for BadWr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "work request {} refused: {}", self.index, self.error)
    }
}

impl std::error::Error for BadWr {}

/// Why polling a completion queue failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqError {
    /// More completions arrived than the queue holds; at least one was lost and the queue
    /// pairs whose completions were lost are in the error state (`IBV_EVENT_CQ_ERR`). The
    /// queue is unusable from then on.
    Overrun,
    /// The provider's poll call failed with this errno.
    Os(i32),
}

impl fmt::Display for CqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CqError::Overrun => f.write_str("completion queue overrun"),
            CqError::Os(errno) => write!(f, "poll failed with errno {errno}"),
        }
    }
}

impl std::error::Error for CqError {}

/// Why a control-path call (opening a device, allocating a domain, region, window,
/// completion queue or queue pair) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FabricError {
    /// No device of that name, or no device at all.
    NoDevice,
    /// An argument is outside what the call or the device accepts.
    InvalidArgument(&'static str),
    /// A fixed-size resource of the provider is used up.
    Exhausted(&'static str),
    /// A system call failed.
    Os {
        /// The call.
        call: &'static str,
        /// Its errno.
        errno: i32,
    },
}

impl FabricError {
    /// The error of a failed system call, with the thread's current errno.
    pub fn last_os(call: &'static str) -> FabricError {
        FabricError::Os {
            call,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FabricError::NoDevice => f.write_str("no such RDMA device"),
            FabricError::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            FabricError::Exhausted(what) => write!(f, "out of {what}"),
            FabricError::Os { call, errno } => {
                write!(
                    f,
                    "{call} failed: {}",
                    std::io::Error::from_raw_os_error(*errno)
                )
            }
        }
    }
}

impl std::error::Error for FabricError {}
