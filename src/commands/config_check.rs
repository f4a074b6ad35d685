//! `outboxd config check [--strict] [--no-secrets] [--json]`: load and validate the
//! configuration, print the effective configuration (it reads back: secrets from
//! variables and files print as their references), and fail on any error — or, with
//! `--strict`, on any warning.
//!
//! `--json` prints one object on stdout, success or not:
//! `{"ok", "strict", "secrets_checked", "errors": [{"key", "message", "origin"}],
//! "warnings": [..], "config": {..} | null}`.

use std::path::Path;

use serde_json::{json, Value};

use super::args::CheckArgs;
use crate::config::{Config, ConfigError, SecretNeeds};

/// Why the check failed (already printed).
#[derive(Debug, thiserror::Error)]
pub enum CheckFailed {
    /// The configuration has errors.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// `--strict` and the configuration has warnings.
    #[error("{count} warning(s), and --strict treats warnings as errors")]
    Warnings {
        /// How many.
        count: usize,
    },
}

/// The outcome of a check: the printed configuration or the errors, and the warnings.
struct Checked {
    config: Option<Config>,
    errors: Option<ConfigError>,
    warnings: Vec<String>,
}

/// Runs the check on `path` (or defaults and the environment). In text mode the
/// configuration goes to stdout and warnings and the verdict to stderr; `json` prints the
/// report object instead. Errors are returned for `main` to print and exit with.
pub fn run(path: Option<&Path>, args: CheckArgs, json: bool) -> Result<(), CheckFailed> {
    let needs = if args.no_secrets {
        SecretNeeds::Nothing
    } else {
        SecretNeeds::All
    };
    let checked = match Config::load_for(path, needs) {
        Ok(loaded) => Checked {
            config: Some(loaded.config),
            errors: None,
            warnings: loaded.warnings,
        },
        Err(errors) => Checked {
            config: None,
            errors: Some(errors),
            warnings: Vec::new(),
        },
    };
    let failed_on_warnings = args.strict && !checked.warnings.is_empty();
    if json {
        println!("{}", report_json(&checked, args));
    } else {
        for warning in &checked.warnings {
            eprintln!("warning: {warning}");
        }
        if let (Some(config), false) = (&checked.config, failed_on_warnings) {
            print!("{}", config.effective_toml_redacted());
            eprintln!(
                "configuration OK ({} warning(s)){}",
                checked.warnings.len(),
                if args.no_secrets {
                    "; secrets were not read (--no-secrets)"
                } else {
                    ""
                }
            );
        }
    }
    if let Some(errors) = checked.errors {
        return Err(errors.into());
    }
    if failed_on_warnings {
        return Err(CheckFailed::Warnings {
            count: checked.warnings.len(),
        });
    }
    Ok(())
}

fn report_json(checked: &Checked, args: CheckArgs) -> Value {
    let errors: Vec<Value> = checked
        .errors
        .iter()
        .flat_map(|e| &e.problems)
        .map(|p| json!({"key": p.key, "message": p.message, "origin": p.origin}))
        .collect();
    let warnings_pass = !args.strict || checked.warnings.is_empty();
    let ok = errors.is_empty() && warnings_pass;
    json!({
        "ok": ok,
        "strict": args.strict,
        "secrets_checked": !args.no_secrets,
        "errors": errors,
        "warnings": checked.warnings,
        "config": checked.config.as_ref().map(Config::printable),
    })
}
