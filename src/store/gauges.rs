//! What the metrics refresh reads from the database: only live rows (pending, in flight,
//! open reconciliation), each through its partial index, so the cost follows the backlog
//! and never the finished history. Terminal outcomes are counters the dispatcher keeps
//! ([`crate::metrics`]), not counts.
//!
//! The statement is written once per backend ([`LIVE_GAUGES_SQL_POSTGRES`],
//! [`LIVE_GAUGES_SQL_SQLITE`]); the rows are folded here, in neutral code.

use chrono::{DateTime, Utc};

/// One row of the live-gauge read: a kind, an action, a count and an instant.
///
/// PostgreSQL: `$1` is now. The `pending` branch reads `outbox_intents_due` (partial on
/// `state = 'pending'`), the `in_flight` branch `outbox_intents_leases` (partial on a live
/// lease), the `reconciliation` branch `outbox_reconciliation_open` (partial on
/// `resolved_at IS NULL`) joined to its intents by primary key.
pub const LIVE_GAUGES_SQL_POSTGRES: &str = r#"
SELECT 'pending' AS kind, action, count(*) AS n,
       min(created_at) FILTER (WHERE next_attempt_at <= $1) AS oldest
  FROM outbox_intents WHERE state = 'pending' GROUP BY action
UNION ALL
SELECT 'in_flight', action, count(*), NULL
  FROM outbox_intents WHERE lease_expires_at IS NOT NULL GROUP BY action
UNION ALL
SELECT 'reconciliation', i.action, count(*), min(r.opened_at)
  FROM outbox_reconciliation_items r JOIN outbox_intents i ON i.id = r.intent_id
 WHERE r.resolved_at IS NULL GROUP BY i.action
"#;

/// The same read on SQLite (instants as Unix milliseconds; `?1` is now).
// Dialect twin of LIVE_GAUGES_SQL_POSTGRES: `CASE` for `FILTER`, `?1` for `$1`.
pub const LIVE_GAUGES_SQL_SQLITE: &str = r#"
SELECT 'pending' AS kind, action, count(*) AS n,
       min(CASE WHEN next_attempt_at <= ?1 THEN created_at END) AS oldest
  FROM outbox_intents WHERE state = 'pending' GROUP BY action
UNION ALL
SELECT 'in_flight', action, count(*), NULL
  FROM outbox_intents WHERE lease_expires_at IS NOT NULL GROUP BY action
UNION ALL
SELECT 'reconciliation', i.action, count(*), min(r.opened_at)
  FROM outbox_reconciliation_items r JOIN outbox_intents i ON i.id = r.intent_id
 WHERE r.resolved_at IS NULL GROUP BY i.action
"#;

/// The live backlog of one action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionBacklog {
    /// The action.
    pub action: String,
    /// Pending intents (due or not).
    pub pending: i64,
    /// Enqueue time of the oldest pending intent that is due now.
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// In-flight intents (a live lease).
    pub in_flight: i64,
    /// Open reconciliation items (intents whose outcome is unknown).
    pub reconciliation_open: i64,
    /// Opening time of the oldest open reconciliation item.
    pub reconciliation_oldest_at: Option<DateTime<Utc>>,
}

/// Every action with a live row, by action name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveGauges {
    /// One entry per action that has pending, in-flight or unresolved intents.
    pub actions: Vec<ActionBacklog>,
}

/// What a refresh got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GaugeRead {
    /// This process computes the gauges; here they are.
    Read(LiveGauges),
    /// Another replica computes them (it holds the gauge lock); export nothing.
    OtherReplica,
}

impl LiveGauges {
    /// Folds the rows of the live-gauge statement (kind, action, count, instant); an
    /// unknown kind is a programming error caught by the tests and ignored here.
    pub fn from_rows(
        rows: impl IntoIterator<Item = (String, String, i64, Option<DateTime<Utc>>)>,
    ) -> Self {
        let mut actions: std::collections::BTreeMap<String, ActionBacklog> = Default::default();
        for (kind, action, n, at) in rows {
            let entry = actions
                .entry(action.clone())
                .or_insert_with(|| ActionBacklog {
                    action,
                    ..ActionBacklog::default()
                });
            match kind.as_str() {
                "pending" => {
                    entry.pending = n;
                    entry.oldest_due_at = at;
                }
                "in_flight" => entry.in_flight = n,
                "reconciliation" => {
                    entry.reconciliation_open = n;
                    entry.reconciliation_oldest_at = at;
                }
                _ => {}
            }
        }
        Self {
            actions: actions.into_values().collect(),
        }
    }
}
