//! The ids of the store's own records that people and tools name: reconciliation items
//! and audit entries. Intent ids ([`crate::intent::IntentId`]) live with the producer's
//! types, since an enqueue receipt carries one.
//!
//! Each is a bare number in every format (JSON, SQL, URL paths, command-line arguments);
//! the types keep one kind of id from being passed where another is meant.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

macro_rules! row_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug,
            Clone,
            Copy,
            PartialEq,
            Eq,
            Hash,
            PartialOrd,
            Ord,
            Default,
            Serialize,
            Deserialize,
            sqlx::Type,
            utoipa::ToSchema,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(i64);

        impl $name {
            /// Wraps a database id.
            pub const fn new(id: i64) -> Self {
                Self(id)
            }

            /// The number.
            pub const fn get(self) -> i64 {
                self.0
            }
        }

        impl From<i64> for $name {
            fn from(id: i64) -> Self {
                Self(id)
            }
        }

        impl From<$name> for i64 {
            fn from(id: $name) -> i64 {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = std::num::ParseIntError;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                text.parse().map(Self)
            }
        }
    };
}

row_id!(
    /// The id of a reconciliation item (`outbox_reconciliation_items.id`).
    ReconciliationItemId
);
row_id!(
    /// The id of an audit log entry (`outbox_audit_log.id`), in append order.
    AuditEntryId
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::IntentId;

    #[test]
    fn ids_are_bare_numbers_in_json_and_text() {
        assert_eq!(serde_json::to_string(&IntentId::new(42)).unwrap(), "42");
        assert_eq!(
            serde_json::to_string(&ReconciliationItemId::new(7)).unwrap(),
            "7"
        );
        assert_eq!(serde_json::to_string(&AuditEntryId::new(-1)).unwrap(), "-1");
        let id: AuditEntryId = serde_json::from_str("9").unwrap();
        assert_eq!(id.get(), 9);
        assert_eq!("12".parse::<IntentId>().unwrap(), IntentId::new(12));
        assert_eq!(ReconciliationItemId::new(3).to_string(), "3");
        assert!("x".parse::<ReconciliationItemId>().is_err());
    }
}
