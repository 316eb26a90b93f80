//! The buffers behind pulled Calls and replies: the pull buffer reuse, the large-buffer
//! count, a refused post.

use super::*;

#[test]
fn a_pulled_call_takes_the_pull_buffer_the_last_one_used() {
    let cfg = ConnConfig::default();
    let (mut c, mut s) = dressed(
        crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("soft pair"),
    );
    let n = s.pull.len();
    assert!(n >= 4, "a ring of several receives");
    let addrs = |s: &ServerConn<Soft>| s.pull.iter().map(Buf::addr).collect::<Vec<_>>();
    let mut own: Vec<u64> = addrs(&s);
    own.sort_unstable();
    // Call 0 lands in receive 0 and pulls into its own buffer; every later one lands in
    // the next receive and takes that same buffer, so one buffer takes every pull.
    assert!(pulled_write(&mut c, &mut s, 1));
    let first = s.pull[0].addr();
    assert_eq!(s.hot_pull, Some(0));
    for k in 1..2 * n as u32 + 3 {
        assert!(
            pulled_write(&mut c, &mut s, 1 + k),
            "Call {k}'s data intact"
        );
        let r = (k as usize) % n;
        assert_eq!(s.hot_pull, Some(r as u32));
        assert_eq!(
            s.pull[r].addr(),
            first,
            "Call {k} pulled into the hot buffer"
        );
    }
    // The exchanges only moved buffers between receives: each is still held once.
    let mut now = addrs(&s);
    now.sort_unstable();
    assert_eq!(now, own);
    // A Short Call uses no pull buffer and leaves the hot one as it is.
    let null =
        crate::requester::CallArgs::new(crate::program::PROG, crate::program::VERS, 0, &[], 0);
    assert!(drive_call(&mut c, &mut s, &null, |_| true));
    let hot = s.hot_pull;
    assert!(pulled_write(&mut c, &mut s, 77));
    let r = s.hot_pull.expect("set") as usize;
    assert_ne!(Some(r as u32), hot, "the WRITE landed in a later receive");
    assert_eq!(s.pull[r].addr(), first);
}

#[test]
fn a_busy_slot_keeps_its_pull_buffer() {
    let (_c, mut s) = server();
    let before: Vec<u64> = s.pull.iter().map(Buf::addr).collect();
    // Slot 1 answered last but is pulling again: slot 2 may not take its buffer.
    s.hot_pull = Some(1);
    s.slots[1].state = RecvState::Pulling { phase: 1 };
    super::pull::take_hot_pull(&mut s.hot_pull, &mut s.pull, &s.slots, &s.large, 2);
    assert_eq!(s.hot_pull, None, "the hint is used once");
    let after: Vec<u64> = s.pull.iter().map(Buf::addr).collect();
    assert_eq!(before, after);
    // Idle, it may.
    s.slots[1].state = RecvState::Posted;
    s.hot_pull = Some(1);
    super::pull::take_hot_pull(&mut s.hot_pull, &mut s.pull, &s.slots, &s.large, 2);
    assert_eq!((s.pull[2].addr(), s.pull[1].addr()), (before[1], before[2]));
}

#[test]
fn a_refused_post_is_counted_and_ends_the_connection() {
    let (mut c, mut s) = server();
    let null = crate::requester::CallArgs::new(PROG, 1, 0, &[], 0);
    c.submit(&null, 1).expect("submit");
    // Fill the send queue behind the engine's back with unsignaled zero-length RDMA
    // Writes (what the fence of `state.rs` is), so that the reply's post is refused.
    let mut filled = 0;
    loop {
        let wr = SendWr::write(wrid::pack(Kind::Write, 0, 0), &[], RemoteAddr::new(0, 0));
        match s.io.qp.post_send(&wr) {
            Ok(()) => filled += 1,
            Err(crate::fabric::PostError::QueueFull) => break,
            Err(e) => panic!("unexpected refusal {e:?}"),
        }
        assert!(filled < 1 << 16, "the send queue never filled");
    }
    let before = s.snapshot();
    assert_eq!((before.post_refused, before.conn_lost), (0, 0));
    s.poll();
    let after = s.snapshot();
    assert_eq!((after.post_refused, after.conn_lost), (1, 1));
    assert!(s.is_dead(), "the connection is ended");
    // The client learns of it: its RPC completes with the loss.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut lost = None;
    while lost.is_none() {
        c.poll_completions(|x| lost = Some(x.result.err()));
        assert!(
            std::time::Instant::now() < deadline,
            "no completion in 10 s"
        );
    }
    assert_eq!(lost, Some(Some(crate::requester::RpcError::ConnectionLost)));
    assert_eq!(c.snapshot().post_refused, 0, "the client refused nothing");
}

#[test]
fn the_count_of_large_buffers_out_is_what_is_held() {
    use crate::program::{encode_words, fill_pattern, word, PROG, READ, VERS, WRITE};
    let cfg = ConnConfig {
        bulk_size: 1 << 20,
        ..ConnConfig::default()
    };
    let (mut c, mut s) =
        dressed(crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("pair"));
    let mut data = vec![0; 300_000];
    fill_pattern(5, &mut data);
    let seed = 5u32.to_be_bytes();
    let mut write = crate::requester::CallArgs::new(PROG, VERS, WRITE, &seed, 12);
    write.bulk_arg = Some(&data);
    let args = encode_words(300_000, 5);
    let mut read = crate::requester::CallArgs::new(PROG, VERS, READ, &args, 8);
    let results = [300_000];
    read.bulk_results = &results;
    let null = crate::requester::CallArgs::new(PROG, VERS, 0, &[], 0);
    // A Long Call and a Long reply (through a Reply chunk): a large buffer reserved for it.
    let mut arg = vec![0; crate::program::opaque_len(100_000)];
    crate::program::encode_opaque(&mut arg, 100_000, |d| fill_pattern(9, d)).expect("sized");
    let echo =
        crate::requester::CallArgs::new(PROG, VERS, crate::program::ECHO, &arg, arg.len() as u32);
    let mut seen_out = 0;
    for k in 0..4 * s.ring.len() {
        let a = match k % 4 {
            0 => &write,
            1 => &read,
            2 => &echo,
            _ => &null,
        };
        // One pass at a time (`poll` makes a second when replies hold large buffers, which
        // gives them back before it returns): the count is checked while buffers are out.
        c.submit(a, 1).expect("submit");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut ok = None;
        while ok.is_none() {
            s.poll_batch();
            assert_eq!(s.large.out(), s.large.held(), "in RPC {k}");
            seen_out = seen_out.max(s.large.out());
            c.poll_completions(|x| {
                ok = Some(
                    x.result
                        .map(|r| word(r.results, 0) != Some(0))
                        .unwrap_or(false),
                )
            });
            assert!(
                std::time::Instant::now() < deadline,
                "no completion in 10 s"
            );
        }
        assert_eq!(ok, Some(true), "RPC {k} succeeded");
    }
    assert!(seen_out > 0, "large buffers were used");
    assert!(s.snapshot().large_bulk > 0);
}

/// On soft a reply is sent as it is posted: the poll that posts a READ's reply from a shared
/// bulk buffer also sees its completion and gives the buffer back to the worker's pool, so
/// that the next READ (of any connection) fills a buffer still in the cache.
#[test]
fn a_polled_reply_gives_its_shared_bulk_buffer_back_at_once() {
    use crate::program::{encode_words, word, PROG, READ, VERS};
    let cfg = ConnConfig {
        bulk_size: 1 << 20,
        ..ConnConfig::default()
    };
    let (mut c, mut s) =
        dressed(crate::loopback::soft_pair(crate::program::dispatch(), cfg, cfg).expect("pair"));
    // Larger than the connection's own bulk buffers: a shared one carries it.
    let args = encode_words(300_000, 3);
    let mut read = crate::requester::CallArgs::new(PROG, VERS, READ, &args, 8);
    let results = [300_000];
    read.bulk_results = &results;
    for k in 0..8 {
        assert!(
            drive_call(&mut c, &mut s, &read, |r| word(r, 0) != Some(0)),
            "READ {k}"
        );
        assert_eq!(s.large.out(), 0, "READ {k}'s buffer is back");
    }
    assert!(
        s.snapshot().large_bulk >= 8,
        "the READs took shared bulk buffers"
    );
}

/// Fills the server's receive queue behind the engine's back (receives of no buffer), so
/// that its next repost is refused.
fn fill_receive_queue(s: &mut ServerConn<Soft>) {
    let mut filled = 0;
    loop {
        let wr = crate::fabric::RecvWr::new(wrid::pack(Kind::Write, 0, 0), &[]);
        match s.io.qp.post_recv(&wr) {
            Ok(()) => filled += 1,
            Err(crate::fabric::PostError::QueueFull) => break,
            Err(e) => panic!("unexpected refusal {e:?}"),
        }
        assert!(filled < 1 << 16, "the receive queue never filled");
    }
}

/// The results of the client's RPCs once the server's connection is gone: Ok for those
/// answered, the loss for the others, in completion order.
fn results_after_loss(c: &mut crate::requester::Client<Soft>, n: usize) -> Vec<bool> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < n {
        c.poll_completions(|x| match x.result {
            Ok(_) => got.push(true),
            Err(e) => {
                assert_eq!(e, crate::requester::RpcError::ConnectionLost);
                got.push(false);
            }
        });
        assert!(
            std::time::Instant::now() < deadline,
            "no completions in 10 s"
        );
    }
    got
}

/// Takes the server's completions for `n` Calls and answers them, stopping before the
/// flush that posts replies and reposts; then fills the receive queue, so that the flush's
/// repost is refused, and flushes.
fn answer_with_full_receive_queue(s: &mut ServerConn<Soft>, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // Until `n` Calls are answered (a send completion may come among them).
    while s.reposts.len() < n {
        let k = s.cq.poll(&mut s.wc).expect("poll");
        for i in 0..k {
            let wc = s.wc[i];
            s.on_completion(&wc);
        }
        assert!(std::time::Instant::now() < deadline, "no Call in 10 s");
    }
    assert_eq!((s.reposts.len(), s.sends.len()), (n, n));
    fill_receive_queue(s);
    s.flush();
}

#[test]
fn a_lone_reply_leaves_before_its_receive_is_reposted() {
    let (mut c, mut s) = server();
    let null = crate::requester::CallArgs::new(PROG, 1, 0, &[], 0);
    c.submit(&null, 1).expect("submit");
    answer_with_full_receive_queue(&mut s, 1);
    let st = s.snapshot();
    assert_eq!(
        (st.post_refused, st.conn_lost),
        (1, 1),
        "the repost refused"
    );
    // The spare receive covers the repost: the reply had already left.
    assert_eq!(results_after_loss(&mut c, 1), [true]);
}

#[test]
fn receives_beyond_the_spare_ones_go_back_before_the_replies() {
    let (mut c, mut s) = server();
    let null = crate::requester::CallArgs::new(PROG, 1, 0, &[], 0);
    let n = SPARE_RECVS as usize + 1;
    // A first round trip raises the grant above one.
    assert!(drive_call(&mut c, &mut s, &null, |_| true));
    for tag in 0..n {
        c.submit(&null, tag as u64).expect("submit");
    }
    answer_with_full_receive_queue(&mut s, n);
    let st = s.snapshot();
    assert_eq!(
        (st.post_refused, st.conn_lost),
        (1, 1),
        "the reposts refused"
    );
    // More reposts than spare receives: they went first, so no reply left.
    assert_eq!(results_after_loss(&mut c, n), vec![false; n]);
}

/// An accept's confirmation wait ends its log line when measured, and adds nothing when not
/// (soft): the guest's scripts read the figure back from that text.
#[test]
fn the_confirm_note_names_the_wait_or_nothing() {
    use crate::responder::ConfirmNote;
    let w = std::time::Duration::from_micros(1_550);
    assert_eq!(
        ConfirmNote(Some(w)).to_string(),
        "; 1.6 ms of the accept waited for the client to confirm"
    );
    assert_eq!(ConfirmNote(None).to_string(), "");
    let (c, s) = crate::loopback::soft_pair(
        crate::program::dispatch(),
        ConnConfig::default(),
        ConnConfig::default(),
    )
    .expect("pair");
    assert_eq!(s.confirm_note().to_string(), "", "soft does not measure it");
    drop(c);
}
