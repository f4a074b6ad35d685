//! The review page's pages as pure functions from data to HTML: sign-in, the queue, one
//! item with its attempt history and the resolution form, the audit log, and errors.
//! Every value from the database is escaped here; element ids are stable for tests.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::html::{age, esc, esc_opt, layout, notice, time, time_opt};
use crate::admin::auth::Caller;
use crate::admin::ops::ItemDetail;
use crate::intent::TenantId;
use crate::store::{
    AttemptRow, AuditEntry, AuditEntryId, ReconciliationItem, ReconciliationItemId,
};

/// The sign-in form, with an optional error.
pub(super) fn login(error: Option<&str>) -> String {
    let error = error.map(|e| notice("err", &esc(e))).unwrap_or_default();
    let body = format!(
        "<div class=\"login\"><h1>Sign in</h1>{error}\
         <p class=\"muted\">Paste an admin token from the daemon's configuration.</p>\
         <form method=\"post\" action=\"/review/login\">\
         <label for=\"token\">Token</label>\
         <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"off\" required autofocus>\
         <button class=\"primary\" type=\"submit\" id=\"login\">Sign in</button></form></div>"
    );
    layout("Sign in", None, &body)
}

/// The open reconciliation queue, oldest first.
pub(super) fn queue(
    caller: &Caller,
    items: &[ReconciliationItem],
    now: DateTime<Utc>,
    flash: Option<String>,
    next_after_id: Option<ReconciliationItemId>,
) -> String {
    let mut body = String::from("<h1>Reconciliation queue</h1>");
    body.push_str(&flash.unwrap_or_default());
    if items.is_empty() {
        body.push_str("<p id=\"queue-empty\">No open items: every outcome is known.</p>");
        return layout("Queue", Some(caller), &body);
    }
    let _ = write!(
        body,
        "<p class=\"muted\">{} open item(s), oldest first. Open one to see its attempts and resolve it.</p>\
         <table id=\"queue\"><thead><tr><th>Item</th><th>Tenant</th><th>Action</th><th>Operation id</th>\
         <th>Opened at</th><th>Age</th><th>Reason</th><th>Probe finding</th></tr></thead><tbody>",
        items.len()
    );
    for item in items {
        let _ = write!(
            body,
            "<tr id=\"item-{id}\"><td><a href=\"/review/items/{id}\">#{id}</a></td><td>{}</td><td>{}</td>\
             <td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(item.tenant.as_str()),
            esc(item.action.as_str()),
            esc(item.operation_id.as_str()),
            time(item.opened_at),
            age(item.opened_at, now),
            esc(&item.reason),
            esc_opt(item.probe_finding.as_deref()),
            id = item.id,
        );
    }
    body.push_str("</tbody></table>");
    if let Some(after) = next_after_id {
        let _ = write!(
            body,
            "<p><a href=\"/review/queue?after_id={after}\">Next page &rarr;</a></p>"
        );
    }
    layout("Queue", Some(caller), &body)
}

/// What the resolution form shows (after a refused submission, what was typed).
#[derive(Debug, Clone, Default)]
pub(super) struct FormState {
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
pub(super) fn item(
    d: &ItemDetail,
    caller: &Caller,
    csrf: &str,
    now: DateTime<Utc>,
    flash: Option<String>,
    form: &FormState,
) -> String {
    let item = &d.item;
    let mut body = format!(
        "<h1>Item #{} &middot; {}</h1>",
        item.id,
        esc(item.action.as_str())
    );
    body.push_str(&flash.unwrap_or_default());
    body.push_str(&facts(d, now));
    body.push_str("<h2>Attempt history</h2>");
    body.push_str(&attempts(&d.attempts));
    let payload = serde_json::to_string_pretty(&d.intent.payload).unwrap_or_default();
    let _ = write!(
        body,
        "<h2>Payload</h2><pre id=\"payload\">{}</pre>",
        esc(&payload)
    );
    body.push_str("<h2>Resolve</h2>");
    if item.resolved_at.is_some() {
        body.push_str("<p>This item is resolved; nothing more to do here.</p>");
    } else if !caller.role.can_write() {
        body.push_str("<p class=\"muted\">Your token has the viewer role: you can look, an operator resolves.</p>");
    } else {
        body.push_str(&resolve_form(item.id, csrf, form));
    }
    body.push_str("<p><a href=\"/review\">&larr; Back to the queue</a></p>");
    layout(&format!("Item #{}", item.id), Some(caller), &body)
}

fn facts(d: &ItemDetail, now: DateTime<Utc>) -> String {
    let (item, intent) = (&d.item, &d.intent);
    let mut dl = format!(
        "<dl id=\"facts\"><dt>Tenant</dt><dd>{}</dd><dt>Operation id</dt><dd class=\"mono\">{}</dd>\
         <dt>Action</dt><dd>{}</dd><dt>Idempotency key</dt><dd class=\"mono\">{}</dd>\
         <dt>Intent</dt><dd>#{} &middot; state <strong id=\"intent-state\">{}</strong> &middot; {} attempt(s) &middot; created {}</dd>\
         <dt>Why unknown</dt><dd>{}</dd><dt>Opened at</dt><dd>{} ({} ago)</dd>\
         <dt>Probe finding</dt><dd>{} <span class=\"muted\">({} probe(s), last {})</span></dd>",
        esc(item.tenant.as_str()),
        esc(item.operation_id.as_str()),
        esc(item.action.as_str()),
        esc(item.idempotency_key.as_str()),
        intent.id,
        intent.state,
        intent.attempt_count,
        time(intent.created_at),
        esc(&item.reason),
        time(item.opened_at),
        age(item.opened_at, now),
        esc_opt(item.probe_finding.as_deref()),
        item.probe_count,
        time_opt(item.probe_checked_at),
    );
    if let (Some(resolution), Some(at)) = (&item.resolution, item.resolved_at) {
        let _ = write!(
            dl,
            "<dt>Resolution</dt><dd id=\"resolution\"><strong>{}</strong> by {} at {}; note: {}; provider reference: {}</dd>",
            esc(resolution),
            esc_opt(item.resolved_by.as_deref()),
            time(at),
            esc_opt(item.resolution_note.as_deref()),
            esc_opt(item.resolved_provider_ref.as_deref()),
        );
    }
    dl.push_str("</dl>");
    dl
}

/// The attempt history table.
pub(super) fn attempts(rows: &[AttemptRow]) -> String {
    if rows.is_empty() {
        return "<p class=\"muted\">No attempts.</p>".into();
    }
    let mut table = String::from(
        "<table id=\"attempts\"><thead><tr><th>#</th><th>Started</th><th>Ended</th><th>Took</th>\
         <th>Class</th><th>HTTP status</th><th>Error</th><th>Provider ref</th><th>Dispatcher</th></tr></thead><tbody>",
    );
    for a in rows {
        let class = a.class.map(|c| c.as_str()).unwrap_or("open");
        let _ = write!(
            table,
            "<tr id=\"attempt-{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"class-{class}\">{class}</td><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td>{}</td></tr>",
            a.attempt_number,
            a.attempt_number,
            time(a.started_at),
            time_opt(a.ended_at),
            a.duration_ms.map_or_else(|| "&mdash;".to_owned(), |ms| format!("{ms} ms")),
            a.http_status.map_or_else(|| "&mdash;".to_owned(), |s| s.to_string()),
            esc_opt(a.error.as_deref()),
            esc_opt(a.provider_ref.as_deref()),
            esc(&a.owner),
        );
    }
    table.push_str("</tbody></table>");
    table
}

fn resolve_form(item_id: ReconciliationItemId, csrf: &str, form: &FormState) -> String {
    let checked = |value: &str| {
        if form.resolution.as_deref() == Some(value) {
            " checked"
        } else {
            ""
        }
    };
    format!(
        "<form class=\"resolve\" method=\"post\" action=\"/review/items/{item_id}/resolve\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <label><input type=\"radio\" name=\"resolution\" value=\"delivered\" id=\"res-delivered\" required{}> \
         <strong>Delivered</strong> &mdash; it happened at the provider (give its reference)</label>\
         <label><input type=\"radio\" name=\"resolution\" value=\"redispatch\" id=\"res-redispatch\"{}> \
         <strong>Redispatch</strong> &mdash; send again with the same idempotency key</label>\
         <label><input type=\"radio\" name=\"resolution\" value=\"abandoned\" id=\"res-abandoned\"{}> \
         <strong>Abandoned</strong> &mdash; do not pursue</label>\
         <label for=\"provider_ref\">Provider reference (required for delivered)</label>\
         <input type=\"text\" name=\"provider_ref\" id=\"provider_ref\" value=\"{}\">\
         {}\
         <label for=\"note\">Note: why (required, kept in the audit log)</label>\
         <textarea name=\"note\" id=\"note\" required>{}</textarea>\
         <button class=\"primary\" type=\"submit\" id=\"resolve\">Resolve</button></form>",
        esc(csrf),
        checked("delivered"),
        checked("redispatch"),
        checked("abandoned"),
        esc(form.provider_ref.as_deref().unwrap_or_default()),
        twice_confirmation(form.may_act_twice.as_deref()),
        esc(form.note.as_deref().unwrap_or_default()),
    )
}

/// The confirmation a redispatch that may act twice needs, with the reason (or nothing).
fn twice_confirmation(reason: Option<&str>) -> String {
    let Some(reason) = reason else {
        return String::new();
    };
    format!(
        "<div class=\"notice warn\" id=\"twice\"><p><strong>Redispatch may act twice:</strong> \
         {}</p><label><input type=\"checkbox\" name=\"confirm_may_act_twice\" value=\"yes\" \
         id=\"confirm-twice\"> I checked at the provider; send again even though it may act \
         twice (needed only for redispatch).</label></div>",
        esc(reason)
    )
}

/// The audit page's filter as typed.
#[derive(Debug, Default)]
pub(super) struct AuditForm {
    /// Only this actor.
    pub actor: String,
    /// Only this action.
    pub action: String,
    /// Only this intent (its number).
    pub intent: String,
}

impl AuditForm {
    fn query(&self) -> String {
        let mut out = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("actor", &self.actor),
            ("action", &self.action),
            ("intent", &self.intent),
        ] {
            if !v.is_empty() {
                out.append_pair(k, v);
            }
        }
        out.finish()
    }
}

/// The audit log, newest first, with its filter form.
pub(super) fn audit(
    caller: &Caller,
    entries: &[AuditEntry],
    next_before_id: Option<AuditEntryId>,
    form: &AuditForm,
) -> String {
    let mut body = String::from("<h1>Audit log</h1>");
    let _ = write!(
        body,
        "<form class=\"filters\" id=\"audit-filters\" method=\"get\" action=\"/review/audit\">\
         <label>Actor <input type=\"text\" name=\"actor\" id=\"a-actor\" value=\"{}\"></label>\
         <label>Action <input type=\"text\" name=\"action\" id=\"a-action\" value=\"{}\" placeholder=\"intent.cancel, reconciliation.resolve, ...\"></label>\
         <label>Intent <input type=\"text\" name=\"intent\" id=\"a-intent\" value=\"{}\"></label>\
         <button class=\"primary\" type=\"submit\" id=\"audit-filter\">Filter</button> <a href=\"/review/audit\">clear</a></form>",
        esc(&form.actor),
        esc(&form.action),
        esc(&form.intent),
    );
    if entries.is_empty() {
        body.push_str("<p id=\"audit-empty\">No entries.</p>");
        return layout("Audit log", Some(caller), &body);
    }
    body.push_str(
        "<table id=\"audit\"><thead><tr><th>#</th><th>At</th><th>Who</th><th>What</th><th>Tenant</th>\
         <th>Intent</th><th>Note</th><th>Details</th></tr></thead><tbody>",
    );
    for e in entries {
        let _ = write!(
            body,
            "<tr id=\"audit-{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"mono\">{}</td></tr>",
            e.id,
            e.id,
            time(e.at),
            esc(&e.actor),
            esc(&e.action),
            esc_opt(e.tenant.as_ref().map(TenantId::as_str)),
            e.intent_id.map_or_else(|| "&mdash;".to_owned(), |i| format!("#{i}")),
            esc_opt(e.note.as_deref()),
            esc(&e.details.to_string()),
        );
    }
    body.push_str("</tbody></table>");
    if let Some(before) = next_before_id {
        let query = form.query();
        let sep = if query.is_empty() { "" } else { "&amp;" };
        let _ = write!(
            body,
            "<p><a href=\"/review/audit?{}{sep}before_id={before}\">Older entries &rarr;</a></p>",
            esc(&query)
        );
    }
    layout("Audit log", Some(caller), &body)
}

/// An error page with the status's message.
pub(super) fn error(caller: Option<&Caller>, message: &str) -> String {
    let body = format!(
        "<h1>Something stopped this</h1>{}<p><a href=\"/review\">&larr; Back to the queue</a></p>",
        notice("err", &esc(message))
    );
    layout("Error", caller, &body)
}
