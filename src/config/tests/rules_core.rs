//! One test per validation rule of the daemon-wide sections (errors and warnings).

use super::{assert_rejected, load_ok, warnings_of};
use crate::config::Config;

fn token_block(name: &str, token: &str, extra: &str) -> String {
    format!("[[admin.tokens]]\nname = \"{name}\"\ntoken = \"{token}\"\nrole = \"operator\"\ntenants = [\"*\"]\n{extra}\n")
}

const GOOD_TOKEN: &str = "0123456789abcdef0123";

#[test]
fn database_rules() {
    assert_rejected(
        "[database]\nurl = \"mysql://db/x\"\n",
        "database.url",
        "is not supported",
    );
    assert_rejected(
        "[database]\nmax_connections = 0\n",
        "database.max_connections",
        "at least 1",
    );
    for url in [
        "sqlite://a.db",
        "sqlite::memory:",
        "postgres://u@h/db",
        "postgresql://u@h/db",
    ] {
        load_ok(&format!("[database]\nurl = \"{url}\"\n"), &[]);
    }
}

#[test]
fn dispatcher_rules() {
    let cases = [
        (
            "batch_size = 0",
            "dispatcher.batch_size",
            "between 1 and 10000",
        ),
        (
            "batch_size = 10001",
            "dispatcher.batch_size",
            "between 1 and 10000",
        ),
        (
            "concurrency = 0",
            "dispatcher.concurrency",
            "between 1 and 10000",
        ),
        (
            "concurrency = 10001",
            "dispatcher.concurrency",
            "between 1 and 10000",
        ),
        ("lease = \"999ms\"", "dispatcher.lease", "at least 1s"),
        (
            "poll_interval = \"0s\"",
            "dispatcher.poll_interval",
            "longer than zero",
        ),
        (
            "shutdown_grace = \"0s\"",
            "dispatcher.shutdown_grace",
            "longer than zero",
        ),
        (
            "release_expired_every = \"0s\"",
            "dispatcher.release_expired_every",
            "longer than zero",
        ),
        (
            "owner = \"a\\nb\"",
            "dispatcher.owner",
            "control characters",
        ),
    ];
    for (line, key, fragment) in cases {
        assert_rejected(&format!("[dispatcher]\n{line}\n"), key, fragment);
    }
    load_ok("[dispatcher]\nbatch_size = 10000\nconcurrency = 1\nlease = \"1s\"\nshutdown_grace = \"500ms\"\n", &[]);
}

#[test]
fn shutdown_grace_not_below_lease_is_a_warning() {
    let warnings = warnings_of("[dispatcher]\nlease = \"10s\"\nshutdown_grace = \"10s\"\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]
        .starts_with("dispatcher.shutdown_grace: 10s is not shorter than dispatcher.lease (10s)"));
    assert!(warnings_of("[dispatcher]\nlease = \"30s\"\nshutdown_grace = \"20s\"\n").is_empty());
}

#[test]
fn admin_token_rules() {
    let two = format!(
        "{}{}",
        token_block("ops", GOOD_TOKEN, ""),
        token_block("ops", "fedcba9876543210fedc", "")
    );
    assert_rejected(
        &two,
        "admin.tokens[1].name",
        "already used by admin.tokens[0]",
    );
    let same = format!(
        "{}{}",
        token_block("a", GOOD_TOKEN, ""),
        token_block("b", GOOD_TOKEN, "")
    );
    assert_rejected(
        &same,
        "admin.tokens[1]",
        "same token value as admin.tokens[0]",
    );
    assert_rejected(
        &token_block("a", "short", ""),
        "admin.tokens[0].token",
        "at least 16",
    );
    assert_rejected(
        &token_block("a", "", ""),
        "admin.tokens[0].token",
        "is empty",
    );
    assert_rejected(
        &token_block("a", "0123456789 abcdef0123", ""),
        "admin.tokens[0].token",
        "whitespace",
    );
    assert_rejected(
        &token_block("", GOOD_TOKEN, ""),
        "admin.tokens[0].name",
        "is required",
    );
    let no_source = "[[admin.tokens]]\nname = \"a\"\nrole = \"viewer\"\ntenants = [\"*\"]\n";
    assert_rejected(
        no_source,
        "admin.tokens[0]",
        "needs one of token_env, token_file or token",
    );
    let bad_role = "[[admin.tokens]]\nname = \"a\"\ntoken = \"0123456789abcdef\"\nrole = \"admin\"\ntenants = [\"*\"]\n";
    assert_rejected(
        bad_role,
        "admin.tokens[0].role",
        "\"admin\" is not one of: viewer, operator",
    );
}

#[test]
fn admin_tenant_rules() {
    let block = |tenants: &str| {
        format!("[[admin.tokens]]\nname = \"a\"\ntoken = \"{GOOD_TOKEN}\"\nrole = \"viewer\"\ntenants = {tenants}\n")
    };
    assert_rejected(
        &block("[]"),
        "admin.tokens[0].tenants",
        "at least one tenant",
    );
    assert_rejected(
        &block("[\" acme\"]"),
        "admin.tokens[0].tenants",
        "whitespace",
    );
    let warnings = warnings_of(&block("[\"*\", \"acme\"]"));
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("already grants every tenant")),
        "{warnings:?}"
    );
    let config = load_ok(&block("[\"acme\", \"globex\"]"), &[]).config;
    let token = &config.admin.tokens[0];
    assert!(token.allows_tenant("acme") && !token.allows_tenant("initech"));
    assert!(!token.allows_all_tenants());
    assert!(config.admin.token_matching(GOOD_TOKEN).is_some());
    assert!(config
        .admin
        .token_matching("0123456789abcdef0124")
        .is_none());
}

#[test]
fn schedule_and_retention_rules() {
    assert_rejected(
        "[retention]\nschedule = \"*/5 * * * *\"\n",
        "retention.schedule",
        "expected 6",
    );
    assert_rejected(
        "[probes]\nschedule = \"61 * * * * *\"\n",
        "probes.schedule",
        "\"61 * * * * *\" is not a valid schedule",
    );
    assert_rejected(
        "[retention]\nfinished_after = \"0s\"\n",
        "retention.finished_after",
        "longer than zero",
    );
    assert_rejected(
        "[retention]\nfinished_after = \"30d\"\ntombstone_after = \"7d\"\n",
        "retention.tombstone_after",
        "7d is shorter than retention.finished_after (30d)",
    );
}

#[test]
fn logging_rules() {
    assert_rejected(
        "[logging]\nformat = \"xml\"\n",
        "logging.format",
        "is not one of: auto, pretty, json",
    );
    assert_rejected(
        "[logging]\nlevel = \"outboxd=loud\"\n",
        "logging.level",
        "not a valid filter directive",
    );
    load_ok(
        "[logging]\nformat = \"json\"\nlevel = \"info,outboxd=debug,sqlx=warn\"\n",
        &[],
    );
}

#[test]
fn validate_checks_configs_built_in_code() {
    let mut config = Config::default();
    config.dispatcher.batch_size = 0;
    config.retention.schedule = "nope".into();
    let error = config.validate().unwrap_err();
    assert_eq!(error.problems.len(), 2, "{error}");
    assert_eq!(error.problems[0].origin, None);
}
