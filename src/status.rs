//! `outboxd status` for people: counts by state, the oldest due intent, the
//! reconciliation backlog and each running daemon's provider bulkheads (as published in
//! the database, see [`crate::dispatch::publish`]), as aligned text or as JSON.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::dispatch::publish::is_stale;
use crate::store::{ProviderStateRow, StatusSummary};

fn age(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - since).num_seconds().max(0) as u64;
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// Renders `summary` as text.
pub fn render(summary: &StatusSummary, now: DateTime<Utc>) -> String {
    let mut out = String::from("intents by state\n");
    for (state, count) in &summary.by_state {
        let _ = writeln!(out, "  {:<10} {count:>10}", state.as_str());
    }
    match summary.oldest_due_at {
        Some(at) => {
            let _ = writeln!(
                out,
                "oldest due intent: enqueued {at} ({} ago)",
                age(at, now)
            );
        }
        None => out.push_str("oldest due intent: none (nothing is due)\n"),
    }
    let _ = write!(
        out,
        "reconciliation backlog: {} open",
        summary.reconciliation_open
    );
    if let Some(at) = summary.reconciliation_oldest_at {
        let _ = write!(out, ", oldest opened {at} ({} ago)", age(at, now));
    }
    out.push('\n');
    out
}

/// A row's send window beside its `max_in_flight` (`12/32`), or `not published` when its
/// daemon did not publish one (a release before schema 6).
fn send_window(r: &ProviderStateRow) -> String {
    match r.send_window {
        Some(w) => format!("{w}/{}", r.max_in_flight),
        None => "not published".to_owned(),
    }
}

/// Renders the published provider states as text: one line per provider and daemon.
pub fn render_providers(rows: &[ProviderStateRow], now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return "providers: none published (no daemon running against this database)\n".to_owned();
    }
    let mut out = String::from("providers (as published by each running daemon)\n");
    for r in rows {
        let _ = write!(
            out,
            "  {:<16} owner {:<24} in flight {:>4}/{:<4} window {:<9} breaker {:<9}",
            r.provider,
            r.owner,
            r.in_flight,
            r.max_in_flight,
            send_window(r),
            r.breaker
        );
        if let Some(until) = r.breaker_open_until {
            let _ = write!(out, " (trial in {})", age(now, until));
        }
        match r.paused_until {
            Some(until) if until > now => {
                let _ = write!(out, " paused {} more (Retry-After)", age(now, until));
            }
            _ => out.push_str(" not paused"),
        }
        let _ = write!(
            out,
            " rate-limited waits {} updated {} ago",
            r.rate_limited_waits,
            age(r.updated_at, now)
        );
        if is_stale(r, now) {
            out.push_str(" STALE (daemon stopped or cannot reach the database?)");
        }
        out.push('\n');
    }
    out
}

/// A published provider state with its age, as `outboxd status --json` and the admin
/// API's `GET /v1/providers` show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProviderView {
    /// The row as published.
    #[serde(flatten)]
    pub row: ProviderStateRow,
    /// Seconds since the daemon wrote the row.
    pub age_seconds: i64,
    /// Whether the row is older than a running daemon would leave it (the daemon stopped,
    /// or cannot reach the database).
    pub stale: bool,
}

/// Provider state rows with their age and staleness at `now`.
pub fn provider_views(rows: &[ProviderStateRow], now: DateTime<Utc>) -> Vec<ProviderView> {
    rows.iter()
        .map(|r| ProviderView {
            row: r.clone(),
            age_seconds: (now - r.updated_at).num_seconds().max(0),
            stale: is_stale(r, now),
        })
        .collect()
}

/// [`provider_views`] as JSON.
pub fn providers_json(rows: &[ProviderStateRow], now: DateTime<Utc>) -> serde_json::Value {
    serde_json::to_value(provider_views(rows, now)).unwrap_or_default()
}
