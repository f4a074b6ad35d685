//! A dispatcher harness: a fresh database, a fake provider on loopback, a dispatcher with
//! test actions, and helpers to enqueue and to make scheduled retries due without sleeping.

use sqlx::AssertSqlSafe;
use std::sync::Arc;
use std::time::Duration;

use outboxd::action::{RetryPolicy, RetrySafety};
use outboxd::dispatch::{ActionRuntime, ActionTable, Dispatcher, DispatcherSettings};
use outboxd::fake_provider::{FakeProvider, FakeProviderOptions};
use outboxd::provider::{ProviderClient, ProviderSettings};
use outboxd::store::{Database, IntentRow, OutboxStore};
use outboxd::{enqueue, Enqueued, NewIntent};
use serde_json::json;

use super::TestDb;
use outboxd::intent::{IntentId, OperationId, TenantId};

/// The keyed action: the fake provider applies it at most once per idempotency key.
pub const REFUND: &str = "issue_refund";
/// The not-idempotent action: every request applies.
pub const NOTIFY: &str = "send_notification";
/// Request timeout used by the harness' provider.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(700);

/// A fast retry budget for tests.
pub fn quick_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        deadline: Duration::from_secs(3600),
        max_retry_after: Duration::from_secs(120),
    }
}

/// Builds the two test actions against `provider`.
pub fn test_actions(provider: &FakeProvider, key_retention: Duration) -> ActionTable {
    let mut settings = ProviderSettings::new("fake", provider.base_url().parse().unwrap());
    settings.allow_private_addresses = true;
    settings.connect_timeout = Duration::from_millis(300);
    settings.request_timeout = REQUEST_TIMEOUT;
    let client = Arc::new(ProviderClient::new(&settings).expect("provider client"));
    let action = |name: &str, path: &str, safety| ActionRuntime {
        name: name.to_owned(),
        client: client.clone(),
        method: reqwest::Method::POST,
        path: path.to_owned(),
        retry_safety: safety,
        reference_pointer: Some("/id".to_owned()),
        policy: quick_policy(),
        key_retention,
        probe: None,
    };
    ActionTable::new([
        action(REFUND, "/keyed/refunds", RetrySafety::IdempotentWithKey),
        action(NOTIFY, "/unkeyed/notifications", RetrySafety::NotIdempotent),
    ])
}

/// Dispatcher settings for tests (`owner` distinguishes several dispatchers).
pub fn test_settings(owner: &str) -> DispatcherSettings {
    DispatcherSettings {
        owner: owner.to_owned(),
        batch_size: 50,
        concurrency: 16,
        lease: Duration::from_secs(5),
        poll_interval: Duration::from_millis(50),
        shutdown_grace: Duration::from_secs(5),
        reclaim_every: Duration::from_millis(500),
    }
}

/// Everything a dispatcher test needs.
pub struct Harness {
    /// The database.
    pub db: Database,
    /// The fake provider.
    pub provider: FakeProvider,
    /// The store.
    pub store: Arc<dyn OutboxStore>,
    /// The actions.
    pub actions: Arc<ActionTable>,
    /// A dispatcher.
    pub dispatcher: Dispatcher,
}

impl Harness {
    /// A harness on `t` with a 24 h key retention.
    pub async fn new(t: &TestDb) -> Harness {
        Self::with_retention(t, Duration::from_secs(24 * 3600)).await
    }

    /// A harness whose provider remembers keys for `key_retention`.
    pub async fn with_retention(t: &TestDb, key_retention: Duration) -> Harness {
        let provider = FakeProvider::start(FakeProviderOptions::default()).expect("fake provider");
        let actions = Arc::new(test_actions(&provider, key_retention));
        let store = t.db.store();
        let dispatcher = Dispatcher::new(
            t.db.claim_store(),
            actions.clone(),
            test_settings("dispatcher-a"),
        );
        Harness {
            db: t.db.clone(),
            provider,
            store,
            actions,
            dispatcher,
        }
    }

    /// Another dispatcher on the same database and actions.
    pub fn second_dispatcher(&self, owner: &str) -> Dispatcher {
        Dispatcher::new(
            self.db.claim_store(),
            self.actions.clone(),
            test_settings(owner),
        )
    }

    /// Enqueues in a committed transaction.
    pub async fn enqueue(&self, intent: NewIntent) -> Enqueued {
        enqueue_committed(&self.db, intent).await
    }

    /// Enqueues `action` for tenant `acme` with a small payload.
    pub async fn enqueue_simple(&self, op: &str, action: &str) -> Enqueued {
        self.enqueue(NewIntent::new(
            "acme",
            op,
            action,
            json!({"op": op, "amount": 100}),
        ))
        .await
    }

    /// The intent's current row.
    pub async fn intent(&self, id: IntentId) -> IntentRow {
        self.store
            .get_intent(id)
            .await
            .unwrap()
            .expect("intent exists")
    }

    /// Makes every pending intent due now (skips backoff waits without sleeping).
    pub async fn make_due(&self) {
        exec(&self.db, "UPDATE outbox_intents SET next_attempt_at = 0 WHERE state = 'pending'",
            "UPDATE outbox_intents SET next_attempt_at = now() - interval '1 second' WHERE state = 'pending'").await;
    }

    /// Expires every lease now (as if the owner stalled past it) without sleeping.
    pub async fn expire_leases(&self) {
        exec(&self.db, "UPDATE outbox_intents SET lease_expires_at = 0 WHERE state = 'in_flight'",
            "UPDATE outbox_intents SET lease_expires_at = now() - interval '1 second' WHERE state = 'in_flight'").await;
    }

    /// Open reconciliation items for an intent.
    pub async fn open_items(&self, id: IntentId) -> i64 {
        let sql = format!("SELECT count(*) FROM outbox_reconciliation_items WHERE intent_id = {id} AND resolved_at IS NULL");
        scalar(&self.db, &sql).await
    }
}

/// Enqueues `intent` in its own committed transaction.
pub async fn enqueue_committed(db: &Database, intent: NewIntent) -> Enqueued {
    match db {
        Database::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            let r = enqueue(&mut tx, intent).await.unwrap();
            tx.commit().await.unwrap();
            r
        }
        Database::Sqlite(pool) => {
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
            let r = enqueue(&mut tx, intent).await.unwrap();
            tx.commit().await.unwrap();
            r
        }
    }
}

/// Enqueues `intents` in one committed transaction (a claim sees all of them or none).
pub async fn enqueue_all_committed(db: &Database, intents: Vec<NewIntent>) {
    match db {
        Database::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            for intent in intents {
                enqueue(&mut tx, intent).await.unwrap();
            }
            tx.commit().await.unwrap();
        }
        Database::Sqlite(pool) => {
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
            for intent in intents {
                enqueue(&mut tx, intent).await.unwrap();
            }
            tx.commit().await.unwrap();
        }
    }
}

/// Runs backend-specific SQL.
pub async fn exec(db: &Database, sqlite: &str, postgres: &str) {
    let sql = match db {
        Database::Postgres(_) => postgres,
        Database::Sqlite(_) => sqlite,
    };
    try_exec(db, sql).await.expect("exec");
}

/// Runs one statement, written alike for both backends, returning its error.
pub async fn try_exec(db: &Database, sql: &str) -> Result<(), sqlx::Error> {
    match db {
        Database::Postgres(pool) => sqlx::query(AssertSqlSafe(sql))
            .execute(pool)
            .await
            .map(|_| ()),
        Database::Sqlite(pool) => sqlx::query(AssertSqlSafe(sql))
            .execute(pool)
            .await
            .map(|_| ()),
    }
}

/// A count query.
pub async fn scalar(db: &Database, sql: &str) -> i64 {
    match db {
        Database::Postgres(pool) => sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .expect(sql),
        Database::Sqlite(pool) => sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .expect(sql),
    }
}

/// A tenant id for store look-ups.
pub fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).expect("a valid tenant")
}

/// An operation id for store look-ups.
pub fn operation(id: &str) -> OperationId {
    OperationId::parse(id).expect("a valid operation id")
}
