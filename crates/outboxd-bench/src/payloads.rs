//! Large payloads: the dispatcher's memory while every request slot holds an intent whose
//! payload is near the 256 KiB limit. A producer may write such payloads (hostile or
//! careless: a long array of small numbers is the densest shape), and the shipped defaults
//! keep `concurrency` of them in flight; what one in-flight intent costs the daemon is
//! what bounds its memory then. The provider answers after [`LATENCY`], so the slots fill;
//! the figures are the daemon's peak RSS, the most requests the provider saw at once, and
//! the peak RSS above the small-payload drain's (same run, [`super::e2e`]) per request in
//! flight, against the payload's size. Then, with those intents delivered (their payloads
//! kept), what one listing of them costs: the admin API's largest page (500 rows) read
//! through the store in this process, its RSS growth against the payload text it holds.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::daemon::{config, Daemon, ProviderSpec};
use super::measure::{delivered_sql, wait_count};
use super::report::Report;
use super::setup::{BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd::store::{Database, IntentFilter};
use outboxd_testkit::{FakeProvider, FakeProviderOptions};

/// How long the provider takes to answer: long enough for the claims to fill every slot.
const LATENCY: Duration = Duration::from_secs(2);

/// Elements of the payload's `pad` array of zeros: `[0,0,…]` is 2 bytes per element, so
/// the canonical payload is about 248,000 bytes, under the 262,144-byte limit.
const PAD_ELEMENTS: i64 = 124_000;

/// The payload's size in canonical form (`{"n":<n>,"pad":[0,…]}`), bytes, for a short `n`.
fn payload_bytes() -> f64 {
    (PAD_ELEMENTS * 2 + 1 + r#"{"n":100,"pad":}"#.len() as i64) as f64
}

/// Inserts `count` pending intents with the large payload. PostgreSQL: with the schema's
/// triggers off for this session (`session_replication_role = replica`), as
/// [`super::setup`] seeds history: the insert trigger's canonical-JSON check of a
/// 124,000-element array in PL/pgSQL would take most of the run, and the columns it would
/// fill are given here.
async fn seed_large(bench: &BenchDb, count: usize) -> Result<(), BenchError> {
    match &bench.db {
        Database::Postgres(_) => {
            let mut conn = PgConnection::connect(&bench.url).await?;
            sqlx::query("SET session_replication_role = replica")
                .execute(&mut conn)
                .await?;
            sqlx::query(
                "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
                 idempotency_key, state, next_attempt_at, created_at, attempt_count) \
                 SELECT 'bench', 'big-' || g, $1, jsonb_build_object('n', g, 'pad', p.pad), \
                 encode(sha256(convert_to('big-' || g, 'UTF8')), 'hex'), 'big-key-' || g, \
                 'pending', now(), now(), 0 \
                 FROM generate_series(1, $2::bigint) g, \
                      (SELECT jsonb_agg(0) AS pad FROM generate_series(1, $3::bigint)) p",
            )
            .bind(ACTION)
            .bind(count as i64)
            .bind(PAD_ELEMENTS)
            .execute(&mut conn)
            .await?;
            sqlx::query("ANALYZE outbox_intents")
                .execute(&mut conn)
                .await?;
            conn.close().await?;
        }
        Database::Sqlite(pool) => {
            sqlx::query(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2), \
                 z(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM z WHERE i < ?3), \
                 pad(p) AS (SELECT json_group_array(0) FROM z) \
                 INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
                 idempotency_key, state, next_attempt_at, created_at, updated_at, attempt_count) \
                 SELECT 'bench', 'big-' || n, ?1, json_object('n', n, 'pad', json(pad.p)), \
                 lower(hex(randomblob(32))), 'big-key-' || n, 'pending', ?4, ?4, ?4, 0 \
                 FROM g, pad",
            )
            .bind(ACTION)
            .bind(count as i64)
            .bind(PAD_ELEMENTS)
            .bind(chrono::Utc::now().timestamp_millis())
            .execute(pool)
            .await?;
        }
    }
    Ok(())
}

/// Drains `count` large-payload intents at the shipped defaults and records the figures.
pub async fn run(
    options: &BenchOptions,
    count: usize,
    report: &mut Report,
) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "payloads").await?;
    let provider = FakeProvider::start(FakeProviderOptions {
        record_requests: false,
        ..FakeProviderOptions::default()
    })?;
    provider.set_latency(LATENCY);
    seed_large(&bench, count).await?;
    let spec = ProviderSpec::bench(provider.base_url());
    let daemon = Daemon::start(&options.daemon_binary, &config(&bench.url, "", &[spec]))?;
    let pid = daemon.id();
    let waited = wait_count(
        &bench.db,
        &delivered_sql(ACTION),
        count as i64,
        Duration::from_secs(600),
    )
    .await;
    let rss_mib = super::e2e::peak_rss_kib(pid) as f64 / 1024.0;
    daemon.stop();
    waited?;
    let in_flight = provider.max_concurrent_requests() as f64;
    let kib = payload_bytes() / 1024.0;
    report.value(
        "big_rss",
        &format!("(7) peak RSS draining {count} intents of {kib:.0} KiB (provider: 2 s)"),
        rss_mib,
        "MiB",
    );
    report.value(
        "big_in_flight",
        "    most requests in flight at once",
        in_flight,
        "",
    );
    if let Some(small) = report.get("rss") {
        report.value(
            "big_per_request",
            "    RSS over the small drain per request in flight / payload size",
            (rss_mib - small).max(0.0) * 1024.0 / in_flight.max(1.0) / kib,
            "×",
        );
    }
    let (grown_mib, text_mib, rows) = listing_rss(&bench.db).await?;
    report.value(
        "big_list_rss",
        &format!("    RSS growth holding one listing of {rows} of them (the API's largest page)"),
        grown_mib,
        "MiB",
    );
    report.value(
        "big_list_per_text",
        "    that growth / the payload text listed",
        grown_mib / text_mib.max(f64::EPSILON),
        "×",
    );
    bench.drop_now().await;
    provider.shutdown().await;
    Ok(())
}

/// The admin API's largest page of intents (`limit = 500`).
const LARGEST_PAGE: u32 = 500;

/// Reads [`LARGEST_PAGE`] intents through the store, as `GET /v1/intents` does, and gives
/// this process's peak RSS growth while holding them, the payload text they hold (both
/// MiB) and the rows read. The peak is reset first (`/proc/self/clear_refs`), so earlier
/// work in this process does not count; memory this process freed earlier and kept can
/// hide part of the growth, so the figure is a lower bound.
async fn listing_rss(db: &Database) -> Result<(f64, f64, usize), BenchError> {
    let me = std::process::id();
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = super::e2e::peak_rss_kib(me);
    let rows = db
        .store()
        .list_intents(&IntentFilter {
            limit: LARGEST_PAGE,
            ..IntentFilter::default()
        })
        .await?;
    let grown = super::e2e::peak_rss_kib(me).saturating_sub(before) as f64 / 1024.0;
    let text: usize = rows.iter().map(|r| r.payload.stored_len()).sum();
    Ok((grown, text as f64 / 1024.0 / 1024.0, rows.len()))
}
