//! nfs3d's command line (clap): the options, what they make (the export's [`Policy`], the
//! procedures' [`Config`], the workers' room for connections), and whether the export is
//! on a memory file system (`--memory-export auto`).

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use rpcrdma_engine::conn::Version;

use crate::ops::Config;
use crate::policy::{self, Cidr, Policy};

/// The fabric to serve on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Which {
    /// RDMA over shared memory (`@name` addresses), for tests without a NIC.
    Soft,
    /// libibverbs and librdmacm: a NIC or soft-RoCE (`IP:PORT` addresses).
    Verbs,
}

/// Whether the export is a memory file system, whose operations never wait for a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum MemoryExport {
    /// Yes when the export is on tmpfs or ramfs (statfs).
    Auto,
    /// Yes (a file system known never to wait for a device, e.g. on persistent memory).
    Yes,
    /// No: every procedure that touches the file system goes to the I/O threads.
    No,
}

/// tmpfs's and ramfs's `f_type` (linux/magic.h).
pub(crate) const TMPFS_MAGIC: u64 = 0x0102_1994;
pub(crate) const RAMFS_MAGIC: u64 = 0x8584_58f6;

/// Whether `dir` is on a memory file system (tmpfs, ramfs).
pub(crate) fn on_memory_fs(dir: &std::path::Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|st| {
        let t = st.f_type as u64;
        t == TMPFS_MAGIC || t == RAMFS_MAGIC
    })
}

/// nfs3d: an NFS version 3 server over RPC-over-RDMA (RFC 1813, RFC 8166, RFC 8267), on
/// the rpcrdma engine, with MOUNT v3 over TCP and rpcbind registration beside it. Runs as
/// root: every Call runs as its caller.
#[derive(Parser, Debug)]
// `--version` is the RPC-over-RDMA version served: clap's own version flag, which would
// take the same name (a duplicate its debug builds refuse at start), is off. The help's
// introduction is the doc comment above (a bare `about` would take the engine crate's
// description from Cargo.toml).
#[command(name = "nfs3d", version, long_about = None, disable_version_flag = true)]
pub(crate) struct Cli {
    /// The directory to export.
    #[arg(long)]
    pub(crate) export: PathBuf,
    /// Let root on a client act as root on the export (exports(5) `no_root_squash`); by
    /// default uid 0 and gid 0 are mapped to --anonuid and --anongid.
    #[arg(long)]
    pub(crate) no_root_squash: bool,
    /// Map every user and group to --anonuid and --anongid (`all_squash`).
    #[arg(long)]
    pub(crate) all_squash: bool,
    /// The anonymous user: squashed callers and AUTH_NONE Calls run as it.
    #[arg(long, default_value_t = policy::ANON_ID)]
    pub(crate) anonuid: u32,
    /// The anonymous group.
    #[arg(long, default_value_t = policy::ANON_ID)]
    pub(crate) anongid: u32,
    /// Export read-only: every change is refused with NFS3ERR_ROFS.
    #[arg(long)]
    pub(crate) ro: bool,
    /// Allow only clients in this block of addresses (`IP/BITS` or an IP; repeatable): any
    /// other is refused at MOUNT (MNT3ERR_ACCES) and at the RDMA connection. Default: all.
    #[arg(long, value_name = "CIDR")]
    pub(crate) allow: Vec<Cidr>,
    /// Where to listen: `IP:PORT` (verbs; 20049 is NFS/RDMA's port) or `@name` (soft).
    #[arg(long)]
    pub(crate) listen: String,
    /// The TCP port of the MOUNT v3 service (on the listen IP, or 0.0.0.0); 0: any.
    #[arg(long)]
    pub(crate) mountd_port: u16,
    /// The fabric.
    #[arg(long, value_enum, default_value_t = Which::Verbs)]
    pub(crate) provider: Which,
    /// The RDMA device (verbs; default: the one the listen address routes to).
    #[arg(long)]
    pub(crate) device: Option<String>,
    /// Polling worker threads.
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
    /// Refuse an RDMA connection, at the connection manager (a reject), while this many
    /// are live (accepted and not yet dropped as dead); each refusal is logged and counted
    /// (`refused_max_conns`). Default: what the workers can hold, 64 per worker (more are
    /// made room for when this asks for more).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_conns: Option<u32>,
    /// I/O threads that run the file system operations.
    #[arg(long, default_value_t = 4)]
    pub(crate) io_threads: usize,
    /// Send GETATTR, ACCESS and LOOKUP to the I/O threads too, instead of answering them
    /// on the worker when the kernel's caches hold what they need.
    #[arg(long)]
    pub(crate) no_on_worker: bool,
    /// A memory export: every procedure but READ, WRITE, READDIR and READDIRPLUS runs on
    /// the polling worker instead of an I/O thread (a hand-off costs more than a memory
    /// file system's operation). auto: when the export is on tmpfs or ramfs.
    #[arg(long, value_enum, default_value_t = MemoryExport::Auto)]
    pub(crate) memory_export: MemoryExport,
    /// Microseconds an idle I/O thread keeps looking for the next job (yielding its core)
    /// before it sleeps; 0: it sleeps at once.
    #[arg(long, default_value_t = 0)]
    pub(crate) io_spin_us: u64,
    /// Where nfs3d keeps its state (the file handle key); default: `$TMPDIR/nfs3d-state`.
    #[arg(long)]
    pub(crate) state_dir: Option<PathBuf>,
    /// Credits: receives posted per connection, the most Calls a client has in process.
    #[arg(long, default_value_t = 64)]
    pub(crate) credits: u32,
    /// MiB of bulk buffers (for READ and WRITE data, and long replies) the connections of
    /// each worker share, registered as their Calls need them (at least three of --max-io).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub(crate) bulk_pool: u64,
    /// Bytes of the smaller shared bulk buffers: READs and WRITEs whose data fits (with
    /// their headers) take one, larger ones a buffer of --max-io.
    #[arg(long, default_value_t = rpcrdma_engine::conn::DEFAULT_SLOT_BULK_SIZE)]
    pub(crate) slot_bulk_size: u32,
    /// Take every connection's receives from one shared receive queue (each connection
    /// reserves its grant there, 8 to start, raised as its Calls fill it). Default: where
    /// the device has shared receive queues.
    #[arg(long, conflicts_with = "no_srq")]
    pub(crate) srq: bool,
    /// A receive queue of its own for each connection (--credits receives each).
    #[arg(long)]
    pub(crate) no_srq: bool,
    /// Largest READ or WRITE (rtmax/wtmax in FSINFO), in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub(crate) max_io: u32,
    /// Largest READDIR/READDIRPLUS reply, in bytes (default: --max-io).
    #[arg(long)]
    pub(crate) max_dir: Option<u32>,
    /// RFC 8797 Send and Receive Size offered, at least 4096 (the Linux client's inline).
    #[arg(long, default_value_t = 4096)]
    pub(crate) inline: u32,
    /// Refuse Send With Invalidate (RFC 8797 R bit clear).
    #[arg(long)]
    pub(crate) no_remote_invalidation: bool,
    /// Stop after this many seconds (0: until SIGINT or SIGTERM).
    #[arg(long, default_value_t = 0)]
    pub(crate) seconds: u64,
    /// Print the counters on stderr every this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub(crate) stats_every: u64,
    /// An idle worker naps this many microseconds between polls once it has been idle for
    /// --nap-after-us (leaves the core to the I/O threads); 0: spin.
    #[arg(long, default_value_t = 50)]
    pub(crate) nap_us: u64,
    /// Microseconds of idleness after which a worker starts napping.
    #[arg(long, default_value_t = 2000)]
    pub(crate) nap_after_us: u64,
    /// Microseconds of idleness after which a worker waits for its connections' next event
    /// (a message, an I/O thread's answer) instead of polling or napping, and leaves its core
    /// to others until then; 0: never wait. A server that spins while idle takes a core
    /// from everything else on its machine: in the soft-RoCE guest, spinning (and napping)
    /// made the kernel client's mount 2.7 (1.9) times as long as on the kernel's nfsd,
    /// waiting 1.7 times.
    #[arg(long, default_value_t = 2000)]
    pub(crate) wait_after_us: u64,
    /// Do not register with rpcbind.
    #[arg(long)]
    pub(crate) no_rpcbind: bool,
    /// RPC-over-RDMA versions served: 1, 2 or auto (each connection in its client's
    /// version: the Linux client speaks 1).
    #[arg(long, default_value = "auto")]
    pub(crate) version: Version,
}

impl Cli {
    pub(crate) fn config(&self) -> Config {
        Config {
            max_io: self.max_io,
            max_dir: self.max_dir.unwrap_or(self.max_io).min(self.max_io),
            read_only: self.ro,
        }
    }

    /// Room for connections in each of `workers` workers: 64, or enough for `--max-conns`
    /// between them.
    pub(crate) fn conns_per_worker(&self, workers: usize) -> usize {
        let wanted = self.max_conns.map_or(0, |n| n as usize);
        CONNS_PER_WORKER.max(wanted.div_ceil(workers.max(1)))
    }

    /// The export's options.
    pub(crate) fn policy(&self) -> Policy {
        Policy {
            root_squash: !self.no_root_squash,
            all_squash: self.all_squash,
            anon_uid: self.anonuid,
            anon_gid: self.anongid,
            read_only: self.ro,
            allow: self.allow.clone(),
        }
    }
}

/// Connections each worker has room for unless `--max-conns` asks for more.
pub(crate) const CONNS_PER_WORKER: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    /// The options every test line starts with.
    const BASE: [&str; 7] = [
        "nfs3d",
        "--export",
        "/srv",
        "--listen",
        "@x",
        "--mountd-port",
        "0",
    ];

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(BASE.iter().chain(args)).expect("parses")
    }

    #[test]
    fn max_conns_is_parsed_and_sizes_the_workers() {
        let none = cli(&[]);
        assert_eq!(none.max_conns, None);
        assert_eq!(none.conns_per_worker(2), CONNS_PER_WORKER);
        let few = cli(&["--max-conns", "3"]);
        assert_eq!(few.max_conns, Some(3));
        assert_eq!(few.conns_per_worker(1), CONNS_PER_WORKER);
        // More than the workers hold by default: room is made, shared between them.
        let many = cli(&["--max-conns", "1000", "--workers", "3"]);
        assert_eq!(many.conns_per_worker(3), 334);
        assert!(
            Cli::try_parse_from(BASE.iter().chain(&["--max-conns", "0"])).is_err(),
            "at least one connection"
        );
    }
}
