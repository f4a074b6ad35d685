//! The schema compatibility window: which schema versions a binary runs against.
//!
//! A binary runs against the schema it was built for (`expected`) and the next one
//! (`expected + 1`), so during a rolling upgrade the old pods keep running after the new
//! release's `outboxd migrate`, and after a rollback the old binary runs on the schema the
//! new release left behind. This holds because migrations are expand-then-contract: every
//! migration keeps the previous binary working (new columns nullable or defaulted, nothing
//! the previous binary reads or writes dropped or renamed; a contraction waits one release).
//!
//! One pure function, [`check_schema_window`], decides; the daemon's start, `/readyz` and
//! `outboxd migrate` all call it.

/// A schema version the binary accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaFit {
    /// The schema this binary was built for.
    Current,
    /// One migration ahead: a newer release has migrated; this binary keeps working (log a
    /// warning, the rollout should be finishing).
    OneAhead,
}

/// A schema version the binary refuses, with what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SchemaMismatch {
    /// The database has not been migrated to this binary's schema yet.
    #[error("the database schema is at version {found}, this build expects {expected}; run `outboxd migrate`")]
    Behind {
        /// The highest applied version.
        found: i64,
        /// The version this binary was built for.
        expected: i64,
    },
    /// The database is more than one migration ahead of this binary.
    #[error("the database schema is at version {found}, this build runs on versions {expected} and {next} only; deploy the release that applied version {found} (or a newer one)", next = expected + 1)]
    TooNew {
        /// The highest applied version.
        found: i64,
        /// The version this binary was built for.
        expected: i64,
    },
}

/// Decides whether a binary built for schema `expected` may run against schema `found`.
pub fn check_schema_window(found: i64, expected: i64) -> Result<SchemaFit, SchemaMismatch> {
    match found {
        f if f == expected => Ok(SchemaFit::Current),
        f if f == expected + 1 => Ok(SchemaFit::OneAhead),
        f if f < expected => Err(SchemaMismatch::Behind { found, expected }),
        _ => Err(SchemaMismatch::TooNew { found, expected }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_own_version_and_the_next() {
        let cases = [
            (
                0,
                Err(SchemaMismatch::Behind {
                    found: 0,
                    expected: 3,
                }),
            ),
            (
                2,
                Err(SchemaMismatch::Behind {
                    found: 2,
                    expected: 3,
                }),
            ),
            (3, Ok(SchemaFit::Current)),
            (4, Ok(SchemaFit::OneAhead)),
            (
                5,
                Err(SchemaMismatch::TooNew {
                    found: 5,
                    expected: 3,
                }),
            ),
            (
                999,
                Err(SchemaMismatch::TooNew {
                    found: 999,
                    expected: 3,
                }),
            ),
        ];
        for (found, want) in cases {
            assert_eq!(check_schema_window(found, 3), want, "found {found}");
        }
    }

    #[test]
    fn messages_say_what_to_do() {
        let behind = check_schema_window(2, 3).unwrap_err().to_string();
        assert!(behind.contains("run `outboxd migrate`"), "{behind}");
        let too_new = check_schema_window(5, 3).unwrap_err().to_string();
        assert!(too_new.contains("versions 3 and 4 only"), "{too_new}");
    }
}
