//! # outboxd
//!
//! A transactional outbox dispatcher. Producers record **intents** in an outbox table inside
//! their own database transaction ([`enqueue`]); the `outboxd` daemon claims due intents,
//! delivers each to an HTTP provider with a durable downstream idempotency key, records the
//! provider's reference, retries only what is safe to retry, and moves every intent whose
//! outcome it cannot know to a reconciliation queue.
//!
//! ## Layout
//!
//! * [`action`] — retry safety, attempt classes, retry budgets (shared value types).
//! * [`intent`] — validated identifiers, lifecycle states, the default idempotency key.
//! * [`digest`] — the canonical payload form and its sha256 (replay vs. conflict).
//! * [`producer`] — [`enqueue`]: the producer contract, on a PostgreSQL or SQLite transaction.
//! * [`store`] — the outbox schema, migrations and every SQL statement the daemon issues,
//!   one module per backend behind one trait.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod action;
pub mod digest;
pub mod intent;
pub mod producer;
pub mod store;

pub use producer::{enqueue, EnqueueError, Enqueued, NewIntent};
