//! Values passed to and returned by the store's role traits ([`super::roles`]): claimed
//! intents, attempt records, lifecycle transitions and read models for status and review,
//! and the status fold ([`StatusSummary::from_counts`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::payload::{PayloadBody, StoredPayload};
use crate::action::AttemptClass;
use crate::intent::{
    ActionName, IdempotencyKey, IntentId, IntentState, OperationId, OrderingKey, TenantId,
};

/// What a dispatcher asks for when claiming due intents.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The claiming dispatcher's owner name (recorded on the lease and the attempt).
    pub owner: String,
    /// How long the lease lasts; an attempt not recorded by then counts as ambiguous.
    pub lease: Duration,
    /// At most this many intents.
    pub limit: u32,
    /// Only intents of these actions (unconfigured actions wait, visibly).
    pub actions: Vec<String>,
    /// The claiming replica's clock, used only to judge which intents are due (their
    /// `next_attempt_at` was planned with a replica's clock too). Lease times never use it:
    /// the lease expiry, and whether a lease has expired, come from the database's clock
    /// (on SQLite, the clock read once the claim holds the write lock).
    pub now: DateTime<Utc>,
}

/// How one claim shares its intents between tenants (decided by
/// [`crate::dispatch::fairness::TenantTurns`]; backends only bind it).
///
/// The claim visits tenants with pending intents in name order (bytewise, as Rust compares
/// `str`), starting where `start` says and wrapping around to the first one, and takes from
/// each at most `per_tenant` of its due intents (in `next_attempt_at`, `id` order), until
/// it has `limit`. Each tenant's intents are found by a seek per action (index
/// `outbox_intents_due_by_tenant_bytewise` on PostgreSQL, `outbox_intents_due_by_tenant`
/// on SQLite), so neither a tenant's backlog nor another provider's
/// delays the next tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairShare {
    /// Where the walk of tenants starts.
    pub start: TurnStart,
    /// At most this many intents per tenant in this claim (at least 1).
    pub per_tenant: u32,
}

/// Where a claim's walk of tenants starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnStart {
    /// With the first tenant; no wrap-around.
    First,
    /// With the first tenant after this one; this one comes last, after the wrap-around.
    After(String),
    /// With this tenant itself (the previous claim cut it off short of its share).
    At(String),
}

impl FairShare {
    /// No tenant is capped: each claim starts with the first tenant.
    pub fn uncapped(limit: u32) -> Self {
        Self {
            start: TurnStart::First,
            per_tenant: limit.max(1),
        }
    }

    /// The start as the backends bind it: the walk begins with the tenants `>= bound`
    /// when `inclusive`, `> bound` otherwise (`("", true)` for [`TurnStart::First`]).
    pub fn start_bound(&self) -> (&str, bool) {
        match &self.start {
            TurnStart::First => ("", true),
            TurnStart::After(tenant) => (tenant, false),
            TurnStart::At(tenant) => (tenant, true),
        }
    }

    /// Whether `tenant` is visited after the wrap-around (it sorts before the start).
    pub fn is_wrapped(&self, tenant: &str) -> bool {
        match self.start_bound() {
            (bound, true) => tenant < bound,
            (bound, false) => tenant <= bound,
        }
    }
}

/// An intent this dispatcher holds a lease on.
#[derive(Debug, Clone)]
pub struct ClaimedIntent {
    /// Intent id.
    pub id: IntentId,
    /// Tenant.
    pub tenant: TenantId,
    /// Operation id.
    pub operation_id: OperationId,
    /// Action name.
    pub action: ActionName,
    /// Payload (a JSON object), as the request body.
    pub payload: PayloadBody,
    /// Payload version.
    pub payload_version: i32,
    /// The downstream idempotency key (never regenerated).
    pub idempotency_key: IdempotencyKey,
    /// Attempts started so far, this one included.
    pub attempt_count: i32,
    /// Ambiguous attempts so far (lease expiries included).
    pub ambiguous_attempts: i32,
    /// The fencing token of this claim; outcomes are recorded only while it matches.
    pub fencing_token: i64,
    /// When a request with this key may first have reached the provider.
    pub first_sent_at: Option<DateTime<Utc>>,
    /// When the intent was enqueued.
    pub created_at: DateTime<Utc>,
    /// The producer's absolute deadline, if any.
    pub deadline_at: Option<DateTime<Utc>>,
    /// Attempts made before the current retry budget began (a person's redispatch starts a
    /// new budget).
    pub budget_attempt_base: i32,
    /// When the current retry budget began (None: at enqueue).
    pub budget_started_at: Option<DateTime<Utc>>,
    /// The attempt a person confirmed may make the provider act twice (the first one after
    /// their redispatch), if they did; see [`crate::store::resend_confirmed_attempt`].
    pub resend_confirmed_attempt: Option<i32>,
    /// When it was due (its position in claim order, with `id`).
    pub next_attempt_at: DateTime<Utc>,
    /// When the lease expires, as the database computed it.
    pub lease_expires_at: DateTime<Utc>,
    /// The database's clock when the claim ran, to compare `lease_expires_at` with the
    /// local clock (see [`crate::dispatch::lease`]).
    pub claimed_at: DateTime<Utc>,
}

/// Where a recorded outcome moves the intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Terminal success with the provider's reference.
    Delivered {
        /// The provider's reference, when the action declares where to find it.
        provider_ref: Option<String>,
    },
    /// Back to `pending`, due at `at`.
    RetryAt {
        /// Next attempt time.
        at: DateTime<Utc>,
    },
    /// Terminal `failed`.
    Failed {
        /// Why.
        reason: String,
    },
    /// `unknown`, with an open reconciliation item.
    Unknown {
        /// Why the outcome cannot be known.
        reason: String,
    },
}

impl Transition {
    /// The state this transition leads to.
    pub fn state(&self) -> IntentState {
        match self {
            Transition::Delivered { .. } => IntentState::Delivered,
            Transition::RetryAt { .. } => IntentState::Pending,
            Transition::Failed { .. } => IntentState::Failed,
            Transition::Unknown { .. } => IntentState::Unknown,
        }
    }
}

/// One attempt that ended, written as its `outbox_attempts` row (the claim opened it; the
/// store takes its number, owner and fencing token from the claim).
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    /// Its class.
    pub class: AttemptClass,
    /// HTTP status, when a response arrived.
    pub http_status: Option<u16>,
    /// What went wrong, for people.
    pub error: Option<String>,
    /// The provider's reference, when delivered.
    pub provider_ref: Option<String>,
    /// Time from sending to classification.
    pub duration: Duration,
    /// When the request started (sets `first_sent_at` unless the class is `not_sent`).
    pub started_at: DateTime<Utc>,
}

/// One outcome to record, fenced by the claim's token.
#[derive(Debug, Clone)]
pub struct OutcomeRecord {
    /// The intent.
    pub intent_id: IntentId,
    /// The claim's fencing token; a mismatch means another dispatcher owns the intent now.
    pub fencing_token: i64,
    /// The attempt that ended (None when deciding after a lease takeover).
    pub attempt: Option<AttemptRecord>,
    /// Where the intent goes.
    pub transition: Transition,
    /// The recording time.
    pub now: DateTime<Utc>,
}

/// Whether an outcome was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordResult {
    /// Written.
    Recorded,
    /// Not written: the fencing token no longer matches (the lease was lost).
    Fenced,
}

/// A claim handed back unsent (shutdown, or an action that lost its configuration).
#[derive(Debug, Clone)]
pub struct Release {
    /// The intent.
    pub intent_id: IntentId,
    /// The claim's fencing token.
    pub fencing_token: i64,
    /// Why it was released.
    pub reason: String,
}

/// An intent as shown to people and tests.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct IntentRow {
    /// Intent id.
    pub id: IntentId,
    /// Tenant.
    pub tenant: TenantId,
    /// Operation id.
    pub operation_id: OperationId,
    /// Action.
    pub action: ActionName,
    /// Payload version.
    pub payload_version: i32,
    /// The payload. A stored payload the parser refuses (nested over 128 levels, a lone
    /// surrogate escape, an object whose first key is a serde_json marker key) is shown
    /// as a JSON string of its text.
    #[schema(value_type = serde_json::Value)]
    pub payload: StoredPayload,
    /// Payload digest.
    pub payload_sha256: String,
    /// Downstream idempotency key.
    pub idempotency_key: IdempotencyKey,
    /// Ordering key.
    pub ordering_key: Option<OrderingKey>,
    /// Current state.
    pub state: IntentState,
    /// Attempts started.
    pub attempt_count: i32,
    /// Ambiguous attempts.
    pub ambiguous_attempts: i32,
    /// When a request with this key may first have reached the provider (the start of the
    /// provider's key-retention window).
    pub first_sent_at: Option<DateTime<Utc>>,
    /// Next attempt time (meaningful while pending).
    pub next_attempt_at: DateTime<Utc>,
    /// The producer's absolute deadline, if any: no attempt starts at or after it (nor after
    /// the action's retry deadline, counted from enqueue or from a person's redispatch).
    pub deadline_at: Option<DateTime<Utc>>,
    /// Lease owner while in flight.
    pub lease_owner: Option<String>,
    /// Lease expiry while in flight.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// While in flight: when the attempt this claim opened began (its attempt row is written
    /// when it ends). None otherwise, and for a takeover after lease expiry.
    pub attempt_started_at: Option<DateTime<Utc>>,
    /// Current fencing token.
    pub fencing_token: i64,
    /// Provider reference once delivered.
    pub provider_ref: Option<String>,
    /// Last error seen.
    pub last_error: Option<String>,
    /// Last HTTP status seen.
    pub last_http_status: Option<i32>,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it reached a terminal state.
    pub finished_at: Option<DateTime<Utc>>,
}

/// One attempt as shown to people and tests. The attempt an in-flight claim opened has no
/// row yet (it is written when the attempt ends); listings show it from the intent, with
/// `id` 0 and no end or class.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AttemptRow {
    /// Attempt id (0 for the open attempt).
    pub id: i64,
    /// Intent id.
    pub intent_id: IntentId,
    /// 1-based attempt number.
    pub attempt_number: i32,
    /// Fencing token of the claim that made it.
    pub fencing_token: i64,
    /// Dispatcher that made it.
    pub owner: String,
    /// Start time.
    pub started_at: DateTime<Utc>,
    /// End time (None while open).
    pub ended_at: Option<DateTime<Utc>>,
    /// Class (None while open).
    pub class: Option<AttemptClass>,
    /// HTTP status.
    pub http_status: Option<i32>,
    /// Error text.
    pub error: Option<String>,
    /// Provider reference.
    pub provider_ref: Option<String>,
    /// Duration in milliseconds.
    pub duration_ms: Option<i64>,
}

/// Counts for `outboxd status` and metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatusSummary {
    /// Intents per state (every state present, zero included).
    pub by_state: Vec<(IntentState, i64)>,
    /// Enqueue time of the oldest pending intent that is due now.
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// Open reconciliation items.
    pub reconciliation_open: i64,
    /// Opening time of the oldest open reconciliation item.
    pub reconciliation_oldest_at: Option<DateTime<Utc>>,
}

impl StatusSummary {
    /// The summary from the per-state counts (a state without a row counts zero) and the
    /// backlog reads.
    pub(crate) fn from_counts(
        counts: &[(String, i64)],
        oldest_due_at: Option<DateTime<Utc>>,
        reconciliation_open: i64,
        reconciliation_oldest_at: Option<DateTime<Utc>>,
    ) -> Self {
        let count_of = |state: IntentState| {
            counts
                .iter()
                .find(|(name, _)| name == state.as_str())
                .map_or(0, |(_, n)| *n)
        };
        Self {
            by_state: IntentState::ALL
                .into_iter()
                .map(|s| (s, count_of(s)))
                .collect(),
            oldest_due_at,
            reconciliation_open,
            reconciliation_oldest_at,
        }
    }
}

/// One provider's bulkhead as a running daemon last published it (table
/// `outbox_provider_states`; see [`crate::dispatch::publish`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[schema(description = "One provider's bulkhead as a running daemon last published it.")]
pub struct ProviderStateRow {
    /// The daemon (lease owner name) that published it.
    pub owner: String,
    /// Provider name.
    pub provider: String,
    /// Requests in flight to the provider from that daemon.
    pub in_flight: i64,
    /// Its `max_in_flight`.
    pub max_in_flight: i64,
    /// Its adaptive send window: requests it may be sent at once now (at most
    /// `max_in_flight`). `None` for a row a daemon of schema 5 or earlier published.
    #[schema(minimum = 0)]
    pub send_window: Option<i64>,
    /// Requests that waited for the provider's rate limiter, since the daemon started.
    pub rate_limited_waits: i64,
    /// `closed`, `open` or `half_open`.
    #[schema(schema_with = super::schema::breaker_state)]
    pub breaker: String,
    /// While the breaker is open: when the trial request may go.
    pub breaker_open_until: Option<DateTime<Utc>>,
    /// While a `Retry-After` pause is in force: until when.
    pub paused_until: Option<DateTime<Utc>>,
    /// When the daemon wrote this row.
    pub updated_at: DateTime<Utc>,
}
