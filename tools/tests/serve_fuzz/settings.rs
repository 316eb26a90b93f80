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

    /// Bytes of the bulk buffers each credit owns (`ConnConfig::slot_bulk`, the default
    /// `--slot-bulk-size`).
    fn own(&self) -> usize {
        (rpcrdma_engine::conn::DEFAULT_SLOT_BULK_SIZE as usize).clamp(4096, self.bulk as usize)
    }

    /// Whether the connection shares large buffers of `bulk` bytes (`responder/large.rs`).
    fn shares(&self) -> bool {
        self.own() < self.bulk as usize
    }

    /// Bytes of the reply buffer the Call `h` is answered in (`ServerConn::accept`, and a
    /// large buffer for a Reply chunk larger than a ring entry).
    pub(crate) fn ring_len(&self, h: &HeaderView<'_>) -> usize {
        let entry = self.inline as usize + 1024;
        if !self.shares() {
            return self.inline.max(self.bulk) as usize + 1024;
        }
        match h.reply_chunk() {
            Some(rc) if rc.total_len() + 1024 > entry as u64 => self.bulk as usize,
            _ => entry,
        }
    }

    /// Bytes of the bulk buffer the Call `h`'s DDP-eligible results go to: the credit's
    /// own, or a large one when its Write chunks (64 bytes of alignment each) are larger.
    pub(crate) fn bulk_cap(&self, h: &HeaderView<'_>) -> usize {
        if !self.shares() {
            return self.bulk as usize;
        }
        let writes: u64 = h.write_list().iter().map(|c| c.total_len() + 64).sum();
        if writes > self.own() as u64 {
            self.bulk as usize
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
