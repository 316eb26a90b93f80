//! Exactly-once checks of a fault run: the client's own account (every RPC submitted
//! completed once: [`Faults`]) beside the server's (`EXECUTIONS` of the built-in program,
//! served by `rpcrdma serve --count-executions`: how many times the run's Calls ran in all,
//! and, while its table has room, how many distinct XIDs ran and how many more than once).
//!
//! A retransmitted Call may legitimately run twice at a server without a duplicate request
//! cache (the built-in program has none): such repeats are reported, and must not exceed
//! the requester's retransmissions. A lost RPC, a second completion, fewer executions than
//! RPCs completed, or (when XIDs are unique in the run) an XID count that differs from the
//! RPCs completed is a failure.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::program::{self, Counts};
use rpcrdma_engine::requester::{CallArgs, Client};

use crate::rpc::Faults;

/// A stamp for this run's AUTH_SYS credentials: the clock's low bits and the process id,
/// so that runs against one long-lived server count apart.
pub fn fresh_stamp() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ d.as_secs() as u32);
    nanos.rotate_left(7) ^ std::process::id().wrapping_mul(0x9e37_79b9) | 1
}

/// Asks the server for the executions of `stamp`'s Calls; an error when it does not count
/// them (PROC_UNAVAIL: not started with `--count-executions`) or does not answer.
pub fn executions<P: Provider>(
    client: &mut Client<P>,
    stamp: u32,
    timeout: Duration,
) -> Result<Counts, String> {
    let args = stamp.to_be_bytes();
    let mut call = CallArgs::new(program::PROG, program::VERS, program::EXECUTIONS, &args, 16);
    call.timeout = timeout;
    client
        .call(&call, |r| {
            let r = r.map_err(|e| format!("EXECUTIONS failed: {e}"))?;
            if !r.is_success() {
                return Err(
                    "the server does not count executions (serve --count-executions)".into(),
                );
            }
            let w = |k: usize| program::word(r.results, 4 * k).ok_or("EXECUTIONS: short reply");
            Ok(Counts {
                xids: w(0)?,
                executions: w(1)?,
                repeated: w(2)?,
                lost_track: w(3)?,
            })
        })
        .map_err(|e| format!("EXECUTIONS: {e}"))?
}

/// The verdict on a fault run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The client's account.
    pub client: Faults,
    /// The server's, when it counts executions.
    pub server: Option<Counts>,
    /// Reconnections the requesters made during the run.
    pub reconnects: u64,
    /// Retransmissions the requesters made during the run.
    pub retransmits: u64,
    /// Whether the run's XIDs were all distinct (one connection, fewer RPCs than [`XID_WRAP`]),
    /// so that the server's distinct-XID count must equal the RPCs completed.
    pub unique_xids: bool,
}

/// RPCs of one connection under which its XIDs are all distinct: a slot's generation has
/// at least 20 bits (4096 credits take 12 for the slot).
pub const XID_WRAP: u64 = 1 << 20;

impl Verdict {
    /// Executions beyond the RPCs completed, when the server counts them: retransmitted
    /// Calls it ran again (legitimate without a duplicate request cache, up to the
    /// retransmissions).
    pub fn repeated_runs(&self) -> Option<u64> {
        self.server
            .map(|s| u64::from(s.executions).saturating_sub(self.client.completed))
    }

    /// What is wrong with the run, if anything: an RPC lost or completed twice, an XID
    /// count that is not the number of RPCs completed, more repeated executions than
    /// retransmissions, or a server table that lost track.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let c = &self.client;
        if c.lost > 0 {
            out.push(format!("{} RPC(s) never completed", c.lost));
        }
        if c.failed > 0 {
            out.push(format!(
                "{} RPC(s) completed with an error (a timeout or an unrecovered loss)",
                c.failed
            ));
        }
        if c.completed_twice > 0 {
            out.push(format!(
                "{} completion(s) of an RPC already complete",
                c.completed_twice
            ));
        }
        if c.submitted != c.completed + c.lost {
            out.push(format!(
                "{} RPCs submitted but {} completed",
                c.submitted, c.completed
            ));
        }
        if let Some(s) = self.server {
            let runs = u64::from(s.executions);
            if runs < c.completed {
                out.push(format!(
                    "the server ran {runs} Calls for {} RPCs completed",
                    c.completed
                ));
            }
            let extra = self.repeated_runs().unwrap_or(0);
            if extra > self.retransmits {
                out.push(format!(
                    "{extra} repeated execution(s) but only {} retransmission(s)",
                    self.retransmits
                ));
            }
            if self.unique_xids && s.lost_track == 0 && u64::from(s.xids) != c.completed {
                out.push(format!(
                    "the server ran {} distinct XIDs for {} RPCs completed",
                    s.xids, c.completed
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(n: u64) -> Faults {
        Faults {
            severed: 3,
            submitted: n,
            completed: n,
            completed_twice: 0,
            lost: 0,
            failed: 0,
        }
    }

    #[test]
    fn an_exact_run_passes_and_each_fault_is_named() {
        let ok = Verdict {
            client: clean(100),
            server: Some(Counts {
                xids: 100,
                executions: 102,
                repeated: 2,
                lost_track: 0,
            }),
            reconnects: 3,
            retransmits: 5,
            unique_xids: true,
        };
        assert!(ok.problems().is_empty(), "{:?}", ok.problems());
        assert_eq!(ok.repeated_runs(), Some(2));
        assert_eq!(Verdict { server: None, ..ok }.repeated_runs(), None);

        let lost = Verdict {
            client: Faults {
                lost: 1,
                completed: 99,
                ..clean(100)
            },
            ..ok
        };
        assert!(lost.problems()[0].contains("never completed"));

        let twice = Verdict {
            client: Faults {
                completed_twice: 1,
                ..clean(100)
            },
            ..ok
        };
        assert!(twice.problems()[0].contains("already complete"));

        let failed = Verdict {
            client: Faults {
                failed: 2,
                ..clean(100)
            },
            ..ok
        };
        assert!(failed.problems()[0].contains("2 RPC(s) completed with an error"));
        assert!(!failed.client.exact());

        let unrun = Verdict {
            server: Some(Counts {
                xids: 99,
                executions: 99,
                repeated: 0,
                lost_track: 0,
            }),
            ..ok
        };
        assert!(unrun.problems()[0].contains("ran 99 Calls"));

        let missing = Verdict {
            server: Some(Counts {
                xids: 99,
                executions: 101,
                repeated: 1,
                lost_track: 0,
            }),
            ..ok
        };
        assert!(missing.problems()[0].contains("99 distinct XIDs"));
        // XIDs that repeat (several connections, or wrapped): the distinct count is not
        // checked, the exact total still is.
        let shared = Verdict {
            unique_xids: false,
            ..missing
        };
        assert!(shared.problems().is_empty(), "{:?}", shared.problems());

        let repeats = Verdict {
            retransmits: 1,
            ..ok
        };
        assert!(repeats.problems()[0].contains("repeated"));
    }

    #[test]
    fn stamps_differ_between_calls() {
        let a = fresh_stamp();
        std::thread::sleep(Duration::from_millis(2));
        assert_ne!(a, fresh_stamp());
    }
}
