//! A pool that many connections share: registered once in one protection domain, grown
//! with load up to a bound, taken from and given back to by any thread without a lock.
//!
//! A server's connections do not each need bulk memory of their own: most of them are idle
//! most of the time, and the kernel's nfsd pins nothing per connection beyond its receives.
//! So the buffers a Call needs beyond its receive — a pull buffer for its Read chunks, a
//! bulk buffer for its Write chunks, a buffer for a Long reply, and the reply ring a
//! connection takes at its first Call — come from a [`Share`]: one per server (per
//! protection domain), in three size classes ([`Class`]).
//!
//! # Shape
//!
//! Each class is a list of chunks, each chunk one registered region carved into buffers of
//! the class's size, whose free buffers sit on a lock-free stack (the pools' return list with
//! a tagged head, `return_list.rs`): taking a buffer is one CAS, giving it back (dropping its
//! [`Buf`]) is one CAS. A class grows by a chunk when a taker finds every chunk empty; growth
//! registers memory (a system call and a lock, the only ones here), bounded for the bulk
//! classes by [`ShareConfig::bulk_limit`]. Memory once registered stays registered for the
//! share's life: a busy server reaches its steady state, with no registration, after its
//! first burst.
//!
//! # Waiting its turn
//!
//! A Call that cannot have every bulk buffer it needs at once takes nothing and waits
//! ([`Share::reserve`]), holding its receive and so its credit (RFC 8166 §3.3). Waiting Calls
//! are served in the order they began to wait, whatever their connections: a Call that is
//! not first in line may not take buffers while others wait (its [`Turn`] says where it
//! stands), so a connection that frees and takes again cannot starve another. A first in
//! line that stops asking (its connection was lost) gives up its place after
//! [`STALE_TURN`]. Holders never wait for more, so every holder finishes and gives back.
//!
//! # Example
//!
//! ```
//! use rpcrdma_engine::fabric::soft::Soft;
//! use rpcrdma_engine::fabric::{Device, Provider};
//! use rpcrdma_engine::pool::share::{Share, ShareConfig, Turn};
//!
//! let pd = Soft::open_device(None)?.alloc_pd()?;
//! let config = ShareConfig { bulk_limit: 8 << 20, ..ShareConfig::default() };
//! let share = Share::<Soft>::new(pd, config)?;
//! let mut turn = Turn::default();
//! // A pull buffer of 4 KiB and a bulk buffer of 1 MiB, both or neither.
//! let [_, pull, bulk] = share.reserve([0, 4096, 1 << 20], &mut turn).expect("room");
//! assert!(pull.unwrap().size() >= 4096 && bulk.unwrap().size() >= 1 << 20);
//! // Dropped: back on their chunks' free stacks.
//! assert_eq!(share.stats().bulk_out, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::srq::{SharedRecvs, SrqConfig};
use super::{Buf, PoolConfig, PoolError, PoolShared};
use crate::fabric::{Access, Provider};

/// How long the first Call in line may go without asking again before the next one may
/// take its place: ten milliseconds, thousands of polls of a live connection.
pub const STALE_TURN: Duration = Duration::from_millis(10);

/// A buffer size class of a [`Share`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Reply ring entries: an inline reply and its headers.
    Reply = 0,
    /// Bulk buffers for chunks up to [`ShareConfig::small_size`] (pull sinks, Write-chunk
    /// results, Long replies).
    Small = 1,
    /// Bulk buffers of [`ShareConfig::large_size`]: the largest payload of one RPC.
    Large = 2,
    /// Placeholders of [`STUB_SIZE`] bytes: what a slot of a connection on a shared receive
    /// queue holds while no Call's receive stands in it (registered, never posted). Taken
    /// from the share at accept, so that accepting registers nothing.
    Stub = 3,
}

/// Bytes of a [`Class::Stub`] placeholder.
pub const STUB_SIZE: usize = 64;

/// Placeholders a chunk of [`Class::Stub`] holds: 256 KiB per registration, the slots of
/// about sixty connections at 64 credits.
const STUBS_PER_CHUNK: u32 = 4096;

impl Class {
    /// The four classes, in index order.
    pub const ALL: [Class; 4] = [Class::Reply, Class::Small, Class::Large, Class::Stub];

    /// Whether [`ShareConfig::bulk_limit`] bounds the class.
    pub const fn is_bulk(self) -> bool {
        matches!(self, Class::Small | Class::Large)
    }
}

/// The sizes and the bound of a [`Share`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareConfig {
    /// Bytes of a reply ring entry.
    pub reply_size: usize,
    /// Bytes of a small bulk buffer.
    pub small_size: usize,
    /// Bytes of a large bulk buffer (at least `small_size`).
    pub large_size: usize,
    /// The most bytes the two bulk classes may register together; at least
    /// [`min_bulk_limit`](Self::min_bulk_limit), what one Call may need at once.
    pub bulk_limit: u64,
    /// A shared receive queue for the connections, if they use one.
    pub srq: Option<SrqConfig>,
}

impl Default for ShareConfig {
    /// The engine's defaults: 4 KiB inline replies with 1 KiB of headers, 68 KiB and
    /// 1088 KiB bulk buffers, 64 MiB of bulk memory.
    fn default() -> Self {
        ShareConfig {
            reply_size: 4096 + 1024,
            small_size: super::DEFAULT_SLOT_BULK_SIZE as usize,
            large_size: super::DEFAULT_BULK_SIZE as usize,
            bulk_limit: 64 << 20,
            srq: None,
        }
    }
}

impl ShareConfig {
    /// What one Call may take at once: three large buffers (pull, bulk, Long reply). Below
    /// this a Call could wait for ever. The small class may grow only while this much room
    /// is left for large buffers, and a small need is met by a large buffer when no small
    /// one can be had: so neither class can starve the other of registration.
    pub fn min_bulk_limit(&self) -> u64 {
        3 * self.chunk_bytes(Class::Large)
    }

    fn size(&self, class: Class) -> usize {
        match class {
            Class::Reply => self.reply_size,
            Class::Small => self.small_size,
            Class::Large => self.large_size,
            Class::Stub => STUB_SIZE,
        }
    }

    /// Buffers a chunk of `class` holds: about a megabyte of small ones or reply entries
    /// per registration, large buffers one at a time (each is a megabyte or more),
    /// placeholders by the thousand.
    fn per_chunk(&self, class: Class) -> u32 {
        let size = self.size(class).max(1);
        match class {
            Class::Large => 1,
            Class::Stub => STUBS_PER_CHUNK,
            _ => ((1usize << 20) / size).clamp(1, 256) as u32,
        }
    }

    fn pool_config(&self, class: Class) -> PoolConfig {
        PoolConfig::new(self.size(class), self.per_chunk(class), Access::LOCAL_WRITE)
    }

    /// Registered bytes of one chunk of `class` (strides included).
    fn chunk_bytes(&self, class: Class) -> u64 {
        self.pool_config(class)
            .layout()
            .map_or(u64::MAX / 8, |l| u64::from(l.count) * l.stride as u64)
    }

    /// Checks the sizes and the bound.
    pub fn validate(&self) -> Result<(), PoolError> {
        for class in Class::ALL {
            self.pool_config(class).layout()?;
        }
        if self.large_size < self.small_size {
            return Err(PoolError::InvalidConfig(
                "large bulk buffers smaller than small ones",
            ));
        }
        if let Some(srq) = &self.srq {
            srq.validate()?;
        }
        if self.bulk_limit < self.min_bulk_limit() {
            return Err(PoolError::InvalidConfig(
                "bulk limit below what one Call may need (three large buffers)",
            ));
        }
        Ok(())
    }
}

/// Where a Call stands in the line of those waiting for bulk buffers ([`Share::reserve`]):
/// kept by the caller between attempts, one per waiting Call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Turn(Option<u64>);

impl Turn {
    /// Whether the Call has a place in line (it asked before and had to wait).
    pub fn is_waiting(&self) -> bool {
        self.0.is_some()
    }
}

/// Why [`Share::reserve`] gave nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Not everything is free now, or others wait first: ask again later with the same
    /// [`Turn`].
    Later,
    /// A buffer larger than the largest class was asked for: it never will be.
    TooLarge,
}

/// One size class: its chunks and where takers start looking.
struct ClassPool<P: Provider> {
    config: PoolConfig,
    /// The chunks registered so far: `chunks[..len]`.
    chunks: Box<[OnceLock<Arc<PoolShared<P>>>]>,
    len: AtomicU32,
    /// The chunk the last buffer was taken from: takers start there.
    hint: AtomicU32,
}

impl<P: Provider> ClassPool<P> {
    fn new(config: PoolConfig, max_chunks: usize) -> ClassPool<P> {
        ClassPool {
            config,
            chunks: (0..max_chunks).map(|_| OnceLock::new()).collect(),
            len: AtomicU32::new(0),
            hint: AtomicU32::new(0),
        }
    }

    fn chunks(&self) -> impl Iterator<Item = &Arc<PoolShared<P>>> {
        let n = self.len.load(Ordering::Acquire) as usize;
        self.chunks[..n].iter().filter_map(OnceLock::get)
    }

    /// A free buffer, from the chunk last taken from first.
    #[inline]
    fn take(&self) -> Option<Buf<P>> {
        let n = self.len.load(Ordering::Acquire);
        if n == 0 {
            return None;
        }
        let start = self.hint.load(Ordering::Relaxed).min(n - 1);
        for k in 0..n {
            let c = (start + k) % n;
            let Some(chunk) = self.chunks[c as usize].get() else {
                continue;
            };
            if let Some(index) = chunk.returns.pop() {
                if c != start {
                    self.hint.store(c, Ordering::Relaxed);
                }
                return Some(chunk.buf(index));
            }
        }
        None
    }

    fn registered(&self) -> (u32, u64) {
        self.chunks()
            .fold((0, 0), |(n, b), c| (n + c.layout.count, b + c.bytes()))
    }

    fn free(&self) -> u32 {
        self.chunks().map(|c| c.returns.len()).sum()
    }
}

/// Counters of a share, written with atomic adds (its users are many threads).
#[derive(Default)]
struct ShareCounters {
    waits: AtomicU64,
    grown: AtomicU64,
    refused: AtomicU64,
}

/// A snapshot of a [`Share`]: exact when nobody takes or gives back meanwhile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareStats {
    /// Registered bytes, all classes.
    pub registered_bytes: u64,
    /// Registered bytes of the bulk classes (bounded by [`ShareConfig::bulk_limit`]).
    pub bulk_bytes: u64,
    /// Registered bytes of the reply class (reply rings).
    pub reply_bytes: u64,
    /// Registered bytes of the placeholder class ([`Class::Stub`]; 0 without a shared
    /// receive queue).
    pub stub_bytes: u64,
    /// Bulk buffers out (held by Calls or by ring entries whose replies are not retired).
    pub bulk_out: u32,
    /// Reply ring entries out (held by connections).
    pub reply_out: u32,
    /// Placeholders out (held by the slots of connections on a shared receive queue).
    pub stubs_out: u32,
    /// Reservations that had to wait (each Call counted at each refused attempt).
    pub waits: u64,
    /// Chunks registered.
    pub grown: u64,
    /// Chunks that could not be registered (the bound, or the fabric refused).
    pub refused: u64,
    /// Connections using the share now.
    pub conns: u32,
    /// Bytes those connections registered for themselves (their receives, or their
    /// placeholders with a shared receive queue).
    pub conn_bytes: u64,
    /// Bytes of the shared receive queue's buffers (0 without one).
    pub srq_bytes: u64,
    /// Receives the connections reserved in the shared receive queues.
    pub srq_reserved: u32,
    /// Receives of the shared receive queues held by Calls now (taken, not yet posted
    /// again): 0 once every Call has ended and every loan is gone.
    pub srq_held: u32,
    /// Registered bytes of the share's buffers lent out now (reply ring entries, bulk
    /// buffers, placeholders), each at its registered stride.
    pub lent_bytes: u64,
    /// Registered bytes of the shared-queue receives the connections reserved.
    pub srq_reserved_bytes: u64,
}

impl core::fmt::Display for ShareStats {
    /// "N connection(s), T MiB registered in all (P KiB per connection): their own A MiB,
    /// bulk B MiB, reply rings R MiB[, shared receive queue Q MiB]".
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        write!(
            f,
            "{} connection(s), {:.1} MiB registered in all ({:.1} KiB per connection, of which \
             each holds {:.1} KiB and the rest is headroom kept for the next): their own \
             {:.1} MiB, bulk {:.1} MiB, reply rings {:.1} MiB",
            self.conns,
            mib(self.total_bytes()),
            self.per_conn_bytes() as f64 / 1024.0,
            self.held_per_conn_bytes() as f64 / 1024.0,
            mib(self.conn_bytes),
            mib(self.bulk_bytes),
            mib(self.reply_bytes),
        )?;
        if self.srq_bytes > 0 {
            write!(f, ", shared receive queue {:.1} MiB", mib(self.srq_bytes))?;
        }
        if self.stub_bytes > 0 {
            write!(f, ", placeholders {:.1} MiB", mib(self.stub_bytes))?;
        }
        Ok(())
    }
}

impl ShareStats {
    /// Every byte registered for the server's connections: their own, the share's and the
    /// shared receive queue's.
    pub fn total_bytes(&self) -> u64 {
        self.conn_bytes + self.registered_bytes + self.srq_bytes
    }

    /// [`total_bytes`](Self::total_bytes) per connection (0 without connections): what
    /// the server keeps registered for them, its headroom (the shared queue's spare
    /// receives, the share's free buffers) included.
    pub fn per_conn_bytes(&self) -> u64 {
        self.per_conn(self.total_bytes())
    }

    /// What a connection holds on average now (0 without connections): its own
    /// registrations, the share's buffers lent to it and the shared-queue receives it
    /// reserved. What the server registered beyond that is headroom kept for the next
    /// Calls and connections; after a burst [`per_conn_bytes`](Self::per_conn_bytes)
    /// divides the headroom the burst left among the connections that remain.
    pub fn held_per_conn_bytes(&self) -> u64 {
        self.per_conn(self.conn_bytes + self.lent_bytes + self.srq_reserved_bytes)
    }

    /// `bytes` shared among the live connections (0 without connections).
    fn per_conn(&self, bytes: u64) -> u64 {
        bytes.checked_div(u64::from(self.conns)).unwrap_or(0)
    }
}

/// Buffers many connections share; see the module documentation.
pub struct Share<P: Provider> {
    config: ShareConfig,
    classes: [ClassPool<P>; 4],
    /// Bytes the bulk classes registered so far.
    bulk_registered: AtomicU64,
    /// The line of waiting Calls: the next ticket to hand out, the one served now, and when
    /// the one served last asked (nanoseconds since `epoch`).
    next_ticket: AtomicU64,
    serving: AtomicU64,
    served_at: AtomicU64,
    epoch: Instant,
    /// Serializes growth (registration), never taken to take or give back a buffer.
    growing: Mutex<()>,
    counters: ShareCounters,
    /// The shared receive queues and their buffers (one per worker), if the connections
    /// use them.
    recvs: Vec<SharedRecvs<P>>,
    /// Connections using the share, and the bytes they registered for themselves.
    conns: AtomicU32,
    conn_bytes: AtomicU64,
    /// Declared last: dropped after every chunk's regions.
    pd: P::Pd,
}

impl<P: Provider> Share<P> {
    /// A share of buffers registered in `pd` (which it keeps: the queue pairs of the
    /// connections that use it are made in [`pd`](Self::pd)). With shared receive queues,
    /// their headroom ([`SharedRecvs::new`]) and a chunk of placeholders ([`Class::Stub`])
    /// are registered now, so that accepting the first connections registers nothing;
    /// everything else comes with the connections.
    pub fn new(pd: P::Pd, config: ShareConfig) -> Result<Arc<Share<P>>, PoolError> {
        config.validate()?;
        let recvs = match &config.srq {
            Some(srq) => (0..srq.queues)
                .map(|_| SharedRecvs::new(&pd, *srq))
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let bulk_chunks = |class| (config.bulk_limit / config.chunk_bytes(class)) as usize + 1;
        let share = Arc::new(Share {
            classes: [
                // Reply rings are not bounded by the bulk limit: a chunk table for 4 Gi
                // of them at most.
                ClassPool::new(config.pool_config(Class::Reply), 4096),
                ClassPool::new(config.pool_config(Class::Small), bulk_chunks(Class::Small)),
                ClassPool::new(config.pool_config(Class::Large), bulk_chunks(Class::Large)),
                // As many chunks as reply rings may have.
                ClassPool::new(config.pool_config(Class::Stub), 4096),
            ],
            config,
            bulk_registered: AtomicU64::new(0),
            next_ticket: AtomicU64::new(0),
            serving: AtomicU64::new(0),
            served_at: AtomicU64::new(0),
            epoch: Instant::now(),
            growing: Mutex::new(()),
            counters: ShareCounters::default(),
            recvs,
            conns: AtomicU32::new(0),
            conn_bytes: AtomicU64::new(0),
            pd,
        });
        if share.config.srq.is_some() {
            let chunk = PoolShared::create(&share.pd, share.config.pool_config(Class::Stub))?;
            let _guard = share.growing.lock().unwrap_or_else(|p| p.into_inner());
            share.install(Class::Stub, chunk, 0);
        }
        Ok(share)
    }

    /// Registers chunks of the reply class now until it holds at least `entries` (none if
    /// it does): a connection's first Call takes its reply ring and its slots' buffers from
    /// the share, so a server that primes its share with what one connection's first Call
    /// takes when it starts listening keeps those registrations (an `ibv_reg_mr` of a
    /// megabyte: 10 to 20 ms in the soft-RoCE guest) out of its first client's first round
    /// trip. Returns whether the class holds that many; if a registration fails, the Calls
    /// register what they need, as without priming.
    pub fn prime_replies(&self, entries: usize) -> bool {
        let pool = &self.classes[Class::Reply as usize];
        let per_chunk = self.config.per_chunk(Class::Reply) as usize;
        while (pool.len.load(Ordering::Acquire) as usize) * per_chunk < entries {
            if !self.grow(Class::Reply) {
                return false;
            }
        }
        true
    }

    /// The protection domain the buffers are registered in.
    pub fn pd(&self) -> &P::Pd {
        &self.pd
    }

    /// The sizes and the bound.
    pub fn config(&self) -> &ShareConfig {
        &self.config
    }

    /// Counts a connection that registered `bytes` for itself, until
    /// [`leave_conn`](Self::leave_conn).
    pub fn join_conn(&self, bytes: u64) {
        self.conns.fetch_add(1, Ordering::Relaxed);
        self.conn_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A connection counted by [`join_conn`](Self::join_conn) is gone.
    pub fn leave_conn(&self, bytes: u64) {
        self.conns.fetch_sub(1, Ordering::Relaxed);
        self.conn_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Shared receive queue `i`, if the connections use them.
    pub fn recvs(&self, i: usize) -> Option<&SharedRecvs<P>> {
        self.recvs.get(i)
    }

    /// The shared receive queue with the fewest receives reserved, for a new connection
    /// (`None` without shared receive queues).
    pub fn least_loaded_recvs(&self) -> Option<usize> {
        (0..self.recvs.len()).min_by_key(|&i| self.recvs[i].reserved())
    }

    /// The class whose buffers hold `bytes`: the smallest bulk class that does, `None`
    /// when none does.
    pub fn bulk_class(&self, bytes: u64) -> Option<Class> {
        if bytes <= self.config.small_size as u64 {
            Some(Class::Small)
        } else if bytes <= self.config.large_size as u64 {
            Some(Class::Large)
        } else {
            None
        }
    }

    /// A free buffer of `class`, registering a chunk more when every one is empty (within
    /// the bound for the bulk classes). No line is kept: use [`reserve`](Self::reserve) for
    /// bulk buffers a Call waits for.
    pub fn take(&self, class: Class) -> Option<Buf<P>> {
        let pool = &self.classes[class as usize];
        loop {
            if let Some(buf) = pool.take() {
                return Some(buf);
            }
            // Grown, by this taker or by another meanwhile: try again, since another
            // taker may have emptied the new chunk first (two workers dressing their
            // connections at once did, and a connection was lost for it). Growth is
            // bounded, so this ends.
            if !self.grow(class) {
                return pool.take();
            }
        }
    }

    /// Takes one bulk buffer for each non-zero size of `sizes` (reply, pull, bulk: any of
    /// them), each of the smallest class that holds it, all at once or none, in the order
    /// waiting Calls came (`turn`, kept by the caller between attempts; see the module
    /// documentation). Grows the classes as needed within the bound.
    pub fn reserve(&self, sizes: [u64; 3], turn: &mut Turn) -> Result<[Option<Buf<P>>; 3], Wait> {
        let mut classes = [None; 3];
        for (c, &size) in classes.iter_mut().zip(&sizes) {
            if size > 0 {
                *c = Some(self.bulk_class(size).ok_or(Wait::TooLarge)?);
            }
        }
        if !self.may_try(turn) {
            return Err(self.wait(turn));
        }
        let mut got: [Option<Buf<P>>; 3] = [None, None, None];
        for (k, class) in classes.iter().enumerate() {
            let Some(class) = *class else { continue };
            // A small need is met by a large buffer when no small one can be had.
            let buf = self.take(class).or_else(|| {
                (class == Class::Small)
                    .then(|| self.take(Class::Large))
                    .flatten()
            });
            match buf {
                Some(buf) => got[k] = Some(buf),
                // Everything taken so far goes back (dropped) with `got`.
                None => return Err(self.wait(turn)),
            }
        }
        if let Some(t) = turn.0.take() {
            // Served: the next in line's turn.
            self.serving.fetch_max(t + 1, Ordering::AcqRel);
        }
        Ok(got)
    }

    /// Gives up `turn`'s place in line (its Call no longer waits: answered otherwise, or
    /// its connection is gone), so that the next in line need not wait [`STALE_TURN`].
    pub fn leave(&self, turn: &mut Turn) {
        if let Some(t) = turn.0.take() {
            let _ = self
                .serving
                .compare_exchange(t, t + 1, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Whether a Call standing at `turn` may take buffers now: nobody waits, or it is first
    /// in line (or was passed over), or the first in line has gone quiet.
    fn may_try(&self, turn: &Turn) -> bool {
        let serving = self.serving.load(Ordering::Acquire);
        match turn.0 {
            None => self.next_ticket.load(Ordering::Acquire) <= serving,
            Some(t) if t <= serving => {
                if t == serving {
                    self.served_at.store(self.now(), Ordering::Relaxed);
                }
                true
            }
            Some(_) => {
                let now = self.now();
                let asked = self.served_at.load(Ordering::Relaxed);
                if now.saturating_sub(asked) > STALE_TURN.as_nanos() as u64
                    && self
                        .serving
                        .compare_exchange(serving, serving + 1, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    self.served_at.store(now, Ordering::Relaxed);
                }
                false
            }
        }
    }

    /// A refused attempt: counted, and the Call takes a place in line if it had none.
    #[cold]
    fn wait(&self, turn: &mut Turn) -> Wait {
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        if turn.0.is_none() {
            let t = self.next_ticket.fetch_add(1, Ordering::AcqRel);
            if t == self.serving.load(Ordering::Acquire) {
                self.served_at.store(self.now(), Ordering::Relaxed);
            }
            turn.0 = Some(t);
        }
        Wait::Later
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Registers one more chunk of `class` unless another thread just did or the bound
    /// forbids it. Returns whether the class has more buffers than before.
    #[cold]
    fn grow(&self, class: Class) -> bool {
        let pool = &self.classes[class as usize];
        let before = pool.len.load(Ordering::Acquire);
        let _guard = self.growing.lock().unwrap_or_else(|p| p.into_inner());
        let n = pool.len.load(Ordering::Acquire);
        if n != before {
            // Another taker grew it while this one waited for the lock.
            return true;
        }
        let bytes = if class.is_bulk() {
            self.config.chunk_bytes(class)
        } else {
            0
        };
        // Room kept for the large buffers one Call may need (`min_bulk_limit`).
        let limit = match class {
            Class::Reply | Class::Stub => u64::MAX,
            Class::Small => self.config.bulk_limit - self.config.min_bulk_limit(),
            Class::Large => self.config.bulk_limit,
        };
        let full = n as usize >= pool.chunks.len()
            || self.bulk_registered.load(Ordering::Relaxed) + bytes > limit;
        if full {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let chunk = match PoolShared::create(&self.pd, pool.config) {
            Ok(chunk) => chunk,
            Err(_) => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        };
        self.install(class, chunk, bytes);
        true
    }

    /// Makes `chunk` the next chunk of `class`, every buffer free, `bytes` of it counted
    /// against the bulk bound. The caller holds `growing`.
    fn install(&self, class: Class, chunk: Arc<PoolShared<P>>, bytes: u64) {
        let pool = &self.classes[class as usize];
        let n = pool.len.load(Ordering::Acquire);
        // Every buffer free; lowest index on top.
        for i in (0..chunk.layout.count).rev() {
            chunk.returns.push(i);
        }
        // Only the holder of the lock sets entry `n`.
        let _ = pool.chunks[n as usize].set(chunk);
        pool.len.store(n + 1, Ordering::Release);
        self.bulk_registered.fetch_add(bytes, Ordering::Relaxed);
        self.counters.grown.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of what is registered and out.
    pub fn stats(&self) -> ShareStats {
        let srq = self
            .recvs
            .iter()
            .map(SharedRecvs::stats)
            .fold(Default::default(), crate::pool::srq::SrqStats::plus);
        let mut s = ShareStats {
            conns: self.conns.load(Ordering::Relaxed),
            conn_bytes: self.conn_bytes.load(Ordering::Relaxed),
            srq_bytes: srq.bytes,
            srq_reserved: srq.reserved,
            srq_held: srq.held,
            srq_reserved_bytes: match srq.registered {
                0 => 0,
                n => srq.bytes / u64::from(n) * u64::from(srq.reserved),
            },
            waits: self.counters.waits.load(Ordering::Relaxed),
            grown: self.counters.grown.load(Ordering::Relaxed),
            refused: self.counters.refused.load(Ordering::Relaxed),
            ..ShareStats::default()
        };
        for class in Class::ALL {
            let pool = &self.classes[class as usize];
            let (count, bytes) = pool.registered();
            let out = count.saturating_sub(pool.free());
            s.registered_bytes += bytes;
            if count > 0 {
                s.lent_bytes += bytes / u64::from(count) * u64::from(out);
            }
            match class {
                Class::Small | Class::Large => {
                    s.bulk_bytes += bytes;
                    s.bulk_out += out;
                }
                Class::Reply => {
                    s.reply_bytes += bytes;
                    s.reply_out += out;
                }
                Class::Stub => {
                    s.stub_bytes += bytes;
                    s.stubs_out += out;
                }
            }
        }
        s
    }
}

impl<P: Provider> Drop for Share<P> {
    fn drop(&mut self) {
        for pool in &self.classes {
            for chunk in pool.chunks() {
                if chunk.returns.len() != chunk.layout.count {
                    // A buffer is still out and points at the chunk: keep the chunk (and
                    // its registered region) for good rather than let it dangle.
                    core::mem::forget(Arc::clone(chunk));
                }
            }
        }
    }
}

impl<P: Provider> core::fmt::Debug for Share<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Share")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests;
