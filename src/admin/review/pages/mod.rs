//! The review page's own pages as pure functions from data to HTML, built with `maud`
//! (every value from the database or a person is escaped by the template): sign-in, the
//! reconciliation queue with the notice of a resolution, and errors here; one item with
//! its attempt history and the resolution form in [`item`]; the audit log in [`audit`].
//! Element ids are stable for tests.

mod audit;
mod item;
#[cfg(test)]
mod tests;

pub(super) use audit::{audit, AuditForm};
pub(super) use item::{attempts, item, FormState};

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::html::{age, back_link, head_row, layout, notice, or_dash, time};
use crate::admin::auth::Caller;
use crate::store::ReconciliationItem;

/// The sign-in form, with an optional error.
pub(super) fn login(error: Option<&str>) -> String {
    let body = html! {
        div.login {
            h1 { "Sign in" }
            @if let Some(error) = error { (notice("err", error)) }
            p.muted { "Paste an admin token from the daemon's configuration." }
            form method="post" action="/review/login" {
                label for="token" { "Token" }
                input type="password" name="token" id="token" autocomplete="off" required autofocus;
                button.primary type="submit" id="login" { "Sign in" }
            }
        }
    };
    layout("Sign in", None, body)
}

/// The open reconciliation queue, oldest first.
pub(super) fn queue(
    caller: &Caller,
    items: &[ReconciliationItem],
    now: DateTime<Utc>,
    flash: Option<Markup>,
    next_after_id: Option<i64>,
) -> String {
    let columns = [
        "Item",
        "Tenant",
        "Action",
        "Operation id",
        "Opened at",
        "Age",
        "Reason",
        "Probe finding",
    ];
    let body = html! {
        h1 { "Reconciliation queue" }
        @if let Some(flash) = flash { (flash) }
        @if items.is_empty() {
            p id="queue-empty" { "No open items: every outcome is known." }
        } @else {
            p.muted { (items.len()) " open item(s), oldest first. Open one to see its attempts and resolve it." }
            table id="queue" {
                (head_row(&columns))
                tbody {
                    @for item in items {
                        tr id={ "item-" (item.id) } {
                            td { a href={ "/review/items/" (item.id) } { "#" (item.id) } }
                            td { (item.tenant) }
                            td { (item.action) }
                            td.mono { (item.operation_id) }
                            td { (time(item.opened_at)) }
                            td { (age(item.opened_at, now)) }
                            td { (item.reason) }
                            td { (or_dash(item.probe_finding.as_deref())) }
                        }
                    }
                }
            }
            @if let Some(after) = next_after_id {
                p { a href={ "/review/queue?after_id=" (after) } { "Next page →" } }
            }
        }
    };
    layout("Queue", Some(caller), body)
}

/// "Item #N (tenant · operation) resolved as X", the notice the queue shows after a
/// resolution; nothing for an item that is not resolved.
pub(super) fn resolved_notice(item: &ReconciliationItem) -> Option<Markup> {
    let resolution = item.resolution.as_deref()?;
    Some(notice(
        "ok",
        html! {
            "Item #" (item.id) " (" (item.tenant) " · " (item.operation_id) ") resolved as "
            strong { (resolution) } "."
        },
    ))
}

/// An error page with the status's message.
pub(super) fn error(caller: Option<&Caller>, message: &str) -> String {
    let body = html! {
        h1 { "Something stopped this" }
        (notice("err", message))
        (back_to_queue())
    };
    layout("Error", caller, body)
}

/// The way back from an item or an error.
fn back_to_queue() -> Markup {
    back_link("/review", "Back to the queue")
}
