//! `outboxd run`: open and migrate the database, build the configured actions, and run
//! the dispatcher lanes, the scheduled jobs (status probes, retention) and the admin server
//! (health, metrics, the `/v1` API and the review page; `/metrics` on a listener of its own
//! with `[admin] metrics_listen`) until a shutdown signal. On the signal `/readyz`
//! turns 503 at once, the dispatcher drains, then the admin server stops.

mod actions;

use std::sync::Arc;

use tokio::sync::{watch, Notify};

pub use actions::{build_action_table, BuildError};

use crate::api::{self, AdminServer, ApiState};
use crate::config::Config;
use crate::dispatch::wakeup::Wakeup;
use crate::dispatch::{Dispatcher, DispatcherSettings};
use crate::metrics::Metrics;
use crate::store::compat::{check_schema_window, SchemaFit};
use crate::store::{connect_dispatcher, Database};

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The database could not be opened.
    #[error(transparent)]
    Connect(#[from] crate::store::connect::ConnectError),
    /// Migrations failed.
    #[error(transparent)]
    Migrate(#[from] crate::store::migrate::MigrateError),
    /// The schema is outside this build's compatibility window.
    #[error(transparent)]
    Schema(#[from] crate::store::compat::SchemaMismatch),
    /// An action or provider could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The admin server could not listen.
    #[error("cannot listen on {addr} for the admin server: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The scheduled jobs (probes, retention) could not start.
    #[error(transparent)]
    Jobs(#[from] crate::reconcile::JobsError),
    /// A database query failed at start.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// Options of `outboxd run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Do not apply migrations at start (a separate migration job does it).
    pub skip_migrations: bool,
}

/// Opens the database named in `config`, applying migrations unless told not to, then
/// checks that the schema is inside this build's compatibility window.
pub async fn open_database(config: &Config, migrate: bool) -> Result<Database, DaemonError> {
    let db = connect_dispatcher(&config.database.url, config.database.max_connections).await?;
    if migrate {
        let report = db.migrate().await?;
        for (version, name) in &report.applied {
            tracing::info!(version, name, "applied migration");
        }
    }
    check_schema(&db).await?;
    let creators = db.schema_creators().await?;
    if let Some(warning) = Database::schema_creators_warning(&creators) {
        tracing::warn!(roles = ?creators, "{warning}");
    }
    Ok(db)
}

/// Refuses a schema outside the compatibility window
/// ([`check_schema_window`](crate::store::compat::check_schema_window)); warns when it is one
/// version ahead (a newer release has migrated; this binary keeps working).
pub async fn check_schema(db: &Database) -> Result<SchemaFit, DaemonError> {
    let found = db.schema_version().await?;
    let expected = crate::store::migrate::expected_version();
    let fit = check_schema_window(found, expected)?;
    if fit == SchemaFit::OneAhead {
        tracing::warn!(found, expected,
            "the database schema is one version newer than this build (compatibility window); finish the rollout");
    }
    Ok(fit)
}

/// Binds the listener `name` on `addr` serving `routes`.
async fn bind(
    name: &str,
    addr: std::net::SocketAddr,
    routes: axum::Router,
) -> Result<AdminServer, DaemonError> {
    AdminServer::bind_as(name, addr, routes)
        .await
        .map_err(|source| DaemonError::Listen { addr, source })
}

/// The dispatcher settings from `config`.
pub fn dispatcher_settings(config: &Config) -> DispatcherSettings {
    let d = &config.dispatcher;
    DispatcherSettings {
        owner: config.dispatcher_owner(),
        batch_size: d.batch_size,
        concurrency: usize::try_from(d.concurrency).unwrap_or(1),
        lease: d.lease,
        poll_interval: d.poll_interval,
        shutdown_grace: d.shutdown_grace,
        reclaim_every: d.release_expired_every,
    }
}

/// Runs the daemon until `shutdown` turns true.
pub async fn run(
    config: Config,
    options: RunOptions,
    shutdown: watch::Receiver<bool>,
) -> Result<(), DaemonError> {
    let db = open_database(&config, !options.skip_migrations).await?;
    let actions = Arc::new(build_action_table(&config)?);
    let settings = dispatcher_settings(&config);
    tracing::info!(backend = db.backend_name(), owner = %settings.owner,
        actions = ?actions.names(), "outboxd starting");
    let local = Arc::new(Notify::new());
    let metrics = Metrics::shared();
    metrics.process().set_configured_actions(
        actions
            .names()
            .iter()
            .filter_map(|name| actions.get(name).map(|a| (name.as_str(), a.client.name()))),
    );
    let jobs = crate::reconcile::ScheduledJobs::start_reporting(
        &config,
        &db,
        actions.clone(),
        Some(metrics.clone()),
    )
    .await?;
    let listen = config.admin.listen;
    let people =
        crate::admin::AdminContext::new(db.clone(), config.admin.tokens.clone(), local.clone())
            .with_cookie_secure(config.admin.cookie_secure)
            .with_actions(actions.resend_policies());
    let state = ApiState::new(db.clone(), Arc::new(config), metrics.clone())
        .with_local_wakeup(local.clone());
    let metrics_listen = state.config.admin.metrics_listen;
    let own_routes = match metrics_listen {
        Some(_) => api::health_router(state.clone()),
        None => api::router(state.clone()),
    };
    let routes = own_routes.merge(crate::admin::router(people));
    let admin = bind("admin server", listen, routes).await?;
    let scraper = match metrics_listen {
        Some(addr) => Some(bind("metrics server", addr, api::metrics_router(state.clone())).await?),
        None => None,
    };
    api::server::mark_draining_on(&state, shutdown.clone());
    let wakeup = Wakeup::new(&db, local.clone()).await;
    let dispatcher =
        Arc::new(Dispatcher::new(db.claim_store(), actions, settings).with_metrics(metrics));
    tracing::info!(
        concurrency = dispatcher.settings().concurrency,
        "dispatcher running"
    );
    dispatcher.run(wakeup, shutdown).await;
    jobs.shutdown().await;
    admin.stop().await;
    if let Some(scraper) = scraper {
        scraper.stop().await;
    }
    db.close().await;
    Ok(())
}
