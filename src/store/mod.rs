//! The outbox store: schema migrations and every SQL statement the daemon issues, one
//! module per backend ([`postgres`], [`sqlite`]) behind the [`OutboxStore`] trait.
//!
//! Producers do not use this module; they use [`crate::enqueue`] on their own transaction.

pub mod connect;
pub mod migrate;

pub use connect::{connect, Database, DatabaseUrl};
