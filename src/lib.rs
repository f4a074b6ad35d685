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
//! * [`action`] — retry safety, attempt classes, retry budgets (shared value types), and
//!   [`action::resend`], the one rule "may this resend act twice, and why".
//! * [`intent`] — validated identifiers, lifecycle states, the default idempotency key.
//! * [`digest`] — the canonical payload form and its sha256 (replay vs. conflict).
//! * [`producer`] — [`enqueue`]: the producer contract, on a PostgreSQL or SQLite transaction.
//!   `intent`, `digest`, `producer` and `wire_key` are the light `outboxd-producer` crate,
//!   re-exported here under their old paths.
//! * [`config`] — layered configuration (defaults → TOML → environment), validated.
//! * [`provider`] — HTTP delivery, signing, and the one classification of an attempt.
//! * [`dispatch`] — claim → deliver → classify → decide → record, and the retry rules.
//! * [`reconcile`] — automatic status probes, the retention job, and their scheduler.
//! * [`daemon`] — `outboxd run`: wires the database, actions and dispatcher together.
//! * [`api`] — the admin HTTP server: `/healthz`, `/readyz`, `/metrics`, and the [`admin`] routes.
//! * [`metrics`] — Prometheus metrics reported by the dispatcher and read from the outbox.
//! * [`demo`] — `outboxd demo`: the seed documents' story on a temporary database.
//! * [`commands`] — `outboxd enqueue` and `outboxd fake-provider`.
//! * [`fake_provider`] — a fault-injecting HTTP provider on loopback (tests, demo, benchmarks):
//!   the `outboxd-testkit` crate. The benchmark is the `outboxd-bench` crate.
//! * [`checker`] — the invariants every run must keep, checked against the fake provider.
//! * [`admin`] — the admin HTTP API (`/v1/...`) and the review page (`/review`) for people.
//! * [`cli`], [`status`], [`telemetry`] — the command line, `outboxd status`, logging.
//! * [`commands`] — `outboxd reconcile | intents | audit | prune`: operator work from a
//!   terminal, straight on the database.
//! * [`store`] — the outbox schema, migrations and every SQL statement the daemon issues,
//!   one module per backend behind one trait.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod action;
pub mod admin;
pub mod api;
pub mod checker;
pub mod cli;
pub mod commands;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod dispatch;
pub mod metrics;
pub mod provider;
pub mod reconcile;
pub mod status;
pub mod store;
pub mod telemetry;

// The producer contract and the value types it needs live in the light `outboxd-producer`
// crate (what services depend on); they keep their paths here.
pub use outboxd_producer::{digest, intent, producer, wire_key};
// The fake provider lives in the `outboxd-testkit` crate; `outboxd demo` and
// `outboxd fake-provider` use it, and tests reach it under this path.
pub use outboxd_testkit as fake_provider;

pub use producer::{enqueue, EnqueueError, Enqueued, NewIntent};
