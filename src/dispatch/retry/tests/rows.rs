//! The rows of the decision table: what [`decide`](super::super::decide) must return for
//! each combination of class, retry safety, history and budget.

use super::*;

fn retry(min: Duration, max: Duration) -> Expect {
    Expect::Retry { min, max }
}

pub(super) fn outcome_rows() -> Vec<Row> {
    vec![
        row("delivered", Delivered, NotIdempotent, Expect::Delivered),
        row(
            "delivered after ambiguous",
            Delivered,
            NotIdempotent,
            Expect::Delivered,
        )
        .ambiguous_before(ago(MINUTE)),
        row(
            "rejected",
            Rejected,
            IdempotentWithKey,
            Expect::Failed("rejected by the provider"),
        ),
        row(
            "rejected after ambiguous",
            Rejected,
            IdempotentWithKey,
            Expect::Unknown(
                "rejected after an earlier ambiguous attempt; the first may have acted",
            ),
        )
        .ambiguous_before(ago(MINUTE)),
    ]
}

pub(super) fn safety_rows() -> Vec<Row> {
    let outside_retention = ago(DAY);
    let retention = Expect::Unknown("provider key retention would be exceeded");
    let not_idempotent = Expect::Unknown("not_idempotent action after an ambiguous attempt");
    vec![
        row(
            "not_sent, not_idempotent",
            NotSent,
            NotIdempotent,
            retry(Duration::ZERO, SECOND),
        ),
        row(
            "retryable, not_idempotent",
            Retryable,
            NotIdempotent,
            retry(Duration::ZERO, SECOND),
        ),
        row(
            "ambiguous, not_idempotent",
            Ambiguous,
            NotIdempotent,
            not_idempotent,
        ),
        row(
            "not_sent after ambiguous, not_idempotent",
            NotSent,
            NotIdempotent,
            Expect::Unknown("not_idempotent action after an ambiguous attempt"),
        )
        .ambiguous_before(ago(MINUTE)),
        row(
            "ambiguous, safe_always",
            Ambiguous,
            SafeAlways,
            retry(Duration::ZERO, SECOND),
        )
        .ambiguous_before(ago(2 * DAY)),
        row(
            "ambiguous keyed, inside retention",
            Ambiguous,
            IdempotentWithKey,
            retry(Duration::ZERO, SECOND),
        )
        .first_sent(Some(ago(DAY - MINUTE))),
        row(
            "ambiguous keyed, outside retention",
            Ambiguous,
            IdempotentWithKey,
            retention,
        )
        .first_sent(Some(outside_retention)),
        row(
            "ambiguous keyed, Retry-After lands past retention",
            Ambiguous,
            IdempotentWithKey,
            Expect::Unknown("provider key retention would be exceeded"),
        )
        .first_sent(Some(ago(DAY - MINUTE)))
        .retry_after(RetryAfter::Delay(2 * MINUTE)),
        row(
            "ambiguous keyed, no first_sent_at falls back to created_at",
            Ambiguous,
            IdempotentWithKey,
            Expect::Unknown("provider key retention would be exceeded"),
        )
        .first_sent(None)
        .retention(5 * MINUTE),
        row(
            "not_sent keyed after ambiguous, outside retention",
            NotSent,
            IdempotentWithKey,
            Expect::Unknown("provider key retention would be exceeded"),
        )
        .ambiguous_before(outside_retention),
        row(
            "not_sent keyed, never sent: retention irrelevant",
            NotSent,
            IdempotentWithKey,
            retry(Duration::ZERO, SECOND),
        )
        .retention(Duration::ZERO),
    ]
}

pub(super) fn budget_rows() -> Vec<Row> {
    let almost_deadline = created_at() + chrono::Duration::seconds(3600 - 20);
    vec![
        row(
            "second retry backs off up to 2s",
            NotSent,
            SafeAlways,
            retry(Duration::ZERO, 2 * SECOND),
        )
        .attempts(2),
        row(
            "backoff capped at max_backoff",
            NotSent,
            SafeAlways,
            retry(Duration::ZERO, MINUTE),
        )
        .attempts(4)
        .at(created_at()),
        row(
            "429 Retry-After 30s honoured",
            Retryable,
            IdempotentWithKey,
            retry(30 * SECOND, 30 * SECOND),
        )
        .retry_after(RetryAfter::Delay(30 * SECOND)),
        row(
            "Retry-After date honoured",
            Retryable,
            NotIdempotent,
            retry(45 * SECOND, 45 * SECOND),
        )
        .retry_after(RetryAfter::At(later(45 * SECOND))),
        row(
            "Retry-After 1 day clamped",
            Retryable,
            IdempotentWithKey,
            retry(10 * MINUTE, 10 * MINUTE),
        )
        .retry_after(RetryAfter::Delay(DAY)),
        row(
            "budget exhausted, definite",
            Retryable,
            SafeAlways,
            Expect::Failed("retry budget exhausted: 5 attempts"),
        )
        .attempts(5),
        row(
            "budget exhausted, ambiguous now",
            Ambiguous,
            SafeAlways,
            Expect::Unknown("retry budget exhausted after an ambiguous attempt: 5 attempts"),
        )
        .attempts(5),
        row(
            "budget exhausted, ambiguous earlier",
            NotSent,
            IdempotentWithKey,
            Expect::Unknown("retry budget exhausted after an ambiguous attempt"),
        )
        .attempts(5)
        .ambiguous_before(ago(MINUTE)),
        row(
            "policy deadline",
            Retryable,
            SafeAlways,
            Expect::Failed("deadline passed"),
        )
        .at(almost_deadline)
        .retry_after(RetryAfter::Delay(30 * SECOND)),
        row(
            "intent deadline is earlier",
            Retryable,
            SafeAlways,
            Expect::Failed("deadline passed"),
        )
        .intent_deadline(later(10 * SECOND))
        .retry_after(RetryAfter::Delay(30 * SECOND)),
        row(
            "deadline already passed",
            NotSent,
            SafeAlways,
            Expect::Failed("deadline passed"),
        )
        .at(created_at() + chrono::Duration::hours(2)),
        row(
            "deadline after ambiguous",
            Ambiguous,
            SafeAlways,
            Expect::Unknown("deadline passed after an ambiguous attempt"),
        )
        .intent_deadline(later(10 * SECOND))
        .retry_after(RetryAfter::Delay(30 * SECOND)),
    ]
}
