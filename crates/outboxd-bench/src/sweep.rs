//! The defaults against the best setting: short end-to-end drains over a grid of
//! `concurrency`, `batch_size` and the provider's `max_in_flight`, and the ratio of the
//! shipped defaults' rate to the best rate of the grid (issue 15, item 4: at least 0.95).

use std::time::Duration;

use super::daemon::{config, Daemon, ProviderSpec};
use super::measure::{delivered_sql, delivery_rate, wait_count};
use super::report::Report;
use super::setup::{seed, BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd_testkit::FakeProvider;

/// One setting: `None` everywhere is the shipped defaults.
#[derive(Debug, Clone, Copy, Default)]
struct Point {
    concurrency: Option<u32>,
    batch_size: Option<u32>,
    max_in_flight: Option<u32>,
}

impl Point {
    fn new(concurrency: u32, batch_size: u32, max_in_flight: u32) -> Self {
        Self {
            concurrency: Some(concurrency),
            batch_size: Some(batch_size),
            max_in_flight: Some(max_in_flight),
        }
    }

    fn label(&self) -> String {
        let show = |v: Option<u32>| v.map_or("default".to_owned(), |v| v.to_string());
        format!(
            "concurrency {}, batch_size {}, max_in_flight {}",
            show(self.concurrency),
            show(self.batch_size),
            show(self.max_in_flight)
        )
    }
}

fn grid(smoke: bool) -> Vec<Point> {
    if smoke {
        return vec![Point::default(), Point::new(64, 50, 64)];
    }
    let mut points = vec![Point::default()];
    for c in [16, 64, 128, 256, 512] {
        points.push(Point::new(c, 100, c.max(64)));
    }
    for b in [25, 50, 200, 500] {
        points.push(Point::new(256, b, 256));
    }
    points.push(Point::new(256, 100, 64));
    points.push(Point::new(512, 100, 64));
    points
}

async fn drain(
    options: &BenchOptions,
    provider: &FakeProvider,
    point: Point,
    n: usize,
) -> Result<f64, BenchError> {
    let bench = BenchDb::create(&options.database, "sweep").await?;
    seed(&bench.db, n, 0, "pending").await?;
    let mut dispatcher = String::new();
    if let Some(c) = point.concurrency {
        dispatcher.push_str(&format!("concurrency = {c}\n"));
    }
    if let Some(b) = point.batch_size {
        dispatcher.push_str(&format!("batch_size = {b}\n"));
    }
    let extra = point
        .max_in_flight
        .map(|m| format!("max_in_flight = {m}"))
        .unwrap_or_default();
    let spec = ProviderSpec::bench(provider.base_url()).with(&extra);
    let daemon = Daemon::start(
        &options.daemon_binary,
        &config(&bench.url, &dispatcher, &[spec]),
    )?;
    let waited = wait_count(
        &bench.db,
        &delivered_sql(ACTION),
        n as i64,
        Duration::from_secs(900),
    )
    .await;
    daemon.stop();
    waited?;
    let rate = delivery_rate(&bench.db, ACTION, n).await?;
    bench.drop_now().await;
    Ok(rate)
}

/// Runs the grid with `n` intents per point.
pub async fn run(
    options: &BenchOptions,
    provider: &FakeProvider,
    n: usize,
    smoke: bool,
    report: &mut Report,
) -> Result<(), BenchError> {
    let (mut best, mut best_label, mut default) = (0.0f64, String::new(), 0.0);
    for (i, point) in grid(smoke).into_iter().enumerate() {
        let rate = drain(options, provider, point, n).await?;
        report.value(
            &format!("sweep_{i}"),
            &format!("sweep: {}", point.label()),
            rate,
            "intents/s",
        );
        if i == 0 {
            default = rate;
        }
        if rate > best {
            (best, best_label) = (rate, point.label());
        }
    }
    report.value(
        "sweep_default_ratio",
        &format!("sweep: defaults / best ({best_label})"),
        default / best.max(1e-9),
        "",
    );
    Ok(())
}
