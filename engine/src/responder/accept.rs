//! Listening and accepting: [`Server`] waits for connection requests, and
//! [`ServerConn::accept_in`] makes one connection's queues and receive buffers in the
//! server's protection domain, posts every receive and completes the RFC 8797 exchange.
//! Everything else a connection uses comes from the server's [`Share`] at its first Call.

use std::time::Instant;

use super::*;
use crate::pool::share::ShareStats;
use crate::pool::PoolError;

/// A listening endpoint that accepts RPC-over-RDMA connections.
pub struct Server<P: Provider> {
    listener: P::Listener,
    dispatch: Arc<Dispatch>,
    config: ConnConfig,
    /// The protection domain and the buffers every connection accepted here shares.
    share: Arc<Share<P>>,
    /// A completion queue made ahead, for the next connection: made while the server waits
    /// for a request rather than while a client waits for its accept (4 to 15 ms of an
    /// accept in the soft-RoCE guest).
    spare_cq: Option<P::Cq>,
    /// Declared last: the listener goes before the device.
    device: P::Device,
}

impl<P: Provider> core::fmt::Debug for Server<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .finish()
    }
}

impl<P: Provider> Server<P> {
    /// Listens at `addr` on `device`; every connection accepted serves `dispatch`.
    pub fn listen(
        device: P::Device,
        addr: &P::Addr,
        dispatch: Arc<Dispatch>,
        config: ConnConfig,
    ) -> Result<Server<P>, ConnError> {
        config.validate()?;
        let share = Share::new(device.alloc_pd()?, config.share_config())?;
        let geometry = Geometry::of(&config);
        // The first client's first Call then registers nothing: what it takes is there.
        share.prime_replies(geometry.first_call_entries());
        let listener = P::listen(&device, addr)?;
        let spare_cq = device.create_cq(geometry.cq_depth()).ok();
        Ok(Server {
            device,
            listener,
            dispatch,
            config,
            share,
            spare_cq,
        })
    }

    /// The buffers this server's connections share, and its protection domain.
    pub fn share(&self) -> &Arc<Share<P>> {
        &self.share
    }

    /// What the share has registered and lent out now ([`Share::stats`]).
    pub fn share_stats(&self) -> ShareStats {
        self.share.stats()
    }

    /// Whether the next accept has its completion queue made already. The server makes
    /// one when it starts listening and, after each accept, at the next call to
    /// [`accept_if`](Self::accept_if) before it waits for a request, so that a client
    /// waiting for its accept does not wait for the queue.
    pub fn cq_ready(&self) -> bool {
        self.spare_cq.is_some()
    }

    /// Waits at most `timeout` for a connection request and accepts it: the RFC 8797
    /// exchange, the connection's resources, all receives posted before the accept.
    pub fn accept(&mut self, timeout: Duration) -> Result<ServerConn<P>, ConnError> {
        self.accept_if(timeout, |_| true)
    }

    /// As [`accept`](Self::accept), but first asks `admit` whether to take the request,
    /// given the address it comes from ([`ConnRequest::peer_addr`]: an IP address and port
    /// on verbs, `None` on soft). A request `admit` refuses is rejected at the connection
    /// manager (`rdma_reject`, [`ConnRequest::reject`]) before any of the connection's
    /// resources are made, and [`ConnError::Refused`] says so with the address, for the
    /// caller to log and count; the client's connect then fails with the reject
    /// ([`ConnectError::Rejected`](crate::fabric::ConnectError::Rejected)). Host-based
    /// admission of this kind is what an export's client list asks for; RFC 8166 §8 leaves
    /// the authentication of peers to the layers around RPC-over-RDMA.
    ///
    /// The reject carries no private data: RFC 8797 §4 defines it for the request and the
    /// accept only. It is sent on a best-effort basis: if it cannot be sent (a client
    /// already gone, say), the request is refused all the same (on verbs, dropping an
    /// unanswered request rejects it too) and the answer is still `Refused`.
    pub fn accept_if(
        &mut self,
        timeout: Duration,
        admit: impl FnOnce(Option<std::net::SocketAddr>) -> bool,
    ) -> Result<ServerConn<P>, ConnError> {
        if self.spare_cq.is_none() {
            // Made while no client waits (the one before was accepted): if it fails, the
            // accept makes one and reports why.
            self.spare_cq = self
                .device
                .create_cq(Geometry::of(&self.config).cq_depth())
                .ok();
        }
        let req = self.listener.get_request(timeout)?;
        let peer = req.peer_addr();
        if !admit(peer) {
            // Refused whatever became of the reject (doc comment).
            let _ = req.reject(&[]);
            return Err(ConnError::Refused { peer });
        }
        ServerConn::accept_with(
            &self.device,
            &self.share,
            req,
            Arc::clone(&self.dispatch),
            self.config,
            timeout,
            self.spare_cq.take(),
        )
    }

    /// The device.
    pub fn device(&self) -> &P::Device {
        &self.device
    }
}

/// The most reply ring entries of a connection on the shared receive queue.
const SRQ_RING_MAX: u32 = 64;

/// Receives reserved in the shared receive queue for a connection being accepted, given
/// back if the accept fails.
struct SrqReservation<'a, P: Provider> {
    recvs: Option<&'a crate::pool::srq::SharedRecvs<P>>,
    n: u32,
}

impl<P: Provider> Drop for SrqReservation<'_, P> {
    fn drop(&mut self) {
        if let Some(r) = self.recvs {
            r.release(self.n);
        }
    }
}

impl<P: Provider> ServerConn<P> {
    /// Accepts `req` with a protection domain and a share of its own (a [`Server`] shares
    /// one among its connections: [`accept_in`](Self::accept_in)).
    pub fn accept(
        device: &P::Device,
        req: P::ConnRequest,
        dispatch: Arc<Dispatch>,
        config: ConnConfig,
        timeout: Duration,
    ) -> Result<ServerConn<P>, ConnError> {
        config.validate()?;
        let share = Share::new(device.alloc_pd()?, config.share_config())?;
        Self::accept_in(device, &share, req, dispatch, config, timeout)
    }

    /// Accepts `req` in `share`'s protection domain: makes the connection's queues and
    /// receive buffers (all it registers), posts every receive, and completes the RFC 8797
    /// exchange. Its reply ring and bulk buffers come from `share` at its first Call.
    /// `share` must have been made for `config` ([`ConnConfig::share_config`]) on `device`.
    pub fn accept_in(
        device: &P::Device,
        share: &Arc<Share<P>>,
        req: P::ConnRequest,
        dispatch: Arc<Dispatch>,
        config: ConnConfig,
        timeout: Duration,
    ) -> Result<ServerConn<P>, ConnError> {
        Self::accept_with(device, share, req, dispatch, config, timeout, None)
    }

    /// [`accept_in`](Self::accept_in) with the completion queue `cq` if one was made ahead
    /// for `config` (`Server::spare_cq`); one is made here otherwise.
    fn accept_with(
        device: &P::Device,
        share: &Arc<Share<P>>,
        req: P::ConnRequest,
        dispatch: Arc<Dispatch>,
        config: ConnConfig,
        timeout: Duration,
        cq: Option<P::Cq>,
    ) -> Result<ServerConn<P>, ConnError> {
        config.validate()?;
        if *share.config() != config.share_config() {
            return Err(ConnError::Config(
                "the share was made for other buffer sizes than the connection's",
            ));
        }
        let started = Instant::now();
        let credits = config.credits;
        let Geometry {
            reverse,
            nrecv,
            ring_len,
            sq_depth,
        } = Geometry::of(&config);
        let pd = share.pd();
        let depth = Geometry::of(&config).cq_depth();
        let cq = match cq {
            Some(cq) if cq.depth() >= depth => cq,
            _ => device.create_cq(depth)?,
        };
        let (srq_home, grant, reservation) = reserve_receives(share, &config, reverse)?;
        let (srq, srq_reserved) = (reservation.recvs, reservation.n);
        let reverse_state = reverse::Reverse::new(pd, reverse, config.send_size, config.recv_size)?;
        let (recv_pool, recv) = if srq.is_some() {
            (None, placeholders(share, nrecv)?)
        } else {
            let (pool, recv) =
                conn::pool_taken(pd, config.recv_size as usize, nrecv, Access::LOCAL_WRITE)?;
            (Some(pool), recv)
        };
        let large = large::Large::new(Arc::clone(share), nrecv as usize, ring_len as usize);
        let mut keep = vec![Arc::clone(share) as Arc<dyn Send + Sync>];
        keep.extend(recv_pool.as_ref().map(BufferPool::keepalive));
        let loans = LoanBoard::new(keep, nrecv as usize);
        // Rebound after the pool, so that on an early return the buffers drop first: a pool
        // dropped with buffers still out leaks its memory on purpose.
        let recv = recv;
        let local = Negotiation::advertise(&config);
        let peer_addr = req.peer_addr();
        let peer = req.private_data();
        let negotiation = Negotiation::complete(ConnEnd::Server, local, peer.as_bytes());
        let caps = QpCaps {
            max_send_wr: sq_depth,
            max_recv_wr: if srq.is_some() { 0 } else { nrecv },
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: conn::inline_cap(&config, device.attr().max_inline_data),
        };
        let init = QpInit {
            ack_timeout: config.ack_timeout,
            srq: srq.map(|r| r.srq()),
            ..QpInit::new(&cq, &cq, caps)
        };
        let qp = req.accept(pd, init, &local.encode(), timeout, |qp| {
            if srq.is_some() {
                // The shared queue's receives are posted already.
                Ok(())
            } else {
                conn::post_all_recvs::<P>(qp, &recv)
            }
        })?;
        // Kept from here on by the connection, which gives it back when dropped.
        core::mem::forget(reservation);
        share.join_conn(
            recv_pool.as_ref().map_or(0, BufferPool::bytes) + reverse_state.registered_bytes(),
        );
        let inline_max = qp.caps().max_inline_data.min(caps.max_inline_data);
        let id = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
        let slots = recv_slots(nrecv);
        let (srq_free, srq_parked) = srq_slots(nrecv, srq_reserved > 0);
        Ok(ServerConn {
            io: fabric_side(qp, sq_depth, ring_len, inline_max, config.version),
            cq,
            recv,
            pull: Vec::new(),
            read_lists: pull::ReadLists::new(nrecv, config.recv_size),
            bulk: Vec::new(),
            ring: Vec::new(),
            ring_seq: vec![0; ring_len as usize].into_boxed_slice(),
            ring_next: 0,
            hot_pull: None,
            slots,
            read_wait: VecDeque::with_capacity(nrecv as usize),
            ready: VecDeque::with_capacity(nrecv as usize),
            reads_in_flight: 0,
            in_process: 0,
            deferred: 0,
            idle_polls: 0,
            watched: false,
            id,
            reposts: Vec::with_capacity(nrecv as usize),
            srq_free,
            srq_parked,
            srq_reserved,
            srq_home,
            reverse_slots: reverse,
            known_grant: grant,
            sends: Vec::with_capacity(POLL_BATCH + nrecv as usize),
            credits: ResponderCredits::new(credits, grant),
            negotiation,
            mode: Mode::for_config(config.version),
            reverse: reverse_state,
            dispatch,
            config,
            wc: [Wc::default(); POLL_BATCH],
            large,
            recv_pool,
            loans,
            echo: Echo::new(),
            setup: started.elapsed(),
            peer_addr,
            _share: Arc::clone(share),
        })
    }
}

/// How much of each a connection makes at accept, from its configuration.
struct Geometry {
    /// Receives for the Replies of reverse-direction Calls.
    reverse: u32,
    /// Receives (and slots): one per credit, the reverse ones and the spares.
    nrecv: u32,
    /// Entries of the reply ring.
    ring_len: u32,
    /// Depth of the send queue.
    sq_depth: u32,
}

impl Geometry {
    /// The most reply-class buffers a connection's first Call takes from the share: its
    /// whole ring, and a pull and a bulk buffer for every slot (`ServerConn::dress`).
    fn first_call_entries(&self) -> usize {
        self.ring_len as usize + 2 * self.nrecv as usize
    }

    fn of(config: &ConnConfig) -> Geometry {
        let credits = config.credits;
        // Receives: one per credit, and one per reverse-direction Call this end may have
        // outstanding, for its Reply (RFC 8167 §4.2.2; \[V2\] §3.2: they are not part of
        // the grant, so the client's Calls and its reverse Replies never overrun them), and
        // the spare ones that let a reply leave before its receive is reposted (`flush`).
        let reverse = config.reverse_credits.min(reverse::MAX_REVERSE);
        let nrecv = credits + reverse + SPARE_RECVS;
        // The reply ring: replies hold their entries until a signaled completion (every
        // half ring) retires them. On the shared receive queue, where most connections
        // hold small grants, at most 64 entries (a signal every 32 replies) whatever the
        // credits: the ring is most of what a busy connection takes from the share.
        let ring_len = if config.srq {
            (2 * credits).clamp(8, SRQ_RING_MAX)
        } else {
            (2 * credits).max(8)
        };
        let sq_depth = (4 * ring_len + config.max_reads + 2 * REPLY_WRS as u32).min(16384);
        Geometry {
            reverse,
            nrecv,
            ring_len,
            sq_depth,
        }
    }

    /// Entries of the connection's completion queue: its send queue and its receives, and
    /// room for the flushes of a disconnect.
    fn cq_depth(&self) -> u32 {
        self.sq_depth + self.nrecv + 64
    }
}

/// The receives of a connection with `reverse` reverse-direction receives, on the server's
/// shared receive queue if it has one: which queue (its index), the first grant, and the
/// reservation, given back when dropped unless the connection takes it over.
///
/// With the server's shared receive queue, the connection's receives come from it: it
/// reserves receives for its first grant and spares (`pool::srq`), and each slot holds a
/// placeholder until a Call's receive stands in. The least loaded of the server's queues
/// (one per worker): the workers give the connection to that queue's worker
/// (`Drive::home`).
fn reserve_receives<'s, P: Provider>(
    share: &'s Arc<Share<P>>,
    config: &ConnConfig,
    reverse: u32,
) -> Result<(usize, u32, SrqReservation<'s, P>), ConnError> {
    let srq_home = share.least_loaded_recvs().unwrap_or(0);
    let srq = share.recvs(srq_home);
    let (grant, srq_reserved) = match srq {
        Some(r) => {
            let g = config
                .initial_grant
                .min(config.srq_grant)
                .clamp(1, config.credits);
            let n = g + reverse + SPARE_RECVS;
            r.admit(share.pd(), n).map_err(ConnError::Receives)?;
            (g, n)
        }
        None => (config.initial_grant, 0),
    };
    // Given back if anything after fails.
    let reservation = SrqReservation {
        recvs: srq,
        n: srq_reserved,
    };
    Ok((srq_home, grant, reservation))
}

/// The `nrecv` slots of a new connection, each posted (their lists of RDMA Reads are the
/// connection's `pull::ReadLists`).
fn recv_slots(nrecv: u32) -> Box<[RecvSlot]> {
    (0..nrecv)
        .map(|_| RecvSlot {
            state: RecvState::Posted,
            byte_len: 0,
            judged: None,
            bare: None,
            open_v2: false,
            form: CallForm::Refused,
            n_reads: 0,
            next_read: 0,
            pending_reads: 0,
            shift: 0,
            queued: false,
            gen: 0,
        })
        .collect()
}

/// A placeholder for each of a connection's `nrecv` slots on the shared receive queue,
/// from the share's [`Class::Stub`](crate::pool::share::Class::Stub): registered, never
/// posted, swapped for a Call's receive buffer while the Call is in process. The share
/// registered them before (at its start, or for an earlier connection), so accepting
/// registers nothing unless the connections before took every one.
fn placeholders<P: Provider>(share: &Share<P>, nrecv: u32) -> Result<Box<[Buf<P>]>, ConnError> {
    (0..nrecv)
        .map(|_| {
            share
                .take(crate::pool::share::Class::Stub)
                .ok_or(ConnError::Pool(PoolError::Exhausted { capacity: nrecv }))
        })
        .collect()
}

/// The shared receive queue's receives parked in a connection's slots
/// (`ServerConn::srq_parked`).
type Parked<P> = Box<[Option<Buf<P>>]>;

/// The free slots and the parked receives of a connection on the shared receive queue
/// (`on_srq`) with `nrecv` slots: every slot free, none parked; empty otherwise.
fn srq_slots<P: Provider>(nrecv: u32, on_srq: bool) -> (Vec<u32>, Parked<P>) {
    if on_srq {
        (
            (0..nrecv).rev().collect(),
            (0..nrecv).map(|_| None).collect(),
        )
    } else {
        (Vec::new(), Box::new([]))
    }
}

/// The fabric side of a new connection on `qp`: a send queue of `sq_depth` signaling every
/// half ring of `ring_len`, fresh counters, and the wire of `version` (version 1 until an
/// open one is decided).
fn fabric_side<P: Provider>(
    qp: P::Qp,
    sq_depth: u32,
    ring_len: u32,
    inline_max: u32,
    version: crate::conn::Version,
) -> FabricSide<P> {
    FabricSide {
        qp,
        sq: SendQueue::new(sq_depth, ring_len / 2),
        stats: Arc::new(Counters::default()),
        tally: Tally::default(),
        dead: false,
        inline_max,
        wire: if version == crate::conn::Version::V2 {
            Wire::V2
        } else {
            Wire::V1
        },
    }
}
