//! The PostgreSQL store: `FOR UPDATE SKIP LOCKED` claims committed before any network
//! call, batched fenced outcome writes, and the read models. Each role trait is
//! implemented where its statements live: [`crate::store::ClaimStore`] in `claims.rs`
//! (statement texts in `claim_sql.rs`), [`crate::store::ReadStore`] in `reads.rs`,
//! [`crate::store::ConsoleStore`] in `console.rs`, [`crate::store::RetentionStore`] in
//! `retention.rs`, and the statements of a review change in `review.rs`. Rows become
//! values in `rows.rs`; the live gauges' replica lock is in `gauges.rs`.

mod claim_sql;
mod claims;
mod console;
mod gauges;
mod reads;
mod retention;
mod review;
mod rows;

pub use review::append_audit_on;

use sqlx::PgPool;

/// The PostgreSQL store: every role of [`crate::store::OutboxStore`].
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    gauge_leader: std::sync::Arc<gauges::GaugeLeader>,
}

impl PgStore {
    /// Wraps a pool whose database is migrated.
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            gauge_leader: Default::default(),
        }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}
