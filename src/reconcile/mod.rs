//! Reconciliation work done without a person: automatic status probes that resolve what
//! the provider can confirm, the retention job that prunes finished intents while keeping
//! tombstones, and the scheduler that runs both inside `outboxd run`.
//!
//! * [`probe`] — an action's probe settings and [`classify_probe`], the pure decision of
//!   what a lookup proves.
//! * [`probe_job`] — [`run_probes_once`]: look up every due open item and act on it.
//! * [`retention`] — [`run_retention_once`]: prune in batches, then expire tombstones.
//! * [`jobs`] — the tokio-cron-scheduler wiring and the one-replica-at-a-time runs
//!   ([`run_probe_job`], [`run_retention_job`]).
//!
//! The job lock (a PostgreSQL advisory lock) and the dry-run counts are SQL, so they live in
//! [`crate::store::jobs`]. Resolutions themselves, and every change to intents, go through
//! the store ([`crate::store::OperatorStore`] for probes, [`crate::store::RetentionStore`]
//! for retention); the person-facing side (CLI, admin API) lives elsewhere.

pub mod jobs;
pub mod probe;
pub mod probe_job;
pub mod retention;

pub use crate::store::jobs::{retention_preview, Job, JobLock, RetentionPreview};
pub use jobs::{
    run_probe_job, run_retention_job, run_retention_job_reporting, JobError, JobRun, JobsError,
    ScheduledJobs,
};
pub use probe::{classify_probe, ProbeContext, ProbeFinding, ProbeRuntime};
pub use probe_job::{run_probes_once, ProbeReport, ProbeSettings, PROBE_ACTOR};
pub use retention::{
    run_retention_observed, run_retention_once, RetentionBatch, RetentionReport, RetentionSettings,
};
