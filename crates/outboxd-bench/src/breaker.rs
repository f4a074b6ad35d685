//! Circuit breaker: a provider down for a while (connections refused, or every request
//! answered `503` without `Retry-After`) with a backlog waiting for it, then up again.
//! From the attempts table: how many requests went out during the outage (the first
//! `breaker_failures` and the trials), the most failed attempts one intent spent, and
//! how many intents were not delivered after recovery.

use std::time::Duration;

use super::daemon::{config, Daemon, ProviderSpec};
use super::measure::{count, delivered_sql, wait_count};
use super::report::Report;
use super::setup::{seed, BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd_testkit::{FakeProvider, FakeProviderOptions, Fault, RandomFaults};

/// How the provider is down.
#[derive(Clone, Copy)]
enum Down {
    Refused,
    Status503,
}

/// The outage and the breaker's cool-down (`None`: the shipped default).
pub struct Outage {
    /// How long the provider is down.
    pub length: Duration,
    /// `breaker_cooldown` to configure, if not the default.
    pub cooldown: Option<&'static str>,
    /// Intents waiting for the provider.
    pub intents: usize,
}

async fn one(
    options: &BenchOptions,
    outage: &Outage,
    down: Down,
    report: &mut Report,
) -> Result<(), BenchError> {
    let (key, what) = match down {
        Down::Refused => ("brk_refused", "connections refused"),
        Down::Status503 => ("brk_503", "503 without Retry-After"),
    };
    let bench = BenchDb::create(&options.database, "breaker").await?;
    let provider = FakeProvider::start(FakeProviderOptions {
        record_requests: false,
        ..FakeProviderOptions::default()
    })?;
    seed(&bench.db, outage.intents, 0, "pending").await?;
    match down {
        Down::Refused => provider.set_refusing(true).await?,
        Down::Status503 => provider.set_random_faults(RandomFaults {
            seed: 1,
            probability: 1.0,
            faults: vec![Fault::StatusWithoutApply {
                status: 503,
                retry_after: None,
            }],
        }),
    }
    let extra = outage
        .cooldown
        .map(|c| format!("breaker_cooldown = \"{c}\""))
        .unwrap_or_default();
    let spec = ProviderSpec::bench(provider.base_url()).with(&extra);
    let daemon = Daemon::start(&options.daemon_binary, &config(&bench.url, "", &[spec]))?;
    tokio::time::sleep(outage.length).await;
    match down {
        Down::Refused => provider.set_refusing(false).await?,
        Down::Status503 => provider.clear_random_faults(),
    }
    let n = outage.intents as i64;
    let waited = wait_count(
        &bench.db,
        &delivered_sql(ACTION),
        n,
        Duration::from_secs(300),
    )
    .await;
    daemon.stop();
    if let Err(e) = waited {
        eprintln!("   breaker ({what}): {e}");
    }
    let failed = "SELECT count(*) FROM outbox_attempts WHERE class <> 'delivered'";
    let most = "SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM outbox_attempts \
                WHERE class <> 'delivered' GROUP BY intent_id) t";
    let left = "SELECT count(*) FROM outbox_intents WHERE state <> 'delivered'";
    let secs = outage.length.as_secs();
    report.value(
        &format!("{key}_sent"),
        &format!("breaker ({what}, {secs} s, {n} waiting): requests during the outage"),
        count(&bench.db, failed).await? as f64,
        "",
    );
    report.value(
        &format!("{key}_most"),
        "    most failed attempts of one intent",
        count(&bench.db, most).await? as f64,
        "",
    );
    report.value(
        &format!("{key}_left"),
        "    not delivered after recovery",
        count(&bench.db, left).await? as f64,
        "",
    );
    bench.drop_now().await;
    provider.shutdown().await;
    Ok(())
}

/// Both outages, one after the other.
pub async fn run(
    options: &BenchOptions,
    outage: &Outage,
    report: &mut Report,
) -> Result<(), BenchError> {
    one(options, outage, Down::Refused, report).await?;
    one(options, outage, Down::Status503, report).await
}
