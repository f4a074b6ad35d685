//! Tests of the configuration module: layering, every validation rule, secrets, the
//! example files, and a property test that the loader never panics.

mod examples;
mod layering;
mod rules_actions;
mod rules_core;
mod rules_providers;
mod secrets;

use super::{Config, ConfigError, LoadedConfig};

/// A small valid configuration: one provider, one keyed action.
pub(super) const BASE: &str = r#"
[providers.payments]
base_url = "https://payments.example.com"

[actions.issue_refund]
provider = "payments"
path = "/v1/refunds"
retry_safety = "idempotent_with_key"
reference_pointer = "/id"
"#;

/// An explicit environment from pairs.
pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Loads `toml` with `pairs` as the environment, panicking with every problem on error.
pub(super) fn load_ok(toml: &str, pairs: &[(&str, &str)]) -> LoadedConfig {
    Config::from_toml_str_with_env(toml, env(pairs)).unwrap_or_else(|e| panic!("{e}"))
}

/// Loads `toml` expecting failure.
pub(super) fn load_err(toml: &str, pairs: &[(&str, &str)]) -> ConfigError {
    match Config::from_toml_str_with_env(toml, env(pairs)) {
        Ok(loaded) => panic!("expected an error, got {:#?}", loaded.config),
        Err(e) => e,
    }
}

/// The message of the problem at `key` (panics, listing all problems, if there is none).
pub(super) fn problem_at(error: &ConfigError, key: &str) -> String {
    error
        .problems
        .iter()
        .find(|p| p.key == key)
        .map(|p| p.message.clone())
        .unwrap_or_else(|| panic!("no problem at {key}; got:\n{error}"))
}

/// Asserts that `toml` fails with a problem at `key` whose message contains `fragment`.
pub(super) fn assert_rejected(toml: &str, key: &str, fragment: &str) {
    let error = load_err(toml, &[]);
    let message = problem_at(&error, key);
    assert!(
        message.contains(fragment),
        "{key}: expected {fragment:?} in {message:?}"
    );
}

/// The warnings of a configuration that must load.
pub(super) fn warnings_of(toml: &str) -> Vec<String> {
    load_ok(toml, &[]).warnings
}

/// A configuration with the payments provider and `issue_refund` action, where `provider`
/// and `action` replace or add keys (raw TOML values) and `rest` is appended.
pub(super) fn toml_with(provider: &[(&str, &str)], action: &[(&str, &str)], rest: &str) -> String {
    fn table(name: &str, defaults: &[(&str, &str)], overrides: &[(&str, &str)]) -> String {
        let mut keys: Vec<(&str, &str)> = defaults.to_vec();
        for (k, v) in overrides {
            match keys.iter_mut().find(|(key, _)| key == k) {
                Some(slot) => slot.1 = v,
                None => keys.push((k, v)),
            }
        }
        let body: Vec<String> = keys.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        format!("[{name}]\n{}\n", body.join("\n"))
    }
    let provider = table(
        "providers.payments",
        &[("base_url", "\"https://payments.example.com\"")],
        provider,
    );
    let action = table(
        "actions.issue_refund",
        &[
            ("provider", "\"payments\""),
            ("path", "\"/v1/refunds\""),
            ("retry_safety", "\"idempotent_with_key\""),
            ("reference_pointer", "\"/id\""),
        ],
        action,
    );
    format!("{provider}\n{action}\n{rest}")
}

/// Keys to override (raw TOML), the key expected in the error, a fragment of its message.
pub(super) type Case = (
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);
