//! Embedded, forward-only schema migrations, recorded in outboxd's own
//! `outboxd_schema_migrations` table so they never collide with a producer's migrations
//! (sqlx's `_sqlx_migrations`, for example) in a shared database.
//!
//! Each migration runs in one transaction with its bookkeeping row. On PostgreSQL an
//! advisory lock serialises concurrent `outboxd migrate` runs (several replicas starting at
//! once); on SQLite `BEGIN IMMEDIATE` does the same.
//!
//! On PostgreSQL a run searches only the schema it migrates (and `pg_catalog`), and
//! refuses to apply anything while that schema holds a function or operator that could
//! take a built-in's place in a migration's unqualified call (checked again after each
//! migration), or while a role other than the migrating role may create one there during
//! the run ([`MigrateOptions::allow_schema_creators`] accepts that risk). The statements are in
//! [`super::postgres::migrate_guard`].

use sha2::{Digest, Sha256};
use sqlx::{PgPool, Row, SqlitePool};

use super::compat::{check_schema_window, SchemaFit};

/// One embedded migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Monotonic version number (the file's numeric prefix).
    pub version: i64,
    /// Human name (the file name without prefix and extension).
    pub name: &'static str,
    /// The SQL text.
    pub sql: &'static str,
}

impl Migration {
    /// sha256 of the SQL text with line endings normalised to LF, stored so an edited,
    /// already applied migration is detected — and a CRLF checkout of the same files
    /// (Windows, `core.autocrlf`) is not mistaken for an edit.
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.replace("\r\n", "\n").as_bytes()))
    }
}

/// The migrations of one backend's folder under `migrations/`, in order: one list for both
/// backends, so they stay paired one to one by version and name.
macro_rules! migrations {
    ($backend:literal) => {
        &[
            Migration {
                version: 1,
                name: "outbox",
                sql: include_str!(concat!("../../migrations/", $backend, "/0001_outbox.sql")),
            },
            Migration {
                version: 2,
                name: "producer_functions",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0002_producer_functions.sql"
                )),
            },
            Migration {
                version: 3,
                name: "tenant_keys_exact_numbers",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0003_tenant_keys_exact_numbers.sql"
                )),
            },
            Migration {
                version: 4,
                name: "tenant_turns_provider_states",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0004_tenant_turns_provider_states.sql"
                )),
            },
            Migration {
                version: 5,
                name: "bytewise_turns_resend_confirmations",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0005_bytewise_turns_resend_confirmations.sql"
                )),
            },
            Migration {
                version: 6,
                name: "send_window_items_by_intent",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0006_send_window_items_by_intent.sql"
                )),
            },
            Migration {
                version: 7,
                name: "wakeups_name_their_schema",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0007_wakeups_name_their_schema.sql"
                )),
            },
            Migration {
                version: 8,
                name: "drop_superseded_tenant_walk_index",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0008_drop_superseded_tenant_walk_index.sql"
                )),
            },
            Migration {
                version: 9,
                name: "field_checks_when_written",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0009_field_checks_when_written.sql"
                )),
            },
            Migration {
                version: 10,
                name: "cheaper_producer_functions",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0010_cheaper_producer_functions.sql"
                )),
            },
            Migration {
                version: 11,
                name: "pinned_function_search_path",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0011_pinned_function_search_path.sql"
                )),
            },
            Migration {
                version: 12,
                name: "functions_written_with_qualified_quoting",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0012_functions_written_with_qualified_quoting.sql"
                )),
            },
            Migration {
                version: 13,
                name: "wakeups_can_be_turned_off",
                sql: include_str!(concat!(
                    "../../migrations/",
                    $backend,
                    "/0013_wakeups_can_be_turned_off.sql"
                )),
            },
        ]
    };
}

/// PostgreSQL migrations, in order.
pub const POSTGRES: &[Migration] = migrations!("postgres");

/// SQLite migrations, in order; paired one to one with [`POSTGRES`].
pub const SQLITE: &[Migration] = migrations!("sqlite");

/// The schema version this build expects (the last migration's version).
pub fn expected_version() -> i64 {
    POSTGRES.last().map(|m| m.version).unwrap_or(0)
}

/// Why migrating failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// A migration recorded as applied no longer matches the embedded text.
    #[error("migration {version} ({name}) was changed after it was applied (checksum {stored} in the database, {embedded} in this build)")]
    Modified {
        /// Version.
        version: i64,
        /// Name.
        name: &'static str,
        /// Checksum in the database.
        stored: String,
        /// Checksum of the embedded text.
        embedded: String,
    },
    /// The database has migrations this build does not know, beyond the compatibility
    /// window (one version past this build's).
    #[error("the database schema is at version {found}, this build runs on versions {expected} and {next} only; deploy the release that applied version {found} (or a newer one)", next = expected + 1)]
    TooNew {
        /// Highest applied version.
        found: i64,
        /// Highest embedded version.
        expected: i64,
    },
    /// The database failed.
    #[error("database error while migrating: {0}")]
    Database(#[from] sqlx::Error),
    /// The session's `search_path` names no schema that exists.
    #[error("the database session's search_path names no schema that exists and the role may use (other than pg_catalog), so there is nowhere to create outboxd's tables; set search_path (for example with options=-c search_path=outbox in the URL) to an existing schema")]
    NoSchema,
    /// The schema holds objects that could run in the migrations' statements.
    #[error("refusing to migrate schema {schema}: it holds {} that could run with the migrating role's rights in place of a built-in (or of outboxd's own function) called by the migrations: {}; drop them or move them to another schema, then migrate again", if objects.len() == 1 { "an object" } else { "objects" }, objects.join(", "))]
    ShadowingObjects {
        /// The schema being migrated.
        schema: String,
        /// The objects, as PostgreSQL names them.
        objects: Vec<String>,
    },
    /// Roles other than the migrating role may create objects in the schema while it is
    /// migrated.
    #[error("refusing to migrate schema {schema}: roles other than the migrating role may create objects in it ({}), and a function one of them created while the migrations run could run with the migrating role's rights; take away what lets each (a grantee: REVOKE CREATE ON SCHEMA {schema} FROM the role; a role that may act as the owner: revoke its membership, or make the migrating role the schema's owner; CREATEROLE: ALTER ROLE … NOCREATEROLE) and migrate again, or pass --allow-schema-creators to `outboxd migrate` to accept that risk (a function created during the run is still found before the commit and undoes the run, but what it did outside the transaction stays done)", roles.join(", "))]
    SchemaCreators {
        /// The schema being migrated.
        schema: String,
        /// The roles (`PUBLIC` for every role).
        roles: Vec<String>,
    },
    /// A relation named like outboxd's bookkeeping table belongs to another role.
    #[error("refusing to migrate schema {schema}: its outboxd_schema_migrations belongs to role {owner}, not to the migrating role, and could run that role's code when read or written; migrate as {owner}, or drop it if outboxd did not create it")]
    ForeignBookkeeping {
        /// The schema being migrated.
        schema: String,
        /// The relation's owner.
        owner: String,
    },
    /// Migration 3 could not read the key secret it had just created.
    #[error("migration 3 could not re-key unclaimed intents")]
    Rekey(#[from] crate::wire_key::KeySecretError),
}

/// What a migration run did, for progress output.
#[derive(Debug, Clone, Default)]
pub struct MigrateReport {
    /// Versions applied by this run, with names.
    pub applied: Vec<(i64, &'static str)>,
    /// The schema version after the run.
    pub version: i64,
}

/// How a run may proceed.
#[derive(Debug, Clone, Copy, Default)]
pub struct MigrateOptions {
    /// Apply pending PostgreSQL migrations although roles other than the migrating role
    /// may create objects in the schema (`--allow-schema-creators`). The
    /// run still refuses a schema that already holds a planted object; one created during
    /// the run is the risk accepted.
    pub allow_schema_creators: bool,
}

/// The functions outboxd's PostgreSQL migrations create: another role's function of one of
/// these names beside outboxd's own could outbid it in a migration's call.
pub const OUTBOXD_FUNCTIONS: &[&str] = &[
    "outbox_canonical_json",
    "outbox_check_intent_fields",
    "outbox_check_text",
    "outbox_default_idempotency_key",
    "outbox_enqueue",
    "outbox_enqueue_prehashed",
    "outbox_intents_check_fields",
    "outbox_intents_fill_defaults",
    "outbox_intents_notify",
    "outbox_intents_refuse_pruned",
    "outbox_payload_sha256",
    "outbox_wire_idempotency_key",
];

const PG_LOCK_KEY: i64 = 0x6f75_7462_6f78_6d67; // "outboxmg"

const PG_TABLE: &str = "CREATE TABLE IF NOT EXISTS outboxd_schema_migrations (
    version BIGINT PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT pg_catalog.now())";

const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS outboxd_schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,
    applied_at INTEGER NOT NULL)";

/// Checks what is applied against what is embedded. A migration one version past this
/// build (the compatibility window, [`check_schema_window`]) is left alone, so an older
/// binary's `outboxd migrate` (a rolled-back init container) succeeds without changing
/// anything.
fn check_applied(embedded: &[Migration], applied: &[(i64, String)]) -> Result<(), MigrateError> {
    let expected = embedded.last().map(|m| m.version).unwrap_or(0);
    for (version, checksum) in applied {
        match embedded.iter().find(|m| m.version == *version) {
            None if check_schema_window(*version, expected) == Ok(SchemaFit::OneAhead) => {
                tracing::warn!(
                    version,
                    expected,
                    "the schema has one migration newer than this build (within the compatibility window); nothing to apply"
                );
            }
            None => {
                return Err(MigrateError::TooNew {
                    found: *version,
                    expected,
                })
            }
            Some(m) if m.checksum() != *checksum => {
                return Err(MigrateError::Modified {
                    version: m.version,
                    name: m.name,
                    stored: checksum.clone(),
                    embedded: m.checksum(),
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Applies pending PostgreSQL migrations.
pub async fn migrate_postgres(pool: &PgPool) -> Result<MigrateReport, MigrateError> {
    migrate_postgres_with(pool, expected_version(), MigrateOptions::default()).await
}

/// Applies pending PostgreSQL migrations up to `target` (tests build older schemas with it).
pub async fn migrate_postgres_to(
    pool: &PgPool,
    target: i64,
) -> Result<MigrateReport, MigrateError> {
    migrate_postgres_with(pool, target, MigrateOptions::default()).await
}

/// Applies pending PostgreSQL migrations up to `target`, as `options` allow.
// Dialect twin of migrate_sqlite_to: the same steps (an advisory lock where SQLite's
// `BEGIN IMMEDIATE` serialises, and the guard against planted objects SQLite has no roles
// for; SQLite also rekeys at version 3).
pub async fn migrate_postgres_with(
    pool: &PgPool,
    target: i64,
    options: MigrateOptions,
) -> Result<MigrateReport, MigrateError> {
    use super::postgres::migrate_guard;

    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_catalog.pg_advisory_xact_lock($1::pg_catalog.int8)")
        .bind(PG_LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    let schema = migrate_guard::pin_search_path(&mut tx)
        .await?
        .ok_or(MigrateError::NoSchema)?;
    if schema == "pg_catalog" {
        return Err(MigrateError::NoSchema);
    }
    if let Some(owner) = migrate_guard::foreign_bookkeeping_owner(&mut tx).await? {
        return Err(MigrateError::ForeignBookkeeping { schema, owner });
    }
    sqlx::raw_sql(PG_TABLE).execute(&mut *tx).await?;
    let applied: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, checksum FROM outboxd_schema_migrations ORDER BY version")
            .fetch_all(&mut *tx)
            .await?;
    check_applied(POSTGRES, &applied)?;
    if pending(POSTGRES, &applied, target).next().is_some() {
        refuse_shadowing(&schema, &mut tx).await?;
        let creators = migrate_guard::other_creators(&mut tx).await?;
        if !creators.is_empty() && !options.allow_schema_creators {
            return Err(MigrateError::SchemaCreators {
                schema,
                roles: creators,
            });
        }
    }
    let mut report = MigrateReport::default();
    for m in pending(POSTGRES, &applied, target) {
        tracing::info!(version = m.version, name = m.name, "applying migration");
        sqlx::raw_sql(m.sql).execute(&mut *tx).await?;
        sqlx::query(
            "INSERT INTO outboxd_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        )
        .bind(m.version)
        .bind(m.name)
        .bind(m.checksum())
        .execute(&mut *tx)
        .await?;
        report.applied.push((m.version, m.name));
        // Again after each migration, so before the next one and before the commit: a
        // function another transaction created (committed) while this run waited undoes
        // the whole run, whatever it did inside it (a CREATE in flight when the first check
        // ran was not visible to it, and a REVOKE does not stop it).
        refuse_shadowing(&schema, &mut tx).await?;
    }
    tx.commit().await?;
    report.version = highest_version(&applied, &report);
    Ok(report)
}

/// Refuses `schema` when it holds an object that could take a built-in's place
/// ([`MigrateError::ShadowingObjects`]); returning the error rolls the run back.
async fn refuse_shadowing(
    schema: &str,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> Result<(), MigrateError> {
    let objects = super::postgres::migrate_guard::shadowing_objects(tx, OUTBOXD_FUNCTIONS).await?;
    if objects.is_empty() {
        return Ok(());
    }
    Err(MigrateError::ShadowingObjects {
        schema: schema.to_owned(),
        objects,
    })
}

/// Roles other than its owner that may create objects in the current schema (`PUBLIC`
/// for every role), on PostgreSQL. Since migration 0011 the producer functions and
/// triggers search pg_catalog only, but the daemon's sessions (and producers' with the
/// schema on their search_path) still search it, so an object such a role creates there
/// (a function or aggregate that outbids a built-in) can run with their rights: outboxd
/// warns about each one (docs/producers.md, "Privileges on PostgreSQL"). Every name and
/// operator is `pg_catalog`'s, so that nothing created in a schema on the session's path
/// (even one listed ahead of `pg_catalog`) takes part in this very check; the grantee is
/// compared with an `oid`, not an integer literal.
pub async fn postgres_schema_creators(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CASE a.grantee WHEN 0::pg_catalog.oid THEN 'PUBLIC' \
                ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END \
           FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(coalesce(n.nspacl, \
                pg_catalog.acldefault('n'::pg_catalog.\"char\", n.nspowner))) a \
          WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema() \
            AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text \
            AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner \
          ORDER BY 1",
    )
    .fetch_all(pool)
    .await
}

/// The migrations of `list` up to `target` that `applied` lacks, in order.
fn pending<'a>(
    list: &'a [Migration],
    applied: &'a [(i64, String)],
    target: i64,
) -> impl Iterator<Item = &'a Migration> + 'a {
    list.iter()
        .filter(move |m| m.version <= target && !applied.iter().any(|(v, _)| *v == m.version))
}

/// The schema version after a run: the highest version applied before or by it (one past
/// this build inside the compatibility window).
fn highest_version(before: &[(i64, String)], report: &MigrateReport) -> i64 {
    let before = before.iter().map(|(v, _)| *v).max().unwrap_or(0);
    let now = report.applied.iter().map(|(v, _)| *v).max().unwrap_or(0);
    before.max(now)
}

/// Applies pending SQLite migrations.
pub async fn migrate_sqlite(pool: &SqlitePool) -> Result<MigrateReport, MigrateError> {
    migrate_sqlite_to(pool, expected_version()).await
}

/// Applies pending SQLite migrations up to `target` (tests build older schemas with it).
// Dialect twin of migrate_postgres_to (see there).
pub async fn migrate_sqlite_to(
    pool: &SqlitePool,
    target: i64,
) -> Result<MigrateReport, MigrateError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::raw_sql(SQLITE_TABLE).execute(&mut *tx).await?;
    let applied: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, checksum FROM outboxd_schema_migrations ORDER BY version")
            .fetch_all(&mut *tx)
            .await?;
    check_applied(SQLITE, &applied)?;
    let mut report = MigrateReport::default();
    for m in pending(SQLITE, &applied, target) {
        tracing::info!(version = m.version, name = m.name, "applying migration");
        sqlx::raw_sql(m.sql).execute(&mut *tx).await?;
        if m.version == 3 {
            rekey_unclaimed_sqlite(&mut tx).await?;
        }
        sqlx::query("INSERT INTO outboxd_schema_migrations (version, name, checksum, applied_at) VALUES (?1, ?2, ?3, ?4)")
            .bind(m.version)
            .bind(m.name)
            .bind(m.checksum())
            .bind(chrono::Utc::now().timestamp_millis())
            .execute(&mut *tx)
            .await?;
        report.applied.push((m.version, m.name));
    }
    tx.commit().await?;
    report.version = highest_version(&applied, &report);
    Ok(report)
}

/// Migration 3's Rust half on SQLite (no HMAC in SQL): intents never claimed have sent
/// nothing, so they get the tenant-namespaced key now; every other row keeps the key it may
/// already have sent. PostgreSQL does the same in the migration's SQL.
async fn rekey_unclaimed_sqlite(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
) -> Result<(), MigrateError> {
    use crate::intent::{
        default_idempotency_key, ActionName, IdempotencyKey, OperationId, TenantId,
    };
    let secret = crate::wire_key::load_key_secret(tx).await?;
    let rows: Vec<(i64, String, String, String, String)> = sqlx::query_as(
        "SELECT id, tenant, operation_id, action, idempotency_key FROM outbox_intents \
         WHERE state = 'pending' AND attempt_count = 0 AND first_sent_at IS NULL",
    )
    .fetch_all(&mut **tx)
    .await?;
    for (id, tenant, operation_id, action, key) in rows {
        let parsed = (|| {
            Ok::<_, crate::intent::InvalidField>((
                TenantId::parse(tenant)?,
                OperationId::parse(operation_id)?,
                ActionName::parse(action)?,
                IdempotencyKey::parse(key)?,
            ))
        })();
        // A row no producer path could have written keeps its key; it is still namespaced
        // nowhere, so it is left for an operator (`outboxd intents cancel`).
        let Ok((tenant, operation_id, action, key)) = parsed else {
            tracing::warn!(
                intent_id = id,
                "left an unclaimed intent with invalid fields unkeyed"
            );
            continue;
        };
        let requested = (key != default_idempotency_key(&tenant, &operation_id, &action))
            .then(|| key.as_str().to_owned());
        let wire = crate::wire_key::wire_idempotency_key(&secret, &tenant, &key);
        sqlx::query(
            "UPDATE outbox_intents SET idempotency_key = ?1, requested_idempotency_key = ?2 WHERE id = ?3",
        )
        .bind(wire.as_str())
        .bind(requested)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The highest applied version, or 0 when outboxd's table does not exist yet.
pub async fn current_version_postgres(pool: &PgPool) -> Result<i64, sqlx::Error> {
    let exists: bool = sqlx::query_scalar(
        "SELECT pg_catalog.to_regclass('outboxd_schema_migrations') IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    if !exists {
        return Ok(0);
    }
    let row = sqlx::query("SELECT coalesce(max(version), 0) AS v FROM outboxd_schema_migrations")
        .fetch_one(pool)
        .await?;
    row.try_get("v")
}

/// The highest applied version, or 0 when outboxd's table does not exist yet.
pub async fn current_version_sqlite(pool: &SqlitePool) -> Result<i64, sqlx::Error> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'outboxd_schema_migrations'",
    )
    .fetch_one(pool)
    .await?;
    if exists == 0 {
        return Ok(0);
    }
    sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM outboxd_schema_migrations")
        .fetch_one(pool)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_crlf_checkout_equals_the_lf_one() {
        for m in POSTGRES.iter().chain(SQLITE) {
            let lf = m.sql.replace("\r\n", "\n");
            let crlf: &'static str = Box::leak(lf.replace('\n', "\r\n").into_boxed_str());
            let checked_out = Migration { sql: crlf, ..*m };
            assert_eq!(checked_out.checksum(), m.checksum(), "{}", m.name);
            // Databases migrated by earlier builds stored the sha256 of the LF text.
            assert_eq!(m.checksum(), hex::encode(Sha256::digest(lf.as_bytes())));
        }
    }

    /// [`OUTBOXD_FUNCTIONS`] names every function the PostgreSQL migrations create.
    #[test]
    fn outboxd_functions_lists_every_function_the_migrations_create() {
        let mut created = std::collections::BTreeSet::new();
        for m in POSTGRES {
            for (at, _) in m.sql.match_indices("FUNCTION ") {
                let rest = &m.sql[at + "FUNCTION ".len()..];
                let rest = rest.strip_prefix("@schema@.").unwrap_or(rest);
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with("outbox") && rest[name.len()..].starts_with('(') {
                    created.insert(name);
                }
            }
        }
        let listed: std::collections::BTreeSet<String> =
            OUTBOXD_FUNCTIONS.iter().map(|s| s.to_string()).collect();
        assert_eq!(created, listed);
    }

    #[test]
    fn backends_are_paired() {
        assert_eq!(POSTGRES.len(), SQLITE.len());
        for (p, s) in POSTGRES.iter().zip(SQLITE) {
            assert_eq!((p.version, p.name), (s.version, s.name));
        }
    }

    /// `outboxd-producer` embeds the same files with `sqlx::migrate!` (sqlx writes the name's
    /// underscores as spaces): a service's producer build and this daemon agree on the schema.
    #[test]
    fn the_producer_crate_embeds_the_same_migrations() {
        use outboxd_producer::migrations;
        for (ours, theirs) in [
            (POSTGRES, &migrations::POSTGRES),
            (SQLITE, &migrations::SQLITE),
        ] {
            let names: Vec<_> = theirs
                .iter()
                .map(|m| (m.version, m.description.replace(' ', "_")))
                .collect();
            let ours_names: Vec<_> = ours
                .iter()
                .map(|m| (m.version, m.name.to_string()))
                .collect();
            assert_eq!(ours_names, names);
            for (m, t) in ours.iter().zip(theirs.iter()) {
                assert!(
                    AsRef::<str>::as_ref(&m.sql) == AsRef::<str>::as_ref(&t.sql),
                    "migration {} ({}): the SQL differs",
                    m.version,
                    m.name
                );
            }
        }
        assert_eq!(expected_version(), migrations::expected_version());
    }
}
