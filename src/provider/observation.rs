//! What the HTTP client observed for one attempt, before any interpretation.
//!
//! Every way an attempt can end is an [`Observation`]; [`crate::provider::classify()`] is
//! the only place that decides what an observation means for retries.

use bytes::Bytes;

use crate::provider::RetryAfter;

/// The raw result of one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// DNS failure, connection refused, TLS handshake failure, connect timeout: the request
    /// provably never left this process.
    ConnectFailed {
        /// What went wrong, for operators.
        error: String,
    },
    /// A local rate limiter held the request back; nothing was sent.
    LocallyRateLimited,
    /// We refused to send (for example, the destination is a private address).
    Refused {
        /// Why the request was not sent.
        reason: String,
    },
    /// The connection was established and the request may have been written, then the
    /// exchange failed (timeout, reset, protocol error) before a response status arrived.
    SendFailed {
        /// What went wrong, for operators.
        error: String,
        /// Whether the failure was the request timeout.
        timed_out: bool,
    },
    /// The provider answered with a status line.
    Response {
        /// The HTTP status code.
        status: u16,
        /// The parsed `Retry-After` header, if present and valid.
        retry_after: Option<RetryAfter>,
        /// The response body, or why it is not available.
        body: ResponseBody,
    },
}

/// The response body as read by the client (with a size cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseBody {
    /// The whole body, at most the configured limit.
    Complete(Bytes),
    /// The body exceeded the limit; reading stopped there and the body was discarded.
    TooLarge {
        /// The configured limit, in bytes.
        limit: usize,
    },
    /// Reading the body failed part way (reset, timeout).
    ReadFailed(String),
}
