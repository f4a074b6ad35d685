//! A provider's bulkhead settings (`[providers.NAME]`): requests in flight at once, the
//! rate limit, the breaker and the longest `Retry-After` pause. The configuration layer
//! builds them; the dispatcher's gate (`crate::dispatch::capacity`) enforces them.

use std::num::NonZeroU32;
use std::time::Duration;

/// The bulkhead settings of one provider (`[providers.NAME]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderLimits {
    /// Requests in flight to this provider at once, at most (the send window's ceiling).
    pub max_in_flight: usize,
    /// Consecutive failures that open the breaker (0: no breaker).
    pub breaker_failures: u32,
    /// How long an open breaker stays open before one trial request.
    pub breaker_cooldown: Duration,
    /// The longest provider-wide pause a `Retry-After` may impose.
    pub max_pause: Duration,
    /// Requests per second and burst (`None`: no rate limit).
    pub rate_limit: Option<RateLimit>,
}

/// A provider's request rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub per_second: NonZeroU32,
    /// Requests that may go at once after a quiet period.
    pub burst: NonZeroU32,
}

impl Default for ProviderLimits {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(30),
            max_pause: Duration::from_secs(120),
            rate_limit: None,
        }
    }
}
