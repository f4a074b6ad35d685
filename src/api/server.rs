//! Serving the admin router: bind (port 0 picks a free port), log the bound address,
//! serve on a task, and stop gracefully — in-flight requests finish, bounded by
//! [`STOP_TIMEOUT`].
//!
//! The daemon marks its [`ApiState`] as draining as soon as the shutdown signal arrives
//! ([`mark_draining_on`]) but keeps serving while the dispatcher finishes in-flight
//! attempts, so `/readyz` reports the drain; it stops the server afterwards.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::ApiState;

/// How long [`AdminServer::stop`] waits for open requests before dropping them.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A running admin server.
#[derive(Debug)]
pub struct AdminServer {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

impl AdminServer {
    /// Binds `addr` and serves `app` on a new task. Logs `admin server listening` with the
    /// bound address (the real port when `addr` asks for port 0).
    pub async fn bind(addr: SocketAddr, app: Router) -> io::Result<AdminServer> {
        Self::bind_as("admin server", addr, app).await
    }

    /// As [`AdminServer::bind`], logging `<name> listening` (e.g. `metrics server`).
    pub async fn bind_as(name: &str, addr: SocketAddr, app: Router) -> io::Result<AdminServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        tracing::info!(addr = %addr, "{name} listening");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
        });
        Ok(AdminServer { addr, stop, task })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets open requests finish (at most [`STOP_TIMEOUT`]), and returns.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(STOP_TIMEOUT, &mut task).await {
            Ok(Ok(Ok(()))) => tracing::info!("admin server stopped"),
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "admin server failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "admin server task failed"),
            Err(_) => {
                task.abort();
                tracing::warn!(timeout = ?STOP_TIMEOUT, "admin server requests still open at shutdown; dropped");
            }
        }
    }
}

/// Marks `state` as draining once `shutdown` turns true (on a task of its own).
pub fn mark_draining_on(state: &ApiState, mut shutdown: watch::Receiver<bool>) {
    let state = state.clone();
    tokio::spawn(async move {
        if shutdown.wait_for(|stop| *stop).await.is_ok() {
            state.set_draining();
            tracing::info!("draining: /readyz now answers 503");
        }
    });
}
