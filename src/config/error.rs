//! [`ConfigError`]: every problem found while loading the configuration, one line each,
//! naming the key path and the source the value came from (a file or an environment
//! variable), plus the conversion from figment's parse and type errors.

use std::fmt;

use figment::error::Kind;
use figment::{Metadata, Profile, Source};

/// Name of the metadata of the environment layer (see `load.rs`).
pub(crate) const ENV_LAYER_NAME: &str = "environment variable";
/// Name of the metadata of TOML given as a string (tests, embedded configs).
pub(crate) const INLINE_LAYER_NAME: &str = "inline TOML";

/// One problem (or warning) in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The key path, e.g. `providers.payments.base_url` or `admin.tokens[1].token_env`;
    /// empty for a problem with the file as a whole.
    pub key: String,
    /// What is wrong, in words an operator can act on.
    pub message: String,
    /// Where the value came from (a file path, `environment variable OUTBOXD__...`), if
    /// known.
    pub origin: Option<String>,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)?;
        if let Some(origin) = &self.origin {
            write!(f, " (from {origin})")?;
        }
        Ok(())
    }
}

/// The configuration could not be loaded: every problem found, one per line when displayed.
///
/// Parse and type errors (bad TOML, a string where a number belongs, an unknown key) stop
/// loading before validation; validation then reports all of its problems at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.problems))]
pub struct ConfigError {
    /// The problems, in the order found (at least one).
    pub problems: Vec<ConfigProblem>,
}

fn render(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// An error with a single problem.
    pub fn single(
        key: impl Into<String>,
        message: impl Into<String>,
        origin: Option<String>,
    ) -> Self {
        Self {
            problems: vec![ConfigProblem {
                key: key.into(),
                message: message.into(),
                origin,
            }],
        }
    }

    /// Whether some problem is about `key` exactly.
    pub fn mentions(&self, key: &str) -> bool {
        self.problems.iter().any(|p| p.key == key)
    }
}

/// Describes where a provider's values come from, for messages.
pub(crate) fn describe_origin(metadata: &Metadata, profile: &Profile, path: &[String]) -> String {
    match &metadata.source {
        Some(Source::File(path)) => path.display().to_string(),
        _ if metadata.name == ENV_LAYER_NAME => {
            format!("{ENV_LAYER_NAME} {}", metadata.interpolate(profile, path))
        }
        _ => metadata.name.to_string(),
    }
}

/// Converts figment's (possibly chained) error into one problem per error.
pub(crate) fn from_figment(error: figment::Error) -> ConfigError {
    let problems = error.into_iter().map(problem_from_figment).collect();
    ConfigError { problems }
}

fn problem_from_figment(error: figment::Error) -> ConfigProblem {
    let mut path = error.path.clone();
    let mut ends_with = |field: &str| {
        if path.last().map(String::as_str) != Some(field) {
            path.push(field.to_owned());
        }
    };
    let message = match &error.kind {
        Kind::UnknownField(field, expected) => {
            ends_with(field);
            format!("unknown key; expected one of: {}", expected.join(", "))
        }
        Kind::MissingField(field) => {
            ends_with(field);
            "is required".to_owned()
        }
        Kind::DuplicateField(field) => {
            ends_with(field);
            "is given more than once".to_owned()
        }
        Kind::UnknownVariant(found, expected) => {
            format!("{found:?} is not one of: {}", expected.join(", "))
        }
        Kind::Message(message) => one_line(message),
        other => other.to_string(),
    };
    let origin = error.metadata.as_ref().map(|md| {
        let profile = error.profile.clone().unwrap_or_default();
        describe_origin(md, &profile, &path)
    });
    ConfigProblem {
        key: render_path(&path),
        message,
        origin,
    }
}

/// Joins a figment path, writing array indices the way validation messages do
/// (`admin.tokens[0].role`, not `admin.tokens.0.role`).
fn render_path(path: &[String]) -> String {
    const ARRAYS: [&str; 3] = ["tokens", "tenants", "not_found_status"];
    let mut out = String::new();
    for (i, segment) in path.iter().enumerate() {
        let is_index = i > 0
            && ARRAYS.contains(&path[i - 1].as_str())
            && segment.bytes().all(|b| b.is_ascii_digit());
        if is_index {
            out.push_str(&format!("[{segment}]"));
        } else {
            if i > 0 {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

/// Condenses a multi-line parser message (TOML errors quote the offending line) into one
/// line: the first line (position) and the last (what was expected).
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.as_slice() {
        [] => String::new(),
        [only] => (*only).to_owned(),
        [first, .., last] => format!("{first}: {last}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line_per_problem() {
        let error = ConfigError {
            problems: vec![
                ConfigProblem {
                    key: "providers.payments.base_url".into(),
                    message: "\"htp:/x\" is not a valid URL".into(),
                    origin: Some("config/x.toml".into()),
                },
                ConfigProblem {
                    key: "dispatcher.batch_size".into(),
                    message: "must be between 1 and 10000".into(),
                    origin: None,
                },
            ],
        };
        assert_eq!(
            error.to_string(),
            "providers.payments.base_url: \"htp:/x\" is not a valid URL (from config/x.toml)\n\
             dispatcher.batch_size: must be between 1 and 10000"
        );
    }

    #[test]
    fn multi_line_messages_are_condensed() {
        let message =
            "TOML parse error at line 1, column 4\n  |\n1 | a b\n  |    ^\nexpected `=`\n";
        assert_eq!(
            one_line(message),
            "TOML parse error at line 1, column 4: expected `=`"
        );
    }
}
