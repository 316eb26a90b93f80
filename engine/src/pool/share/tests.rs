use super::*;
use crate::fabric::soft::Soft;
use crate::fabric::Device;

/// Sizes small enough for tests: 1 KiB reply entries, 8 KiB and 64 KiB bulk buffers;
/// three large buffers (`MIN`, each with its cache line of padding) at the least.
const MIN: u64 = 3 * ((64 << 10) + 64);

fn share(bulk_limit: u64) -> Arc<Share<Soft>> {
    let pd = Soft::open_device(None).unwrap().alloc_pd().unwrap();
    let config = ShareConfig {
        reply_size: 1024,
        small_size: 8192,
        large_size: 64 << 10,
        bulk_limit,
        srq: None,
    };
    Share::new(pd, config).unwrap()
}

/// Takes `n` large buffers from `s`, one reservation each.
fn take_large(s: &Share<Soft>, n: usize) -> Vec<Buf<Soft>> {
    let mut turn = Turn::default();
    (0..n)
        .map(|_| {
            s.reserve([0, 0, 64 << 10], &mut turn).unwrap()[2]
                .take()
                .unwrap()
        })
        .collect()
}

#[test]
fn nothing_is_registered_until_taken() {
    let s = share(4 << 20);
    assert_eq!(s.stats().registered_bytes, 0);
    let b = s.take(Class::Reply).unwrap();
    assert!(b.size() >= 1024);
    let st = s.stats();
    assert!(st.reply_bytes > 0 && st.bulk_bytes == 0);
    assert_eq!(st.reply_out, 1);
    drop(b);
    assert_eq!(s.stats().reply_out, 0);
}

#[test]
fn classes_are_chosen_by_size_and_too_large_is_refused() {
    let s = share(4 << 20);
    let mut turn = Turn::default();
    let [a, b, c] = s.reserve([100, 9000, 0], &mut turn).unwrap();
    assert_eq!(a.unwrap().size(), 8192);
    assert_eq!(b.unwrap().size(), 64 << 10);
    assert!(c.is_none());
    assert_eq!(
        s.reserve([0, (64 << 10) + 1, 0], &mut turn).err(),
        Some(Wait::TooLarge)
    );
}

#[test]
fn the_bound_holds_and_a_refused_reservation_takes_nothing() {
    let s = share(MIN);
    let mut held = Vec::new();
    let mut turn = Turn::default();
    while let Ok([_, _, Some(b)]) = s.reserve([0, 0, 64 << 10], &mut turn) {
        held.push(b);
    }
    assert!(turn.is_waiting());
    assert!(s.stats().bulk_bytes <= MIN);
    assert_eq!(held.len(), 3);
    // Two large buffers cannot be had while one is free: neither is taken.
    held.pop();
    let out = s.stats().bulk_out;
    assert_eq!(
        s.reserve([0, 64 << 10, 64 << 10], &mut turn).err(),
        Some(Wait::Later)
    );
    assert_eq!(s.stats().bulk_out, out);
    // One can, and it is served first in line.
    assert!(s.reserve([0, 0, 64 << 10], &mut turn).is_ok());
    assert!(!turn.is_waiting());
}

#[test]
fn a_small_need_takes_a_large_buffer_when_no_small_one_can_be_registered() {
    // The bound leaves no room for small chunks.
    let s = share(MIN);
    let mut turn = Turn::default();
    let [_, pull, _] = s.reserve([0, 100, 0], &mut turn).unwrap();
    assert_eq!(pull.unwrap().size(), 64 << 10);
}

#[test]
fn waiting_calls_are_served_in_order() {
    let s = share(MIN);
    let held = take_large(&s, 3);
    let (mut first, mut second) = (Turn::default(), Turn::default());
    assert!(s.reserve([0, 0, 64 << 10], &mut first).is_err());
    assert!(s.reserve([0, 0, 64 << 10], &mut second).is_err());
    // A newcomer may not jump the line either.
    let mut newcomer = Turn::default();
    drop(held);
    assert!(s.reserve([0, 0, 64 << 10], &mut second).is_err());
    assert!(s.reserve([0, 0, 64 << 10], &mut newcomer).is_err());
    let a = s.reserve([0, 0, 64 << 10], &mut first).unwrap();
    let b = s.reserve([0, 0, 64 << 10], &mut second).unwrap();
    // Two of three taken; the newcomer is served next.
    assert!(s.reserve([0, 0, 64 << 10], &mut newcomer).is_ok());
    drop((a, b));
}

#[test]
fn a_quiet_first_in_line_is_passed_over() {
    let s = share(MIN);
    let held = take_large(&s, 3);
    let (mut gone, mut next) = (Turn::default(), Turn::default());
    assert!(s.reserve([0, 0, 64 << 10], &mut gone).is_err());
    assert!(s.reserve([0, 0, 64 << 10], &mut next).is_err());
    drop(held);
    // `gone` never asks again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if s.reserve([0, 0, 64 << 10], &mut next).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the line never moved");
        std::thread::sleep(Duration::from_millis(2));
    }
    // And one that leaves lets the next go at once.
    let held = take_large(&s, 3);
    let (mut leaving, mut after) = (Turn::default(), Turn::default());
    assert!(s.reserve([0, 0, 64 << 10], &mut leaving).is_err());
    assert!(s.reserve([0, 0, 64 << 10], &mut after).is_err());
    s.leave(&mut leaving);
    drop(held);
    assert!(s.reserve([0, 0, 64 << 10], &mut after).is_ok());
}

#[test]
fn threads_share_without_losing_a_buffer() {
    let s = share(MIN + (1 << 20));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut turn = Turn::default();
                for i in 0..5000u64 {
                    if let Ok(bufs) = s.reserve([0, 1 + i % 9000, 1 + i % 60000], &mut turn) {
                        drop(bufs);
                    }
                }
                s.leave(&mut turn);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = s.stats();
    assert_eq!(st.bulk_out, 0);
    assert!(st.bulk_bytes <= MIN + (1 << 20));
}

/// Takers of an unbounded class never go without while it can grow, even when another
/// taker empties the chunk they waited for (two workers each dressing connections at
/// once: a lost race here ended a connection).
#[test]
fn racing_takers_of_a_growing_class_all_get_theirs() {
    for _ in 0..20 {
        let s = share(MIN);
        let gate = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (s, gate) = (Arc::clone(&s), Arc::clone(&gate));
                std::thread::spawn(move || {
                    gate.wait();
                    // Three chunks' worth each (1 KiB entries, a MiB a chunk), held.
                    let held: Vec<_> = (0..3 * 1024).map(|_| s.take(Class::Reply)).collect();
                    held.iter().filter(|b| b.is_none()).count()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 0, "a taker went without");
        }
    }
}
