//! # outboxd-producer
//!
//! The producer side of outboxd: a service records an
//! **intent** in the outbox table inside its own database transaction ([`enqueue`]), so the
//! intent commits or rolls back with the business write; the `outboxd` daemon delivers it.
//!
//! This crate is what a service adds to its own Cargo.toml. It holds only the contract and
//! what the contract needs — no HTTP server or client, no CLI, no scheduler, no metrics:
//!
//! * [`producer`] — [`enqueue`] and [`NewIntent`], on a PostgreSQL or SQLite transaction.
//! * [`intent`] — validated identifiers, lifecycle states, the default idempotency key.
//! * [`digest`] — the canonical payload form and its sha256 (replay vs. conflict).
//! * [`wire_key`] — the tenant-namespaced idempotency key sent to providers.
//! * [`migrations`] — the outbox schema, embedded from the repository's `migrations/`.
//!
//! The daemon (`outboxd`) re-exports these modules under the same paths
//! (`outboxd::enqueue`, `outboxd::intent`, ...).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod digest;
pub mod intent;
pub mod migrations;
pub mod producer;
pub mod wire_key;

pub use producer::{enqueue, EnqueueError, Enqueued, NewIntent};
