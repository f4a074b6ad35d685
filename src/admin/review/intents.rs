//! `GET /review/intents` (the intents browser: filter, search, keyset pages, and for an
//! operator the selection that starts a bulk dry run) and `GET /review/intents/{id}` (one
//! intent with why it waits, every attempt, the payload and its reconciliation items).

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::filter::{one, pairs, IntentFilterForm, PAGE};
use super::handlers::error_page;
use super::html::{back_link, layout, notice, or_dash, time, time_opt};
use super::why::{why_waiting, WaitFacts};
use super::{page, pages, redirect, session, Session};
use crate::admin::auth::Caller;
use crate::admin::extract::IdPath;
use crate::admin::ops::intent_detail;
use crate::admin::{AdminContext, ApiError};
use crate::intent::{IntentId, IntentState, OrderingKey};
use crate::store::{check_cancel, redispatch_route, IntentDetail, IntentRow, TenantScope};

/// `GET /review/intents`.
pub(super) async fn browse(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return redirect("/review", None);
    };
    let pairs = pairs(query.as_deref().unwrap_or_default());
    let form = IntentFilterForm::from_pairs(&pairs);
    let before_id = one(&pairs, "before_id").parse().ok();
    let listed = match form.search(&s.caller, before_id, PAGE) {
        Ok(search) => ctx
            .store
            .search_intents(&search)
            .await
            .map_err(ApiError::from),
        Err(e) => Err(e),
    };
    match listed {
        Ok(rows) => {
            let next = (rows.len() == PAGE as usize)
                .then(|| rows.last().map(|r| r.id))
                .flatten();
            page(StatusCode::OK, render_list(&s, &form, &rows, next))
        }
        Err(e @ ApiError::Invalid(_)) => {
            let body = html! {
                h1 { "Intents" }
                (notice("err", e.to_string()))
                (filter_form(&s.caller, &form))
            };
            let html = layout("Intents", Some(&s.caller), body);
            page(e.status(), html)
        }
        Err(e) => error_page(Some(&s), &e),
    }
}

/// The filter form (GET, so it is no change and any role may use it).
fn filter_form(caller: &Caller, f: &IntentFilterForm) -> Markup {
    html! {
        form.filters id="filters" method="get" action="/review/intents" {
            label { "Tenant "
                @match &caller.scope {
                    TenantScope::Only(tenants) => select name="tenant" id="f-tenant" {
                        option value="" { "all of mine" }
                        @for t in tenants { option value=(t) selected[f.tenant == *t] { (t) } }
                    },
                    TenantScope::All => input type="text" name="tenant" id="f-tenant" value=(f.tenant) placeholder="any";,
                }
            }
            label { "Action " input type="text" name="action" id="f-action" value=(f.action) placeholder="any"; }
            label { "State "
                select name="state" id="f-state" {
                    option value="" { "any" }
                    @for s in IntentState::ALL { option value=(s.as_str()) selected[f.state == s.as_str()] { (s.as_str()) } }
                }
            }
            label { "Created from " input type="datetime-local" name="from" id="f-from" value=(f.from); }
            label { "to " input type="datetime-local" name="to" id="f-to" value=(f.to); }
            label { "Search " input type="text" name="q" id="f-q" value=(f.q) placeholder="operation id or idempotency key"; }
            button.primary type="submit" id="filter" { "Filter" }
            " " a href="/review/intents" { "clear" }
        }
    }
}

fn render_list(
    s: &Session,
    f: &IntentFilterForm,
    rows: &[IntentRow],
    next: Option<IntentId>,
) -> String {
    let operator = s.caller.role.can_write();
    let table = html! {
        table id="intents" {
            thead { tr {
                @if operator { th { "" } }
                th { "Intent" } th { "Tenant" } th { "Action" } th { "Operation id" } th { "State" }
                th { "Attempts" } th { "Next attempt / finished" } th { "Created" }
            } }
            tbody {
                @for r in rows {
                    tr id={"intent-" (r.id)} {
                        @if operator { td { input type="checkbox" name="id" value=(r.id) id={"sel-" (r.id)}; } }
                        td { a href={"/review/intents/" (r.id)} { "#" (r.id) } }
                        td { (r.tenant) } td { (r.action) } td.mono { (r.operation_id) }
                        td class={"state-" (r.state.as_str())} { (r.state.as_str()) }
                        td { (r.attempt_count) }
                        td { @match r.finished_at { Some(at) => (time(at)), None => (time(r.next_attempt_at)) } }
                        td { (time(r.created_at)) }
                    }
                }
            }
        }
    };
    let body = html! {
        h1 { "Intents" }
        (filter_form(&s.caller, f))
        @if rows.is_empty() {
            p id="intents-empty" { "No intents match." }
        } @else if operator {
            form id="bulk" method="get" action="/review/intents/bulk" {
                @for (k, v) in f.fields() { @if !v.is_empty() { input type="hidden" name=(k) value=(v); } }
                (table)
                p.bulk {
                    "Tick intents for a change to those, or tick none for every intent matching the filter (up to " (PAGE) "). Each button shows a dry run first. "
                    button.primary type="submit" name="op" value="redispatch" id="bulk-redispatch" { "Redispatch failed / unknown…" }
                    " "
                    button.primary type="submit" name="op" value="cancel" id="bulk-cancel" { "Cancel pending…" }
                }
            }
        } @else {
            (table)
            p.muted { "Your token has the viewer role: you can look, an operator changes." }
        }
        @if let Some(before) = next {
            p { a id="next" href={"/review/intents?" (f.query()) @if !f.query().is_empty() { "&" } "before_id=" (before)} { "Older intents →" } }
        }
    };
    layout("Intents", Some(&s.caller), body)
}

/// `GET /review/intents/{id}`: one intent in the caller's tenants (another tenant's id is
/// answered exactly like a missing one).
pub(super) async fn show(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    IdPath(id): IdPath<IntentId>,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return redirect("/review", None);
    };
    let detail = match intent_detail(&ctx, &s.caller, id).await {
        Ok(d) => d,
        Err(e) => return error_page(Some(&s), &e),
    };
    let blocker = match ctx.store.ordering_blocker(&detail.intent).await {
        Ok(b) => b,
        Err(e) => return error_page(Some(&s), &e.into()),
    };
    let configured = ctx
        .action_safety(detail.intent.action.as_str())
        .map(|s| s.is_some());
    let now = Utc::now();
    let facts = WaitFacts {
        intent: &detail.intent,
        blocker,
        action_configured: configured,
        now,
    };
    let reasons = why_waiting(&facts);
    let html = render_intent(&s, &detail, &reasons, now);
    page(StatusCode::OK, html)
}

fn render_intent(
    s: &Session,
    d: &IntentDetail,
    reasons: &[super::why::Reason],
    _now: DateTime<Utc>,
) -> String {
    let i = &d.intent;
    let payload = i.payload.pretty();
    let can_redispatch = redispatch_route(i).is_ok();
    let can_cancel = check_cancel(i.state.as_str(), i.ambiguous_attempts).is_ok();
    let body = html! {
        h1 { "Intent #" (i.id) " · " (i.action) }
        h2 { "Why it is where it is" }
        ul id="why" {
            @for r in reasons { li class={"why-" (r.code())} { (r.sentence()) } }
        }
        dl id="facts" {
            dt { "Tenant" } dd { (i.tenant) }
            dt { "Operation id" } dd.mono { (i.operation_id) }
            dt { "Action" } dd { (i.action) }
            dt { "State" } dd { strong id="intent-state" { (i.state.as_str()) } }
            dt { "Idempotency key" } dd.mono { (i.idempotency_key) }
            dt { "Ordering key" } dd.mono { (or_dash(i.ordering_key.as_ref().map(OrderingKey::as_str))) }
            dt { "Attempts" } dd { (i.attempt_count) " (" (i.ambiguous_attempts) " ambiguous)" }
            dt { "Next attempt at" } dd { (time(i.next_attempt_at)) }
            dt { "Deadline" } dd { (time_opt(i.deadline_at)) }
            dt { "Provider reference" } dd.mono { (or_dash(i.provider_ref.as_deref())) }
            dt { "Last error" } dd { (or_dash(i.last_error.as_deref())) }
            dt { "Created" } dd { (time(i.created_at)) }
            dt { "Finished" } dd { (time_opt(i.finished_at)) }
        }
        h2 { "Attempts" }
        (pages::attempts(&d.attempts))
        h2 { "Payload" }
        pre id="payload" { (payload) }
        @if !d.reconciliation.is_empty() {
            h2 { "Reconciliation items" }
            ul id="items" {
                @for item in &d.reconciliation {
                    li { a href={"/review/items/" (item.id)} { "#" (item.id) } " opened " (time(item.opened_at)) ": " (item.reason)
                        " — " (item.resolution.as_deref().unwrap_or("open")) }
                }
            }
        }
        @if s.caller.role.can_write() && (can_redispatch || can_cancel) {
            h2 { "Change" }
            p {
                @if can_redispatch { a.button id="redispatch" href={"/review/intents/bulk?op=redispatch&id=" (i.id)} { "Redispatch… (dry run first)" } " " }
                @if can_cancel { a.button id="cancel" href={"/review/intents/bulk?op=cancel&id=" (i.id)} { "Cancel… (dry run first)" } }
            }
        }
        (back_link("/review/intents", "All intents"))
    };
    layout(&format!("Intent #{}", i.id), Some(&s.caller), body)
}
