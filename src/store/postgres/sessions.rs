//! The dispatcher's own PostgreSQL sessions for its two hot statements (decisions 0023 and
//! 0024): one for claims, one for outcome groups, each a single connection held between
//! statements rather than a pool.
//!
//! A pool checks a connection with a round trip when it hands it out and again, in a task
//! of its own, when it takes it back; on a session that runs one short statement at a time
//! those checks were two of its three round trips, and until the check on return ended the
//! connection could not be handed out again. A held session pays neither:
//!
//! * **Opened when first used**, with the daemon pool's connect options (role, password,
//!   TLS, the idle-in-transaction timeout) plus
//!   [`KEPT_PLAN_SETTINGS`](super::KEPT_PLAN_SETTINGS) as startup options, and the pool's
//!   `search_path` check, all within the pool's acquire timeout.
//! * **Kept only after a statement succeeded.** A statement that failed, or whose future
//!   was dropped mid-flight, closes its session; the next statement opens a new one.
//! * **Checked only after a pause.** A session idle for [`CHECK_AFTER_IDLE`] or longer is
//!   checked with a round trip before use (and replaced if that fails or does not answer
//!   within the pool's acquire timeout), as the pool checks
//!   every connection: what a server restart while the daemon was idle broke is found
//!   there. A session broken while busy costs one failed statement, retried as any database
//!   error, never a stream of them.
//! * **A server-side deadline for the claims** ([`DispatcherSessions::try_session_with`]): the
//!   claims' session is given the `statement_timeout` its caller asks for (half the
//!   lease, [`super::claims`]) right after it opens, so the server itself cancels a claim
//!   that waits too long (behind a table lock, say) before the caller gives up on it; a
//!   held session given another deadline is given this one first. A stricter
//!   `statement_timeout` set for the role, the database or in the connection's options is
//!   kept ([`statement_timeout_sql`]).
//! * **Never waited for.** A caller that finds the session busy (two callers of one store at
//!   once; the daemon has one claimer and one outcome writer) is told so, and runs its
//!   statement on the pool instead; so does one whose session could not be opened, unless
//!   the server's `search_path` is unsafe ([`super::CatalogNotFirst`]), which no
//!   connection may use.
//! * **Left alone for a while after it failed to open** ([`REOPEN_AFTER`], doubling up to
//!   [`REOPEN_AFTER_AT_MOST`]), or after an open its caller gave up on (an outcome write
//!   waits [`OUTCOME_WRITE_TIMEOUT`](crate::dispatch::dispatcher::OUTCOME_WRITE_TIMEOUT),
//!   less than the open's own timeout): meanwhile its statements run on the pool at once,
//!   so a server that refuses or never answers new connections costs one attempt (and one
//!   warning) per back-off, not one per statement.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::{Mutex, MutexGuard};

/// Which of the dispatcher's statements a session serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRole {
    /// The claim ([`CLAIM_DUE_SQL`](super::claim_sql)).
    Claims,
    /// The outcome group ([`RECORD_OUTCOMES_SQL`](super::claim_sql)).
    Outcomes,
}

/// The dispatcher's sessions beside a pool (see the module documentation).
#[derive(Debug)]
pub struct DispatcherSessions {
    options: PgConnectOptions,
    /// The pool's location with any password hidden, for the `search_path` check's error.
    url: String,
    open_timeout: Duration,
    claims: Mutex<Option<Held>>,
    outcomes: Mutex<Option<Held>>,
    /// When a session that could not be opened is tried again, per role.
    reopen: std::sync::Mutex<[Reopen; 2]>,
}

/// The back-off after a session could not be opened: until `not_before` its statements run
/// on the pool without trying to open it; each failure in a row doubles `wait`, from
/// [`REOPEN_AFTER`] up to [`REOPEN_AFTER_AT_MOST`].
#[derive(Debug, Default, Clone, Copy)]
struct Reopen {
    not_before: Option<Instant>,
    wait: Duration,
}

/// How long a session that could not be opened is left alone before it is tried again;
/// doubled after each failure in a row, up to [`REOPEN_AFTER_AT_MOST`].
pub const REOPEN_AFTER: Duration = Duration::from_secs(1);

/// The longest wait before a session that keeps failing to open is tried again.
pub const REOPEN_AFTER_AT_MOST: Duration = Duration::from_secs(30);

/// An open session, when its last statement ended, and the claims' deadline last set on it
/// ([`statement_timeout_sql`]; `None`: none set, the session's own default).
#[derive(Debug)]
struct Held {
    conn: PgConnection,
    used: Instant,
    statement_timeout: Option<Duration>,
}

/// How long a session may sit idle before it is checked with a round trip before use.
pub const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// How many sessions [`DispatcherSessions`] opens at most: one per [`SessionRole`].
pub const DISPATCHER_SESSIONS: u32 = 2;

impl DispatcherSessions {
    /// Sessions opened like `pool`'s connections, with the kept plans' settings. Opens
    /// nothing yet.
    pub fn beside(pool: &PgPool) -> Self {
        let connect = (*pool.connect_options()).clone();
        let url = crate::config::redact_url_password(&format!(
            "postgres://{}:{}/{}",
            connect.get_host(),
            connect.get_port(),
            connect.get_database().unwrap_or_default()
        ));
        Self {
            options: connect.options(super::KEPT_PLAN_SETTINGS),
            url,
            open_timeout: pool.options().get_acquire_timeout(),
            claims: Mutex::new(None),
            outcomes: Mutex::new(None),
            reopen: std::sync::Mutex::new([Reopen::default(); 2]),
        }
    }

    /// The session for `role`, opened if it is not open; `Ok(None)` if another caller is
    /// using it now.
    pub async fn try_session(&self, role: SessionRole) -> Result<Option<Session<'_>>, sqlx::Error> {
        self.try_session_with(role, None).await
    }

    /// [`Self::try_session`] for a session whose statements the server cancels after
    /// `statement_timeout` (`None`: whatever the session has); a held session with another
    /// deadline is given this one first.
    pub async fn try_session_with(
        &self,
        role: SessionRole,
        statement_timeout: Option<Duration>,
    ) -> Result<Option<Session<'_>>, sqlx::Error> {
        let slot = match role {
            SessionRole::Claims => &self.claims,
            SessionRole::Outcomes => &self.outcomes,
        };
        let Ok(mut slot) = slot.try_lock() else {
            return Ok(None);
        };
        if let (Some(held), Some(wanted)) = (slot.as_mut(), statement_timeout) {
            if held.statement_timeout != Some(wanted) {
                // Set on the held session (it keeps its prepared statements); one that
                // cannot be set is replaced by one opened with it.
                let set = sqlx::raw_sql(sqlx::AssertSqlSafe(statement_timeout_sql(wanted, false)));
                match tokio::time::timeout(self.open_timeout, set.execute(&mut held.conn)).await {
                    Ok(Ok(_)) => held.statement_timeout = Some(wanted),
                    _ => drop(slot.take()),
                }
            }
        }
        if slot
            .as_ref()
            .is_some_and(|h| h.used.elapsed() >= CHECK_AFTER_IDLE)
        {
            // Out of the slot while it is checked: a check that fails, hangs past the open
            // timeout (a connection a firewall dropped silently) or is abandoned closes it.
            let mut held = slot.take().expect("checked above");
            let check = tokio::time::timeout(self.open_timeout, held.conn.ping()).await;
            if matches!(check, Ok(Ok(()))) {
                *slot = Some(held);
            }
        }
        if slot.is_none() {
            if self.backing_off(role) {
                return Ok(None);
            }
            // An open that fails, or is abandoned mid-way (its caller gave up), backs off
            // from when it ended.
            let attempt = OpenAttempt {
                sessions: self,
                role,
            };
            let opened = self.open(statement_timeout).await;
            if !matches!(&opened, Err(e) if !is_refusal(e)) {
                std::mem::forget(attempt);
                self.reset_back_off(role);
            }
            *slot = Some(Held {
                conn: opened?,
                used: Instant::now(),
                statement_timeout,
            });
        }
        Ok(Some(Session { slot, keep: false }))
    }

    /// Whether the session for `role` is open now (it is not while a caller uses it).
    pub fn is_open(&self, role: SessionRole) -> bool {
        let slot = match role {
            SessionRole::Claims => &self.claims,
            SessionRole::Outcomes => &self.outcomes,
        };
        slot.try_lock().is_ok_and(|s| s.is_some())
    }

    /// Whether the session for `role` failed to open a moment ago and is left alone now.
    fn backing_off(&self, role: SessionRole) -> bool {
        let reopen = self.reopen.lock().unwrap_or_else(|e| e.into_inner());
        reopen[role as usize]
            .not_before
            .is_some_and(|at| Instant::now() < at)
    }

    /// Leaves the session for `role` alone for the next back-off: doubled since the last
    /// open that succeeded, from [`REOPEN_AFTER`] up to [`REOPEN_AFTER_AT_MOST`].
    fn back_off(&self, role: SessionRole) {
        let mut reopen = self.reopen.lock().unwrap_or_else(|e| e.into_inner());
        let reopen = &mut reopen[role as usize];
        reopen.wait = (reopen.wait * 2).clamp(REOPEN_AFTER, REOPEN_AFTER_AT_MOST);
        reopen.not_before = Some(Instant::now() + reopen.wait);
    }

    /// The session for `role` opened (or was refused for its `search_path`, which is
    /// reported on every statement): no back-off.
    fn reset_back_off(&self, role: SessionRole) {
        let mut reopen = self.reopen.lock().unwrap_or_else(|e| e.into_inner());
        reopen[role as usize] = Reopen::default();
    }

    async fn open(&self, statement_timeout: Option<Duration>) -> Result<PgConnection, sqlx::Error> {
        let open = async {
            let mut conn = PgConnection::connect_with(&self.options).await?;
            super::refuse_catalog_not_first(&mut conn, self.url.clone()).await?;
            if let Some(t) = statement_timeout {
                // Set after the start (not as a startup option), so that the session's own
                // default stays its `reset_val`, to keep where it is stricter.
                sqlx::raw_sql(sqlx::AssertSqlSafe(statement_timeout_sql(t, false)))
                    .execute(&mut conn)
                    .await?;
            }
            Ok(conn)
        };
        tokio::time::timeout(self.open_timeout, open)
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
    }
}

/// An open of the session for `role` in progress: dropped before it succeeded (failed or
/// abandoned), it starts a back-off.
struct OpenAttempt<'a> {
    sessions: &'a DispatcherSessions,
    role: SessionRole,
}

impl Drop for OpenAttempt<'_> {
    fn drop(&mut self) {
        self.sessions.back_off(self.role);
    }
}

/// Whether `e` is the refusal of an unsafe `search_path`, which no connection may use.
fn is_refusal(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Configuration(e) if e.is::<super::CatalogNotFirst>())
}

/// A statement that sets `statement_timeout` to `t` (whole milliseconds, at least 1: 0 would
/// mean no deadline), for the transaction only if `local`, unless the session's own default
/// is stricter: its `reset_val`, what was set for the role, the database or in the
/// connection's options (`options=-c statement_timeout=…` in the URL), is then kept. Only
/// digits are formatted in, so it may be sent as text.
pub(super) fn statement_timeout_sql(t: Duration, local: bool) -> String {
    let ms = t.as_millis().max(1);
    // Without a row for the setting (a server that only looks like PostgreSQL), `t` is set:
    // the statement always sets a deadline.
    format!(
        "SELECT pg_catalog.set_config('statement_timeout', coalesce((SELECT CASE WHEN \
         s.reset_val::bigint > 0 AND s.reset_val::bigint < {ms}::bigint THEN s.reset_val END \
         FROM pg_catalog.pg_settings s WHERE s.name = 'statement_timeout'), '{ms}'), {local})"
    )
}

/// One session, lent to one statement: closed when dropped, unless [`Session::keep`] was
/// called after the statement succeeded.
pub struct Session<'a> {
    slot: MutexGuard<'a, Option<Held>>,
    keep: bool,
}

impl Session<'_> {
    /// The statement succeeded: the session stays open for the next one.
    pub fn keep(mut self) {
        if let Some(held) = self.slot.as_mut() {
            held.used = Instant::now();
        }
        self.keep = true;
    }
}

impl Deref for Session<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.slot.as_ref().expect("a lent session is open").conn
    }
}

impl DerefMut for Session<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.slot.as_mut().expect("a lent session is open").conn
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if !self.keep {
            // A failed or abandoned statement may have left the connection mid-protocol.
            self.slot.take();
        }
    }
}
