//! The built-in program's timed version (`program::VERS_TIMED`): READ and WRITE answer as
//! in version 1 plus the nanoseconds the server spent on the data, which the load
//! generator leaves out of its round trips. Both versions are served side by side.

mod common;

use common::*;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::program::{encode_words, TIMED_MIN};
use rpcrdma_engine::requester::CallArgs;
use std::time::Duration;

/// The results words of a reply, and its DDP-eligible results' bytes.
type Answer = (Vec<u32>, Vec<Vec<u8>>);

fn answer(r: &rpcrdma_engine::requester::Reply<'_>) -> Answer {
    let words = (0..r.results.len() / 4)
        .map(|k| word(r.results, 4 * k).unwrap_or(u32::MAX))
        .collect();
    (words, r.bulk().iter().map(|b| b.to_vec()).collect())
}

#[test]
fn timed_reads_and_writes_report_their_data_work() {
    let cfg = rpcrdma_engine::conn::ConnConfig::default();
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    let seed = 0x5eed;
    for n in [8u32, TIMED_MIN - 1, TIMED_MIN, 64 << 10, 1 << 20] {
        let args = encode_words(n, seed);
        for vers in [VERS, VERS_TIMED] {
            let results = [n];
            let mut a = CallArgs::new(PROG, vers, READ, &args, 8);
            a.bulk_results = &results;
            a.timeout = Duration::from_secs(20);
            let (words, bulk) = call(&mut c, &mut s, &a, |comp| {
                answer(&comp.result.expect("READ answered"))
            });
            assert_eq!(
                bulk,
                vec![pattern(seed, n as usize)],
                "READ v{vers} {n} B data"
            );
            // The results keep the data's length word; its bytes went through the chunk.
            if vers == VERS {
                assert_eq!(words, vec![n, n], "READ v1 {n} B results");
                continue;
            }
            assert_eq!(words.len(), 3, "READ v2 {n} B results {words:?}");
            assert_eq!((words[0], words[2]), (n, n));
            if n < TIMED_MIN {
                assert_eq!(words[1], 0, "READ v2 {n} B: not timed");
            } else {
                assert!(words[1] > 0, "READ v2 {n} B: the fill was timed");
            }
        }
    }
    for n in [100usize, 64 << 10, 1 << 20] {
        for (data_seed, ok) in [(seed, 1), (seed + 1, 0)] {
            let seed_arg = seed.to_be_bytes();
            let data = pattern(data_seed, n);
            for vers in [VERS, VERS_TIMED] {
                let mut a = CallArgs::new(PROG, vers, WRITE, &seed_arg, 12);
                a.bulk_arg = Some(&data);
                a.timeout = Duration::from_secs(20);
                let (words, _) = call(&mut c, &mut s, &a, |comp| {
                    answer(&comp.result.expect("WRITE answered"))
                });
                assert_eq!(words[..2], [ok, n as u32], "WRITE v{vers} {n} B");
                if vers == VERS {
                    assert_eq!(words.len(), 2);
                } else if n < TIMED_MIN as usize {
                    assert_eq!(words[2..], [0], "WRITE v2 {n} B: not timed");
                } else {
                    assert_eq!(words.len(), 3);
                    assert!(words[2] > 0, "WRITE v2 {n} B: the check was timed");
                }
            }
        }
    }
}
