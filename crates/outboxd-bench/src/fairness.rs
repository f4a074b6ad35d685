//! Tenant fairness: tenant A's large backlog drains while tenant B commits a few intents a
//! second; B's commit → first attempt start percentiles say whether the claim serves
//! tenants in turn or strictly by age (FIFO makes B wait for A's whole backlog). Only B's
//! intents committed before A's last first attempt count: once the backlog is gone, B's
//! wait is an idle daemon's (on SQLite, up to `poll_interval`), not fairness.

use std::time::Duration;

use super::daemon::{config, Daemon, ProviderSpec};
use super::measure::{count, first_attempts, now_ms, percentile, sorted, wait_count};
use super::report::Report;
use super::setup::{seed_for, BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd::commands::enqueue::enqueue_committed;
use outboxd::NewIntent;
use outboxd_testkit::FakeProvider;

const A: &str = "tenant_a";
const B: &str = "tenant_b";
/// Tenant B's commits per second.
const B_RATE: u32 = 20;

/// The backlog and how long B produces.
pub struct Fairness {
    /// Tenant A's backlog.
    pub backlog: usize,
    /// How long tenant B commits intents.
    pub produce_for: Duration,
}

/// Runs it and records B's percentiles.
pub async fn run(
    options: &BenchOptions,
    provider: &FakeProvider,
    shape: &Fairness,
    report: &mut Report,
) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "fairness").await?;
    seed_for(&bench.db, shape.backlog, 0, "pending", A, ACTION).await?;
    let spec = ProviderSpec::bench(provider.base_url());
    let daemon = Daemon::start(&options.daemon_binary, &config(&bench.url, "", &[spec]))?;
    let started = "SELECT count(*) FROM outbox_attempts";
    let produced = async {
        wait_count(&bench.db, started, 1, Duration::from_secs(60)).await?;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(B_RATE)));
        let total = B_RATE as usize * shape.produce_for.as_secs().max(1) as usize;
        let mut commits = std::collections::HashMap::new();
        for n in 0..total {
            tick.tick().await;
            let op = format!("fair-{n}");
            let intent = NewIntent::new(B, op.clone(), ACTION, serde_json::json!({"n": n}));
            enqueue_committed(&bench.db, intent)
                .await
                .map_err(|e| BenchError::Failed(e.to_string()))?;
            commits.insert(op, now_ms());
        }
        let backlog_left = count(
            &bench.db,
            &format!(
                "SELECT count(*) FROM outbox_intents WHERE tenant = '{A}' AND state = 'pending'"
            ),
        )
        .await?;
        let b_started = format!(
            "SELECT count(DISTINCT a.intent_id) FROM outbox_attempts a JOIN outbox_intents i \
             ON i.id = a.intent_id WHERE i.tenant = '{B}'"
        );
        wait_count(
            &bench.db,
            &b_started,
            total as i64,
            Duration::from_secs(900),
        )
        .await?;
        Ok::<_, BenchError>((commits, backlog_left))
    }
    .await;
    daemon.stop();
    let (commits, backlog_left) = produced?;
    let backlog_ended = first_attempts(&bench.db, A)
        .await?
        .into_iter()
        .map(|(_, start)| start)
        .fold(f64::NEG_INFINITY, f64::max);
    let waits: Vec<f64> = first_attempts(&bench.db, B)
        .await?
        .into_iter()
        .filter_map(|(op, start)| {
            let committed = *commits.get(&op)?;
            (committed < backlog_ended).then_some((start - committed).max(0.0))
        })
        .collect();
    let counted = waits.len();
    let waits = sorted(waits);
    let label = format!(
        "fairness: tenant B at {B_RATE}/s beside A's {} backlog ({counted} of B's {} \
         committed while it lasted; {backlog_left} left after B)",
        shape.backlog,
        commits.len()
    );
    report.value(
        "fair_b_p50",
        &format!("{label}: p50"),
        percentile(&waits, 0.5),
        "ms",
    );
    report.value(
        "fair_b_p99",
        "    tenant B commit → attempt start p99",
        percentile(&waits, 0.99),
        "ms",
    );
    bench.drop_now().await;
    Ok(())
}
