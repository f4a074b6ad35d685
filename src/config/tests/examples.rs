//! The example files under `config/` load cleanly, and no input panics the loader.

use std::path::PathBuf;

use proptest::prelude::*;

use super::env;
use crate::action::{AttemptClass, RetrySafety};
use crate::config::{Config, LoadedConfig, NotFoundMeaning};

const EXAMPLE_ENV: [(&str, &str); 6] = [
    ("OUTBOXD_TOKEN_ALICE", "alice-0123456789abcdef0123456789"),
    (
        "OUTBOXD_TOKEN_SUPPORT_DASHBOARD",
        "dash-0123456789abcdef0123456789",
    ),
    ("PAYMENTS_AUTH", "Bearer sk_test_0123456789abcdef"),
    (
        "PAYMENTS_WEBHOOK_SECRET",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ),
    ("SUPPORT_API_TOKEN", "Token support-0123456789"),
    ("OUTBOXD_DB_PASSWORD", "correct horse battery staple"),
];

fn load_example(name: &str) -> LoadedConfig {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(name);
    Config::load_with_env(Some(&path), env(&EXAMPLE_ENV)).unwrap_or_else(|e| panic!("{name}:\n{e}"))
}

fn check_example(loaded: &LoadedConfig) {
    assert!(loaded.warnings.is_empty(), "{:#?}", loaded.warnings);
    let config = &loaded.config;
    let safety = |a: &str| config.action(a).unwrap().retry_safety;
    assert_eq!(safety("issue_refund"), RetrySafety::IdempotentWithKey);
    assert_eq!(
        safety("create_support_task"),
        RetrySafety::IdempotentWithKey
    );
    assert_eq!(safety("send_notification"), RetrySafety::NotIdempotent);
    let payments = config.provider_for("issue_refund").unwrap();
    assert_eq!(payments.status_override(409), Some(AttemptClass::Rejected));
    assert!(payments.signing.as_ref().unwrap().key().is_some());
    let probe = config
        .action("issue_refund")
        .unwrap()
        .probe
        .as_ref()
        .unwrap();
    assert_eq!(probe.not_found_means, NotFoundMeaning::NotApplied);
    assert_eq!(config.admin.tokens.len(), 2);
    let effective = config.effective_toml_redacted();
    for (_, secret) in EXAMPLE_ENV {
        assert!(!effective.contains(secret), "{effective}");
        assert!(!format!("{config:?}").contains(secret));
    }
}

#[test]
fn sqlite_example_loads_cleanly() {
    let loaded = load_example("sqlite.example.toml");
    check_example(&loaded);
    assert!(!loaded.config.database.is_postgres());
}

#[test]
fn postgres_example_loads_cleanly() {
    let loaded = load_example("postgres.example.toml");
    check_example(&loaded);
    let url = &loaded.config.database.url;
    assert!(
        url.starts_with("postgres://outboxd:correct%20horse%20battery%20staple@db.internal"),
        "{url}"
    );
}

#[test]
fn example_without_its_environment_names_every_missing_variable() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/postgres.example.toml");
    let error = Config::load_with_env(Some(&path), env(&[])).unwrap_err();
    assert_eq!(error.problems.len(), EXAMPLE_ENV.len(), "{error}");
    for (var, _) in EXAMPLE_ENV {
        assert!(
            error
                .to_string()
                .contains(&format!("environment variable {var} is not set")),
            "{error}"
        );
    }
}

fn section() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("[database]".to_owned()),
        Just("[dispatcher]".to_owned()),
        Just("[admin]".to_owned()),
        Just("[[admin.tokens]]".to_owned()),
        Just("[retention]".to_owned()),
        Just("[probes]".to_owned()),
        Just("[logging]".to_owned()),
        Just("[providers.p]".to_owned()),
        Just("[providers.p.headers]".to_owned()),
        Just("[providers.p.signing]".to_owned()),
        Just("[actions.a]".to_owned()),
        Just("[actions.a.retry]".to_owned()),
        Just("[actions.a.probe]".to_owned()),
        "\\[[a-z._\"]{1,20}\\]",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "url",
            "max_connections",
            "password_env",
            "batch_size",
            "concurrency",
            "lease",
            "shutdown_grace",
            "listen",
            "name",
            "token",
            "token_env",
            "role",
            "tenants",
            "schedule",
            "format",
            "level",
            "base_url",
            "status_overrides",
            "Authorization",
            "secret_env",
            "provider",
            "method",
            "path",
            "retry_safety",
            "reference_pointer",
            "max_attempts",
            "deadline",
            "not_found_status",
            "not_found_means",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z_\"-]{1,12}",
    ]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        Just("true".to_owned()),
        "\"[0-9]{1,5}(ms|s|m|h|d|x)?\"",
        "\"[ -~]{0,24}\"",
        "\\[[0-9a-z\", ]{0,16}\\]",
        "\\{ ?[a-z0-9\"]{1,6} = \"[a-z_]{0,10}\" ?\\}",
        "[ -~]{0,12}",
    ]
}

fn document() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        section(),
        (key(), value()).prop_map(|(k, v)| format!("{k} = {v}")),
        "[ -~\t]{0,30}",
    ];
    prop::collection::vec(line, 0..24).prop_map(|lines| lines.join("\n"))
}

fn env_vars() -> impl Strategy<Value = Vec<(String, String)>> {
    let var = ("OUTBOXD__[A-Z_]{0,30}", "[ -~]{0,20}");
    prop::collection::vec(var, 0..4)
}

proptest! {
    #[test]
    fn toml_ish_input_never_panics(doc in document(), vars in env_vars()) {
        let _ = Config::from_toml_str(&doc);
        let _ = Config::from_toml_str_with_env(&doc, vars);
    }

    #[test]
    fn arbitrary_text_never_panics(doc in any::<String>()) {
        let _ = Config::from_toml_str(&doc);
    }
}
