//! The outbox schema, embedded from the repository's top-level `migrations/` directory by
//! relative path (one copy of the schema, shared with the daemon; see this crate's
//! Cargo.toml for why it is not copied into the crate).
//!
//! Apply them with `outboxd migrate` (or the daemon's init container), not with
//! [`Migrator::run`]: outboxd records versions in its own `outboxd_schema_migrations` table,
//! so they never collide with a service's own sqlx migrations, and migration 3 re-keys
//! unclaimed intents in Rust. These embedded copies tell a service which schema version its
//! build of the producer expects ([`expected_version`]), and let its tests check a database.

use sqlx::migrate::Migrator;

/// The PostgreSQL migrations (`migrations/postgres`), in order.
pub static POSTGRES: Migrator = sqlx::migrate!("../../migrations/postgres");

/// The SQLite migrations (`migrations/sqlite`), in order; paired one to one with
/// [`POSTGRES`].
pub static SQLITE: Migrator = sqlx::migrate!("../../migrations/sqlite");

/// The schema version this build of the producer expects (the last migration's version).
pub fn expected_version() -> i64 {
    POSTGRES.iter().map(|m| m.version).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_backends_have_the_same_versions_and_names() {
        let names = |m: &Migrator| {
            m.iter()
                .map(|m| (m.version, m.description.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&POSTGRES), names(&SQLITE));
        assert!(expected_version() >= 4);
    }
}
