//! The schema compatibility window at start: a binary runs against its own schema and the
//! next one (a newer release has migrated; during a rollout or after a rollback), and
//! refuses an older schema ("run outboxd migrate") or one two versions ahead. Its
//! `outboxd migrate` (an init container of the previous release) succeeds on the next
//! schema without changing it.

use crate::support;

use outboxd::daemon::{check_schema, DaemonError};
use outboxd::store::compat::{SchemaFit, SchemaMismatch};
use outboxd::store::migrate::{expected_version, POSTGRES};
use support::harness::{exec, scalar};
use support::TestDb;

/// Records a migration this build does not know, as a newer release would have.
async fn record_future_migration(t: &TestDb, version: i64) {
    exec(
        &t.db,
        &format!(
            "INSERT INTO outboxd_schema_migrations (version, name, checksum, applied_at) \
             VALUES ({version}, 'from_a_newer_release', 'x', 0)"
        ),
        &format!(
            "INSERT INTO outboxd_schema_migrations (version, name, checksum) \
             VALUES ({version}, 'from_a_newer_release', 'x')"
        ),
    )
    .await;
}

async fn own_schema_starts(t: &TestDb) {
    assert_eq!(check_schema(&t.db).await.unwrap(), SchemaFit::Current);
}

async fn next_schema_starts_and_migrate_leaves_it(t: &TestDb) {
    let expected = expected_version();
    record_future_migration(t, expected + 1).await;
    assert_eq!(check_schema(&t.db).await.unwrap(), SchemaFit::OneAhead);

    let report = t.db.migrate().await.expect("migrate inside the window");
    assert!(report.applied.is_empty(), "{:?}", report.applied);
    assert_eq!(report.version, expected + 1);
    let rows = scalar(&t.db, "SELECT count(*) FROM outboxd_schema_migrations").await;
    let embedded = i64::try_from(POSTGRES.len()).unwrap();
    assert_eq!(rows, embedded + 1, "migrate changed the bookkeeping");
}

async fn schema_two_ahead_is_refused(t: &TestDb) {
    let expected = expected_version();
    record_future_migration(t, expected + 1).await;
    record_future_migration(t, expected + 2).await;
    let err = check_schema(&t.db).await.unwrap_err();
    let DaemonError::Schema(mismatch) = &err else {
        panic!("not a schema error: {err}")
    };
    assert_eq!(
        *mismatch,
        SchemaMismatch::TooNew {
            found: expected + 2,
            expected
        }
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("version {}", expected + 2)),
        "{message}"
    );
    assert!(
        t.db.migrate().await.is_err(),
        "migrate ran two versions ahead"
    );
}

async fn older_schema_is_refused_with_the_fix(t: &TestDb) {
    let expected = expected_version();
    let delete = format!("DELETE FROM outboxd_schema_migrations WHERE version = {expected}");
    exec(&t.db, &delete, &delete).await;
    let previous = POSTGRES[POSTGRES.len() - 2].version;
    let err = check_schema(&t.db).await.unwrap_err();
    assert!(
        matches!(
            err,
            DaemonError::Schema(SchemaMismatch::Behind { found, .. }) if found == previous
        ),
        "{err}"
    );
    assert!(err.to_string().contains("run `outboxd migrate`"), "{err}");
}

both_backends!(
    own_schema_starts,
    next_schema_starts_and_migrate_leaves_it,
    schema_two_ahead_is_refused,
    older_schema_is_refused_with_the_fix,
);
