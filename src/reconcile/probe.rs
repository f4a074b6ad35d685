//! Automatic status probes, the pure part: an action's probe settings ([`ProbeRuntime`]),
//! and [`classify_probe`], the one function that decides what a lookup at the provider
//! proves about an unknown outcome. Sending the lookup and acting on the finding live in
//! [`super::probe_job`]; nothing here does I/O or reads a clock.
//!
//! | lookup answer                                               | finding        |
//! |-------------------------------------------------------------|----------------|
//! | 2xx with a reference at the pointer                         | `Found`        |
//! | a `not_found_status`, `not_found_means = not_applied`,      | `NotApplied`   |
//! | `idempotent_with_key`, inside key retention, few redispatches|               |
//! | anything else (not found meaning unknown, not keyed, outside| `Inconclusive` |
//! | retention, 2xx without a reference, 5xx, timeout, garbage)  |                |

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::action::RetrySafety;
use crate::config::NotFoundMeaning;
pub use crate::provider::lookup::ProbeRuntime;
use crate::provider::{Observation, ResponseBody};

#[cfg(test)]
mod tests;

/// How many times the probe may redispatch one intent. An intent that keeps coming back
/// to reconciliation after that is left for a person instead of looping.
pub const MAX_PROBE_REDISPATCHES: u32 = 3;

/// What [`classify_probe`] needs besides the answer.
#[derive(Debug, Clone, Copy)]
pub struct ProbeContext<'a> {
    /// The lookup as sent (`GET /v1/refunds?key=...`), quoted in notes and findings.
    pub lookup: &'a str,
    /// The action's retry safety.
    pub retry_safety: RetrySafety,
    /// How long the provider remembers an idempotency key.
    pub key_retention: Duration,
    /// When a request with this key may first have reached the provider (the earliest
    /// attempt not classified `not_sent`); `None` if none may have.
    pub first_sent_at: Option<DateTime<Utc>>,
    /// Redispatches the probe already made for this intent.
    pub probe_redispatches: u32,
    /// The time of the lookup.
    pub now: DateTime<Utc>,
}

/// What a lookup proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeFinding {
    /// The provider has the operation: resolve as delivered with this reference.
    Found {
        /// The provider's reference.
        provider_ref: String,
        /// The resolution note (what was looked up and what it answered).
        note: String,
    },
    /// The provider never applied it and still remembers the key: redispatch.
    NotApplied {
        /// The resolution note.
        note: String,
    },
    /// Nothing safe to conclude; the item stays for a person with this finding.
    Inconclusive {
        /// The finding, for the reviewer.
        finding: String,
    },
}

/// Decides what a lookup's answer proves. Pure: no I/O, no clock, never panics.
pub fn classify_probe(
    observation: &Observation,
    probe: &ProbeRuntime,
    ctx: &ProbeContext<'_>,
) -> ProbeFinding {
    let lookup = ctx.lookup;
    let inconclusive = |why: String| ProbeFinding::Inconclusive {
        finding: format!("status probe {lookup}: {why}"),
    };
    let (status, body) = match observation {
        Observation::Response { status, body, .. } => (*status, body),
        Observation::ConnectFailed { error } => {
            return inconclusive(format!("could not connect ({error}); nothing concluded"))
        }
        Observation::LocallyRateLimited => {
            return inconclusive("held back by the local rate limit; nothing concluded".into())
        }
        Observation::Refused { reason } => {
            return inconclusive(format!("not sent ({reason}); nothing concluded"))
        }
        Observation::SendFailed { error, timed_out } => {
            let what = if *timed_out { "timed out" } else { "failed" };
            return inconclusive(format!("the lookup {what} ({error}); nothing concluded"));
        }
    };
    if (200..=299).contains(&status) {
        return match found_reference(body, probe.reference_pointer.as_deref()) {
            Ok(provider_ref) => ProbeFinding::Found {
                note: format!(
                    "status probe {lookup} answered HTTP {status} with provider reference \
                     {provider_ref}"
                ),
                provider_ref,
            },
            Err(why) => inconclusive(format!(
                "answered HTTP {status}, which suggests the operation exists, but {why}; \
                 check the provider and resolve by hand"
            )),
        };
    }
    if probe.not_found_status.contains(&status) {
        return not_found(status, probe, ctx);
    }
    inconclusive(format!(
        "answered HTTP {status}{}; nothing concluded",
        excerpt(body).map(|e| format!(" ({e})")).unwrap_or_default()
    ))
}

/// A not-found answer: redispatch only when it proves "never applied" and resending is safe.
fn not_found(status: u16, probe: &ProbeRuntime, ctx: &ProbeContext<'_>) -> ProbeFinding {
    let lookup = ctx.lookup;
    let leave = |why: String| ProbeFinding::Inconclusive {
        finding: format!("status probe {lookup} answered HTTP {status} (not found), but {why}"),
    };
    if probe.not_found_means == NotFoundMeaning::Unknown {
        return leave(
            "for this action not-found does not prove the operation was never applied \
             (not_found_means = unknown); a person must decide"
                .into(),
        );
    }
    if ctx.retry_safety != RetrySafety::IdempotentWithKey {
        return leave(format!(
            "the action is {}: only idempotent_with_key actions are redispatched \
             automatically; a person must decide whether to send it again",
            ctx.retry_safety
        ));
    }
    let retention = humantime::format_duration(ctx.key_retention);
    if let Some(first) = ctx.first_sent_at {
        // A retention too long to add to a date is, for our purposes, forever.
        let until = chrono::Duration::from_std(ctx.key_retention)
            .ok()
            .and_then(|r| first.checked_add_signed(r));
        if let Some(until) = until.filter(|until| ctx.now >= *until) {
            return leave(format!(
                "the provider's key retention ({retention}) since the first request at \
                 {first} ended at {until}, so not-found no longer proves it was never \
                 applied; a person must decide"
            ));
        }
    }
    if ctx.probe_redispatches >= MAX_PROBE_REDISPATCHES {
        return leave(format!(
            "the probe already redispatched this intent {} times and it came back unknown \
             each time; a person must look at it",
            ctx.probe_redispatches
        ));
    }
    let since = match ctx.first_sent_at {
        Some(first) => format!(
            "the key was first sent at {first}, inside the provider's {retention} key retention"
        ),
        None => "no request with this key may have reached the provider".to_owned(),
    };
    ProbeFinding::NotApplied {
        note: format!(
            "status probe {lookup} answered HTTP {status}: the provider never applied the \
             operation ({since}); redispatched with the same idempotency key"
        ),
    }
}

/// The reference at `pointer` in a 2xx body, or why it cannot be read.
fn found_reference(body: &ResponseBody, pointer: Option<&str>) -> Result<String, String> {
    let Some(pointer) = pointer else {
        return Err("the probe has no reference_pointer to read the provider reference".into());
    };
    let bytes = match body {
        ResponseBody::Complete(bytes) => bytes,
        ResponseBody::TooLarge { limit } => return Err(format!("the body exceeds {limit} bytes")),
        ResponseBody::ReadFailed(why) => return Err(format!("reading the body failed: {why}")),
    };
    let json: Value = serde_json::from_slice(bytes).map_err(|_| {
        format!(
            "the body is not JSON: {}",
            excerpt(body).unwrap_or_default()
        )
    })?;
    match json.pointer(pointer) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        Some(Value::Number(number)) => Ok(number.to_string()),
        Some(_) => Err(format!("the value at {pointer} is not a usable reference")),
        None => Err(format!("the body has no provider reference at {pointer}")),
    }
}

/// A short single-line excerpt of a body, for findings.
fn excerpt(body: &ResponseBody) -> Option<String> {
    let ResponseBody::Complete(bytes) = body else {
        return None;
    };
    let text: String = String::from_utf8_lossy(bytes)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut chars = text.chars().filter(|c| !c.is_control());
    let short: String = chars.by_ref().take(120).collect();
    match (short.is_empty(), chars.next().is_some()) {
        (true, _) => None,
        (false, true) => Some(format!("{short}…")),
        (false, false) => Some(short),
    }
}
