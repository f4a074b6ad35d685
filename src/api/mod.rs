//! The admin HTTP server (axum): health and readiness probes and Prometheus metrics,
//! served by `outboxd run` on `admin.listen`.
//!
//! * [`router`] builds the routes over an [`ApiState`]; more routers (the `/v1` admin API)
//!   are added with `router(state.clone()).merge(v1::router(state))`.
//! * [`health`] — `GET /healthz` (process alive, no database call) and `GET /readyz`
//!   (database reachable, schema at the expected version, not draining).
//! * [`scrape`] — `GET /metrics` in the OpenMetrics text format.
//! * [`server`] — binding, serving and graceful shutdown ([`AdminServer`]).
//! * [`request_id`] — `x-request-id` on every response, in error bodies and log lines.
//!
//! Authentication is not applied to these routes: probes and scrapers call them without
//! credentials, and none of them reveals an intent. With `[admin] metrics_listen` set,
//! `/metrics` is served there alone ([`metrics_router`]) and not on the admin listener
//! ([`health_router`]).

pub mod health;
pub mod request_id;
pub mod scrape;
pub mod server;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tokio::sync::Notify;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::{Database, ReadStore};

pub use server::AdminServer;

/// What every admin handler can reach. Cheap to clone (everything is shared).
///
/// Build it with [`ApiState::new`] and the `with_*` methods so that new fields (added with
/// a default in `new`) do not break existing callers.
#[derive(Clone)]
pub struct ApiState {
    /// The database (for readiness and backend-specific needs).
    pub db: Database,
    /// The outbox store over [`ApiState::db`].
    pub store: Arc<dyn ReadStore>,
    /// The process's metrics (shared with the dispatcher).
    pub metrics: Arc<Metrics>,
    /// Set once shutdown has begun; `/readyz` then answers 503.
    pub draining: Arc<AtomicBool>,
    /// The loaded configuration (admin tokens, actions, providers).
    pub config: Arc<Config>,
    /// Wakes this process's dispatcher after an intent is recorded or made due here.
    pub local_wakeup: Arc<Notify>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("backend", &self.db.backend_name())
            .field("draining", &self.is_draining())
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// State over `db` with the given configuration and metrics; not draining, with a
    /// wake-up signal of its own (replace it with [`ApiState::with_local_wakeup`]).
    pub fn new(db: Database, config: Arc<Config>, metrics: Arc<Metrics>) -> Self {
        Self {
            store: db.read_store(),
            db,
            metrics,
            draining: Arc::new(AtomicBool::new(false)),
            config,
            local_wakeup: Arc::new(Notify::new()),
        }
    }

    /// Uses `notify` (the dispatcher's in-process wake-up) for [`ApiState::local_wakeup`].
    pub fn with_local_wakeup(mut self, notify: Arc<Notify>) -> Self {
        self.local_wakeup = notify;
        self
    }

    /// Marks the process as draining: `/readyz` answers 503 from now on.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// The health, readiness and metrics routes over `state`.
pub fn router(state: ApiState) -> Router {
    health_router(state.clone()).merge(metrics_router(state))
}

/// The health and readiness routes, without `/metrics`.
pub fn health_router(state: ApiState) -> Router {
    request_id::layer(
        Router::new()
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz))
            .with_state(state),
    )
}

/// `/metrics` alone (for `[admin] metrics_listen`, or merged by [`router`]).
pub fn metrics_router(state: ApiState) -> Router {
    request_id::layer(
        Router::new()
            .route("/metrics", get(scrape::metrics))
            .with_state(state),
    )
}
