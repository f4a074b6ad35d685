//! Which backend a `database.url` names: the one place the supported schemes are listed,
//! used by configuration checks and by the store when it opens the database.

use super::secret::redact_url_password;

/// Which backend a database URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `postgres://` or `postgresql://`.
    Postgres(String),
    /// `sqlite://path` or `sqlite::memory:`.
    Sqlite(String),
}

impl DatabaseUrl {
    /// Classifies `url` by its scheme.
    pub fn parse(url: &str) -> Result<Self, UnsupportedScheme> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(url.to_owned()))
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite(url.to_owned()))
        } else {
            Err(UnsupportedScheme(redact_url_password(url)))
        }
    }
}

/// A `database.url` whose scheme names no supported backend (its password redacted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("database.url {0:?} is not supported: use sqlite://PATH or postgres://USER@HOST/DB")]
pub struct UnsupportedScheme(pub String);
