use super::recovery::invalidate_limit;
use super::*;
use crate::fabric::soft::Soft;
use crate::program::{NULL, PROG, VERS};
use crate::responder::ServerConn;
use rpcrdma_proto::header::Header;
use rpcrdma_proto::rpc::{AcceptStat, AuthStat, RejectedReply};

#[test]
fn put_call_header_is_what_the_encoder_writes() {
    use super::submit::put_call_header;
    let sys = [0u8, 0, 0, 1, 0, 0, 0, 9, 0xab, 0xcd, 0, 0];
    for cred in [
        OpaqueAuth::NONE,
        OpaqueAuth::new(rpcrdma_proto::rpc::AUTH_SYS, &sys),
    ] {
        for (xid, prog, vers, proc_num) in [(1, 400100, 1, 0), (0xffff_ffff, 7, 3, 99)] {
            let mut call = CallArgs::new(prog, vers, proc_num, &[], 0);
            call.cred = cred;
            let rpc = CallHeader::new(xid, prog, vers, proc_num, cred, OpaqueAuth::NONE);
            let mut want = [0x5au8; 80];
            let n = rpc.encode(&mut want).expect("fits");
            let mut got = [0x5au8; 80];
            assert_eq!(put_call_header(&mut got, xid, &call), Some(n));
            assert_eq!(got, want);
            let mut short = vec![0u8; n - 1];
            assert_eq!(put_call_header(&mut short, xid, &call), None);
        }
    }
}

/// A Short Call with a credential other than AUTH_NONE, written word by word by
/// `submit_short`, is what the encoders write for it: transport header, RPC call header
/// with that credential and an AUTH_NONE verifier, then the arguments.
#[test]
fn short_calls_with_a_credential_are_what_the_encoders_write() {
    let dispatch = Arc::new(crate::dispatch::Dispatch::new());
    let cfg = ConnConfig::default();
    let (mut c, mut s) = crate::loopback::soft_pair(dispatch, cfg, cfg).unwrap();
    let gids = [4u32, 5];
    let sys = rpcrdma_proto::rpc::AuthSys {
        stamp: 9,
        machinename: b"host",
        uid: 7,
        gid: 8,
        gids: rpcrdma_proto::rpc::Gids::new(&gids).unwrap(),
    };
    let mut body = vec![0; sys.encoded_len()];
    sys.encode(&mut body).unwrap();
    let odd = [1u8, 2, 3, 4, 5];
    let args = [0u8, 0, 0, 3, 9, 9, 9, 9];
    for cred in [
        OpaqueAuth::new(rpcrdma_proto::rpc::AUTH_SYS, &body),
        OpaqueAuth::new(0x4000_0000, &odd),
        OpaqueAuth::new(AUTH_NONE, &odd),
    ] {
        let mut call = CallArgs::new(11, 2, 3, &args, 0);
        call.cred = cred;
        let before = c.snapshot().short_calls;
        let xid = c.submit(&call, 1).unwrap();
        assert_eq!(c.snapshot().short_calls, before + 1, "the Short path");
        let slot = &c.slots[(xid & c.slot_mask) as usize];
        let got = view::bytes(&slot.send, slot.send_len as usize).to_vec();
        let rpc = CallHeader::new(xid, 11, 2, 3, cred, OpaqueAuth::NONE);
        let mut want = vec![0u8; BARE_MSG_LEN + rpc.encoded_len()];
        let credit = c.credits.requested();
        let h = Header::msg(xid, credit, Chunks::default());
        assert_eq!(h.encode(&mut want), Ok(BARE_MSG_LEN));
        rpc.encode(&mut want[BARE_MSG_LEN..]).unwrap();
        want.extend_from_slice(&args);
        assert_eq!(got, want, "{cred:?}");
        // The peer answers (PROG_UNAVAIL: nothing is registered), which frees the credit.
        let mut done = 0;
        for _ in 0..1_000_000 {
            s.poll();
            c.poll_completions(|_| done += 1);
            if done > 0 {
                break;
            }
        }
        assert_eq!(done, 1, "no reply");
    }
}

/// The completions one reply produced: tag, XID, and the reply's header, results and
/// bulk data, or the error.
type Seen = Vec<(u64, u32, Result<(String, Vec<u8>, Vec<Vec<u8>>), RpcError>)>;

/// What one reply did to a client: the completions it produced (the reply's header,
/// results and bulk count, or the error), the counters, credits, free slots, receives
/// to repost and every slot's state.
#[derive(Debug, PartialEq)]
struct Effect {
    completions: Seen,
    stats: Snapshot,
    batch: [u64; 2],
    credits: RequesterCredits,
    free: Vec<u32>,
    reposts: Vec<u32>,
    slots: Vec<(CallState, u32, Option<u32>, CallOutcome)>,
}

fn effect(c: &mut Client<Soft>, completions: Seen) -> Effect {
    let e = Effect {
        completions,
        stats: c.stats.snapshot(),
        batch: c.batch,
        credits: c.credits,
        free: c.free.indexes.clone(),
        reposts: c.reposts.clone(),
        slots: c
            .slots
            .iter()
            .map(|s| (s.state, s.xid, s.grant, s.outcome))
            .collect(),
    };
    c.reposts.clear();
    e
}

/// Hands `reply` to the client as if it arrived in receive buffer 0 by a Send that
/// invalidated `inv`, through the fast paths first (`fast`) or the general path alone.
fn receive(c: &mut Client<Soft>, reply: &[u8], inv: Option<u32>, fast: bool) -> Effect {
    // The peer never sends in these tests, so nothing writes receive buffer 0.
    view::bytes_mut(&mut c.recv[0])[..reply.len()].copy_from_slice(reply);
    let mut seen = Vec::new();
    let mut f = |comp: Completion<'_>| {
        seen.push((
            comp.tag,
            comp.xid,
            comp.result.map(|r| {
                let bulk = r.bulk().iter().map(|b| b.to_vec()).collect();
                (format!("{:?}", r.rpc), r.results.to_vec(), bulk)
            }),
        ))
    };
    if fast {
        c.on_reply(0, reply.len() as u32, inv, &mut f);
    } else {
        // What `on_reply` counts before either path.
        c.batch[0] += reply.len() as u64;
        c.on_reply_general(0, reply.len() as u32, inv, &mut f);
    }
    effect(c, seen)
}

/// A Short Reply: the 28-byte RDMA_MSG header then the RPC Reply header and `results`.
fn short_reply(rdma_xid: u32, credit: u32, rpc: ReplyHeader<'_>, results: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; BARE_MSG_LEN + rpc.encoded_len()];
    Header::msg(rdma_xid, credit, Chunks::default())
        .encode(&mut m)
        .unwrap();
    rpc.encode(&mut m[BARE_MSG_LEN..]).unwrap();
    m.extend_from_slice(results);
    m
}

/// The replies to try against a pending Call with `xid`: every accepted and denied
/// status, a verifier body, results, truncations, XID and list mismatches, RDMA_ERROR.
fn replies(xid: u32, credit: u32) -> Vec<Vec<u8>> {
    let verf = [1u8, 2, 3, 4, 5];
    let none = OpaqueAuth::NONE;
    let mut out = Vec::new();
    let statuses = [
        ReplyHeader::accepted_success(xid),
        ReplyHeader::accepted(xid, OpaqueAuth::new(2, &verf), AcceptStat::Success),
        ReplyHeader::prog_unavail(xid),
        ReplyHeader::prog_mismatch(xid, 1, 3),
        ReplyHeader::proc_unavail(xid),
        ReplyHeader::garbage_args(xid),
        ReplyHeader::system_err(xid),
        ReplyHeader::rpc_mismatch(xid, 2, 2),
        ReplyHeader::auth_error(xid, AuthStat::AUTH_BADCRED),
        ReplyHeader::denied(xid, RejectedReply::AuthError(AuthStat(99))),
    ];
    for rpc in statuses {
        for results in [&[][..], &[0, 0, 0, 7], &[9; 40]] {
            let m = short_reply(xid, credit, rpc, results);
            // Whole, and cut at every length (the RPC header truncated, the results
            // shortened).
            for cut in 0..=m.len() {
                out.push(m[..cut].to_vec());
            }
        }
    }
    let ok = short_reply(
        xid,
        credit,
        ReplyHeader::accepted(xid, none, AcceptStat::Success),
        &[1, 2, 3, 4],
    );
    // Another XID in the RPC header; another slot's XID in both; version 2; RDMA_NOMSG;
    // an unknown accept_stat; a Call instead of a Reply; a Write list returned.
    let mut m = ok.clone();
    m[BARE_MSG_LEN + 3] ^= 1;
    out.push(m);
    let mut m = ok.clone();
    m[3] ^= 1;
    m[BARE_MSG_LEN + 3] ^= 1;
    out.push(m);
    let mut m = ok.clone();
    m[7] = 2;
    out.push(m);
    let mut m = ok.clone();
    m[15] = 1;
    out.push(m);
    let mut m = ok.clone();
    m[BARE_MSG_LEN + 23] = 6;
    out.push(m);
    let mut m = ok.clone();
    m[BARE_MSG_LEN + 7] = 0;
    out.push(m);
    let mut m = ok.clone();
    m[23] = 1;
    out.push(m);
    // RDMA_ERROR ERR_CHUNK and ERR_VERS for this XID.
    for err in [RdmaError::Chunk, RdmaError::Vers { low: 1, high: 1 }] {
        let mut m = vec![0u8; 64];
        let n = Header::error(xid, 1, credit, err).encode(&mut m).unwrap();
        m.truncate(n);
        out.push(m);
    }
    // Single-byte changes of a SUCCESS reply with a verifier, at every offset.
    let v = short_reply(
        xid,
        credit,
        ReplyHeader::accepted(xid, OpaqueAuth::new(1, &verf), AcceptStat::Success),
        &[5; 8],
    );
    for at in 0..v.len() {
        for b in [0u8, 1, 2, 0xff] {
            let mut m = v.clone();
            m[at] = b;
            out.push(m);
        }
    }
    out
}

/// Puts a Call without Write or Reply chunks in flight in a free slot, as `submit` and
/// `post_call` leave it, without sending it (the peer never answers in these tests): its
/// argument window (a Read chunk's) bound as `bound` says.
fn pending(c: &mut Client<Soft>, tag: u64, bound: Option<u32>) -> u32 {
    if let Some(s) = c.slots.iter_mut().find(|s| s.state == CallState::Sent) {
        s.bound = [bound, None];
        return s.xid;
    }
    let idx = c.free.pop().expect("a free slot");
    let xid = c.next_xid(idx);
    let slot = &mut c.slots[idx as usize];
    slot.clear_chunks();
    slot.bound = [bound, None];
    c.credits.take();
    slot.arm(xid, tag, Duration::from_secs(60), 0);
    xid
}

/// Frees the slots whose windows are being invalidated (their Local Invalidates are never
/// polled in these tests), as their completion would.
fn forget_invalidating(c: &mut Client<Soft>) {
    for i in 0..c.slots.len() {
        let s = &mut c.slots[i];
        if s.state == CallState::Invalidating {
            s.state = CallState::Free;
            c.credits.on_reply(s.grant);
            c.free.put(i as u32, s);
        }
    }
}

/// The requester's Short-reply fast path against its general path: two clients in the
/// same state receive the same replies, one through `on_reply` (fast path first), one
/// through the general path alone; every reply has the same effect on both (the same
/// completion or discard, counters, credits and slots).
#[test]
fn short_reply_fast_path_agrees_with_the_general_path() {
    let (mut fast, mut general, _servers) = twin_clients();
    let mut seen = Agreement::default();
    // No window (a Call without chunks), or the argument window of a Call whose argument
    // went in a Read chunk, invalidated by the Reply's Send, not, or another rkey.
    let rkey = 0x7700;
    for (credit, bound, inv) in [
        (1u32, None, None),
        (32, None, None),
        (32, None, Some(rkey)),
        (8, Some(rkey), Some(rkey)),
        (8, Some(rkey), None),
        (8, Some(rkey), Some(rkey + 1)),
    ] {
        seen.run(
            (&mut fast, &mut general),
            inv,
            |c, tag| pending(c, tag, bound),
            |xid| replies(xid, credit),
            |m, xid| verdict::short_reply(m).is_some_and(|r| r.xid == xid),
        );
    }
    assert!(
        seen.checked > 5000 && seen.fast_completions > 1000,
        "{seen:?}"
    );
}

/// Two clients whose slots make the same XIDs (each client starts its slots at a
/// generation of its own), each with the server end it is connected to.
fn twin_clients() -> (
    Client<Soft>,
    Client<Soft>,
    [crate::responder::ServerConn<Soft>; 2],
) {
    let dispatch = Arc::new(crate::dispatch::Dispatch::new());
    let cfg = ConnConfig::default();
    let (fast, s1) = crate::loopback::soft_pair(Arc::clone(&dispatch), cfg, cfg).unwrap();
    let (mut general, s2) = crate::loopback::soft_pair(dispatch, cfg, cfg).unwrap();
    for (a, b) in fast.slots.iter().zip(general.slots.iter_mut()) {
        b.gen = a.gen;
    }
    (fast, general, [s1, s2])
}

/// What a run of replies through a fast path and the general path showed.
#[derive(Debug, Default)]
struct Agreement {
    tag: u64,
    /// Replies handed to both clients.
    checked: usize,
    /// Of them, those that completed an RPC successfully through the fast path tried
    /// (`taken` said so).
    fast_completions: usize,
}

impl Agreement {
    /// Puts the same Call in flight in both clients (`pending`), hands each reply of
    /// `list(xid)` to both — `fast` through `on_reply`, `general` through the general path
    /// alone, the Send invalidating `inv` — and checks that each has the same effect on
    /// both; once one completes the Call (or leaves it to a Local Invalidate), the next
    /// replies go to a new Call.
    fn run(
        &mut self,
        (fast, general): (&mut Client<Soft>, &mut Client<Soft>),
        inv: Option<u32>,
        pending: impl Fn(&mut Client<Soft>, u64) -> u32,
        list: impl Fn(u32) -> Vec<Vec<u8>>,
        taken: impl Fn(&[u8], u32) -> bool,
    ) {
        let mut xid = pending(fast, self.tag);
        assert_eq!(pending(general, self.tag), xid);
        let mut replies = list(xid);
        for k in 0..replies.len() {
            let m = &replies[k];
            let fast_path = taken(m, xid);
            let a = receive(fast, m, inv, true);
            let b = receive(general, m, inv, false);
            assert_eq!(a, b, "inv {inv:?} reply {k}: {m:02x?}");
            self.checked += 1;
            if !a.completions.is_empty() || fast.slots.iter().all(|s| s.state != CallState::Sent) {
                let ok = a.completions.first().is_some_and(|c| c.2.is_ok());
                self.fast_completions += usize::from(fast_path && ok);
                self.tag += 1;
                forget_invalidating(fast);
                forget_invalidating(general);
                xid = pending(fast, self.tag);
                assert_eq!(pending(general, self.tag), xid);
                replies = list(xid);
            }
        }
    }
}

/// Puts a Call that provided the Write chunks `provided` (each at 8 KiB steps of the
/// result buffer) in flight, its result window bound as `bound` says, as `submit` leaves
/// it, without sending it.
fn pending_written(
    c: &mut Client<Soft>,
    tag: u64,
    provided: &[Vec<Segment>],
    bound: Option<u32>,
) -> u32 {
    let idx = match c.slots.iter().position(|s| s.state == CallState::Sent) {
        Some(i) => i as u32,
        None => {
            let idx = c.free.pop().expect("a free slot");
            let xid = c.next_xid(idx);
            c.credits.take();
            let slot = &mut c.slots[idx as usize];
            slot.arm(xid, tag, Duration::from_secs(60), 0);
            idx
        }
    };
    let slot = &mut c.slots[idx as usize];
    slot.clear_chunks();
    for (k, chunk) in provided.iter().enumerate() {
        slot.writes[k][..chunk.len()].copy_from_slice(chunk);
        slot.write_n[k] = chunk.len();
        slot.write_off[k] = 8192 * k as u32;
    }
    slot.n_writes = provided.len();
    slot.bound = [None, bound];
    slot.xid
}

/// Replies to a Call with `xid` that provided `provided`: the Write list echoed with each
/// chunk filled, partly filled or unused, fewer or more chunks, a segment's handle,
/// offset or length changed, a Reply chunk beside it, RDMA_NOMSG, every RPC status, and
/// every byte changed.
fn written_replies(xid: u32, credit: u32, provided: &[Vec<Segment>]) -> Vec<Vec<u8>> {
    let echo = |fill: &[u32]| -> Vec<Vec<Segment>> {
        provided
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let mut left = fill.get(k).copied().unwrap_or(0);
                c.iter()
                    .map(|s| {
                        let n = s.length.min(left);
                        left -= n;
                        Segment { length: n, ..*s }
                    })
                    .collect()
            })
            .collect()
    };
    let make = |writes: &[Vec<Segment>], reply: Option<&[Segment]>, rpc: ReplyHeader<'_>| {
        let w: Vec<&[Segment]> = writes.iter().map(|c| c.as_slice()).collect();
        let h = Header::msg(
            xid,
            credit,
            Chunks {
                reads: &[],
                writes: &w,
                reply,
            },
        );
        let mut m = vec![0u8; h.encoded_len() + rpc.encoded_len()];
        let n = h.encode(&mut m).unwrap();
        rpc.encode(&mut m[n..]).unwrap();
        m.extend_from_slice(&[0, 0, 0, 9]);
        m
    };
    let ok = ReplyHeader::accepted_success(xid);
    let mut out = Vec::new();
    for fill in [
        &[100u32, 0][..],
        &[1, 1],
        &[0, 0],
        &[4000, 3000],
        &[],
        &[100],
    ] {
        let writes = echo(fill);
        for rpc in [
            ok,
            ReplyHeader::garbage_args(xid),
            ReplyHeader::auth_error(xid, AuthStat::AUTH_BADCRED),
        ] {
            out.push(make(&writes, None, rpc));
        }
        // Fewer chunks than provided (CHECKLIST G-17), one more (refused).
        out.push(make(&writes[..writes.len().saturating_sub(1)], None, ok));
        let mut more = writes.clone();
        more.push(writes[0].clone());
        out.push(make(&more, None, ok));
        // A Reply chunk beside the list (zero length: accepted by the verdict).
        out.push(make(&writes, Some(&[Segment::new(1, 0, 0)]), ok));
        // A segment changed: handle, offset, a length past what was provided.
        for change in 0..3 {
            let mut w = writes.clone();
            let s = &mut w[0][0];
            match change {
                0 => s.handle ^= 1,
                1 => s.offset += 8,
                _ => s.length = provided[0][0].length + 1,
            }
            out.push(make(&w, None, ok));
        }
    }
    // Every byte of a filled reply changed, and the reply cut at every length.
    let base = make(&echo(&[100, 50]), None, ok);
    for at in 0..base.len() {
        for b in [0u8, 1, 2, 0xff] {
            let mut m = base.clone();
            m[at] = b;
            out.push(m);
        }
    }
    for cut in 0..base.len() {
        out.push(base[..cut].to_vec());
    }
    out
}

/// The requester's Write-list reply path against its general path, as for the Short-reply
/// fast path: two clients with the same Call in flight (two Write chunks provided, the
/// result window bound or not) receive the same replies, the Send invalidating the window,
/// another rkey or none; every reply has the same effect on both, completions' bulk data
/// included.
#[test]
fn write_list_reply_path_agrees_with_the_general_path() {
    let (mut fast, mut general, _servers) = twin_clients();
    // The bulk data the completions carry: the same bytes in both result buffers.
    for c in [&mut fast, &mut general] {
        for s in c.slots.iter_mut() {
            let res = view::bytes_mut(&mut s.res);
            for (k, b) in res.iter_mut().enumerate().take(16384) {
                *b = k as u8;
            }
        }
    }
    let rkey = 0x4400;
    let provided = vec![
        vec![
            Segment::new(rkey, 200, 0x1_0000),
            Segment::new(rkey, 3900, 0x1_0100),
        ],
        vec![Segment::new(rkey, 4096, 0x2_0000)],
    ];
    let mut seen = Agreement::default();
    for (bound, inv) in [
        (Some(rkey), Some(rkey)),
        (Some(rkey), None),
        (Some(rkey), Some(rkey + 1)),
        (None, None),
        (None, Some(rkey)),
    ] {
        seen.run(
            (&mut fast, &mut general),
            inv,
            |c, tag| pending_written(c, tag, &provided, bound),
            |xid| written_replies(xid, 8, &provided),
            |m, xid| verdict::write_reply(m).is_some_and(|r| r.xid == xid),
        );
    }
    assert!(
        seen.checked > 3000 && seen.fast_completions > 500,
        "{seen:?}"
    );
}

/// XIDs: the slot in as few low bits as the credits need, each slot's own generation above
/// them, starting where no other client starts.
#[test]
fn xids_repeat_only_after_a_slot_generation_wraps() {
    assert_eq!(super::slot_bits(1), 1);
    assert_eq!(super::slot_bits(2), 1);
    assert_eq!(super::slot_bits(3), 2);
    assert_eq!(super::slot_bits(128), 7);
    assert_eq!(super::slot_bits(129), 8);
    assert_eq!(super::slot_bits(4096), 12);
    let pair = |credits| {
        let cfg = ConnConfig {
            credits,
            initial_grant: credits,
            ..ConnConfig::default()
        };
        let dispatch = Arc::new(crate::dispatch::Dispatch::new());
        crate::loopback::soft_pair(dispatch, cfg, cfg).unwrap()
    };
    let (mut c, _s) = pair(8);
    assert_eq!(c.slot_mask, 7);
    let first = c.next_xid(3);
    assert_eq!(first & 7, 3);
    // 100,000 Calls in one slot: all different, each naming the slot.
    let mut seen = std::collections::HashSet::new();
    seen.insert(first);
    for _ in 0..100_000 {
        let x = c.next_xid(3);
        assert_eq!(x & 7, 3);
        assert!(seen.insert(x), "XID {x:#x} repeated");
    }
    // Another slot's XIDs are its own.
    assert_eq!(c.next_xid(5) & 7, 5);
    // Two clients do not start at the same XIDs.
    let (mut d, _t) = pair(8);
    assert_ne!(d.next_xid(3), first);
}

/// A send queue that stops retiring work without an error (its completions held back, as
/// when a peer neither acknowledges nor fails): the Local Invalidate of a timed-out RPC
/// never completes, and the requester ends the connection once it has waited past the
/// transport's retry bound, delivering the RPC (`Timeout`) instead of holding it forever.
#[test]
fn a_stuck_send_queue_ends_the_connection_and_delivers_the_rpc() {
    use crate::fabric::soft::Delay;
    let dispatch = Arc::new(crate::dispatch::Dispatch::new());
    // perftest's ACK timeout: the bound is a second.
    let cfg = ConnConfig {
        ack_timeout: 14,
        ..ConnConfig::default()
    };
    // The server is never polled: the Call is never answered.
    let (mut c, _s) = crate::loopback::soft_pair(dispatch, cfg, cfg).unwrap();
    let mut call = CallArgs::new(11, 2, 3, &[], 0);
    call.bulk_results = &[4096];
    call.timeout = Duration::from_millis(20);
    c.submit(&call, 7).unwrap();
    // Every completion of the client's queue pair from now on stays invisible for a minute.
    c.qp.as_ref()
        .unwrap()
        .faults()
        .delay_completions(Some(Delay::For(Duration::from_secs(60))));
    let limit = invalidate_limit(cfg.ack_timeout);
    let give_up = Instant::now() + limit + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.is_empty() {
        c.poll_completions(|x| got.push((x.tag, x.result.err())));
        assert!(
            Instant::now() < give_up,
            "the RPC was not delivered: {:?}",
            c.snapshot()
        );
    }
    assert_eq!(got, vec![(7, Some(RpcError::Timeout))]);
    let s = c.snapshot();
    assert_eq!((s.stalls, s.conn_lost, s.timeouts), (1, 1, 1));
    assert!(c.is_dead());
    assert_eq!(c.in_flight(), 0);
}

/// The stall bound follows the acknowledgement timeout: 1.5 × the 8 transmissions a
/// reliable connection makes before failing, at least a second, 20 s when rdma_cm chose.
#[test]
fn the_invalidate_limit_follows_the_ack_timeout() {
    assert_eq!(invalidate_limit(0), Duration::from_secs(20));
    // 14: 8 × 67.1 ms = 0.54 s, × 1.5 = 0.8 s, raised to 1 s.
    assert_eq!(invalidate_limit(14), Duration::from_secs(1));
    // 19: 8 × 2.147 s = 17.18 s, × 1.5 = 25.77 s.
    let l = invalidate_limit(19);
    assert_eq!(l, Duration::from_nanos((8 * 4096) << 19) * 3 / 2);
    assert!(l > Duration::from_secs(25) && l < Duration::from_secs(26));
    assert!(invalidate_limit(31) > invalidate_limit(30));
}

/// The ACK timeout is a 5-bit queue pair attribute: a larger exponent is refused with a
/// typed error before anything is set up, at either end, instead of being cut down.
#[test]
fn an_ack_timeout_beyond_its_field_is_refused() {
    use crate::conn::MAX_ACK_TIMEOUT;
    let widest = ConnConfig {
        ack_timeout: MAX_ACK_TIMEOUT,
        ..ConnConfig::default()
    };
    assert!(widest.validate().is_ok());
    let beyond = ConnConfig {
        ack_timeout: MAX_ACK_TIMEOUT + 1,
        ..ConnConfig::default()
    };
    assert!(matches!(beyond.validate(), Err(ConnError::Config(_))));
    let dispatch = Arc::new(crate::dispatch::Dispatch::new());
    assert!(crate::loopback::soft_pair(Arc::clone(&dispatch), beyond, widest).is_err());
    assert!(crate::loopback::soft_pair(dispatch, widest, beyond).is_err());
}

#[test]
fn segments_grow_only_where_a_chunk_would_overflow_its_list() {
    use super::submit::{segment_len, segs_needed};
    let seg = 64 * 1024;
    // Up to 64 segments of max_segment: unchanged.
    for len in [0, 1, seg, 4 << 20] {
        assert_eq!(segment_len(seg, len), seg, "{len}");
    }
    // Beyond: the least whole KiB that keeps the chunk within 64 segments.
    for len in [(4 << 20) + 1, 8 << 20, (8 << 20) + 100, 1 << 30, u32::MAX] {
        let l = segment_len(seg, len);
        assert_eq!(l % 1024, 0, "{len}");
        assert!(segs_needed(len, l) as usize <= MAX_SEGMENTS, "{len}: {l}");
        assert!(
            segs_needed(len, l - 1024) as usize > MAX_SEGMENTS,
            "{len}: {l}"
        );
    }
    assert_eq!(segment_len(seg, 8 << 20), 128 * 1024);
}

/// A soft pair serving the built-in program with `credits` at both ends, and a deadline
/// ten seconds away for the test's waits.
fn null_pair(credits: u32) -> (Client<Soft>, ServerConn<Soft>, std::time::Instant) {
    let cfg = ConnConfig {
        credits,
        ..ConnConfig::default()
    };
    let (c, s) = crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("pair");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    (c, s, deadline)
}

/// With credit for one Call, the receive a reply consumed waits for the next poll
/// ([`SPARE_RECVS`]): the next Call leaves first, the server answers it before the client
/// polls again, and the reply lands in the spare receive. A receive waited for every Call
/// (RFC 8166 §3.3.1); without the spare one the reply would find none and end the
/// connection.
#[test]
fn a_replys_receive_goes_back_after_the_next_call() {
    let (mut c, mut s, deadline) = null_pair(1);
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    for round in 0..4u64 {
        c.submit(&null, round).expect("a credit after each reply");
        while s.poll() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no Call"
            );
        }
        let mut done = Vec::new();
        while done.is_empty() {
            c.poll_completions(|x| done.push((x.tag, x.result.is_ok())));
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no reply"
            );
        }
        assert_eq!(done, [(round, true)], "round {round}");
        assert_eq!(
            c.reposts.len(),
            SPARE_RECVS as usize,
            "round {round}: waits"
        );
    }
    let (cs, ss) = (c.snapshot(), s.snapshot());
    assert_eq!((cs.conn_lost, ss.conn_lost, ss.post_refused), (0, 0, 0));
}

/// With another Call in flight when a reply arrives, its receive goes back at once: the
/// connection is not waiting for the caller's next Call.
#[test]
fn with_calls_in_flight_a_replys_receive_goes_back_at_once() {
    let (mut c, mut s, deadline) = null_pair(2);
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    // A first round trip raises the grant to two.
    c.submit(&null, 0).expect("submit");
    let mut done = Vec::new();
    while done.is_empty() {
        s.poll();
        c.poll_completions(|x| done.push(x.tag));
        assert!(std::time::Instant::now() < deadline, "no first reply");
    }
    c.submit(&null, 1).expect("submit");
    while s.poll() == 0 {
        assert!(std::time::Instant::now() < deadline, "no Call");
    }
    // Call 2 is sent but not answered when the reply to Call 1 is polled.
    c.submit(&null, 2).expect("a second credit");
    done.clear();
    while done.is_empty() {
        c.poll_completions(|x| done.push(x.tag));
        assert!(std::time::Instant::now() < deadline, "no reply");
    }
    assert_eq!(done, [1]);
    assert_eq!(c.in_flight(), 1);
    assert!(c.reposts.is_empty(), "reposted at once");
}
