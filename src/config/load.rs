//! The layering: built-in defaults (serde defaults) → TOML file → `OUTBOXD__` environment
//! variables, extracted with figment; then secret resolution and validation. Also maps a
//! key path back to the file or variable it came from, for messages.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};

use super::error::{from_figment, ConfigError, ENV_LAYER_NAME, INLINE_LAYER_NAME};
use super::origins::{EnvSnapshot, Origins};
use super::report::Report;
use super::resolve::SecretNeeds;
use super::{resolve, validate, Config, LoadedConfig};

/// Prefix of environment variables that override configuration keys.
pub const ENV_PREFIX: &str = "OUTBOXD__";
/// Separator of nesting levels in such variables (`OUTBOXD__DATABASE__URL`).
pub const ENV_SEPARATOR: &str = "__";

/// Where the TOML layer comes from.
pub(crate) enum TomlInput<'a> {
    /// No file: defaults and environment only.
    Absent,
    /// A file on disk.
    File(&'a Path),
    /// A string (tests, embedded configurations).
    Inline(&'a str),
}

/// Runs the whole pipeline, resolving the secrets `needs` asks for.
pub(crate) fn load(
    input: TomlInput<'_>,
    env: EnvSnapshot,
    needs: SecretNeeds,
) -> Result<LoadedConfig, ConfigError> {
    let mut figment = Figment::new();
    match input {
        TomlInput::Absent => {}
        TomlInput::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::single(
                    "",
                    format!("cannot read the configuration file: {e}"),
                    Some(path.display().to_string()),
                )
            })?;
            let metadata = Metadata::from("TOML file", Source::File(path.to_path_buf()));
            figment = figment.merge(TomlLayer { text, metadata });
        }
        TomlInput::Inline(text) => {
            let metadata = Metadata::named(INLINE_LAYER_NAME);
            figment = figment.merge(TomlLayer {
                text: text.to_owned(),
                metadata,
            });
        }
    }
    let (env_layer, ignored) = EnvLayer::new(&env);
    let figment = figment.merge(env_layer);
    let mut config: Config = figment.extract().map_err(from_figment)?;
    let origins = Origins::of(figment);
    let mut report = Report::new(&origins);
    for var in ignored {
        report.warn(
            "",
            format!("environment variable {var} ignored: empty key segment"),
        );
    }
    resolve::resolve_secrets(&mut config, &env, needs, &mut report);
    validate::validate(&config, &mut report);
    let warnings = report.finish()?;
    Ok(LoadedConfig { config, warnings })
}

/// The process environment, skipping variables that are not valid UTF-8.
pub(crate) fn process_env() -> EnvSnapshot {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// TOML text with metadata naming its real source (figment's own file provider searches
/// parent directories and ignores missing files; we read the file ourselves), parsed with
/// the `toml` crate into figment's values.
struct TomlLayer {
    text: String,
    metadata: Metadata,
}

impl Provider for TomlLayer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict: Dict =
            toml::from_str(&self.text).map_err(|e| figment::Error::from(e.to_string()))?;
        Ok(Profile::Default.collect(dict))
    }
}

/// `OUTBOXD__A__B=value` → key `a.b`, from an explicit snapshot (never the live process
/// environment, so tests need not mutate it). Values are parsed like figment's `Env`:
/// numbers, booleans and `[arrays]` are recognised; quote a value to force a string.
struct EnvLayer {
    entries: Vec<(String, String)>,
    names: Arc<BTreeMap<String, String>>,
}

impl EnvLayer {
    /// The layer and the names of variables ignored for having an empty key segment.
    fn new(env: &EnvSnapshot) -> (Self, Vec<String>) {
        let mut entries = Vec::new();
        let mut names = BTreeMap::new();
        let mut ignored = Vec::new();
        for (var, value) in env {
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let segments: Vec<String> = rest
                .split(ENV_SEPARATOR)
                .map(str::to_ascii_lowercase)
                .collect();
            if segments.iter().any(String::is_empty) {
                ignored.push(var.clone());
                continue;
            }
            let path = segments.join(".");
            names.insert(path.clone(), var.clone());
            entries.push((path, value.clone()));
        }
        let layer = Self {
            entries,
            names: Arc::new(names),
        };
        (layer, ignored)
    }
}

impl Provider for EnvLayer {
    fn metadata(&self) -> Metadata {
        let names = Arc::clone(&self.names);
        Metadata::named(ENV_LAYER_NAME).interpolater(move |_: &Profile, keys: &[&str]| {
            let path = keys.join(".");
            let prefix = format!("{path}.");
            let exact = names.get(&path);
            let nested = || {
                names
                    .iter()
                    .find(|(p, _)| p.starts_with(&prefix))
                    .map(|(_, v)| v)
            };
            exact.or_else(nested).cloned().unwrap_or_else(|| {
                let upper: Vec<String> = keys.iter().map(|k| k.to_ascii_uppercase()).collect();
                format!("{ENV_PREFIX}{}", upper.join(ENV_SEPARATOR))
            })
        })
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        for (path, raw) in &self.entries {
            let value: Value = raw.parse().unwrap_or_else(|never| match never {});
            if let Some(nested) = figment::util::nest(path, value).into_dict() {
                merge_dict(&mut dict, nested);
            }
        }
        Ok(Profile::Default.collect(dict))
    }
}

/// Deep-merges `new` into `base` (later values win).
fn merge_dict(base: &mut Dict, new: Dict) {
    for (key, value) in new {
        match (base.get_mut(&key), value) {
            (Some(Value::Dict(_, existing)), Value::Dict(_, incoming)) => {
                merge_dict(existing, incoming)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}
