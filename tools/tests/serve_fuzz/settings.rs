//! Settings: the server configurations the campaign runs against, the environment's
//! overrides, derived seeds.

use rpcrdma_proto::header::HeaderView;

/// A server configuration the campaign runs against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cfg {
    pub(crate) name: &'static str,
    /// `--inline`: the server's Send and Receive sizes.
    pub(crate) inline: u32,
    /// `--bulk-size`: its pull and bulk buffers.
    pub(crate) bulk: u32,
    /// `--credits`: its receives and grant.
    pub(crate) credits: u32,
    persistent: bool,
    /// `--workers`.
    workers: u32,
}

pub(crate) const CONFIGS: [Cfg; 5] = [
    Cfg {
        name: "default",
        inline: 4096,
        bulk: 1 << 20,
        credits: 32,
        persistent: false,
        workers: 1,
    },
    Cfg {
        name: "small",
        inline: 1024,
        bulk: 65536,
        credits: 8,
        persistent: false,
        workers: 1,
    },
    Cfg {
        name: "large-inline-persistent",
        inline: 8192,
        bulk: 262_144,
        credits: 64,
        persistent: true,
        workers: 1,
    },
    Cfg {
        name: "two-credits",
        inline: 4096,
        bulk: 131_072,
        credits: 2,
        persistent: false,
        workers: 1,
    },
    Cfg {
        name: "two-workers",
        inline: 4096,
        bulk: 1 << 20,
        credits: 16,
        persistent: false,
        workers: 2,
    },
];

impl Cfg {
    pub(crate) fn args(&self) -> Vec<String> {
        let mut v = vec![
            "--inline".to_string(),
            self.inline.to_string(),
            "--bulk-size".to_string(),
            self.bulk.to_string(),
            "--credits".to_string(),
            self.credits.to_string(),
            "--workers".to_string(),
            self.workers.to_string(),
            // The model's credits are each connection's own receives and a fixed grant
            // (the shared receive queue's grants grow, and it ends a connection past its
            // grant: engine/tests/rpc_srq.rs).
            "--no-srq".to_string(),
        ];
        if self.persistent {
            v.push("--persistent".to_string());
        }
        v
    }

    /// The largest reply the server may Send to a peer that can receive `peer_recv` bytes
    /// (RFC 8797 §4.2).
    pub(crate) fn reply_threshold(&self, peer_recv: u32) -> u32 {
        self.inline.min(peer_recv)
    }

    /// Bytes of a connection's own buffers (reply ring entries, and the pull and bulk
    /// buffers of each receive): the server share's reply class, an inline reply and 1 KiB
    /// of headers (`ConnConfig::share_config`).
    fn own(&self) -> usize {
        self.inline as usize + 1024
    }

    /// Bytes of the shared buffer that stands in for a need of `bytes`: the share's small
    /// class (`--slot-bulk-size`'s default) or its large one (`--bulk-size`).
    fn class(&self, bytes: u64) -> usize {
        let large = (self.bulk as usize).max(4096);
        let small = (rpcrdma_engine::conn::DEFAULT_SLOT_BULK_SIZE as usize)
            .clamp(4096, large)
            .min(large);
        if bytes <= small as u64 {
            small
        } else {
            large
        }
    }

    /// Bytes of the reply buffer the Call `h` is answered in: a ring entry, or a shared
    /// buffer for a Reply chunk larger than one (`responder/large.rs`).
    pub(crate) fn ring_len(&self, h: &HeaderView<'_>) -> usize {
        let entry = self.own();
        match h.reply_chunk() {
            Some(rc) if rc.total_len() + 1024 > entry as u64 => {
                self.class((rc.total_len() + 1024).min(self.bulk as u64))
            }
            _ => entry,
        }
    }

    /// Bytes of the bulk buffer the Call `h`'s DDP-eligible results go to: the
    /// connection's own, or a shared one when its Write chunks (64 bytes of alignment each)
    /// — or, without Write chunks, its Reply chunk — are larger.
    pub(crate) fn bulk_cap(&self, h: &HeaderView<'_>) -> usize {
        let mut need: u64 = h.write_list().iter().map(|c| c.total_len() + 64).sum();
        if need == 0 {
            // Every procedure the fuzzer calls may have DDP-eligible results but NULL,
            // ECHO and WRITE; READ and MULTI have them.
            need = h.reply_chunk().map_or(0, |c| c.total_len()) + 64;
        }
        if need > self.own() as u64 {
            self.class(need.min(self.bulk as u64))
        } else {
            self.own()
        }
    }
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// A nonzero seed derived from `base` and `salt` (splitmix64).
pub(crate) fn derive(base: u64, salt: u64) -> u64 {
    let mut z = base ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z | 1
}
