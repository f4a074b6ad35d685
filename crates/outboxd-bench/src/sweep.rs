//! The defaults against the best setting: short end-to-end drains over a grid of
//! `concurrency`, `batch_size` and the provider's `max_in_flight`, and the ratio of the
//! shipped defaults' rate to the best setting's (issue 15, item 4: at least 0.95).
//!
//! One drain per point is noisy, and the best of a dozen noisy drains is biased upwards, so
//! the defaults are drained three times (first, in the middle of the grid, last) and the
//! grid's best point twice more at the end; the ratio is median against median.

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
    for c in [32, 64, 128, 256, 512] {
        points.push(Point::new(c, 100, c.max(64)));
    }
    for b in [50, 200] {
        points.push(Point::new(128, b, 128));
    }
    points.push(Point::default());
    for b in [25, 50, 200, 500] {
        points.push(Point::new(256, b, 256));
    }
    points.push(Point::new(256, 100, 64));
    points.push(Point::new(512, 100, 64));
    points.push(Point::default());
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
    let (mut defaults, mut best) = (Vec::new(), None::<(f64, Point)>);
    for (i, point) in grid(smoke).into_iter().enumerate() {
        let rate = drain(options, provider, point, n).await?;
        report.value(
            &format!("sweep_{i}"),
            &format!("sweep: {}", point.label()),
            rate,
            "intents/s",
        );
        if point.concurrency.is_none() {
            defaults.push(rate);
        } else if best.is_none_or(|(r, _)| rate > r) {
            best = Some((rate, point));
        }
    }
    let Some((first, best_point)) = best else {
        return Ok(());
    };
    let mut best_rates = vec![first];
    if !smoke {
        for _ in 0..2 {
            best_rates.push(drain(options, provider, best_point, n).await?);
        }
    }
    let spread = |rates: &[f64]| {
        let (lo, hi) = rates
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        format!("{lo:.0}–{hi:.0}/s")
    };
    println!(
        "   sweep: defaults {} over {} drains; best point ({}) {} over {} drains",
        spread(&defaults),
        defaults.len(),
        best_point.label(),
        spread(&best_rates),
        best_rates.len()
    );
    report.value(
        "sweep_default_ratio",
        &format!("sweep: defaults / best, medians ({})", best_point.label()),
        median(&mut defaults) / median(&mut best_rates).max(1e-9),
        "",
    );
    Ok(())
}

fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    match rates.len() {
        0 => 0.0,
        n if n % 2 == 1 => rates[n / 2],
        n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
    }
}
