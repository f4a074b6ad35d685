//! Configuration: built-in defaults → TOML file → `OUTBOXD__` environment variables →
//! validation.
//!
//! ```text
//! OUTBOXD__DATABASE__URL=postgres://outboxd@db/outbox   # overrides [database] url
//! OUTBOXD__DISPATCHER__CONCURRENCY=64                    # overrides [dispatcher] concurrency
//! ```
//!
//! * Unknown keys are errors, reported with their key path and source.
//! * Secrets (admin tokens, provider headers, signing secrets, the database password) are
//!   given as a literal, `*_env` (an environment variable) or `*_file` (a file, trailing
//!   newline ignored) and resolved at load; they print as `[REDACTED]` everywhere.
//! * Validation collects every problem ([`ConfigError`] displays one line each) and
//!   returns advisory [`LoadedConfig::warnings`], e.g. an `idempotent_with_key` action
//!   whose retry deadline outlives its provider's key retention.
//!
//! Environment keys are lower-cased, so `[providers.NAME]` and `[actions.NAME]` tables (and
//! `headers` entries) can only be overridden from the environment when `NAME` is lower
//! case; `OUTBOXD_CONFIG`-style names with a single underscore are not overrides. Values are parsed
//! like figment's `Env` provider (numbers, booleans, `[arrays]`); quote a value to force a
//! string. Secret files are read relative to the working directory.

mod actions;
mod admin;
mod cron;
mod database_url;
mod duration;
mod error;
mod lease;
mod load;
mod origins;
mod print;
mod provider;
mod report;
mod resolve;
mod secret;
mod sections;
mod validate;
mod validate_actions;
mod validate_providers;
mod validate_tuning;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use actions::{
    placeholders, resend_policies, ActionConfig, NotFoundMeaning, ProbeConfig, HTTP_METHODS,
    PROBE_PLACEHOLDERS,
};
pub use admin::{AdminConfig, AdminToken, Role, ALL_TENANTS};
pub use database_url::{DatabaseUrl, UnsupportedScheme};
pub use duration::format_duration;
pub use error::{ConfigError, ConfigProblem};
pub use lease::{shortest_lease, SEND_MARGIN};
pub use load::{ENV_PREFIX, ENV_SEPARATOR};
pub use provider::{
    default_max_in_flight, HeaderValueConfig, ProviderConfig, RateLimitConfig, SigningConfig,
    SIGNING_SECRET_PREFIX,
};
pub use resolve::SecretNeeds;
pub use secret::{looks_like_secret, redact_url_password, url_has_password, Secret, REDACTED};
pub use sections::{
    DatabaseConfig, DispatcherConfig, LogFormat, LoggingConfig, ProbesConfig, RetentionConfig,
};
pub use validate::{MAX_BATCH_AND_CONCURRENCY, MIN_LEASE, MIN_TOKEN_CHARS};

use load::TomlInput;
use origins::{EnvSnapshot, Origins};

/// The whole configuration. `Config::default()` is a valid SQLite setup with no providers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[database]`.
    pub database: DatabaseConfig,
    /// `[dispatcher]`.
    pub dispatcher: DispatcherConfig,
    /// `[admin]`.
    pub admin: AdminConfig,
    /// `[retention]`.
    pub retention: RetentionConfig,
    /// `[probes]`.
    pub probes: ProbesConfig,
    /// `[logging]`.
    pub logging: LoggingConfig,
    /// `[providers.NAME]`, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[actions.NAME]`, by action name (the `action` of an intent).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub actions: BTreeMap<String, ActionConfig>,
}

/// A validated configuration and the warnings found while loading it.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The configuration, secrets resolved.
    pub config: Config,
    /// Advisory findings, one line each (`key: message (from source)`); log them.
    pub warnings: Vec<String>,
}

impl Config {
    /// Loads from `path` (if any) and the process environment, then validates.
    pub fn load(path: Option<&Path>) -> Result<LoadedConfig, ConfigError> {
        Self::load_with_env(path, load::process_env())
    }

    /// As [`Config::load`], resolving only the secrets `needs` asks for: a command that
    /// does not use the admin tokens or provider credentials does not fail when their
    /// variables are unset.
    pub fn load_for(path: Option<&Path>, needs: SecretNeeds) -> Result<LoadedConfig, ConfigError> {
        Self::load_with_env_for(path, load::process_env(), needs)
    }

    /// As [`Config::load`], but reads overrides and `*_env` secrets from `env` only.
    pub fn load_with_env<I>(path: Option<&Path>, env: I) -> Result<LoadedConfig, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        Self::load_with_env_for(path, env, SecretNeeds::All)
    }

    /// As [`Config::load_for`], but reads overrides and `*_env` secrets from `env` only.
    pub fn load_with_env_for<I>(
        path: Option<&Path>,
        env: I,
        needs: SecretNeeds,
    ) -> Result<LoadedConfig, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let input = path.map_or(TomlInput::Absent, TomlInput::File);
        load::load(input, env.into_iter().collect(), needs)
    }

    /// Loads from TOML text with no environment at all (no overrides; `*_env` secrets
    /// fail), then validates.
    pub fn from_toml_str(toml: &str) -> Result<LoadedConfig, ConfigError> {
        Self::from_toml_str_with_env(toml, EnvSnapshot::new())
    }

    /// Loads from TOML text with `env` as the environment, then validates.
    pub fn from_toml_str_with_env<I>(toml: &str, env: I) -> Result<LoadedConfig, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        load::load(
            TomlInput::Inline(toml),
            env.into_iter().collect(),
            SecretNeeds::All,
        )
    }

    /// Validates a configuration built in code (secrets must already be resolved, i.e.
    /// given as values); returns the warnings or every problem.
    pub fn validate(&self) -> Result<Vec<String>, ConfigError> {
        let origins = Origins::none();
        let mut report = report::Report::new(&origins);
        validate::validate(self, &mut report);
        report.finish()
    }

    /// The configuration of `action`, if it is configured.
    pub fn action(&self, action: &str) -> Option<&ActionConfig> {
        self.actions.get(action)
    }

    /// Requests in flight to `provider` at once, at most: its `max_in_flight`, or unset
    /// its equal share of `dispatcher.concurrency`.
    pub fn max_in_flight(&self, provider: &str) -> usize {
        let configured = self.providers.get(provider).and_then(|p| p.max_in_flight);
        configured.unwrap_or_else(|| {
            provider::default_max_in_flight(
                usize::try_from(self.dispatcher.concurrency).unwrap_or(usize::MAX),
                self.providers.len(),
            )
        })
    }

    /// The provider that receives `action`.
    pub fn provider_for(&self, action: &str) -> Option<&ProviderConfig> {
        self.providers.get(&self.action(action)?.provider)
    }

    /// `dispatcher.owner`, or `<hostname>-<pid>` when it is empty.
    pub fn dispatcher_owner(&self) -> String {
        if self.dispatcher.owner.is_empty() {
            format!("{}-{}", hostname(), std::process::id())
        } else {
            self.dispatcher.owner.clone()
        }
    }

    /// The effective configuration as TOML (for `outboxd config check`) that reads back
    /// into the same configuration: a secret given as `*_env`/`*_file` prints as that
    /// reference, a literal one as `"[REDACTED]"`, a password in `database.url` masked.
    pub fn effective_toml_redacted(&self) -> String {
        print::to_toml(self)
    }

    /// The configuration as [`Config::effective_toml_redacted`] prints it, as a value (for
    /// `outboxd config check --json`): secrets from variables and files as their
    /// references, literal ones `"[REDACTED]"` when serialized.
    pub fn printable(&self) -> Config {
        print::printable(self)
    }
}

/// The host name (Linux `/proc`, then `$HOSTNAME`), or `outboxd` if neither is available.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "outboxd".to_owned())
}
