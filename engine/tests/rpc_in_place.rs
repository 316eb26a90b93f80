//! Zero-copy DDP-eligible arguments (`Client::submit_in_place`): the caller writes the
//! argument where it is sent from — the send buffer of a Short Call, the registered memory
//! a Chunked or Long Call's Read chunk exposes, a shared large buffer for NFS-sized
//! writes — and the responder receives it byte for byte, on windows and on persistent
//! regions; the fill runs once, and never for a Call that is refused.

mod common;

use common::*;
use rpcrdma_engine::conn::{ConnConfig, Registration};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::proto::plan::{CallForm, Forced};
use rpcrdma_engine::requester::{CallArgs, Client, RpcError, SubmitError};
use rpcrdma_engine::responder::ServerConn;
use std::time::{Duration, Instant};

/// The built-in WRITE's answer for `n` bytes of its pattern: `ok` 1 and the length.
fn written(n: usize) -> Vec<u8> {
    [1u32.to_be_bytes(), (n as u32).to_be_bytes()].concat()
}

/// A connection of 2 credits whose requester has them both: one exchange brings the grant
/// (a requester starts from one credit).
fn granted_two() -> (Client<Soft>, ServerConn<Soft>) {
    let cfg = ConnConfig {
        credits: 2,
        initial_grant: 2,
        ..config()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
    assert!(call(&mut c, &mut s, &null, |comp| comp.result.is_ok()));
    (c, s)
}

/// Drives both ends until `n` Calls completed or 10 s passed: how many completed, and how
/// many of those with the built-in WRITE's answer for `len` bytes of its pattern.
fn answered(
    c: &mut Client<Soft>,
    s: &mut ServerConn<Soft>,
    n: usize,
    len: usize,
) -> (usize, usize) {
    let (mut done, mut right) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while done < n && Instant::now() < deadline {
        s.poll();
        c.poll_completions(|comp| {
            done += 1;
            right += usize::from(comp.result.is_ok_and(|r| r.results == written(len)));
        });
    }
    (done, right)
}

#[test]
fn arguments_written_in_place_arrive_in_every_form() {
    let seed = 31u32;
    let seed_arg = seed.to_be_bytes();
    for registration in [Registration::Windows, Registration::Persistent] {
        let cfg = ConnConfig {
            registration,
            ..ConnConfig::default()
        };
        let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
        // (length, forced form, the form the server must count)
        let cases = [
            (0, None, CallForm::Short),
            (100, None, CallForm::Short),
            (1000, Some(CallForm::Chunked), CallForm::Chunked),
            (64 << 10, None, CallForm::Chunked),
            (1 << 20, None, CallForm::Chunked),
            (5000, Some(CallForm::Long), CallForm::Long),
        ];
        for (n, force, form) in cases {
            let mut w = CallArgs::new(PROG, VERS, WRITE, &seed_arg, 8);
            w.timeout = Duration::from_secs(20);
            w.forced = Forced {
                min_form: force,
                reply_chunk: false,
            };
            let before = c.snapshot();
            let mut fills = 0;
            c.submit_in_place(&w, 1, n, |dst| {
                fills += 1;
                assert_eq!(dst.len(), n, "the fill gets exactly the argument's bytes");
                fill_pattern(seed, dst);
            })
            .expect("submit");
            assert_eq!(fills, 1, "{registration:?} {n} B: one fill");
            let ok = drive(&mut c, &mut s, |comp| {
                comp.result.is_ok_and(|r| r.results == written(n))
            });
            assert!(
                ok,
                "{registration:?} {n} B ({form:?}): WRITE saw its pattern"
            );
            let after = c.snapshot();
            let sent = |f: CallForm, s: &rpcrdma_engine::stats::Snapshot| match f {
                CallForm::Short => s.short_calls,
                CallForm::Chunked => s.chunked_calls,
                CallForm::Long => s.long_calls,
            };
            assert_eq!(
                sent(form, &after) - sent(form, &before),
                1,
                "{registration:?} {n} B went as a {form:?} Call"
            );
        }
        let ss = s.snapshot();
        assert_eq!(ss.err_chunk + ss.system_err, 0, "{registration:?}: {ss:?}");
    }
}

#[test]
fn a_refused_call_never_runs_its_fill() {
    let (mut c, mut s) = granted_two();
    let seed_arg = 5u32.to_be_bytes();
    let w = CallArgs::new(PROG, VERS, WRITE, &seed_arg, 8);
    // Both credits taken, the third Call must wait, and its data is not asked for.
    for tag in 0..2 {
        c.submit_in_place(&w, tag, 4096, |d| fill_pattern(5, d))
            .expect("submit within the credits");
    }
    let mut ran = false;
    assert_eq!(
        c.submit_in_place(&w, 2, 4096, |_| ran = true),
        Err(SubmitError::WouldBlock)
    );
    assert!(!ran, "a Call without a credit ran its fill");
    // Both arguments at once is a caller's mistake, said as such.
    let data = pattern(5, 16);
    let mut both = w;
    both.bulk_arg = Some(&data);
    assert!(matches!(
        c.submit_in_place(&both, 3, 16, |_| ran = true),
        Err(SubmitError::Invalid(_))
    ));
    assert!(!ran, "an invalid Call ran its fill");
    assert_eq!(
        answered(&mut c, &mut s, 2, 4096),
        (2, 2),
        "both Calls within the credits answered"
    );
}

#[test]
fn a_fill_that_panics_gives_its_credit_back() {
    let (mut c, mut s) = granted_two();
    let seed_arg = 6u32.to_be_bytes();
    let w = CallArgs::new(PROG, VERS, WRITE, &seed_arg, 8);
    // A panic while writing an inline argument and one while writing a Read chunk's.
    for n in [100, 64 << 10] {
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = c.submit_in_place(&w, 1, n, |_| panic!("the caller's data source failed"));
        }));
        assert!(unwound.is_err(), "{n} B: the panic reaches the caller");
        assert_eq!(c.in_flight(), 0, "{n} B: nothing was sent");
    }
    // Both credits are there: two Calls go out at once and are answered.
    for tag in 0..2 {
        c.submit_in_place(&w, tag, 64 << 10, |d| fill_pattern(6, d))
            .expect("submit within the credits");
    }
    assert_eq!(
        answered(&mut c, &mut s, 2, 64 << 10),
        (2, 2),
        "both Calls answered"
    );
}

#[test]
fn blocking_calls_write_their_arguments_in_place() {
    let cfg = ConnConfig::default();
    let (mut c, s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    let server = ServedThread::start(s);
    let seed_arg = 8u32.to_be_bytes();
    let w = CallArgs::new(PROG, VERS, WRITE, &seed_arg, 8);
    for n in [0, 100, 64 << 10, 1 << 20] {
        let mut fills = 0;
        let ok = c
            .call_in_place(
                &w,
                n,
                |d| {
                    fills += 1;
                    fill_pattern(8, d);
                },
                |r| r.is_ok_and(|r| r.results == written(n)),
            )
            .expect("answered");
        assert!(ok, "{n} B: WRITE saw its pattern");
        assert_eq!(fills, 1, "{n} B: one fill");
    }
    // A Call the blocking form cannot send says why, and sends nothing.
    let data = pattern(8, 16);
    let mut both = w;
    both.bulk_arg = Some(&data);
    let refused = c.call_in_place(&both, 16, |_| {}, |_| ());
    assert!(
        matches!(refused, Err(RpcError::NotSent(SubmitError::Invalid(_)))),
        "{refused:?}"
    );
    let st = server.stop();
    assert_eq!((st.rpcs, st.err_chunk + st.system_err), (4, 0), "{st:?}");
}
