//! The dispatcher's statements on SQLite ([`ClaimStore`]; texts in [`super::claim_sql`]).
//! Each claim, takeover, outcome batch and release runs in one `BEGIN IMMEDIATE`
//! transaction (SQLite has a single writer, so no `SKIP LOCKED` is needed) that commits
//! before returning; none is held across an HTTP call.
//!
//! Lease times are read from the clock once the transaction holds the write lock, not
//! before the wait for a pool connection and for `BEGIN IMMEDIATE`: a claim that waited
//! gets a lease that starts when it was written, and expiry is judged at that moment too.
//! (The request's `now` only judges which intents are due.)

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::AssertSqlSafe;
use sqlx::Row;

use super::claim_sql::{
    open_items_sql, record_attempts_sql, record_intents_sql, CLAIM_SQL, CLOSE_EXPIRED_ATTEMPT_SQL,
    EXPIRED_SQL, FIRST_TENANT_AT_SQL, NEXT_TENANT_SQL, RELEASE_ATTEMPT_SQL, RELEASE_SQL,
    TAKE_OVER_SQL, TENANT_DUE_SQL,
};
use super::rows::claimed_from_row;
use super::{json_list, ms, SqliteStore};
use crate::intent::IntentId;
use crate::store::outcomes::{opens_items, record_results, OutcomeRow};
use crate::store::{
    lease_millis, ClaimRequest, ClaimStore, ClaimedIntent, FairShare, OutcomeRecord,
    ProviderStateRow, RecordResult, Release, StoreError, LEASE_EXPIRED_ERROR,
};

/// One outcome as a JSON array for [`super::claim_sql::OUTCOMES`], whose columns read it by
/// position (times as ms).
fn outcome_json(o: OutcomeRow) -> serde_json::Value {
    json!([
        o.intent_id,
        o.token,
        o.state,
        o.next_at.map(ms),
        o.provider_ref,
        o.error,
        o.http_status,
        o.ambiguous,
        o.sent_at.map(ms),
        o.class,
        o.duration_ms,
        o.attempt_started.map(ms),
    ])
}

#[async_trait]
impl ClaimStore for SqliteStore {
    /// The claim (see [`FairShare`]): walks the tenants with pending intents in name order from
    /// `share.start` ([`FairShare::start_bound`]), wrapping around, takes up to
    /// `share.per_tenant` due intents of each until `req.limit`, and marks them in flight, all
    /// in one write transaction.
    async fn claim_due_shared(
        &self,
        req: &ClaimRequest,
        share: &FairShare,
    ) -> Result<Vec<ClaimedIntent>, StoreError> {
        let limit = usize::try_from(req.limit).unwrap_or(usize::MAX);
        let (start, inclusive) = share.start_bound();
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut chosen: Vec<i64> = Vec::new();
        // (the tenant to probe from, whether it is itself a candidate, past the wrap-around)
        let (mut cursor, mut at_cursor, mut wrapped) = (start.to_owned(), inclusive, false);
        while chosen.len() < limit {
            let probe = if at_cursor {
                FIRST_TENANT_AT_SQL
            } else {
                NEXT_TENANT_SQL
            };
            let next: Option<String> = sqlx::query_scalar(probe)
                .bind(&cursor)
                .fetch_optional(&mut *tx)
                .await?;
            let tenant = match next {
                Some(t) if !wrapped || share.is_wrapped(&t) => t,
                None if !wrapped && !start.is_empty() => {
                    (cursor, at_cursor, wrapped) = (String::new(), true, true);
                    continue;
                }
                _ => break,
            };
            let want = (limit - chosen.len()).min(share.per_tenant.max(1) as usize);
            // One seek per action, then the first `want` of them in claim order.
            let mut due: Vec<(i64, i64)> = Vec::new();
            for action in &req.actions {
                let rows: Vec<(i64, i64)> = sqlx::query_as(TENANT_DUE_SQL)
                    .bind(&tenant)
                    .bind(ms(req.now))
                    .bind(action)
                    .bind(i64::try_from(want).unwrap_or(i64::MAX))
                    .fetch_all(&mut *tx)
                    .await?;
                due.extend(rows);
            }
            due.sort_unstable();
            let ids = due.into_iter().take(want).map(|(_, id)| id);
            chosen.extend(ids);
            (cursor, at_cursor) = (tenant, false);
        }
        let claimed_at = ms(Utc::now());
        let mut rows = sqlx::query(CLAIM_SQL)
            .bind(&req.owner)
            .bind(lease_millis(req))
            .bind(claimed_at)
            .bind(serde_json::to_string(&chosen).unwrap_or_else(|_| "[]".into()))
            .fetch_all(&mut *tx)
            .await?;
        rows.sort_by_key(|r| (r.get::<i64, _>("next_attempt_at"), r.get::<i64, _>("id")));
        let claimed = rows
            .iter()
            .map(|row| claimed_from_row(row, claimed_at))
            .collect::<Result<Vec<_>, _>>()?;
        tx.commit().await?;
        Ok(claimed)
    }

    async fn reclaim_expired(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let now = ms(Utc::now());
        let ids: Vec<i64> = sqlx::query_scalar(EXPIRED_SQL)
            .bind(now)
            .bind(i64::from(req.limit))
            .fetch_all(&mut *tx)
            .await?;
        let mut taken = Vec::with_capacity(ids.len());
        for id in ids {
            sqlx::query(CLOSE_EXPIRED_ATTEMPT_SQL)
                .bind(id)
                .bind(now)
                .bind(LEASE_EXPIRED_ERROR)
                .execute(&mut *tx)
                .await?;
            let row = sqlx::query(TAKE_OVER_SQL)
                .bind(id)
                .bind(&req.owner)
                .bind(now)
                .bind(lease_millis(req))
                .bind(LEASE_EXPIRED_ERROR)
                .fetch_one(&mut *tx)
                .await?;
            taken.push(claimed_from_row(&row, now)?);
        }
        tx.commit().await?;
        Ok(taken)
    }

    async fn record_outcomes(
        &self,
        outcomes: &[OutcomeRecord],
    ) -> Result<Vec<RecordResult>, StoreError> {
        let Some(first) = outcomes.first() else {
            return Ok(Vec::new());
        };
        let rows = outcomes.iter().map(|o| outcome_json(OutcomeRow::of(o)));
        let batch = serde_json::Value::Array(rows.collect()).to_string();
        let now = ms(first.now);
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        if outcomes.iter().any(|o| o.attempt.is_some()) {
            sqlx::query(AssertSqlSafe(record_attempts_sql()))
                .bind(&batch)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        let applied: Vec<IntentId> = sqlx::query_scalar(AssertSqlSafe(record_intents_sql()))
            .bind(&batch)
            .bind(now)
            .fetch_all(&mut *tx)
            .await?;
        if !applied.is_empty() && opens_items(outcomes) {
            let applied_json = serde_json::to_string(&applied).unwrap_or_else(|_| "[]".into());
            sqlx::query(AssertSqlSafe(open_items_sql()))
                .bind(&batch)
                .bind(now)
                .bind(&applied_json)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(record_results(outcomes, &applied))
    }

    async fn release_claims(
        &self,
        releases: &[Release],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if releases.is_empty() {
            return Ok(());
        }
        let now = ms(now);
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        for r in releases {
            // The opened attempt first, from the claim as it is, then the release (fenced).
            sqlx::query(RELEASE_ATTEMPT_SQL)
                .bind(r.intent_id)
                .bind(r.fencing_token)
                .bind(now)
                .bind(&r.reason)
                .execute(&mut *tx)
                .await?;
            sqlx::query(RELEASE_SQL)
                .bind(r.intent_id)
                .bind(r.fencing_token)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn fencing_now(
        &self,
        ids: &[IntentId],
    ) -> Result<Vec<(IntentId, i64, bool)>, StoreError> {
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        Ok(sqlx::query_as(
            "SELECT id, fencing_token, state = 'in_flight' FROM outbox_intents \
             WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
        .fetch_all(&self.pool)
        .await?)
    }

    // Dialect twin of postgres/claims.rs pending_unconfigured_actions: `json_each` for `ANY`.
    async fn pending_unconfigured_actions(
        &self,
        configured: &[String],
    ) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT action, count(*) FROM outbox_intents WHERE state = 'pending' \
             AND action NOT IN (SELECT value FROM json_each(?1)) GROUP BY action ORDER BY action",
        )
        .bind(json_list(configured))
        .fetch_all(&self.pool)
        .await?)
    }

    async fn next_due_at(&self, actions: &[String]) -> Result<Option<DateTime<Utc>>, StoreError> {
        let at: Option<i64> = sqlx::query_scalar(
            "SELECT min(next_attempt_at) FROM outbox_intents WHERE state = 'pending' \
             AND action IN (SELECT value FROM json_each(?1))",
        )
        .bind(json_list(actions))
        .fetch_one(&self.pool)
        .await?;
        Ok(at.map(super::from_ms))
    }

    // Dialect twin of postgres/claims.rs publish_provider_states: binds the same statements
    // (times as ms).
    async fn publish_provider_states(
        &self,
        owner: &str,
        states: &[ProviderStateRow],
        forget_before: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("DELETE FROM outbox_provider_states WHERE owner = ?1 OR updated_at < ?2")
            .bind(owner)
            .bind(ms(forget_before))
            .execute(&mut *tx)
            .await?;
        for s in states {
            sqlx::query(
                "INSERT INTO outbox_provider_states (owner, provider, in_flight, max_in_flight, \
                 rate_limited_waits, breaker, breaker_open_until, paused_until, updated_at, \
                 send_window) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .bind(owner)
            .bind(&s.provider)
            .bind(s.in_flight)
            .bind(s.max_in_flight)
            .bind(s.rate_limited_waits)
            .bind(&s.breaker)
            .bind(s.breaker_open_until.map(ms))
            .bind(s.paused_until.map(ms))
            .bind(ms(s.updated_at))
            .bind(s.send_window)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn withdraw_provider_states(&self, owner: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM outbox_provider_states WHERE owner = ?1")
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use sqlx::sqlite::SqlitePoolOptions;

    use super::*;
    use crate::store::sqlite::claim_sql::OUTCOMES;

    /// Every column of the outcome batch reads the field of that name: a swapped position in
    /// `outcome_json` or in `OUTCOMES` shows here.
    #[tokio::test]
    async fn outcome_batch_columns_read_their_own_fields() {
        let at = |ms| Utc.timestamp_millis_opt(ms).single().expect("valid time");
        let full = OutcomeRow {
            intent_id: IntentId::new(7),
            token: 11,
            state: "delivered",
            next_at: Some(at(1_000)),
            provider_ref: Some("ref-1".into()),
            error: Some("a \"],[\\ ü $.id".into()),
            http_status: Some(201),
            ambiguous: 1,
            sent_at: Some(at(2_000)),
            class: Some("ambiguous"),
            duration_ms: Some(33),
            attempt_started: Some(at(3_000)),
        };
        let empty = OutcomeRow {
            intent_id: IntentId::new(8),
            token: 12,
            state: "unknown",
            next_at: None,
            provider_ref: None,
            error: None,
            http_status: None,
            ambiguous: 0,
            sent_at: None,
            class: None,
            duration_ms: None,
            attempt_started: None,
        };
        let batch = serde_json::Value::Array(vec![outcome_json(full), outcome_json(empty)]);
        let pool = SqlitePoolOptions::new()
            .connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite");
        let rows = sqlx::query(OUTCOMES)
            .bind(batch.to_string())
            .fetch_all(&pool)
            .await
            .expect("the batch reads as rows");
        assert_eq!(rows.len(), 2);
        let row = &rows[0];
        let int = |name: &str| row.get::<Option<i64>, _>(name);
        let text = |name: &str| row.get::<Option<String>, _>(name);
        assert_eq!(int("id"), Some(7));
        assert_eq!(int("token"), Some(11));
        assert_eq!(text("state").as_deref(), Some("delivered"));
        assert_eq!(int("next_at"), Some(1_000));
        assert_eq!(text("provider_ref").as_deref(), Some("ref-1"));
        assert_eq!(text("error").as_deref(), Some("a \"],[\\ ü $.id"));
        assert_eq!(int("http_status"), Some(201));
        assert_eq!(int("ambiguous"), Some(1));
        assert_eq!(int("sent_at"), Some(2_000));
        assert_eq!(text("class").as_deref(), Some("ambiguous"));
        assert_eq!(int("duration_ms"), Some(33));
        assert_eq!(int("attempt_started"), Some(3_000));
        let row = &rows[1];
        assert_eq!(row.get::<Option<i64>, _>("id"), Some(8));
        assert_eq!(row.get::<Option<i64>, _>("token"), Some(12));
        assert_eq!(
            row.get::<Option<String>, _>("state").as_deref(),
            Some("unknown")
        );
        for name in [
            "next_at",
            "http_status",
            "sent_at",
            "duration_ms",
            "attempt_started",
        ] {
            assert_eq!(row.get::<Option<i64>, _>(name), None, "{name}");
        }
        for name in ["provider_ref", "error", "class"] {
            assert_eq!(row.get::<Option<String>, _>(name), None, "{name}");
        }
        assert_eq!(row.get::<Option<i64>, _>("ambiguous"), Some(0));
    }

    /// The three outcome statements read the batch once and look each intent up by id, on
    /// the SQLite this build bundles: none scans `outbox_intents`.
    #[tokio::test]
    async fn outcome_statements_look_intents_up_by_id() {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite");
        crate::store::migrate::migrate_sqlite(&pool)
            .await
            .expect("migrations apply");
        for sql in [
            record_intents_sql(),
            record_attempts_sql(),
            open_items_sql(),
        ] {
            let plan = sqlx::query(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                .fetch_all(&pool)
                .await
                .expect("the statement plans");
            let details: Vec<String> = plan.iter().map(|r| r.get("detail")).collect();
            let details = details.join("; ");
            assert!(
                details.contains("SEARCH i USING INTEGER PRIMARY KEY"),
                "{details}"
            );
            assert!(!details.contains("SCAN i"), "{details}");
            assert!(details.contains("MATERIALIZE e"), "{details}");
        }
    }
}
