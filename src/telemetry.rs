//! Logging and tracing setup: human-readable output on a terminal, JSON lines otherwise
//! (or as configured), filtered by the configured level or `RUST_LOG`.
//!
//! Both formats carry the fields of the enclosing spans: every line logged during a
//! delivery includes the `attempt` span's `intent_id`, `tenant`, `action`, `attempt` and,
//! once known, `class` and `http_status` (JSON: under `span` and `spans`). Payloads,
//! header values and secrets are never logged. Colours only on a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Safe to call once per process.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init()
    } else {
        builder.compact().try_init()
    };
    if let Err(e) = result {
        eprintln!("logging was already initialised: {e}");
    }
}
