//! Tests of each response fault as a client observes it: silent close, reset, late answer,
//! injected statuses with `Retry-After`, 500 and garbage after apply, huge and endless
//! bodies, redirect; and whether the effect was recorded.

use std::io::ErrorKind;
use std::time::Duration;

use serde_json::Value;

use super::tests::{client, keyed_request, post, start, Raw};
use super::*;

fn rule(matcher: Matcher, fault: Fault, times: u32) -> FaultRule {
    FaultRule {
        matcher,
        fault,
        times,
    }
}

#[tokio::test]
async fn lose_response_closes_silently_after_the_effect() {
    let p = start();
    p.push_fault(FaultRule::once(Fault::LoseResponseAfterApply));
    let mut raw = Raw::connect(&p).await;
    raw.send(&keyed_request("lost", "")).await;
    assert!(
        raw.response().await.expect("clean close").is_none(),
        "no bytes at all"
    );
    assert_eq!(p.effects_for_key("lost").len(), 1);
    assert_eq!(
        p.requests()[0].fault,
        Some(FaultKind::LoseResponseAfterApply)
    );
    // The retry with the same key is a replay, not a second effect.
    let (status, body) = post(&client(), &p, "/keyed/x", Some("lost")).await;
    assert_eq!((status, &body["replayed"]), (200, &Value::Bool(true)));
    assert_eq!(p.effect_count(), 1);
}

#[tokio::test]
async fn reset_after_apply_is_a_connection_reset() {
    let p = start();
    p.push_fault(FaultRule::once(Fault::ResetAfterApply));
    let mut raw = Raw::connect(&p).await;
    raw.send(&keyed_request("rst", "")).await;
    let err = raw.response().await.expect_err("reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);
    assert_eq!(p.effects_for_key("rst").len(), 1);
    let err = reqwest_error(&p, Fault::ResetAfterApply).await;
    assert!(!err.is_timeout(), "{err:?}");
}

/// Sends one keyed request through reqwest with `fault` scripted and returns the error.
async fn reqwest_error(p: &FakeProvider, fault: Fault) -> reqwest::Error {
    p.push_fault(FaultRule::once(fault));
    super::tests::install_crypto_provider();
    let c = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(300))
        .build();
    let req = c
        .expect("client")
        .post(p.url("/keyed/r"))
        .header("Idempotency-Key", "rq")
        .body("{}");
    req.send().await.expect_err("request must fail")
}

#[tokio::test]
async fn sleep_after_apply_outlives_the_client_timeout() {
    let p = start();
    let err = reqwest_error(&p, Fault::SleepAfterApply(Duration::from_secs(60))).await;
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(
        p.effects_for_key("rq").len(),
        1,
        "applied before the silence"
    );
}

#[tokio::test]
async fn status_without_apply_sends_retry_after_and_applies_nothing() {
    let p = start();
    let date = "Wed, 21 Oct 2015 07:28:00 GMT".to_owned();
    let fault = |status, retry_after| Fault::StatusWithoutApply {
        status,
        retry_after,
    };
    p.push_fault(rule(Matcher::Any, fault(503, Some("2".into())), 1));
    p.push_fault(rule(Matcher::Any, fault(429, Some(date.clone())), 1));
    p.push_fault(rule(Matcher::Any, fault(400, None), 1));
    let c = client();
    for (status, retry_after) in [(503, Some("2")), (429, Some(date.as_str())), (400, None)] {
        let resp = c
            .post(p.url("/keyed/a"))
            .header("Idempotency-Key", "k")
            .body("{}")
            .send()
            .await;
        let resp = resp.expect("response");
        assert_eq!(resp.status().as_u16(), status);
        let header = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().expect("ascii"));
        assert_eq!(header, retry_after);
    }
    assert_eq!(p.effect_count(), 0);
    let (status, body) = post(&c, &p, "/keyed/a", Some("k")).await;
    assert_eq!(
        (status, &body["replayed"]),
        (200, &Value::Bool(false)),
        "rules used up"
    );
}

#[tokio::test]
async fn status_500_and_garbage_body_apply_first() {
    let p = start();
    p.push_fault(rule(Matcher::Any, Fault::Status500AfterApply, 1));
    p.push_fault(rule(Matcher::Any, Fault::GarbageBodyAfterApply, 1));
    let c = client();
    let send = |key: &'static str| {
        c.post(p.url("/keyed/a"))
            .header("Idempotency-Key", key)
            .body("{}")
            .send()
    };
    assert_eq!(send("a").await.expect("500").status().as_u16(), 500);
    let garbage = send("b").await.expect("garbage");
    assert_eq!(garbage.status().as_u16(), 200);
    assert_eq!(garbage.text().await.expect("text"), "<html>not json");
    assert_eq!(
        (p.effects_for_key("a").len(), p.effects_for_key("b").len()),
        (1, 1)
    );
}

#[tokio::test]
async fn huge_body_has_exactly_the_requested_size() {
    let p = start();
    let size = 3 * 1024 * 1024 + 7;
    p.push_fault(FaultRule::once(Fault::HugeBodyAfterApply(size)));
    p.push_fault(FaultRule::once(Fault::HugeBodyAfterApply(10)));
    let c = client();
    let send = |key: &'static str| {
        c.post(p.url("/keyed/a"))
            .header("Idempotency-Key", key)
            .body("{}")
            .send()
    };
    let body = send("h1").await.expect("huge").bytes().await.expect("body");
    assert_eq!(body.len(), size);
    let json: Value = serde_json::from_slice(&body).expect("padded json");
    assert_eq!(json["id"], "ref_1");
    let body = send("h2")
        .await
        .expect("small")
        .bytes()
        .await
        .expect("body");
    assert_eq!(&body[..], b"xxxxxxxxxx");
    assert_eq!(p.effect_count(), 2);
}

#[tokio::test]
async fn endless_body_streams_until_the_client_leaves() {
    let p = start();
    p.push_fault(FaultRule::once(Fault::EndlessBodyAfterApply));
    let c = client();
    let mut resp = c
        .post(p.url("/keyed/a"))
        .header("Idempotency-Key", "e")
        .body("{}")
        .send()
        .await
        .expect("head");
    assert_eq!(resp.status().as_u16(), 200);
    let mut received = 0;
    while received < 4 * 1024 * 1024 {
        received += resp.chunk().await.expect("chunk").expect("more data").len();
    }
    drop(resp);
    assert_eq!(p.effects_for_key("e").len(), 1);
    let (status, _) = post(&c, &p, "/keyed/a", Some("after")).await;
    assert_eq!(status, 200, "provider still serves");
}

#[tokio::test]
async fn redirect_without_apply() {
    let p = start();
    p.push_fault(FaultRule::once(Fault::RedirectWithoutApply(
        "https://elsewhere.invalid/x".into(),
    )));
    let resp = client()
        .post(p.url("/keyed/a"))
        .header("Idempotency-Key", "r")
        .body("{}")
        .send()
        .await;
    let resp = resp.expect("302");
    assert_eq!(resp.status().as_u16(), 302);
    assert_eq!(resp.headers()["location"], "https://elsewhere.invalid/x");
    assert_eq!(p.effect_count(), 0);
}

#[tokio::test]
async fn requests_above_the_rate_limit_get_429_and_no_effect() {
    let p = start();
    p.set_rate_limit(Some((1, 2)));
    let c = client();
    let mut statuses = Vec::new();
    for n in 0..3 {
        let (status, _) = post(&c, &p, "/keyed/x", Some(&format!("rl-{n}"))).await;
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(p.rate_limited_count(), 1);
    assert_eq!(p.effect_count(), 2, "the refused request was not applied");
    p.set_rate_limit(None);
    let (status, _) = post(&c, &p, "/keyed/x", Some("rl-3")).await;
    assert_eq!(status, 200);
}
