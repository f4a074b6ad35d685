//! The `outboxd` binary: parse the command line, load the configuration, set up
//! telemetry, run the chosen command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use outboxd::cli::{Cli, Command, ConfigCommand, EnqueueCli};
use outboxd::config::{Config, LoadedConfig};
use tokio::sync::watch;

fn load(cli: &Cli) -> anyhow::Result<LoadedConfig> {
    let loaded = Config::load(cli.config.as_deref()).map_err(|e| anyhow::anyhow!("{e}"))?;
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(loaded)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            let loaded = load(&cli)?;
            print!("{}", loaded.config.effective_toml_redacted());
            eprintln!("configuration OK ({} warning(s))", loaded.warnings.len());
            Ok(())
        }
        Command::Migrate => migrate(&cli).await,
        Command::Status { json } => {
            let config = load(&cli)?.config;
            let db = outboxd::store::connect(&config.database.url, 2).await?;
            let store = db.store();
            let now = chrono::Utc::now();
            let summary = store.status_summary(now).await?;
            // An older schema has no provider states: the counts are still worth showing.
            let providers = store.list_provider_states().await.unwrap_or_else(|e| {
                eprintln!("warning: provider states unavailable: {e}");
                Vec::new()
            });
            if *json {
                let value = outboxd::status::to_json(&summary, &providers, now);
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print!("{}", outboxd::status::render(&summary, now));
                print!("{}", outboxd::status::render_providers(&providers, now));
            }
            Ok(())
        }
        Command::Review(command) => {
            let config = load(&cli)?.config;
            Ok(outboxd::commands::run(&config, command).await?)
        }
        Command::Run { skip_migrations } => run_daemon(&cli, *skip_migrations).await,
        Command::Enqueue(args) => enqueue(&cli, args).await,
        Command::Demo => demo().await,
        Command::FakeProvider {
            listen,
            idempotency_header,
        } => {
            let mut out = std::io::stdout();
            outboxd::commands::fake_provider::run(
                *listen,
                idempotency_header,
                &mut out,
                wait_for_signal(),
            )
            .await?;
            Ok(())
        }
    }
}

async fn migrate(cli: &Cli) -> anyhow::Result<()> {
    let config = load(cli)?.config;
    outboxd::telemetry::init(config.logging.format, &config.logging.level);
    eprintln!(
        "migrating {} ...",
        outboxd::store::connect::redact_url(&config.database.url)
    );
    let db = outboxd::store::connect(&config.database.url, 2).await?;
    let report = db.migrate().await?;
    for (version, name) in &report.applied {
        eprintln!("applied migration {version} ({name})");
    }
    eprintln!(
        "schema at version {} ({} applied now)",
        report.version,
        report.applied.len()
    );
    Ok(())
}

async fn run_daemon(cli: &Cli, skip_migrations: bool) -> anyhow::Result<()> {
    let config = load(cli)?.config;
    outboxd::telemetry::init(config.logging.format, &config.logging.level);
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received; finishing in-flight attempts");
        let _ = tx.send(true);
        // Keep the sender alive so receivers see a stable `true`.
        std::future::pending::<()>().await;
    });
    let options = outboxd::daemon::RunOptions { skip_migrations };
    outboxd::daemon::run(config, options, rx)
        .await
        .context("outboxd run")
}

async fn enqueue(cli: &Cli, args: &EnqueueCli) -> anyhow::Result<()> {
    let config = load(cli)?.config;
    if config.action(&args.action).is_none() {
        eprintln!(
            "warning: action {:?} is not configured; the intent will wait until it is",
            args.action
        );
    }
    let receipt = outboxd::commands::enqueue::run(&config, &args.to_args()).await?;
    println!("{}", serde_json::to_string_pretty(&receipt)?);
    Ok(())
}

async fn demo() -> anyhow::Result<()> {
    outboxd::telemetry::init(outboxd::config::LogFormat::Pretty, "error");
    let mut out = std::io::stdout();
    let report = outboxd::demo::run(&mut out).await?;
    anyhow::ensure!(
        report.is_clean(),
        "the invariant checker found violations: {report}"
    );
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
