//! The intent domain: validated identifiers ("parse, don't validate" newtypes), the
//! intent lifecycle states, and the deterministic downstream idempotency key.
//!
//! Nothing here touches a database or the network; the store and the dispatcher build on
//! these types. Validation limits are constants so the SQL side (see
//! `migrations/postgres`) can mirror them exactly.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Longest accepted tenant identifier, in characters.
pub const MAX_TENANT_CHARS: usize = 128;
/// Longest accepted operation id, in characters.
pub const MAX_OPERATION_ID_CHARS: usize = 200;
/// Longest accepted action name, in characters.
pub const MAX_ACTION_CHARS: usize = 128;
/// Longest accepted idempotency or ordering key, in characters.
pub const MAX_KEY_CHARS: usize = 255;
/// Largest accepted payload, measured on its canonical JSON form, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// Deepest accepted nesting of arrays and objects inside a payload.
pub const MAX_PAYLOAD_DEPTH: usize = 32;
/// Highest accepted payload version.
pub const MAX_PAYLOAD_VERSION: i32 = 1_000_000;

/// A field of [`crate::NewIntent`] that failed validation, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct InvalidField {
    /// The field name as the producer API spells it (`tenant`, `operation_id`, ...).
    pub field: &'static str,
    /// A human-readable explanation.
    pub reason: String,
}

impl InvalidField {
    /// Builds an error for `field`.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

fn check_text(field: &'static str, value: &str, max_chars: usize) -> Result<(), InvalidField> {
    if value.is_empty() {
        return Err(InvalidField::new(field, "must not be empty"));
    }
    let chars = value.chars().count();
    if chars > max_chars {
        return Err(InvalidField::new(
            field,
            format!("is {chars} characters long, the limit is {max_chars}"),
        ));
    }
    if value.chars().any(|c| c.is_control()) {
        return Err(InvalidField::new(
            field,
            "must not contain control characters",
        ));
    }
    if value.trim() != value {
        return Err(InvalidField::new(
            field,
            "must not start or end with whitespace",
        ));
    }
    Ok(())
}

/// An idempotency key travels as an HTTP header value, so it must be printable ASCII
/// (space through `~`): anything else could be stored but never sent.
fn check_header_value(field: &'static str, value: &str) -> Result<(), InvalidField> {
    match value.chars().find(|c| !(' '..='~').contains(c)) {
        None => Ok(()),
        Some(bad) => Err(InvalidField::new(
            field,
            format!(
                "contains {bad:?}; it is sent as an HTTP header value, so only printable \
                 ASCII (space through ~) is allowed"
            ),
        )),
    }
}

fn no_extra_check(_field: &'static str, _value: &str) -> Result<(), InvalidField> {
    Ok(())
}

macro_rules! text_newtype {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:expr) => {
        text_newtype!($(#[$doc])* $name, $field, $max, no_extra_check);
    };
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:expr, $extra:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps `value`.
            pub fn parse(value: impl Into<String>) -> Result<Self, InvalidField> {
                let value = value.into();
                check_text($field, &value, $max)?;
                $extra($field, &value)?;
                Ok(Self(value))
            }

            /// The validated text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            #[doc = concat!("Wraps a `", $field, "` read back from the outbox tables, unchecked.")]
            ///
            /// Every row was checked when it was written: by [`crate::enqueue`], or, for a
            /// producer's own SQL, by the database's checks (column `CHECK`s, and on
            /// PostgreSQL the insert trigger of migrations 0002/0003). Those checks are not
            /// quite this type's rules everywhere (SQLite checks only lengths, and an
            /// `UPDATE` skips the trigger), and a value validated by an older release may
            /// not pass a newer one. Checking again on every read would let one odd row
            /// fail a whole claim batch or listing for every other row, so the store takes
            /// what it reads as it is, and only the store should call this.
            pub fn from_store(value: String) -> Self {
                Self(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidField;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        text_eq!($name);
    };
}

/// Comparisons with plain text, for callers that hold a `&str`.
macro_rules! text_eq {
    ($name:ident) => {
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }
    };
}

text_newtype!(
    /// The tenant an intent belongs to; every read and write is scoped to it.
    TenantId, "tenant", MAX_TENANT_CHARS
);
text_newtype!(
    /// The producer's identifier of one logical operation, unique within a tenant.
    OperationId, "operation_id", MAX_OPERATION_ID_CHARS
);
text_newtype!(
    /// The key sent to the provider in its idempotency header; fixed at enqueue. Printable
    /// ASCII only, so it can always be sent as a header value.
    IdempotencyKey, "idempotency_key", MAX_KEY_CHARS, check_header_value
);
text_newtype!(
    /// Intents sharing an ordering key (within a tenant) are attempted in enqueue order.
    OrderingKey, "ordering_key", MAX_KEY_CHARS
);

/// The configured action an intent asks for (`issue_refund`, `create_support_task`).
///
/// Action names are restricted to ASCII letters, digits and `_ . : -` so they are safe in
/// metric labels, logs and URLs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "String", into = "String")]
pub struct ActionName(String);

impl ActionName {
    /// Validates and wraps `value`.
    pub fn parse(value: impl Into<String>) -> Result<Self, InvalidField> {
        let value = value.into();
        check_text("action", &value, MAX_ACTION_CHARS)?;
        if let Some(bad) = value
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
        {
            return Err(InvalidField::new(
                "action",
                format!("contains {bad:?}; only ASCII letters, digits and _ . : - are allowed"),
            ));
        }
        Ok(Self(value))
    }

    /// The validated name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Wraps an `action` read back from the outbox tables, unchecked, for the reasons
    /// given at [`TenantId::from_store`]; only the store should call this.
    pub fn from_store(value: String) -> Self {
        Self(value)
    }
}

impl TryFrom<String> for ActionName {
    type Error = InvalidField;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<ActionName> for String {
    fn from(value: ActionName) -> String {
        value.0
    }
}

impl fmt::Display for ActionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

text_eq!(ActionName);

/// Validates a payload version (1 ..= [`MAX_PAYLOAD_VERSION`]).
pub fn check_payload_version(version: i32) -> Result<i32, InvalidField> {
    if (1..=MAX_PAYLOAD_VERSION).contains(&version) {
        Ok(version)
    } else {
        Err(InvalidField::new(
            "payload_version",
            format!("is {version}; it must be between 1 and {MAX_PAYLOAD_VERSION}"),
        ))
    }
}

/// The database id of an intent (`outbox_intents.id`).
///
/// Any `i64` is a possible id, so there is nothing to validate: the type only keeps an
/// intent's id apart from the other numbers that travel with it. It is a bare number in
/// every format (JSON, SQL, URL paths, command-line arguments).
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
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
#[sqlx(transparent)]
pub struct IntentId(i64);

impl IntentId {
    /// Wraps a database id.
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The number.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl From<i64> for IntentId {
    fn from(id: i64) -> Self {
        Self(id)
    }
}

impl From<IntentId> for i64 {
    fn from(id: IntentId) -> i64 {
        id.0
    }
}

impl fmt::Display for IntentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::str::FromStr for IntentId {
    type Err = std::num::ParseIntError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse().map(Self)
    }
}

/// Where an intent is in its lifecycle (see `DESIGN.md`, "Intent lifecycle").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    /// Waiting for its `next_attempt_at`.
    Pending,
    /// Claimed by a dispatcher holding a lease.
    InFlight,
    /// The provider confirmed it; terminal.
    Delivered,
    /// Definitely refused, or its budget ran out with every attempt definite; terminal.
    Failed,
    /// It may or may not have happened; waits in the reconciliation queue.
    Unknown,
    /// Cancelled by an operator before it was sent; terminal.
    Cancelled,
    /// An unknown outcome that an operator chose not to pursue; terminal.
    Abandoned,
}

impl IntentState {
    /// Every state, in lifecycle order.
    pub const ALL: [IntentState; 7] = [
        IntentState::Pending,
        IntentState::InFlight,
        IntentState::Delivered,
        IntentState::Failed,
        IntentState::Unknown,
        IntentState::Cancelled,
        IntentState::Abandoned,
    ];

    /// The name stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentState::Pending => "pending",
            IntentState::InFlight => "in_flight",
            IntentState::Delivered => "delivered",
            IntentState::Failed => "failed",
            IntentState::Unknown => "unknown",
            IntentState::Cancelled => "cancelled",
            IntentState::Abandoned => "abandoned",
        }
    }

    /// Parses a `state` column value.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// Whether no further delivery will happen without a person.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            IntentState::Delivered
                | IntentState::Failed
                | IntentState::Cancelled
                | IntentState::Abandoned
        )
    }
}

impl fmt::Display for IntentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The downstream idempotency key outboxd derives when the producer supplies none:
/// `obx1_` followed by the lowercase hex sha256 of
/// `"outboxd.idempotency.v1" NUL tenant NUL operation_id NUL action`.
///
/// The PostgreSQL function `outbox_default_idempotency_key` computes the same value.
pub fn default_idempotency_key(
    tenant: &TenantId,
    operation_id: &OperationId,
    action: &ActionName,
) -> IdempotencyKey {
    let mut hasher = Sha256::new();
    hasher.update(b"outboxd.idempotency.v1\0");
    hasher.update(tenant.as_str().as_bytes());
    hasher.update(b"\0");
    hasher.update(operation_id.as_str().as_bytes());
    hasher.update(b"\0");
    hasher.update(action.as_str().as_bytes());
    IdempotencyKey(format!("obx1_{}", hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_fields_reject_empty_long_control_and_padding() {
        assert!(TenantId::parse("").is_err());
        assert!(TenantId::parse("a".repeat(MAX_TENANT_CHARS + 1)).is_err());
        assert!(TenantId::parse("a".repeat(MAX_TENANT_CHARS)).is_ok());
        assert!(OperationId::parse("op\n1").is_err());
        assert!(OperationId::parse(" op").is_err());
        let err = ActionName::parse("issue refund").unwrap_err();
        assert_eq!(err.field, "action");
        assert!(ActionName::parse("payments.issue_refund:v2").is_ok());
    }

    #[test]
    fn idempotency_keys_must_be_sendable_as_a_header_value() {
        for bad in [
            "clé-42",
            "key\u{a0}x",
            "ключ",
            "emoji-🔑",
            "a\u{7f}b",
            "a\tb",
        ] {
            let err = IdempotencyKey::parse(bad).unwrap_err();
            assert_eq!(err.field, "idempotency_key", "{bad:?}");
            assert!(
                err.to_string().starts_with("invalid idempotency_key"),
                "{err}"
            );
        }
        for good in ["obx1_ab12", "order 42/refund:v2", "~!@#$%^&*()_+{}|:<>?"] {
            assert!(IdempotencyKey::parse(good).is_ok(), "{good:?}");
        }
        // Other text fields keep accepting any printable text.
        assert!(OperationId::parse("commande-é").is_ok());
    }

    #[test]
    fn payload_version_bounds() {
        assert!(check_payload_version(0).is_err());
        assert!(check_payload_version(1).is_ok());
        assert!(check_payload_version(MAX_PAYLOAD_VERSION + 1).is_err());
    }

    #[test]
    fn default_key_is_deterministic_and_scoped() {
        let t = TenantId::parse("acme").unwrap();
        let o = OperationId::parse("op-42").unwrap();
        let a = ActionName::parse("issue_refund").unwrap();
        let k1 = default_idempotency_key(&t, &o, &a);
        let k2 = default_idempotency_key(&t, &o, &a);
        assert_eq!(k1, k2);
        let other = TenantId::parse("globex").unwrap();
        assert_ne!(k1, default_idempotency_key(&other, &o, &a));
        assert!(k1.as_str().starts_with("obx1_"));
        assert_eq!(k1.as_str().len(), 5 + 64);
    }

    #[test]
    fn states_round_trip() {
        for s in IntentState::ALL {
            assert_eq!(IntentState::parse(s.as_str()), Some(s));
        }
        assert!(IntentState::Delivered.is_terminal());
        assert!(!IntentState::Unknown.is_terminal());
    }
}
