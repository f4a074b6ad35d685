//! Defaults, the file → environment precedence, error paths and sources, helpers.

use std::io::Write;
use std::time::Duration;

use super::{env, load_err, load_ok, problem_at, BASE};
use crate::action::RetryPolicy;
use crate::config::{Config, LogFormat};

fn temp_toml(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

#[test]
fn defaults_are_a_valid_sqlite_config_without_providers() {
    let config = Config::default();
    assert_eq!(config.validate(), Ok(vec![]));
    assert_eq!(config.database.url, "sqlite://outboxd.db");
    assert!(!config.database.is_postgres());
    assert_eq!(config.database.max_connections, 8);
    assert_eq!(config.dispatcher.batch_size, 200);
    assert_eq!(config.dispatcher.concurrency, 256);
    assert_eq!(config.dispatcher.lease, Duration::from_secs(30));
    assert_eq!(config.dispatcher.shutdown_grace, Duration::from_secs(20));
    assert_eq!(config.admin.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(
        config.retention.tombstone_after,
        Duration::from_secs(400 * 86_400)
    );
    assert_eq!(config.logging.format, LogFormat::Auto);
    assert!(config.providers.is_empty() && config.actions.is_empty());

    let loaded = load_ok("", &[]);
    assert_eq!(loaded.config, config);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn dispatcher_owner_defaults_to_host_and_pid() {
    let mut config = Config::default();
    let owner = config.dispatcher_owner();
    assert!(
        owner.ends_with(&format!("-{}", std::process::id())),
        "{owner}"
    );
    assert!(owner.len() > format!("-{}", std::process::id()).len());
    config.dispatcher.owner = "replica-a".into();
    assert_eq!(config.dispatcher_owner(), "replica-a");
}

#[test]
fn environment_overrides_the_file_which_overrides_defaults() {
    let file = temp_toml(&format!(
        "{BASE}\n[dispatcher]\nconcurrency = 16\nbatch_size = 50\n[database]\nurl = \"sqlite://from-file.db\"\n"
    ));
    let vars = env(&[
        ("OUTBOXD__DISPATCHER__CONCURRENCY", "64"),
        ("OUTBOXD__DATABASE__URL", "sqlite://from-env.db"),
        ("OUTBOXD__PROVIDERS__PAYMENTS__REQUEST_TIMEOUT", "15s"),
        ("OUTBOXD__LOGGING__FORMAT", "json"),
        ("UNRELATED", "ignored"),
    ]);
    let config = Config::load_with_env(Some(file.path()), vars)
        .unwrap()
        .config;
    assert_eq!(config.dispatcher.concurrency, 64, "env wins over the file");
    assert_eq!(config.database.url, "sqlite://from-env.db");
    assert_eq!(config.dispatcher.batch_size, 50, "file wins over defaults");
    assert_eq!(
        config.dispatcher.lease,
        Duration::from_secs(30),
        "default kept"
    );
    let payments = &config.providers["payments"];
    assert_eq!(payments.request_timeout, Duration::from_secs(15));
    assert_eq!(payments.base_url, "https://payments.example.com");
    assert_eq!(config.logging.format, LogFormat::Json);
}

#[test]
fn unknown_keys_are_rejected_with_path_and_file() {
    let file = temp_toml("[dispatcher]\nconcurency = 4\n");
    let error = Config::load_with_env(Some(file.path()), env(&[])).unwrap_err();
    let message = problem_at(&error, "dispatcher.concurency");
    assert!(message.contains("unknown key"), "{message}");
    assert!(
        message.contains("concurrency"),
        "lists the expected keys: {message}"
    );
    let shown = error.to_string();
    assert!(
        shown.contains(&format!("(from {})", file.path().display())),
        "{shown}"
    );

    let error = load_err(
        "[[admin.tokens]]\nname = \"a\"\nrole = \"viewer\"\nrol = 1\n",
        &[],
    );
    problem_at(&error, "admin.tokens[0].rol");
    let error = load_err(
        &format!("{BASE}\n[actions.issue_refund.retry]\nattempts = 3\n"),
        &[],
    );
    problem_at(&error, "actions.issue_refund.retry.attempts");
}

#[test]
fn environment_problems_name_the_variable() {
    let error = load_err("", &[("OUTBOXD__DATABSE__URL", "sqlite://x.db")]);
    assert_eq!(
        error
            .to_string()
            .lines()
            .next()
            .unwrap()
            .split(" (from ")
            .nth(1),
        Some("environment variable OUTBOXD__DATABSE__URL)")
    );
    let error = load_err("", &[("OUTBOXD__DISPATCHER__CONCURRENCY", "lots")]);
    let shown = error.to_string();
    assert!(
        shown.starts_with("dispatcher.concurrency: invalid type"),
        "{shown}"
    );
    assert!(
        shown.ends_with("(from environment variable OUTBOXD__DISPATCHER__CONCURRENCY)"),
        "{shown}"
    );

    let error = load_err("", &[("OUTBOXD__DISPATCHER__CONCURRENCY", "0")]);
    assert_eq!(
        error.to_string(),
        "dispatcher.concurrency: is 0; it must be between 1 and 10000 \
         (from environment variable OUTBOXD__DISPATCHER__CONCURRENCY)"
    );
}

#[test]
fn malformed_environment_names_are_ignored_with_a_warning() {
    let loaded = load_ok("", &[("OUTBOXD__DISPATCHER____CONCURRENCY", "3")]);
    assert_eq!(loaded.config.dispatcher.concurrency, 256);
    assert!(loaded.warnings[0].contains("OUTBOXD__DISPATCHER____CONCURRENCY"));
}

#[test]
fn file_and_syntax_errors_are_one_line() {
    let missing = std::path::Path::new("/nonexistent/outboxd.toml");
    let error = Config::load_with_env(Some(missing), env(&[])).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("cannot read the configuration file"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .ends_with("(from /nonexistent/outboxd.toml)"),
        "{error}"
    );

    let error = load_err("[dispatcher\nbatch_size = 1\n", &[]);
    assert_eq!(error.problems.len(), 1);
    assert!(!error.to_string().contains('\n'), "{error}");
    assert!(error.to_string().contains("line 1"), "{error}");
}

#[test]
fn all_validation_problems_are_reported_together() {
    let toml = "[dispatcher]\nbatch_size = 0\nconcurrency = 0\nlease = \"10ms\"\n\
                [database]\nurl = \"mysql://x\"\n[logging]\nlevel = \"info,=[\"\n";
    let error = load_err(toml, &[]);
    for key in [
        "dispatcher.batch_size",
        "dispatcher.concurrency",
        "dispatcher.lease",
        "database.url",
        "logging.level",
    ] {
        problem_at(&error, key);
    }
    assert_eq!(error.to_string().lines().count(), error.problems.len());
}

#[test]
fn partial_retry_tables_take_the_remaining_defaults() {
    let toml =
        format!("{BASE}\n[actions.issue_refund.retry]\nmax_attempts = 3\ndeadline = \"2h\"\n");
    let config = load_ok(&toml, &[]).config;
    let retry = &config.actions["issue_refund"].retry;
    let defaults = RetryPolicy::default();
    assert_eq!(retry.max_attempts, 3);
    assert_eq!(retry.deadline, Duration::from_secs(7200));
    assert_eq!(retry.initial_backoff, defaults.initial_backoff);
    assert_eq!(retry.max_retry_after, defaults.max_retry_after);
    let no_table = load_ok(BASE, &[]).config;
    assert_eq!(no_table.actions["issue_refund"].retry, defaults);
}

#[test]
fn lookup_helpers() {
    let config = load_ok(BASE, &[]).config;
    let action = config.action("issue_refund").unwrap();
    assert_eq!(action.method, "POST");
    assert_eq!(action.http_method(), Some(reqwest::Method::POST));
    assert!(action.probe.is_none());
    let provider = config.provider_for("issue_refund").unwrap();
    assert_eq!(provider.idempotency_header, "Idempotency-Key");
    assert_eq!(provider.key_retention, Duration::from_secs(86_400));
    assert_eq!(
        provider.endpoint(&action.path).unwrap().as_str(),
        "https://payments.example.com/v1/refunds"
    );
    assert!(config.action("nope").is_none());
    assert!(config.provider_for("nope").is_none());
}

#[test]
fn effective_toml_round_trips_without_secrets() {
    for config in [Config::default(), load_ok(BASE, &[]).config] {
        let text = config.effective_toml_redacted();
        let again = load_ok(&text, &[]).config;
        assert_eq!(again, config, "{text}");
    }
}

#[test]
fn admin_cookie_secure_is_off_by_default_and_can_be_turned_on() {
    let default = Config::default().effective_toml_redacted();
    assert!(default.contains("cookie_secure = false"), "{default}");
    let loaded = load_ok("[admin]\ncookie_secure = true\n", &[]);
    let effective = loaded.config.effective_toml_redacted();
    assert!(effective.contains("cookie_secure = true"), "{effective}");
}
