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
//! * [`config`] — layered configuration (defaults → TOML → environment), validated.
//! * [`provider`] — HTTP delivery, signing, and the one classification of an attempt.
//! * [`dispatch`] — claim → deliver → classify → decide → record, and the retry rules.
//! * [`daemon`] — `outboxd run`: wires the database, actions and dispatcher together.
//! * [`fake_provider`] — a fault-injecting HTTP provider on loopback (tests, demo, benchmarks).
//! * [`checker`] — the invariants every run must keep, checked against the fake provider.
//! * [`admin`] — the admin HTTP API (`/v1/...`) and the review page (`/review`) for people.
//! * [`cli`], [`status`], [`telemetry`] — the command line, `outboxd status`, logging.
//! * [`store`] — the outbox schema, migrations and every SQL statement the daemon issues,
//!   one module per backend behind one trait.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod action;
pub mod admin;
pub mod checker;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod digest;
pub mod dispatch;
pub mod fake_provider;
pub mod intent;
pub mod producer;
pub mod provider;
pub mod status;
pub mod store;
pub mod telemetry;

pub use producer::{enqueue, EnqueueError, Enqueued, NewIntent};
