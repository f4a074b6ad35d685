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
use maud::html;

mod change;
mod view;

use change::{apply_one, Change};
use view::{line_rows, render_dry_run};

use super::filter::{all, one, pairs, IntentFilterForm, PAGE};
use super::handlers::error_page;
use super::html::{layout, notice};
use super::plan::{verify, PlannedLine};
use super::{page, pages, redirect, session, Session};
use crate::admin::ops::required_note;
use crate::admin::{AdminContext, ApiError, Forbidden};
use crate::store::{
    check_cancel, redispatch_route, resend_risk_of, IntentRow, RedispatchRoute,
    CHANGED_SINCE_DRY_RUN,
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
    /// The confirmed dry run showed that resending it may act twice (false: this is the
    /// dry run, or it showed none).
    shown_may_act_twice: bool,
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
                shown_may_act_twice: false,
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
            shown_may_act_twice: false,
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
    let policies = ctx.resend_policies();
    let now = Utc::now();
    let mut lines = Vec::with_capacity(planned.len());
    for p in planned {
        let intent = scoped_intent(ctx, s, p.id).await?;
        let newly_risky = |i: &IntentRow| {
            let risk = (op == Op::Redispatch && !p.shown_may_act_twice)
                .then(|| resend_risk_of(&policies, i, now))
                .flatten();
            risk.map(|r| {
                format!(
                    "{}: it may act twice now; {CHANGED_SINCE_DRY_RUN}",
                    r.explain()
                )
            })
        };
        let plan = match &intent {
            None => Err("not found".to_owned()),
            Some(i) if !p.matches(i) => Err(CHANGED_SINCE_DRY_RUN.to_owned()),
            Some(i) => match newly_risky(i) {
                Some(why) => Err(why),
                None => plan(op, i),
            },
        };
        lines.push(Line {
            id: p.id,
            intent,
            plan,
            seen_attempt_count: Some(p.attempt_count),
            shown_may_act_twice: p.shown_may_act_twice,
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
        return error_page(Some(&s), &Forbidden::StaleBulkForm.into());
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
        Err(e) => Some(e.message()),
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
                // The tick covers only what the dry run showed.
                let change = Change {
                    op,
                    note,
                    confirmed: confirmed && line.shown_may_act_twice,
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
        (notice(if done == lines.len() { "ok" } else { "warn" }, format!("{done} of {} intent(s) changed; each change is in the audit log.", lines.len())))
        (line_rows(&lines, Some(&results)))
        p { a href="/review/intents" { "← Back to the intents" } " · " a href="/review/audit" { "Audit log" } }
    };
    page(StatusCode::OK, layout("Bulk change", Some(&s.caller), body))
}
