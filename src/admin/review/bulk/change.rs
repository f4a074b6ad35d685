//! One bulk change to one intent, through the store's own operation: cancel, redispatch a
//! failed intent, or resolve an unknown one's reconciliation item as `redispatch`. The
//! store checks the rules again on the row it changes (state, the dry run's attempt count,
//! the resend rule and its confirmation) and writes the audit entry.

use chrono::Utc;

use super::Op;
use crate::admin::ops::{resolve, ResolveRequest};
use crate::admin::review::Session;
use crate::admin::{AdminContext, ApiError};
use crate::store::{
    redispatch_route, Cancellation, IntentRow, Redispatch, RedispatchRoute, ResolutionKind,
    ReviewError,
};

/// What the person confirmed for every line of a run.
pub(super) struct Change<'a> {
    pub op: Op,
    pub note: &'a str,
    /// `confirm_may_act_twice` was ticked.
    pub confirmed: bool,
    /// The line's attempt count at the dry run.
    pub seen_attempt_count: Option<i32>,
}

/// One change through the store's own operation (which checks the rules again on the row
/// it changes and writes the audit entry).
pub(super) async fn apply_one(
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
        e.message()
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
