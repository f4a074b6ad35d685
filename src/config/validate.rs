//! Validation of a loaded configuration: every problem is collected (not just the first)
//! with its key path and source; advisory findings become warnings. This file covers the
//! daemon-wide sections; `validate_providers.rs` and `validate_actions.rs` cover the rest.

use std::collections::BTreeMap;
use std::time::Duration;

use super::admin::ALL_TENANTS;
use super::cron::check_cron;
use super::database_url::DatabaseUrl;
use super::report::{human, Report};
use super::{validate_actions, validate_providers, validate_tuning, Config};
use crate::intent::TenantId;

/// Largest accepted `dispatcher.batch_size` and `dispatcher.concurrency`.
pub const MAX_BATCH_AND_CONCURRENCY: u32 = 10_000;
/// Shortest accepted admin token, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;
/// Shortest accepted `dispatcher.lease`.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// Runs every rule.
pub(crate) fn validate(config: &Config, report: &mut Report<'_>) {
    validate_database(config, report);
    validate_dispatcher(config, report);
    validate_admin(config, report);
    validate_schedules(config, report);
    validate_logging(config, report);
    validate_providers::validate_providers(config, report);
    validate_actions::validate_actions(config, report);
    validate_tuning::warn_settings_that_cannot_help(config, report);
}

fn validate_database(config: &Config, report: &mut Report<'_>) {
    let db = &config.database;
    if DatabaseUrl::parse(&db.url).is_err() {
        report.error(
            "database.url",
            format!(
                "{:?} is not supported: use sqlite://PATH, postgres:// or postgresql://",
                super::secret::redact_url_password(&db.url)
            ),
        );
    } else if db.is_postgres() {
        if let Err(e) = url::Url::parse(&db.url) {
            report.error("database.url", format!("is not a valid URL: {e}"));
        }
    }
    if db.max_connections < 1 {
        report.error("database.max_connections", "must be at least 1");
    }
}

fn validate_dispatcher(config: &Config, report: &mut Report<'_>) {
    let d = &config.dispatcher;
    let max = u64::from(MAX_BATCH_AND_CONCURRENCY);
    report.range("dispatcher.batch_size", d.batch_size.into(), 1, max);
    report.range("dispatcher.concurrency", d.concurrency.into(), 1, max);
    if d.lease < MIN_LEASE {
        report.error(
            "dispatcher.lease",
            format!("is {}; it must be at least 1s", human(d.lease)),
        );
    }
    report.positive("dispatcher.poll_interval", d.poll_interval);
    report.positive("dispatcher.shutdown_grace", d.shutdown_grace);
    report.positive("dispatcher.release_expired_every", d.release_expired_every);
    if !d.shutdown_grace.is_zero() && d.shutdown_grace >= d.lease {
        report.warn(
            "dispatcher.shutdown_grace",
            format!(
                "{} is not shorter than dispatcher.lease ({}); a delivery still running at \
                 shutdown can outlive its lease, be claimed by another dispatcher and be \
                 recorded as ambiguous",
                human(d.shutdown_grace),
                human(d.lease)
            ),
        );
    }
    if d.owner.chars().count() > 128 || d.owner.chars().any(char::is_control) {
        report.error(
            "dispatcher.owner",
            "must be at most 128 characters, without control characters",
        );
    }
}

fn validate_admin(config: &Config, report: &mut Report<'_>) {
    let admin = &config.admin;
    if admin.metrics_listen == Some(admin.listen) && admin.listen.port() != 0 {
        report.error(
            "admin.metrics_listen",
            format!(
                "is {}, the same address as admin.listen; give it a port of its own, or \
                 leave it out to serve /metrics on the admin listener",
                admin.listen
            ),
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut values: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, token) in config.admin.tokens.iter().enumerate() {
        let key = format!("admin.tokens[{i}]");
        if token.name.trim().is_empty() {
            report.error(format!("{key}.name"), "is required");
        } else if let Some(first) = names.insert(&token.name, i) {
            report.error(
                format!("{key}.name"),
                format!("{:?} is already used by admin.tokens[{first}]", token.name),
            );
        }
        if let Some(secret) = &token.token {
            let value = secret.expose();
            check_token_value(&key, value, report);
            if let Some(first) = values.insert(value, i) {
                report.error(
                    key.clone(),
                    format!("has the same token value as admin.tokens[{first}]; every holder needs their own token"),
                );
            }
        }
        validate_tenants(&key, &token.tenants, report);
    }
}

fn check_token_value(key: &str, value: &str, report: &mut Report<'_>) {
    let chars = value.chars().count();
    if value.is_empty() {
        report.error(format!("{key}.token"), "is empty");
    } else if chars < MIN_TOKEN_CHARS {
        report.error(
            format!("{key}.token"),
            format!("is {chars} characters long; use at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 32`)"),
        );
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        report.error(
            format!("{key}.token"),
            "must not contain whitespace or control characters",
        );
    }
}

fn validate_tenants(key: &str, tenants: &[String], report: &mut Report<'_>) {
    let key = format!("{key}.tenants");
    if tenants.is_empty() {
        report.error(
            key,
            "must list at least one tenant, or \"*\" for all tenants",
        );
        return;
    }
    for tenant in tenants.iter().filter(|t| *t != ALL_TENANTS) {
        if let Err(e) = TenantId::parse(tenant.clone()) {
            report.error(key.clone(), format!("{tenant:?}: {}", e.reason));
        }
    }
    if tenants.len() > 1 && tenants.iter().any(|t| t == ALL_TENANTS) {
        report.warn(
            key,
            "\"*\" already grants every tenant; the other entries are redundant",
        );
    }
}

fn validate_schedules(config: &Config, report: &mut Report<'_>) {
    let r = &config.retention;
    report.positive("retention.finished_after", r.finished_after);
    report.positive("retention.tombstone_after", r.tombstone_after);
    if r.tombstone_after <= r.finished_after {
        report.error(
            "retention.tombstone_after",
            format!(
                "{} is shorter than retention.finished_after ({}); tombstones must outlive \
                 the intents they replace",
                human(r.tombstone_after),
                human(r.finished_after)
            ),
        );
    }
    report.range("retention.batch_size", u64::from(r.batch_size), 1, 100_000);
    if r.batch_pause > std::time::Duration::from_secs(60) {
        report.error(
            "retention.batch_pause",
            format!(
                "{} between batches would stretch one pass over hours; at most 60s",
                human(r.batch_pause)
            ),
        );
    }
    if let Err(e) = check_cron(&r.schedule) {
        report.error("retention.schedule", e);
    }
    if let Err(e) = check_cron(&config.probes.schedule) {
        report.error("probes.schedule", e);
    }
}

fn validate_logging(config: &Config, report: &mut Report<'_>) {
    let level = &config.logging.level;
    if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(level) {
        report.error(
            "logging.level",
            format!("{level:?} is not a valid filter directive: {e}"),
        );
    }
}
