//! A claim whose answer does not come within the lease (a connection that stopped
//! answering mid-statement) must not stop the claimer for good, and must not be cancelled
//! either: it may still commit on the server, and rows it claimed and nobody sends would
//! be taken over, once their leases expire, as ambiguous attempts (for a `not_idempotent`
//! action, a reconciliation item for a request that was never sent). So
//! [`Dispatcher::claim`] stops waiting after the lease and lets the claim go on in a task
//! of its own for another lease; whatever its late answer claimed is handed back unsent,
//! fenced by the claim's tokens, retried like any release for up to one more lease.
//! A shutdown does not wait for that task. A claim on the dispatcher's own session (not a
//! pool connection) is dropped with the process; one that ran on the pool holds the pool's
//! close until it ends, up to another lease. Either way, rows such a claim committed and
//! did not hand back are taken over when their leases expire.
//!
//! What this cannot save: a claim that commits and never answers (as after a crash), and
//! one whose rows' lease ran out before its answer came if a takeover reached them first.
//! The rows' lease runs from the server's start of the claim, so an answer that comes
//! after the claimer gave up finds it about spent: the hand-back, sent at once, wins only
//! until the next takeover pass (every `release_expired_every`). It is fenced off
//! otherwise, and the takeover's judgement stands.

use super::dispatcher::{release_retrying, Dispatcher};
use crate::store::{ClaimRequest, ClaimStore, ClaimedIntent, FairShare, Release, StoreError};

/// Why a late claim's intents are handed back.
pub const LATE_CLAIM_REASON: &str =
    "released unsent (the claim answered after the claimer gave up on it)";

impl Dispatcher {
    /// Claims what `request` and `share` allow, waiting at most one lease for the answer
    /// (see the module documentation).
    pub(super) async fn claim(
        &self,
        request: &ClaimRequest,
        share: &FairShare,
    ) -> Result<Vec<ClaimedIntent>, StoreError> {
        let wait = self.settings.lease;
        let (store, req, sh) = (self.store.clone(), request.clone(), share.clone());
        let mut claim = Box::pin(async move { store.claim_due_shared(&req, &sh).await });
        if let Ok(answer) = tokio::time::timeout(wait, &mut claim).await {
            return answer;
        }
        if let Some(m) = &self.metrics {
            m.observe_claim_given_up();
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(wait, claim).await {
                Ok(Ok(late)) if !late.is_empty() => {
                    let until = tokio::time::Instant::now() + wait;
                    hand_back(store.as_ref(), &late, until).await;
                }
                Ok(_) => {}
                Err(_) => {
                    tracing::error!(waited = ?wait * 2, "a claim never answered; if it committed, its intents will be treated as ambiguous attempts when their leases expire")
                }
            }
        });
        Err(StoreError::unanswered("the claim", wait))
    }
}

/// Hands `late` back unsent, retrying failed or unanswered releases until `until`.
async fn hand_back(store: &dyn ClaimStore, late: &[ClaimedIntent], until: tokio::time::Instant) {
    let releases: Vec<Release> = late
        .iter()
        .map(|intent| Release {
            intent_id: intent.id,
            fencing_token: intent.fencing_token,
            reason: LATE_CLAIM_REASON.to_owned(),
        })
        .collect();
    // A failure is logged there, as for any hand-back.
    if release_retrying(store, &releases, until).await.is_ok() {
        tracing::warn!(intents = releases.len(), "a claim answered after the claimer gave up on it; its intents were handed back unsent (any a takeover reached first stay as it judged them)");
    }
}
