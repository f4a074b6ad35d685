//! "May this resend act twice, and why": one rule, used by the dispatcher before every
//! resend that follows an ambiguous attempt and by every person's redispatch (the console's
//! bulk and item pages, the JSON API, the CLI, the probes), whatever the backend.
//!
//! | retry safety | the answer after an ambiguous attempt |
//! |---|---|
//! | `safe_always` | no |
//! | `idempotent_with_key` | yes once the provider may have forgotten the key: the resend would land (now + the provider's request timeout) at or after `first_sent_at + key_retention` |
//! | `not_idempotent` | yes |
//! | not known to the caller | yes (treated as `not_idempotent`) |
//!
//! Without an ambiguous attempt the answer is always no: every earlier request was refused
//! or never reached the provider (the classification's promise), so nothing has acted yet.
//! The dispatcher never sends when the answer is yes; a person may, after confirming it
//! explicitly with the reason in front of them (see [`crate::store::check_resend`]).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::RetrySafety;

/// What an action's configuration says about resending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResendPolicy {
    /// The action's retry safety.
    pub retry_safety: RetrySafety,
    /// How long its provider remembers an idempotency key.
    pub key_retention: Duration,
    /// Its provider's request timeout (a resend lands at most this long after it starts).
    pub request_timeout: Duration,
}

/// Every configured action's [`ResendPolicy`], by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResendPolicies(BTreeMap<String, ResendPolicy>);

impl ResendPolicies {
    /// Policies of the given actions.
    pub fn new(policies: impl IntoIterator<Item = (String, ResendPolicy)>) -> Self {
        Self(policies.into_iter().collect())
    }

    /// The policy of `action` (`None`: not configured here).
    pub fn get(&self, action: &str) -> Option<&ResendPolicy> {
        self.0.get(action)
    }
}

/// The facts of an intent's earlier attempts the rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendHistory {
    /// Ambiguous attempts so far (lease expiries included).
    pub ambiguous_attempts: i32,
    /// When a request with this key may first have reached the provider.
    pub first_sent_at: Option<DateTime<Utc>>,
    /// When the intent was enqueued (stands in for `first_sent_at` when that is missing).
    pub created_at: DateTime<Utc>,
}

/// Why a resend may make the provider act twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResendRisk {
    /// A `not_idempotent` action after an ambiguous attempt.
    NotIdempotent,
    /// An action whose retry safety the caller does not know, after an ambiguous attempt.
    SafetyNotKnown,
    /// A keyed action after an ambiguous attempt, once the provider may have forgotten the
    /// key.
    KeyMayBeForgotten {
        /// When the provider may have started forgetting it.
        since: DateTime<Utc>,
    },
}

impl ResendRisk {
    /// The reason shown to the person who must confirm.
    pub fn explain(&self) -> String {
        match self {
            ResendRisk::NotIdempotent => "not_idempotent: an earlier attempt may have reached \
                the provider, which does not deduplicate this action, so sending it again may \
                act twice"
                .to_owned(),
            ResendRisk::SafetyNotKnown => "the action is not configured here, so its retry \
                safety is unknown: an earlier attempt may have reached the provider, and \
                sending it again may act twice"
                .to_owned(),
            ResendRisk::KeyMayBeForgotten { since } => format!(
                "the provider may have forgotten the key since {}: an earlier attempt may \
                 have reached the provider, and a resend it no longer recognises may act twice",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        }
    }

    /// The error of the attempt the dispatcher declines to send.
    pub fn not_sent_reason(&self) -> &'static str {
        match self {
            ResendRisk::NotIdempotent | ResendRisk::SafetyNotKnown => {
                "not sent: a not_idempotent action after an ambiguous attempt is never resent automatically"
            }
            ResendRisk::KeyMayBeForgotten { .. } => {
                "not sent: the provider may have forgotten the idempotency key of an earlier ambiguous attempt"
            }
        }
    }
}

/// Whether a resend started at `now` may make the provider act twice, and why (`None`:
/// it cannot). `policy` is `None` when the caller does not know the action.
pub fn resend_risk(
    policy: Option<&ResendPolicy>,
    history: &SendHistory,
    now: DateTime<Utc>,
) -> Option<ResendRisk> {
    if history.ambiguous_attempts == 0 {
        return None;
    }
    let Some(policy) = policy else {
        return Some(ResendRisk::SafetyNotKnown);
    };
    match policy.retry_safety {
        RetrySafety::SafeAlways => None,
        RetrySafety::NotIdempotent => Some(ResendRisk::NotIdempotent),
        RetrySafety::IdempotentWithKey => {
            let first = history.first_sent_at.unwrap_or(history.created_at);
            let limit = chrono::Duration::from_std(policy.key_retention)
                .ok()
                .and_then(|r| first.checked_add_signed(r));
            let lands_by = chrono::Duration::from_std(policy.request_timeout)
                .ok()
                .and_then(|t| now.checked_add_signed(t));
            match (limit, lands_by) {
                (Some(limit), Some(lands_by)) if lands_by < limit => None,
                (Some(limit), _) => Some(ResendRisk::KeyMayBeForgotten { since: limit }),
                (None, _) => Some(ResendRisk::KeyMayBeForgotten { since: first }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(retry_safety: RetrySafety) -> ResendPolicy {
        ResendPolicy {
            retry_safety,
            key_retention: Duration::from_secs(3600),
            request_timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_table_in_the_module_doc() {
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let history = |ambiguous| SendHistory {
            ambiguous_attempts: ambiguous,
            first_sent_at: Some(t0),
            created_at: t0,
        };
        let at = |secs| t0 + chrono::Duration::seconds(secs);
        use RetrySafety::*;
        let keyed = policy(IdempotentWithKey);
        let risk = ResendRisk::KeyMayBeForgotten { since: at(3600) };
        let forgotten = Some(risk);
        for (policy, ambiguous, now, expected) in [
            (Some(policy(SafeAlways)), 1, at(99_999), None),
            (Some(policy(NotIdempotent)), 0, at(0), None),
            (
                Some(policy(NotIdempotent)),
                1,
                at(0),
                Some(ResendRisk::NotIdempotent),
            ),
            (None, 0, at(0), None),
            (None, 1, at(0), Some(ResendRisk::SafetyNotKnown)),
            (Some(keyed), 0, at(99_999), None),
            (Some(keyed), 1, at(3589), None),
            (Some(keyed), 1, at(3590), forgotten),
            (Some(keyed), 1, at(99_999), forgotten),
        ] {
            assert_eq!(
                resend_risk(policy.as_ref(), &history(ambiguous), now),
                expected,
                "{policy:?} {ambiguous} {now}"
            );
        }
        let text = risk.explain();
        assert!(
            text.contains("may have forgotten the key since 2023-11-14T23:13:20Z"),
            "{text}"
        );
    }
}
