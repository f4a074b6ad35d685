//! Logging and tracing setup: human-readable output on a terminal, JSON lines otherwise
//! (or as configured), filtered by the configured level or `RUST_LOG`.
//!
//! Both formats carry the fields of the enclosing spans: every line logged during a
//! delivery includes the `attempt` span's `intent_id`, `tenant`, `action`, `attempt` and,
//! once known, `class` and `http_status` (JSON: under `spans`, outermost first, each span
//! once). Payloads, header values and secrets are never logged. Colours only on a terminal
//! and never with `NO_COLOR` ([`crate::cli::term`]).
//!
//! The job scheduler's own bookkeeping (tokio-cron-scheduler: "Uninited", job ticks) is
//! logged at `warn` and above only, unless the configured level names it or `RUST_LOG` is
//! set (which replaces the configured filter).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Safe to call once per process.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(with_quiet_dependencies(level)))
        .unwrap_or_else(|_| EnvFilter::new(with_quiet_dependencies("info")));
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Pretty => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(crate::cli::term::stderr_color())
        .with_writer(std::io::stderr);
    let result = if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init()
    } else {
        builder.compact().try_init()
    };
    if let Err(e) = result {
        eprintln!("logging was already initialised: {e}");
    }
}

/// Crates whose info-level output is noise to an operator; kept at `warn` unless the
/// configured level names them itself.
const QUIET_DEPENDENCIES: [&str; 1] = ["tokio_cron_scheduler"];

/// `level` with a `warn` directive for each of [`QUIET_DEPENDENCIES`] it does not name.
fn with_quiet_dependencies(level: &str) -> String {
    let mut directives = level.to_owned();
    for target in QUIET_DEPENDENCIES {
        if !level.contains(target) {
            directives.push_str(&format!(",{target}=warn"));
        }
    }
    directives
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_is_kept_at_warn_unless_named() {
        assert_eq!(
            with_quiet_dependencies("info"),
            "info,tokio_cron_scheduler=warn"
        );
        assert_eq!(
            with_quiet_dependencies("info,tokio_cron_scheduler=debug"),
            "info,tokio_cron_scheduler=debug"
        );
    }
}
