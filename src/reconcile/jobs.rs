//! The scheduled jobs of `outboxd run`: status probes on `probes.schedule` and retention on
//! `retention.schedule` (tokio-cron-scheduler, 6-field cron in UTC).
//!
//! The scheduler only triggers; each run is [`run_probe_job`] / [`run_retention_job`], which
//! take the job's [`JobLock`] (a PostgreSQL advisory lock, so with several replicas each job
//! runs on one of them at a time; nothing on SQLite) and skip the run if another replica
//! holds it. Within one process a tick that finds the previous run still going is skipped
//! too. Both jobs are safe even if two runs did overlap (pruning skips locked rows, and of
//! two resolutions of one item exactly one applies); the lock saves duplicate work and
//! duplicate lookups at the provider.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{watch, Mutex};
use tokio_cron_scheduler::{Job as CronJob, JobScheduler, JobSchedulerError};

use super::probe_job::{run_probes_once, ProbeReport, ProbeSettings};
use super::retention::{
    run_retention_observed, RetentionBatch, RetentionReport, RetentionSettings,
};
use crate::config::Config;
use crate::dispatch::ActionTable;
use crate::metrics::process::JobResult;
use crate::metrics::Metrics;
use crate::store::jobs::{Job, JobLock};
use crate::store::{Database, StoreError};

/// How long shutdown waits for a cancelled run to unwind.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Whether a job run happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobRun<T> {
    /// It ran; what it did.
    Ran(T),
    /// Another replica (or process) holds the job's lock; nothing was done.
    Skipped,
}

/// Why a job run failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Taking or releasing the job's lock failed.
    #[error("job lock: {0}")]
    Lock(#[from] sqlx::Error),
    /// The job's work failed (retried at the next scheduled run).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why the scheduler could not start.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The scheduler itself failed.
    #[error("job scheduler: {0}")]
    Scheduler(#[from] JobSchedulerError),
    /// A schedule was refused by the scheduler.
    #[error("{key} = {schedule:?} is not a schedule the job scheduler accepts: {source}")]
    Schedule {
        /// The configuration key.
        key: &'static str,
        /// The expression.
        schedule: String,
        /// The scheduler's error.
        #[source]
        source: JobSchedulerError,
    },
}

/// Runs `body` while holding the job's lock; `Skipped` if another session holds it.
async fn exclusive<T>(
    db: &Database,
    job: Job,
    body: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<JobRun<T>, JobError> {
    let Some(lock) = JobLock::try_acquire(db, job).await? else {
        tracing::debug!(
            job = job.as_str(),
            "another replica is running this job; skipped"
        );
        return Ok(JobRun::Skipped);
    };
    let result = body.await;
    if let Err(error) = lock.release().await {
        tracing::warn!(job = job.as_str(), %error, "releasing the job lock failed; its connection was closed");
    }
    Ok(JobRun::Ran(result?))
}

/// One retention pass under the retention job's lock.
pub async fn run_retention_job(
    db: &Database,
    settings: &RetentionSettings,
) -> Result<JobRun<RetentionReport>, JobError> {
    run_retention_job_reporting(db, settings, None).await
}

/// [`run_retention_job`], adding every batch to `metrics`' retention progress counter.
pub async fn run_retention_job_reporting(
    db: &Database,
    settings: &RetentionSettings,
    metrics: Option<&Metrics>,
) -> Result<JobRun<RetentionReport>, JobError> {
    let store = db.retention_store();
    let mut on_batch = |batch: RetentionBatch| {
        if let Some(m) = metrics {
            match batch {
                RetentionBatch::Intents(n) => m.process().observe_retention_batch(n, 0),
                RetentionBatch::Tombstones(n) => m.process().observe_retention_batch(0, n),
            }
        }
    };
    exclusive(
        db,
        Job::Retention,
        run_retention_observed(store.as_ref(), settings, Utc::now(), &mut on_batch),
    )
    .await
}

/// One probe pass under the probe job's lock.
pub async fn run_probe_job(
    db: &Database,
    actions: &ActionTable,
    settings: &ProbeSettings,
) -> Result<JobRun<ProbeReport>, JobError> {
    let store = db.operator_store();
    exclusive(
        db,
        Job::Probes,
        run_probes_once(store.as_ref(), actions, settings),
    )
    .await
}

/// What a scheduled tick runs.
#[derive(Clone)]
enum Work {
    Probes(Arc<ActionTable>, ProbeSettings),
    Retention(RetentionSettings),
}

/// One registered job: its work, the database, and its in-process busy flag.
#[derive(Clone)]
struct Tick {
    work: Work,
    db: Database,
    busy: Arc<Mutex<()>>,
    stop: watch::Receiver<bool>,
    metrics: Option<Arc<Metrics>>,
}

impl Tick {
    fn job(&self) -> Job {
        match self.work {
            Work::Probes(..) => Job::Probes,
            Work::Retention(_) => Job::Retention,
        }
    }

    /// Runs once unless the previous run is still going; a shutdown cancels the run (every
    /// step of both jobs is one transaction, so nothing is left half done).
    async fn run(mut self) {
        let job = self.job().as_str();
        let Ok(_busy) = self.busy.clone().try_lock_owned() else {
            tracing::info!(job, "previous run still going; this tick is skipped");
            return;
        };
        let work = async {
            match &self.work {
                Work::Probes(actions, settings) => {
                    log_run(job, run_probe_job(&self.db, actions, settings).await)
                }
                Work::Retention(settings) => {
                    let metrics = self.metrics.as_deref();
                    log_run(
                        job,
                        run_retention_job_reporting(&self.db, settings, metrics).await,
                    )
                }
            }
        };
        let work = async {
            let result = work.await;
            if let Some(m) = &self.metrics {
                m.process().observe_job(job, result);
            }
        };
        tokio::select! {
            () = work => {}
            _ = self.stop.wait_for(|stop| *stop) => {
                tracing::info!(job, "scheduled run cancelled by shutdown");
            }
        }
    }
}

/// Logs a run's end and says what it came to.
fn log_run<T: std::fmt::Debug>(job: &str, result: Result<JobRun<T>, JobError>) -> JobResult {
    match result {
        Ok(JobRun::Ran(report)) => {
            tracing::debug!(job, ?report, "scheduled job ran");
            JobResult::Succeeded
        }
        Ok(JobRun::Skipped) => JobResult::Skipped,
        Err(error) => {
            tracing::warn!(job, %error, "scheduled job failed; it runs again at its next time");
            JobResult::Failed
        }
    }
}

/// The running scheduler; [`ScheduledJobs::shutdown`] stops it.
pub struct ScheduledJobs {
    scheduler: JobScheduler,
    ticks: Vec<Tick>,
    stop: watch::Sender<bool>,
}

impl ScheduledJobs {
    /// Registers the retention job, and the probe job if any action declares a probe, and
    /// starts the scheduler.
    pub async fn start(
        config: &Config,
        db: &Database,
        actions: Arc<ActionTable>,
    ) -> Result<ScheduledJobs, JobsError> {
        Self::start_reporting(config, db, actions, None).await
    }

    /// [`ScheduledJobs::start`], reporting each run (last success, failures) and retention
    /// progress to `metrics`.
    pub async fn start_reporting(
        config: &Config,
        db: &Database,
        actions: Arc<ActionTable>,
        metrics: Option<Arc<Metrics>>,
    ) -> Result<ScheduledJobs, JobsError> {
        let scheduler = JobScheduler::new().await?;
        let (stop, stop_rx) = watch::channel(false);
        let tick = |work| Tick {
            work,
            db: db.clone(),
            busy: Arc::new(Mutex::new(())),
            stop: stop_rx.clone(),
            metrics: metrics.clone(),
        };
        let mut ticks = vec![tick(Work::Retention(RetentionSettings::from_config(
            &config.retention,
        )))];
        let mut schedules = vec![("retention.schedule", config.retention.schedule.clone())];
        let has_probes = actions
            .names()
            .iter()
            .any(|name| actions.get(name).is_some_and(|a| a.probe.is_some()));
        if has_probes {
            ticks.push(tick(Work::Probes(actions, ProbeSettings::default())));
            schedules.push(("probes.schedule", config.probes.schedule.clone()));
        }
        for (tick, (key, schedule)) in ticks.iter().zip(schedules) {
            let job = cron_job(tick.clone(), &schedule).map_err(|source| JobsError::Schedule {
                key,
                schedule: schedule.clone(),
                source,
            })?;
            scheduler.add(job).await?;
            tracing::info!(job = tick.job().as_str(), %schedule, "scheduled job registered");
        }
        scheduler.start().await?;
        Ok(ScheduledJobs {
            scheduler,
            ticks,
            stop,
        })
    }

    /// Stops scheduling, cancels running jobs and waits (briefly) for them to unwind.
    pub async fn shutdown(mut self) {
        if let Err(error) = self.scheduler.shutdown().await {
            tracing::warn!(%error, "stopping the job scheduler failed");
        }
        let _ = self.stop.send(true);
        for tick in &self.ticks {
            if tokio::time::timeout(STOP_WAIT, tick.busy.lock())
                .await
                .is_err()
            {
                tracing::warn!(
                    job = tick.job().as_str(),
                    "a scheduled run did not stop in time"
                );
            }
        }
    }
}

fn cron_job(tick: Tick, schedule: &str) -> Result<CronJob, JobSchedulerError> {
    CronJob::new_async(schedule, move |_id, _scheduler| {
        let tick = tick.clone();
        Box::pin(tick.run())
    })
}
