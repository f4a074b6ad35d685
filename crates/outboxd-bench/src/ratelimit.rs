//! Rate limit: a provider that answers `429` above 50 requests/s (a token bucket with a
//! burst of 5, see the fake provider) and outboxd configured with `rate_limit = 50/s`.
//! Targets: no 429 at all, and at least 45 deliveries per second sustained.

use std::time::Duration;

use super::daemon::{config, Daemon, ProviderSpec};
use super::measure::{delivered_sql, delivery_rate, wait_count};
use super::report::Report;
use super::setup::{seed, BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd_testkit::{FakeProvider, FakeProviderOptions};

/// The provider's limit and outboxd's setting.
const PER_SECOND: u32 = 50;

/// Drains `n` intents through the limit and records the rate and the 429s.
pub async fn run(options: &BenchOptions, n: usize, report: &mut Report) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "ratelimit").await?;
    let provider = FakeProvider::start(FakeProviderOptions {
        record_requests: false,
        ..FakeProviderOptions::default()
    })?;
    provider.set_rate_limit(Some((PER_SECOND, 5)));
    seed(&bench.db, n, 0, "pending").await?;
    let spec = ProviderSpec::bench(provider.base_url())
        .with(&format!("rate_limit = {{ per_second = {PER_SECOND} }}"));
    let daemon = Daemon::start(&options.daemon_binary, &config(&bench.url, "", &[spec]))?;
    let limit = Duration::from_secs(60 + 3 * n as u64 / u64::from(PER_SECOND));
    let waited = wait_count(&bench.db, &delivered_sql(ACTION), n as i64, limit).await;
    daemon.stop();
    waited?;
    let rate = delivery_rate(&bench.db, ACTION, n).await?;
    report.value(
        "rl_rate",
        &format!("rate limit: {n} intents, provider 429s above {PER_SECOND}/s, rate_limit = {PER_SECOND}/s"),
        rate,
        "intents/s",
    );
    report.value(
        "rl_429",
        "    429 answers the provider sent",
        provider.rate_limited_count() as f64,
        "",
    );
    bench.drop_now().await;
    provider.shutdown().await;
    Ok(())
}
