//! The load generator's workloads: what each RPC of a run does (the built-in program's
//! procedures, or any program's), the arguments built once ([`Prepared`]), the DDP-eligible
//! data written in place, and the check of every reply ([`ReplyError`]).

use std::time::Duration;

use rpcrdma_engine::conn::Negotiation;
use rpcrdma_engine::program::{self, encode_opaque, encode_words, fill_pattern, word};
use rpcrdma_engine::proto::header::MIN_HEADER_LEN;
use rpcrdma_engine::proto::plan::Forced;
use rpcrdma_engine::proto::rpc::{
    AcceptStat, AuthSys, Gids, OpaqueAuth, ReplyBody, AUTH_NONE_ACCEPTED_LEN, AUTH_SYS,
};
use rpcrdma_engine::proto::xdr::pad4;
use rpcrdma_engine::requester::{CallArgs, Reply, RpcError};

/// What each RPC of a run does (procedures of [`program`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// NULL: no arguments, no results.
    Null,
    /// ECHO of `n` bytes: inline both ways (or Long Call and Reply when large).
    Echo(u32),
    /// READ of `n` bytes: the result comes back through a Write chunk.
    Read(u32),
    /// WRITE of `n` bytes: the argument goes out through a Read chunk (or inline when
    /// small).
    Write(u32),
    /// Another program's procedure without arguments (a NULL, say: the Linux kernel's
    /// nfsd's, `bench rpc --prog 100003 --vers 3 --proc 0`); a reply is right when it is
    /// accepted SUCCESS.
    Proc {
        /// Program number.
        prog: u32,
        /// Its version.
        vers: u32,
        /// The procedure.
        proc_num: u32,
    },
}

impl Workload {
    /// The procedure's name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Null => "null",
            Workload::Echo(_) => "echo",
            Workload::Read(_) => "read",
            Workload::Write(_) => "write",
            Workload::Proc { .. } => "proc",
        }
    }

    /// Bytes of payload each Call carries.
    pub fn arg_size(self) -> u32 {
        match self {
            Workload::Echo(n) | Workload::Write(n) => n,
            _ => 0,
        }
    }

    /// Bytes of payload each Reply carries.
    pub fn res_size(self) -> u32 {
        match self {
            Workload::Echo(n) | Workload::Read(n) => n,
            _ => 0,
        }
    }
}

/// Bytes of RPC and transport headers a chunked RPC's bulk buffer holds beside the payload
/// (a Long Call's Position-Zero chunk carries the Call's headers too).
pub const BULK_SLACK: u32 = 4096;

impl Workload {
    /// The bulk buffer size the workload needs: its payload and [`BULK_SLACK`] (0 without a
    /// payload).
    pub fn bulk_needed(self) -> u32 {
        match self.arg_size().max(self.res_size()) {
            0 => 0,
            n => n.saturating_add(BULK_SLACK),
        }
    }

    /// Refuses, before anything runs, a workload whose payload cannot fit buffers of
    /// `bulk_size` bytes, with the option and a value that works.
    pub fn fits(self, bulk_size: u32) -> Result<(), String> {
        let need = self.bulk_needed();
        if need > bulk_size {
            return Err(format!(
                "{}:{} needs --bulk-size of at least {need} (the payload plus {BULK_SLACK} bytes of headers)",
                self.name(),
                self.arg_size().max(self.res_size())
            ));
        }
        Ok(())
    }
}

/// The arguments of one workload, built once.
#[derive(Debug)]
pub struct Prepared {
    workload: Workload,
    args: Vec<u8>,
    bulk: Vec<u8>,
    bulk_results: [u32; 1],
    forced: Forced,
    /// An AUTH_SYS credential's body, when the Calls carry one ([`Prepared::stamped`]).
    cred: Option<Vec<u8>>,
}

/// The seed of the bulk data the load generator sends and asks for.
const SEED: u32 = 0x5eed;

impl Prepared {
    /// Builds the arguments of `w`.
    pub fn new(w: Workload) -> Prepared {
        let mut p = Prepared {
            workload: w,
            args: Vec::new(),
            bulk: Vec::new(),
            bulk_results: [0],
            forced: Forced::default(),
            cred: None,
        };
        match w {
            Workload::Null | Workload::Proc { .. } => {}
            Workload::Echo(n) => {
                p.args = vec![0; program::opaque_len(n as usize)];
                let _ = encode_opaque(&mut p.args, n as usize, |d| fill_pattern(SEED, d));
            }
            Workload::Read(n) => {
                p.args = encode_words(n, SEED).to_vec();
                p.bulk_results = [n];
            }
            Workload::Write(n) => {
                p.args = SEED.to_be_bytes().to_vec();
                p.bulk = vec![0; n as usize];
                fill_pattern(SEED, &mut p.bulk);
            }
        }
        p
    }

    /// The same workload sent in the forms `forced` asks for (`CallArgs::forced`); with
    /// `inline_result`, a READ asks for its result inline (a Call without a Write list,
    /// RFC 8166 §4.3.2) instead of through a Write chunk.
    pub fn forced(mut self, forced: Forced, inline_result: bool) -> Prepared {
        self.forced = forced;
        if inline_result {
            self.bulk_results = [0];
        }
        self
    }

    /// The same workload with an AUTH_SYS credential stamped `stamp` (RFC 5531 Appendix A),
    /// so that a server counting executions (`rpcrdma serve --count-executions`,
    /// [`program::register_counted`]) tells this run's Calls apart from any other's.
    pub fn stamped(mut self, stamp: u32) -> Prepared {
        let mut body = [0u8; 64];
        let sys = AuthSys {
            stamp,
            machinename: b"rpcrdma-bench",
            uid: 0,
            gid: 0,
            gids: Gids::default(),
        };
        // 13 bytes of name and no groups fit 64 bytes: the encoding cannot fail.
        let n = sys.encode(&mut body).unwrap_or(0);
        self.cred = Some(body[..n].to_vec());
        self
    }

    /// The Call to submit.
    pub fn call(&self, timeout: Duration) -> CallArgs<'_> {
        let (prog, vers) = match self.workload {
            Workload::Proc { prog, vers, .. } => (prog, vers),
            // The server answers how long it spent on the data, which the round trip then
            // leaves out (`verify`).
            Workload::Read(_) | Workload::Write(_) => (program::PROG, program::VERS_TIMED),
            _ => (program::PROG, program::VERS),
        };
        let (proc_num, max_results) = match self.workload {
            Workload::Null => (program::NULL, 0),
            Workload::Echo(n) => (program::ECHO, program::opaque_len(n as usize) as u32),
            Workload::Read(_) => (program::READ, 8),
            Workload::Write(_) => (program::WRITE, 12),
            // Room for whatever the procedure answers inline.
            Workload::Proc { proc_num, .. } => (proc_num, 1024),
        };
        let mut c = CallArgs::new(prog, vers, proc_num, &self.args, max_results);
        c.timeout = timeout;
        c.forced = self.forced;
        if let Some(body) = &self.cred {
            c.cred = OpaqueAuth {
                flavor: AUTH_SYS,
                body,
            };
        }
        if let Workload::Write(_) = self.workload {
            c.bulk_arg = Some(&self.bulk);
        }
        // A READ asked for inline provides no Write list at all: with one DDP-eligible
        // result and no chunk for it, the result comes inline (RFC 8166 §4.3.2), as the
        // Linux client asks when the reply fits inline; an empty Write chunk would say the
        // same (§4.3.2.3) at the cost of a list to encode, parse and echo.
        if let (Workload::Read(_), [r]) = (self.workload, self.bulk_results) {
            if r != 0 {
                c.bulk_results = &self.bulk_results;
            }
        }
        c
    }

    /// The Call to submit on a connection that negotiated `negotiation`: [`call`](Self::call)
    /// fitted to it ([`fit_to`](Self::fit_to)), without the WRITE data that each submission
    /// writes in place instead ([`in_place`](Self::in_place)).
    pub fn call_on(&self, timeout: Duration, negotiation: &Negotiation) -> CallArgs<'_> {
        let mut call = self.call(timeout);
        self.fit_to(
            &mut call,
            negotiation.reply_threshold(),
            negotiation.wire().extra(),
        );
        if self.in_place().is_some() {
            call.bulk_arg = None;
        }
        call
    }

    /// The workload these arguments are for.
    pub fn workload(&self) -> Workload {
        self.workload
    }

    /// The length of a DDP-eligible argument the load generator writes in place
    /// (`Client::submit_in_place`, [`Prepared::fill_bulk`]): a WRITE's data, made where the
    /// responder reads it from, as a storage client reading a file into registered memory
    /// makes it. `None` for workloads without one.
    pub fn in_place(&self) -> Option<usize> {
        match self.workload {
            Workload::Write(n) => Some(n as usize),
            _ => None,
        }
    }

    /// Writes the DDP-eligible argument [`Prepared::in_place`] announces into `dst`.
    pub fn fill_bulk(&self, dst: &mut [u8]) {
        fill_pattern(SEED, dst);
    }

    /// Fits `call` (made by [`Prepared::call`]) to a connection whose reply threshold is
    /// `reply_threshold` and whose transport header is `header_extra` bytes longer than
    /// version 1's: a READ in the automatic form asks for its result inline — no Write
    /// list — when the largest reply fits the threshold, as the Linux client does
    /// (`rpcrdma_results_inline`): a Write chunk would cost a window and an RDMA Write and
    /// save nothing. Forced forms keep what they ask for.
    pub fn fit_to(&self, call: &mut CallArgs<'_>, reply_threshold: u32, header_extra: usize) {
        let Workload::Read(n) = self.workload else {
            return;
        };
        if self.forced != Forced::default() || call.bulk_results.is_empty() {
            return;
        }
        // RDMA_MSG with three empty lists, the accepted RPC Reply header, the results and
        // the data's opaque.
        let largest = MIN_HEADER_LEN
            + header_extra
            + AUTH_NONE_ACCEPTED_LEN
            + call.max_results as usize
            + 4
            + pad4(n as usize);
        if largest <= reply_threshold as usize {
            call.bulk_results = &[];
        }
    }

    /// Checks a reply: success, and every byte of the results as the program defines them.
    /// Returns the nanoseconds the server says it spent on the data (its timed READ and
    /// WRITE, [`program::VERS_TIMED`]; 0 for the other workloads).
    pub fn verify(&self, result: &Result<Reply<'_>, RpcError>) -> Result<u32, ReplyError> {
        let need = self.workload.bulk_needed();
        let r = match result {
            Ok(r) => r,
            // A responder refuses a payload larger than its buffers with ERR_CHUNK (RFC
            // 8166 §8.1.4).
            Err(RpcError::ErrChunk) if need != 0 => {
                return Err(ReplyError::TooLarge {
                    answer: "ERR_CHUNK",
                    need,
                })
            }
            Err(e) => return Err(ReplyError::Rpc(*e)),
        };
        match r.rpc.body {
            ReplyBody::Accepted {
                stat: AcceptStat::Success,
                ..
            } => {}
            // The built-in program's READ answers SYSTEM_ERR when its result does not fit.
            ReplyBody::Accepted {
                stat: AcceptStat::SystemErr,
                ..
            } if need != 0 => {
                return Err(ReplyError::TooLarge {
                    answer: "SYSTEM_ERR",
                    need,
                })
            }
            ReplyBody::Accepted { stat, .. } => return Err(ReplyError::NotSuccess(stat.name())),
            ReplyBody::Denied(d) => return Err(ReplyError::NotSuccess(d.name())),
        }
        let ok = match self.workload {
            Workload::Null => r.results.is_empty(),
            Workload::Echo(_) => r.results == self.args.as_slice(),
            Workload::Read(n) => {
                // Through the Write chunk (`bulk`), or inline after the count and the time
                // when the Call asked for it so: the opaque's length word, then its bytes.
                let data = match r.bulk().first().filter(|b| !b.is_empty()) {
                    Some(b) => Some(*b),
                    None if word(r.results, 8) == Some(n) => r.results.get(12..12 + n as usize),
                    None => None,
                };
                word(r.results, 0) == Some(n)
                    && data.is_some_and(|b| program::is_pattern(SEED, b) && b.len() == n as usize)
            }
            Workload::Write(n) => {
                word(r.results, 0) == Some(1)
                    && word(r.results, 4) == Some(n)
                    && r.results.len() == 12
            }
            // Accepted SUCCESS, checked above: nothing is known of the results.
            Workload::Proc { .. } => true,
        };
        if !ok {
            return Err(ReplyError::WrongData);
        }
        Ok(match self.workload {
            Workload::Read(_) => word(r.results, 4).unwrap_or(0),
            Workload::Write(_) => word(r.results, 8).unwrap_or(0),
            _ => 0,
        })
    }
}

/// Why a reply did not pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// The RPC failed at the transport.
    Rpc(RpcError),
    /// The server answered this status (its RFC 5531 name) instead of SUCCESS.
    NotSuccess(&'static str),
    /// The server refused a payload with `answer` (ERR_CHUNK, or the built-in program's
    /// SYSTEM_ERR), as a server whose buffers are smaller than `need` bytes does.
    TooLarge {
        /// What the server answered.
        answer: &'static str,
        /// The bulk buffer size the payload needs ([`Workload::bulk_needed`]).
        need: u32,
    },
    /// The results are not what the program returns.
    WrongData,
}

impl core::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReplyError::Rpc(e) => write!(f, "RPC failed: {e}"),
            ReplyError::NotSuccess(status) => {
                write!(f, "the server answered {status}, not SUCCESS")
            }
            ReplyError::TooLarge { answer, need } => write!(
                f,
                "the server answered {answer}: a server's buffers must hold {need} bytes for this payload (`rpcrdma serve --bulk-size {need}`)"
            ),
            ReplyError::WrongData => f.write_str("the results are wrong"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_engine::proto::plan::CallForm;

    /// Whether `w`, fitted to a 4 KiB threshold with `extra` more header bytes, still asks
    /// for a Write chunk.
    fn chunked(p: &Prepared, extra: usize) -> bool {
        let mut call = p.call(Duration::from_secs(1));
        p.fit_to(&mut call, 4096, extra);
        !call.bulk_results.is_empty()
    }

    #[test]
    fn an_automatic_read_asks_inline_when_its_reply_fits() {
        // 28 + 24 + 8 bytes of results + 4 + the data: 4032 bytes of data make 4096.
        for (n, v1, v2) in [
            (8, false, false),
            (4032, false, true),
            (4033, true, true),
            (65536, true, true),
        ] {
            let p = Prepared::new(Workload::Read(n));
            assert_eq!(chunked(&p, 0), v1, "{n} B, version 1");
            assert_eq!(chunked(&p, 8), v2, "{n} B, version 2");
        }
        // A forced form keeps its Write chunk; asked inline, none; other workloads none.
        let forced = Forced {
            min_form: Some(CallForm::Chunked),
            reply_chunk: false,
        };
        assert!(chunked(
            &Prepared::new(Workload::Read(8)).forced(forced, false),
            0
        ));
        assert!(!chunked(
            &Prepared::new(Workload::Read(65536)).forced(forced, true),
            0
        ));
        assert!(!chunked(&Prepared::new(Workload::Write(8)), 0));
    }
}
