//! The lease window: whether a claimed intent's lease still covers a request sent now.
//!
//! A lease expires at `lease_expires_at` by the database's clock, and any replica may then
//! take the intent over and record the attempt as ambiguous. So a request is sent only if
//! it ends, by the request timeout, with [`SEND_MARGIN`] to spare (to record its outcome)
//! before the lease expires. The database's clock is not the local one; the claim returns
//! both the expiry and the database's clock when it ran (`claimed_at`), and the local
//! expiry is counted from the local instant just *before* the claim was issued:
//! `claim_started + (lease_expires_at - claimed_at)`. The database read its clock after
//! that instant, so a slow claim (a wait for a pool connection, for `BEGIN IMMEDIATE`, for
//! a lock) only shortens the usable window, never extends it, and the skew between the
//! clocks does not enter. Pure: no clock is read here.

use std::time::{Duration, Instant};

use crate::store::ClaimedIntent;

pub use crate::config::{shortest_lease, SEND_MARGIN};

/// The local instant by which the lease of `intent` has expired at the latest, for a claim
/// issued at the local instant `claim_started`.
pub fn local_expiry(claim_started: Instant, intent: &ClaimedIntent) -> Instant {
    let left = (intent.lease_expires_at - intent.claimed_at)
        .to_std()
        .unwrap_or(Duration::ZERO);
    claim_started.checked_add(left).unwrap_or(claim_started)
}

/// Why a request with `request_timeout` may not be sent at `now` under a lease that expires
/// at `expiry` (both local instants): less than `request_timeout + SEND_MARGIN` is left.
/// `None`: the lease covers it.
pub fn lease_too_short(expiry: Instant, now: Instant, request_timeout: Duration) -> Option<String> {
    let left = expiry.saturating_duration_since(now);
    let needed = shortest_lease(request_timeout);
    (left < needed).then(|| {
        format!(
            "released unsent: the lease had {} left, less than the request timeout ({}) plus \
             a {} margin (the claim waited for the database)",
            millis(left),
            millis(request_timeout),
            millis(SEND_MARGIN),
        )
    })
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};
    use chrono::{TimeZone, Utc};

    use super::*;

    fn claimed(lease: chrono::Duration, db_skew: chrono::Duration) -> ClaimedIntent {
        let db_now = Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap() + db_skew;
        ClaimedIntent {
            id: IntentId::new(1),
            tenant: TenantId::parse("acme").unwrap(),
            operation_id: OperationId::parse("op").unwrap(),
            action: ActionName::parse("issue_refund").unwrap(),
            payload: crate::store::PayloadBody::from_value(&serde_json::json!({})),
            payload_version: 1,
            idempotency_key: IdempotencyKey::parse("k").unwrap(),
            attempt_count: 1,
            ambiguous_attempts: 0,
            fencing_token: 1,
            first_sent_at: None,
            created_at: db_now,
            deadline_at: None,
            budget_attempt_base: 0,
            budget_started_at: None,
            resend_confirmed_attempt: None,
            next_attempt_at: db_now,
            lease_expires_at: db_now + lease,
            claimed_at: db_now,
        }
    }

    #[test]
    fn local_expiry_counts_from_the_claim_start_whatever_the_database_clock() {
        let start = Instant::now();
        for skew in [-600, 0, 600] {
            let intent = claimed(
                chrono::Duration::seconds(30),
                chrono::Duration::seconds(skew),
            );
            assert_eq!(
                local_expiry(start, &intent),
                start + Duration::from_secs(30)
            );
        }
        // An expiry before the database's own clock reading: nothing left.
        let expired = claimed(chrono::Duration::seconds(-1), chrono::Duration::zero());
        assert_eq!(local_expiry(start, &expired), start);
    }

    #[test]
    fn a_request_is_sent_only_while_the_lease_covers_timeout_and_margin() {
        let start = Instant::now();
        let expiry = start + Duration::from_secs(10);
        let timeout = Duration::from_secs(5);
        assert_eq!(lease_too_short(expiry, start, timeout), None);
        let last_moment = expiry - timeout - SEND_MARGIN;
        assert_eq!(lease_too_short(expiry, last_moment, timeout), None);
        let late = last_moment + Duration::from_millis(1);
        let why = lease_too_short(expiry, late, timeout).expect("refused");
        assert!(why.contains("5999ms left"), "{why}");
        assert!(lease_too_short(expiry, expiry + timeout, timeout).is_some());
    }
}
