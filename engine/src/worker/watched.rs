//! The worker's table of watched connections ([`WatchTable`](crate::fabric::WatchTable)): for each connection, in the
//! order of the worker's list, its completion queue's watch and, while only a completion
//! can give it work, the position that completion will take ([`Drive::idle_at`]).
//!
//! A turn over hundreds of connections then reads this dense table and one word of each
//! idle connection's completion queue, instead of polling each connection: an idle poll
//! reads several lines of a connection several kilobytes long, all out of the cache when
//! the turn comes back to it. Measured on soft, 1,000 connections with one null RPC in
//! flight each: about half of the server's time went to polling connections with nothing
//! to do.
//!
//! The table is rebuilt whenever the worker's list may have changed (at every
//! housekeeping), so its entries always follow the list. A connection whose provider
//! offers no watch (verbs), or that has work of its own, is polled at every turn; and every
//! [`FULL_TURN_EVERY`]th turn polls them all, for what idle polls look at now and then (a
//! departed peer, an overrun).

/// Every this many turns of its loop a worker polls every connection, watched or not.
pub(super) const FULL_TURN_EVERY: u64 = 64;

/// How many places ahead of the connection it looks at a worker (or a load generator
/// driving many clients) starts fetching a watched connection's completion word: a skipped
/// connection takes a few nanoseconds, so the fetch must start well ahead to arrive in time.
pub const WATCH_AHEAD: usize = 16;
