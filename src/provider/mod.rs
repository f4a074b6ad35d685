//! Delivery to an HTTP provider, and what an attempt's result means.
//!
//! The pipeline for one attempt is: [`ProviderClient::send`] performs the request and
//! reports a raw [`Observation`] (never an error: every way an attempt can end is an
//! observation); [`classify()`] — one pure function — turns that observation into exactly one
//! [`AttemptClass`](crate::action::AttemptClass) plus the HTTP status, the provider's
//! reference and a short human error. The retry decision belongs to the dispatcher
//! ([`crate::dispatch::retry`]), not to this module.
//!
//! * [`observation`] — what the client saw: connect failure, refusal, send failure, response.
//! * [`retry_after`] — the parsed `Retry-After` header.
//! * [`classify`](mod@classify) — observation → attempt class (design rule 6).
//! * [`settings`] — per-provider settings, the delivery request, construction errors.
//! * [`client`] — the reqwest-based client: timeouts, size cap, no redirects, no proxy.
//! * [`address_guard`] — refuses loopback / private / link-local destinations.
//! * [`signing`] — Standard Webhooks request signing.
//! * [`limits`] — a provider's bulkhead settings (in flight, rate limit, breaker, pause).
//! * [`state`] — a provider's bulkhead seen from outside (metrics, status, admin API).
//! * [`path`] — an attempt's request path, its placeholders filled and encoded.
//! * [`lookup`] — an action's status lookup, ready to send.

pub mod address_guard;
pub mod classify;
pub mod client;
pub mod limits;
pub mod lookup;
pub mod observation;
pub mod path;
pub mod retry_after;
pub mod settings;
pub mod signing;
pub mod state;

pub use classify::{classify, Classified, ClassifyContext};
pub use client::{install_crypto_provider, ProviderClient};
pub use observation::{Observation, ResponseBody};
pub use retry_after::{parse_retry_after, RetryAfter};
pub use settings::{DeliveryRequest, ProviderError, ProviderSettings};
pub use signing::{parse_signing_secret, SigningSecretError};
