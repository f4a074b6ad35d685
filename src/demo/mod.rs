//! `outboxd demo`: the story of the seed documents, told by the real dispatcher against a
//! temporary SQLite database and the built-in [`FakeProvider`] on 127.0.0.1 — the four
//! cases the buyer asks about, and what happens to an outcome nobody can know.
//!
//! 1. A keyed refund whose response is lost after the provider applied it is retried with
//!    the same idempotency key and has one effect.
//! 2. Concurrent retries of one operation (parallel enqueues, two dispatchers stepping at
//!    once) give one intent, one claim and one effect.
//! 3. The same operation id with changed arguments is a conflict; with the same arguments
//!    it is a replay (a receipt); a new operation id is a second, legitimate intent.
//! 4. Another tenant supplying the first tenant's idempotency key gets its own intent and
//!    its own provider effect, never the first tenant's.
//! 5. A `not_idempotent` notification that times out after applying lands in
//!    reconciliation (`unknown`), is not resent, and is resolved by a person.
//!
//! After each scene the outbox rows and the provider's effects are printed (`records`).
//! The dispatcher is driven step by step ([`Dispatcher::run_once`]); the only waits are the
//! provider's injected delay and a scheduled retry's backoff (configured as 1 ms). The
//! demo ends with a summary and the invariant checker's counts ([`crate::checker`]).
//! Files: `dir` (the temporary directory), `narrate` (output), `scenes`, `concurrency`
//! and `tenants` (the story), `records` (rows and effects), `resolve` (the operator's
//! resolution), `summary` (the closing table).

mod concurrency;
mod dir;
mod narrate;
mod records;
mod resolve;
mod scenes;
mod summary;
mod tenants;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::checker::CheckReport;
use crate::config::{Config, ConfigError};
use crate::daemon::{build_action_table, dispatcher_settings, BuildError};
use crate::dispatch::{ActionTable, Dispatcher, StepReport};
use crate::fake_provider::{FakeProvider, FakeProviderOptions};
use crate::store::{Database, OutboxStore, StoreError};
use crate::{EnqueueError, Enqueued, NewIntent};

use dir::DemoDir;
use narrate::Narrator;

/// Why the demo could not finish.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Writing the story or creating the temporary directory failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The demo's own configuration was refused (a bug).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The demo's actions could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The temporary database could not be opened.
    #[error(transparent)]
    Connect(#[from] crate::store::connect::ConnectError),
    /// Migrating the temporary database failed.
    #[error(transparent)]
    Migrate(#[from] crate::store::migrate::MigrateError),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An enqueue that should have worked did not.
    #[error(transparent)]
    Enqueue(#[from] EnqueueError),
    /// A direct database statement failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The store refused to resolve an intent's reconciliation item (or the database
    /// failed).
    #[error("the demo went off script: resolving intent #{intent_id}: {source}")]
    Resolve {
        /// The intent.
        intent_id: crate::intent::IntentId,
        /// What the store said.
        source: crate::store::ReviewError,
    },
    /// The story did not go as told (a bug in the demo or in outboxd).
    #[error("the demo went off script: {0}")]
    OffScript(String),
}

/// The tenant every demo intent belongs to.
const TENANT: &str = "acme";
/// Longest wait for a scheduled retry to become due.
const MAX_DUE_WAIT: Duration = Duration::from_secs(10);

/// The demo's configuration: one fake provider, a keyed and a not-idempotent action.
fn demo_config(db_url: &str, provider_url: &str) -> String {
    let quote = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let retry =
        "max_attempts = 5\ninitial_backoff = \"1ms\"\nmax_backoff = \"1ms\"\ndeadline = \"1h\"";
    format!(
        r#"
[database]
url = {db}
max_connections = 2
[dispatcher]
owner = "demo"
lease = "10s"
shutdown_grace = "5s"
[providers.fake]
base_url = {base}
connect_timeout = "500ms"
request_timeout = "1s"
key_retention = "24h"
allow_private_addresses = true
[actions.issue_refund]
provider = "fake"
path = "/keyed/refunds"
retry_safety = "idempotent_with_key"
reference_pointer = "/id"
[actions.issue_refund.retry]
{retry}
[actions.send_notification]
provider = "fake"
path = "/unkeyed/notifications"
retry_safety = "not_idempotent"
reference_pointer = "/id"
[actions.send_notification.retry]
{retry}
"#,
        db = quote(db_url),
        base = quote(provider_url),
    )
}

/// Everything the story uses.
struct Demo<'o> {
    n: Narrator<'o>,
    db: Database,
    store: Arc<dyn OutboxStore>,
    provider: FakeProvider,
    actions: Arc<ActionTable>,
    dispatcher: Dispatcher,
    /// Promises the story saw broken (besides the checker's counts); the demo fails if any.
    violations: Vec<String>,
}

impl Demo<'_> {
    /// Records `intent` in its own transaction, as a producer would in theirs.
    async fn enqueue(&self, intent: NewIntent) -> Result<Enqueued, EnqueueError> {
        crate::commands::enqueue::enqueue_committed(&self.db, intent).await
    }

    /// One dispatcher step that finds work: when the next intent is scheduled for later
    /// (a retry's backoff), waits until it is due, up to [`MAX_DUE_WAIT`].
    async fn step(&self) -> Result<StepReport, DemoError> {
        let give_up = tokio::time::Instant::now() + MAX_DUE_WAIT;
        loop {
            let report = self.dispatcher.run_once().await?;
            if report.did_work() || tokio::time::Instant::now() >= give_up {
                return Ok(report);
            }
            match self.store.next_due_at(&self.actions.names()).await? {
                Some(at) => {
                    let wait = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                    tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
                }
                None => return Ok(report),
            }
        }
    }
}

/// Runs the demo, writing the story to `out`; returns the invariant checker's report
/// (the caller exits non-zero unless it is clean). The temporary directory is removed
/// before returning, whatever happened.
pub async fn run(out: &mut (dyn Write + Send)) -> Result<CheckReport, DemoError> {
    let dir = DemoDir::create()?;
    let db_path = dir.path().join("demo.db");
    let provider = FakeProvider::start(FakeProviderOptions::default())?;
    let db_url = format!("sqlite://{}", db_path.display());
    let config = Config::from_toml_str(&demo_config(&db_url, &provider.base_url()))?.config;
    let db = crate::store::connect(&config.database.url, config.database.max_connections).await?;
    let result = tell(out, &config, &db, &provider, &dir).await;
    db.close().await;
    provider.shutdown().await;
    drop(dir);
    result
}

async fn tell(
    out: &mut (dyn Write + Send),
    config: &Config,
    db: &Database,
    provider: &FakeProvider,
    dir: &DemoDir,
) -> Result<CheckReport, DemoError> {
    let mut n = Narrator::new(out);
    n.raw("outboxd demo: a transactional outbox, a provider that misbehaves, and what outboxd does about it.")?;
    n.say(format!(
        "database: {} (temporary SQLite, removed at exit)",
        dir.path().join("demo.db").display()
    ))?;
    n.say(format!(
        "provider: the built-in fake provider at {} (records every effect per idempotency key)",
        provider.base_url()
    ))?;
    let report = db.migrate().await?;
    n.say(format!("schema migrated to version {}", report.version))?;
    let actions = Arc::new(build_action_table(config)?);
    let store = db.store();
    let dispatcher = Dispatcher::new(
        db.claim_store(),
        actions.clone(),
        dispatcher_settings(config),
    );
    let mut demo = Demo {
        n,
        db: db.clone(),
        store,
        provider: provider.clone(),
        actions,
        dispatcher,
        violations: Vec::new(),
    };
    let refund = scenes::lost_response(&mut demo).await?;
    concurrency::concurrent_retries(&mut demo).await?;
    scenes::conflict_and_replay(&mut demo).await?;
    tenants::key_from_another_tenant(&mut demo, refund).await?;
    scenes::unknown_outcome(&mut demo).await?;
    let report = summary::print(&mut demo).await?;
    match demo.violations.first() {
        Some(first) => Err(DemoError::OffScript(first.clone())),
        None => Ok(report),
    }
}
