//! The probe decision table: every row is one lookup answer in one context and the finding
//! it must produce.

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, TimeZone, Utc};

use super::*;
use crate::config::ProbeConfig;

const DAY: Duration = Duration::from_secs(86_400);

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap()
}

fn probe(means: NotFoundMeaning) -> ProbeRuntime {
    ProbeRuntime {
        method: reqwest::Method::GET,
        path: "/lookup/{idempotency_key}".into(),
        reference_pointer: Some("/id".into()),
        not_found_status: vec![404, 410],
        not_found_means: means,
    }
}

fn response(status: u16, body: &str) -> Observation {
    Observation::Response {
        status,
        retry_after: None,
        body: ResponseBody::Complete(Bytes::from(body.to_owned())),
    }
}

/// A context: keyed action, 1 day retention, first sent an hour before `now`.
fn ctx() -> ProbeContext<'static> {
    ProbeContext {
        lookup: "GET /lookup/k1",
        retry_safety: RetrySafety::IdempotentWithKey,
        key_retention: DAY,
        first_sent_at: Some(t0()),
        probe_redispatches: 0,
        now: t0() + chrono::Duration::hours(1),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Found(&'static str),
    NotApplied,
    /// Inconclusive, with this text in the finding.
    Left(&'static str),
}

struct Row {
    name: &'static str,
    observation: Observation,
    probe: ProbeRuntime,
    ctx: ProbeContext<'static>,
    expect: Expect,
}

fn row(name: &'static str, observation: Observation, expect: Expect) -> Row {
    Row {
        name,
        observation,
        probe: probe(NotFoundMeaning::NotApplied),
        ctx: ctx(),
        expect,
    }
}

fn rows() -> Vec<Row> {
    let mut rows = vec![
        row(
            "200 with reference",
            response(200, r#"{"id":"ref_7"}"#),
            Expect::Found("ref_7"),
        ),
        row(
            "200 numeric reference",
            response(200, r#"{"id":42}"#),
            Expect::Found("42"),
        ),
        row(
            "200 without reference",
            response(200, r#"{"other":1}"#),
            Expect::Left("no provider reference at /id"),
        ),
        row(
            "200 empty reference",
            response(200, r#"{"id":""}"#),
            Expect::Left("not a usable reference"),
        ),
        row(
            "200 garbage",
            response(200, "<html>not json"),
            Expect::Left("not JSON"),
        ),
        row(
            "404 keyed inside retention",
            response(404, r#"{"error":"not_found"}"#),
            Expect::NotApplied,
        ),
        row(
            "410 is also not found",
            response(410, ""),
            Expect::NotApplied,
        ),
        row(
            "500",
            response(500, "boom"),
            Expect::Left("HTTP 500 (boom); nothing concluded"),
        ),
        row(
            "503",
            response(503, ""),
            Expect::Left("HTTP 503; nothing concluded"),
        ),
        row(
            "400 is not a not-found status",
            response(400, ""),
            Expect::Left("HTTP 400"),
        ),
        row(
            "timeout",
            Observation::SendFailed {
                error: "deadline".into(),
                timed_out: true,
            },
            Expect::Left("timed out"),
        ),
        row(
            "reset",
            Observation::SendFailed {
                error: "reset by peer".into(),
                timed_out: false,
            },
            Expect::Left("failed (reset by peer)"),
        ),
        row(
            "connect refused",
            Observation::ConnectFailed {
                error: "refused".into(),
            },
            Expect::Left("could not connect"),
        ),
        row(
            "address guard",
            Observation::Refused {
                reason: "private address".into(),
            },
            Expect::Left("not sent (private address)"),
        ),
        row(
            "local rate limit",
            Observation::LocallyRateLimited,
            Expect::Left("rate limit"),
        ),
        row(
            "body too large",
            Observation::Response {
                status: 200,
                retry_after: None,
                body: ResponseBody::TooLarge { limit: 10 },
            },
            Expect::Left("exceeds 10 bytes"),
        ),
    ];
    let mut unknown = row(
        "404 but not-found means unknown",
        response(404, ""),
        Expect::Left("not_found_means = unknown"),
    );
    unknown.probe = probe(NotFoundMeaning::Unknown);
    let mut not_keyed = row(
        "404 on a not_idempotent action",
        response(404, ""),
        Expect::Left("the action is not_idempotent"),
    );
    not_keyed.ctx.retry_safety = RetrySafety::NotIdempotent;
    let mut safe = row(
        "404 on a safe_always action",
        response(404, ""),
        Expect::Left("the action is safe_always"),
    );
    safe.ctx.retry_safety = RetrySafety::SafeAlways;
    let mut expired = row(
        "404 outside key retention",
        response(404, ""),
        Expect::Left("key retention (1day)"),
    );
    expired.ctx.now = t0() + chrono::Duration::days(1);
    let mut edge = row(
        "404 one second before retention ends",
        response(404, ""),
        Expect::NotApplied,
    );
    edge.ctx.now = t0() + chrono::Duration::days(1) - chrono::Duration::seconds(1);
    let mut never_sent = row(
        "404 with nothing ever sent",
        response(404, ""),
        Expect::NotApplied,
    );
    never_sent.ctx.first_sent_at = None;
    let mut looping = row(
        "404 after too many probe redispatches",
        response(404, ""),
        Expect::Left("already redispatched this intent 3 times"),
    );
    looping.ctx.probe_redispatches = MAX_PROBE_REDISPATCHES;
    let mut no_pointer = row(
        "200 without a configured pointer",
        response(200, r#"{"id":"r"}"#),
        Expect::Left("no reference_pointer"),
    );
    no_pointer.probe.reference_pointer = None;
    let mut found_anyway = row(
        "200 wins over retention and safety",
        response(200, r#"{"id":"r9"}"#),
        Expect::Found("r9"),
    );
    found_anyway.ctx.retry_safety = RetrySafety::NotIdempotent;
    found_anyway.ctx.now = t0() + chrono::Duration::days(30);
    rows.extend([
        unknown,
        not_keyed,
        safe,
        expired,
        edge,
        never_sent,
        looping,
        no_pointer,
        found_anyway,
    ]);
    rows
}

#[test]
fn probe_decision_table() {
    for row in rows() {
        let finding = classify_probe(&row.observation, &row.probe, &row.ctx);
        match (&row.expect, &finding) {
            (Expect::Found(want), ProbeFinding::Found { provider_ref, note }) => {
                assert_eq!(provider_ref, want, "{}", row.name);
                assert!(note.contains("GET /lookup/k1"), "{}: {note}", row.name);
            }
            (Expect::NotApplied, ProbeFinding::NotApplied { note }) => {
                assert!(
                    note.contains("redispatched with the same idempotency key"),
                    "{}: {note}",
                    row.name
                );
            }
            (Expect::Left(want), ProbeFinding::Inconclusive { finding }) => {
                assert!(
                    finding.contains(want),
                    "{}: {finding:?} lacks {want:?}",
                    row.name
                );
                assert!(
                    finding.starts_with("status probe GET /lookup/k1"),
                    "{}: {finding}",
                    row.name
                );
            }
            _ => panic!("{}: expected {:?}, got {finding:?}", row.name, row.expect),
        }
    }
}

#[test]
fn runtime_from_config_keeps_every_setting() {
    let config = ProbeConfig {
        method: "GET".into(),
        path: "/v1/refunds?key={idempotency_key}".into(),
        reference_pointer: String::new(),
        not_found_status: vec![404],
        not_found_means: NotFoundMeaning::NotApplied,
    };
    let runtime = ProbeRuntime::from_config(&config).unwrap();
    assert_eq!(runtime.method, reqwest::Method::GET);
    assert_eq!(runtime.reference_pointer, None);
    assert_eq!(runtime.not_found_status, vec![404]);
    let bad = ProbeConfig {
        method: "get".into(),
        ..config
    };
    assert!(ProbeRuntime::from_config(&bad)
        .unwrap_err()
        .contains("not an HTTP method"));
}
