//! A server of the built-in program started in this process, its workers pinned, with
//! clients connected to it: what `bench rpc` and `sweep` measure against when they are not
//! given a server elsewhere.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rpcrdma_engine::conn::ConnConfig;
use rpcrdma_engine::dispatch::Dispatch;
use rpcrdma_engine::fabric::Provider;
use rpcrdma_engine::requester::Client;
use rpcrdma_engine::responder::{Server, ServerConn};
use rpcrdma_engine::worker::{WorkerConfig, WorkerStats, Workers};

/// A server in this process and its clients.
pub struct Local<P: Provider>
where
    ServerConn<P>: Send,
{
    /// The workers driving the server's connections.
    pub workers: Workers<ServerConn<P>>,
    /// One client per connection.
    pub clients: Vec<Client<P>>,
    /// Bytes each server connection registered for itself (its receives; none with a shared
    /// receive queue); what they take of the server's share comes on top
    /// ([`Server::share_stats`]).
    pub server_memory: u64,
    /// The listener, for connections still to come (a client's reconnections:
    /// [`Accepting`]).
    pub server: Server<P>,
}

/// Listens on `addr` with `dispatch` (the built-in program's: [`program::dispatch`], or
/// [`program::register_counted`]'s), starts `workers`, and connects `conns` clients (each
/// accepted and handed to the least loaded worker).
///
/// [`program::dispatch`]: rpcrdma_engine::program::dispatch
/// [`program::register_counted`]: rpcrdma_engine::program::register_counted
pub fn start<P: Provider>(
    open: &(dyn Fn() -> Result<P::Device, String> + Sync),
    addr: &P::Addr,
    dispatch: Arc<Dispatch>,
    cfg: ConnConfig,
    workers: &[WorkerConfig],
    conns: usize,
) -> Result<Local<P>, String>
where
    P::Addr: core::fmt::Display,
    ServerConn<P>: Send,
{
    let device = open()?;
    let mut server = Server::<P>::listen(device, addr, dispatch, cfg)
        .map_err(|e| format!("listen on {addr}: {e}"))?;
    let mut w = Workers::<ServerConn<P>>::start(workers).map_err(|e| e.to_string())?;
    let mut clients = Vec::with_capacity(conns);
    for _ in 0..conns {
        let (client, assigned) = thread::scope(|s| {
            let t = s.spawn(|| {
                let device = open()?;
                Client::<P>::connect(&device, addr, cfg).map_err(|e| e.to_string())
            });
            // Handed to the workers before the client is waited for: a version 2 client's
            // connect waits for the answer to its RDMA2_CONNPROP.
            let assigned = server
                .accept(cfg.connect_timeout)
                .map_err(|e| e.to_string())
                .and_then(|conn| w.assign(conn).map_err(|e| e.to_string()));
            let client = t
                .join()
                .unwrap_or_else(|_| Err("connect thread panicked".into()));
            (client, assigned)
        });
        assigned?;
        clients.push(client?);
    }
    // What each connection registered for itself (its receives; none with a shared receive
    // queue, whose placeholders are the share's).
    let st = server.share_stats();
    let server_memory = st.conn_bytes / u64::from(st.conns.max(1));
    Ok(Local {
        workers: w,
        clients,
        server_memory,
        server,
    })
}

/// Workers behind an acceptor thread that hands each new connection to them: what a run
/// whose clients reconnect (a fault run) needs of an in-process server.
pub struct Accepting<P: Provider>
where
    ServerConn<P>: Send,
{
    workers: Arc<Mutex<Workers<ServerConn<P>>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl<P: Provider> Accepting<P>
where
    ServerConn<P>: Send,
    Server<P>: Send + 'static,
{
    /// Starts accepting on `server` for `workers` (every 50 ms the thread looks whether it
    /// must stop).
    pub fn start(mut server: Server<P>, workers: Workers<ServerConn<P>>) -> Accepting<P> {
        let workers = Arc::new(Mutex::new(workers));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, st) = (Arc::clone(&workers), Arc::clone(&stop));
        let thread = thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if let Ok(conn) = server.accept(Duration::from_millis(50)) {
                    let mut w = w.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Err(e) = w.assign(conn) {
                        eprintln!("in-process server: connection refused: {e}");
                    }
                }
            }
        });
        Accepting {
            workers,
            stop,
            thread,
        }
    }

    /// The workers' counters.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats()
    }

    /// Stops accepting and gives the workers back.
    pub fn stop(self) -> Result<Workers<ServerConn<P>>, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the acceptor thread panicked".to_string())?;
        Arc::try_unwrap(self.workers)
            .map_err(|_| "the workers are still shared".to_string())
            .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
    }
}
