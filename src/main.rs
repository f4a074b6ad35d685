//! The `outboxd` binary: parse the command line, load the configuration (only the
//! secrets the command uses), set up telemetry, run the chosen command, and exit with the
//! documented code (`docs/cli.md`; [`outboxd::commands::ExitKind`]).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use outboxd::cli::{term, Cli, Command, ConfigCommand, EnqueueCli};
use outboxd::commands::config_check::{self, CheckFailed};
use outboxd::commands::report::{error_json, one_chain};
use outboxd::commands::ExitKind;
use outboxd::config::{Config, SecretNeeds};
use tokio::sync::watch;

/// Loads the configuration, resolving only the secrets `needs` names; prints warnings.
fn load(cli: &Cli, needs: SecretNeeds) -> anyhow::Result<Config> {
    let loaded = Config::load_for(cli.config.as_deref(), needs)?;
    let color = term::stderr_color();
    for warning in &loaded.warnings {
        eprintln!("{} {warning}", term::label("warning:", 33, color));
    }
    Ok(loaded.config)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_failure(&e, json),
    }
}

/// Prints `e` once (each line prefixed `error:`; with `--json` also the error object on
/// stdout) and returns its exit code.
fn report_failure(e: &anyhow::Error, json: bool) -> ExitCode {
    let kind = ExitKind::of_chain(e.chain());
    let message = one_chain(e.chain().map(ToString::to_string));
    let color = term::stderr_color();
    for line in message.lines() {
        eprintln!("{} {line}", term::label("error:", 31, color));
    }
    // `config check --json` has printed its own report.
    if json && e.downcast_ref::<CheckFailed>().is_none() {
        println!("{}", error_json(kind, &message));
    }
    ExitCode::from(kind.code())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let json = cli.json;
    match &cli.command {
        Command::Config {
            command: ConfigCommand::Check(args),
        } => Ok(config_check::run(cli.config.as_deref(), *args, json)?),
        Command::Migrate {
            allow_schema_creators,
        } => {
            let config = load(&cli, SecretNeeds::DatabaseOnly)?;
            outboxd::telemetry::init(config.logging.format, &config.logging.level);
            let options = outboxd::store::migrate::MigrateOptions {
                allow_schema_creators: *allow_schema_creators,
            };
            Ok(outboxd::commands::status::migrate(&config, options, json).await?)
        }
        Command::Status => {
            let config = load(&cli, SecretNeeds::DatabaseOnly)?;
            Ok(outboxd::commands::status::status(&config, json).await?)
        }
        Command::Review(command) => {
            let config = load(&cli, SecretNeeds::DatabaseOnly)?;
            Ok(outboxd::commands::run(&config, command, json).await?)
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

async fn run_daemon(cli: &Cli, skip_migrations: bool) -> anyhow::Result<()> {
    let config = load(cli, SecretNeeds::All)?;
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
    let config = load(cli, SecretNeeds::DatabaseOnly)?;
    if config.action(&args.action).is_none() {
        eprintln!(
            "{} action {:?} is not configured; the intent will wait until it is",
            term::label("warning:", 33, term::stderr_color()),
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
