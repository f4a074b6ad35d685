//! What the demo prints after a scene: the outbox rows it touched (as the database holds
//! them) and the effects the provider recorded for them, so the reader sees records, not
//! only responses.

use super::{Demo, DemoError};
use crate::intent::IntentId;

impl Demo<'_> {
    /// Prints the outbox rows `ids` and, for each, the provider's effects: those recorded
    /// under the row's key and the one its provider reference names.
    pub(super) async fn print_records(&mut self, ids: &[IntentId]) -> Result<(), DemoError> {
        self.n.say("outbox rows:")?;
        let mut rows = Vec::new();
        for id in ids {
            let row = self.intent(*id).await?;
            self.n.say(format!(
                "  #{:<3} tenant={:<7} operation={:<22} state={:<10} attempts={} provider_ref={}",
                row.id,
                row.tenant,
                row.operation_id,
                row.state.as_str(),
                row.attempt_count,
                row.provider_ref.as_deref().unwrap_or("-"),
            ))?;
            self.n
                .say(format!("        idempotency_key={}", row.idempotency_key))?;
            rows.push(row);
        }
        self.n.say("provider effects:")?;
        let effects = self.provider.effects();
        let mut shown = Vec::new();
        for row in &rows {
            let matching = effects.iter().filter(|e| {
                e.key.as_deref() == Some(row.idempotency_key.as_str())
                    || row.provider_ref.as_deref() == Some(e.reference.as_str())
            });
            for effect in matching {
                if shown.contains(&effect.reference) {
                    continue;
                }
                shown.push(effect.reference.clone());
                let body = String::from_utf8_lossy(&effect.body);
                self.n.say(format!(
                    "  {} {} key={} body={body}",
                    effect.reference,
                    effect.path,
                    effect.key.as_deref().unwrap_or("(none)"),
                ))?;
            }
        }
        if shown.is_empty() {
            self.n.say("  (none)")?;
        }
        Ok(())
    }
}
