//! The dispatcher's statements on PostgreSQL ([`ClaimStore`]). Each claim, takeover,
//! outcome batch and release is one statement (a data-modifying CTE, texts in
//! [`super::claim_sql`]) in its own short transaction; none is held across an HTTP call.
//!
//! The two statements that run for every intent, the claim (decision 0021) and the outcome
//! group (decision 0022), are kept prepared and always run on their generic plans, under
//! settings that forbid sequential scans and JIT compilation
//! ([`KEPT_PLAN_SETTINGS`](super::KEPT_PLAN_SETTINGS)):
//! planning them on every execution cost the server more than executing them. Neither can
//! be planned into a scan of the table: the claim's `UPDATE` finds the rows it locked
//! through an array of their ids, not a join (decision 0015 saw that join go wrong), and the
//! outcome group joins its unnested arrays to the table by primary key. The dispatcher's
//! store ([`PgStore::for_dispatcher`]) runs each as one statement, its own transaction, on
//! a session of its own opened with those settings and held between statements (one round
//! trip, decisions 0023 and 0024); any other store, or a second caller while that session
//! is busy, runs it in a transaction of the pool that sets them first (three round trips:
//! begin with the settings, execute, commit). Either way it commits before the call
//! returns.
//!
//! **The server cancels a claim after half the lease** ([`claim_statement_timeout`], as
//! `statement_timeout` on the claims' session or set for the pool's transaction): a claim
//! queued behind a lock, or slowed by a table that outgrew its plan, ends with an error
//! and claims nothing, where it used to hold the claimer until it was answered. The
//! deadline covers the statement's execution, not its commit: on the dispatcher's session
//! the commit comes with the protocol's sync, after the timer stopped, so a commit slowed
//! by synchronous replication is bounded only by the dispatcher, which gives up on an
//! answer after the lease and hands back whatever a late answer claimed
//! ([`Dispatcher::claim`](crate::dispatch::Dispatcher)). A stricter `statement_timeout`
//! that an operator set for the role, the database or the connection is kept
//! ([`statement_timeout_sql`](super::sessions::statement_timeout_sql)).
//!
//! The rarer statements that join `outbox_intents` to a list of ids (takeovers, releases)
//! are sent unnamed (`persistent(false)`), so PostgreSQL plans each execution for the table
//! as it is now. A prepared statement is planned for its first executions and may then
//! settle on a cached generic plan: made while the table was nearly empty, with sequential
//! scans allowed, that plan joins it by sequential scan, and keeps doing so as the table
//! grows until the next ANALYZE (decision 0002; test
//! `outcome_write_does_not_scan_a_table_that_grew`). The price is one more round trip (sqlx
//! describes an unnamed statement before executing it) and a plan per execution.
//!
//! sqlx looks its statement cache up by SQL text first, so the unnamed texts must not also
//! be run as cached statements on the same connection, nor the kept statements without
//! their settings.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, Transaction};

use super::claim_sql::{
    CLAIM_DUE_SQL, KEPT_PLAN_BEGIN_SQL, RECLAIM_EXPIRED_SQL, RECORD_OUTCOMES_SQL, RELEASE_SQL,
};
use super::rows::claimed_from_row;
use super::sessions::{Session, SessionRole};
use super::PgStore;
use crate::intent::IntentId;
use crate::store::outcomes::{record_results, OutcomeRow};
use crate::store::{
    lease_millis, ClaimRequest, ClaimStore, ClaimedIntent, FairShare, OutcomeRecord,
    ProviderStateRow, RecordResult, Release, StoreError, LEASE_EXPIRED_ERROR,
};

/// Where a kept statement runs: the dispatcher's session for it, which has the settings
/// already (the statement is its own transaction), or, for any other store, while that
/// session is busy or when it could not be opened, a transaction of the pool that sets them.
enum KeptSession<'a> {
    Dispatcher(Session<'a>),
    Transaction(Transaction<'static, Postgres>),
}

/// How long the server may run a claim under `lease` before it cancels it
/// (`statement_timeout`; see the module documentation).
pub fn claim_statement_timeout(lease: Duration) -> Duration {
    lease / 2
}

impl<'a> KeptSession<'a> {
    /// A session for `role`'s statement, which the server cancels after
    /// `statement_timeout` (`None`: the server's default).
    async fn open(
        store: &'a PgStore,
        role: SessionRole,
        statement_timeout: Option<Duration>,
    ) -> Result<Self, sqlx::Error> {
        if let Some(kept) = &store.kept {
            match kept.try_session_with(role, statement_timeout).await {
                Ok(Some(session)) => return Ok(Self::Dispatcher(session)),
                Ok(None) => {}
                Err(sqlx::Error::Configuration(e)) if e.is::<super::CatalogNotFirst>() => {
                    return Err(sqlx::Error::Configuration(e));
                }
                Err(e) => {
                    tracing::warn!(error = %e, ?role, "opening the dispatcher's session failed; this statement runs on the pool");
                }
            }
        }
        let tx = match statement_timeout {
            Some(t) => {
                let begin = format!(
                    "{}; {}",
                    KEPT_PLAN_BEGIN_SQL.as_str(),
                    super::sessions::statement_timeout_sql(t, true)
                );
                store.pool.begin_with(sqlx::AssertSqlSafe(begin)).await?
            }
            None => store.pool.begin_with(KEPT_PLAN_BEGIN_SQL.as_str()).await?,
        };
        Ok(Self::Transaction(tx))
    }

    fn conn(&mut self) -> &mut PgConnection {
        match self {
            Self::Dispatcher(session) => session,
            Self::Transaction(tx) => tx,
        }
    }

    /// After the statement succeeded: commits what it did (on a dispatcher's session it
    /// already has, and the session is kept for the next statement).
    async fn finish(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Dispatcher(session) => {
                session.keep();
                Ok(())
            }
            Self::Transaction(tx) => tx.commit().await,
        }
    }
}

/// Column arrays of [`OutcomeRow`]s for [`RECORD_OUTCOMES_SQL`].
#[derive(Default)]
struct OutcomeColumns {
    intent_id: Vec<IntentId>,
    token: Vec<i64>,
    state: Vec<&'static str>,
    next_at: Vec<Option<DateTime<Utc>>>,
    provider_ref: Vec<Option<String>>,
    error: Vec<Option<String>>,
    http_status: Vec<Option<i32>>,
    ambiguous: Vec<i32>,
    sent_at: Vec<Option<DateTime<Utc>>>,
    class: Vec<Option<&'static str>>,
    duration_ms: Vec<Option<i64>>,
    attempt_started: Vec<Option<DateTime<Utc>>>,
}

impl OutcomeColumns {
    fn push(&mut self, o: OutcomeRow) {
        self.intent_id.push(o.intent_id);
        self.token.push(o.token);
        self.state.push(o.state);
        self.next_at.push(o.next_at);
        self.provider_ref.push(o.provider_ref);
        self.error.push(o.error);
        self.http_status.push(o.http_status);
        self.ambiguous.push(o.ambiguous);
        self.sent_at.push(o.sent_at);
        self.class.push(o.class);
        self.duration_ms.push(o.duration_ms);
        self.attempt_started.push(o.attempt_started);
    }
}

#[async_trait]
impl ClaimStore for PgStore {
    async fn claim_due_shared(
        &self,
        req: &ClaimRequest,
        share: &FairShare,
    ) -> Result<Vec<ClaimedIntent>, StoreError> {
        let (start, inclusive) = share.start_bound();
        // Kept prepared, on a generic plan (see the module documentation).
        let claim = sqlx::query(CLAIM_DUE_SQL)
            .bind(req.now)
            .bind(&req.actions)
            .bind(i64::from(req.limit))
            .bind(&req.owner)
            .bind(lease_millis(req))
            .bind(start)
            .bind(i64::from(share.per_tenant.max(1)))
            .bind(inclusive);
        let deadline = claim_statement_timeout(req.lease);
        let mut session = KeptSession::open(self, SessionRole::Claims, Some(deadline)).await?;
        let rows = claim.fetch_all(session.conn()).await?;
        session.finish().await?;
        rows.iter().map(claimed_from_row).collect()
    }

    async fn reclaim_expired(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError> {
        let rows = sqlx::query(RECLAIM_EXPIRED_SQL)
            .persistent(false)
            .bind(i64::from(req.limit))
            .bind(&req.owner)
            .bind(lease_millis(req))
            .bind(LEASE_EXPIRED_ERROR)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(claimed_from_row).collect()
    }

    async fn record_outcomes(
        &self,
        outcomes: &[OutcomeRecord],
    ) -> Result<Vec<RecordResult>, StoreError> {
        let Some(first) = outcomes.first() else {
            return Ok(Vec::new());
        };
        let mut cols = OutcomeColumns::default();
        outcomes.iter().for_each(|o| cols.push(OutcomeRow::of(o)));
        // Kept prepared, on a generic plan (see the module documentation).
        let write = sqlx::query_scalar(RECORD_OUTCOMES_SQL)
            .bind(&cols.intent_id)
            .bind(&cols.token)
            .bind(&cols.state)
            .bind(&cols.next_at)
            .bind(&cols.provider_ref)
            .bind(&cols.error)
            .bind(&cols.http_status)
            .bind(&cols.ambiguous)
            .bind(&cols.sent_at)
            .bind(&cols.class)
            .bind(&cols.duration_ms)
            .bind(first.now)
            .bind(&cols.attempt_started);
        let mut session = KeptSession::open(self, SessionRole::Outcomes, None).await?;
        let applied: Vec<IntentId> = write.fetch_all(session.conn()).await?;
        session.finish().await?;
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
        let ids: Vec<IntentId> = releases.iter().map(|r| r.intent_id).collect();
        let tokens: Vec<i64> = releases.iter().map(|r| r.fencing_token).collect();
        let reasons: Vec<&str> = releases.iter().map(|r| r.reason.as_str()).collect();
        sqlx::query(RELEASE_SQL)
            .persistent(false)
            .bind(&ids)
            .bind(&tokens)
            .bind(&reasons)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn fencing_now(
        &self,
        ids: &[IntentId],
    ) -> Result<Vec<(IntentId, i64, bool)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, fencing_token, state = 'in_flight' FROM outbox_intents WHERE id = ANY($1)",
        )
        .persistent(false)
        .bind(ids)
        .fetch_all(&self.pool)
        .await?)
    }

    // Dialect twin of sqlite/claims.rs pending_unconfigured_actions: `ANY` for `json_each`.
    async fn pending_unconfigured_actions(
        &self,
        configured: &[String],
    ) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT action, count(*) FROM outbox_intents \
             WHERE state = 'pending' AND NOT (action = ANY($1)) GROUP BY action ORDER BY action",
        )
        .bind(configured)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn next_due_at(&self, actions: &[String]) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT min(next_attempt_at) FROM outbox_intents WHERE state = 'pending' AND action = ANY($1)",
        )
        .bind(actions)
        .fetch_one(&self.pool)
        .await?)
    }

    // Dialect twin of sqlite/claims.rs publish_provider_states: binds the same statements
    // (counts as `int`, times as timestamptz).
    async fn publish_provider_states(
        &self,
        owner: &str,
        states: &[ProviderStateRow],
        forget_before: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM outbox_provider_states WHERE owner = $1 OR updated_at < $2")
            .bind(owner)
            .bind(forget_before)
            .execute(&mut *tx)
            .await?;
        for s in states {
            sqlx::query(
                "INSERT INTO outbox_provider_states (owner, provider, in_flight, max_in_flight, \
                 rate_limited_waits, breaker, breaker_open_until, paused_until, updated_at, \
                 send_window) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(owner)
            .bind(&s.provider)
            .bind(i32::try_from(s.in_flight).unwrap_or(i32::MAX))
            .bind(i32::try_from(s.max_in_flight).unwrap_or(i32::MAX))
            .bind(s.rate_limited_waits)
            .bind(&s.breaker)
            .bind(s.breaker_open_until)
            .bind(s.paused_until)
            .bind(s.updated_at)
            .bind(s.send_window.map(|w| i32::try_from(w).unwrap_or(i32::MAX)))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn withdraw_provider_states(&self, owner: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM outbox_provider_states WHERE owner = $1")
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
