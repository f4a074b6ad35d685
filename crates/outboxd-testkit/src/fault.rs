//! Fault injection for the fake provider: the [`Fault`] catalogue, scripted [`FaultRule`]s
//! (consumed in order) and seeded [`RandomFaults`] for soak tests, plus the per-provider
//! [`FaultPlan`] that picks the fault (if any) for each request.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// One way a response can go wrong.
///
/// "After apply" faults process the request exactly as normal first (the effect, if any, is
/// recorded), then break the response. "Without apply" faults skip processing entirely: no
/// effect is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Apply, then close the connection without writing a single byte (a FIN; the kernel
    /// sends an RST instead if the client had already sent bytes the server has not read).
    LoseResponseAfterApply,
    /// Apply, then abort the connection with a TCP RST (linger 0, then close).
    ResetAfterApply,
    /// Apply, wait this long, then send the normal response (the client has usually given up).
    SleepAfterApply(Duration),
    /// Apply, then answer `500 Internal Server Error`.
    Status500AfterApply,
    /// Apply, then answer `200` with the body `<html>not json`.
    GarbageBodyAfterApply,
    /// Do not apply; answer with this status (e.g. 503, 429, 400) and, if given, a
    /// `Retry-After` header carrying the value verbatim (seconds or an HTTP-date).
    StatusWithoutApply {
        /// The HTTP status code to send (three digits).
        status: u16,
        /// The raw `Retry-After` header value, if any.
        retry_after: Option<String>,
    },
    /// Apply, then answer `200` with a body of exactly this many bytes (valid JSON, padded,
    /// when the size allows it).
    HugeBodyAfterApply(usize),
    /// Apply, then answer `200` with a chunked body that keeps streaming until the client
    /// disconnects, bounded by [`ENDLESS_BODY_LIMIT`](super::ENDLESS_BODY_LIMIT) bytes.
    EndlessBodyAfterApply,
    /// Do not apply; answer `302 Found` with this `Location`.
    RedirectWithoutApply(String),
}

/// The name of a [`Fault`] without its parameters, as stored in request records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// See [`Fault::LoseResponseAfterApply`].
    LoseResponseAfterApply,
    /// See [`Fault::ResetAfterApply`].
    ResetAfterApply,
    /// See [`Fault::SleepAfterApply`].
    SleepAfterApply,
    /// See [`Fault::Status500AfterApply`].
    Status500AfterApply,
    /// See [`Fault::GarbageBodyAfterApply`].
    GarbageBodyAfterApply,
    /// See [`Fault::StatusWithoutApply`].
    StatusWithoutApply,
    /// See [`Fault::HugeBodyAfterApply`].
    HugeBodyAfterApply,
    /// See [`Fault::EndlessBodyAfterApply`].
    EndlessBodyAfterApply,
    /// See [`Fault::RedirectWithoutApply`].
    RedirectWithoutApply,
}

impl Fault {
    /// The parameterless name of this fault.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::LoseResponseAfterApply => FaultKind::LoseResponseAfterApply,
            Fault::ResetAfterApply => FaultKind::ResetAfterApply,
            Fault::SleepAfterApply(_) => FaultKind::SleepAfterApply,
            Fault::Status500AfterApply => FaultKind::Status500AfterApply,
            Fault::GarbageBodyAfterApply => FaultKind::GarbageBodyAfterApply,
            Fault::StatusWithoutApply { .. } => FaultKind::StatusWithoutApply,
            Fault::HugeBodyAfterApply(_) => FaultKind::HugeBodyAfterApply,
            Fault::EndlessBodyAfterApply => FaultKind::EndlessBodyAfterApply,
            Fault::RedirectWithoutApply(_) => FaultKind::RedirectWithoutApply,
        }
    }

    /// Whether the request is processed normally (effect recorded) before the fault acts.
    pub fn applies(&self) -> bool {
        !matches!(
            self,
            Fault::StatusWithoutApply { .. } | Fault::RedirectWithoutApply(_)
        )
    }
}

/// Which requests a [`FaultRule`] applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    /// Every request, whatever its path or key.
    Any,
    /// Requests whose idempotency-key header equals this value exactly.
    Key(String),
    /// Requests whose request target (path and query, as sent) starts with this prefix.
    PathPrefix(String),
}

impl Matcher {
    /// Whether a request with this target and idempotency key matches.
    pub fn matches(&self, target: &str, key: Option<&str>) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::Key(k) => key == Some(k.as_str()),
            Matcher::PathPrefix(p) => target.starts_with(p.as_str()),
        }
    }
}

/// A scripted fault: the first `times` matching requests get `fault`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// Which requests the rule applies to.
    pub matcher: Matcher,
    /// What goes wrong.
    pub fault: Fault,
    /// How many more matching requests the rule applies to; it is removed at zero.
    pub times: u32,
}

impl FaultRule {
    /// A rule applying `fault` once to any request.
    pub fn once(fault: Fault) -> Self {
        FaultRule {
            matcher: Matcher::Any,
            fault,
            times: 1,
        }
    }
}

/// Seeded random faults for soak tests: each request that no scripted rule matched draws
/// from a [`StdRng`] seeded with `seed`; with `probability` it gets one of `faults`
/// (chosen uniformly). The same seed and the same request order give the same faults.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomFaults {
    /// The RNG seed (exposed again by `FakeProvider::random_seed`).
    pub seed: u64,
    /// Probability in `[0, 1]` that a request gets a fault; clamped, NaN counts as 0.
    pub probability: f64,
    /// The faults to choose from; empty means never.
    pub faults: Vec<Fault>,
}

/// Random mode with its live RNG.
#[derive(Debug)]
struct RandomState {
    config: RandomFaults,
    rng: StdRng,
}

/// The faults configured on one provider; lives under the provider's state lock.
#[derive(Debug, Default)]
pub(crate) struct FaultPlan {
    rules: Vec<FaultRule>,
    random: Option<RandomState>,
}

impl FaultPlan {
    /// Appends a scripted rule (rules with `times == 0` are ignored).
    pub(crate) fn push(&mut self, rule: FaultRule) {
        if rule.times > 0 {
            self.rules.push(rule);
        }
    }

    /// Removes every scripted rule.
    pub(crate) fn clear_rules(&mut self) {
        self.rules.clear();
    }

    /// The scripted rules not yet used up, in order.
    pub(crate) fn rules(&self) -> Vec<FaultRule> {
        self.rules.clone()
    }

    /// Enables (or, with `None`, disables) random mode, reseeding the RNG.
    pub(crate) fn set_random(&mut self, random: Option<RandomFaults>) {
        self.random = random.map(|mut config| {
            config.probability = if config.probability.is_nan() {
                0.0
            } else {
                config.probability.clamp(0.0, 1.0)
            };
            RandomState {
                rng: StdRng::seed_from_u64(config.seed),
                config,
            }
        });
    }

    /// The seed of random mode, if enabled.
    pub(crate) fn random_seed(&self) -> Option<u64> {
        self.random.as_ref().map(|r| r.config.seed)
    }

    /// Picks the fault for one request: the first matching scripted rule (decremented), else
    /// a random draw, else none.
    pub(crate) fn select(&mut self, target: &str, key: Option<&str>) -> Option<Fault> {
        if let Some(i) = self
            .rules
            .iter()
            .position(|r| r.times > 0 && r.matcher.matches(target, key))
        {
            let rule = &mut self.rules[i];
            rule.times -= 1;
            let fault = rule.fault.clone();
            if rule.times == 0 {
                self.rules.remove(i);
            }
            return Some(fault);
        }
        let random = self.random.as_mut()?;
        // Always draw once per request so the sequence depends only on the request order.
        let roll: f64 = random.rng.random();
        let faults = &random.config.faults;
        if roll < random.config.probability && !faults.is_empty() {
            let pick = random.rng.random_range(0..faults.len());
            return Some(faults[pick].clone());
        }
        None
    }
}
