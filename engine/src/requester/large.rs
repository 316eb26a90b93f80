//! The large bulk buffers a client's RPCs share ([`ConnConfig::bulk_size`] each, up to
//! [`ConnConfig::large_bufs`]): a Call whose argument or result chunks are larger than its
//! credit's own buffers ([`ConnConfig::slot_bulk_size`]) takes one for each, for the RPC's
//! life.
//!
//! They are registered as they are needed, as the responder's are: [`FIRST_LARGE`] when
//! the client connects (what one RPC takes at most: an argument and a result buffer, so
//! that every RPC can proceed), then one more each time an RPC finds none free, up to
//! `large_bufs`, counted in `large_registered`; they stay registered for the client's life
//! (reconnections included). A client that never moves large chunks pays for two of them,
//! not for all; a busy one reaches its steady state, with no registration, after its first
//! burst. An RPC that finds none free and none may be added gets `WouldBlock` (counted in
//! `large_bulk_waits`) and is submitted again once an RPC has finished.

use crate::conn::ConnConfig;
use crate::fabric::{Access, Provider};
use crate::pool::{Buf, BufferPool, PoolConfig};
use crate::stats::{bump, Counters};

use super::{ConnError, SubmitError};

/// Large buffers registered at connect: an argument and a result buffer, the most one RPC
/// takes.
pub(super) const FIRST_LARGE: u32 = 2;

/// The large buffers of one client (see the module docs).
pub(super) struct LargeBufs<P: Provider> {
    /// Bytes of one buffer.
    size: usize,
    /// The most buffers there may be.
    max: u32,
    /// How they are exposed (per-RPC windows or persistently, as the credits' own).
    access: Access,
    /// The pool made at connect, then one per buffer added (room reserved for all, so that
    /// adding one does not reallocate).
    pools: Vec<BufferPool<P>>,
}

impl<P: Provider> LargeBufs<P> {
    /// The first large buffers `config` asks for ([`ConnConfig::large_count`] of them may be
    /// registered in all), or `None` when every credit's buffers are of the largest size.
    pub(super) fn new(
        pd: &P::Pd,
        config: &ConnConfig,
        access: Access,
    ) -> Result<Option<LargeBufs<P>>, ConnError> {
        let max = config.large_count();
        if max == 0 {
            return Ok(None);
        }
        let size = config.bulk_size as usize;
        let mut pools = Vec::with_capacity((max.saturating_sub(FIRST_LARGE) + 1) as usize);
        pools.push(BufferPool::new(
            pd,
            PoolConfig::new(size, max.min(FIRST_LARGE), access),
        )?);
        Ok(Some(LargeBufs {
            size,
            max,
            access,
            pools,
        }))
    }

    /// A free large buffer: from a pool that has one (an allocation from an empty pool would
    /// count as its exhaustion), else a new one registered if fewer than `large_bufs` are;
    /// `WouldBlock` when every one there may be is taken (or registering failed: the RPC
    /// waits for one of those there are).
    pub(super) fn take(&mut self, pd: &P::Pd, stats: &Counters) -> Result<Buf<P>, SubmitError> {
        if let Some(buf) = self
            .pools
            .iter()
            .find(|p| p.available() > 0)
            .and_then(|p| p.alloc().ok())
        {
            return Ok(buf);
        }
        if self.registered() >= self.max {
            return Err(SubmitError::WouldBlock);
        }
        let pool = BufferPool::new(pd, PoolConfig::new(self.size, 1, self.access))
            .map_err(|_| SubmitError::WouldBlock)?;
        let buf = pool.alloc().map_err(|_| SubmitError::WouldBlock)?;
        self.pools.push(pool);
        bump(&stats.large_registered, 1);
        Ok(buf)
    }

    /// Gives `big` back to the pool it came from.
    #[inline]
    pub(super) fn give_back(&self, big: Buf<P>) {
        match self.pools.iter().find(|p| p.owns(&big)) {
            Some(pool) => pool.free(big),
            None => drop(big),
        }
    }

    /// Large buffers registered so far.
    pub(super) fn registered(&self) -> u32 {
        self.pools.iter().map(BufferPool::capacity).sum()
    }

    /// The registered bytes of the large buffers made so far.
    pub(super) fn bytes(&self) -> u64 {
        self.pools.iter().map(BufferPool::bytes).sum()
    }
}
