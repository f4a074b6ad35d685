//! Table-driven tests for the retry policy: every rule of [`decide`] and the bounds of
//! [`backoff_delay`].

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;
use crate::action::AttemptClass::{self, *};
use crate::action::RetrySafety::{self, *};

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 5,
        initial_backoff: SECOND,
        max_backoff: MINUTE,
        deadline: Duration::from_secs(3600),
        max_retry_after: 10 * MINUTE,
    }
}

fn created_at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap()
}

/// Ten minutes after creation.
fn now() -> DateTime<Utc> {
    created_at() + chrono::Duration::minutes(10)
}

fn ago(duration: Duration) -> DateTime<Utc> {
    now() - chrono::Duration::from_std(duration).unwrap()
}

fn later(duration: Duration) -> DateTime<Utc> {
    now() + chrono::Duration::from_std(duration).unwrap()
}

mod rows;
use rows::{budget_rows, outcome_rows, safety_rows};

#[derive(Debug)]
enum Expect {
    Delivered,
    /// The next attempt lies in `[now + min, now + max]`.
    Retry {
        min: Duration,
        max: Duration,
    },
    Failed(&'static str),
    Unknown(&'static str),
}

struct Row {
    name: &'static str,
    class: AttemptClass,
    safety: RetrySafety,
    attempts_made: u32,
    any_ambiguous_before: bool,
    first_sent_at: Option<DateTime<Utc>>,
    key_retention: Duration,
    now: DateTime<Utc>,
    intent_deadline: Option<DateTime<Utc>>,
    retry_after: Option<RetryAfter>,
    expect: Expect,
}

fn row(name: &'static str, class: AttemptClass, safety: RetrySafety, expect: Expect) -> Row {
    let may_have_reached = matches!(class, Ambiguous | Delivered | Rejected | Retryable);
    Row {
        name,
        class,
        safety,
        attempts_made: 1,
        any_ambiguous_before: false,
        first_sent_at: may_have_reached.then(now),
        key_retention: DAY,
        now: now(),
        intent_deadline: None,
        retry_after: None,
        expect,
    }
}

impl Row {
    fn attempts(mut self, attempts_made: u32) -> Self {
        self.attempts_made = attempts_made;
        self
    }
    fn ambiguous_before(mut self, first_sent_at: DateTime<Utc>) -> Self {
        self.any_ambiguous_before = true;
        self.first_sent_at = Some(first_sent_at);
        self
    }
    fn first_sent(mut self, first_sent_at: Option<DateTime<Utc>>) -> Self {
        self.first_sent_at = first_sent_at;
        self
    }
    fn retention(mut self, key_retention: Duration) -> Self {
        self.key_retention = key_retention;
        self
    }
    fn at(mut self, now: DateTime<Utc>) -> Self {
        self.now = now;
        self
    }
    fn intent_deadline(mut self, deadline: DateTime<Utc>) -> Self {
        self.intent_deadline = Some(deadline);
        self
    }
    fn retry_after(mut self, retry_after: RetryAfter) -> Self {
        self.retry_after = Some(retry_after);
        self
    }
}

fn check(row: &Row, seed: u64) {
    let policy = policy();
    let input = DecisionInput {
        class: row.class,
        retry_safety: row.safety,
        policy: &policy,
        attempts_made: row.attempts_made,
        any_ambiguous_before: row.any_ambiguous_before,
        first_sent_at: row.first_sent_at,
        key_retention: row.key_retention,
        created_at: created_at(),
        intent_deadline: row.intent_deadline,
        retry_after: row.retry_after,
        now: row.now,
    };
    let decision = decide(&input, &mut StdRng::seed_from_u64(seed));
    let name = row.name;
    match (&row.expect, &decision) {
        (Expect::Delivered, Decision::Delivered) => {}
        (Expect::Retry { min, max }, Decision::RetryAt { at, reason }) => {
            let delay = (*at - row.now).to_std().expect("retry is not in the past");
            assert!(
                *min <= delay && delay <= *max,
                "{name}: delay {delay:?}, {reason}"
            );
        }
        (Expect::Failed(fragment), Decision::Failed { reason })
        | (Expect::Unknown(fragment), Decision::Unknown { reason }) => {
            assert!(
                reason.contains(fragment),
                "{name}: {reason:?} lacks {fragment:?}"
            );
        }
        (expected, got) => panic!("{name}: expected {expected:?}, got {got:?}"),
    }
}

#[test]
fn every_row_of_the_decision_table() {
    let rows: Vec<Row> = [outcome_rows(), safety_rows(), budget_rows()]
        .into_iter()
        .flatten()
        .collect();
    for row in &rows {
        for seed in 0..50 {
            check(row, seed);
        }
    }
}

#[test]
fn retry_reason_says_what_and_when() {
    let policy = policy();
    let input = DecisionInput {
        class: Retryable,
        retry_safety: IdempotentWithKey,
        policy: &policy,
        attempts_made: 2,
        any_ambiguous_before: false,
        first_sent_at: Some(now()),
        key_retention: DAY,
        created_at: created_at(),
        intent_deadline: None,
        retry_after: Some(RetryAfter::Delay(30 * SECOND)),
        now: now(),
    };
    let Decision::RetryAt { reason, .. } = decide(&input, &mut StdRng::seed_from_u64(7)) else {
        panic!("expected a retry");
    };
    assert_eq!(
        reason,
        "retryable attempt; attempt 3 of 5 in 30s (Retry-After)"
    );
}

#[test]
fn backoff_stays_within_the_full_jitter_bound() {
    let policy = policy();
    let cases: &[(u32, Duration)] = &[
        (0, SECOND),
        (1, SECOND),
        (2, 2 * SECOND),
        (3, 4 * SECOND),
        (6, 32 * SECOND),
        (7, MINUTE),
        (40, MINUTE),
        (u32::MAX, MINUTE),
    ];
    let mut rng = StdRng::seed_from_u64(1);
    for &(attempts, cap) in cases {
        let samples: Vec<Duration> = (0..500)
            .map(|_| backoff_delay(&policy, attempts, &mut rng))
            .collect();
        let largest = samples.iter().max().unwrap();
        let smallest = samples.iter().min().unwrap();
        assert!(*largest <= cap, "attempt {attempts}: {largest:?} > {cap:?}");
        assert!(
            *largest > cap * 9 / 10,
            "attempt {attempts}: jitter never near the cap"
        );
        assert!(
            *smallest < cap / 10,
            "attempt {attempts}: jitter never near zero"
        );
    }
}

#[test]
fn backoff_is_overflow_safe_with_huge_settings() {
    let policy = RetryPolicy {
        initial_backoff: Duration::MAX,
        max_backoff: Duration::MAX,
        ..policy()
    };
    let mut rng = StdRng::seed_from_u64(2);
    for attempts in [1, 2, 64, u32::MAX] {
        let _ = backoff_delay(&policy, attempts, &mut rng);
    }
    let zero = RetryPolicy {
        initial_backoff: Duration::ZERO,
        ..policy
    };
    assert_eq!(backoff_delay(&zero, 5, &mut rng), Duration::ZERO);
}

#[test]
fn budget_deadline_is_the_earlier_of_policy_and_intent() {
    let policy = policy();
    let by_policy = created_at() + chrono::Duration::hours(1);
    assert_eq!(
        budget_deadline(&policy, created_at(), None),
        Some(by_policy)
    );
    let earlier = created_at() + chrono::Duration::minutes(5);
    assert_eq!(
        budget_deadline(&policy, created_at(), Some(earlier)),
        Some(earlier)
    );
    let later_one = by_policy + chrono::Duration::hours(1);
    assert_eq!(
        budget_deadline(&policy, created_at(), Some(later_one)),
        Some(by_policy)
    );
    let unbounded = RetryPolicy {
        deadline: Duration::MAX,
        ..policy
    };
    assert_eq!(budget_deadline(&unbounded, created_at(), None), None);
}

#[test]
fn no_attempt_starts_at_or_after_the_deadline() {
    let deadline = Some(now());
    let just_before = now() - chrono::Duration::milliseconds(1);
    assert_eq!(decide_before_send(deadline, false, just_before), None);
    assert_eq!(decide_before_send(None, true, now()), None);
    match decide_before_send(deadline, false, now()) {
        Some(Decision::Failed { reason }) => {
            assert!(
                reason.starts_with("deadline passed (at 2030-01-01T12:10:00.000Z)"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    match decide_before_send(deadline, true, later(SECOND)) {
        Some(Decision::Unknown { reason }) => {
            assert!(
                reason.starts_with("deadline passed after an ambiguous attempt"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}
