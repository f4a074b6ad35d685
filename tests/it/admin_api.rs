//! The admin HTTP API against a real router on loopback, on SQLite and PostgreSQL: every
//! verb with its 401/403/404/409 answers, `POST /v1/intents` replay/conflict/invalid,
//! concurrent resolutions (exactly one wins), bulk redispatch (the dry run reports exactly
//! what the real run changes), the audit log, and tenant isolation on every route.

#[path = "admin_api/auth.rs"]
mod auth;
#[path = "admin_api/bulk.rs"]
mod bulk;
#[path = "admin_api/enqueue.rs"]
mod enqueue;
#[path = "admin_api/intents.rs"]
mod intents;
#[path = "admin_api/isolation.rs"]
mod isolation;
#[path = "admin_api/reconciliation.rs"]
mod reconciliation;
#[path = "admin_api/request_id.rs"]
mod request_id;
