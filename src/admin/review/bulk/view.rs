//! The bulk pages' HTML: the dry run with its signed apply form (and the may-act-twice
//! confirmation where the resend rule asks for one), and the table of lines and results.

use chrono::Utc;
use maud::{html, Markup};

use super::{twice_risk, Line, Op};
use crate::admin::review::filter::PAGE;
use crate::admin::review::html::{back_link, head_row, layout, notice};
use crate::admin::review::plan::sign_line;
use crate::admin::review::Session;
use crate::admin::AdminContext;

/// The table of lines: what each will do (dry run) or what it did (`results`).
pub(super) fn line_rows(
    lines: &[Line],
    results: Option<&[Result<&'static str, String>]>,
) -> Markup {
    html! {
        table id="plan" {
            (head_row(&["Intent", "Tenant", "Action", "Operation id", "State", if results.is_some() { "Result" } else { "Will" }]))
            tbody {
                @for (n, l) in lines.iter().enumerate() {
                    @let outcome = results.map_or(&l.plan, |r| &r[n]);
                    tr id={"line-" (l.id)} class=(if outcome.is_ok() { "change" } else { "skip" }) {
                        @match &l.intent {
                            Some(i) => {
                                td { a href={"/review/intents/" (i.id)} { "#" (i.id) } }
                                td { (i.tenant) } td { (i.action) } td.mono { (i.operation_id) } td { (i.state.as_str()) }
                            },
                            None => { td { "#" (l.id) } td colspan="4" { span.muted { "—" } } },
                        }
                        td { @match outcome { Ok(what) => strong { (what) }, Err(why) => span.muted { "unchanged: " (why) } } }
                    }
                }
            }
        }
    }
}

/// The dry run page: the plan, and for an operator the signed form that applies it (with
/// `error` and the typed `note` when an apply was refused).
pub(super) fn render_dry_run(
    ctx: &AdminContext,
    s: &Session,
    op: Op,
    lines: &[Line],
    selected: bool,
    error: Option<&str>,
    note: &str,
) -> String {
    let changing: Vec<&Line> = lines.iter().filter(|l| l.plan.is_ok()).collect();
    let (shown, hidden): (Vec<&Line>, usize) = if selected {
        (lines.iter().collect(), 0)
    } else {
        (changing.clone(), lines.len() - changing.len())
    };
    let shown: Vec<Line> = shown
        .into_iter()
        .map(|l| Line {
            id: l.id,
            intent: l.intent.clone(),
            plan: l.plan.clone(),
            seen_attempt_count: l.seen_attempt_count,
            shown_may_act_twice: l.shown_may_act_twice,
        })
        .collect();
    let risky = twice_risk(ctx, op, lines);
    let plan_at = Utc::now().timestamp();
    let signed: Vec<String> = changing
        .iter()
        .filter_map(|l| l.intent.as_ref())
        .map(|i| {
            let twice = risky.iter().any(|(id, _, _)| *id == i.id);
            sign_line(ctx, s, op.as_str(), plan_at, i, twice)
        })
        .collect();
    let body = html! {
        h1 { "Dry run: " (op.as_str()) }
        @if let Some(e) = error { (notice("err", e)) }
        p id="summary" {
            strong { (changing.len()) } " intent(s) will change. Nothing has changed yet."
            @if hidden > 0 { " " (hidden) " intent(s) matching the filter are left out: the change does not apply to them." }
            @if !selected && lines.len() == PAGE as usize { " Only the newest " (PAGE) " matching intents were considered; run again for more." }
        }
        @if !shown.is_empty() { (line_rows(&shown, None)) }
        @if changing.is_empty() {
            p id="nothing" { "Nothing to change." }
        } @else {
            form.resolve id="apply" method="post" action="/review/intents/bulk" {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="op" value=(op.as_str());
                input type="hidden" name="plan_at" value=(plan_at);
                @for line in &signed { input type="hidden" name="line" value=(line); }
                @if !risky.is_empty() {
                    div.notice.warn id="twice" {
                        p { strong { (risky.len()) " of these redispatches may act twice:" } }
                        ul {
                            @for (id, action, why) in &risky { li { "#" (id) " (" (action) "): " (why) } }
                        }
                        p { "Redispatching may then make the provider act a second time: a second notification, a second charge." }
                        label { input type="checkbox" name="confirm_may_act_twice" value="yes" id="confirm-twice"; " I checked at the provider; send again even though it may act twice." }
                    }
                }
                label for="note" { "Note: why (required, kept in the audit log of each change)" }
                textarea name="note" id="note" required { (note) }
                button.primary type="submit" id="confirm" { "Apply " (changing.len()) " change(s)" }
            }
        }
        (back_link("/review/intents", "Back to the intents"))
    };
    layout("Dry run", Some(&s.caller), body)
}
