//! CPU time of threads and of the process, read from `/proc` (Linux; no system call wrapper
//! and no `unsafe` needed): a sweep point reports the CPU its client and server threads
//! spent per RPC. The kernel counts in clock ticks (`sysconf(_SC_CLK_TCK)`, 100 per second on
//! Linux), so a point needs a second or so of run time for a 1% reading.

use std::time::Duration;

/// Clock ticks per second of `/proc`'s CPU times (`USER_HZ`, fixed at 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// The user plus system CPU time in a `/proc/.../stat` line (fields 14 and 15), or `None`
/// when it does not parse.
fn parse_stat(stat: &str) -> Option<Duration> {
    // The command name (field 2) is in parentheses and may hold spaces: start after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // `rest` starts at field 3 (state): utime is field 14, the 12th from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// CPU time the calling thread has used, `None` where `/proc` does not say.
pub fn thread_cpu() -> Option<Duration> {
    parse_stat(&std::fs::read_to_string("/proc/thread-self/stat").ok()?)
}

/// CPU time the whole process has used (every thread, live or ended).
pub fn process_cpu() -> Option<Duration> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_with_odd_names() {
        let line = "4242 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 0";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(3000)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) R 1"), None);
    }

    #[test]
    fn spinning_shows_up_in_the_thread_and_the_process() {
        let (Some(t0), Some(p0)) = (thread_cpu(), process_cpu()) else {
            return; // not Linux
        };
        // Spin until this thread has been charged 100 ms of CPU (on a loaded machine that
        // takes longer than 100 ms of wall time), for at most 20 s.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while thread_cpu().unwrap() - t0 < Duration::from_millis(100)
            && start.elapsed() < Duration::from_secs(20)
        {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        let t = thread_cpu().unwrap() - t0;
        let p = process_cpu().unwrap() - p0;
        assert!(t >= Duration::from_millis(100), "thread {t:?}");
        assert!(p >= t, "process {p:?} < thread {t:?}");
    }
}
