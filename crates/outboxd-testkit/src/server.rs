//! The fake provider's listener: binding the loopback socket, and the accept loop that owns
//! every connection task (dropping the loop closes them all).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::connection::serve_connection;
use super::shared::Shared;

/// Listen backlog: generous, so benchmark bursts are not refused.
const BACKLOG: i32 = 1024;

/// Binds a listening socket on `127.0.0.1:port` (`SO_REUSEADDR`, so the port can be taken
/// again right after the provider stops refusing).
pub(crate) fn bind_listener(port: u16) -> std::io::Result<TcpListener> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}

/// Accepts connections until the task is aborted; aborting drops the listener (connects are
/// then refused) and the [`JoinSet`], which aborts every connection task.
pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve_connection(stream, Arc::clone(&shared)));
                }
                Err(err) => {
                    // Typically EMFILE: back off briefly instead of spinning.
                    tracing::debug!(error = %err, "fake provider accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
