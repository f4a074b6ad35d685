//! A provider's bulkhead seen from outside: the view the dispatcher takes of each
//! provider's gate, which the metrics export, the daemon publishes for `outboxd status`, the
//! admin API and the console.

/// A read-only view of one provider's bulkhead, for status and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderState {
    /// Provider name.
    pub provider: String,
    /// Requests in flight now.
    pub in_flight: usize,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// Whether a `Retry-After` pause is in force.
    pub paused: bool,
    /// How many requests had to wait for their rate-limit token.
    pub rate_limited: u64,
    /// Its `max_in_flight`.
    pub max_in_flight: usize,
    /// Requests it may be sent at once now: its adaptive send window (one after start or
    /// an outage, growing with each answer up to `max_in_flight`).
    pub send_window: usize,
    /// While the breaker is open: when the trial request may go (wall clock).
    pub breaker_open_until: Option<chrono::DateTime<chrono::Utc>>,
    /// While a `Retry-After` pause is in force: until when (wall clock).
    pub paused_until: Option<chrono::DateTime<chrono::Utc>>,
}
