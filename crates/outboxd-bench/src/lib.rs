//! `outboxd bench`: an end-to-end benchmark that measures its own ceilings in the same run,
//! so its figures are ratios that survive a noisy machine.
//!
//! For one backend it prints: end-to-end dispatch throughput of the real `outboxd run`
//! process draining pre-enqueued intents to a fast loopback provider; the raw database
//! ceiling (a minimal batched `SKIP LOCKED` queue on a plain table); the dispatcher's own
//! SQL without HTTP; the HTTP ceiling without a database; a naive one-at-a-time dispatcher
//! (the floor); latency under a steady offered load (PostgreSQL); throughput with a large
//! finished history and with a large backlog; the daemon's peak RSS and CPU per 10,000
//! intents; and the producer overhead of `enqueue` against a plain insert.
//!
//! Files: [`setup`] (fresh database, seeding), [`ceilings`] (raw, own SQL, HTTP, naive),
//! [`e2e`] (the daemon as a child process, resources), [`cpu`] (how busy the machine was), [`latency`] (offered load),
//! [`producer`] (enqueue overhead), [`payloads`] (memory with payloads near the size limit),
//! [`report`] (the table).
//!
//! The scenarios of issue 15, each in a module: [`isolation`] (a slow or silent provider
//! beside a fast one), [`ratelimit`], [`breaker`], [`fairness`] (tenants), [`sweep`] (the
//! defaults against the best setting), [`durable`] (response → outcome durable); their
//! targets are judged in [`targets`]. [`daemon`] writes the config and runs `outboxd`,
//! [`measure`] reads figures back from the database.

pub mod breaker;
pub mod ceilings;
pub mod cpu;
pub mod daemon;
pub mod durable;
pub mod e2e;
pub mod fairness;
pub mod isolation;
pub mod latency;
pub mod measure;
pub mod metrics_cost;
pub mod payloads;
pub mod producer;
pub mod ratelimit;
pub mod report;
pub mod retention;
pub mod setup;
pub mod sweep;
pub mod targets;

use std::time::Duration;

use outboxd_testkit::{FakeProvider, FakeProviderOptions};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// `postgres://...` or `sqlite` (a temporary file).
    pub database: String,
    /// Intents drained in the throughput runs.
    pub intents: usize,
    /// Rows of history / backlog for the scale runs (0 skips them).
    pub scale_rows: usize,
    /// Offered load for the latency run, intents per second (PostgreSQL only; 0 skips).
    pub offered_rate: u32,
    /// Duration of the latency run.
    pub offered_for: Duration,
    /// Seconds a REPEATABLE READ transaction is held open during a throughput run (0 skips).
    pub long_transaction_secs: u64,
    /// Commits measured for the producer overhead (0 skips).
    pub producer_commits: usize,
    /// The `outboxd` binary to run as the dispatcher.
    pub daemon_binary: std::path::PathBuf,
    /// Finished rows of the large history in the metrics-cost run (0 skips it).
    pub metrics_rows: usize,
    /// Finished rows pruned while dispatching in the retention run (0 skips it and the
    /// bloat run).
    pub prune_rows: usize,
    /// The sizes of the issue-15 scenarios.
    pub scenarios: Scenarios,
    /// A small CI run: targets are printed, not judged.
    pub smoke: bool,
}

/// Sizes of the issue-15 scenarios (see the modules).
#[derive(Debug, Clone)]
pub struct Scenarios {
    /// Fast intents per isolation drain (0 skips isolation).
    pub isolation_intents: usize,
    /// Intents through the rate limit (0 skips it).
    pub rate_limit_intents: usize,
    /// Length of each breaker outage (zero skips the breaker).
    pub outage: Duration,
    /// Breaker cool-down to configure (`None`: the default).
    pub breaker_cooldown: Option<&'static str>,
    /// Intents waiting during an outage.
    pub outage_intents: usize,
    /// Tenant A's backlog (0 skips fairness).
    pub fairness_backlog: usize,
    /// How long tenant B commits.
    pub fairness_for: Duration,
    /// Intents per sweep point (0 skips the sweep).
    pub sweep_intents: usize,
    /// Intents with a payload near the size limit, drained to a slow provider (0 skips).
    pub large_payload_intents: usize,
}

impl Scenarios {
    /// Full sizes.
    pub fn full(intents: usize) -> Self {
        Self {
            isolation_intents: 10_000,
            rate_limit_intents: 1_000,
            outage: Duration::from_secs(30),
            breaker_cooldown: None,
            outage_intents: 2_000,
            fairness_backlog: 100_000,
            fairness_for: Duration::from_secs(10),
            // A quarter of the end-to-end drain, and at least 20,000 unless fewer intents
            // were asked for (shorter drains, a fraction of a second on SQLite, measured
            // its checkpoints and start-up more than the settings).
            sweep_intents: intents.min(20_000).max(intents / 4),
            // Two and a half times the default request slots (256).
            large_payload_intents: 640,
        }
    }

    /// Seconds, not minutes.
    pub fn smoke() -> Self {
        Self {
            isolation_intents: 300,
            rate_limit_intents: 60,
            outage: Duration::from_secs(3),
            breaker_cooldown: Some("1s"),
            outage_intents: 100,
            fairness_backlog: 2_000,
            fairness_for: Duration::from_secs(1),
            sweep_intents: 300,
            large_payload_intents: 20,
        }
    }
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Database trouble.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// Store trouble.
    #[error(transparent)]
    Store(#[from] outboxd::store::StoreError),
    /// Opening the database.
    #[error(transparent)]
    Connect(#[from] outboxd::store::connect::ConnectError),
    /// Migrating.
    #[error(transparent)]
    Migrate(#[from] outboxd::store::migrate::MigrateError),
    /// Local I/O (the provider, the child process).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Something else went wrong, described.
    #[error("{0}")]
    Failed(String),
}

/// Starts the fast loopback provider the benchmark delivers to (no per-request records).
pub fn fast_provider() -> Result<FakeProvider, BenchError> {
    Ok(FakeProvider::start(FakeProviderOptions {
        record_requests: false,
        ..FakeProviderOptions::default()
    })?)
}

/// Runs every measurement for one backend and prints the table.
pub async fn run(options: &BenchOptions) -> Result<report::Report, BenchError> {
    let mut report = report::Report::new(options);
    let provider = fast_provider()?;
    report.section("ceilings");
    ceilings::raw_queue(options, &mut report).await?;
    ceilings::own_sql(options, &mut report).await?;
    ceilings::http(options, &provider, &mut report).await?;
    ceilings::naive(options, &provider, &mut report).await?;
    report.section("end to end");
    e2e::throughput(options, &provider, e2e::Shape::Empty, &mut report).await?;
    if options.scenarios.large_payload_intents > 0 {
        payloads::run(
            options,
            options.scenarios.large_payload_intents,
            &mut report,
        )
        .await?;
    }
    if options.scale_rows > 0 {
        e2e::throughput(
            options,
            &provider,
            e2e::Shape::History(options.scale_rows),
            &mut report,
        )
        .await?;
        e2e::throughput(
            options,
            &provider,
            e2e::Shape::Backlog(options.scale_rows),
            &mut report,
        )
        .await?;
    }
    if options.long_transaction_secs > 0 && setup::is_postgres(&options.database) {
        e2e::throughput(
            options,
            &provider,
            e2e::Shape::LongTransaction(options.long_transaction_secs),
            &mut report,
        )
        .await?;
    }
    if options.offered_rate > 0 && setup::is_postgres(&options.database) {
        latency::offered_load(options, &provider, &mut report).await?;
    }
    if options.producer_commits > 0 {
        producer::overhead(options, &mut report).await?;
        if setup::is_postgres(&options.database) {
            producer::parallel(options, &mut report).await?;
        }
    }
    scenarios(options, &provider, &mut report).await?;
    scale_ops(options, &provider, &mut report).await?;
    report.finish();
    targets::print(&report, options.smoke);
    Ok(report)
}

/// The operations-at-scale figures: metrics refresh cost against the finished history,
/// dispatch throughput while pruning, table size over retention windows.
pub async fn scale_ops(
    options: &BenchOptions,
    provider: &FakeProvider,
    report: &mut report::Report,
) -> Result<(), BenchError> {
    metrics_cost::metrics_cost(options, report).await?;
    retention::throughput_while_pruning(options, provider, report).await?;
    retention::size_over_windows(options, report).await?;
    Ok(())
}

/// Only [`scale_ops`], with its own table.
pub async fn run_scale_ops(options: &BenchOptions) -> Result<report::Report, BenchError> {
    let mut report = report::Report::new(options);
    let provider = fast_provider()?;
    scale_ops(options, &provider, &mut report).await?;
    report.finish();
    targets::print(&report, options.smoke);
    Ok(report)
}

/// Only the sweep of settings against the defaults.
pub async fn run_sweep(options: &BenchOptions) -> Result<report::Report, BenchError> {
    let mut report = report::Report::new(options);
    let provider = fast_provider()?;
    report.section("defaults against a sweep of settings");
    let n = options.scenarios.sweep_intents;
    sweep::run(options, &provider, n, options.smoke, &mut report).await?;
    report.finish();
    targets::print(&report, options.smoke);
    Ok(report)
}

/// One measurement that `--only` runs alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// The latency run at the offered load (PostgreSQL).
    Latency,
    /// The rate-limit scenario.
    RateLimit,
    /// The large-payload memory figures (after the small-payload drain they are read
    /// against).
    Payloads,
    /// The SQL ceilings alone: the raw queue (2a) and the dispatcher's own SQL (2b), with
    /// the CPU ratio between them.
    Ceilings,
    /// The tenant-fairness scenario (tenant B beside tenant A's backlog).
    Fairness,
    /// The producer's cost: one connection (8) and, on PostgreSQL, several at once with
    /// and without the wake-up (8b).
    Producer,
}

/// Only one measurement, with its own table (targets of the others read as missing).
pub async fn run_only(options: &BenchOptions, only: Only) -> Result<report::Report, BenchError> {
    let mut report = report::Report::new(options);
    match only {
        Only::Latency => {
            if !setup::is_postgres(&options.database) {
                return Err(BenchError::Failed(
                    "the latency run needs PostgreSQL (--database postgres://...)".into(),
                ));
            }
            let provider = fast_provider()?;
            report.section("latency");
            latency::offered_load(options, &provider, &mut report).await?;
        }
        Only::RateLimit => {
            report.section("rate limit");
            ratelimit::run(options, options.scenarios.rate_limit_intents, &mut report).await?;
        }
        Only::Payloads => {
            let provider = fast_provider()?;
            report.section("large payloads");
            e2e::throughput(options, &provider, e2e::Shape::Empty, &mut report).await?;
            let n = options.scenarios.large_payload_intents.max(1);
            payloads::run(options, n, &mut report).await?;
        }
        Only::Ceilings => {
            report.section("SQL ceilings");
            ceilings::raw_queue(options, &mut report).await?;
            ceilings::own_sql(options, &mut report).await?;
        }
        Only::Fairness => {
            let provider = fast_provider()?;
            report.section("fairness");
            let shape = fairness::Fairness {
                backlog: options.scenarios.fairness_backlog.max(1),
                produce_for: options.scenarios.fairness_for,
            };
            fairness::run(options, &provider, &shape, &mut report).await?;
        }
        Only::Producer => {
            report.section("producer");
            producer::overhead(options, &mut report).await?;
            if setup::is_postgres(&options.database) {
                producer::parallel(options, &mut report).await?;
            }
        }
    }
    report.finish();
    targets::print(&report, options.smoke);
    Ok(report)
}

/// The issue-15 scenarios.
async fn scenarios(
    options: &BenchOptions,
    provider: &FakeProvider,
    report: &mut report::Report,
) -> Result<(), BenchError> {
    let s = &options.scenarios;
    report.section("provider isolation, rate limit, breaker, fairness");
    if s.isolation_intents > 0 {
        isolation::run(options, provider, s.isolation_intents, report).await?;
    }
    if s.rate_limit_intents > 0 {
        ratelimit::run(options, s.rate_limit_intents, report).await?;
    }
    if !s.outage.is_zero() {
        let outage = breaker::Outage {
            length: s.outage,
            cooldown: s.breaker_cooldown,
            intents: s.outage_intents,
        };
        breaker::run(options, &outage, report).await?;
    }
    if s.fairness_backlog > 0 {
        let shape = fairness::Fairness {
            backlog: s.fairness_backlog,
            produce_for: s.fairness_for,
        };
        fairness::run(options, provider, &shape, report).await?;
    }
    if s.sweep_intents > 0 {
        report.section("defaults against a sweep of settings");
        sweep::run(options, provider, s.sweep_intents, options.smoke, report).await?;
    }
    Ok(())
}
