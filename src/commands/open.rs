//! Opening the database for an operator command: never creating it (only `migrate` and
//! `run` do), read-only when the command only reads, and refusing a database without
//! outboxd's schema with its resolved location and "run `outboxd migrate`".

use crate::config::Config;
use crate::store::compat::{check_schema_window, SchemaMismatch};
use crate::store::connect::{connect_with_mode, describe_location, ConnectError, OpenMode};
use crate::store::migrate::expected_version;
use crate::store::Database;

/// Connections an operator command opens at most.
const COMMAND_CONNECTIONS: u32 = 2;

/// Why the database could not be used by a command.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file is missing or the server cannot be reached.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The schema is missing, behind or too new.
    #[error("database {location}: {source}")]
    Schema {
        /// The SQLite file or the redacted URL.
        location: String,
        /// What is wrong with the schema.
        #[source]
        source: SchemaMismatch,
    },
    /// The schema version could not be read.
    #[error("cannot read the schema version of {location}: {source}")]
    Query {
        /// The SQLite file or the redacted URL.
        location: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
}

/// Opens the database named in `config` in `mode` and checks its schema.
pub async fn open_for_command(config: &Config, mode: OpenMode) -> Result<Database, OpenError> {
    let url = &config.database.url;
    let db = connect_with_mode(url, COMMAND_CONNECTIONS, mode).await?;
    let location = || describe_location(url);
    let found = match db.schema_version().await {
        Ok(found) => found,
        Err(source) => {
            db.close().await;
            return Err(OpenError::Query {
                location: location(),
                source,
            });
        }
    };
    if let Err(source) = check_schema_window(found, expected_version()) {
        db.close().await;
        return Err(OpenError::Schema {
            location: location(),
            source,
        });
    }
    Ok(db)
}
