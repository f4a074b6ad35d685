//! `outboxd-bench`: the end-to-end benchmark with its own ceilings (see the `outboxd_bench` library).
//!
//! ```text
//! cargo build --release --workspace && target/release/outboxd-bench --database sqlite
//! target/release/outboxd-bench --database postgres://postgres@127.0.0.1:5432/test
//! target/release/outboxd-bench --smoke --database sqlite      # a few hundred intents, no targets
//! ```
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use outboxd_bench::{run, run_only, run_scale_ops, BenchOptions, Only, Scenarios};

/// Measures outboxd's throughput, latency and cost against ceilings taken in the same run.
#[derive(Debug, Parser)]
#[command(name = "outboxd-bench", version)]
struct Args {
    /// `sqlite` (a temporary file) or a PostgreSQL URL; each measurement uses a fresh schema.
    #[arg(long, default_value = "sqlite")]
    database: String,
    /// Intents drained per throughput run (default: 50,000 on PostgreSQL, 20,000 on SQLite).
    #[arg(long)]
    intents: Option<usize>,
    /// Finished rows / backlog rows for the scale runs (0 skips them).
    #[arg(long, default_value_t = 1_000_000)]
    scale_rows: usize,
    /// Offered load for the latency run, intents/s (PostgreSQL; 0 skips).
    #[arg(long, default_value_t = 1000)]
    offered_rate: u32,
    /// Length of the latency run, seconds.
    #[arg(long, default_value_t = 20)]
    offered_secs: u64,
    /// Seconds a REPEATABLE READ transaction is held open (PostgreSQL; 0 skips).
    #[arg(long, default_value_t = 60)]
    long_tx_secs: u64,
    /// Commits measured for the producer overhead (0 skips).
    #[arg(long, default_value_t = 5000)]
    producer_commits: usize,
    /// Finished rows of the large history in the metrics-cost run (0 skips it).
    #[arg(long, default_value_t = 10_000_000)]
    metrics_rows: usize,
    /// Finished rows pruned while dispatching in the retention run (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    prune_rows: usize,
    /// Run only the operations-at-scale figures (metrics cost, pruning, bloat).
    #[arg(long)]
    scale_ops_only: bool,
    /// Skip the scale, long-transaction, producer and operations-at-scale runs (ceilings,
    /// end-to-end, latency and the issue-15 scenarios only).
    #[arg(long)]
    only_scenarios: bool,
    /// Run only the sweep of settings against the defaults.
    #[arg(long)]
    only_sweep: bool,
    /// Run only one figure's measurement, to iterate on it (`latency`: the offered load,
    /// PostgreSQL; `rate-limit`: the rate-limit scenario; `payloads`: memory with payloads
    /// near the size limit, after the small-payload drain it is read against; `ceilings`:
    /// the raw queue (2a) and the dispatcher's own SQL (2b) with their CPU ratio;
    /// `fairness`: tenant B beside tenant A's backlog; `producer`: the producer's cost, from
    /// one connection and, on PostgreSQL, from several with and without the wake-up).
    #[arg(long, value_enum)]
    only: Option<Only>,
    /// A small run for CI: a few hundred intents, short phases, no targets.
    #[arg(long)]
    smoke: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let postgres = args.database.starts_with("postgres");
    let daemon_binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("outboxd")))
        .filter(|p| p.exists());
    let Some(daemon_binary) = daemon_binary else {
        eprintln!("error: the outboxd binary must sit next to outboxd-bench (cargo build --workspace builds both)");
        return ExitCode::FAILURE;
    };
    let intents = args
        .intents
        .unwrap_or(if postgres { 50_000 } else { 20_000 });
    let mut options = BenchOptions {
        database: args.database.clone(),
        intents,
        scale_rows: args.scale_rows,
        offered_rate: args.offered_rate,
        offered_for: Duration::from_secs(args.offered_secs),
        long_transaction_secs: args.long_tx_secs,
        producer_commits: args.producer_commits,
        daemon_binary,
        metrics_rows: args.metrics_rows,
        prune_rows: args.prune_rows,
        scenarios: Scenarios::full(intents),
        smoke: args.smoke,
    };
    if args.only_scenarios {
        options.scale_rows = 0;
        options.long_transaction_secs = 0;
        options.producer_commits = 0;
        options.metrics_rows = 0;
        options.prune_rows = 0;
    }
    if args.smoke {
        options.intents = args.intents.unwrap_or(300);
        options.scale_rows = 2_000;
        options.offered_rate = 200;
        options.offered_for = Duration::from_secs(2);
        options.long_transaction_secs = 0;
        options.producer_commits = 200;
        options.metrics_rows = 20_000;
        options.prune_rows = 5_000;
        options.scenarios = Scenarios::smoke();
    }
    let result = if let Some(only) = args.only {
        run_only(&options, only).await
    } else if args.only_sweep {
        outboxd_bench::run_sweep(&options).await
    } else if args.scale_ops_only {
        run_scale_ops(&options).await
    } else {
        run(&options).await
    };
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
