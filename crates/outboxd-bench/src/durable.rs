//! Response received → outcome durable (PostgreSQL): a statement trigger on the bench
//! schema's `outbox_intents` sends the ids of newly delivered intents with `NOTIFY`, which
//! PostgreSQL delivers only once the writing transaction has committed; this process
//! listens and stamps each arrival. The response instant is taken as the later of two
//! instants that both come before the dispatcher read the response: the attempt's start
//! plus its recorded duration (whole milliseconds, rounded down), and when the provider
//! applied the effect, just before it wrote the answer (microseconds). So the figure
//! overstates the wait by the answer's trip over loopback, not by up to a millisecond.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use outboxd_testkit::FakeProvider;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::task::JoinHandle;

use super::measure::now_ms;
use super::BenchError;

const CHANNEL: &str = "bench_durable";

const TRIGGER: [&str; 2] = [
    "CREATE FUNCTION bench_notify_durable() RETURNS trigger LANGUAGE plpgsql AS $$ \
     DECLARE ids text; BEGIN \
     SELECT string_agg(id::text, ',') INTO ids FROM bench_new WHERE state = 'delivered'; \
     IF ids IS NOT NULL THEN PERFORM pg_notify('bench_durable', ids); END IF; \
     RETURN NULL; END $$",
    "CREATE TRIGGER bench_durable AFTER UPDATE ON outbox_intents REFERENCING NEW TABLE AS \
     bench_new FOR EACH STATEMENT EXECUTE FUNCTION bench_notify_durable()",
];

/// The listener, collecting when each delivered intent became visible.
pub struct Durable {
    task: JoinHandle<()>,
    /// How many effects `provider` had applied before the run.
    effects_before: usize,
    seen: Arc<Mutex<HashMap<i64, f64>>>,
}

impl Durable {
    /// Installs the trigger and starts listening (before the daemon starts delivering to
    /// `provider`).
    pub async fn install(pool: &PgPool, provider: &FakeProvider) -> Result<Durable, BenchError> {
        for sql in TRIGGER {
            sqlx::query(sql).execute(pool).await?;
        }
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let into = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok(note) = listener.recv().await {
                let at = now_ms();
                let mut seen = into.lock().unwrap_or_else(|e| e.into_inner());
                for id in note.payload().split(',').filter_map(|s| s.parse().ok()) {
                    seen.entry(id).or_insert(at);
                }
            }
        });
        Ok(Durable {
            task,
            effects_before: provider.effect_count(),
            seen,
        })
    }

    /// Stops listening and returns, per delivered intent seen, the milliseconds from the
    /// response to the committed outcome.
    pub async fn finish(
        self,
        pool: &PgPool,
        provider: &FakeProvider,
    ) -> Result<Vec<f64>, BenchError> {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        self.task.abort();
        let seen = std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()));
        let applied: HashMap<String, f64> = provider
            .effects_since(self.effects_before)
            .into_iter()
            .filter_map(|e| Some((e.key?, e.at.timestamp_micros() as f64 / 1000.0)))
            .collect();
        let rows: Vec<(i64, String, f64)> = sqlx::query_as(
            "SELECT a.intent_id, i.idempotency_key, \
             (extract(epoch FROM a.started_at) * 1000 + coalesce(a.duration_ms, 0))::float8 \
             FROM outbox_attempts a JOIN outbox_intents i ON i.id = a.intent_id \
             WHERE a.class = 'delivered'",
        )
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, key, timed)| {
                let response = applied.get(&key).map_or(timed, |at| at.max(timed));
                Some((seen.get(&id)? - response).max(0.0))
            })
            .collect())
    }
}
