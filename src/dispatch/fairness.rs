//! Fair share between tenants: how the next claim divides its intents among tenants.
//!
//! The rule, in one place (backends only bind its [`FairShare`]):
//!
//! * **In turn.** A claim visits the tenants that have pending intents in name order,
//!   starting with the tenant after the one the previous claim ended on and wrapping
//!   around. So a tenant with one new intent is reached by the next claim at the latest,
//!   however large another tenant's backlog is.
//! * **A share each.** Each visited tenant gives at most `per_tenant` of its due intents
//!   (oldest due first, ordering chains respected) before the claim moves on. `per_tenant`
//!   is the claim's limit divided by the number of tenants *crowded* in the previous two
//!   claims (a tenant is crowded when it gave its full share, or was cut off by the
//!   limit): one busy tenant alone gets the whole claim; two busy tenants get half each
//!   from their second claim on; a tenant with little to do takes what it has and is not
//!   counted.
//!
//! Within a tenant nothing changes: intents are claimed oldest due first and an ordering
//! chain's next intent waits for the previous one. Leases and fencing are untouched.
//!
//! Pure state, no I/O: [`TenantTurns::share`] before a claim, [`TenantTurns::advance`]
//! with what it claimed.

use std::collections::BTreeMap;

use crate::store::{ClaimedIntent, FairShare};

/// Where the claims of one dispatcher (or one provider's lane) are in the tenants' turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantTurns {
    /// The tenant the previous claim ended on.
    after: Option<String>,
    /// The tenants crowded in the previous claim and in the one before.
    crowded: [Vec<String>; 2],
}

impl TenantTurns {
    /// A fresh rotation (the first claim starts with the first tenant).
    pub fn new() -> Self {
        Self::default()
    }

    /// How the next claim of at most `limit` intents is shared.
    pub fn share(&self, limit: u32) -> FairShare {
        let limit = limit.max(1);
        let mut crowded: Vec<&String> = self.crowded.iter().flatten().collect();
        crowded.sort();
        crowded.dedup();
        let crowded = u32::try_from(crowded.len()).unwrap_or(u32::MAX).max(1);
        FairShare {
            after_tenant: self.after.clone(),
            per_tenant: limit.div_ceil(crowded).max(1),
        }
    }

    /// Moves on past a claim made with `share` and `limit` that returned `claimed`.
    pub fn advance(&mut self, share: &FairShare, limit: u32, claimed: &[ClaimedIntent]) {
        if claimed.is_empty() {
            // Nothing due: nobody is crowded any more.
            self.crowded = Default::default();
            return;
        }
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for intent in claimed {
            *counts.entry(intent.tenant.as_str()).or_default() += 1;
        }
        // The visiting order: tenants after the previous end first, then from the start.
        let turn = |tenant: &str| {
            let wrapped = share.after_tenant.as_deref().is_some_and(|a| tenant <= a);
            (wrapped, tenant.to_owned())
        };
        let last = counts
            .keys()
            .map(|t| turn(t))
            .max()
            .map(|(_, t)| t)
            .expect("claimed is not empty");
        let full = claimed.len() >= limit as usize;
        let crowded = counts
            .iter()
            .filter(|(tenant, n)| **n >= share.per_tenant || (full && **tenant == last))
            .map(|(tenant, _)| (*tenant).to_owned())
            .collect();
        self.crowded = [std::mem::take(&mut self.crowded[1]), crowded];
        self.after = Some(last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(tenants: &[&str]) -> Vec<ClaimedIntent> {
        let now = chrono::Utc::now();
        tenants
            .iter()
            .enumerate()
            .map(|(i, t)| ClaimedIntent {
                id: i as i64,
                tenant: (*t).to_owned(),
                operation_id: format!("op-{i}"),
                action: "a".to_owned(),
                payload: serde_json::json!({}),
                payload_version: 1,
                idempotency_key: "k".to_owned(),
                attempt_count: 1,
                ambiguous_attempts: 0,
                fencing_token: 1,
                first_sent_at: None,
                created_at: now,
                deadline_at: None,
                budget_attempt_base: 0,
                budget_started_at: None,
                resend_confirmed_attempt: None,
                next_attempt_at: now,
                lease_expires_at: now,
                claimed_at: now,
            })
            .collect()
    }

    #[test]
    fn the_first_claim_starts_with_the_first_tenant_uncapped() {
        let turns = TenantTurns::new();
        assert_eq!(turns.share(10), FairShare::uncapped(10));
    }

    #[test]
    fn the_next_claim_starts_after_the_tenant_the_last_one_ended_on() {
        let mut turns = TenantTurns::new();
        let share = turns.share(4);
        turns.advance(&share, 4, &claimed(&["a", "a", "a", "a"]));
        let next = turns.share(4);
        assert_eq!(next.after_tenant.as_deref(), Some("a"));
        assert_eq!(
            next.per_tenant, 4,
            "one crowded tenant keeps the whole claim"
        );
        // b (after a) then the wrap back to a: the claim ended on a, not on b.
        turns.advance(&next, 4, &claimed(&["b", "a", "a", "a"]));
        assert_eq!(turns.share(4).after_tenant.as_deref(), Some("a"));
        assert_eq!(
            turns.share(4).per_tenant,
            4,
            "b had one intent: not crowded"
        );
    }

    #[test]
    fn two_crowded_tenants_get_half_each() {
        let mut turns = TenantTurns::new();
        let share = FairShare {
            after_tenant: None,
            per_tenant: 2,
        };
        // a gave its whole share, b was cut off by the limit.
        turns.advance(&share, 3, &claimed(&["a", "a", "b"]));
        let share = turns.share(4);
        assert_eq!(share.per_tenant, 2);
        assert_eq!(share.after_tenant.as_deref(), Some("b"));
        turns.advance(&share, 4, &claimed(&["c", "c", "a", "a"]));
        let share = turns.share(4);
        assert_eq!(
            (share.after_tenant.as_deref(), share.per_tenant),
            (Some("a"), 2)
        );
    }

    #[test]
    fn a_busy_tenant_met_in_the_previous_claim_still_counts() {
        let mut turns = TenantTurns::new();
        let share = turns.share(4);
        turns.advance(&share, 4, &claimed(&["a", "a", "a", "a"]));
        let share = turns.share(4);
        turns.advance(&share, 4, &claimed(&["b", "b", "b", "b"]));
        let share = turns.share(4);
        assert_eq!(
            (share.after_tenant.as_deref(), share.per_tenant),
            (Some("b"), 2)
        );
    }

    #[test]
    fn an_empty_claim_keeps_the_turn_and_drops_the_caps() {
        let mut turns = TenantTurns::new();
        let share = FairShare {
            after_tenant: None,
            per_tenant: 1,
        };
        turns.advance(&share, 2, &claimed(&["a", "b"]));
        assert_eq!(turns.share(2).per_tenant, 1);
        let share = turns.share(2);
        turns.advance(&share, 2, &[]);
        assert_eq!(turns.share(2).per_tenant, 2);
        assert_eq!(turns.share(2).after_tenant.as_deref(), Some("b"));
    }
}
