//! `GET /review`: the dashboard of the signed-in user's tenants — intents per state with a
//! per-action breakdown, the oldest due intent, the reconciliation backlog, and attempts
//! over the last hour by outcome class, and each running daemon's provider bulkheads (in
//! flight, send window, breaker, `Retry-After` pause, rate-limited waits, as the daemons
//! publish them).
//! Built as a [`Dashboard`] view (pure, from the store's reads) and then rendered.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::chart::{self, Chart};
use super::handlers::error_page;
use super::html::{age, head_row, layout, time};
use super::{page, pages, session};
use crate::admin::auth::Caller;
use crate::admin::AdminContext;
use crate::dispatch::publish::is_stale;
use crate::intent::IntentState;
use crate::store::{AttemptEnd, ConsoleCounts, ProviderStateRow, ReconciliationItemId};

/// How many of the latest attempt rows the chart looks at.
const CHART_SCAN: u32 = 20_000;

/// Counts of one action per state (in [`IntentState::ALL`] order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ActionRow {
    /// The action.
    pub action: String,
    /// Intents per state.
    pub counts: [i64; 7],
}

/// Everything the dashboard shows.
#[derive(Debug, Clone)]
pub(super) struct Dashboard {
    /// Intents per state, over the caller's tenants.
    pub totals: [i64; 7],
    /// The same per action.
    pub by_action: Vec<ActionRow>,
    /// Enqueue time of the oldest due pending intent.
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// Open reconciliation items.
    pub reconciliation_open: i64,
    /// The oldest open item (id, opened at).
    pub reconciliation_oldest: Option<(ReconciliationItemId, DateTime<Utc>)>,
    /// Attempts over the last hour.
    pub chart: Chart,
    /// Each running daemon's published provider state (provider state holds no tenant
    /// data); `None` when it could not be read (an older schema, a failed query).
    pub providers: Option<Vec<ProviderStateRow>>,
    /// When the page was built.
    pub now: DateTime<Utc>,
}

impl Dashboard {
    /// The view of `counts` and the recent attempt `ends` at `now`.
    pub(super) fn build(counts: ConsoleCounts, ends: &[AttemptEnd], now: DateTime<Utc>) -> Self {
        let slot = |s: IntentState| IntentState::ALL.iter().position(|x| *x == s).unwrap_or(0);
        let mut totals = [0; 7];
        let mut by_action: Vec<ActionRow> = Vec::new();
        for (action, state, n) in counts.by_action_state {
            totals[slot(state)] += n;
            match by_action.iter_mut().find(|r| r.action == action) {
                Some(row) => row.counts[slot(state)] += n,
                None => {
                    let mut row = ActionRow {
                        action,
                        counts: [0; 7],
                    };
                    row.counts[slot(state)] = n;
                    by_action.push(row);
                }
            }
        }
        by_action.sort_by(|a, b| a.action.cmp(&b.action));
        Self {
            totals,
            by_action,
            oldest_due_at: counts.oldest_due_at,
            reconciliation_open: counts.reconciliation_open,
            reconciliation_oldest: counts.reconciliation_oldest,
            chart: chart::bucket(ends, now),
            providers: None,
            now,
        }
    }
}

/// `GET /review`: the dashboard when signed in, the sign-in form otherwise.
pub(super) async fn dashboard(State(ctx): State<AdminContext>, headers: HeaderMap) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return page(StatusCode::OK, pages::login(None));
    };
    let now = Utc::now();
    let scope = &s.caller.scope;
    let counts = ctx.store.console_counts(scope, now).await;
    let ends = ctx
        .store
        .recent_attempt_ends(scope, chart::since(now), CHART_SCAN)
        .await;
    // The page still shows the counts when provider states cannot be read.
    let providers = ctx.store.list_provider_states().await.ok();
    match (counts, ends) {
        (Ok(counts), Ok(ends)) => {
            let mut view = Dashboard::build(counts, &ends, now);
            view.providers = providers;
            page(StatusCode::OK, render(&view, &s.caller))
        }
        (Err(e), _) | (_, Err(e)) => error_page(Some(&s), &e.into()),
    }
}

fn state_link(state: IntentState, action: Option<&str>) -> String {
    match action {
        Some(a) => format!(
            "/review/intents?state={}&action={}",
            state.as_str(),
            url::form_urlencoded::byte_serialize(a.as_bytes()).collect::<String>()
        ),
        None => format!("/review/intents?state={}", state.as_str()),
    }
}

fn render(d: &Dashboard, caller: &Caller) -> String {
    let body: Markup = html! {
        h1 { "Dashboard" }
        div.cards {
            div.card id="card-due" {
                div.label { "Oldest due intent" }
                div.big { @match d.oldest_due_at { Some(at) => (age(at, d.now)), None => "none" } }
                div.muted { @if let Some(at) = d.oldest_due_at { "enqueued " (time(at)) } @else { "nothing is waiting past its time" } }
            }
            div.card id="card-reconciliation" {
                div.label { "Reconciliation backlog" }
                div.big { a href="/review/queue" { (d.reconciliation_open) " open" } }
                div.muted {
                    @if let Some((id, at)) = d.reconciliation_oldest {
                        "oldest " a href={"/review/items/" (id)} { "#" (id) } ", " (age(at, d.now)) " old"
                    } @else { "every outcome is known" }
                }
            }
        }
        h2 { "Intents by state" }
        table id="states" {
            thead { tr { th { "Action" } @for s in IntentState::ALL { th { (s.as_str()) } } } }
            tbody {
                @for row in &d.by_action {
                    tr id={"action-" (row.action)} {
                        td { (row.action) }
                        @for (i, s) in IntentState::ALL.iter().enumerate() {
                            td { @if row.counts[i] > 0 { a href=(state_link(*s, Some(&row.action))) { (row.counts[i]) } } @else { span.muted { "0" } } }
                        }
                    }
                }
                tr id="states-total" {
                    th { "All actions" }
                    @for (i, s) in IntentState::ALL.iter().enumerate() {
                        th id={"total-" (s.as_str())} { a href=(state_link(*s, None)) { (d.totals[i]) } }
                    }
                }
            }
        }
        h2 { "Attempts over the last hour" }
        (chart::svg(&d.chart))
        h2 { "Providers" }
        (providers(d))
    };
    layout("Dashboard", Some(caller), body)
}

/// The provider section: one row per provider and publishing daemon.
fn providers(d: &Dashboard) -> Markup {
    let until = |at: Option<DateTime<Utc>>| at.filter(|t| *t > d.now);
    html! {
        @match &d.providers {
            None => p.muted id="providers-unavailable" { "provider states could not be read" },
            Some(rows) if rows.is_empty() => p.muted id="providers-none" {
                "no daemon has published provider state (none running against this database)"
            },
            Some(rows) => table id="providers" {
                (head_row(&[
                    "Provider", "Daemon", "In flight", "Send window", "Breaker", "Paused until",
                    "Rate-limited waits", "Updated",
                ]))
                tbody { @for r in rows {
                    tr id={"provider-" (r.provider) "-" (r.owner)} {
                        td { (r.provider) }
                        td { (r.owner) }
                        td { (r.in_flight) " / " (r.max_in_flight) }
                        td { @match r.send_window {
                            Some(w) => { (w) " / " (r.max_in_flight) }
                            None => span.muted { "not published" }
                        } }
                        td {
                            (r.breaker)
                            @if let Some(at) = until(r.breaker_open_until) { " until " (time(at)) }
                        }
                        td { @match until(r.paused_until) { Some(at) => (time(at)), None => span.muted { "not paused" } } }
                        td { (r.rate_limited_waits) }
                        td {
                            (age(r.updated_at, d.now)) " ago"
                            @if is_stale(r, d.now) { " " strong.stale { "STALE" } }
                        }
                    }
                } }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fold_into_totals_and_rows() {
        let now = Utc::now();
        let counts = ConsoleCounts {
            by_action_state: vec![
                ("refund".into(), IntentState::Pending, 2),
                ("notify".into(), IntentState::Failed, 3),
                ("refund".into(), IntentState::Failed, 1),
            ],
            ..ConsoleCounts::default()
        };
        let d = Dashboard::build(counts, &[], now);
        assert_eq!(d.totals, [2, 0, 0, 4, 0, 0, 0]);
        assert_eq!(d.by_action[0].action, "notify");
        assert_eq!(d.by_action[1].counts, [2, 0, 0, 1, 0, 0, 0]);
    }
}
