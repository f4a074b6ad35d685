//! One reconciliation item's page: its facts, the attempt history (shared with the intent
//! page), the payload, and for an operator the resolution form with the may-act-twice
//! confirmation where the resend rule asks for one.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::back_to_queue;
use crate::admin::auth::Caller;
use crate::admin::ops::ItemDetail;
use crate::admin::review::html::{age, head_row, layout, or_dash, time, time_opt, DASH};
use crate::store::{AttemptRow, ReconciliationItemId};

/// What the resolution form shows (after a refused submission, what was typed).
#[derive(Debug, Clone, Default)]
pub(in crate::admin::review) struct FormState {
    /// The chosen resolution.
    pub resolution: Option<String>,
    /// The provider reference typed.
    pub provider_ref: Option<String>,
    /// The note typed.
    pub note: Option<String>,
    /// Why a redispatch of this item may act twice (the resend rule's reason; the form
    /// then shows it with the `confirm_may_act_twice` checkbox). Set by the handler.
    pub may_act_twice: Option<String>,
}

/// One item: its facts, the attempt history, the payload and the resolution form.
pub(in crate::admin::review) fn item(
    d: &ItemDetail,
    caller: &Caller,
    csrf: &str,
    now: DateTime<Utc>,
    flash: Option<Markup>,
    form: &FormState,
) -> String {
    let item = &d.item;
    let payload = d.intent.payload.pretty();
    let body = html! {
        h1 { "Item #" (item.id) " · " (item.action) }
        @if let Some(flash) = flash { (flash) }
        (facts(d, now))
        h2 { "Attempt history" }
        (attempts(&d.attempts))
        h2 { "Payload" }
        pre id="payload" { (payload) }
        h2 { "Resolve" }
        @if item.resolved_at.is_some() {
            p { "This item is resolved; nothing more to do here." }
        } @else if !caller.role.can_write() {
            p.muted { "Your token has the viewer role: you can look, an operator resolves." }
        } @else {
            (resolve_form(item.id, csrf, form))
        }
        (back_to_queue())
    };
    layout(&format!("Item #{}", item.id), Some(caller), body)
}

fn facts(d: &ItemDetail, now: DateTime<Utc>) -> Markup {
    let (item, intent) = (&d.item, &d.intent);
    html! {
        dl id="facts" {
            dt { "Tenant" } dd { (item.tenant) }
            dt { "Operation id" } dd.mono { (item.operation_id) }
            dt { "Action" } dd { (item.action) }
            dt { "Idempotency key" } dd.mono { (item.idempotency_key) }
            dt { "Intent" }
            dd {
                "#" (intent.id) " · state " strong id="intent-state" { (intent.state) }
                " · " (intent.attempt_count) " attempt(s) · created " (time(intent.created_at))
            }
            dt { "Why unknown" } dd { (item.reason) }
            dt { "Opened at" } dd { (time(item.opened_at)) " (" (age(item.opened_at, now)) " ago)" }
            dt { "Probe finding" }
            dd {
                (or_dash(item.probe_finding.as_deref())) " "
                span.muted { "(" (item.probe_count) " probe(s), last " (time_opt(item.probe_checked_at)) ")" }
            }
            @if let (Some(resolution), Some(at)) = (&item.resolution, item.resolved_at) {
                dt { "Resolution" }
                dd id="resolution" {
                    strong { (resolution) } " by " (or_dash(item.resolved_by.as_deref()))
                    " at " (time(at)) "; note: " (or_dash(item.resolution_note.as_deref()))
                    "; provider reference: " (or_dash(item.resolved_provider_ref.as_deref()))
                }
            }
        }
    }
}

/// The attempt history table.
pub(in crate::admin::review) fn attempts(rows: &[AttemptRow]) -> Markup {
    let columns = [
        "#",
        "Started",
        "Ended",
        "Took",
        "Class",
        "HTTP status",
        "Error",
        "Provider ref",
        "Dispatcher",
    ];
    html! {
        @if rows.is_empty() {
            p.muted { "No attempts." }
        } @else {
            table id="attempts" {
                (head_row(&columns))
                tbody {
                    @for a in rows {
                        @let class = a.class.map_or("open", |c| c.as_str());
                        tr id={ "attempt-" (a.attempt_number) } {
                            td { (a.attempt_number) }
                            td { (time(a.started_at)) }
                            td { (time_opt(a.ended_at)) }
                            td { @match a.duration_ms { Some(ms) => { (ms) " ms" }, None => (DASH) } }
                            td class={ "class-" (class) } { (class) }
                            td { @match a.http_status { Some(status) => (status), None => (DASH) } }
                            td { (or_dash(a.error.as_deref())) }
                            td.mono { (or_dash(a.provider_ref.as_deref())) }
                            td { (a.owner) }
                        }
                    }
                }
            }
        }
    }
}

fn resolve_form(item_id: ReconciliationItemId, csrf: &str, form: &FormState) -> Markup {
    let chosen = |value: &str| form.resolution.as_deref() == Some(value);
    html! {
        form.resolve method="post" action={ "/review/items/" (item_id) "/resolve" } {
            input type="hidden" name="csrf" value=(csrf);
            label {
                input type="radio" name="resolution" value="delivered" id="res-delivered" required checked[chosen("delivered")];
                " " strong { "Delivered" } " — it happened at the provider (give its reference)"
            }
            label {
                input type="radio" name="resolution" value="redispatch" id="res-redispatch" checked[chosen("redispatch")];
                " " strong { "Redispatch" } " — send again with the same idempotency key"
            }
            label {
                input type="radio" name="resolution" value="abandoned" id="res-abandoned" checked[chosen("abandoned")];
                " " strong { "Abandoned" } " — do not pursue"
            }
            label for="provider_ref" { "Provider reference (required for delivered)" }
            input type="text" name="provider_ref" id="provider_ref" value=(form.provider_ref.as_deref().unwrap_or_default());
            @if let Some(reason) = &form.may_act_twice { (twice_confirmation(reason)) }
            label for="note" { "Note: why (required, kept in the audit log)" }
            textarea name="note" id="note" required { (form.note.as_deref().unwrap_or_default()) }
            button.primary type="submit" id="resolve" { "Resolve" }
        }
    }
}

/// The confirmation a redispatch that may act twice needs, with the reason.
fn twice_confirmation(reason: &str) -> Markup {
    html! {
        div.notice.warn id="twice" {
            p { strong { "Redispatch may act twice:" } " " (reason) }
            label {
                input type="checkbox" name="confirm_may_act_twice" value="yes" id="confirm-twice";
                " I checked at the provider; send again even though it may act twice (needed only for redispatch)."
            }
        }
    }
}
