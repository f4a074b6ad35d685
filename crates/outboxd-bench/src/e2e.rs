//! End-to-end throughput of the real daemon at its shipped defaults: `outboxd run` as a child process drains
//! pre-seeded intents to the loopback provider; the rate is taken from the database (first
//! attempt start to last recorded outcome), and the child's peak RSS and CPU time from
//! `/proc`. Shapes: an empty table, a large finished history, a large backlog, and a
//! REPEATABLE READ transaction held open by another client.

use sqlx::AssertSqlSafe;
use std::time::{Duration, Instant};

use super::daemon::Daemon;
use super::report::Report;
use super::setup::{seed, BenchDb};
use super::{BenchError, BenchOptions};
use outboxd::store::Database;
use outboxd_testkit::FakeProvider;

/// What the table holds when the drain starts.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// Only the intents to drain.
    Empty,
    /// Plus this many finished intents.
    History(usize),
    /// This many due intents; the rate over the first `intents` is measured.
    Backlog(usize),
    /// A REPEATABLE READ transaction is held open for this many seconds by another client.
    LongTransaction(u64),
}

/// The shipped defaults, one provider (what a user who does not tune runs).
fn config(url: &str, provider: &FakeProvider) -> String {
    super::daemon::config(
        url,
        "",
        &[super::daemon::ProviderSpec::bench(provider.base_url())],
    )
}

fn start_daemon(
    options: &BenchOptions,
    url: &str,
    provider: &FakeProvider,
) -> Result<Daemon, BenchError> {
    Daemon::start(&options.daemon_binary, &config(url, provider))
}

/// Peak RSS (KiB) of a running process, from /proc.
pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn count(db: &Database, sql: &str) -> Result<i64, BenchError> {
    Ok(match db {
        Database::Postgres(pool) => {
            sqlx::query_scalar(AssertSqlSafe(sql))
                .fetch_one(pool)
                .await?
        }
        Database::Sqlite(pool) => {
            sqlx::query_scalar(AssertSqlSafe(sql))
                .fetch_one(pool)
                .await?
        }
    })
}

/// Milliseconds from the first attempt's start to the `n`-th recorded delivery (both from
/// the attempts table, which only the drain writes).
async fn span_ms(db: &Database, n: usize) -> Result<f64, BenchError> {
    let offset = n.saturating_sub(1);
    let (first, nth): (f64, f64) = match db {
        Database::Postgres(pool) => sqlx::query_as(AssertSqlSafe(format!(
            "SELECT (SELECT extract(epoch FROM min(started_at)) * 1000 FROM outbox_attempts)::float8, \
             (SELECT extract(epoch FROM ended_at) * 1000 FROM outbox_attempts WHERE class = 'delivered' \
              ORDER BY ended_at LIMIT 1 OFFSET {offset})::float8"
        ))).fetch_one(pool).await?,
        Database::Sqlite(pool) => sqlx::query_as(AssertSqlSafe(format!(
            "SELECT CAST((SELECT min(started_at) FROM outbox_attempts) AS REAL), \
             CAST((SELECT ended_at FROM outbox_attempts WHERE class = 'delivered' \
              ORDER BY ended_at LIMIT 1 OFFSET {offset}) AS REAL)"
        ))).fetch_one(pool).await?,
    };
    Ok((nth - first).max(1.0))
}

async fn wait_delivered(db: &Database, n: usize, limit: Duration) -> Result<(), BenchError> {
    let until = Instant::now() + limit;
    let sql = "SELECT count(*) FROM outbox_attempts WHERE class = 'delivered'";
    while Instant::now() < until {
        if count(db, sql).await? as usize >= n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(BenchError::Failed(format!(
        "fewer than {n} intents delivered within {limit:?}"
    )))
}

/// Starts the daemon for the latency run.
pub fn start_for_latency(
    options: &BenchOptions,
    url: &str,
    provider: &FakeProvider,
) -> Result<Daemon, BenchError> {
    start_daemon(options, url, provider)
}

/// Waits until the daemon's LISTEN connection is registered (PostgreSQL): its own channel,
/// not the benchmark's (the latency run listens on one of its own before the daemon
/// starts; matching any `LISTEN` counted the daemon's start-up as latency).
pub async fn wait_ready(db: &Database, limit: Duration) -> Result<(), BenchError> {
    let until = Instant::now() + limit;
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%{}%'",
        outboxd::dispatch::wakeup::CHANNEL
    );
    while Instant::now() < until {
        let listening = count(db, &sql).await?;
        if listening > 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(BenchError::Failed(
        "the daemon did not start listening".into(),
    ))
}

/// Waits until `n` intents are finished.
pub async fn wait_all_finished(db: &Database, n: usize, limit: Duration) -> Result<(), BenchError> {
    wait_delivered(db, n, limit).await
}

/// Measures one shape and adds its rows to the report.
pub async fn throughput(
    options: &BenchOptions,
    provider: &FakeProvider,
    shape: Shape,
    report: &mut Report,
) -> Result<(), BenchError> {
    let label = match shape {
        Shape::Empty => "e2e",
        Shape::History(_) => "history",
        Shape::Backlog(_) => "backlog",
        Shape::LongTransaction(_) => "longtx",
    };
    let bench = BenchDb::create(&options.database, label).await?;
    let n = options.intents;
    match shape {
        Shape::Empty => seed(&bench.db, n, 0, "pending").await?,
        Shape::LongTransaction(secs) => {
            // Enough backlog for both windows at the empty-table rate.
            let rate = report.get("e2e").unwrap_or(5_000.0);
            let rows = (rate * secs as f64 * 2.5) as usize;
            seed(&bench.db, rows.max(n), 0, "pending").await?
        }
        Shape::History(m) => {
            seed(&bench.db, m, 0, "delivered").await?;
            seed(&bench.db, n, m, "pending").await?;
        }
        Shape::Backlog(m) => seed(&bench.db, m.max(n), 0, "pending").await?,
    }
    if let Shape::LongTransaction(secs) = shape {
        return long_transaction(options, provider, &bench, secs, report).await;
    }
    // From the daemon's start to the last delivery (the rate is from the first attempt).
    let machine = super::cpu::CpuSample::now();
    let split = CpuSplit::start(options);
    let daemon = start_daemon(options, &bench.url, provider)?;
    let pid = daemon.id();
    let waited = wait_delivered(&bench.db, n, Duration::from_secs(1800)).await;
    let busy = super::cpu::busy_since(machine);
    let rss_kib = peak_rss_kib(pid);
    let cpu = super::cpu::process_seconds(pid).unwrap_or(0.0);
    let split = split.finish(busy, cpu);
    daemon.stop();
    waited?;
    let ms = span_ms(&bench.db, n).await?;
    let rate = n as f64 * 1000.0 / ms;
    match shape {
        Shape::Empty => {
            report.value(
                "e2e",
                "(1) end-to-end at the shipped defaults, draining the backlog",
                rate,
                "intents/s",
            );
            report.busy("e2e", busy);
            report.value(
                "rss",
                "(7) dispatcher peak RSS while draining",
                rss_kib as f64 / 1024.0,
                "MiB",
            );
            report.value(
                "cpu",
                "(7) dispatcher CPU per 10,000 intents",
                cpu * 10_000.0 / n as f64,
                "s",
            );
            split.record(report, n);
        }
        Shape::History(m) => report.value(
            "history",
            &format!("(6) end-to-end with {m} finished intents in the table"),
            rate,
            "intents/s",
        ),
        Shape::Backlog(m) => report.value(
            "backlog",
            &format!("(6) end-to-end over the first {n} of a {m} backlog"),
            rate,
            "intents/s",
        ),
        Shape::LongTransaction(_) => {}
    }
    bench.drop_now().await;
    Ok(())
}

/// Where the CPU of an end-to-end drain went, from the daemon's start to the last delivery:
/// the dispatcher, PostgreSQL's server processes (a local server only), and this process
/// (the loopback provider and the progress polling), against the whole machine.
struct CpuSplit {
    started: Instant,
    postgres: Option<f64>,
    bench: Option<f64>,
}

/// CPU seconds of a finished drain (see [`CpuSplit`]).
struct DrainCpu {
    machine: Option<f64>,
    dispatcher: f64,
    postgres: Option<f64>,
    bench: Option<f64>,
}

impl CpuSplit {
    fn start(options: &BenchOptions) -> Self {
        let postgres = super::setup::is_postgres(&options.database)
            .then(super::cpu::postgres_seconds)
            .flatten();
        Self {
            started: Instant::now(),
            postgres,
            bench: super::cpu::process_seconds(std::process::id()),
        }
    }

    /// `busy` is the machine's busy share over the same window, `dispatcher` the daemon's
    /// CPU seconds (it started inside the window).
    fn finish(self, busy: Option<f64>, dispatcher: f64) -> DrainCpu {
        let cores = super::cpu::cores() as f64;
        let since = |start: Option<f64>, now: Option<f64>| Some(now? - start?);
        DrainCpu {
            machine: busy.map(|b| b * cores * self.started.elapsed().as_secs_f64()),
            dispatcher,
            postgres: since(self.postgres, super::cpu::postgres_seconds()),
            bench: since(self.bench, super::cpu::process_seconds(std::process::id())),
        }
    }
}

impl DrainCpu {
    /// Records each part per intent in CPU microseconds, and beside them what the
    /// throughput target (half of min(raw DB, HTTP), see [`Report::ratios`]) allows an
    /// intent on all cores.
    fn record(&self, report: &mut Report, n: usize) {
        let per_intent = |seconds: f64| seconds * 1e6 / n as f64;
        let mut row = |key: &str, label: &str, seconds: Option<f64>| {
            if let Some(s) = seconds {
                report.value(key, label, per_intent(s), "µs");
            }
        };
        row(
            "cpu_us_machine",
            "(7) CPU per intent, whole machine",
            self.machine,
        );
        row(
            "cpu_us_dispatcher",
            "    of which the dispatcher",
            Some(self.dispatcher),
        );
        row(
            "cpu_us_postgres",
            "    of which PostgreSQL's server processes",
            self.postgres,
        );
        row(
            "cpu_us_bench",
            "    of which the provider (the benchmark process)",
            self.bench,
        );
        let cores = super::cpu::cores() as f64;
        if let (Some(raw), Some(http)) = (report.get("raw_db"), report.get("http")) {
            let target_rate = 0.5 * raw.min(http);
            report.value(
                "cpu_us_budget",
                "    what 0.5 × min(raw DB, HTTP) allows on all cores",
                cores * 1e6 / target_rate,
                "µs",
            );
        }
    }
}

/// Throughput while another client holds a REPEATABLE READ transaction open, then after.
async fn long_transaction(
    options: &BenchOptions,
    provider: &FakeProvider,
    bench: &BenchDb,
    secs: u64,
    report: &mut Report,
) -> Result<(), BenchError> {
    let Database::Postgres(pool) = &bench.db else {
        return Ok(());
    };
    let mut holder = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *holder)
        .await?;
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_intents WHERE id < 10")
        .fetch_one(&mut *holder)
        .await?;
    let sql = "SELECT count(*) FROM outbox_intents WHERE state = 'delivered'";
    let daemon = start_daemon(options, &bench.url, provider)?;
    let before = count(&bench.db, sql).await?;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let during = count(&bench.db, sql).await? - before;
    holder.rollback().await?;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let after = count(&bench.db, sql).await? - before - during;
    daemon.stop();
    let backlog_left = count(
        &bench.db,
        "SELECT count(*) FROM outbox_intents WHERE state = 'pending'",
    )
    .await?;
    report.value(
        "longtx_during",
        &format!("(6) while a REPEATABLE READ transaction is open ({secs} s)"),
        during as f64 / secs as f64,
        "intents/s",
    );
    report.value(
        "longtx_after",
        &format!("(6) after it ends (next {secs} s; backlog left {backlog_left})"),
        after as f64 / secs as f64,
        "intents/s",
    );
    Ok(())
}
