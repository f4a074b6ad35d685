//! Where the configuration's values came from: the snapshot of the environment that
//! overrides and `*_env` secrets are read from, and the map from a key to its source (file
//! and line, environment variable, default) that every message names.

use std::collections::BTreeMap;

use figment::Figment;

use super::error::describe_origin;

/// A snapshot of the environment: overrides and `*_env` secrets are read from it only.
pub(crate) type EnvSnapshot = BTreeMap<String, String>;

/// Maps key paths to the source of their value, for messages.
pub(crate) struct Origins {
    figment: Option<Figment>,
}

impl Origins {
    /// The sources recorded by the layers of `figment`.
    pub(crate) fn of(figment: Figment) -> Self {
        Self {
            figment: Some(figment),
        }
    }

    /// No sources known (a configuration built in code).
    pub(crate) fn none() -> Self {
        Self { figment: None }
    }

    /// Whether `key` itself was set by the file or the environment (not a default).
    pub(crate) fn is_set(&self, key: &str) -> bool {
        self.figment
            .as_ref()
            .is_some_and(|f| f.find_value(key).is_ok())
    }

    /// The source of the value at `key` (or of its nearest enclosing table); array
    /// indices (`tokens[1]`) resolve to the array as a whole.
    pub(crate) fn origin(&self, key: &str) -> Option<String> {
        let figment = self.figment.as_ref()?;
        let path = key.split('[').next().unwrap_or_default();
        let mut segments: Vec<String> = path.split('.').map(str::to_owned).collect();
        while !segments.is_empty() && !segments[0].is_empty() {
            if let Ok(value) = figment.find_value(&segments.join(".")) {
                let tag = value.tag();
                let metadata = figment.get_metadata(tag)?;
                let profile = tag.profile().unwrap_or_default();
                return Some(describe_origin(metadata, &profile, &segments));
            }
            segments.pop();
        }
        None
    }
}
