//! Scene 4: the same idempotency key from another tenant. Tenant `globex` supplies, as its
//! own custom key, the key acme's delivered refund used (anyone can read it off a receipt
//! or compute a default key). The tenants must end with separate intents and separate
//! provider effects: nothing one tenant sends may be answered with another's effect.

use super::{Demo, DemoError, TENANT};
use crate::intent::IntentId;
use crate::NewIntent;

/// The second tenant.
const OTHER_TENANT: &str = "globex";
const OPERATION: &str = "globex-refund-77";

/// Tenant B enqueues with tenant A's key; prints both intents and the provider's effects.
pub(super) async fn key_from_another_tenant(
    d: &mut Demo<'_>,
    acme_intent: IntentId,
) -> Result<(), DemoError> {
    d.n.chapter("4. The same idempotency key from another tenant")?;
    let acme = d.intent(acme_intent).await?;
    d.n.say(format!(
        "tenant {OTHER_TENANT} enqueues {OPERATION} with the same arguments and, as its own key, the key of {TENANT}'s {}:",
        acme.operation_id
    ))?;
    d.n.say(format!("  idempotency_key = {}", acme.idempotency_key))?;
    let intent = NewIntent::new(
        OTHER_TENANT,
        OPERATION,
        "issue_refund",
        acme.payload.to_value(),
    )
    .with_idempotency_key(acme.idempotency_key.clone());
    let receipt = match d.enqueue(intent).await {
        Ok(receipt) => receipt,
        Err(e) => {
            d.n.say(format!("  refused at enqueue: {e}"))?;
            d.n.say("no provider effect is shared between tenants: the key cannot be taken")?;
            return d.print_records(&[acme_intent]).await;
        }
    };
    d.n.say(format!(
        "  intent #{} for {OTHER_TENANT} (replayed: {})",
        receipt.intent_id, receipt.replayed
    ))?;
    let row = d.step_and_tell(receipt.intent_id).await?;
    d.print_records(&[acme_intent, receipt.intent_id]).await?;
    let acme = d.intent(acme_intent).await?;
    let shared = receipt.intent_id == acme_intent
        || (row.provider_ref.is_some() && row.provider_ref == acme.provider_ref);
    if shared {
        let what = format!(
            "{OTHER_TENANT}'s intent #{} was answered with {TENANT}'s provider effect {}",
            row.id,
            row.provider_ref.as_deref().unwrap_or("-")
        );
        d.n.say(format!("VIOLATION: {what}"))?;
        d.violations.push(what);
    } else {
        d.n.say(format!(
            "two tenants, two intents, two effects ({} and {}): no provider effect is shared between tenants",
            acme.provider_ref.as_deref().unwrap_or("-"),
            row.provider_ref.as_deref().unwrap_or("-")
        ))?;
    }
    Ok(())
}
