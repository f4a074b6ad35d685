//! The PostgreSQL store: `FOR UPDATE SKIP LOCKED` claims committed before any network
//! call, batched fenced outcome writes, and the read models. Each role trait is
//! implemented where its statements live: [`crate::store::ClaimStore`] in `claims.rs`
//! (statement texts in `claim_sql.rs`), [`crate::store::ReadStore`] in `reads.rs`,
//! [`crate::store::ConsoleStore`] in `console.rs`, [`crate::store::RetentionStore`] in
//! `retention.rs`, and the statements of a review change in `review.rs`. Rows become
//! values in `rows.rs`; the live gauges' replica lock is in `gauges.rs`; the statements that
//! guard a migration run against planted objects in `migrate_guard.rs`; the dispatcher's
//! own sessions for its claims and outcome groups in `sessions.rs`.

mod claim_sql;
mod claims;
mod console;
mod gauges;
pub(crate) mod migrate_guard;
mod reads;
mod retention;
mod review;
mod rows;
mod sessions;

pub use review::append_audit_on;
pub use sessions::{
    DispatcherSessions, Session, SessionRole, CHECK_AFTER_IDLE, DISPATCHER_SESSIONS, REOPEN_AFTER,
    REOPEN_AFTER_AT_MOST,
};

use sqlx::PgPool;

/// The session's `search_path` setting as written (not as resolved: a schema the role may
/// not use yet, or that does not exist yet, is left out of `current_schemas`, and could be
/// granted or created later under a session that passed the check).
pub(crate) const SEARCH_PATH_SQL: &str =
    "SELECT pg_catalog.current_setting('search_path'::pg_catalog.text)";

/// The entries of a `search_path` setting, in order, as PostgreSQL's list splitting reads
/// them: an entry that starts with `"` is quoted up to the next lone `"` (`""` inside is
/// one `"`); any other runs to the next comma or space and is folded to lower case (a `"`
/// inside it is an ordinary character); space, tab, CR, LF and form feed around an entry
/// are skipped.
pub fn search_path_entries(setting: &str) -> Vec<String> {
    let space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c');
    let mut entries = Vec::new();
    let mut chars = setting.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| space(*c)) {
            chars.next();
        }
        let mut entry = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                if c == '"' {
                    if chars.peek() == Some(&'"') {
                        chars.next();
                        entry.push('"');
                        continue;
                    }
                    break;
                }
                entry.push(c);
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',' && !space(*c)) {
                entry.extend(c.to_lowercase());
            }
        }
        // Whatever follows an entry before its comma (PostgreSQL refuses such a setting).
        while chars.next_if(|c| *c != ',').is_some() {}
        if !entry.is_empty() {
            entries.push(entry);
        }
        if chars.next().is_none() {
            return entries;
        }
    }
}

/// Whether a `search_path` setting names `pg_catalog` after a schema other than `pg_temp`:
/// then a function of a built-in's very name and argument types in that schema runs in
/// place of the built-in.
pub fn catalog_not_first(setting: &str) -> bool {
    let entries = search_path_entries(setting);
    match entries.iter().position(|e| e == "pg_catalog") {
        None => false,
        Some(at) => entries[..at].iter().any(|e| e != "pg_temp"),
    }
}

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

pub(crate) use claim_sql::KEPT_PLAN_SETTINGS;

/// A PostgreSQL session's `search_path` names `pg_catalog` after another schema.
#[derive(Debug, thiserror::Error)]
#[error("database {url}: its sessions' search_path is {path}, and outboxd's statements need pg_catalog searched first (a call that fits a built-in exactly takes it only then; a function of the same name and argument types in a schema ahead of it would run instead, with outboxd's rights); leave pg_catalog out of search_path (it is then searched first) or list it first")]
pub struct CatalogNotFirst {
    /// The URL with any password removed.
    pub url: String,
    /// The `search_path` setting as the server reports it.
    pub path: String,
}

/// Checked on every new PostgreSQL connection, before the pool hands it out (a path set
/// with `ALTER ROLE … SET` after the daemon started is caught on its next connection).
pub(crate) async fn refuse_catalog_not_first(
    conn: &mut sqlx::PgConnection,
    url: String,
) -> Result<(), sqlx::Error> {
    let path: String = sqlx::query_scalar(SEARCH_PATH_SQL)
        .fetch_one(&mut *conn)
        .await?;
    if catalog_not_first(&path) {
        return Err(sqlx::Error::Configuration(Box::new(CatalogNotFirst {
            url,
            path,
        })));
    }
    Ok(())
}

/// The PostgreSQL store: every role of [`crate::store::OutboxStore`].
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Sessions with [`KEPT_PLAN_SETTINGS`] set for their whole life, where the claim and
    /// the outcome group run as one statement each (the dispatcher's store, decision 0023);
    /// without them each runs in a transaction that sets the settings first.
    kept: Option<std::sync::Arc<DispatcherSessions>>,
    gauge_leader: std::sync::Arc<gauges::GaugeLeader>,
}

impl PgStore {
    /// Wraps a pool whose database is migrated.
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            kept: None,
            gauge_leader: Default::default(),
        }
    }

    /// The dispatcher's store: claims and outcome groups run on `kept`, sessions opened
    /// with [`KEPT_PLAN_SETTINGS`] ([`DispatcherSessions`]); every other statement on
    /// `pool`.
    pub fn for_dispatcher(pool: PgPool, kept: std::sync::Arc<DispatcherSessions>) -> Self {
        Self {
            kept: Some(kept),
            ..Self::new(pool)
        }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::{catalog_not_first, search_path_entries};

    #[test]
    fn search_path_entries_are_read_as_postgresql_reads_them() {
        assert_eq!(
            search_path_entries(r#""$user", Public, "My ""Sch"", ema",pg_catalog"#),
            ["$user", "public", r#"My "Sch", ema"#, "pg_catalog"]
        );
        assert_eq!(search_path_entries(""), Vec::<String>::new());
    }

    #[test]
    fn pg_catalog_must_come_before_every_schema_but_pg_temp() {
        for ok in [
            "outbox",
            "pg_catalog, outbox",
            "pg_temp, PG_CATALOG, outbox",
            "\"$user\", public",
        ] {
            assert!(!catalog_not_first(ok), "{ok}");
        }
        for refused in [
            "outbox, pg_catalog",
            "missing,pg_catalog,outbox",
            "\"$user\", PG_Catalog",
        ] {
            assert!(catalog_not_first(refused), "{refused}");
        }
        // A quoted name is not folded: "PG_CATALOG" is another (impossible) schema.
        assert!(!catalog_not_first("\"PG_CATALOG\", outbox"));
        // A `"` inside an unquoted name is a character of it, not the start of a quote.
        assert_eq!(
            search_path_entries("a\"b,pg_catalog"),
            ["a\"b", "pg_catalog"]
        );
        assert!(catalog_not_first("a\"b,pg_catalog"));
        // Only PostgreSQL's own spaces separate: a no-break space is part of a name.
        assert_eq!(search_path_entries("pg\u{a0}catalog"), ["pg\u{a0}catalog"]);
    }
}
