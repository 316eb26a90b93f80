use super::*;

/// Odd and even counts, unsorted input, one connection, none; the ratio and the
/// fairness threshold.
#[test]
fn connection_rates_give_min_median_max() {
    let r = ConnRates::of(&[300.0, 100.0, 200.0]).unwrap();
    assert_eq!((r.conns, r.min, r.median, r.max), (3, 100.0, 200.0, 300.0));
    assert_eq!(r.min_to_median(), 0.5);
    assert!(r.fair());
    // An even count: the mean of the middle two.
    let r = ConnRates::of(&[40.0, 10.0, 30.0, 100.0]).unwrap();
    assert_eq!((r.conns, r.min, r.median, r.max), (4, 10.0, 35.0, 100.0));
    assert!((r.min_to_median() - 10.0 / 35.0).abs() < 1e-12);
    assert!(!r.fair());
    // One connection: every figure its rate.
    let r = ConnRates::of(&[42.0]).unwrap();
    assert_eq!(
        (r.min, r.median, r.max, r.min_to_median()),
        (42.0, 42.0, 42.0, 1.0)
    );
    assert_eq!(ConnRates::of(&[]), None);
    // Half the connections starved: the median is 0, and so is the ratio.
    let r = ConnRates::of(&[0.0, 0.0, 0.0, 50.0]).unwrap();
    assert_eq!((r.median, r.min_to_median()), (0.0, 0.0));
    assert!(!r.fair());
    // From a report: RPCs over the measured phase, in the connections' order.
    let hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let report = LoadReport {
        rpcs: 1000,
        seconds: 0.5,
        rate_rps: 2000.0,
        lat_ns: Percentiles::default(),
        hist: hist.clone(),
        server_work: hist,
        allocs_per_rpc: None,
        client: Snapshot::default(),
        per_conn: vec![300, 200, 250, 250],
        faults: Faults::default(),
    };
    assert_eq!(report.per_conn_rps(), vec![600.0, 400.0, 500.0, 500.0]);
    let r = report.conn_rates().unwrap();
    assert_eq!((r.min, r.median, r.max), (400.0, 500.0, 600.0));
    assert_eq!(report.per_conn_rps().iter().sum::<f64>(), report.rate_rps);
}

/// Runs of equal stamps, interleaved ones and single ones: the histogram holds exactly
/// what recording each round trip on its own would.
#[test]
fn round_trips_recorded_in_runs_match_one_by_one() {
    // The monotonic clock's ticks are nanoseconds.
    let clock = Clock::monotonic();
    let at = |us: u64| Stamp::from_ticks(us * 1000);
    let now = at(1000);
    let stamps: Vec<Stamp> = [1, 1, 1, 5, 5, 1, 9, 9, 9, 9, 2, 700, 700]
        .iter()
        .map(|&us| at(us))
        .collect();
    let new = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    // The server's time on the data, left out of each round trip; equal stamps with
    // different times are not one run.
    let work: [u32; 13] = [0, 0, 0, 0, 0, 0, 100, 100, 300, 300, 0, 0, 0];
    let mut runs = new();
    record_round_trips(
        &mut runs,
        &clock,
        now,
        stamps.iter().copied().zip(work.iter().copied()),
    );
    let mut single = new();
    for (&s, &w) in stamps.iter().zip(work.iter()) {
        single.record(clock.nanos(s, now) - u64::from(w)).unwrap();
    }
    assert_eq!(runs.len(), stamps.len() as u64);
    assert_eq!(runs, single);
    let mut empty = new();
    record_round_trips(&mut empty, &clock, now, std::iter::empty());
    assert_eq!(empty.len(), 0);
}

/// Little's law: 1,000 round trips of 2 ms each over half a second kept 4 calls in flight;
/// the server's time on the data, left out of the round trips, counts too.
#[test]
fn the_mean_in_flight_is_the_round_trips_time_over_the_phase() {
    let new = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let mut hist = new();
    hist.record_n(2_000_000, 1000).unwrap();
    let mut report = LoadReport {
        rpcs: 1000,
        seconds: 0.5,
        rate_rps: 2000.0,
        lat_ns: Percentiles::of(&hist),
        hist,
        server_work: new(),
        allocs_per_rpc: None,
        client: Snapshot::default(),
        per_conn: vec![1000],
        faults: Faults::default(),
    };
    assert!(
        (report.mean_in_flight() - 4.0).abs() < 0.01,
        "{}",
        report.mean_in_flight()
    );
    report.server_work.record_n(500_000, 1000).unwrap();
    assert!(
        (report.mean_in_flight() - 5.0).abs() < 0.01,
        "{}",
        report.mean_in_flight()
    );
    // Nothing measured: none in flight, not a division by zero.
    report.hist = new();
    report.server_work = new();
    assert_eq!(report.mean_in_flight(), 0.0);
}
