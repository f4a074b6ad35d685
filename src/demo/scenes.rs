//! Scenes 1, 3 and 5 of the demo (2 is `concurrency`, 4 is `tenants`), each driving the real dispatcher one step at a time and
//! saying what the outbox and the provider recorded after every step.

use serde_json::json;

use super::narrate::short_key;
use super::{resolve, Demo, DemoError, TENANT};
use crate::fake_provider::{Fault, FaultRule, Matcher};
use crate::intent::{IntentId, IntentState};
use crate::store::IntentRow;
use crate::{EnqueueError, NewIntent};

const REFUND: &str = "issue_refund";
const NOTIFY: &str = "send_notification";

fn refund(op: &str, amount: u32) -> NewIntent {
    NewIntent::new(
        TENANT,
        op,
        REFUND,
        json!({"order_id": 1001, "amount": amount, "currency": "EUR"}),
    )
}

impl Demo<'_> {
    pub(super) async fn intent(&self, id: IntentId) -> Result<IntentRow, DemoError> {
        self.store
            .get_intent(id)
            .await?
            .ok_or_else(|| DemoError::OffScript(format!("intent #{id} disappeared")))
    }

    /// Runs one step and tells what happened to intent `id`: its latest attempt, its
    /// state, and what the provider holds for its key.
    pub(super) async fn step_and_tell(&mut self, id: IntentId) -> Result<IntentRow, DemoError> {
        self.step().await?;
        let attempts = self.store.list_attempts(id).await?;
        if let Some(a) = attempts.last() {
            let class = a.class.map_or("open", |c| c.as_str());
            let status = a
                .http_status
                .map(|s| format!(" (HTTP {s})"))
                .unwrap_or_default();
            let error = a
                .error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            self.n.say(format!(
                "attempt {} → {class}{status}{error}",
                a.attempt_number
            ))?;
        }
        let row = self.intent(id).await?;
        let key = row.idempotency_key.as_str();
        self.n.say(format!(
            "intent #{id} is now {}; the provider has seen {} request(s) and applied {} effect(s) with its key",
            row.state,
            self.provider.request_count_for_key(key),
            self.provider.effects_for_key(key).len()
        ))?;
        Ok(row)
    }

    pub(super) fn expect_state(row: &IntentRow, state: IntentState) -> Result<(), DemoError> {
        if row.state == state {
            Ok(())
        } else {
            Err(DemoError::OffScript(format!(
                "intent #{} is {}, expected {state}",
                row.id, row.state
            )))
        }
    }
}

/// Scene 1: the provider applies a keyed refund and the response is lost; the retry
/// carries the same key and the provider answers from its record.
/// Returns the refund's intent id (scene 4 reuses its key from another tenant).
pub(super) async fn lost_response(d: &mut Demo<'_>) -> Result<IntentId, DemoError> {
    d.n.chapter("1. A refund whose response is lost after the provider applied it")?;
    let receipt = d.enqueue(refund("refund-order-1001", 1250)).await?;
    let key = receipt.idempotency_key.clone();
    d.n.say(format!(
        "enqueued intent #{} (tenant {TENANT}, operation refund-order-1001, {REFUND}, idempotent_with_key)",
        receipt.intent_id
    ))?;
    d.n.say(format!(
        "downstream idempotency key, fixed at enqueue: {}",
        short_key(&key)
    ))?;
    d.provider.push_fault(FaultRule {
        matcher: Matcher::Key(key.clone()),
        fault: Fault::LoseResponseAfterApply,
        times: 1,
    });
    d.n.say("the provider will apply the refund, then close the connection without answering")?;
    let row = d.step_and_tell(receipt.intent_id).await?;
    Demo::expect_state(&row, IntentState::Pending)?;
    d.n.say("ambiguous, but the provider deduplicates by our key and the key is inside its 24h retention: retry with the SAME key")?;
    let row = d.step_and_tell(receipt.intent_id).await?;
    Demo::expect_state(&row, IntentState::Delivered)?;
    d.n.say(format!(
        "delivered with provider reference {}: two requests, one refund",
        row.provider_ref.as_deref().unwrap_or("-")
    ))?;
    d.print_records(&[receipt.intent_id]).await?;
    Ok(receipt.intent_id)
}

/// Scene 2: the operation id is the identity; changed arguments conflict, the same
/// arguments replay, a new operation id is a new intent.
pub(super) async fn conflict_and_replay(d: &mut Demo<'_>) -> Result<(), DemoError> {
    d.n.chapter("3. The same operation id again: a changed payload, a replay, a new id")?;
    d.n.say("enqueue refund-order-1001 again with a changed amount (1250 → 9999):")?;
    match d.enqueue(refund("refund-order-1001", 9999)).await {
        Err(e @ EnqueueError::Conflict { .. }) => d.n.say(format!("  error: {e}"))?,
        other => {
            return Err(DemoError::OffScript(format!(
                "expected a conflict, got {other:?}"
            )))
        }
    }
    d.n.say("nothing changed: no new intent, no new request to the provider")?;
    d.n.say("enqueue refund-order-1001 again with the original arguments:")?;
    let replay = d.enqueue(refund("refund-order-1001", 1250)).await?;
    let receipt = serde_json::to_string(&replay).unwrap_or_default();
    d.n.say(format!("  receipt: {receipt}"))?;
    if !replay.replayed {
        return Err(DemoError::OffScript(
            "the same arguments were not a replay".into(),
        ));
    }
    d.n.say(format!(
        "replayed: {} — a receipt of what happened to the request (state {}), not a second refund",
        replay.replayed, replay.state
    ))?;
    d.n.say("a NEW operation id with identical arguments is a legitimate second refund:")?;
    let second = d.enqueue(refund("refund-order-1001-again", 1250)).await?;
    d.n.say(format!(
        "  intent #{} (replayed: {}), its own key {}",
        second.intent_id,
        second.replayed,
        short_key(&second.idempotency_key)
    ))?;
    let row = d.step_and_tell(second.intent_id).await?;
    Demo::expect_state(&row, IntentState::Delivered)?;
    d.print_records(&[replay.intent_id, second.intent_id]).await
}

/// Scene 3: a notification without deduplication times out after the provider applied
/// it; outboxd does not resend it, opens a reconciliation item, and a person resolves it.
pub(super) async fn unknown_outcome(d: &mut Demo<'_>) -> Result<(), DemoError> {
    d.n.chapter("5. A notification (not_idempotent) that times out after it was sent")?;
    let intent = NewIntent::new(
        TENANT,
        "notify-order-1001",
        NOTIFY,
        json!({"order_id": 1001, "template": "refund_issued"}),
    );
    let receipt = d.enqueue(intent).await?;
    let key = receipt.idempotency_key.clone();
    d.n.say(format!(
        "enqueued intent #{} ({NOTIFY}): the provider has no deduplication for it",
        receipt.intent_id
    ))?;
    d.provider.push_fault(FaultRule {
        matcher: Matcher::Key(key.clone()),
        fault: Fault::SleepAfterApply(std::time::Duration::from_millis(1500)),
        times: 1,
    });
    d.n.say("the provider will send it, then stall past the 1s request timeout (waiting…)")?;
    let row = d.step_and_tell(receipt.intent_id).await?;
    Demo::expect_state(&row, IntentState::Unknown)?;
    d.n.say("it may have been sent and resending could notify twice: outboxd does not guess")?;
    let next = d.dispatcher.run_once().await?;
    d.n.say(format!(
        "the next dispatcher step claims {} intent(s): it is never resent automatically",
        next.claimed
    ))?;
    let summary = d.store.status_summary(chrono::Utc::now()).await?;
    d.n.say(format!(
        "reconciliation backlog: {} open item(s), kept with every attempt for a person or a probe",
        summary.reconciliation_open
    ))?;
    resolve_by_a_person(d, receipt.intent_id, &key).await
}

/// A person looks the notification up at the provider, finds it was sent, and resolves
/// the item as delivered with the provider's reference, saying who, when and why.
async fn resolve_by_a_person(d: &mut Demo<'_>, id: IntentId, key: &str) -> Result<(), DemoError> {
    let reference = d
        .provider
        .effects_for_key(key)
        .first()
        .map(|e| e.reference.clone())
        .ok_or_else(|| DemoError::OffScript("the provider has no effect to find".into()))?;
    let resolution = resolve::Resolution {
        intent_id: id,
        provider_ref: reference.clone(),
        who: "ops-alice".to_owned(),
        at: chrono::Utc::now(),
        why: format!(
            "provider's message log shows notification {reference} sent for order 1001; \
             the timeout hid a success"
        ),
    };
    resolve::resolve_delivered(&d.db, &resolution).await?;
    let row = d.intent(id).await?;
    Demo::expect_state(&row, IntentState::Delivered)?;
    d.n.say(format!(
        "resolved by {} at {} as delivered with reference {reference}",
        resolution.who,
        resolution.at.format("%Y-%m-%d %H:%M:%S UTC")
    ))?;
    d.n.say(format!("  why: {}", resolution.why))?;
    d.print_records(&[id]).await
}
