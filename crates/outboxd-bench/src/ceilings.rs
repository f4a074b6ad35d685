//! The ceilings and the floor the end-to-end figure is compared with, measured in the same
//! run on the same database: a minimal batched queue on a plain table (raw), the
//! dispatcher's own claim → attempt → outcome statements without HTTP, the same HTTP
//! requests without a database, and a naive one-row-at-a-time dispatcher.

use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::stream::{self, StreamExt};

use super::cpu::CpuSample;
use super::report::Report;
use super::setup::{seed, BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd::action::AttemptClass;
use outboxd::intent::IntentId;
use outboxd::provider::{DeliveryRequest, ProviderClient, ProviderSettings};
use outboxd::store::{
    AttemptRecord, ClaimRequest, ClaimStore, Database, OutcomeRecord, Transition,
};
use outboxd_testkit::FakeProvider;

/// Intents per claim in every dispatcher-shaped measurement.
pub const BATCH: u32 = 100;
/// Concurrent lanes (claim → deliver → record loops); the daemon runs
/// `concurrency / batch_size` of them, so its config uses `concurrency = BATCH * LANES`.
pub const LANES: usize = 4;

fn claim_request(owner: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        owner: owner.into(),
        lease: Duration::from_secs(60),
        limit,
        actions: vec![ACTION.to_owned()],
        now: Utc::now(),
    }
}

fn delivered(intent_id: IntentId, fencing_token: i64) -> OutcomeRecord {
    OutcomeRecord {
        intent_id,
        fencing_token,
        attempt: Some(AttemptRecord {
            class: AttemptClass::Delivered,
            http_status: Some(200),
            error: None,
            provider_ref: Some(format!("ref_{intent_id}")),
            duration: Duration::from_millis(1),
            started_at: Utc::now(),
        }),
        transition: Transition::Delivered {
            provider_ref: Some(format!("ref_{intent_id}")),
        },
        now: Utc::now(),
    }
}

const RAW_PG: [&str; 3] = [
    "CREATE TABLE bench_raw_queue (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, payload JSONB NOT NULL)",
    "CREATE INDEX bench_raw_pending ON bench_raw_queue (id) WHERE state = 'pending'",
    "INSERT INTO bench_raw_queue (state, payload) SELECT 'pending', jsonb_build_object('n', g, 'amount', 1250, 'note', repeat('x', 160)) FROM generate_series(1, $1::bigint) g",
];

const RAW_SQLITE: [&str; 3] = [
    "CREATE TABLE bench_raw_queue (id INTEGER PRIMARY KEY, state TEXT NOT NULL, payload TEXT NOT NULL)",
    "CREATE INDEX bench_raw_pending ON bench_raw_queue (id) WHERE state = 'pending'",
    "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1) INSERT INTO bench_raw_queue (state, payload) SELECT 'pending', json_object('n', n, 'amount', 1250, 'note', printf('%.160c', 'x')) FROM g",
];

/// Claims and completes raw rows until none is left; returns how many it completed.
async fn raw_worker(db: Database) -> Result<usize, BenchError> {
    let mut done = 0usize;
    match &db {
        Database::Postgres(pool) => loop {
            let ids: Vec<i64> = sqlx::query_scalar(
                "WITH c AS (SELECT id FROM bench_raw_queue WHERE state = 'pending' ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED) \
                 UPDATE bench_raw_queue q SET state = 'in_flight' FROM c WHERE q.id = c.id RETURNING q.id",
            ).fetch_all(pool).await?;
            if ids.is_empty() {
                return Ok(done);
            }
            sqlx::query("UPDATE bench_raw_queue SET state = 'done' WHERE id = ANY($1)")
                .bind(&ids)
                .execute(pool)
                .await?;
            done += ids.len();
        },
        Database::Sqlite(pool) => loop {
            let ids: Vec<i64> = sqlx::query_scalar(
                "UPDATE bench_raw_queue SET state = 'in_flight' WHERE id IN (SELECT id FROM bench_raw_queue WHERE state = 'pending' ORDER BY id LIMIT 100) RETURNING id",
            ).fetch_all(pool).await?;
            if ids.is_empty() {
                return Ok(done);
            }
            let list = serde_json::to_string(&ids).unwrap_or_default();
            sqlx::query("UPDATE bench_raw_queue SET state = 'done' WHERE id IN (SELECT value FROM json_each(?1))").bind(list).execute(pool).await?;
            done += ids.len();
        },
    }
}

async fn raw_table(db: &Database, n: i64) -> Result<(), BenchError> {
    match db {
        Database::Postgres(pool) => {
            sqlx::query("DROP TABLE IF EXISTS bench_raw_queue")
                .execute(pool)
                .await?;
            sqlx::query(RAW_PG[0]).execute(pool).await?;
            sqlx::query(RAW_PG[1]).execute(pool).await?;
            sqlx::query(RAW_PG[2]).bind(n).execute(pool).await?;
            sqlx::query("ANALYZE bench_raw_queue").execute(pool).await?;
        }
        Database::Sqlite(pool) => {
            // One connection for the whole rebuild, so no statement runs against a schema
            // another connection has not seen change yet.
            let mut conn = pool.acquire().await?;
            sqlx::query("DROP INDEX IF EXISTS bench_raw_pending")
                .execute(&mut *conn)
                .await?;
            sqlx::query("DROP TABLE IF EXISTS bench_raw_queue")
                .execute(&mut *conn)
                .await?;
            sqlx::query(RAW_SQLITE[0]).execute(&mut *conn).await?;
            sqlx::query(RAW_SQLITE[1]).execute(&mut *conn).await?;
            sqlx::query(RAW_SQLITE[2])
                .bind(n)
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

/// The better of several runs of one ceiling, with how busy the machine was during it.
#[derive(Default)]
struct Best {
    rate: f64,
    busy: Option<f64>,
}

impl Best {
    /// Keeps `rate` if it beats the best so far, with the busy share since `cpu`.
    fn offer(&mut self, rate: f64, cpu: Option<CpuSample>) {
        if rate > self.rate {
            (self.rate, self.busy) = (rate, super::cpu::busy_since(cpu));
        }
    }

    /// Records the best rate as the ceiling `key`, and its busy share.
    fn record(&self, report: &mut Report, key: &str, label: &str, unit: &str) {
        report.value(key, label, self.rate, unit);
        report.busy(key, self.busy);
    }
}

/// (2a) The raw ceiling: one statement claims 100 due rows, one marks them done; with one
/// worker, and with as many workers as the dispatcher has lanes. The higher figure is the
/// ceiling the ratios use.
pub async fn raw_queue(options: &BenchOptions, report: &mut Report) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "raw").await?;
    let mut best = Best::default();
    for workers in [1, LANES] {
        raw_table(&bench.db, options.intents as i64).await?;
        let cpu = CpuSample::now();
        let start = Instant::now();
        let tasks: Vec<_> = (0..workers)
            .map(|_| tokio::spawn(raw_worker(bench.db.clone())))
            .collect();
        let mut done = 0;
        for t in tasks {
            done += t.await.map_err(|e| BenchError::Failed(e.to_string()))??;
        }
        let rate = done as f64 / start.elapsed().as_secs_f64();
        best.offer(rate, cpu);
        report.value(
            &format!("raw_db_{workers}"),
            &format!("(2a) raw DB: claim 100 + mark done, plain table, {workers} worker(s)"),
            rate,
            "rows/s",
        );
    }
    best.record(
        report,
        "raw_db",
        "(2a) raw DB ceiling (best of the above)",
        "rows/s",
    );
    bench.drop_now().await;
    Ok(())
}

/// What one (2b) lane did: intents finished, batches, and the wall time spent in the claim
/// and in the outcome write (waits for the database, its locks and the CPU included).
#[derive(Default)]
struct LaneTimes {
    done: usize,
    batches: usize,
    claim: Duration,
    outcome: Duration,
}

impl LaneTimes {
    fn add(&mut self, other: &LaneTimes) {
        self.done += other.done;
        self.batches += other.batches;
        self.claim += other.claim;
        self.outcome += other.outcome;
    }
}

async fn own_sql_lane(
    store: std::sync::Arc<dyn ClaimStore>,
    lane: usize,
) -> Result<LaneTimes, BenchError> {
    let owner = format!("bench-own-sql-{lane}");
    let mut times = LaneTimes::default();
    loop {
        let started = Instant::now();
        let claimed = store.claim_due(&claim_request(&owner, BATCH)).await?;
        if claimed.is_empty() {
            return Ok(times);
        }
        times.claim += started.elapsed();
        let outcomes: Vec<_> = claimed
            .iter()
            .map(|c| delivered(c.id, c.fencing_token))
            .collect();
        let recording = Instant::now();
        store.record_outcomes(&outcomes).await?;
        times.outcome += recording.elapsed();
        times.batches += 1;
        times.done += claimed.len();
    }
}

/// (2b) The dispatcher's own SQL: claim (attempt marked open) → record outcomes (attempt
/// rows), no HTTP; with one lane, and with as many concurrent lanes as the daemon runs. The
/// higher figure is the ceiling the ratios use, as for (2a). Each prints the mean wall time
/// of a claim and of an outcome write per batch, so lanes that only add waits show.
pub async fn own_sql(options: &BenchOptions, report: &mut Report) -> Result<(), BenchError> {
    let mut best = Best::default();
    for lanes in [1, LANES] {
        let bench = BenchDb::create(&options.database, "ownsql").await?;
        seed(&bench.db, options.intents, 0, "pending").await?;
        // Each lane has a dispatcher's own store, with its sessions on PostgreSQL: one
        // dispatcher runs one claim and one outcome group at a time, so more lanes on one
        // store would run on its pool instead, which no dispatcher does.
        let stores: Vec<_> = (0..lanes).map(|_| bench.db.claim_store()).collect();
        let cpu = CpuSample::now();
        let start = Instant::now();
        let tasks: Vec<_> = stores
            .into_iter()
            .enumerate()
            .map(|(lane, store)| tokio::spawn(own_sql_lane(store, lane)))
            .collect();
        let mut total = LaneTimes::default();
        for t in tasks {
            total.add(&t.await.map_err(|e| BenchError::Failed(e.to_string()))??);
        }
        let rate = total.done as f64 / start.elapsed().as_secs_f64().max(1e-9);
        best.offer(rate, cpu);
        let key = format!("own_sql_{lanes}");
        report.value(
            &key,
            &format!("(2b) dispatcher's own SQL, HTTP removed, {lanes} lane(s)"),
            rate,
            "per s",
        );
        let per_batch = |d: Duration| d.as_secs_f64() * 1000.0 / total.batches.max(1) as f64;
        report.value(
            &format!("{key}_claim_ms"),
            "    mean claim per batch (wall time, waits included)",
            per_batch(total.claim),
            "ms",
        );
        report.value(
            &format!("{key}_outcome_ms"),
            "    mean outcome write per batch (wall time, waits included)",
            per_batch(total.outcome),
            "ms",
        );
        bench.drop_now().await;
    }
    best.record(
        report,
        "own_sql",
        "(2b) own SQL ceiling (best of the above)",
        "per s",
    );
    Ok(())
}

/// A provider client for the benchmark's loopback provider.
pub fn client(provider: &FakeProvider) -> Result<ProviderClient, BenchError> {
    let base = provider
        .base_url()
        .parse()
        .map_err(|e| BenchError::Failed(format!("provider URL: {e}")))?;
    let mut settings = ProviderSettings::new("bench", base);
    settings.allow_private_addresses = true;
    ProviderClient::new(&settings).map_err(|e| BenchError::Failed(e.to_string()))
}

fn request(n: usize) -> DeliveryRequest {
    let payload = serde_json::json!({"n": n, "amount": 1250, "note": "x".repeat(160)});
    DeliveryRequest::json(
        reqwest::Method::POST,
        "/keyed/bench",
        format!("http-ceiling-{n}-{}", std::process::id()),
        &payload,
    )
}

/// How many times the HTTP ceiling is measured; the best run is the ceiling (a short run
/// on a shared 2-core machine varies by a third from one try to the next).
const HTTP_TRIES: usize = 3;

/// (3) The HTTP ceiling: the same requests to the same provider, no database; best of
/// [`HTTP_TRIES`] (the ratios use it: the higher ceiling is the stricter comparison). The
/// first run, which opens its connections as the end-to-end run does, is printed too.
pub async fn http(
    options: &BenchOptions,
    provider: &FakeProvider,
    report: &mut Report,
) -> Result<(), BenchError> {
    let client = client(provider)?;
    let (mut best, mut best_busy): (f64, Option<f64>) = (0.0, None);
    for attempt in 0..HTTP_TRIES {
        let cpu = CpuSample::now();
        let start = Instant::now();
        let ok = stream::iter(0..options.intents)
            .map(|n| {
                let client = &client;
                async move { client.send(&request(n)).await }
            })
            .buffer_unordered(BATCH as usize * LANES)
            .filter(|o| {
                std::future::ready(matches!(
                    o,
                    outboxd::provider::Observation::Response { status: 200, .. }
                ))
            })
            .count()
            .await;
        let rate = ok as f64 / start.elapsed().as_secs_f64().max(1e-9);
        if attempt == 0 {
            report.value(
                "http_cold",
                "(3) HTTP, first run (opens its connections, as end-to-end does)",
                rate,
                "per s",
            );
        }
        if rate > best {
            (best, best_busy) = (rate, super::cpu::busy_since(cpu));
        }
    }
    report.value(
        "http",
        &format!("(3) HTTP ceiling, database removed (best of {HTTP_TRIES})"),
        best,
        "per s",
    );
    report.busy("http", best_busy);
    Ok(())
}

/// (4) The floor: claim one row, send, record, repeat.
pub async fn naive(
    options: &BenchOptions,
    provider: &FakeProvider,
    report: &mut Report,
) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "naive").await?;
    let n = options.intents.min(3000);
    seed(&bench.db, n, 0, "pending").await?;
    let store = bench.db.store();
    let client = client(provider)?;
    let start = Instant::now();
    let mut done = 0;
    loop {
        let claimed = store.claim_due(&claim_request("bench-naive", 1)).await?;
        let Some(c) = claimed.first() else { break };
        let path = "/keyed/naive".to_owned();
        let _ = client
            .send(&DeliveryRequest {
                method: reqwest::Method::POST,
                path,
                idempotency_key: c.idempotency_key.as_str().to_owned(),
                body: c.payload.bytes().expect("seeded payloads are text"),
            })
            .await;
        store
            .record_outcomes(&[delivered(c.id, c.fencing_token)])
            .await?;
        done += 1;
    }
    report.rate(
        "naive",
        "(4) naive floor: one row at a time, sequential HTTP",
        done,
        start.elapsed(),
    );
    bench.drop_now().await;
    Ok(())
}
