//! A server of the built-in program started in this process, its workers pinned, with
//! clients connected to it: what `bench rpc` and `sweep` measure against when they are not
//! given a server elsewhere.

use std::thread;

use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::program;
use rpcrdma_engine::requester::Client;
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::worker::{WorkerConfig, Workers};

/// A server in this process and its clients.
pub struct Local<P: Provider>
where
    ServerConn<P>: Send,
{
    /// The workers driving the server's connections.
    pub workers: Workers<ServerConn<P>>,
    /// One client per connection.
    pub clients: Vec<Client<P>>,
    /// Bytes one server connection registered.
    pub server_memory: u64,
}

/// Listens on `addr` with the built-in program, starts `workers`, and connects `conns`
/// clients (each accepted and handed to the least loaded worker).
pub fn start<P: Provider>(
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    addr: &P::Addr,
    cfg: ConnConfig,
    workers: &[WorkerConfig],
    conns: usize,
) -> Result<Local<P>, String>
where
    P::Addr: core::fmt::Display,
    ServerConn<P>: Send,
{
    let device = open()?;
    let mut server = Server::<P>::listen(device, addr, program::dispatch(), cfg)
        .map_err(|e| format!("listen on {addr}: {e}"))?;
    let mut w = Workers::<ServerConn<P>>::start(workers).map_err(|e| e.to_string())?;
    let mut clients = Vec::with_capacity(conns);
    let mut server_memory = 0;
    for _ in 0..conns {
        let (client, conn) = thread::scope(|s| {
            let t = s.spawn(|| {
                let device = open()?;
                Client::<P>::connect(&device, addr, cfg).map_err(|e| e.to_string())
            });
            let conn = server
                .accept(cfg.connect_timeout)
                .map_err(|e| e.to_string());
            let client = t
                .join()
                .unwrap_or_else(|_| Err("connect thread panicked".into()));
            (client, conn)
        });
        let (client, conn) = (client?, conn?);
        server_memory = conn.registered_bytes();
        w.assign(conn).map_err(|e| e.to_string())?;
        clients.push(client);
    }
    Ok(Local {
        workers: w,
        clients,
        server_memory,
    })
}
