//! What both ends of an RPC-over-RDMA connection share: configuration, the RFC 8797
//! exchange, credit accounting (RFC 8166 §3.3), send-queue slot accounting, work request
//! ids and in-place buffer views.
//!
//! The requester ([`crate::requester`]) and the responder ([`crate::responder`]) are built
//! from these parts; nothing here blocks, locks or allocates after setup.

#![deny(unsafe_code)]

pub mod credits;
pub mod negotiate;
pub mod sq;
pub(crate) mod view;

use std::time::Duration;

pub use credits::{RequesterCredits, ResponderCredits};
pub use negotiate::{Negotiation, NegotiationError, PeerProps};
pub use rpcrdma_proto::v2::Wire;
pub use sq::SendQueue;

use crate::fabric::{
    Access, ConnectError, FabricError, Payload, PostError, Provider, QueuePair, RecvWr, Sge,
};
use crate::pool::share::ShareConfig;
use crate::pool::{Buf, BufferPool, PoolConfig, PoolError};
use crate::wrid::{self, Kind};

/// How memory is exposed to the peer for chunks (RFC 8166 §4.4, §8.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Registration {
    /// Each RPC binds memory windows over exactly the buffers it exposes and invalidates
    /// them when it completes (locally, or by the peer's Send With Invalidate). The safe
    /// default.
    Windows,
    /// The pool regions are registered once with remote rights and their rkeys are
    /// advertised directly: no bind, no invalidation. Fast and trusting: the peer may reach
    /// every buffer of the region for the life of the connection (RFC 8166 §8.1.2 advises
    /// against it). Remote invalidation is never offered in this mode.
    Persistent,
    /// Both, chosen per RPC ([`CallArgs::persistent`](crate::requester::CallArgs)): the
    /// regions are registered with remote rights and for binding windows. On version 2 a
    /// windowed RPC names its window in `rdma_inv_handle` and a persistent one names none,
    /// so the responder invalidates only per-RPC memory (\[V2\] §3.3, §8.4); on version 1,
    /// which cannot say which handles may be invalidated, remote invalidation is not
    /// offered (RFC 8797 R clear) and windows are invalidated locally.
    Mixed,
}

/// Which RPC-over-RDMA versions an end speaks (RFC 8166 §4.2.2; \[V2\] §7: version 2 is
/// negotiated per connection by the client's first message).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Version {
    /// Version 1 only. A requester sends version 1; a responder answers any other version
    /// with ERR_VERS 1..1 (RFC 8166 §4.5.1).
    #[default]
    V1,
    /// Version 2 only. A requester opens each connection with RDMA2_CONNPROP (within 1024
    /// bytes, \[V2\] §7) and fails the connection ([`ConnError::Version`]) when the server
    /// answers ERR_VERS without 2; a responder answers version 1 with ERR_VERS 2..2.
    V2,
    /// Either. A requester tries version 2 and continues in version 1 on the same
    /// connection when the server answers ERR_VERS without 2, remembering that server
    /// so that later connections to it start in version 1 (\[V2\] §7.2); a responder takes
    /// each connection in the version of its first message.
    Auto,
}

impl Version {
    /// The name used on command lines: `1`, `2` or `auto`.
    pub const fn name(self) -> &'static str {
        match self {
            Version::V1 => "1",
            Version::V2 => "2",
            Version::Auto => "auto",
        }
    }
}

impl core::str::FromStr for Version {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "1" => Ok(Version::V1),
            "2" => Ok(Version::V2),
            "auto" => Ok(Version::Auto),
            other => Err(format!("version {other:?}: expected 1, 2 or auto")),
        }
    }
}

/// Retransmission after a lost connection (requester only; RFC 8166 §4.4.1, §8.1.3,
/// §3.3.3; RFC 5531 §9 on XIDs).
///
/// With a policy, a lost connection does not complete the pending RPCs: their windows are
/// deallocated at once (the memory exposed on the old connection is unreachable), the
/// requester connects again — from
/// [`Client::poll_completions`](crate::requester::Client::poll_completions), one attempt
/// at a time, each blocking at most `attempt_timeout` and never past the earliest pending
/// deadline — and sends each pending Call again with its original XID, freshly bound
/// windows (new rkeys in a re-encoded header) and the new connection's credits, starting
/// from one. Each RPC keeps its deadline; after `max_attempts` failed attempts the pending
/// RPCs complete with [`RpcError::ConnectionLost`](crate::requester::RpcError).
///
/// A connection that goes silent is treated as lost too: an RPC whose reply has not come
/// `reply_timeout` after its Call was sent (or sent again) ends the connection, and every
/// pending Call is sent again on a new one. RDMA connections have no keepalive, and a
/// fabric can stop delivering without reporting an error (soft-RoCE has been seen to leave
/// a send queue unacknowledged for many seconds); the Linux client does the same on each
/// RPC timeout (`xprt_rdma_timer` forces a disconnect). A responder that legitimately takes
/// longer than `reply_timeout` sees its Call again: choose it above the slowest procedure.
///
/// A retransmitted Call may execute twice at a responder without a duplicate-request
/// cache (this crate's responder has none): that is why retransmission is off by default
/// and chosen per connection for idempotent procedures or DRC-backed servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetransmitPolicy {
    /// Connection attempts after each loss before giving up (at least 1).
    pub max_attempts: u32,
    /// Longest a single attempt may take (and so the longest a poll blocks).
    pub attempt_timeout: Duration,
    /// Pause after a failed attempt, during which polls return at once.
    pub backoff: Duration,
    /// How long an RPC waits for its reply on one connection before the connection is
    /// taken as silent and replaced (its RPCs sent again); at or above an RPC's own
    /// timeout it never acts for that RPC.
    pub reply_timeout: Duration,
}

impl Default for RetransmitPolicy {
    fn default() -> Self {
        RetransmitPolicy {
            max_attempts: 5,
            attempt_timeout: Duration::from_millis(200),
            backoff: Duration::from_millis(50),
            reply_timeout: Duration::from_secs(2),
        }
    }
}

/// Settings of one connection end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnConfig {
    /// Largest Send this end posts; advertised as the RFC 8797 Send Size and the size of
    /// its send buffers (at least 1024).
    pub send_size: u32,
    /// Largest Send this end can receive; advertised as the Receive Size and the size of
    /// its receive buffers (at least 1024).
    pub recv_size: u32,
    /// Whether this end permits (responder: uses) Send With Invalidate (RFC 8797 §4.1).
    pub remote_invalidation: bool,
    /// Requester: the credits it requests, which is also the size of its pending table.
    /// Responder: the receives it keeps posted, the most it ever grants.
    pub credits: u32,
    /// Responder: the grant it starts with (at most `credits`, at least 1).
    pub initial_grant: u32,
    /// Largest bulk payload of one RPC (requester: its argument buffer, holding Read chunk
    /// data or a Long Call, and its result buffer, Write chunks and the Reply chunk;
    /// responder: a Call's pull buffer, its bulk result buffer, a Long reply). Bulk memory
    /// is shared: each credit has buffers of [`slot_bulk_size`](Self::slot_bulk_size) of
    /// its own, and an RPC whose chunks need more takes one of the connection's
    /// [`large_bufs`](Self::large_bufs) buffers of this size for its lifetime, or waits for
    /// one (back-pressure, counted in `large_bulk_waits`).
    pub bulk_size: u32,
    /// Bytes of the bulk buffers every credit owns (at most `bulk_size`; equal to it: every
    /// credit owns buffers of the largest size, and no large buffer is shared).
    pub slot_bulk_size: u32,
    /// Large buffers of `bulk_size` bytes the connection's RPCs share (at each end; the
    /// responder's serve pulls, bulk results and Long replies alike). At least 3 are made
    /// when `slot_bulk_size < bulk_size` (one Call may need a pull buffer, a bulk buffer
    /// and a Long reply's at once). Both ends register them as their RPCs need them: a
    /// requester 2 when it connects (an argument and a result buffer), a responder 3 at
    /// accept, then one at a time as an RPC finds none free (counted in
    /// `large_registered`), keeping them for the connection's life.
    pub large_bufs: u32,
    /// Responder: the most bytes of bulk buffers the connections of one
    /// [`Server`](crate::responder::Server) share, registered as their Calls need them
    /// ([`ShareConfig::bulk_limit`]; at least three buffers of `bulk_size`, what one Call
    /// may need at once). A responder's connections own only their receives:
    /// `slot_bulk_size` and `bulk_size` are the sizes of the shared buffers, and
    /// `large_bufs` is the requester's alone.
    pub shared_bulk: u64,
    /// Responder: take receives from a shared receive queue of the server's
    /// ([`SharedRecvs`](crate::pool::srq::SharedRecvs)) instead of posting
    /// `credits` receives per connection. Each connection then starts with a grant of at
    /// most `srq_grant` and is granted more, up to `credits`, as its Calls fill its grant,
    /// while the queue can back it (RFC 8166 §3.3.1; see the module documentation of
    /// `pool::srq`).
    pub srq: bool,
    /// Responder with [`srq`](Self::srq): the grant a connection starts with.
    pub srq_grant: u32,
    /// Responder with [`srq`](Self::srq): the most receives each of the server's shared
    /// queues holds, the bound on the credits of all its connections on that queue together.
    pub srq_recvs: u32,
    /// Responder with [`srq`](Self::srq): how many shared receive queues the server keeps,
    /// one per worker (each connection takes the least loaded one and tells the workers
    /// through [`Drive::home`](crate::worker::Drive::home), so that one worker alone posts
    /// to each queue: no two threads contend on it). 1 by default.
    pub srq_queues: u32,
    /// Requester: longest segment it advertises; longer chunks are split into several
    /// segments of one window. A Call whose chunk would need more segments than a list
    /// holds (64: a result over 4 MiB at 64 KiB) has longer ones, as few KiB longer as do.
    pub max_segment: u32,
    /// Responder: most RDMA Reads outstanding at once (ORD, RFC 8166 §3.3.1).
    pub max_reads: u32,
    /// How chunk memory is exposed.
    pub registration: Registration,
    /// Connection establishment timeout.
    pub connect_timeout: Duration,
    /// Sends (Calls, replies) of at most this many bytes are posted inline: their bytes are
    /// copied into the work request when it is posted (`IBV_SEND_INLINE`), which spares a
    /// NIC the DMA read of the send buffer on every small message. Clamped to what the
    /// device grants a queue pair; 0 never posts inline.
    pub inline_sends: u32,
    /// The transport's acknowledgement timeout, as the InfiniBand exponent: a reliable
    /// connection resends an unacknowledged packet after 4.096 µs × 2^`ack_timeout`, and
    /// fails its send queue after 7 such retries. 0, the default
    /// ([`DEFAULT_ACK_TIMEOUT`]), keeps the connection manager's (19 for RoCE on Linux
    /// 6.1: 2.1 s a retry, 17 s before a dead path is reported), as the kernel's NFS
    /// client and server do; perftest uses 14 (67 ms). A short one recovers a lost packet
    /// sooner but ends a connection whose peer is merely slow to acknowledge (in the
    /// emulated two-guest link under load, 14 lost a connection that 19 kept). The
    /// software fabric loses nothing and ignores it. At most [`MAX_ACK_TIMEOUT`]
    /// ([`validate`](Self::validate) refuses more).
    pub ack_timeout: u8,
    /// Requester: retransmit pending Calls on a new connection after a loss; `None` (the
    /// default) completes them with `ConnectionLost` and leaves reconnecting to the caller.
    /// Needs [`Registration::Windows`]: persistent regions would keep their rkeys across
    /// connections.
    pub retransmit: Option<RetransmitPolicy>,
    /// The RPC-over-RDMA versions this end speaks.
    pub version: Version,
    /// Reverse-direction RPC (callbacks, inline messages only): on version 1 the backward
    /// direction of RFC 8167, on version 2 the reverse direction of \[V2\] §3.2, §4.2.2
    /// (RDMA2_RVREQSUP_INLINE). Requester: the reverse Calls it serves at once (it posts
    /// as many receives more, RFC 8167 §4.2.1, and on version 2 advertises Reverse Request
    /// Support; 0: it takes none). Responder: the reverse Calls it may have outstanding at
    /// once (it posts as many receives more, for their Replies, RFC 8167 §4.2.2; 0: it
    /// never calls its client).
    pub reverse_credits: u32,
    /// Responder: how long a reverse Call waits for its Reply before it finishes with
    /// `ReverseError::Timeout` (RFC 8167 §4.3: nothing is retransmitted on a connection
    /// that stays up, so a Call the client dropped is given up here). Checked by
    /// `ServerConn::housekeep`.
    pub reverse_timeout: Duration,
}

/// The bytes of a Send from `buf`, whose span `sge` covers: inline (copied when posted)
/// when they fit in `inline_max`, else gathered from the registered buffer.
#[inline]
pub(crate) fn send_payload<'a, P: Provider>(
    buf: &'a Buf<P>,
    sge: &'a Sge,
    inline_max: u32,
) -> Payload<'a> {
    if sge.length <= inline_max {
        Payload::Inline(view::bytes(buf, sge.length as usize))
    } else {
        Payload::Sges(core::slice::from_ref(sge))
    }
}

/// The default [`ConnConfig::reverse_timeout`]: 10 s, about what the Linux NFS server
/// gives a callback (a tenth of its 90 s lease).
pub const DEFAULT_REVERSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The default [`ConnConfig::inline_sends`]: a Short Call or reply of a few hundred bytes
/// (a null RPC's are 68 and 52), within what NICs commonly allow inline (rxe: 240 or more,
/// mlx5: 256 or more; the device's own limit wins).
pub const DEFAULT_INLINE_SENDS: u32 = 256;

/// The default [`ConnConfig::ack_timeout`]: the connection manager's own.
pub const DEFAULT_ACK_TIMEOUT: u8 = 0;

/// The largest [`ConnConfig::ack_timeout`]: the queue pair attribute is 5 bits wide.
pub const MAX_ACK_TIMEOUT: u8 = 31;

pub use crate::pool::{DEFAULT_BULK_SIZE, DEFAULT_SLOT_BULK_SIZE};

/// The default [`ConnConfig::large_bufs`]: 16 RPCs of up to `bulk_size` at once per
/// connection (16 MiB at each end with the default `bulk_size`, whatever the credits).
pub const DEFAULT_LARGE_BUFS: u32 = 16;

/// The default [`ConnConfig::shared_bulk`]: 64 MiB, 58 RPCs of a megabyte at once for all
/// of a server's connections (what 4 connections held before they shared).
pub const DEFAULT_SHARED_BULK: u64 = 64 << 20;

/// The default [`ConnConfig::srq_grant`]: eight Calls in flight before a connection is
/// granted more.
pub const DEFAULT_SRQ_GRANT: u32 = 8;

/// The default [`ConnConfig::srq_recvs`]: 16,384 receives (64 MiB of 4 KiB ones at most).
pub const DEFAULT_SRQ_RECVS: u32 = 16384;

impl ConnConfig {
    /// The buffers a responder's connections share ([`Share`](crate::pool::share::Share)):
    /// reply ring entries of `send_size` and 1 KiB of headers, small bulk buffers of
    /// [`slot_bulk`](Self::slot_bulk), large ones of `bulk_size`, `shared_bulk` bytes of
    /// them at most (raised to what one Call may need).
    pub fn share_config(&self) -> ShareConfig {
        let large = self.bulk_size.max(4096) as usize;
        let mut share = ShareConfig {
            reply_size: self.send_size as usize + 1024,
            small_size: (self.slot_bulk() as usize).min(large),
            large_size: large,
            bulk_limit: self.shared_bulk,
            srq: self.srq.then(|| crate::pool::srq::SrqConfig {
                recv_size: self.recv_size as usize,
                max_recvs: self.srq_recvs,
                // A poll's worth of Calls on a busy connection, beyond every reservation.
                headroom: 256.min(self.srq_recvs / 2).max(1),
                per_chunk: 256,
                queues: self.srq_queues.max(1),
            }),
        };
        share.bulk_limit = share.bulk_limit.max(share.min_bulk_limit());
        share
    }

    /// A server's settings for `workers` workers, `bulk_per_worker` bytes of shared bulk
    /// buffers each, on a device whose shared receive queues hold up to `max_srq_wr`
    /// receives (0: it has none). `want_srq`: `Some(true)` demands shared receive queues
    /// (refused on a device without them), `Some(false)` refuses them, `None` takes them
    /// where the device has them. One queue per worker, each of at most half the device's
    /// largest (a device may round the size asked for up).
    pub fn for_server(
        self,
        workers: usize,
        bulk_per_worker: u64,
        max_srq_wr: u32,
        want_srq: Option<bool>,
    ) -> Result<ConnConfig, ConnError> {
        if want_srq == Some(true) && max_srq_wr == 0 {
            return Err(ConnError::Config("the device has no shared receive queues"));
        }
        let half = max_srq_wr / 2;
        Ok(ConnConfig {
            shared_bulk: bulk_per_worker.saturating_mul(workers.max(1) as u64),
            srq: want_srq.unwrap_or(true) && max_srq_wr > 0,
            srq_queues: workers.clamp(1, 1024) as u32,
            srq_recvs: self.srq_recvs.min(half).max(512.min(half)),
            ..self
        })
    }

    /// Where the connections' receives come from, for a server's banner: "N shared receive
    /// queue(s) of R receives (one per worker)" or "C receives per connection".
    pub fn receives_summary(&self) -> String {
        if self.srq {
            format!(
                "{} shared receive queue(s) of {} receives (one per worker)",
                self.srq_queues, self.srq_recvs
            )
        } else {
            format!("{} receives per connection", self.credits)
        }
    }

    /// Bytes of the bulk buffers each credit owns: `slot_bulk_size`, at most `bulk_size`
    /// and at least 4096.
    pub fn slot_bulk(&self) -> u32 {
        self.slot_bulk_size.clamp(4096, self.bulk_size.max(4096))
    }

    /// How many large buffers of `bulk_size` the connection shares: none when the credits'
    /// own buffers are that large already.
    pub fn large_count(&self) -> u32 {
        if self.slot_bulk() >= self.bulk_size {
            0
        } else {
            self.large_bufs.max(3)
        }
    }
}

/// The inline size to ask a queue pair for: `inline_sends`, at most what the device allows.
pub(crate) fn inline_cap(config: &ConnConfig, device_max: u32) -> u32 {
    config.inline_sends.min(device_max)
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            send_size: 4096,
            recv_size: 4096,
            remote_invalidation: true,
            credits: 32,
            initial_grant: 32,
            bulk_size: DEFAULT_BULK_SIZE,
            slot_bulk_size: DEFAULT_SLOT_BULK_SIZE,
            large_bufs: DEFAULT_LARGE_BUFS,
            shared_bulk: DEFAULT_SHARED_BULK,
            srq: false,
            srq_grant: DEFAULT_SRQ_GRANT,
            srq_recvs: DEFAULT_SRQ_RECVS,
            srq_queues: 1,
            max_segment: 64 * 1024,
            max_reads: 8,
            registration: Registration::Windows,
            connect_timeout: Duration::from_secs(5),
            inline_sends: DEFAULT_INLINE_SENDS,
            ack_timeout: DEFAULT_ACK_TIMEOUT,
            retransmit: None,
            version: Version::V1,
            reverse_credits: 0,
            reverse_timeout: DEFAULT_REVERSE_TIMEOUT,
        }
    }
}

impl ConnConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConnError> {
        if self.send_size < 1024 || self.recv_size < 1024 {
            return Err(ConnError::Config(
                "inline sizes must be at least 1024 bytes",
            ));
        }
        if self.credits == 0 || self.credits > 4096 {
            return Err(ConnError::Config("credits must be 1 ..= 4096"));
        }
        if self.ack_timeout > MAX_ACK_TIMEOUT {
            return Err(ConnError::Config(
                "the ACK timeout exponent must be 0 ..= 31 (IB spec. 5-bit field)",
            ));
        }
        if self.bulk_size < 4096 || self.max_segment == 0 || self.max_reads == 0 {
            return Err(ConnError::Config(
                "bulk size, segment and read limits too small",
            ));
        }
        if let Some(r) = self.retransmit {
            if r.max_attempts == 0 || r.attempt_timeout.is_zero() {
                return Err(ConnError::Config(
                    "retransmission needs at least one attempt of non-zero length",
                ));
            }
            if r.reply_timeout.is_zero() {
                return Err(ConnError::Config(
                    "a zero reply timeout would replace the connection at every check",
                ));
            }
            if self.registration != Registration::Windows {
                return Err(ConnError::Config(
                    "retransmission needs Registration::Windows (fresh rkeys per connection)",
                ));
            }
        }
        Ok(())
    }
}

/// Why a connection could not be set up or went away.
#[derive(Debug)]
pub enum ConnError {
    /// A setting is out of range.
    Config(&'static str),
    /// The connection steps failed.
    Connect(ConnectError),
    /// Allocating fabric objects failed.
    Fabric(FabricError),
    /// Allocating buffers failed.
    Pool(PoolError),
    /// Posting the initial receives failed.
    Post(PostError),
    /// The connection is not usable (lost, or never established).
    Disconnected,
    /// Version 2 was required ([`Version::V2`]) and the server speaks only versions
    /// `low..=high` (\[V2\] §7.2).
    Version {
        /// Lowest version the server supports.
        low: u32,
        /// Highest.
        high: u32,
    },
    /// The server did not answer the version 2 opening message in time (\[V2\] §7.2: it is
    /// taken for a server without version 2).
    VersionTimeout,
    /// The server's own filter refused a connection request
    /// ([`Server::accept_if`](crate::responder::Server::accept_if)), which was rejected at
    /// the connection manager before any resources were spent on it.
    Refused {
        /// The address the request came from, as the fabric reported it
        /// ([`ConnRequest::peer_addr`](crate::fabric::ConnRequest::peer_addr): `None` on
        /// soft, and on verbs for an address that is not IPv4 or IPv6).
        peer: Option<std::net::SocketAddr>,
    },
    /// The server's shared receive queue cannot back another connection's credits
    /// ([`ConnConfig::srq`]): full, or more receives could not be registered.
    Receives(crate::pool::srq::SrqError),
}

impl core::fmt::Display for ConnError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConnError::Config(why) => write!(f, "bad connection settings: {why}"),
            ConnError::Connect(e) => write!(f, "connecting failed: {e}"),
            ConnError::Fabric(e) => write!(f, "fabric: {e}"),
            ConnError::Pool(e) => write!(f, "buffers: {e}"),
            ConnError::Post(e) => write!(f, "posting receives: {e}"),
            ConnError::Disconnected => f.write_str("connection lost"),
            ConnError::Version { low, high } => write!(
                f,
                "the server speaks RPC-over-RDMA versions {low}..={high} only, not 2 (use \
                 --version 1 or auto)"
            ),
            ConnError::VersionTimeout => {
                f.write_str("no answer to the version 2 opening message (RDMA2_CONNPROP)")
            }
            ConnError::Refused { peer: Some(peer) } => write!(
                f,
                "refused the connection request from {peer} (rejected at the connection \
                 manager)"
            ),
            ConnError::Refused { peer: None } => f.write_str(
                "refused a connection request (rejected at the connection manager; the \
                 fabric gives no peer address)",
            ),
            ConnError::Receives(e) => write!(f, "receives for the connection's credits: {e}"),
        }
    }
}

impl std::error::Error for ConnError {}

impl From<ConnectError> for ConnError {
    fn from(e: ConnectError) -> Self {
        ConnError::Connect(e)
    }
}
impl From<FabricError> for ConnError {
    fn from(e: FabricError) -> Self {
        ConnError::Fabric(e)
    }
}
impl From<PoolError> for ConnError {
    fn from(e: PoolError) -> Self {
        ConnError::Pool(e)
    }
}
impl From<PostError> for ConnError {
    fn from(e: PostError) -> Self {
        ConnError::Post(e)
    }
}

/// A pool and every buffer taken from it.
pub(crate) type TakenPool<P> = (BufferPool<P>, Box<[Buf<P>]>);

/// A pool of `count` buffers of `size` bytes registered with `access`, and all its buffers
/// (a connection end holds every buffer of its pools for its whole life).
pub(crate) fn pool_taken<P: Provider>(
    pd: &P::Pd,
    size: usize,
    count: u32,
    access: Access,
) -> Result<TakenPool<P>, ConnError> {
    let pool = BufferPool::new(pd, PoolConfig::new(size, count, access))?;
    let bufs = (0..pool.capacity())
        .map(|_| pool.alloc().map_err(ConnError::from))
        .collect::<Result<_, _>>()?;
    Ok((pool, bufs))
}

/// Posts a receive for every buffer of `recv`, buffer `i` under the work request id of
/// receive `i` (done before the connection is accepted or connected).
pub(crate) fn post_all_recvs<P: Provider>(
    qp: &mut P::Qp,
    recv: &[Buf<P>],
) -> Result<(), PostError> {
    for (i, b) in recv.iter().enumerate() {
        qp.post_recv(&RecvWr::new(
            wrid::pack(Kind::Recv, i as u32, 0),
            &[b.sge()],
        ))?;
    }
    Ok(())
}

/// Receives each end posts beyond what its peer may have in flight toward it (the
/// responder: the grant; the requester: its Calls and the reverse Calls it serves). RFC 8166
/// §3.3.1 asks only that a receive wait for every message the peer may send. With these
/// spare ones, up to this many consumed receives may be reposted after the end's next Send
/// instead of before it, which takes the repost off the round trip: the responder's
/// replies leave before their reposts (`ServerConn::flush`), and a requester with nothing
/// else in flight reposts after the caller's next Call (`Client::repost_unless_spared`).
pub(crate) const SPARE_RECVS: u32 = 1;

/// Receives posted per `post_recv_list` by [`repost_recvs`].
const REPOST_BATCH: usize = 32;

/// Posts again the receives of the buffers of `recv` named by `idxs` (each under its
/// receive work request id), in batches of one post each; a single receive is posted
/// without building (and zeroing) the batch arrays, inline in the caller (the batch path,
/// with its arrays on the stack, is a call apart: `repost_batches`).
#[inline(always)]
pub(crate) fn repost_recvs<P: Provider>(
    qp: &mut P::Qp,
    recv: &[Buf<P>],
    idxs: &[u32],
) -> Result<(), PostError> {
    if let [r] = idxs[..] {
        let sge = recv[r as usize].sge();
        return qp.post_recv(&RecvWr::new(
            wrid::pack(Kind::Recv, r, 0),
            core::slice::from_ref(&sge),
        ));
    }
    repost_batches::<P>(qp, recv, idxs)
}

/// [`repost_recvs`] of more than one receive.
#[inline(never)]
fn repost_batches<P: Provider>(
    qp: &mut P::Qp,
    recv: &[Buf<P>],
    idxs: &[u32],
) -> Result<(), PostError> {
    let mut sges = [Sge::default(); REPOST_BATCH];
    for batch in idxs.chunks(REPOST_BATCH) {
        for (sge, &r) in sges.iter_mut().zip(batch) {
            *sge = recv[r as usize].sge();
        }
        let mut wrs = [RecvWr::new(0, &[]); REPOST_BATCH];
        for ((wr, sge), &r) in wrs.iter_mut().zip(&sges).zip(batch) {
            *wr = RecvWr::new(wrid::pack(Kind::Recv, r, 0), core::slice::from_ref(sge));
        }
        qp.post_recv_list(&wrs[..batch.len()])
            .map_err(|bad| bad.error)?;
    }
    Ok(())
}
