//! Send-queue slot accounting.
//!
//! A send-queue request holds its slot until its completion, or the completion of a later
//! signaled request, has been polled (see [`crate::fabric`]). Requests are numbered from 1
//! in posting order; a signaled request carries its number in its `wr_id`
//! ([`super::wrid`]), and polling its completion retires every request up to it. Posting
//! never exceeds the depth, so the provider never refuses with `QueueFull`.

/// The numbering and signaling policy of one send queue.
#[derive(Clone, Copy, Debug)]
pub struct SendQueue {
    depth: u64,
    posted: u64,
    retired: u64,
    last_signaled: u64,
    signal_every: u64,
}

impl SendQueue {
    /// A queue of `depth` slots that signals at least every `signal_every` requests.
    pub fn new(depth: u32, signal_every: u32) -> SendQueue {
        SendQueue {
            depth: u64::from(depth),
            posted: 0,
            retired: 0,
            last_signaled: 0,
            signal_every: u64::from(signal_every.clamp(1, depth.max(1))),
        }
    }

    /// Signals at least every `signal_every` requests from now on (a reply ring that
    /// grew or shrank: its entries come back only through signaled completions).
    pub fn set_signal_every(&mut self, signal_every: u32) {
        self.signal_every = u64::from(signal_every).clamp(1, self.depth.max(1));
    }

    /// Slots free now.
    #[inline]
    pub fn room(&self) -> u64 {
        self.depth - (self.posted - self.retired)
    }

    /// Number of the next request to be posted.
    #[inline]
    pub fn next(&self) -> u64 {
        self.posted + 1
    }

    /// Records a post of one request and says whether it must be signaled (`force`, or the
    /// policy's turn). Returns `(sequence number, signaled)`.
    #[inline]
    pub fn post(&mut self, force: bool) -> (u64, bool) {
        self.posted += 1;
        let signal = force || self.posted - self.last_signaled >= self.signal_every;
        if signal {
            self.last_signaled = self.posted;
        }
        (self.posted, signal)
    }

    /// A signaled request numbered `seq` completed: it and everything before it are retired.
    #[inline]
    pub fn retire(&mut self, seq: u64) {
        if seq > self.retired && seq <= self.posted {
            self.retired = seq;
        }
    }

    /// Whether request `seq` has been retired.
    #[inline]
    pub fn is_retired(&self, seq: u64) -> bool {
        seq <= self.retired
    }

    /// Whether the last request posted was signaled, so that its completion will retire
    /// everything posted (or nothing was posted).
    pub fn last_is_signaled(&self) -> bool {
        self.last_signaled == self.posted
    }

    /// Requests posted and not retired.
    #[inline]
    pub fn outstanding(&self) -> u64 {
        self.posted - self.retired
    }

    /// Forgets everything (a new queue pair).
    pub fn reset(&mut self) {
        self.posted = 0;
        self.retired = 0;
        self.last_signaled = 0;
    }
}
