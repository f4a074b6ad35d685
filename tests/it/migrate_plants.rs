//! `outboxd migrate` on PostgreSQL against objects planted where its statements resolve
//! names. Migrations 0003, 0010 and 0011 call built-ins unqualified (`convert_to(…,
//! 'UTF8')` while making the installation's key secret, `format(…, current_schema())`,
//! `quote_ident(current_schema())` spliced into SECURITY DEFINER bodies), and a function
//! whose parameters fit such a call better than the built-in's runs with the migrating
//! role's rights. A run searches only the schema it migrates, refuses one that holds such
//! an object, and refuses while other roles may create one there during the run.

use crate::support;
use sqlx::AssertSqlSafe;

use outboxd::store::migrate::{
    current_version_postgres, expected_version, migrate_postgres, migrate_postgres_to, MigrateError,
};
use outboxd::store::Database;
use support::db::unique_name;
use support::TestDb;

/// Plants that outbid the built-ins the old migrations call, each noting its call in
/// `{schema}.planted_calls` and then doing what the built-in would.
fn plants(schema: &str) -> Vec<String> {
    vec![
        format!("CREATE TABLE {schema}.planted_calls (f text)"),
        format!(
            "CREATE FUNCTION {schema}.convert_to(t text, enc text) RETURNS bytea LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO {schema}.planted_calls VALUES ('convert_to ' || t); \
             RETURN pg_catalog.convert_to(t, enc::name); END $$"
        ),
        format!(
            "CREATE FUNCTION {schema}.format(f text, a name) RETURNS text LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO {schema}.planted_calls VALUES ('format'); \
             RETURN pg_catalog.format(f, a); END $$"
        ),
        format!(
            "CREATE FUNCTION {schema}.quote_ident(n name) RETURNS text LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO {schema}.planted_calls VALUES ('quote_ident'); \
             RETURN pg_catalog.quote_ident(n::text); END $$"
        ),
    ]
}

async fn exec(pool: &sqlx::PgPool, sqls: impl IntoIterator<Item = String>) {
    for sql in sqls {
        sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

async fn planted_calls(pool: &sqlx::PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT f FROM {schema}.planted_calls ORDER BY f"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
}

fn pg(db: &Database) -> &sqlx::PgPool {
    let Database::Postgres(pool) = db else {
        unreachable!()
    };
    pool
}

/// A schema that already holds functions outbidding the built-ins (and an operator
/// `oid = int4`) is refused before any migration runs, naming each; nothing planted runs,
/// nothing is applied; once they are dropped the same run succeeds.
#[tokio::test]
async fn migrate_refuses_a_schema_holding_functions_that_outbid_builtins() {
    let Some(t) = TestDb::postgres_at(0).await else {
        return;
    };
    let pool = pg(&t.db);
    let schema = t.schema().unwrap().to_owned();
    exec(pool, plants(&schema)).await;
    exec(
        pool,
        [
            format!(
                "CREATE FUNCTION {schema}.planted_eq(a oid, b int4) RETURNS bool LANGUAGE sql \
                 AS $$ SELECT a OPERATOR(pg_catalog.=) b::oid $$"
            ),
            format!(
                "CREATE OPERATOR {schema}.= (leftarg = oid, rightarg = int4, function = {schema}.planted_eq)"
            ),
        ],
    )
    .await;

    let err = migrate_postgres(pool).await.unwrap_err();
    let MigrateError::ShadowingObjects {
        schema: named,
        objects,
    } = &err
    else {
        panic!("expected a refusal, got {err}");
    };
    assert_eq!(named, &schema);
    for object in [
        "function convert_to(text,text)",
        "function format(text,name)",
        "function quote_ident(name)",
        "operator =(oid,integer)",
    ] {
        assert!(
            objects
                .iter()
                .any(|o| o.ends_with(object.split_once(' ').unwrap().1)
                    && o.starts_with(object.split_once(' ').unwrap().0)),
            "{object} not named in {objects:?}"
        );
    }
    // The functions outboxd's own migrations would create are not among them, nor is the
    // planted operator's function (no built-in has its name).
    assert_eq!(objects.len(), 4, "{objects:?}");
    let text = err.to_string();
    assert!(
        text.contains("refusing to migrate schema") && text.contains("drop them"),
        "{text}"
    );
    assert_eq!(current_version_postgres(pool).await.unwrap(), 0);
    assert_eq!(planted_calls(pool, &schema).await, Vec::<String>::new());

    exec(
        pool,
        [
            format!("DROP OPERATOR {schema}.= (oid, int4)"),
            format!("DROP FUNCTION {schema}.convert_to(text, text)"),
            format!("DROP FUNCTION {schema}.format(text, name)"),
            format!("DROP FUNCTION {schema}.quote_ident(name)"),
        ],
    )
    .await;
    let report = migrate_postgres(pool).await.unwrap();
    assert_eq!(report.version, expected_version());
}

/// Plants in another schema on the session's path (`public` with PostgreSQL 14's default
/// privileges, for one) are not searched by a run: nothing planted runs while the
/// installation secret is made or the functions are written, and no function body names
/// the plants.
#[tokio::test]
async fn migrate_searches_only_the_schema_it_migrates() {
    let Some(t) = TestDb::postgres_at(0).await else {
        return;
    };
    let pool = pg(&t.db);
    let schema = t.schema().unwrap().to_owned();
    let plant_schema = unique_name("obxt_plants");
    exec(pool, [format!("CREATE SCHEMA {plant_schema}")]).await;
    exec(pool, plants(&plant_schema)).await;

    let url = t.url_searching(&[&schema, &plant_schema]);
    let with_plants = outboxd::store::connect(&url, 2).await.unwrap();
    let session = pg(&with_plants);
    // The plants do win the old migrations' calls on this path.
    let won: String = sqlx::query_scalar(
        "SELECT encode(convert_to('probe', 'UTF8'), 'escape') || quote_ident(current_schema())",
    )
    .fetch_one(session)
    .await
    .unwrap();
    assert_eq!(won, format!("probe{schema}"));
    assert_eq!(
        planted_calls(pool, &plant_schema).await,
        ["convert_to probe", "quote_ident"]
    );
    exec(pool, [format!("DELETE FROM {plant_schema}.planted_calls")]).await;

    let report = migrate_postgres(session).await.unwrap();
    assert_eq!(report.version, expected_version());
    let calls = planted_calls(pool, &plant_schema).await;
    let naming: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
          WHERE n.nspname = '{schema}' AND p.prosrc LIKE '%{plant_schema}%' ORDER BY 1"
    )))
    .fetch_all(pool)
    .await
    .unwrap();
    with_plants.close().await;
    exec(pool, [format!("DROP SCHEMA {plant_schema} CASCADE")]).await;
    assert_eq!(calls, Vec::<String>::new(), "a planted function ran");
    assert_eq!(
        naming,
        Vec::<String>::new(),
        "a function body names the plants"
    );
}

/// While roles other than the owner may create objects in the schema, a run with pending
/// migrations refuses and names them and the statement that stops it (a function created
/// during the run could not be caught beforehand); `--allow-schema-creators` accepts the
/// risk. With nothing pending the run only warns, as before.
#[tokio::test]
async fn migrate_refuses_while_other_roles_may_create_in_the_schema() {
    use support::cli::Cli;

    let Some(t) = TestDb::postgres_at(expected_version() - 1).await else {
        return;
    };
    let pool = pg(&t.db);
    let schema = t.schema().unwrap().to_owned();
    exec(pool, [format!("GRANT CREATE ON SCHEMA {schema} TO PUBLIC")]).await;

    let err = migrate_postgres(pool).await.unwrap_err();
    assert!(
        matches!(&err, MigrateError::SchemaCreators { roles, .. } if roles == &["PUBLIC"]),
        "{err}"
    );
    assert_eq!(
        current_version_postgres(pool).await.unwrap(),
        expected_version() - 1
    );
    let cli = Cli::new(&t);
    let stderr = cli.fails(&["migrate"]).await;
    assert!(
        stderr.contains(&format!(
            "refusing to migrate schema {schema}: roles other than the migrating role may create objects in it (PUBLIC)"
        )) && stderr.contains(&format!("REVOKE CREATE ON SCHEMA {schema} FROM the role"))
            && stderr.contains("--allow-schema-creators"),
        "{stderr}"
    );
    assert_eq!(
        current_version_postgres(pool).await.unwrap(),
        expected_version() - 1
    );

    let (_, stderr) = cli.exits(&["migrate", "--allow-schema-creators"], 0).await;
    assert!(
        stderr.contains("warning: roles other than its owner may create objects"),
        "{stderr}"
    );
    assert_eq!(
        current_version_postgres(pool).await.unwrap(),
        expected_version()
    );
    let (_, stderr) = cli.exits(&["migrate"], 0).await;
    assert!(stderr.contains("(0 applied now)"), "{stderr}");
}

/// Another role's objects are refused even where no built-in shares their name: an
/// overload of one of outboxd's own functions, and a view standing in for outboxd's
/// bookkeeping table (read by every run before anything else).
#[tokio::test]
async fn migrate_refuses_objects_of_other_roles_in_outboxd_names() {
    let Some(t) = TestDb::postgres_at(expected_version() - 1).await else {
        return;
    };
    let pool = pg(&t.db);
    let schema = t.schema().unwrap().to_owned();
    // Roles are the server's; this one is shared by every run and has no login.
    exec(
        pool,
        [
            "DO $$ BEGIN CREATE ROLE outboxd_it_planter NOLOGIN; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
                .to_owned(),
            format!(
                "CREATE FUNCTION {schema}.outbox_check_text(t text) RETURNS void \
                 LANGUAGE sql AS $$ SELECT $$"
            ),
            format!("ALTER FUNCTION {schema}.outbox_check_text(text) OWNER TO outboxd_it_planter"),
        ],
    )
    .await;
    let err = migrate_postgres(pool).await.unwrap_err();
    assert!(
        matches!(&err, MigrateError::ShadowingObjects { objects, .. }
                 if objects.len() == 1 && objects[0].contains("outbox_check_text(text)")),
        "{err}"
    );
    exec(
        pool,
        [format!("DROP FUNCTION {schema}.outbox_check_text(text)")],
    )
    .await;

    let Some(fresh) = TestDb::postgres_at(0).await else {
        return;
    };
    let pool = pg(&fresh.db);
    let schema = fresh.schema().unwrap().to_owned();
    exec(
        pool,
        [
            format!("CREATE TABLE {schema}.planted_calls (f text)"),
            format!(
                "CREATE FUNCTION {schema}.planted() RETURNS bool LANGUAGE plpgsql AS \
                 $$ BEGIN INSERT INTO {schema}.planted_calls VALUES ('view'); RETURN true; END $$"
            ),
            format!("DROP TABLE {schema}.outboxd_schema_migrations"),
            format!(
                "CREATE VIEW {schema}.outboxd_schema_migrations AS \
                 SELECT 1::bigint AS version, 'x'::text AS checksum WHERE {schema}.planted()"
            ),
            format!("ALTER VIEW {schema}.outboxd_schema_migrations OWNER TO outboxd_it_planter"),
        ],
    )
    .await;
    let err = migrate_postgres_to(pool, 0).await.unwrap_err();
    assert!(
        matches!(&err, MigrateError::ForeignBookkeeping { owner, .. } if owner == "outboxd_it_planter"),
        "{err}"
    );
    assert_eq!(planted_calls(pool, &schema).await, Vec::<String>::new());
}

/// A role that owns an extension may add its own function to it (`ALTER EXTENSION … ADD`):
/// such a member is still refused; only members a superuser owns are left out.
#[tokio::test]
async fn migrate_refuses_a_plant_added_to_an_extension() {
    let Some(own) = TestDb::postgres_own_database().await else {
        return;
    };
    let admin = pg(&own.db);
    // Roles are the server's; this one is shared by every run and has no login.
    exec(
        admin,
        [
            "DO $$ BEGIN CREATE ROLE outboxd_it_planter NOLOGIN; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
                .to_owned(),
            "CREATE SCHEMA fresh".to_owned(),
            "CREATE SCHEMA ext".to_owned(),
            "CREATE EXTENSION tcn SCHEMA ext".to_owned(),
        ],
    )
    .await;
    exec(admin, plants("fresh").into_iter().take(2)).await;
    exec(
        admin,
        [
            "ALTER FUNCTION fresh.convert_to(text, text) OWNER TO outboxd_it_planter".to_owned(),
            "ALTER EXTENSION tcn ADD FUNCTION fresh.convert_to(text, text)".to_owned(),
        ],
    )
    .await;
    let sep = if own.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-c%20search_path%3Dfresh", own.url);
    let db = outboxd::store::connect(&url, 2).await.unwrap();
    let err = migrate_postgres(pg(&db)).await.unwrap_err();
    db.close().await;
    assert!(
        matches!(&err, MigrateError::ShadowingObjects { objects, .. }
                 if objects == &["function convert_to(text,text)"]),
        "{err}"
    );
    assert_eq!(planted_calls(admin, "fresh").await, Vec::<String>::new());
}

/// A role that may act as the schema's owner (a member of the owning role) may create
/// objects there whatever the grants say: it is named like a grantee, and the run refuses.
#[tokio::test]
async fn migrate_refuses_while_members_of_the_owner_may_create_in_the_schema() {
    let Some(t) = TestDb::postgres_at(expected_version() - 1).await else {
        return;
    };
    let pool = pg(&t.db);
    let schema = t.schema().unwrap().to_owned();
    // Roles are the server's; these are shared by every run (the member's login is never
    // used: it only has to be able to log in).
    exec(
        pool,
        [
            "DO $$ BEGIN CREATE ROLE outboxd_it_schema_owner NOLOGIN; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
                .to_owned(),
            "DO $$ BEGIN CREATE ROLE outboxd_it_owner_member LOGIN IN ROLE outboxd_it_schema_owner; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
                .to_owned(),
            format!("ALTER SCHEMA {schema} OWNER TO outboxd_it_schema_owner"),
        ],
    )
    .await;
    let err = migrate_postgres(pool).await.unwrap_err();
    assert!(
        matches!(&err, MigrateError::SchemaCreators { roles, .. }
                 if roles == &["outboxd_it_owner_member (may act as the owner, outboxd_it_schema_owner)"]),
        "{err}"
    );
    assert_eq!(
        current_version_postgres(pool).await.unwrap(),
        expected_version() - 1
    );
}

/// A session whose search_path names pg_catalog after another schema would let a function
/// of a built-in's very name and argument types there run in place of it, in any statement
/// of outboxd's: every command refuses to open such a database, naming the path.
#[tokio::test]
async fn a_search_path_with_pg_catalog_after_another_schema_is_refused() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let schema = t.schema().unwrap().to_owned();
    let Err(err) = outboxd::store::connect(&t.url_searching(&[&schema, "pg_catalog"]), 2).await
    else {
        panic!("a search_path with pg_catalog second was accepted");
    };
    let text = err.to_string();
    assert!(
        text.contains(&format!("its sessions' search_path is {schema},pg_catalog"))
            && text.contains("pg_catalog searched first"),
        "{text}"
    );
    // A schema the session cannot see yet (missing, or without USAGE) counts too: it could
    // be created or granted while the pool's sessions live.
    let missing = unique_name("obxt_missing");
    let Err(err) =
        outboxd::store::connect(&t.url_searching(&[&missing, "pg_catalog", &schema]), 2).await
    else {
        panic!("a search_path with a missing schema before pg_catalog was accepted");
    };
    assert!(
        err.to_string().contains("pg_catalog searched first"),
        "{err}"
    );
    let first = outboxd::store::connect(&t.url_searching(&["pg_catalog", &schema]), 2)
        .await
        .unwrap();
    first.close().await;
}

/// A function created by a transaction still open when the run checked (invisible to the
/// check, and not stopped by a REVOKE) and committed while the run waits on that
/// transaction's lock is found before the next migration: the run is refused and rolled
/// back whole, and the plant never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plant_committed_during_the_run_undoes_it() {
    // A database of its own: the run holds outboxd's advisory lock, per database, while it
    // waits, and other tests' runs would wait behind it.
    let Some(own) = TestDb::postgres_own_database().await else {
        return;
    };
    let pool = pg(&own.db);
    let schema = "fresh".to_owned();
    exec(pool, [format!("CREATE SCHEMA {schema}")]).await;
    let sep = if own.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-c%20search_path%3D{schema}", own.url);
    exec(pool, plants(&schema).into_iter().take(1)).await;
    let mut planter = pool.acquire().await.unwrap();
    let planter_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *planter)
        .await
        .unwrap();
    for sql in [
        "BEGIN".to_owned(),
        plants(&schema)[1].clone(),
        // Holds the name 0001 creates first, so the run waits for this transaction.
        format!("CREATE TABLE {schema}.outbox_intents (x int)"),
        format!("DROP TABLE {schema}.outbox_intents"),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *planter)
            .await
            .unwrap();
    }
    let db = outboxd::store::connect(&url, 2).await.unwrap();
    let run = tokio::spawn(async move {
        let Database::Postgres(pool) = &db else {
            unreachable!()
        };
        migrate_postgres(pool).await
    });
    // Wait until the run waits on the planter's lock.
    let mut waited = false;
    for _ in 0..800 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l \
              WHERE NOT l.granted AND $1 = ANY(pg_blocking_pids(l.pid))",
        )
        .bind(planter_pid)
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting > 0 {
            waited = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    sqlx::query("COMMIT").execute(&mut *planter).await.unwrap();
    drop(planter);
    let err = run.await.unwrap().unwrap_err();
    assert!(waited, "the run never waited on the planter ({err})");
    assert!(
        matches!(&err, MigrateError::ShadowingObjects { objects, .. }
                 if objects == &["function convert_to(text,text)"]),
        "{err}"
    );
    assert_eq!(planted_calls(pool, &schema).await, Vec::<String>::new());
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
          WHERE n.nspname = 'fresh' AND c.relname LIKE 'outbox%'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(tables, 0, "the run was not rolled back");
}
