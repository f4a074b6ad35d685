//! Small value types shared by configuration, delivery and the dispatcher: how safe an
//! action is to repeat, how an attempt ended, and an action's retry budget; and in
//! [`resend`] the one rule "may this resend act twice, and why".

pub mod resend;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How safe an action is to send again (retry safety is data, declared per action).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetrySafety {
    /// Reads and absolute sets: repeating has no extra effect.
    SafeAlways,
    /// The provider deduplicates by our idempotency key, within its key-retention window.
    IdempotentWithKey,
    /// No deduplication: never resent once a request may have reached the provider.
    NotIdempotent,
}

impl RetrySafety {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RetrySafety::SafeAlways => "safe_always",
            RetrySafety::IdempotentWithKey => "idempotent_with_key",
            RetrySafety::NotIdempotent => "not_idempotent",
        }
    }
}

impl fmt::Display for RetrySafety {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of one delivery attempt (rule 6 of the design); exactly one per attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptClass {
    /// 2xx with a usable body: the provider acted; its reference is stored.
    Delivered,
    /// Provably never reached the provider (DNS, refused, TLS handshake, local limit).
    NotSent,
    /// The provider said it did not act (429, 503 with Retry-After, 408, keyed 409).
    Retryable,
    /// Permanent refusal (400, 401, 403, 404, 422, ...).
    Rejected,
    /// It may have acted: timeout or reset after the request was written, 5xx, bad 2xx body.
    Ambiguous,
}

impl AttemptClass {
    /// Every class.
    pub const ALL: [AttemptClass; 5] = [
        AttemptClass::Delivered,
        AttemptClass::NotSent,
        AttemptClass::Retryable,
        AttemptClass::Rejected,
        AttemptClass::Ambiguous,
    ];

    /// The name stored in `outbox_attempts.class`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptClass::Delivered => "delivered",
            AttemptClass::NotSent => "not_sent",
            AttemptClass::Retryable => "retryable",
            AttemptClass::Rejected => "rejected",
            AttemptClass::Ambiguous => "ambiguous",
        }
    }

    /// Parses a stored class name.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == value)
    }

    /// Whether the request may have reached the provider and had an effect we cannot see.
    pub fn is_ambiguous(self) -> bool {
        self == AttemptClass::Ambiguous
    }
}

impl fmt::Display for AttemptClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One action's retry budget; the dispatcher is the only layer that retries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in total, the first included.
    pub max_attempts: u32,
    /// Backoff cap for the first retry; doubles per attempt (full jitter below the cap).
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff between two attempts.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// No attempt starts later than this after the intent was created.
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    /// A provider's `Retry-After` is honoured up to this long.
    #[serde(with = "humantime_serde")]
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(300),
            deadline: Duration::from_secs(24 * 3600),
            max_retry_after: Duration::from_secs(600),
        }
    }
}
