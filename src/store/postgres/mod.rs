//! The PostgreSQL store: `FOR UPDATE SKIP LOCKED` claims committed before any network
//! call, batched fenced outcome writes, and the read models. Each role trait is
//! implemented where its statements live: [`crate::store::ClaimStore`] in `claims.rs`
//! (statement texts in `claim_sql.rs`), [`crate::store::ReadStore`] in `reads.rs`,
//! [`crate::store::ConsoleStore`] in `console.rs`, [`crate::store::RetentionStore`] in
//! `retention.rs`, and the statements of a review change in `review.rs`. Rows become
//! values in `rows.rs`; the live gauges' replica lock is in `gauges.rs`; the statements that
//! guard a migration run against planted objects in `migrate_guard.rs`.

mod claim_sql;
mod claims;
mod console;
mod gauges;
pub(crate) mod migrate_guard;
mod reads;
mod retention;
mod review;
mod rows;

pub use review::append_audit_on;

use sqlx::PgPool;

/// The first schema a session searches (its own temporary schema aside), and its whole
/// path, as `current_schemas(true)` lists it: `pg_catalog` unless the session's
/// `search_path` names it after another schema. Every name here is `pg_catalog`'s.
pub(crate) const FIRST_SEARCHED_SCHEMA_SQL: &str = "SELECT u.s::pg_catalog.text, \
     pg_catalog.array_to_string(pg_catalog.current_schemas(true), ', '::pg_catalog.text) \
     FROM pg_catalog.unnest(pg_catalog.current_schemas(true)) WITH ORDINALITY AS u(s, n) \
     WHERE NOT pg_catalog.starts_with(u.s::pg_catalog.text, 'pg_temp'::pg_catalog.text) \
     ORDER BY u.n LIMIT 1";

/// The schema of the `outbox_intents` a session resolves (its `search_path`): what every
/// wake-up notification names (migration 0007; the insert trigger sends
/// `TG_TABLE_SCHEMA`, the same schema), and what a dispatcher compares them with. The
/// `regclass` is cast to `oid` so that the comparison is the built-in `oid = oid`: an
/// operator `oid = regclass` created in a schema on the path would fit better than the
/// built-in reached by an implicit cast.
macro_rules! outbox_schema_query {
    () => {
        "SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.oid = pg_catalog.to_regclass('outbox_intents')::pg_catalog.oid"
    };
}

/// The second half of every advisory lock key outboxd takes on PostgreSQL (the job locks
/// and the gauge lock): a hash of the session's schema, so installs in different schemas
/// of one database never block each other. Named by `pg_catalog`, with the `name`
/// cast to `text`, so that no function created in a schema on the path (a
/// `hashtext(name)`, which would fit the call better than the built-in) can take its
/// place; the value is the one of `hashtext(current_schema())`, which earlier releases
/// used, so replicas of both keep excluding each other during an upgrade.
macro_rules! schema_lock_half {
    () => {
        "pg_catalog.hashtext(pg_catalog.current_schema()::text)"
    };
}
pub(crate) use schema_lock_half;

/// The schema of this session's outbox (`outbox_schema_query!`); no row before the table
/// exists.
pub const OUTBOX_SCHEMA_SQL: &str = outbox_schema_query!();

/// Wakes the idle dispatchers of this session's outbox (and, with an empty payload, every
/// dispatcher when the schema cannot be told).
pub const WAKE_DISPATCHERS_SQL: &str = concat!(
    "SELECT pg_catalog.pg_notify('outboxd_intents', coalesce((",
    outbox_schema_query!(),
    "), ''))"
);

/// The PostgreSQL store: every role of [`crate::store::OutboxStore`].
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    gauge_leader: std::sync::Arc<gauges::GaugeLeader>,
}

impl PgStore {
    /// Wraps a pool whose database is migrated.
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            gauge_leader: Default::default(),
        }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}
