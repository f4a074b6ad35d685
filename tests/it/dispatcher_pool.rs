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
