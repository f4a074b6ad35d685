//! Tests of the fake provider's HTTP handling and records: keep-alive and pipelining,
//! `Connection: close`, HTTP/1.0, `Expect: 100-continue`, framing errors and limits, request
//! records, the custom key header, unrecorded mode, wait helpers and latency.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::tests::{client, keyed_request, post, start, Raw, LIMIT};
use super::*;

#[tokio::test]
async fn keep_alive_serves_pipelined_requests_and_honours_connection_close() {
    let p = start();
    let mut raw = Raw::connect(&p).await;
    let mut batch = keyed_request("p1", "");
    batch.extend(keyed_request("p2", ""));
    batch.extend(keyed_request("p1", "Connection: close\r\n"));
    raw.send(&batch).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let resp = raw.response().await.expect("read").expect("response");
        assert_eq!(resp.status, 200);
        let body: Value = serde_json::from_slice(&resp.body).expect("json");
        ids.push(body["id"].as_str().map(str::to_owned));
    }
    let ids: Vec<_> = ids.iter().map(|i| i.as_deref()).collect();
    assert_eq!(ids, [Some("ref_1"), Some("ref_2"), Some("ref_1")]);
    assert!(
        raw.response().await.expect("read").is_none(),
        "closed after Connection: close"
    );
}

#[tokio::test]
async fn http10_closes_and_expect_continue_is_answered() {
    let p = start();
    let mut raw = Raw::connect(&p).await;
    raw.send(b"GET /lookup/x HTTP/1.0\r\n\r\n").await;
    assert_eq!(
        raw.response()
            .await
            .expect("read")
            .expect("response")
            .status,
        404
    );
    assert!(raw.response().await.expect("read").is_none());

    let mut raw = Raw::connect(&p).await;
    raw.send(b"POST /unkeyed/a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        .await;
    assert_eq!(
        raw.response().await.expect("read").expect("interim").status,
        100
    );
    raw.send(b"{}").await;
    assert_eq!(
        raw.response().await.expect("read").expect("final").status,
        200
    );
}

#[tokio::test]
async fn bad_framing_and_limits_are_refused() {
    let options = FakeProviderOptions {
        max_header_bytes: 1024,
        max_body_bytes: 16,
        ..Default::default()
    };
    let p = FakeProvider::start(options).expect("start");
    let cases: [(Vec<u8>, u16); 7] = [
        (
            b"POST /keyed/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            411,
        ),
        (
            b"POST /keyed/a HTTP/1.1\r\nIdempotency-Key: k\r\n\r\n".to_vec(),
            411,
        ),
        (
            format!("GET /x HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(2000)).into_bytes(),
            431,
        ),
        (
            b"POST /unkeyed/a HTTP/1.1\r\nContent-Length: 17\r\n\r\n".to_vec(),
            413,
        ),
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (b"GET /x HTTP/1.1\r\nX-Bad: a\x01b\r\n\r\n".to_vec(), 400),
        (b"GET /x HTTP/2.0\r\n\r\n".to_vec(), 505),
    ];
    for (request, status) in cases {
        let mut raw = Raw::connect(&p).await;
        raw.send(&request).await;
        let resp = raw.response().await.expect("read").expect("response");
        assert_eq!(resp.status, status, "{}", String::from_utf8_lossy(&request));
        assert_eq!(resp.header("connection"), Some("close"));
    }
    assert_eq!(p.effect_count(), 0);
}

#[tokio::test]
async fn records_keep_headers_body_order_and_custom_header_name() {
    let options = FakeProviderOptions {
        idempotency_header: "X-Op-Key".into(),
        ..Default::default()
    };
    let p = FakeProvider::start(options).expect("start");
    let c = client();
    let resp = c
        .post(p.url("/keyed/t"))
        .header("x-op-KEY", "op-9")
        .body("hello")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let (status, _) = post(&c, &p, "/keyed/t", Some("ignored-header")).await;
    assert_eq!(status, 400, "Idempotency-Key is not the configured header");
    let records = p.requests();
    assert_eq!(records.len(), 2);
    let first = &records[0];
    assert_eq!((first.seq, records[1].seq), (1, 2));
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/keyed/t");
    assert_eq!(first.idempotency_key.as_deref(), Some("op-9"));
    assert_eq!(first.header("X-OP-KEY"), Some("op-9"));
    assert!(first
        .headers
        .iter()
        .any(|(n, v)| n == "x-op-key" && v == "op-9"));
    assert_eq!(&first.body[..], b"hello");
    assert_eq!(first.fault, None);
    assert_eq!(p.effects_for_key("op-9")[0].reference, "ref_1");
}

#[tokio::test]
async fn unrecorded_mode_still_counts() {
    let options = FakeProviderOptions {
        record_requests: false,
        ..Default::default()
    };
    let p = FakeProvider::start(options).expect("start");
    let c = client();
    post(&c, &p, "/keyed/a", Some("k")).await;
    post(&c, &p, "/keyed/a", Some("k")).await;
    assert!(p.requests().is_empty());
    assert_eq!(p.request_count(), 2);
    assert_eq!(p.request_count_for_key("k"), 2);
    assert_eq!(p.effect_count(), 1);
}

#[tokio::test]
async fn wait_helpers_wake_on_work_and_time_out_without_it() {
    let p = start();
    assert!(!p.wait_for_effects(1, Duration::from_millis(50)).await);
    let (c, q) = (client(), p.clone());
    let sender = tokio::spawn(async move {
        for i in 0..3 {
            post(&c, &q, "/keyed/a", Some(&format!("w{i}"))).await;
        }
    });
    assert!(p.wait_for_effects(3, LIMIT).await);
    assert!(p.wait_for_requests(3, LIMIT).await);
    sender.await.expect("sender");
}

#[tokio::test]
async fn latency_delays_every_request() {
    let p = start();
    p.set_latency(Duration::from_millis(150));
    let c = client();
    let began = Instant::now();
    post(&c, &p, "/unkeyed/a", None).await;
    assert!(began.elapsed() >= Duration::from_millis(150));
    p.set_latency(Duration::ZERO);
}
