//! The signed plan of a bulk change: the dry run's form carries one `line` per intent it
//! listed, `id:state:attempt_count:risk:mac` (`risk` is `twice` when the page showed that
//! resending it may act twice, else `once`), and one `plan_at` (when the dry run ran, Unix
//! seconds). The MAC is an HMAC-SHA256 under the per-process review key over the session's
//! CSRF value, the change (`redispatch` or `cancel`), `plan_at` and the line, so a line
//! cannot be edited, moved to another token (the CSRF value is derived from the token, so a
//! new session of the same token keeps it valid) or tenant's operator, reused for another
//! change, or kept past [`PLAN_SECONDS`] (and a restart invalidates every plan). The apply
//! step accepts only such lines, drops repeated ids, and applies a line only while its
//! intent is still in the state and at the attempt count the dry run showed; the
//! may-act-twice confirmation covers only the lines signed `twice`.

use std::collections::BTreeSet;

use subtle::ConstantTimeEq;

use super::filter::PAGE;
use super::{review_mac, AdminContext, Session};
use crate::admin::ApiError;
use crate::intent::{IntentId, IntentState};
use crate::store::IntentRow;

/// How long a dry run's plan may be applied, in seconds.
pub(super) const PLAN_SECONDS: i64 = 3600;

/// One verified line: the intent as the dry run saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PlannedLine {
    /// The intent.
    pub id: IntentId,
    /// Its state at the dry run.
    pub state: IntentState,
    /// Its attempt count at the dry run.
    pub attempt_count: i32,
    /// The dry run showed that resending it may act twice.
    pub shown_may_act_twice: bool,
}

impl PlannedLine {
    /// Whether `intent` is still as the dry run saw it.
    pub fn matches(&self, intent: &IntentRow) -> bool {
        intent.state == self.state && intent.attempt_count == self.attempt_count
    }
}

fn mac(ctx: &AdminContext, s: &Session, op: &str, plan_at: i64, unsigned: &str) -> String {
    let plan_at = plan_at.to_string();
    review_mac(
        ctx,
        b"outboxd.review.bulk-plan.v1",
        &[
            s.csrf.as_bytes(),
            op.as_bytes(),
            plan_at.as_bytes(),
            unsigned.as_bytes(),
        ],
    )
}

/// The signed `line` value for `intent` in a dry run of `op` made at `plan_at`.
pub(super) fn sign_line(
    ctx: &AdminContext,
    s: &Session,
    op: &str,
    plan_at: i64,
    intent: &IntentRow,
    shown_may_act_twice: bool,
) -> String {
    let unsigned = format!(
        "{}:{}:{}:{}",
        intent.id,
        intent.state.as_str(),
        intent.attempt_count,
        if shown_may_act_twice { "twice" } else { "once" }
    );
    let mac = mac(ctx, s, op, plan_at, &unsigned);
    format!("{unsigned}:{mac}")
}

fn refused(why: &str) -> ApiError {
    ApiError::invalid(
        "line",
        format!("{why}; nothing was changed. Run the dry run again and confirm from its page."),
    )
}

/// Verifies every line of a posted plan (all or nothing) and drops repeated ids, keeping
/// the first. Refuses (400, naming `line`) an unsigned, tampered or expired plan.
pub(super) fn verify(
    ctx: &AdminContext,
    s: &Session,
    op: &str,
    plan_at: &str,
    lines: &[&str],
    now: i64,
) -> Result<Vec<PlannedLine>, ApiError> {
    if lines.is_empty() {
        return Err(refused("the form lists no signed plan lines"));
    }
    let plan_at: i64 = plan_at
        .trim()
        .parse()
        .map_err(|_| refused("the plan has no valid plan_at"))?;
    // Saturating: plan_at is whatever the client sent until its MAC is checked.
    if plan_at > now.saturating_add(60) || now.saturating_sub(plan_at) > PLAN_SECONDS {
        return Err(refused("this dry run is too old to apply"));
    }
    if lines.len() > 2 * PAGE as usize {
        return Err(refused("the form lists more lines than a dry run signs"));
    }
    let mut seen = BTreeSet::new();
    let mut planned = Vec::new();
    for line in lines {
        let (unsigned, given) = line
            .rsplit_once(':')
            .ok_or_else(|| refused("a plan line is not signed"))?;
        let expected = mac(ctx, s, op, plan_at, unsigned);
        if !(given.len() == expected.len()
            && bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
        {
            return Err(refused("a plan line does not match its signature"));
        }
        let parsed = parse_unsigned(unsigned).ok_or_else(|| refused("a plan line is malformed"))?;
        if seen.insert(parsed.id) {
            planned.push(parsed);
        }
    }
    Ok(planned)
}

fn parse_unsigned(unsigned: &str) -> Option<PlannedLine> {
    let mut parts = unsigned.split(':');
    let id = parts.next()?.parse().ok()?;
    let state = crate::store::parse_state(parts.next()?).ok()?;
    let attempt_count = parts.next()?.parse().ok()?;
    let shown_may_act_twice = match parts.next()? {
        "twice" => true,
        "once" => false,
        _ => return None,
    };
    parts.next().is_none().then_some(PlannedLine {
        id,
        state,
        attempt_count,
        shown_may_act_twice,
    })
}
