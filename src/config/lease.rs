//! The one rule tying `dispatcher.lease` to the providers' timeouts: a request is sent only
//! if its lease covers the request timeout plus [`SEND_MARGIN`]. Configuration checks it at
//! load; the dispatcher (`crate::dispatch::lease`) checks it again before every send.

use std::time::Duration;

/// What must remain of a lease beyond the request timeout when a request is sent: time to
/// record the outcome before another replica may take the intent over. Configuration
/// requires `dispatcher.lease` of at least [`shortest_lease`] for every provider.
pub const SEND_MARGIN: Duration = Duration::from_secs(1);

/// The shortest lease under which a request with `request_timeout` can be sent at all
/// (the request timeout covers the connection too). Configuration and the daemon refuse a
/// shorter `dispatcher.lease`.
pub fn shortest_lease(request_timeout: Duration) -> Duration {
    request_timeout.saturating_add(SEND_MARGIN)
}
