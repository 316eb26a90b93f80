//! Bulk memory shared by a connection's RPCs (the client: `ConnConfig::slot_bulk_size`,
//! `large_bufs`) and by a server's connections (`ConnConfig::shared_bulk`): NFS-sized I/O (1 MiB READs and WRITEs, Long Calls and Long replies) with
//! 128 credits on the default configuration, on a fraction of the memory a fixed 1 MiB per
//! credit takes, every byte verified; RPCs beyond the shared buffers wait and complete.

mod common;

use common::*;
use rpcrdma_engine::conn::{ConnConfig, Registration};
use rpcrdma_engine::fabric::soft::Soft;
use rpcrdma_engine::loopback::soft_pair;
use rpcrdma_engine::requester::{CallArgs, Client, SubmitError};
use rpcrdma_engine::responder::ServerConn;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// The Calls of a mixed NFS-like load: READ and WRITE of 1 MiB, a Long ECHO (Long Call and
/// Long reply) of 200 KiB, and a READ of 8 KiB that the credit's own buffers hold.
struct Load {
    read_args: Vec<u8>,
    write_args: Vec<u8>,
    write_data: Vec<u8>,
    echo_args: Vec<u8>,
    small_args: Vec<u8>,
}

impl Load {
    fn new() -> Load {
        let words = |a: u32, b: u32| [a.to_be_bytes(), b.to_be_bytes()].concat();
        Load {
            read_args: words(MIB as u32, 11),
            write_args: 12u32.to_be_bytes().to_vec(),
            write_data: pattern(12, MIB),
            echo_args: opaque(&pattern(13, 200 * 1024)),
            small_args: words(8192, 14),
        }
    }

    fn call(&self, k: u64) -> CallArgs<'_> {
        let mut a = match k % 4 {
            0 => {
                let mut a = CallArgs::new(PROG, VERS, READ, &self.read_args, 4);
                a.bulk_results = &[MIB as u32];
                a
            }
            1 => {
                let mut a = CallArgs::new(PROG, VERS, WRITE, &self.write_args, 8);
                a.bulk_arg = Some(&self.write_data);
                a
            }
            2 => CallArgs::new(
                PROG,
                VERS,
                ECHO,
                &self.echo_args,
                self.echo_args.len() as u32,
            ),
            _ => {
                let mut a = CallArgs::new(PROG, VERS, READ, &self.small_args, 4);
                a.bulk_results = &[8192];
                a
            }
        };
        a.timeout = Duration::from_secs(20);
        a
    }

    /// Whether the reply to Call `k` is right, byte for byte.
    fn check(&self, k: u64, r: &rpcrdma_engine::requester::Reply<'_>) -> bool {
        r.is_success()
            && match k % 4 {
                0 => r.bulk()[0] == pattern(11, MIB).as_slice(),
                1 => r.results == [1u32.to_be_bytes(), (MIB as u32).to_be_bytes()].concat(),
                2 => r.results == self.echo_args.as_slice(),
                _ => r.bulk()[0] == pattern(14, 8192).as_slice(),
            }
    }
}

/// Runs `total` Calls of the load with up to `depth` in flight, both ends in this thread;
/// every reply checked.
fn run(c: &mut Client<Soft>, s: &mut ServerConn<Soft>, total: u64, depth: u64) {
    let load = Load::new();
    let calls: Vec<CallArgs<'_>> = (0..4).map(|k| load.call(k)).collect();
    let (mut next, mut done, mut bad) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    while done < total {
        assert!(Instant::now() < deadline, "{done} of {total} done");
        while next < total && next - done < depth {
            match c.submit(&calls[(next % 4) as usize], next) {
                Ok(_) => next += 1,
                Err(SubmitError::WouldBlock) => break,
                Err(e) => panic!("submit {next}: {e:?}"),
            }
        }
        s.poll();
        c.poll_completions(|comp| {
            done += 1;
            match comp.result {
                Ok(r) if load.check(comp.tag, &r) => {}
                other => {
                    bad += 1;
                    eprintln!("RPC {} failed: {other:?}", comp.tag);
                }
            }
        });
    }
    assert_eq!(bad, 0, "every reply right");
}

#[test]
fn nfs_sized_io_with_128_credits_on_the_defaults() {
    let cfg = ConnConfig {
        credits: 128,
        initial_grant: 128,
        ..ConnConfig::default()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    // Buffers of 1 MiB for each of 128 credits would be 256 MiB at the client and 512 MiB
    // at the server (pull, bulk and reply buffers); shared, far less.
    let (client_mem, server_mem) = (c.registered_bytes(), s.registered_bytes());
    // Each end registers its first large buffers only (2 at the client, 3 at the server):
    // about 20 MiB and 22 MiB here, where registering all 16 at once made the client's 37.
    assert!(
        client_mem < 24 * MIB as u64,
        "client registers {client_mem}"
    );
    assert!(
        server_mem < 48 * MIB as u64,
        "server registers {server_mem}"
    );
    run(&mut c, &mut s, 400, 128);
    let (cs, ss) = (c.snapshot(), s.snapshot());
    assert!(cs.large_bulk > 0 && ss.large_bulk > 0, "{cs:?} {ss:?}");
    assert!(
        cs.large_bulk_waits > 0,
        "128 Calls in flight outnumber the 16 large buffers: some waited"
    );
    assert!(ss.long_calls > 0 && ss.long_replies > 0 && ss.write_chunks > 0);
    assert_eq!(ss.err_chunk + ss.system_err + cs.err_chunk, 0);
}

#[test]
fn few_large_buffers_and_calls_that_need_several_never_deadlock() {
    // Three large buffers at each end: a Long ECHO needs two at the server (its pull and
    // its reply), a READ of 1 MiB one at each end; 32 of them in flight.
    let cfg = ConnConfig {
        credits: 32,
        initial_grant: 32,
        large_bufs: 3,
        ..ConnConfig::default()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    run(&mut c, &mut s, 200, 32);
    let ss = s.snapshot();
    assert!(ss.large_bulk_waits > 0 || c.snapshot().large_bulk_waits > 0);
}

#[test]
fn a_client_whose_credits_own_the_largest_buffers_shares_nothing() {
    // slot_bulk_size = bulk_size: every credit of the client has buffers of the largest
    // size (the layout before sharing), no large pool. (A server's connections own no bulk
    // buffers whatever the sizes: they take them from the server's share.)
    let cfg = ConnConfig {
        credits: 8,
        initial_grant: 8,
        bulk_size: 2 * MIB as u32,
        slot_bulk_size: 2 * MIB as u32,
        ..ConnConfig::default()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    run(&mut c, &mut s, 40, 8);
    assert_eq!(c.snapshot().large_bulk, 0);
}

#[test]
fn the_server_takes_shared_buffers_as_its_calls_need_them_within_the_bound() {
    let cfg = ConnConfig {
        credits: 32,
        initial_grant: 32,
        shared_bulk: 16 * MIB as u64,
        ..ConnConfig::default()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    let share = std::sync::Arc::clone(s.share());
    let at_accept = s.registered_bytes();
    // Calls that fit the connection's own buffers take no bulk buffer.
    let small = [2048u32.to_be_bytes(), 14u32.to_be_bytes()].concat();
    let mut a = CallArgs::new(PROG, VERS, READ, &small, 4);
    a.bulk_results = &[2048];
    for _ in 0..20 {
        let ok = call(&mut c, &mut s, &a, |r| {
            r.result
                .is_ok_and(|r| r.bulk()[0] == pattern(14, 2048).as_slice())
        });
        assert!(ok);
    }
    assert_eq!(
        s.registered_bytes(),
        at_accept,
        "a connection registers only at accept"
    );
    assert_eq!(share.stats().bulk_bytes, 0);
    assert_eq!(s.snapshot().large_bulk, 0);
    // 32 NFS-sized Calls in flight: the share registers bulk buffers, within its bound, and
    // Calls beyond it wait and complete (`run` checks every byte).
    run(&mut c, &mut s, 200, 32);
    let st = share.stats();
    assert!(
        st.bulk_bytes > 0 && st.bulk_bytes <= share.config().bulk_limit,
        "{st:?}"
    );
    assert!(s.snapshot().large_bulk > 0);
    // The same load again registers nothing more than the bound allows, and once the
    // replies are retired nothing is out.
    run(&mut c, &mut s, 200, 32);
    let again = share.stats();
    assert!(again.bulk_bytes <= share.config().bulk_limit, "{again:?}");
    assert_eq!(s.registered_bytes(), at_accept);
    let deadline = Instant::now() + Duration::from_secs(10);
    while share.stats().bulk_out != 0 {
        assert!(Instant::now() < deadline, "{:?}", share.stats());
        // A NULL's completion carries the retirement of the signaled replies before it.
        let null = CallArgs::new(PROG, VERS, NULL, &[], 0);
        assert!(call(&mut c, &mut s, &null, |r| r.result.is_ok()));
    }
    assert_eq!(s.snapshot().err_chunk + s.snapshot().system_err, 0);
}

#[test]
fn the_client_registers_large_buffers_as_its_calls_need_them() {
    let cfg = ConnConfig {
        credits: 32,
        initial_grant: 32,
        ..ConnConfig::default()
    };
    let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
    let at_connect = c.registered_bytes();
    let large = u64::from(cfg.bulk_size);
    // Calls that fit the credits' own buffers register nothing more.
    let small = [8192u32.to_be_bytes(), 14u32.to_be_bytes()].concat();
    let mut a = CallArgs::new(PROG, VERS, READ, &small, 4);
    a.bulk_results = &[8192];
    for _ in 0..20 {
        assert!(call(&mut c, &mut s, &a, |r| r.result.is_ok()));
    }
    assert_eq!(c.registered_bytes(), at_connect);
    assert_eq!(c.snapshot().large_registered, 0);
    // One NFS-sized RPC at a time needs only the two registered at connect.
    let big = [(MIB as u32).to_be_bytes(), 9u32.to_be_bytes()].concat();
    let mut b = CallArgs::new(PROG, VERS, READ, &big, 4);
    let lens = [MIB as u32];
    b.bulk_results = &lens;
    for _ in 0..5 {
        let ok = call(&mut c, &mut s, &b, |r| {
            r.result
                .is_ok_and(|r| r.bulk()[0] == pattern(9, MIB).as_slice())
        });
        assert!(ok);
    }
    assert_eq!(c.snapshot().large_registered, 0, "one RPC at a time");
    // 32 in flight: the client registers more, up to large_bufs in all, and waits beyond.
    run(&mut c, &mut s, 200, 32);
    let grown = c.snapshot().large_registered;
    assert!(
        // Two were registered at connect.
        grown > 0 && grown <= u64::from(cfg.large_bufs) - 2,
        "{grown} registered"
    );
    let now = c.registered_bytes();
    assert!(
        now >= at_connect + grown * large && now <= at_connect + grown * (large + 4096),
        "{at_connect} at connect, {now} now, {grown} buffers added"
    );
    run(&mut c, &mut s, 200, 32);
    assert!(c.snapshot().large_registered <= u64::from(cfg.large_bufs) - 2);
    assert_eq!(c.snapshot().err_chunk + s.snapshot().system_err, 0);
}

#[test]
fn eight_mib_reads_and_writes_travel_in_longer_segments() {
    // 8 MiB in segments of 64 KiB would be 128 in a Write chunk, twice what a list holds:
    // the requester lengthens the Call's segments instead (64 of 128 KiB).
    let len = 8 * MIB;
    let read_args = [(len as u32).to_be_bytes(), 21u32.to_be_bytes()].concat();
    let write_args = 22u32.to_be_bytes();
    let data = pattern(22, len);
    for registration in [Registration::Windows, Registration::Persistent] {
        let cfg = ConnConfig {
            credits: 4,
            initial_grant: 4,
            // The server pulls the whole Call, its header and the 8 MiB, into one buffer.
            bulk_size: len as u32 + 4096,
            registration,
            ..ConnConfig::default()
        };
        let (mut c, mut s) = soft_pair(dispatch(), cfg, cfg).expect("pair");
        let mut r = CallArgs::new(PROG, VERS, READ, &read_args, 4);
        let lens = [len as u32];
        r.bulk_results = &lens;
        r.timeout = Duration::from_secs(20);
        let mut w = CallArgs::new(PROG, VERS, WRITE, &write_args, 8);
        w.bulk_arg = Some(&data);
        w.timeout = Duration::from_secs(20);
        for _ in 0..2 {
            let read_ok = call(&mut c, &mut s, &r, |comp| {
                comp.result
                    .is_ok_and(|rep| rep.bulk()[0] == pattern(21, len).as_slice())
            });
            assert!(read_ok, "{registration:?}: READ of 8 MiB");
            let write_ok = call(&mut c, &mut s, &w, |comp| {
                comp.result.is_ok_and(|rep| {
                    rep.results == [1u32.to_be_bytes(), (len as u32).to_be_bytes()].concat()
                })
            });
            assert!(write_ok, "{registration:?}: WRITE of 8 MiB");
        }
        let ss = s.snapshot();
        assert_eq!(ss.write_chunks, 2, "{registration:?}: {ss:?}");
        assert_eq!(ss.err_chunk + ss.system_err, 0, "{registration:?}: {ss:?}");
    }
}
