//! The integration tests, in one binary (one link of `tests/support` instead of one per
//! file): each former `tests/<name>.rs` is a module here, `tests/it/<name>.rs`. Run one
//! with `cargo test --test it <name>::` (for example `cargo test --test it fault_suite::`).
//!
//! `tests/support` stays where it is, so a new `tests/<name>.rs` with `mod support;` still
//! builds as a binary of its own; add it here as a module instead.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod admin_api;
mod admin_server;
mod checker_catches;
mod cli_review;
mod cli_safety;
mod config_check;
mod console;
mod daemon_process;
mod daemon_search_path;
mod daemon_serves_admin;
mod demo;
mod digest_properties;
mod digest_vectors;
mod dispatch_outcomes;
mod dispatcher_pool;
mod dispatcher_sessions;
mod fault_suite;
mod hostile_input;
mod key_expiry;
mod kill_after_answer;
mod lease_window;
mod metrics_gauges;
mod migrate_plants;
mod openapi;
mod pipeline;
mod producer_contract;
mod producer_holes;
mod provider_states;
mod quickstart;
mod reconcile_probes;
mod request_body;
mod resend_confirmation;
mod retention_job;
mod review_page;
mod review_store;
mod schema_window;
mod secrets_stay_secret;
mod send_deadlines;
mod shutdown_release;
mod sql_producer;
mod sqlite_memory;
mod stored_values;
mod tenant_fairness;
mod upgrade;
mod upgrade_to_0012;
mod upgrade_to_0013;
mod wakeups;
