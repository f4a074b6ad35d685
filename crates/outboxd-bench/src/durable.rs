//! Response received → outcome durable (PostgreSQL): a statement trigger on the bench
//! schema's `outbox_intents` sends the ids of newly delivered intents with `NOTIFY`, which
//! PostgreSQL delivers only once the writing transaction has committed; this process
//! listens and stamps each arrival. The response instant is the attempt's start plus its
//! recorded duration (whole milliseconds).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
    seen: Arc<Mutex<HashMap<i64, f64>>>,
}

impl Durable {
    /// Installs the trigger and starts listening (before the daemon starts).
    pub async fn install(pool: &PgPool) -> Result<Durable, BenchError> {
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
        Ok(Durable { task, seen })
    }

    /// Stops listening and returns, per delivered intent seen, the milliseconds from the
    /// response to the committed outcome.
    pub async fn finish(self, pool: &PgPool) -> Result<Vec<f64>, BenchError> {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        self.task.abort();
        let seen = std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()));
        let rows: Vec<(i64, f64)> = sqlx::query_as(
            "SELECT intent_id, (extract(epoch FROM started_at) * 1000 + coalesce(duration_ms, 0))::float8 \
             FROM outbox_attempts WHERE class = 'delivered'",
        )
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, response)| Some((seen.get(&id)? - response).max(0.0)))
            .collect())
    }
}
