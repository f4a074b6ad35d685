//! Reclaiming the space a retention pass freed: which tables a pass deletes from
//! ([`PrunedTable`]) and what the backend did about them ([`Reclaim`]). When to reclaim
//! is decided once, in [`crate::reconcile::retention`]; the backends only run the
//! statement ([`crate::store::RetentionStore::reclaim`]).

use serde::Serialize;

/// A table the retention pass deletes rows from (serialized as the table's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PrunedTable {
    /// `outbox_intents`: the finished intents themselves.
    #[serde(rename = "outbox_intents")]
    Intents,
    /// `outbox_attempts`: their attempts, deleted with them.
    #[serde(rename = "outbox_attempts")]
    Attempts,
    /// `outbox_reconciliation_items`: their resolved items (a cascade).
    #[serde(rename = "outbox_reconciliation_items")]
    ReconciliationItems,
    /// `outbox_tombstones`: expired tombstones.
    #[serde(rename = "outbox_tombstones")]
    Tombstones,
}

impl PrunedTable {
    /// The table's name (the same on both backends).
    pub fn table(self) -> &'static str {
        match self {
            PrunedTable::Intents => "outbox_intents",
            PrunedTable::Attempts => "outbox_attempts",
            PrunedTable::ReconciliationItems => "outbox_reconciliation_items",
            PrunedTable::Tombstones => "outbox_tombstones",
        }
    }
}

/// What [`crate::store::RetentionStore::reclaim`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reclaim {
    /// The backend reuses freed pages by itself (SQLite); nothing ran.
    NotNeeded,
    /// `VACUUM (ANALYZE)` ran on `vacuumed` (PostgreSQL). The tables in `not_permitted`
    /// were left out: the database role may not vacuum them (it neither owns them nor owns
    /// the database, nor holds `MAINTAIN` on them).
    Vacuumed {
        /// Tables `VACUUM (ANALYZE, SKIP_LOCKED)` was run on (the server skips one that
        /// autovacuum is working on at that moment).
        vacuumed: Vec<PrunedTable>,
        /// Tables skipped for want of the privilege.
        not_permitted: Vec<PrunedTable>,
    },
}
