//! Fair share between tenants: how the next claim divides its intents among tenants.
//!
//! The rule, in one place (backends only bind its [`FairShare`]):
//!
//! * **In turn.** A claim visits the tenants that have pending intents in name order
//!   (bytewise), starting with the tenant after the one the previous claim ended on and
//!   wrapping around. So a tenant with one new intent is reached by the next claim at the
//!   latest, however large another tenant's backlog is. When the previous claim's limit
//!   cut its last tenant off short of its share, the next claim starts *at* that tenant
//!   instead: otherwise the tenant the limit keeps cutting off would lose its turn claim
//!   after claim.
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

use crate::store::{ClaimedIntent, FairShare, TurnStart};

/// Where the claims of one dispatcher (or one provider's lane) are in the tenants' turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantTurns {
    /// Where the next claim starts (after or at the tenant the previous one ended on).
    start: TurnStart,
    /// The tenants crowded in the previous claim and in the one before.
    crowded: [Vec<String>; 2],
}

impl Default for TenantTurns {
    fn default() -> Self {
        Self {
            start: TurnStart::First,
            crowded: Default::default(),
        }
    }
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
            start: self.start.clone(),
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
        // The visiting order: tenants from the start first, then those after the wrap.
        let last = counts
            .keys()
            .map(|t| (share.is_wrapped(t), *t))
            .max()
            .map(|(_, t)| t.to_owned())
            .expect("claimed is not empty");
        let full = claimed.len() >= limit as usize;
        let cut_short = full && counts[last.as_str()] < share.per_tenant;
        let crowded = counts
            .iter()
            .filter(|(tenant, n)| **n >= share.per_tenant || (full && **tenant == last))
            .map(|(tenant, _)| (*tenant).to_owned())
            .collect();
        self.crowded = [std::mem::take(&mut self.crowded[1]), crowded];
        self.start = if cut_short {
            TurnStart::At(last)
        } else {
            TurnStart::After(last)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};

    fn claimed(tenants: &[&str]) -> Vec<ClaimedIntent> {
        let now = chrono::Utc::now();
        tenants
            .iter()
            .enumerate()
            .map(|(i, t)| ClaimedIntent {
                id: IntentId::new(i as i64),
                tenant: TenantId::parse(*t).unwrap(),
                operation_id: OperationId::parse(format!("op-{i}")).unwrap(),
                action: ActionName::parse("a").unwrap(),
                payload: crate::store::PayloadBody::from_value(&serde_json::json!({})),
                payload_version: 1,
                idempotency_key: IdempotencyKey::parse("k").unwrap(),
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
        assert_eq!(next.start, TurnStart::After("a".into()));
        assert_eq!(
            next.per_tenant, 4,
            "one crowded tenant keeps the whole claim"
        );
        // b (after a) then the wrap back to a: the claim ended on a, not on b, and the
        // limit cut a off at 3 of its 4: the next claim starts at a.
        turns.advance(&next, 4, &claimed(&["b", "a", "a", "a"]));
        assert_eq!(turns.share(4).start, TurnStart::At("a".into()));
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
            start: TurnStart::First,
            per_tenant: 2,
        };
        // a gave its whole share, b was cut off by the limit (short of its share).
        turns.advance(&share, 3, &claimed(&["a", "a", "b"]));
        let share = turns.share(4);
        assert_eq!(share.per_tenant, 2);
        assert_eq!(share.start, TurnStart::At("b".into()));
        turns.advance(&share, 4, &claimed(&["b", "b", "c", "c"]));
        let share = turns.share(4);
        assert_eq!(
            (share.start.clone(), share.per_tenant),
            (TurnStart::After("c".into()), 2)
        );
        turns.advance(&share, 4, &claimed(&["a", "a", "b", "b"]));
        assert_eq!(turns.share(4).start, TurnStart::After("b".into()));
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
            (share.start.clone(), share.per_tenant),
            (TurnStart::After("b".into()), 2)
        );
    }

    /// What a claim of `share` and `limit` takes when every tenant in `tenants` (sorted)
    /// has a large backlog: the store's walk, tenant by tenant.
    fn walk(share: &FairShare, limit: u32, tenants: &[&str]) -> Vec<ClaimedIntent> {
        let (wrapped, first): (Vec<&str>, Vec<&str>) =
            tenants.iter().partition(|t| share.is_wrapped(t));
        let mut taken = Vec::new();
        for tenant in first.into_iter().chain(wrapped) {
            let room = limit as usize - taken.len();
            taken.extend(std::iter::repeat_n(
                tenant,
                room.min(share.per_tenant as usize),
            ));
        }
        claimed(&taken)
    }

    #[test]
    fn a_tenant_cut_off_short_of_its_share_is_not_cut_off_again() {
        let tenants = ["t1", "t2", "t3", "t4", "t5", "t6"];
        let mut turns = TenantTurns::new();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for claim in 0..40 {
            let share = turns.share(16);
            let taken = walk(&share, 16, &tenants);
            turns.advance(&share, 16, &taken);
            // Counted once the share has settled at 16 / 6 crowded tenants = 3.
            if claim >= 10 {
                assert_eq!(share.per_tenant, 3);
                for intent in &taken {
                    *counts.entry(intent.tenant.to_string()).or_default() += 1;
                }
            }
        }
        let least = counts.values().min().copied().unwrap_or(0);
        let most = counts.values().max().copied().unwrap_or(0);
        assert!(
            most - least <= 3,
            "unequal shares over 30 claims: {counts:?}"
        );
    }

    #[test]
    fn an_empty_claim_keeps_the_turn_and_drops_the_caps() {
        let mut turns = TenantTurns::new();
        let share = FairShare {
            start: TurnStart::First,
            per_tenant: 1,
        };
        turns.advance(&share, 2, &claimed(&["a", "b"]));
        assert_eq!(turns.share(2).per_tenant, 1);
        let share = turns.share(2);
        turns.advance(&share, 2, &[]);
        assert_eq!(turns.share(2).per_tenant, 2);
        assert_eq!(turns.share(2).start, TurnStart::After("b".into()));
    }
}
