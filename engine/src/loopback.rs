//! A connected client and server on the soft fabric in one process, through a real
//! listener and the full RFC 8797 exchange: for tests, examples and the CLI.

#![deny(unsafe_code)]

use std::sync::Arc;

use crate::conn::{ConnConfig, ConnError};
use crate::dispatch::Dispatch;
use crate::fabric::soft::{Soft, SoftAddr, SoftDevice};
use crate::fabric::Provider;
use crate::requester::Client;
use crate::responder::{Server, ServerConn};

/// A listening soft server at a fresh abstract address, returned with the address.
pub fn soft_server(
    dispatch: Arc<Dispatch>,
    config: ConnConfig,
) -> Result<(Server<Soft>, SoftAddr), ConnError> {
    let addr = SoftAddr::unique("rpc");
    let device = Soft::open_device(None)?;
    Ok((Server::listen(device, &addr, dispatch, config)?, addr))
}

/// Connects a client (configured with `client`) to `server` at `addr`: the client connects
/// from a helper thread while this thread accepts.
pub fn connect_to(
    server: &mut Server<Soft>,
    addr: &SoftAddr,
    client: ConnConfig,
) -> Result<(Client<Soft>, ServerConn<Soft>), ConnError> {
    connect_on(Soft::open_device(None)?, server, addr, client)
}

/// [`connect_to`] with the client on `device` (sized as its [`SoftConfig`] says: many
/// clients in one process, each with its own protection domain, may want arenas smaller
/// than the default's 16 GiB of address space).
///
/// [`SoftConfig`]: crate::fabric::soft::SoftConfig
pub fn connect_on(
    device: SoftDevice,
    server: &mut Server<Soft>,
    addr: &SoftAddr,
    client: ConnConfig,
) -> Result<(Client<Soft>, ServerConn<Soft>), ConnError> {
    let addr = addr.clone();
    let timeout = client.connect_timeout;
    let t = std::thread::spawn(move || Client::<Soft>::connect(&device, &addr, client));
    let conn = server.accept(timeout);
    // A version 2 client's connect waits for the answer to its RDMA2_CONNPROP: poll the
    // accepted connection until the client is done (or its own timeout ends it).
    let mut conn = conn;
    while !t.is_finished() {
        match conn.as_mut() {
            Ok(c) => {
                c.poll();
            }
            Err(_) => std::thread::yield_now(),
        }
    }
    let client = t
        .join()
        .map_err(|_| ConnError::Config("connect thread panicked"))??;
    Ok((client, conn?))
}

/// A client and a server connection, connected over the soft fabric.
pub fn soft_pair(
    dispatch: Arc<Dispatch>,
    client: ConnConfig,
    server: ConnConfig,
) -> Result<(Client<Soft>, ServerConn<Soft>), ConnError> {
    let (mut srv, addr) = soft_server(dispatch, server)?;
    connect_to(&mut srv, &addr, client)
}
