//! Provider isolation: the rate of a fast provider's deliveries alone, then with 4% of the
//! traffic (interleaved by id) going to a provider that answers in 1 s, then to one that
//! never answers (its request timeout bounds each request). Shipped defaults everywhere
//! except that timeout; the ratios are the targets.

use std::time::Duration;

use super::daemon::{config, Daemon, ProviderSpec};
use super::measure::{delivered_sql, delivery_rate, exec, wait_count};
use super::report::Report;
use super::setup::{seed_for, BenchDb};
use super::{BenchError, BenchOptions};
use outboxd_testkit::{FakeProvider, FakeProviderOptions};

const FAST: &str = "iso_fast";
const SLOW: &str = "iso_slow";
/// The silent provider's request timeout.
const HANG_TIMEOUT: &str = "5s";

/// The other provider's behaviour.
#[derive(Clone, Copy)]
enum Other {
    Idle,
    Slow,
    Silent,
}

async fn fast_rate(
    options: &BenchOptions,
    fast: &FakeProvider,
    other: Other,
    n: usize,
) -> Result<f64, BenchError> {
    let bench = BenchDb::create(&options.database, "iso").await?;
    let slow = FakeProvider::start(FakeProviderOptions {
        record_requests: false,
        ..FakeProviderOptions::default()
    })?;
    match other {
        Other::Idle => {}
        Other::Slow => slow.set_latency(Duration::from_secs(1)),
        Other::Silent => slow.set_latency(Duration::from_secs(3600)),
    }
    // One slow intent in every 25 (4% of the traffic), interleaved by id.
    let slow_n = if matches!(other, Other::Idle) {
        0
    } else {
        n / 24
    };
    seed_for(&bench.db, n + slow_n, 0, "pending", "bench", FAST).await?;
    if slow_n > 0 {
        let sql = format!("UPDATE outbox_intents SET action = '{SLOW}' WHERE id % 25 = 0");
        exec(&bench.db, &sql).await?;
    }
    let providers = [
        ProviderSpec::named("fast", FAST, fast.base_url()),
        ProviderSpec::named("slow", SLOW, slow.base_url())
            .with(&format!("request_timeout = \"{HANG_TIMEOUT}\"")),
    ];
    let daemon = Daemon::start(&options.daemon_binary, &config(&bench.url, "", &providers))?;
    let waited = wait_count(
        &bench.db,
        &delivered_sql(FAST),
        n as i64,
        Duration::from_secs(600),
    )
    .await;
    daemon.stop();
    waited?;
    let rate = delivery_rate(&bench.db, FAST, n).await?;
    bench.drop_now().await;
    slow.shutdown().await;
    Ok(rate)
}

/// Runs the three drains of `n` fast intents and records the rates and ratios.
pub async fn run(
    options: &BenchOptions,
    fast: &FakeProvider,
    n: usize,
    report: &mut Report,
) -> Result<(), BenchError> {
    let alone = fast_rate(options, fast, Other::Idle, n).await?;
    report.value(
        "iso_alone",
        &format!("isolation: {n} fast intents alone"),
        alone,
        "intents/s",
    );
    let slow = fast_rate(options, fast, Other::Slow, n).await?;
    report.value(
        "iso_slow",
        "isolation: the same with 4% to a provider answering in 1 s",
        slow,
        "intents/s",
    );
    let hang = fast_rate(options, fast, Other::Silent, n).await?;
    report.value(
        "iso_hang",
        &format!("isolation: the same with 4% to a silent provider ({HANG_TIMEOUT} timeout)"),
        hang,
        "intents/s",
    );
    report.value(
        "iso_slow_ratio",
        "    with 1 s provider / alone",
        slow / alone,
        "",
    );
    report.value(
        "iso_hang_ratio",
        "    with silent provider / alone",
        hang / alone,
        "",
    );
    Ok(())
}
