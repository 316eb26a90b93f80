//! Per-connection counters, readable from any thread without a lock.
//!
//! Each connection owns one [`Counters`] behind an `Arc`. Only the connection's driver
//! writes it, with a relaxed load and store (no read-modify-write, so no locked
//! instruction on the hot path); any thread may take a [`Snapshot`] with relaxed loads.
//! A snapshot's fields are each exact at some recent instant, not necessarily the same one.
//! Reports print a snapshot as one JSON object ([`Snapshot::write_json`]).

use core::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// The live counters of one connection; written by its owner only. Aligned to a
        /// cache line, with the counters every Short RPC bumps first: one line per RPC at
        /// each end (they were split over two, a miss each on a cold connection).
        #[derive(Debug, Default)]
        #[repr(align(64))]
        pub struct Counters {
            $( $(#[$doc])* pub $name: AtomicU64, )*
        }

        /// A copy of a connection's counters.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Snapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl Counters {
            /// Reads every counter (relaxed loads).
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }

            /// Overwrites every counter with `s` (relaxed stores; for an owner that
            /// publishes sums, such as a worker).
            pub fn store(&self, s: &Snapshot) {
                $( self.$name.store(s.$name, Ordering::Relaxed); )*
            }
        }

        impl Snapshot {
            /// Every counter with its name, in declaration order (for reports).
            pub fn fields(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$( (stringify!($name), self.$name), )*].into_iter()
            }

            /// Adds `other` to this snapshot, counter by counter (wrapping).
            pub fn add(&mut self, other: &Snapshot) {
                $( self.$name = self.$name.wrapping_add(other.$name); )*
            }
        }
    };
}

// The first eight (one cache line) are those a Short RPC bumps: keep them first.
counters! {
    /// RPCs completed (requester: replies delivered; responder: replies sent).
    rpcs,
    /// Calls sent (requester) or received (responder).
    calls,
    /// Bytes of Sends posted (headers and inline payloads).
    bytes_sent,
    /// Bytes of Sends received.
    bytes_received,
    /// Bytes moved by RDMA Read (responder) or exposed to them (requester).
    bytes_read,
    /// Bytes moved by RDMA Write (responder) or received through chunks (requester).
    bytes_written,
    /// Calls sent or received Short (RDMA_MSG, no chunk).
    short_calls,
    /// Replies sent or received inline (RDMA_MSG).
    short_replies,
    /// Calls with Read chunks and an inline payload (RDMA_MSG).
    chunked_calls,
    /// Long Calls (RDMA_NOMSG with a Position-Zero Read chunk).
    long_calls,
    /// Long Replies (RDMA_NOMSG through the Reply chunk).
    long_replies,
    /// Write chunks filled with a result (responder: written; requester: received filled).
    write_chunks,
    /// Memory window binds posted (one per exposed buffer per RPC).
    registrations,
    /// Windows invalidated with a Local Invalidate.
    local_invalidations,
    /// Windows invalidated by the peer's Send With Invalidate (requester), or Sends With
    /// Invalidate posted (responder).
    remote_invalidations,
    /// RDMA_ERROR / ERR_VERS sent (responder) or received (requester).
    err_vers,
    /// RDMA_ERROR / ERR_CHUNK sent (responder) or received (requester).
    err_chunk,
    /// GARBAGE_ARGS replies sent (responder) or received (requester).
    garbage_args,
    /// PROG_UNAVAIL replies sent.
    prog_unavail,
    /// PROG_MISMATCH replies sent.
    prog_mismatch,
    /// PROC_UNAVAIL replies sent.
    proc_unavail,
    /// SYSTEM_ERR or RPC_MISMATCH replies sent.
    system_err,
    /// MSG_DENIED / AUTH_ERROR replies sent (a handler's [`Outcome::AuthError`]).
    ///
    /// [`Outcome::AuthError`]: crate::dispatch::Outcome::AuthError
    auth_errors,
    /// Messages silently discarded by the verdict (RFC 8166 §4.5).
    discards,
    /// Calls that arrived while the peer already had as many Calls in process as granted
    /// (responder; RFC 8166 §3.3.1).
    credit_overruns,
    /// RPCs completed with a timeout (requester).
    timeouts,
    /// RPCs the caller cancelled with [`Client::cancel`](crate::requester::Client::cancel)
    /// (requester).
    cancels,
    /// Work completions in error (other than flushes).
    wc_errors,
    /// Connections lost (the queue pair went to the error state).
    conn_lost,
    /// Connections the requester ended as silent: an RPC's reply overdue past the
    /// retransmission policy's `reply_timeout`, or a send queue that stopped retiring work
    /// without an error (Local Invalidates still waiting past the bound of the transport's
    /// retries, RFC 8166 §4.5.4). Each is also a `conn_lost`.
    stalls,
    /// Work requests the provider refused to post (a full queue, or a queue pair already
    /// in the error state); the end that saw it ends the connection, which then counts as
    /// a `conn_lost`. A loss with none of these, no `wc_errors` and no `stalls` at either end
    /// was ended from outside both (the connection manager, the device).
    post_refused,
    /// Calls sent again, with their original XID, on a new connection (requester with a
    /// [`RetransmitPolicy`](crate::conn::RetransmitPolicy)).
    retransmits,
    /// New connections established by the requester after a loss (automatic or
    /// [`Client::reconnect`](crate::requester::Client::reconnect)).
    reconnects,
    /// RPCs that took shared bulk buffers (requester: one of the connection's large ones,
    /// their chunks not fitting the slot's own, [`ConnConfig::slot_bulk_size`]; responder:
    /// buffers of the server's share, their chunks not fitting the connection's own).
    ///
    /// [`ConnConfig::slot_bulk_size`]: crate::conn::ConnConfig::slot_bulk_size
    large_bulk,
    /// Times an RPC waited because the shared bulk buffers it needed were taken
    /// (requester: `submit` said `WouldBlock`; responder: the Call waited its turn in the
    /// server's share).
    large_bulk_waits,
    /// Large bulk buffers the requester registered after connecting, as its RPCs needed
    /// them (beyond the first two, up to [`ConnConfig::large_bufs`]; a responder's come
    /// from its server's share, counted there).
    ///
    /// [`ConnConfig::large_bufs`]: crate::conn::ConnConfig::large_bufs
    large_registered,
    /// Grants raised by a responder whose receives come from its server's shared receive
    /// queue, as a connection's Calls filled its grant ([`ConnConfig::srq`]).
    ///
    /// [`ConnConfig::srq`]: crate::conn::ConnConfig::srq
    grants_raised,
    /// Connections that speak RPC-over-RDMA version 2 (\[V2\] §7.1).
    v2_connections,
    /// Version 2 openings answered ERR_VERS without 2 (or not at all), after which the
    /// connection went on in version 1 (requester; \[V2\] §7.2).
    version_fallbacks,
    /// RDMA2_CONNPROP messages sent (\[V2\] §5.3.4).
    connprops_sent,
    /// RDMA2_CONNPROP messages received.
    connprops_received,
    /// RDMA2_ERROR messages other than RDMA2_ERR_VERS sent (responder) or received
    /// (requester) (\[V2\] §5.3.3).
    rdma2_errors,
    /// Reverse-direction Calls sent (responder) or served (requester): RFC 8167's backward
    /// direction on version 1, \[V2\] §3.2 on version 2.
    reverse_calls,
    /// Reverse-direction Replies received (responder) or sent (requester).
    reverse_replies,
    /// Reverse-direction Calls given up without a Reply after `reverse_timeout`
    /// (responder).
    reverse_timeouts,
}

/// The counters that count errors (refusals, discards, failures): reports group them apart
/// from the traffic counters.
pub const ERROR_COUNTERS: [&str; 17] = [
    "err_vers",
    "err_chunk",
    "rdma2_errors",
    "garbage_args",
    "prog_unavail",
    "prog_mismatch",
    "proc_unavail",
    "system_err",
    "auth_errors",
    "discards",
    "credit_overruns",
    "timeouts",
    "wc_errors",
    "conn_lost",
    "stalls",
    "post_refused",
    "reverse_timeouts",
];

impl Snapshot {
    /// Writes the snapshot as one JSON object, as `rpcrdma serve`, `call` and `bench` and
    /// nfs3d report it: every traffic counter by name in declaration order, then
    /// `"errors"`, an object of the [`ERROR_COUNTERS`] in declaration order:
    /// `{"rpcs":2,"calls":2,...,"errors":{"err_vers":0,...}}`.
    ///
    /// Written by hand rather than through serde_json, which the library does not depend on:
    /// the names are identifiers and the values integers, so nothing needs escaping.
    pub fn write_json(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let object = |errors: bool, out: &mut dyn fmt::Write| -> fmt::Result {
            let fields = self
                .fields()
                .filter(|(name, _)| ERROR_COUNTERS.contains(name) == errors);
            for (i, (name, v)) in fields.enumerate() {
                let comma = if i == 0 { "" } else { "," };
                write!(out, "{comma}\"{name}\":{v}")?;
            }
            Ok(())
        };
        out.write_char('{')?;
        object(false, out)?;
        out.write_str(",\"errors\":{")?;
        object(true, out)?;
        out.write_str("}}")
    }

    /// The snapshot as one JSON object ([`write_json`](Self::write_json)).
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        self.write_json(&mut s)
            .expect("writing into a String does not fail");
        s
    }
}

/// Adds `n` to a counter only its owner writes (a relaxed load and store, not a locked
/// read-modify-write).
#[inline]
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON parses, holds every counter once, the traffic counters first in declaration
    /// order, then the error counters grouped under `"errors"` in declaration order.
    #[test]
    fn json_groups_the_error_counters() {
        let counters = Counters::default();
        for (i, c) in [
            &counters.rpcs,
            &counters.err_chunk,
            &counters.reverse_replies,
        ]
        .into_iter()
        .enumerate()
        {
            c.store(i as u64 + 7, Ordering::Relaxed);
        }
        let s = counters.snapshot();
        let json = s.to_json();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let top = v.as_object().unwrap();
        let errors = top["errors"].as_object().unwrap();
        let traffic: Vec<_> = s
            .fields()
            .filter(|(n, _)| !ERROR_COUNTERS.contains(n))
            .collect();
        let errs: Vec<_> = s
            .fields()
            .filter(|(n, _)| ERROR_COUNTERS.contains(n))
            .collect();
        assert_eq!(errs.len(), ERROR_COUNTERS.len());
        let got: Vec<_> = top
            .iter()
            .filter(|(k, _)| *k != "errors")
            .map(|(k, v)| (k.as_str(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(got, traffic);
        assert_eq!(top.keys().next_back().map(String::as_str), Some("errors"));
        let got: Vec<_> = errors
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(got, errs);
        assert!(json.starts_with("{\"rpcs\":7,\"calls\":0,"), "{json}");
        assert_eq!(errors["err_chunk"], 8);
        assert_eq!(top["reverse_replies"], 9);
    }
}
