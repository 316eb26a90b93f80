//! A storage-style backend on rpcrdma: a block store whose READ and WRITE move their data
//! with RDMA (a Write chunk for READ's block, a Read chunk for WRITE's), served by a pinned
//! worker and called by a client, both in this process on the soft fabric.
//!
//! Run with `cargo run --release -p rpcrdma-engine --example blockstore`.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::dispatch::{Dispatch, Outcome, ProcSpec};
use rpcrdma_engine::loopback::{connect_to, soft_server};
use rpcrdma_engine::requester::CallArgs;
use rpcrdma_engine::worker::{WorkerConfig, Workers};

const PROG: u32 = 0x2000_b10c;
const VERS: u32 = 1;
/// args: u32 block; results: u32 status, then the block (DDP-eligible).
const READ: u32 = 1;
/// args: u32 block, then the block (DDP-eligible); results: u32 status.
const WRITE: u32 = 2;
const BLOCK: usize = 4096;
const BLOCKS: usize = 1024;
const OK: u32 = 0;
const NO_SUCH_BLOCK: u32 = 1;

fn word(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The server side: the store and its two procedures.
fn dispatch(store: Arc<RwLock<Vec<u8>>>) -> Dispatch {
    let mut d = Dispatch::new();
    let s = Arc::clone(&store);
    let read = ProcSpec {
        max_results: 4,
        ddp_arg: false,
        ddp_results: 1,
    };
    d.register(PROG, VERS, READ, read, move |req, resp| {
        let Some(b) = word(req.args, 0) else {
            return Outcome::GarbageArgs;
        };
        let Ok(store) = s.read() else {
            return Outcome::SystemErr;
        };
        let Some(block) = store.get(b as usize * BLOCK..(b as usize + 1) * BLOCK) else {
            resp.write_results(&NO_SUCH_BLOCK.to_be_bytes());
            return Outcome::Success;
        };
        resp.write_results(&OK.to_be_bytes());
        // Straight into the registered buffer the responder RDMA-Writes to the client.
        match resp.push_bulk(BLOCK) {
            Some(out) => out.copy_from_slice(block),
            None => return Outcome::SystemErr,
        }
        Outcome::Success
    });
    let write = ProcSpec {
        max_results: 4,
        ddp_arg: true,
        ddp_results: 0,
    };
    d.register(PROG, VERS, WRITE, write, move |req, resp| {
        // The block arrives pulled by RDMA Read, right after the block number and length.
        let (Some(b), Some(len)) = (word(req.args, 0), word(req.args, 4)) else {
            return Outcome::GarbageArgs;
        };
        let Some(data) = req
            .args
            .get(8..8 + len as usize)
            .filter(|d| d.len() == BLOCK)
        else {
            return Outcome::GarbageArgs;
        };
        let Ok(mut store) = store.write() else {
            return Outcome::SystemErr;
        };
        let status = match store.get_mut(b as usize * BLOCK..(b as usize + 1) * BLOCK) {
            Some(dst) => {
                dst.copy_from_slice(data);
                OK
            }
            None => NO_SUCH_BLOCK,
        };
        resp.write_results(&status.to_be_bytes());
        Outcome::Success
    });
    d
}

/// Writes block `b`'s contents into `out`.
fn fill_block(b: u32, out: &mut [u8]) {
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = (i as u32 ^ b.wrapping_mul(31)) as u8;
    }
}

fn block_data(b: u32) -> Vec<u8> {
    let mut v = vec![0; BLOCK];
    fill_block(b, &mut v);
    v
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(RwLock::new(vec![0u8; BLOCK * BLOCKS]));
    let config = ConnConfig::default();
    let (mut server, addr) = soft_server(Arc::new(dispatch(store)), config)?;
    let (mut client, conn) = connect_to(&mut server, &addr, config)?;
    println!("connected: {:?}", client.negotiation());
    // The server connection goes to a worker pinned to the last core, and this thread (the
    // client, busy-polling too) to the first one when there is another: two spinning threads
    // on one core would take turns by the scheduler's time slice.
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let last = cores.len().saturating_sub(1);
    let mut workers = Workers::start(&[WorkerConfig::pinned(last)])?;
    workers.assign(conn)?;
    if cores.len() > 1 {
        core_affinity::set_for_current(cores[0]);
    }

    // The blocks' contents, made before the clock starts, to check what READ returns.
    let blocks: Vec<Vec<u8>> = (0..BLOCKS as u32).map(block_data).collect();
    // Each WRITE's block is made where it is sent from: the registered buffer the server's
    // RDMA Read pulls it out of (zero copy; `call.bulk_arg = Some(&data)` would copy a block
    // that already exists into it).
    let write_all = |client: &mut rpcrdma_engine::requester::Client<_>| {
        for b in 0..BLOCKS as u32 {
            let arg = b.to_be_bytes();
            let call = CallArgs::new(PROG, VERS, WRITE, &arg, 4);
            let status = client.call_in_place(
                &call,
                BLOCK,
                |buf| fill_block(b, buf),
                |r| r.map(|r| word(r.results, 0)),
            )??;
            assert_eq!(status, Some(OK), "write block {b}");
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    // A first pass, not timed, brings the store's and the buffers' pages in.
    write_all(&mut client)?;
    let t = Instant::now();
    write_all(&mut client)?;
    let wrote = t.elapsed();
    let t = Instant::now();
    for (b, data) in blocks.iter().enumerate() {
        let arg = (b as u32).to_be_bytes();
        let mut call = CallArgs::new(PROG, VERS, READ, &arg, 4);
        call.bulk_results = &[BLOCK as u32]; // one Write chunk for the block
        let good = client.call(&call, |r| {
            r.map(|r| word(r.results, 0) == Some(OK) && r.bulk()[0] == data.as_slice())
        })??;
        assert!(good, "read block {b}");
    }
    let read = t.elapsed();
    let per = |d: Duration| d.as_nanos() as f64 / BLOCKS as f64 / 1000.0;
    println!(
        "{BLOCKS} blocks of {BLOCK} B: write {:.1} us/block, read {:.1} us/block, all verified",
        per(wrote),
        per(read)
    );
    println!("client counters: {:?}", client.snapshot());
    println!("server counters: {:?}", workers.stats()[0].rpc);
    client.disconnect();
    workers.shutdown(Duration::from_secs(1))?;
    Ok(())
}
