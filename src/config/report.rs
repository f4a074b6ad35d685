//! The report every configuration check writes into: errors and warnings, each attached to
//! its key and that key's source, and the way durations are spelled in messages.

use std::time::Duration;

use super::error::{ConfigError, ConfigProblem};
use super::origins::Origins;

/// Collects problems and warnings, attaching the source of each key.
pub(crate) struct Report<'a> {
    origins: &'a Origins,
    problems: Vec<ConfigProblem>,
    warnings: Vec<String>,
}

impl<'a> Report<'a> {
    /// An empty report resolving sources through `origins`.
    pub(crate) fn new(origins: &'a Origins) -> Self {
        Self {
            origins,
            problems: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn problem(&self, key: String, message: String) -> ConfigProblem {
        let origin = if key.is_empty() {
            None
        } else {
            self.origins.origin(&key)
        };
        ConfigProblem {
            key,
            message,
            origin,
        }
    }

    /// Records an error at `key`.
    pub(crate) fn error(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let problem = self.problem(key.into(), message.into());
        self.problems.push(problem);
    }

    /// Records a warning at `key`.
    pub(crate) fn warn(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let problem = self.problem(key.into(), message.into());
        self.warnings.push(problem.to_string());
    }

    /// Whether `key` was set by the file or the environment (not left at its default).
    pub(crate) fn is_set(&self, key: &str) -> bool {
        self.origins.is_set(key)
    }

    /// The warnings (each once, in the order found), or every error found.
    pub(crate) fn finish(self) -> Result<Vec<String>, ConfigError> {
        if self.problems.is_empty() {
            let mut seen = std::collections::BTreeSet::new();
            Ok(self
                .warnings
                .into_iter()
                .filter(|w| seen.insert(w.clone()))
                .collect())
        } else {
            Err(ConfigError {
                problems: self.problems,
            })
        }
    }

    /// Errors unless `value` is in `min..=max`.
    pub(crate) fn range(&mut self, key: &str, value: u64, min: u64, max: u64) {
        if !(min..=max).contains(&value) {
            self.error(
                key,
                format!("is {value}; it must be between {min} and {max}"),
            );
        }
    }

    /// Errors if `value` is zero.
    pub(crate) fn positive(&mut self, key: &str, value: Duration) {
        if value.is_zero() {
            self.error(key, "must be longer than zero");
        }
    }
}

/// Formats a duration the way the configuration spells it.
pub(crate) fn human(d: Duration) -> String {
    super::duration::format_duration(d)
}
