//! `outboxd status` for people: counts by state, the oldest due intent and the
//! reconciliation backlog, as aligned text.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::store::StatusSummary;

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
