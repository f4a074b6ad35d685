//! The daemon's connection pool is opened full: no claim or outcome write waits for a new
//! connection to be opened (a TLS handshake with PostgreSQL costs about as much as ninety
//! claims).

use crate::support::TestDb;

async fn the_dispatcher_pool_opens_full(t: &TestDb) {
    let db = outboxd::store::connect_dispatcher(&t.url, 5).await.unwrap();
    let stats = db.pool_stats();
    assert_eq!(
        (stats.open, stats.max),
        (5, 5),
        "every connection is open before the dispatcher starts: {stats:?}"
    );
    db.close().await;
}

/// A command's pool (here `outboxd status` or a library caller) still grows on demand.
async fn a_command_pool_opens_on_demand(t: &TestDb) {
    let db = outboxd::store::connect(&t.url, 5).await.unwrap();
    assert!(db.pool_stats().open < 5, "{:?}", db.pool_stats());
    db.close().await;
}

both_backends!(
    the_dispatcher_pool_opens_full,
    a_command_pool_opens_on_demand,
);

/// A server that grants the daemon fewer connections than `database.max_connections` stops
/// the start with the count and what to change; a pool short of connections would make
/// every claim that finds none idle wait out the acquire timeout. (PostgreSQL only: SQLite
/// has no server to refuse a connection.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_granting_fewer_connections_stops_the_start_with_the_count() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let Some(rest) = t.url.strip_prefix("postgres://postgres@") else {
        crate::support::db::skip_or_fail(&format!(
            "{}: the connection-limit test needs a URL of the role postgres",
            t.url
        ));
        return;
    };
    let role = crate::support::db::unique_name("obxlimited");
    let outboxd::store::Database::Postgres(admin) = &t.db else {
        unreachable!()
    };
    let ddl = format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 2");
    sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(admin)
        .await
        .unwrap();
    let url = format!("postgres://{role}@{rest}");
    let result = outboxd::store::connect_dispatcher(&url, 4).await;
    let drop_role = format!("DROP ROLE {role}");
    let _ = sqlx::query(sqlx::AssertSqlSafe(drop_role))
        .execute(admin)
        .await;
    match result {
        Err(e @ outboxd::store::connect::ConnectError::PoolShort { open, wanted, .. }) => {
            assert_eq!((open, wanted), (2, 4));
            let message = e.to_string();
            assert!(message.contains("opened 2 of the 4"), "{message}");
            assert!(message.contains("database.max_connections"), "{message}");
        }
        Err(other) => panic!("expected PoolShort, got {other}"),
        Ok(_) => panic!("a pool of 4 opened on a role limited to 2 connections"),
    }
}
