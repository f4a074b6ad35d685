//! Bulk changes from the intents browser: redispatch failed or unknown intents, cancel
//! pending ones. `GET /review/intents/bulk` is the dry run (changes nothing): for the ticked
//! ids, or for every intent matching the filter, it lists exactly which intents will change
//! and why the others will not, using the store's own rules ([`redispatch_route`],
//! [`check_cancel`]). Its form (`POST`, CSRF-checked, operator only, a note required)
//! carries the signed plan ([`super::plan`]): exactly the listed intents, each with the
//! state and attempt count the dry run saw. The apply step refuses an unsigned or tampered
//! plan whole, applies each intent once, skips (and reports) one that changed since the dry
//! run, and sends each change through the same store operation as the API and the CLI,
//! which checks again inside its transaction and writes the audit entry. A redispatch that
//! may act twice (the resend rule, [`crate::action::resend`]) needs the
//! `confirm_may_act_twice` box ticked, with the reason shown.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::Utc;
use maud::{html, Markup, PreEscaped};

use super::filter::{all, one, pairs, IntentFilterForm, PAGE};
use super::handlers::error_page;
use super::html::{esc, layout, notice};
use super::plan::{sign_line, verify, PlannedLine};
use super::{page, pages, redirect, session, Session};
use crate::admin::ops::{required_note, resolve, ResolveRequest};
use crate::admin::{AdminContext, ApiError};
use crate::store::{
    check_cancel, redispatch_route, resend_risk_of, Cancellation, IntentRow, Redispatch,
    RedispatchRoute, ResolutionKind, ReviewError, CHANGED_SINCE_DRY_RUN,
};

/// The change a bulk run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Redispatch,
    Cancel,
}

impl Op {
    fn parse(value: &str) -> Result<Op, ApiError> {
        match value {
            "redispatch" => Ok(Op::Redispatch),
            "cancel" => Ok(Op::Cancel),
            _ => Err(ApiError::invalid("op", "must be redispatch or cancel")),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Op::Redispatch => "redispatch",
            Op::Cancel => "cancel",
        }
    }
}

/// One listed intent and what the run does to it.
struct Line {
    id: i64,
    /// None: not found in the caller's tenants.
    intent: Option<IntentRow>,
    /// What changes, or why nothing does.
    plan: Result<&'static str, String>,
    /// The attempt count the confirmed dry run saw (None: this is the dry run).
    seen_attempt_count: Option<i32>,
}

/// What `op` does to `intent`, by the store's rules.
fn plan(op: Op, intent: &IntentRow) -> Result<&'static str, String> {
    let checked = match op {
        Op::Redispatch => redispatch_route(intent).map(|route| match route {
            RedispatchRoute::Failed => "failed → pending (same idempotency key, new retry budget)",
            RedispatchRoute::Reconciliation => {
                "unknown → pending (its reconciliation item is resolved as redispatch)"
            }
        }),
        Op::Cancel => check_cancel(intent.state.as_str(), intent.ambiguous_attempts)
            .map(|()| "pending → cancelled"),
    };
    checked.map_err(|e| e.to_string())
}

/// The listed lines of a dry run: the ticked ids (each once), or the intents matching
/// the filter.
async fn lines(
    ctx: &AdminContext,
    s: &Session,
    op: Op,
    pairs: &[(String, String)],
) -> Result<(Vec<Line>, bool), ApiError> {
    let mut ids = all(pairs, "id")
        .into_iter()
        .map(|v| {
            v.trim()
                .parse::<i64>()
                .map_err(|_| ApiError::invalid("id", "must be an intent number"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut seen = std::collections::BTreeSet::new();
    ids.retain(|id| seen.insert(*id));
    if ids.len() > PAGE as usize {
        return Err(ApiError::invalid(
            "id",
            format!("at most {PAGE} intents per run"),
        ));
    }
    if ids.is_empty() {
        let search = IntentFilterForm::from_pairs(pairs).search(&s.caller, None, PAGE)?;
        let rows = ctx.store.search_intents(&search).await?;
        let lines = rows
            .into_iter()
            .map(|r| Line {
                id: r.id,
                plan: plan(op, &r),
                intent: Some(r),
                seen_attempt_count: None,
            })
            .collect();
        return Ok((lines, false));
    }
    let mut lines = Vec::new();
    for id in ids {
        let intent = scoped_intent(ctx, s, id).await?;
        let plan = match &intent {
            Some(i) => plan(op, i),
            None => Err("not found".to_owned()),
        };
        lines.push(Line {
            id,
            intent,
            plan,
            seen_attempt_count: None,
        });
    }
    Ok((lines, true))
}

/// Intent `id` if it is inside the caller's tenants.
async fn scoped_intent(
    ctx: &AdminContext,
    s: &Session,
    id: i64,
) -> Result<Option<IntentRow>, ApiError> {
    Ok(ctx
        .store
        .get_intent(id)
        .await?
        .filter(|i| s.caller.scope.allows(&i.tenant)))
}

/// The lines of a confirmed plan, read again now: a line whose intent changed since the
/// dry run is skipped with [`CHANGED_SINCE_DRY_RUN`].
async fn planned_lines(
    ctx: &AdminContext,
    s: &Session,
    op: Op,
    planned: &[PlannedLine],
) -> Result<Vec<Line>, ApiError> {
    let mut lines = Vec::with_capacity(planned.len());
    for p in planned {
        let intent = scoped_intent(ctx, s, p.id).await?;
        let plan = match &intent {
            None => Err("not found".to_owned()),
            Some(i) if !p.matches(i) => Err(CHANGED_SINCE_DRY_RUN.to_owned()),
            Some(i) => plan(op, i),
        };
        lines.push(Line {
            id: p.id,
            intent,
            plan,
            seen_attempt_count: Some(p.attempt_count),
        });
    }
    Ok(lines)
}

/// The changing lines whose redispatch may make the provider act twice, with the resend
/// rule's reason for each: `(intent id, action, reason)`.
fn twice_risk(ctx: &AdminContext, op: Op, lines: &[Line]) -> Vec<(i64, String, String)> {
    if op != Op::Redispatch {
        return Vec::new();
    }
    let policies = ctx.resend_policies();
    let now = Utc::now();
    lines
        .iter()
        .filter(|l| l.plan.is_ok())
        .filter_map(|l| l.intent.as_ref())
        .filter_map(|i| {
            resend_risk_of(&policies, i, now).map(|r| (i.id, i.action.clone(), r.explain()))
        })
        .collect()
}

/// `GET /review/intents/bulk`: the dry run.
pub(super) async fn dry_run(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return redirect("/review", None);
    };
    let pairs = pairs(query.as_deref().unwrap_or_default());
    let prepared = match s
        .caller
        .require_operator()
        .and_then(|()| Op::parse(one(&pairs, "op")))
    {
        Ok(op) => lines(&ctx, &s, op, &pairs).await.map(|l| (op, l)),
        Err(e) => Err(e),
    };
    match prepared {
        Ok((op, (lines, selected))) => {
            let html = render_dry_run(&ctx, &s, op, &lines, selected, None, "");
            page(StatusCode::OK, html)
        }
        Err(e) => error_page(Some(&s), &e),
    }
}

fn line_rows(lines: &[Line], results: Option<&[Result<&'static str, String>]>) -> Markup {
    html! {
        table id="plan" {
            thead { tr { th { "Intent" } th { "Tenant" } th { "Action" } th { "Operation id" } th { "State" } th { @if results.is_some() { "Result" } @else { "Will" } } } }
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

fn render_dry_run(
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
        })
        .collect();
    let risky = twice_risk(ctx, op, lines);
    let plan_at = Utc::now().timestamp();
    let signed: Vec<String> = changing
        .iter()
        .filter_map(|l| l.intent.as_ref())
        .map(|i| sign_line(ctx, s, op.as_str(), plan_at, i))
        .collect();
    let body = html! {
        h1 { "Dry run: " (op.as_str()) }
        @if let Some(e) = error { (PreEscaped(notice("err", &esc(e)))) }
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
        p { a href="/review/intents" { "← Back to the intents" } }
    };
    layout("Dry run", Some(&s.caller), &body.into_string())
}

/// `POST /review/intents/bulk`: applies the change to exactly the signed plan's intents.
pub(super) async fn apply(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return page(
            StatusCode::UNAUTHORIZED,
            pages::login(Some("Your session has ended; sign in again.")),
        );
    };
    let pairs = pairs(&body);
    if !s.csrf_matches(Some(one(&pairs, "csrf"))) {
        let refused = ApiError::Forbidden(
            "This form has expired or did not come from this page. Run the dry run again.".into(),
        );
        return error_page(Some(&s), &refused);
    }
    let checked = s
        .caller
        .require_operator()
        .and_then(|()| Op::parse(one(&pairs, "op")))
        .and_then(|op| {
            if !all(&pairs, "id").is_empty() {
                return Err(ApiError::invalid(
                    "id",
                    "a bulk change applies only the signed plan of its dry run; nothing was \
                     changed. Run the dry run again and confirm from its page.",
                ));
            }
            let lines = all(&pairs, "line");
            let planned = verify(
                &ctx,
                &s,
                op.as_str(),
                one(&pairs, "plan_at"),
                &lines,
                Utc::now().timestamp(),
            )?;
            Ok((op, planned))
        });
    let (op, planned) = match checked {
        Ok(checked) => checked,
        Err(e) => return error_page(Some(&s), &e),
    };
    let lines = match planned_lines(&ctx, &s, op, &planned).await {
        Ok(l) => l,
        Err(e) => return error_page(Some(&s), &e),
    };
    let note = one(&pairs, "note");
    let confirmed = one(&pairs, "confirm_may_act_twice") == "yes";
    let refusal = match required_note(Some(note)) {
        Err(e) => Some(e.to_string()),
        Ok(_) if !confirmed && !twice_risk(&ctx, op, &lines).is_empty() => Some(
            "Tick the confirmation: a redispatch listed below may act twice when sent again. \
             Nothing was changed."
                .to_owned(),
        ),
        Ok(_) => None,
    };
    if let Some(message) = refusal {
        let html = render_dry_run(&ctx, &s, op, &lines, true, Some(&message), note);
        return page(StatusCode::BAD_REQUEST, html);
    }
    let mut results = Vec::with_capacity(lines.len());
    for line in &lines {
        results.push(match (&line.intent, &line.plan) {
            (Some(intent), Ok(_)) => {
                let change = Change {
                    op,
                    note,
                    confirmed,
                    seen_attempt_count: line.seen_attempt_count,
                };
                apply_one(&ctx, &s, intent, &change).await
            }
            (_, Err(why)) => Err(why.clone()),
            (None, Ok(_)) => Err("not found".into()),
        });
    }
    if op == Op::Redispatch {
        ctx.wake_dispatcher.notify_one();
    }
    let done = results.iter().filter(|r| r.is_ok()).count();
    let body = html! {
        h1 { "Done: " (op.as_str()) }
        (PreEscaped(notice(if done == lines.len() { "ok" } else { "warn" }, &format!("{done} of {} intent(s) changed; each change is in the audit log.", lines.len()))))
        (line_rows(&lines, Some(&results)))
        p { a href="/review/intents" { "← Back to the intents" } " · " a href="/review/audit" { "Audit log" } }
    };
    page(
        StatusCode::OK,
        layout("Bulk change", Some(&s.caller), &body.into_string()),
    )
}

/// What the person confirmed for every line of a run.
struct Change<'a> {
    op: Op,
    note: &'a str,
    /// `confirm_may_act_twice` was ticked.
    confirmed: bool,
    /// The line's attempt count at the dry run.
    seen_attempt_count: Option<i32>,
}

/// One change through the store's own operation (which checks the rules again on the row
/// it changes and writes the audit entry).
async fn apply_one(
    ctx: &AdminContext,
    s: &Session,
    intent: &IntentRow,
    change: &Change<'_>,
) -> Result<&'static str, String> {
    let now = Utc::now();
    let outcome: Result<&'static str, ApiError> = match change.op {
        Op::Cancel => ctx
            .store
            .cancel_intent(&Cancellation {
                intent_id: intent.id,
                scope: s.caller.scope.clone(),
                actor: s.caller.name.clone(),
                note: change.note.to_owned(),
                now,
                seen_attempt_count: change.seen_attempt_count,
            })
            .await
            .map(|_| "cancelled")
            .map_err(ApiError::from),
        Op::Redispatch => match redispatch_route(intent).map_err(ApiError::from) {
            Ok(RedispatchRoute::Failed) => ctx
                .store
                .redispatch_failed(&Redispatch {
                    intent_id: intent.id,
                    scope: s.caller.scope.clone(),
                    actor: s.caller.name.clone(),
                    note: change.note.to_owned(),
                    now,
                    resend: ctx.resend_approval(change.confirmed),
                    seen_attempt_count: change.seen_attempt_count,
                })
                .await
                .map(|_| "redispatched")
                .map_err(ApiError::from),
            Ok(RedispatchRoute::Reconciliation) => redispatch_unknown(ctx, s, intent, change)
                .await
                .map(|()| "redispatched"),
            Err(e) => Err(e),
        },
    };
    outcome.map_err(|e| {
        e.log();
        e.to_string()
    })
}

/// Resolves the open reconciliation item of an unknown intent as `redispatch`.
async fn redispatch_unknown(
    ctx: &AdminContext,
    s: &Session,
    intent: &IntentRow,
    change: &Change<'_>,
) -> Result<(), ApiError> {
    let items = ctx.store.reconciliation_for_intent(intent.id).await?;
    let open = items
        .iter()
        .find(|i| i.resolved_at.is_none())
        .ok_or(ApiError::from(ReviewError::WrongState {
            state: intent.state.as_str().to_owned(),
            what: "it has no open reconciliation item",
        }))?;
    let request = ResolveRequest {
        kind: ResolutionKind::Redispatch,
        note: change.note.to_owned(),
        confirmed_may_act_twice: change.confirmed,
        seen_attempt_count: change.seen_attempt_count,
    };
    resolve(ctx, &s.caller, open.id, request).await.map(|_| ())
}
