//! The audit log page: the filter form (actor, action, intent) and the entries of the
//! caller's tenants, newest first, with the link to older entries.

use maud::html;

use crate::admin::auth::Caller;
use crate::admin::review::html::{head_row, layout, or_dash, time, DASH};
use crate::store::AuditEntry;

/// The audit page's filter as typed.
#[derive(Debug, Default)]
pub(in crate::admin::review) struct AuditForm {
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

    /// The address of the entries older than `before_id` under the same filter.
    fn older_than(&self, before_id: i64) -> String {
        match self.query() {
            query if query.is_empty() => format!("/review/audit?before_id={before_id}"),
            query => format!("/review/audit?{query}&before_id={before_id}"),
        }
    }
}

/// The audit log, newest first, with its filter form; `next_before_id` links to the
/// older entries.
pub(in crate::admin::review) fn audit(
    caller: &Caller,
    entries: &[AuditEntry],
    next_before_id: Option<i64>,
    form: &AuditForm,
) -> String {
    let columns = [
        "#", "At", "Who", "What", "Tenant", "Intent", "Note", "Details",
    ];
    let body = html! {
        h1 { "Audit log" }
        form.filters id="audit-filters" method="get" action="/review/audit" {
            label { "Actor " input type="text" name="actor" id="a-actor" value=(form.actor); }
            label {
                "Action "
                input type="text" name="action" id="a-action" value=(form.action) placeholder="intent.cancel, reconciliation.resolve, ...";
            }
            label { "Intent " input type="text" name="intent" id="a-intent" value=(form.intent); }
            button.primary type="submit" id="audit-filter" { "Filter" }
            " " a href="/review/audit" { "clear" }
        }
        @if entries.is_empty() {
            p id="audit-empty" { "No entries." }
        } @else {
            table id="audit" {
                (head_row(&columns))
                tbody {
                    @for e in entries {
                        tr id={ "audit-" (e.id) } {
                            td { (e.id) }
                            td { (time(e.at)) }
                            td { (e.actor) }
                            td { (e.action) }
                            td { (or_dash(e.tenant.as_deref())) }
                            td { @match e.intent_id { Some(id) => { "#" (id) }, None => (DASH) } }
                            td { (or_dash(e.note.as_deref())) }
                            td.mono { (e.details.to_string()) }
                        }
                    }
                }
            }
        }
        @if let Some(before) = next_before_id {
            p { a href=(form.older_than(before)) { "Older entries →" } }
        }
    };
    layout("Audit log", Some(caller), body)
}
