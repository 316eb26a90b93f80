//! `prefault::prefault_mappings` in a process of its own (this test binary holds one test):
//! it maps every page mapped into the process, which in a binary whose other tests map
//! fabric memory would make all of that resident.

use rpcrdma_engine::prefault::{prefault_mappings, PrefaultError, MAX_MAPPED};

/// The kB of `field` ("Size", "Rss") in /proc/self/smaps for this program's code.
fn code_kb(field: &str) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut in_code = false;
    let mut total = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, permissions, offset, device, inode, path.
            let perms = words.next().unwrap_or("");
            in_code = perms == "r-xp" && line.ends_with(exe);
        } else if in_code && first == format!("{field}:") {
            total += words.next().unwrap().parse::<u64>().unwrap();
        }
    }
    total
}

/// The kB of `field` ("VmLck") in /proc/self/status.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| {
            v.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .unwrap()
}

#[test]
fn a_start_is_mapped_and_nothing_left_locked_and_a_late_call_refused() {
    match prefault_mappings() {
        Ok(()) => {
            // Every page of the code is mapped now.
            let size = code_kb("Size");
            assert!(size > 0, "no code mapping found");
            assert_eq!(code_kb("Rss"), size, "code pages left unmapped");
        }
        // Without the rights (an unprivileged run with a small RLIMIT_MEMLOCK), the refusal
        // is the typed error and the process goes on.
        Err(PrefaultError::Lock(_)) => {}
        Err(e) => panic!("{e}"),
    }
    assert_eq!(status_kb("VmLck"), 0, "pages left locked");
    // Past a start: 2 GiB reserved (never touched) is refused, nothing made resident.
    let reserved: Vec<u8> = Vec::with_capacity(2 * MAX_MAPPED as usize);
    let rss = status_kb("VmRSS");
    match prefault_mappings() {
        Err(PrefaultError::TooLate { mapped }) => assert!(mapped > MAX_MAPPED),
        other => panic!("a process with 2 GiB mapped: {other:?}"),
    }
    assert!(
        status_kb("VmRSS") < rss + (64 << 10),
        "the reservation was made resident"
    );
    drop(reserved);
}
