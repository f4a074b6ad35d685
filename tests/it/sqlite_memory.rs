//! `sqlite::memory:` (the example configuration's URL for trying outboxd out) is a
//! shared-cache database: a connection that meets a table another pooled connection has
//! locked must wait for it (SQLite's unlock notification), not fail with "database table
//! is locked".

use std::time::Duration;

use outboxd::store::{connect, Database};

#[tokio::test]
async fn a_reader_waits_for_a_writer_on_an_in_memory_database() {
    let db = connect("sqlite::memory:", 4).await.expect("connect");
    let Database::Sqlite(pool) = &db else {
        unreachable!("a sqlite URL opens SQLite")
    };
    sqlx::query("CREATE TABLE t (x INTEGER)")
        .execute(pool)
        .await
        .unwrap();
    let mut writer = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO t VALUES (1)")
        .execute(&mut *writer)
        .await
        .unwrap();
    let reader = {
        let pool = pool.clone();
        tokio::spawn(async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM t")
                .fetch_one(&pool)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    writer.commit().await.unwrap();
    let read = reader.await.unwrap();
    assert_eq!(read.map_err(|e| e.to_string()), Ok(1));
}
