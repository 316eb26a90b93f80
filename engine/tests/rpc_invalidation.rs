//! The requester against a raw responder that sees everything the requester advertises:
//! after each reply (RFC 8166 §4.4.1, §8.1.3; RFC 8797 §4.1), timeout or cancel the RPC's
//! rkeys are dead — an RDMA operation through them fails with a remote access error — a
//! lost connection completes chunked RPCs with `ConnectionLost`, and hostile replies are
//! discarded or reported without breaking the connection.

mod common;
mod raw;

use std::time::{Duration, Instant};

use common::*;
use raw::*;
use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::fabric::{Provider, RemoteAddr, WcStatus};
use rpcrdma_engine::requester::{CallArgs, CancelError, Client, RpcError};
use rpcrdma_proto::header::{Chunks, Header, HeaderView, RdmaError, ReadSegment, Segment};
use rpcrdma_proto::rpc::ReplyHeader;

/// A real client connected to a raw server (R bit advertised when `server_swi`).
fn connect(client_swi: bool, server_swi: bool) -> (Client<Soft>, Ends, RawServer) {
    let mut rs = RawServer::listen();
    let addr = rs.addr.clone();
    let cfg = ConnConfig {
        remote_invalidation: client_swi,
        ..config()
    };
    let t = std::thread::spawn(move || {
        Client::<Soft>::connect(&Soft::open_device(None).unwrap(), &addr, cfg).unwrap()
    });
    let (ends, _peer) = rs.accept(server_swi);
    (t.join().unwrap(), ends, rs)
}

/// Waits for the next Call at the raw server, polling the client meanwhile.
fn next_call(c: &mut Client<Soft>, e: &mut Ends) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        e.poll();
        if let Some(m) = e.received.pop_front() {
            return m;
        }
        c.poll_completions(|x| panic!("unexpected completion {:?}", x.result.map(|_| ())));
        assert!(Instant::now() < deadline, "no Call in 5 s");
    }
}

/// Polls the client until one RPC completes; returns its result without the reply.
fn completion(c: &mut Client<Soft>) -> Result<(bool, Vec<Vec<u8>>), RpcError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = None;
    while out.is_none() {
        c.poll_completions(|x| {
            out = Some(x.result.map(|r| {
                (
                    r.is_success(),
                    r.bulk().iter().map(|b| b.to_vec()).collect(),
                )
            }))
        });
        assert!(Instant::now() < deadline, "no completion in 5 s");
    }
    out.unwrap()
}

/// An RPC reply: transport header with `chunks` and grant 32, then the RPC reply header
/// and `results`.
fn reply(xid: u32, chunks: Chunks<'_>, results: &[u8]) -> Vec<u8> {
    let rh = ReplyHeader::accepted_success(xid);
    let mut p = vec![0; rh.encoded_len()];
    rh.encode(&mut p).unwrap();
    p.extend_from_slice(results);
    message(&Header::msg(xid, 32, chunks), &p)
}

/// A first NULL RPC so that the client holds the full grant.
fn warm_up(c: &mut Client<Soft>, e: &mut Ends) {
    c.submit(&CallArgs::new(PROG, VERS, NULL, &[], 0), 0)
        .unwrap();
    let m = next_call(c, e);
    let xid = HeaderView::parse(&m).unwrap().xid();
    assert_eq!(e.send(&reply(xid, Chunks::NONE, &[])), WcStatus::Success);
    assert!(completion(c).unwrap().0);
}

#[derive(Clone, Copy, Debug)]
enum Form {
    /// READ: its result lands in a Write chunk.
    WriteChunk,
    /// WRITE: its DDP-eligible argument is pulled from a Read chunk.
    ReadChunk,
    /// ECHO too large for either direction: a Position-Zero Read chunk and a Reply chunk.
    LongBoth,
}

/// The rkeys a Call advertises: (rkey, address, length, remotely writable).
fn advertised(call: &[u8]) -> Vec<(RemoteAddr, u32, bool)> {
    let h = HeaderView::parse(call).unwrap();
    let mut v = Vec::new();
    if let Some(r) = h.read_list().iter().next() {
        v.push((
            RemoteAddr::new(r.segment.offset, r.segment.handle),
            r.segment.length,
            false,
        ));
    }
    for c in h.write_list().iter() {
        let s = c.iter().next().unwrap();
        v.push((RemoteAddr::new(s.offset, s.handle), s.length, true));
    }
    if let Some(s) = h.reply_chunk().and_then(|c| c.iter().next()) {
        v.push((RemoteAddr::new(s.offset, s.handle), s.length, true));
    }
    v
}

/// RFC 8166 §4.4.1, §8.1.3, RFC 8797 §4.1: once the RPC has completed, each rkey its Call
/// advertised is dead. With remote invalidation negotiated the reply's Send With
/// Invalidate kills one and the requester invalidates the others locally; without it,
/// all locally. One probe per connection: a failed RDMA operation ends the connection.
#[test]
fn rkeys_of_a_completed_rpc_are_dead() {
    let bulk = pattern(8, 6000);
    let echo = opaque(&pattern(6, 6000));
    for swi in [true, false] {
        for form in [Form::WriteChunk, Form::ReadChunk, Form::LongBoth] {
            let probes = if matches!(form, Form::LongBoth) { 2 } else { 1 };
            for probe in 0..probes {
                let (mut c, mut e, _rs) = connect(true, swi);
                assert_eq!(c.negotiation().remote_invalidation(), swi);
                warm_up(&mut c, &mut e);
                let read_args = [5000u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
                let write_args = 8u32.to_be_bytes();
                let mut a = match form {
                    Form::WriteChunk => CallArgs::new(PROG, VERS, READ, &read_args, 4),
                    Form::ReadChunk => CallArgs::new(PROG, VERS, WRITE, &write_args, 8),
                    Form::LongBoth => CallArgs::new(PROG, VERS, ECHO, &echo, echo.len() as u32),
                };
                if let Form::WriteChunk = form {
                    a.bulk_results = &[5000];
                }
                if let Form::ReadChunk = form {
                    a.bulk_arg = Some(&bulk);
                }
                let before = c.snapshot();
                let xid = c.submit(&a, 1).unwrap();
                let call = next_call(&mut c, &mut e);
                let keys = advertised(&call);
                assert_eq!(keys.len(), probes, "{form:?}: {keys:?}");
                // While the RPC is pending every advertised rkey works.
                for &(remote, len, writable) in &keys {
                    let st = if writable {
                        e.rdma_write(remote, len.min(5000), 0x77)
                    } else {
                        let (st, bytes) = e.rdma_read(remote, len);
                        assert_eq!(st, WcStatus::Success);
                        if let Form::ReadChunk = form {
                            assert_eq!(bytes, bulk);
                        } else {
                            assert_eq!(&bytes[..4], &xid.to_be_bytes(), "P0 starts at the XID");
                        }
                        st
                    };
                    assert_eq!(st, WcStatus::Success, "{form:?}: pending rkey usable");
                }
                // The reply, as a responder builds it.
                let h = HeaderView::parse(&call).unwrap();
                let m = match form {
                    Form::WriteChunk => {
                        let s = h.write_list().iter().next().unwrap().iter().next().unwrap();
                        let data = pattern(4, 5000);
                        assert_eq!(
                            e.rdma_write_bytes(RemoteAddr::new(s.offset, s.handle), &data),
                            WcStatus::Success
                        );
                        let echo = [Segment::new(s.handle, 5000, s.offset)];
                        let res = [5000u32.to_be_bytes(), 5000u32.to_be_bytes()].concat();
                        reply(
                            xid,
                            Chunks {
                                writes: &[&echo],
                                ..Chunks::NONE
                            },
                            &res,
                        )
                    }
                    Form::ReadChunk => {
                        let res = [1u32.to_be_bytes(), 6000u32.to_be_bytes()].concat();
                        reply(xid, Chunks::NONE, &res)
                    }
                    Form::LongBoth => {
                        let s = h.reply_chunk().unwrap().iter().next().unwrap();
                        let unused = [Segment::new(s.handle, 0, s.offset)];
                        reply(
                            xid,
                            Chunks {
                                reply: Some(&unused),
                                ..Chunks::NONE
                            },
                            &[0; 4],
                        )
                    }
                };
                // RFC 8797 §4.1: the rkey invalidated is one of this XID's; the engine's
                // rule is Write list, then Reply chunk, then Read list.
                let inv = swi.then(|| {
                    keys.iter()
                        .find(|k| k.2)
                        .or(keys.first())
                        .map(|k| k.0.rkey)
                        .unwrap()
                });
                let id = e.post(&m, inv).unwrap();
                assert_eq!(e.wait_send(id), WcStatus::Success);
                let (ok, got) = completion(&mut c).expect("reply");
                assert!(ok);
                if let Form::WriteChunk = form {
                    assert_eq!(got, vec![pattern(4, 5000)]);
                }
                let st = c.snapshot();
                let (remote, local) = (
                    st.remote_invalidations - before.remote_invalidations,
                    st.local_invalidations - before.local_invalidations,
                );
                let n = keys.len() as u64;
                if swi {
                    assert_eq!((remote, local), (1, n - 1), "{form:?}");
                } else {
                    assert_eq!((remote, local), (0, n), "{form:?}");
                }
                assert_eq!(st.registrations - before.registrations, n);
                // The RPC is over: its rkey is dead.
                let (remote, len, writable) = keys[probe];
                let st = if writable {
                    e.rdma_write(remote, len.min(64), 0x66)
                } else {
                    e.rdma_read(remote, len.min(64)).0
                };
                assert_eq!(
                    st,
                    WcStatus::RemAccessErr,
                    "swi {swi} {form:?} probe {probe}: rkey still alive after the reply"
                );
            }
        }
    }
}

/// The raw server sends `late`, the reply to an RPC already reported (timed out or
/// cancelled): it completes nothing, and the RPC's credit comes back.
fn late_reply_frees_the_credit(c: &mut Client<Soft>, e: &mut Ends, late: &[u8]) {
    assert_eq!(e.send(late), WcStatus::Success);
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.in_flight() > 0 {
        c.poll_completions(|x| panic!("a late reply completes nothing: {}", x.xid));
        assert!(Instant::now() < deadline, "the late reply kept the credit");
    }
}

/// A READ whose result lands in a Write chunk of 4096 bytes.
fn read_call(args: &[u8]) -> CallArgs<'_> {
    let mut a = CallArgs::new(PROG, VERS, READ, args, 4);
    a.bulk_results = &[4096];
    a
}

/// The reply to a READ that returns its Write chunk unused, with grant 32.
fn unused_chunk_reply(call: &[u8]) -> Vec<u8> {
    let h = HeaderView::parse(call).unwrap();
    let s = h.write_list().iter().next().unwrap().iter().next().unwrap();
    let unused = [Segment::new(s.handle, 0, s.offset)];
    reply(
        h.xid(),
        Chunks {
            writes: &[&unused],
            ..Chunks::NONE
        },
        &[0, 0, 0, 0, 0, 0, 0, 0],
    )
}

/// A raw server that never replies: the RPC completes with `Timeout` within its timeout,
/// its window is invalidated first (an RDMA Write to it then fails), and a late reply
/// gives its credit back.
#[test]
fn timeout_invalidates_the_window() {
    give_up_on_a_read(false);
}

/// RFC 8166 §4.4.1, §8.1.3: a cancelled RPC completes with `Cancelled` once its window is
/// invalidated (an RDMA Write to it then fails), exactly once; a second cancel, or one of
/// an XID never issued, is refused; the RPC keeps its credit until the late reply (§3.3.1),
/// which completes nothing.
#[test]
fn cancel_invalidates_the_window_before_completing() {
    give_up_on_a_read(true);
}

/// A READ (its result in a Write chunk) given up — cancelled, or timed out after 50 ms —
/// while the raw server holds its Call: checked as the two tests above say.
fn give_up_on_a_read(cancel: bool) {
    let (mut c, mut e, _rs) = connect(true, true);
    warm_up(&mut c, &mut e);
    let read_args = [4096u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let mut a = read_call(&read_args);
    if !cancel {
        a.timeout = Duration::from_millis(50);
    }
    let t0 = Instant::now();
    let xid = c.submit(&a, 1).unwrap();
    let call = next_call(&mut c, &mut e);
    let keys = advertised(&call);
    assert_eq!(keys.len(), 1);
    assert_eq!(
        e.rdma_write(keys[0].0, 4096, 1),
        WcStatus::Success,
        "pending: usable"
    );
    let (want, counts) = if cancel {
        assert_eq!(c.cancel(xid ^ (1 << 20)), Err(CancelError::NotPending));
        assert_eq!(c.cancel(xid), Ok(()));
        assert_eq!(
            c.cancel(xid),
            Err(CancelError::NotPending),
            "cancelled once"
        );
        (RpcError::Cancelled, (1, 0, 1))
    } else {
        (RpcError::Timeout, (0, 1, 1))
    };
    assert_eq!(completion(&mut c), Err(want));
    if !cancel {
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        assert!(waited < Duration::from_secs(1), "{waited:?}");
    }
    let st = c.snapshot();
    assert_eq!((st.cancels, st.timeouts, st.local_invalidations), counts);
    assert_eq!(c.in_flight(), 1, "the RPC given up keeps its credit");
    assert_eq!(c.cancel(xid), Err(CancelError::NotPending), "completed");
    late_reply_frees_the_credit(&mut c, &mut e, &unused_chunk_reply(&call));
    // The window is dead.
    assert_eq!(e.rdma_write(keys[0].0, 16, 2), WcStatus::RemAccessErr);
}

/// RFC 8166 §4.5.4, §8.1.3: a responder that goes away with chunked RPCs pending: each
/// completes with `ConnectionLost` (windows deallocated first), none hangs.
#[test]
fn lost_responder_completes_chunked_rpcs_with_errors() {
    let (mut c, mut e, _rs) = connect(true, true);
    warm_up(&mut c, &mut e);
    let read_args = [4096u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let mut a = CallArgs::new(PROG, VERS, READ, &read_args, 4);
    a.bulk_results = &[4096];
    let bulk = pattern(1, 8000);
    let mut b = CallArgs::new(PROG, VERS, WRITE, &[0, 0, 0, 1], 8);
    b.bulk_arg = Some(&bulk);
    for i in 0..6 {
        c.submit(if i % 2 == 0 { &a } else { &b }, i).unwrap();
    }
    for _ in 0..6 {
        let call = next_call(&mut c, &mut e);
        assert_eq!(advertised(&call).len(), 1);
    }
    drop(e);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut lost = 0;
    while lost < 6 {
        c.poll_completions(|x| {
            assert_eq!(x.result.err(), Some(RpcError::ConnectionLost));
            lost += 1;
        });
        assert!(Instant::now() < deadline, "{lost} of 6 completed");
    }
    assert!(c.is_dead());
    assert_eq!(c.in_flight(), 0);
    assert_eq!(c.snapshot().conn_lost, 1);
}

/// Hostile replies (RFC 8166 §4.5: a requester discards what it cannot trust): each is
/// discarded (the RPC then times out, typed) or completes the RPC with the RDMA_ERROR it
/// carries, and the connection keeps working.
#[test]
fn hostile_replies_are_discarded_or_reported() {
    let (mut c, mut e, _rs) = connect(true, false);
    warm_up(&mut c, &mut e);
    let read_args = [64u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let mut a = CallArgs::new(PROG, VERS, READ, &read_args, 4);
    a.bulk_results = &[64];
    a.timeout = Duration::from_millis(50);
    type Mk = fn(u32, &HeaderView<'_>) -> Vec<u8>;
    let cases: Vec<(&str, Mk, Result<(), RpcError>, u64)> = vec![
        (
            "10 bytes",
            |x, _| x.to_be_bytes().repeat(3)[..10].to_vec(),
            Err(RpcError::Timeout),
            1,
        ),
        (
            "rdma_xid ≠ RPC XID",
            |x, _| {
                let mut m = reply(x, Chunks::NONE, &[0; 8]);
                m[28..32].copy_from_slice(&(x ^ 1).to_be_bytes());
                m
            },
            Err(RpcError::Timeout),
            1,
        ),
        (
            "unknown XID",
            |x, _| reply(x ^ 0x8000_0000, Chunks::NONE, &[0; 8]),
            Err(RpcError::Timeout),
            1,
        ),
        (
            "returned Write chunk longer than provided",
            |x, h| {
                let s = h.write_list().iter().next().unwrap().iter().next().unwrap();
                let long = [Segment::new(s.handle, s.length + 64, s.offset)];
                reply(
                    x,
                    Chunks {
                        writes: &[&long],
                        ..Chunks::NONE
                    },
                    &[0; 8],
                )
            },
            Err(RpcError::Timeout),
            1,
        ),
        (
            "a Reply with a Read list",
            |x, _| {
                let rl = [ReadSegment::new(0, 1, 4, 0)];
                reply(
                    x,
                    Chunks {
                        reads: &rl,
                        ..Chunks::NONE
                    },
                    &[0; 8],
                )
            },
            Err(RpcError::Timeout),
            1,
        ),
        (
            "rdma_vers 2",
            |x, _| {
                let mut m = reply(x, Chunks::NONE, &[0; 8]);
                m[4..8].copy_from_slice(&2u32.to_be_bytes());
                m
            },
            Err(RpcError::Timeout),
            1,
        ),
        (
            "ERR_CHUNK",
            |x, _| message(&Header::error(x, 1, 32, RdmaError::Chunk), &[]),
            Err(RpcError::ErrChunk),
            0,
        ),
        (
            "ERR_VERS",
            |x, _| {
                message(
                    &Header::error(x, 1, 32, RdmaError::Vers { low: 1, high: 1 }),
                    &[],
                )
            },
            Err(RpcError::ErrVers { low: 1, high: 1 }),
            0,
        ),
    ];
    for (name, mk, want, discards) in cases {
        let before = c.snapshot();
        let xid = c.submit(&a, 0).unwrap();
        let call = next_call(&mut c, &mut e);
        let h = HeaderView::parse(&call).unwrap();
        assert_eq!(e.send(&mk(xid, &h)), WcStatus::Success, "{name}");
        let got = completion(&mut c).map(|_| ());
        assert_eq!(got, want, "{name}");
        let st = c.snapshot();
        assert_eq!(st.discards - before.discards, discards, "{name}");
        assert_eq!(st.conn_lost, 0, "{name}");
        // A proper reply to a fresh RPC still works (a late one frees a zombie's credit).
        if want == Err(RpcError::Timeout) {
            assert_eq!(
                e.send(&reply(xid, Chunks::NONE, &[0; 8])),
                WcStatus::Success
            );
        }
        warm_up(&mut c, &mut e);
    }
}

/// A reply already waiting when the RPC is cancelled arrives while its Local Invalidate is
/// outstanding: the RPC still completes with `Cancelled` (after the invalidation), and its
/// credit comes straight back instead of being held for a reply that already came.
#[test]
fn reply_racing_a_cancel_returns_the_credit() {
    let (mut c, mut e, _rs) = connect(true, true);
    warm_up(&mut c, &mut e);
    let read_args = [4096u32.to_be_bytes(), 4u32.to_be_bytes()].concat();
    let xid = c.submit(&read_call(&read_args), 1).unwrap();
    let call = next_call(&mut c, &mut e);
    let keys = advertised(&call);
    assert_eq!(e.send(&unused_chunk_reply(&call)), WcStatus::Success);
    assert_eq!(c.cancel(xid), Ok(()));
    assert_eq!(completion(&mut c), Err(RpcError::Cancelled));
    assert_eq!(c.in_flight(), 0, "the reply came: nothing holds the credit");
    let st = c.snapshot();
    assert_eq!((st.cancels, st.local_invalidations, st.discards), (1, 1, 0));
    assert_eq!(e.rdma_write(keys[0].0, 16, 2), WcStatus::RemAccessErr);
}

/// A Short Call has nothing exposed: cancelled, it completes at the next poll; the
/// responder still answers it, the late reply returns the credit, and the connection goes
/// on serving.
#[test]
fn cancelled_short_call_completes_at_the_next_poll() {
    let (mut c, mut e, _rs) = connect(true, true);
    warm_up(&mut c, &mut e);
    let xid = c
        .submit(&CallArgs::new(PROG, VERS, NULL, &[], 0), 5)
        .unwrap();
    assert_eq!(c.cancel(xid), Ok(()));
    let mut seen = Vec::new();
    c.poll_completions(|x| seen.push((x.tag, x.xid, x.result.err())));
    assert_eq!(seen, [(5, xid, Some(RpcError::Cancelled))]);
    let st = c.snapshot();
    assert_eq!((st.cancels, st.local_invalidations), (1, 0));
    let call = next_call(&mut c, &mut e);
    assert_eq!(HeaderView::parse(&call).unwrap().xid(), xid);
    late_reply_frees_the_credit(&mut c, &mut e, &reply(xid, Chunks::NONE, &[]));
    warm_up(&mut c, &mut e);
    assert_eq!(c.snapshot().discards, 0);
}
