//! The server process: `rpcrdma serve` of one configuration, warmed up, its baseline and
//! resident memory tracked.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use rpcrdma_engine::program::ECHO;
use rpcrdma_proto::header::Chunks;
use serde_json::Value;

use crate::serve_common::msg;
use crate::serve_common::ServerProc;

use crate::campaign::Held;
use crate::model::{model_answer, Want};
use crate::peer::{Peer, PeerOpts};
use crate::settings::Cfg;
use crate::{RSS_SLACK_KB, SERVER_SECONDS};

/// A running `rpcrdma serve` of one configuration (the shared [`ServerProc`] guard, which it
/// derefs to), warmed up, with its baseline and resident memory tracked.
pub(crate) struct Server {
    proc: ServerProc,
    pub(crate) cfg: Cfg,
    pub(crate) started: Instant,
    pub(crate) rss0: u64,
    pub(crate) rss_max: u64,
}

impl Deref for Server {
    type Target = ServerProc;
    fn deref(&self) -> &ServerProc {
        &self.proc
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut ServerProc {
        &mut self.proc
    }
}

impl Server {
    /// Starts `rpcrdma serve` with `cfg`; returns once a raw connection is served (within
    /// 20 s), `rpcrdma call` succeeds and a fresh connection gets NULL and ECHO answered
    /// exactly, with the baseline and the warmed-up resident memory taken.
    pub(crate) fn start(tag: &str, cfg: Cfg) -> Server {
        let name = format!("rpcrdma-serve-fuzz.{}.{tag}", std::process::id());
        let call_args = vec!["--inline".to_string(), cfg.inline.to_string()];
        let mut proc = ServerProc::spawn(&name, SERVER_SECONDS, cfg.args(), call_args);
        proc.wait_ready(Duration::from_secs(20), |addr| {
            Peer::try_connect(addr, PeerOpts::GOOD)?.null_ok(1, "ready");
            Ok(())
        });
        let mut s = Server {
            proc,
            cfg,
            started: Instant::now(),
            rss0: 0,
            rss_max: 0,
        };
        s.good_calls("warm-up");
        s.fresh_connection_serves("warm-up");
        s.baseline = s.steady();
        s.rss0 = s.rss_kb();
        s.rss_max = s.rss0;
        s
    }

    /// The server's resident memory, KiB.
    pub(crate) fn rss_kb(&self) -> u64 {
        self.status_field("VmRSS:")
    }

    /// Threads and descriptors back to the baseline (bounded wait), resident memory within
    /// its bound.
    pub(crate) fn assert_settled(&mut self, what: &str) {
        self.assert_back_to_baseline(what, Duration::from_secs(20));
        let rss = self.rss_kb();
        self.rss_max = self.rss_max.max(rss);
        assert!(
            rss <= self.rss0 + RSS_SLACK_KB,
            "{what}: server resident memory {rss} KiB, warmed up {} KiB: grows without bound?",
            self.rss0
        );
    }

    /// A fresh raw connection gets NULL and ECHO answered exactly.
    pub(crate) fn fresh_connection_serves(&mut self, what: &str) {
        self.assert_alive(what);
        let mut p = Peer::connect(&self.soft_addr(), PeerOpts::GOOD);
        p.null_ok(0x7000_0001, what);
        let mut data = vec![0u8; 300];
        for (i, b) in data.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5c;
        }
        let mut args = 300u32.to_be_bytes().to_vec();
        args.extend_from_slice(&data);
        let m = msg::msg_call(0x7000_0002, Chunks::NONE, ECHO, &args);
        let want = model_answer(&m, &p, &self.cfg);
        assert!(matches!(want, Want::Reply(_)), "{what}: the model's ECHO");
        p.exchange(&m, &want, &format!("{what}: fresh ECHO"));
        p.null_ok(0x7000_0003, what);
    }

    /// Alive and serving, settled; then SIGTERM stops it with exit status 0; its workers'
    /// final statistics.
    pub(crate) fn finish(self, what: &str) -> Value {
        self.finish_holding(what, |_| Vec::new())
    }

    /// As [`finish`](Self::finish), with the peers `hold` opens (while the server is
    /// settled) still connected when SIGTERM comes.
    pub(crate) fn finish_holding(
        mut self,
        what: &str,
        hold: impl FnOnce(&Server) -> Vec<Held>,
    ) -> Value {
        self.good_calls(what);
        self.assert_settled(what);
        let held = hold(&self);
        let v = self.terminate(what);
        drop(held);
        v["workers"].clone()
    }
}
