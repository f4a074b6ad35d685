//! Tests of fault scheduling and connection modes: scripted rule matching and consumption,
//! refusing connections and reopening the same port, shutdown, and seeded random faults.

use std::io::ErrorKind;

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::tests::{client, post, start, LIMIT};
use super::*;

fn rule(matcher: Matcher, fault: Fault, times: u32) -> FaultRule {
    FaultRule {
        matcher,
        fault,
        times,
    }
}

/// Sends a keyed request and returns its status.
async fn keyed_status(c: &reqwest::Client, p: &FakeProvider, path: &str, key: &str) -> u16 {
    let req = c
        .post(p.url(path))
        .header("Idempotency-Key", key)
        .body("{}");
    req.send().await.expect("response").status().as_u16()
}

#[tokio::test]
async fn scripted_rules_apply_the_first_match_in_push_order() {
    let p = start();
    let unavailable = Fault::StatusWithoutApply {
        status: 503,
        retry_after: None,
    };
    p.push_fault(rule(
        Matcher::Key("a".into()),
        Fault::Status500AfterApply,
        1,
    ));
    p.push_fault(rule(
        Matcher::PathPrefix("/unkeyed/".into()),
        Fault::GarbageBodyAfterApply,
        1,
    ));
    p.push_fault(rule(Matcher::Any, unavailable, 1));
    let c = client();
    assert_eq!(
        keyed_status(&c, &p, "/unkeyed/y", "a").await,
        500,
        "Key(a) was pushed first"
    );
    assert_eq!(
        keyed_status(&c, &p, "/keyed/x", "b").await,
        503,
        "only Any matches"
    );
    let garbage = c
        .post(p.url("/unkeyed/y"))
        .body("{}")
        .send()
        .await
        .expect("garbage");
    assert_eq!(garbage.text().await.expect("text"), "<html>not json");
    assert!(p.pending_faults().is_empty());
    let kinds: Vec<_> = p.requests().iter().map(|r| r.fault).collect();
    use FaultKind::*;
    let expected = [
        Status500AfterApply,
        StatusWithoutApply,
        GarbageBodyAfterApply,
    ];
    assert_eq!(kinds, expected.map(Some));
}

#[tokio::test]
async fn scripted_rule_counts_are_consumed() {
    let p = start();
    p.push_fault(rule(
        Matcher::Key("a".into()),
        Fault::Status500AfterApply,
        2,
    ));
    p.push_fault(rule(Matcher::Any, Fault::GarbageBodyAfterApply, 0));
    assert_eq!(
        p.pending_faults().len(),
        1,
        "a rule with times 0 is ignored"
    );
    let c = client();
    assert_eq!(
        keyed_status(&c, &p, "/keyed/x", "b").await,
        200,
        "b does not match"
    );
    assert_eq!(keyed_status(&c, &p, "/keyed/x", "a").await, 500);
    assert_eq!(p.pending_faults()[0].times, 1);
    assert_eq!(keyed_status(&c, &p, "/keyed/x", "a").await, 500);
    assert!(p.pending_faults().is_empty());
    let (status, body) = post(&c, &p, "/keyed/x", Some("a")).await;
    assert_eq!(
        (status, &body["replayed"]),
        (200, &Value::Bool(true)),
        "applied once, by the first 500"
    );
    assert_eq!(p.effects_for_key("a").len(), 1);
}

#[tokio::test]
async fn refusing_closes_listener_and_connections_then_reopens_the_same_port() {
    let p = start();
    let port = p.port();
    let mut idle = TcpStream::connect(p.addr()).await.expect("connect");
    p.set_refusing(true).await.expect("refuse");
    assert!(p.is_refusing());
    let err = TcpStream::connect(p.addr()).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    let mut sink = [0u8; 16];
    let read = tokio::time::timeout(LIMIT, idle.read(&mut sink))
        .await
        .expect("closed in time");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "existing connection closed: {read:?}"
    );
    let c = client();
    assert!(c
        .post(p.url("/keyed/a"))
        .header("Idempotency-Key", "k")
        .body("{}")
        .send()
        .await
        .is_err());
    p.set_refusing(false).await.expect("reopen");
    assert_eq!(p.port(), port);
    let (status, _) = post(&c, &p, "/keyed/a", Some("k")).await;
    assert_eq!(status, 200);
    assert_eq!(
        p.effect_count(),
        1,
        "nothing reached the provider while refusing"
    );
}

#[tokio::test]
async fn shutdown_refuses_for_good() {
    let p = start();
    p.shutdown().await;
    let err = TcpStream::connect(p.addr()).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    assert!(p.set_refusing(false).await.is_err());
}

/// Sends `n` sequential keyed requests and returns each one's status and fault kind.
async fn random_run(seed: u64, n: usize) -> (Vec<(u16, Option<FaultKind>)>, Option<u64>) {
    let p = start();
    p.set_random_faults(RandomFaults {
        seed,
        probability: 0.5,
        faults: vec![
            Fault::Status500AfterApply,
            Fault::GarbageBodyAfterApply,
            Fault::StatusWithoutApply {
                status: 503,
                retry_after: Some("1".into()),
            },
        ],
    });
    let c = client();
    let mut statuses = Vec::with_capacity(n);
    for i in 0..n {
        let req = c
            .post(p.url("/keyed/a"))
            .header("Idempotency-Key", format!("k{i}"))
            .body("{}");
        statuses.push(req.send().await.expect("response").status().as_u16());
    }
    let kinds = p.requests().iter().map(|r| r.fault).collect::<Vec<_>>();
    (statuses.into_iter().zip(kinds).collect(), p.random_seed())
}

#[tokio::test]
async fn random_faults_are_reproducible_for_a_seed() {
    let (first, seed) = random_run(7, 40).await;
    let (again, _) = random_run(7, 40).await;
    let (other, _) = random_run(8, 40).await;
    assert_eq!(seed, Some(7));
    assert_eq!(first, again);
    assert_ne!(first, other);
    let faulted = first.iter().filter(|(_, k)| k.is_some()).count();
    assert!(faulted > 5 && faulted < 35, "about half faulted: {faulted}");
    assert!(first.iter().all(|(s, k)| k.is_some() || *s == 200));
}
