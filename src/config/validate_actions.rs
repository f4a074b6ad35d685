//! Validation of `[actions.*]`: the provider reference, methods, paths and JSON pointers,
//! retry budgets, probe placeholders, and the key-retention cross-check that protects the
//! retry-safety contract of `idempotent_with_key` actions.

use super::actions::{ActionConfig, ProbeConfig, HTTP_METHODS, PROBE_PLACEHOLDERS};
use super::provider::ProviderConfig;
use super::report::{human, Report};
use super::Config;
use crate::action::RetrySafety;
use crate::intent::ActionName;

/// Validates every action.
pub(crate) fn validate_actions(config: &Config, report: &mut Report<'_>) {
    for (name, action) in &config.actions {
        let key = format!("actions.{name}");
        if let Err(e) = ActionName::parse(name.clone()) {
            report.error(key.clone(), format!("action name {name:?} {}", e.reason));
        }
        let provider = check_provider_ref(&key, action, config, report);
        check_method(&format!("{key}.method"), &action.method, report);
        check_path(&format!("{key}.path"), &action.path, false, report);
        check_pointer(
            &format!("{key}.reference_pointer"),
            &action.reference_pointer,
            report,
        );
        check_retry(&key, action, report);
        if let (Some(provider), RetrySafety::IdempotentWithKey) = (provider, action.retry_safety) {
            check_key_retention(&key, action, provider, report);
        }
        if let Some(probe) = &action.probe {
            check_probe(&format!("{key}.probe"), probe, report);
        }
    }
}

fn check_provider_ref<'c>(
    key: &str,
    action: &ActionConfig,
    config: &'c Config,
    report: &mut Report<'_>,
) -> Option<&'c ProviderConfig> {
    let key = format!("{key}.provider");
    if action.provider.is_empty() {
        report.error(key, "is required");
        return None;
    }
    let found = config.providers.get(&action.provider);
    if found.is_none() {
        report.error(
            key,
            format!("{:?} is not defined under [providers]", action.provider),
        );
    }
    found
}

fn check_method(key: &str, method: &str, report: &mut Report<'_>) {
    if !HTTP_METHODS.contains(&method) {
        report.error(
            key,
            format!(
                "{method:?} is not an HTTP method; use one of {}",
                HTTP_METHODS.join(", ")
            ),
        );
    }
}

/// Action paths are sent as written; probe paths may carry `{placeholders}`.
fn check_path(key: &str, path: &str, placeholders: bool, report: &mut Report<'_>) {
    if path.is_empty() {
        report.error(key, "is required");
        return;
    }
    if !path.starts_with('/') {
        report.error(key, format!("{path:?} must start with \"/\""));
    }
    if path.contains(|c: char| c.is_whitespace() || c.is_control() || c == '#') {
        report.error(
            key,
            format!("{path:?} must not contain whitespace, control characters or \"#\""),
        );
    }
    if placeholders {
        match super::actions::placeholders(path) {
            Ok(names) => {
                for unknown in names
                    .iter()
                    .filter(|n| !PROBE_PLACEHOLDERS.contains(&n.as_str()))
                {
                    report.error(
                        key,
                        format!(
                            "unknown placeholder {{{unknown}}}; known: {}",
                            known_placeholders()
                        ),
                    );
                }
                if names.is_empty() {
                    report.warn(key, format!("has no placeholder, so every intent is looked up at the same URL; use one of {}", known_placeholders()));
                }
            }
            Err(why) => report.error(key, why),
        }
    } else if path.contains(['{', '}']) {
        report.error(
            key,
            format!("{path:?}: placeholders are only supported in probe paths"),
        );
    }
}

fn known_placeholders() -> String {
    PROBE_PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(" ")
}

fn check_pointer(key: &str, pointer: &str, report: &mut Report<'_>) {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        report.error(key, format!("{pointer:?} is not a JSON pointer: use \"\" or a path starting with \"/\" such as \"/id\""));
    }
}

fn check_retry(key: &str, action: &ActionConfig, report: &mut Report<'_>) {
    let retry = &action.retry;
    let key = format!("{key}.retry");
    if retry.max_attempts < 1 {
        report.error(
            format!("{key}.max_attempts"),
            "must be at least 1 (the first attempt counts)",
        );
    }
    report.positive(&format!("{key}.initial_backoff"), retry.initial_backoff);
    report.positive(&format!("{key}.max_backoff"), retry.max_backoff);
    report.positive(&format!("{key}.deadline"), retry.deadline);
    report.positive(&format!("{key}.max_retry_after"), retry.max_retry_after);
    if retry.initial_backoff > retry.max_backoff {
        report.error(
            format!("{key}.initial_backoff"),
            format!(
                "{} is longer than max_backoff ({})",
                human(retry.initial_backoff),
                human(retry.max_backoff)
            ),
        );
    }
}

fn check_key_retention(
    key: &str,
    action: &ActionConfig,
    provider: &ProviderConfig,
    report: &mut Report<'_>,
) {
    let (deadline, retention) = (action.retry.deadline, provider.key_retention);
    if deadline > retention {
        let window = human(retention);
        report.warn(
            format!("{key}.retry.deadline"),
            format!(
                "{} exceeds providers.{}.key_retention ({window}): after {window} the provider \
                 may have forgotten the key; a retry after an ambiguous attempt past that point \
                 could apply twice, so outboxd will send such intents to reconciliation instead \
                 of retrying",
                human(deadline),
                action.provider
            ),
        );
    }
}

fn check_probe(key: &str, probe: &ProbeConfig, report: &mut Report<'_>) {
    check_method(&format!("{key}.method"), &probe.method, report);
    check_path(&format!("{key}.path"), &probe.path, true, report);
    if !probe.path.contains("{idempotency_key}") && !probe.path.contains("{tenant}") {
        report.warn(
            format!("{key}.path"),
            "names neither {idempotency_key} nor {tenant}: two tenants with the same operation id \
             would share one probe answer (use {idempotency_key}: it is unique per tenant)",
        );
    }
    check_pointer(
        &format!("{key}.reference_pointer"),
        &probe.reference_pointer,
        report,
    );
    for status in &probe.not_found_status {
        if !(100..=599).contains(status) {
            report.error(
                format!("{key}.not_found_status"),
                format!("{status} is not an HTTP status between 100 and 599"),
            );
        }
    }
}
