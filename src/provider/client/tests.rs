//! Client tests against a scripted HTTP server on 127.0.0.1 ([`super::test_server`]).

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use super::test_server::{response, start, Reply, TestServer};
use super::*;
use crate::provider::{classify, ClassifyContext, ResponseBody, RetryAfter};

const KEY: &str = "tenant-a:op-42";

fn settings_for(server: &TestServer, path: &str) -> ProviderSettings {
    let mut settings = ProviderSettings::new("test", server.url(path));
    settings.allow_private_addresses = true;
    settings.connect_timeout = Duration::from_secs(2);
    settings.request_timeout = Duration::from_secs(10);
    settings
}

fn refund() -> DeliveryRequest {
    DeliveryRequest::json(Method::POST, "/refunds", KEY, &json!({"amount": 1200}))
}

fn class_of(client: &ProviderClient, observation: &Observation) -> AttemptClass {
    let ctx = ClassifyContext {
        retry_safety: crate::action::RetrySafety::IdempotentWithKey,
        reference_pointer: Some("/id"),
        status_overrides: client.status_overrides(),
    };
    classify(observation, &ctx).class
}

#[tokio::test]
async fn delivers_json_with_key_headers_and_signature() {
    let reply = response(
        "201 Created",
        &["Content-Type: application/json"],
        r#"{"id":"re_1"}"#,
    );
    let mut server = start(reply).await;
    let mut settings = settings_for(&server, "/v1/");
    settings.headers = vec![("Authorization".into(), "Bearer s3cret".into())];
    let secret = b"0123456789abcdef0123456789abcdef".to_vec();
    settings.signing_secret = Some(secret.clone());
    let client = ProviderClient::new(&settings).unwrap();

    let observation = client.send(&refund()).await;
    let ctx = ClassifyContext {
        retry_safety: crate::action::RetrySafety::IdempotentWithKey,
        reference_pointer: Some("/id"),
        status_overrides: client.status_overrides(),
    };
    let classified = classify(&observation, &ctx);
    assert_eq!(classified.class, AttemptClass::Delivered, "{observation:?}");
    assert_eq!(classified.provider_ref.as_deref(), Some("re_1"));

    let request = server.requests.recv().await.unwrap();
    assert_eq!(request.request_line, "POST /v1/refunds HTTP/1.1");
    assert_eq!(request.body, br#"{"amount":1200}"#);
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("idempotency-key"), Some(KEY));
    assert_eq!(request.header("authorization"), Some("Bearer s3cret"));
    assert_eq!(request.header("webhook-id"), Some(KEY));
    let timestamp: i64 = request
        .header("webhook-timestamp")
        .unwrap()
        .parse()
        .unwrap();
    assert!((chrono::Utc::now().timestamp() - timestamp).abs() < 60);
    let expected = signing::sign(&secret, KEY, timestamp, &request.body);
    assert_eq!(request.header("webhook-signature"), Some(expected.as_str()));
}

#[tokio::test]
async fn retry_after_is_read_and_redirects_are_not_followed() {
    let mut server = start(response("503 Service Unavailable", &["Retry-After: 7"], "")).await;
    let client = ProviderClient::new(&settings_for(&server, "/")).unwrap();
    let observation = client.send(&refund()).await;
    let Observation::Response {
        status: 503,
        retry_after,
        ..
    } = observation
    else {
        panic!("{observation:?}");
    };
    assert_eq!(retry_after, Some(RetryAfter::Delay(Duration::from_secs(7))));
    server.requests.recv().await.unwrap();

    let location = format!("Location: http://{}/elsewhere", server.addr);
    let mut server = start(response("303 See Other", &[&location], "")).await;
    let client = ProviderClient::new(&settings_for(&server, "/")).unwrap();
    let observation = client.send(&refund()).await;
    assert!(
        matches!(observation, Observation::Response { status: 303, .. }),
        "{observation:?}"
    );
    assert_eq!(class_of(&client, &observation), AttemptClass::Ambiguous);
    server.requests.recv().await.unwrap();
    assert!(
        server.requests.try_recv().is_err(),
        "the redirect was followed"
    );
}

#[tokio::test]
async fn endless_and_oversized_bodies_stop_at_the_cap() {
    let server = start(Reply::Endless).await;
    let mut settings = settings_for(&server, "/");
    settings.max_response_bytes = 64 * 1024;
    let client = ProviderClient::new(&settings).unwrap();
    let observation = client.send(&refund()).await;
    let Observation::Response {
        status: 200, body, ..
    } = &observation
    else {
        panic!("{observation:?}");
    };
    assert_eq!(*body, ResponseBody::TooLarge { limit: 64 * 1024 });
    assert_eq!(class_of(&client, &observation), AttemptClass::Ambiguous);

    // A declared length over the cap is refused before reading (the body never comes).
    let head = "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n".to_owned();
    let server = start(Reply::Raw(head)).await;
    let mut settings = settings_for(&server, "/");
    settings.max_response_bytes = 1000;
    let client = ProviderClient::new(&settings).unwrap();
    let observation = client.send(&refund()).await;
    let Observation::Response { body, .. } = observation else {
        panic!("{observation:?}")
    };
    assert_eq!(body, ResponseBody::TooLarge { limit: 1000 });
}

#[tokio::test]
async fn connection_refused_is_not_sent() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut settings =
        ProviderSettings::new("gone", url::Url::parse(&format!("http://{addr}/")).unwrap());
    settings.allow_private_addresses = true;
    let client = ProviderClient::new(&settings).unwrap();
    let observation = client.send(&refund()).await;
    assert!(
        matches!(observation, Observation::ConnectFailed { .. }),
        "{observation:?}"
    );
    assert_eq!(class_of(&client, &observation), AttemptClass::NotSent);
}

#[tokio::test]
async fn a_failed_tls_handshake_is_not_sent() {
    // An HTTPS provider whose server does not speak TLS (it answers the ClientHello with
    // plain HTTP): the handshake fails before any request byte is written.
    let server = start(response("200 OK", &[], "{}")).await;
    let mut https = server.url("/");
    https.set_scheme("https").unwrap();
    let mut settings = ProviderSettings::new("tls", https);
    settings.allow_private_addresses = true;
    settings.connect_timeout = Duration::from_secs(2);
    let client = ProviderClient::new(&settings).unwrap();
    let observation = client.send(&refund()).await;
    assert!(
        matches!(observation, Observation::ConnectFailed { .. }),
        "{observation:?}"
    );
    assert_eq!(class_of(&client, &observation), AttemptClass::NotSent);
}

#[tokio::test]
async fn timeout_or_reset_after_sending_is_ambiguous() {
    let mut server = start(Reply::Hang).await;
    let mut settings = settings_for(&server, "/");
    settings.connect_timeout = Duration::from_millis(100);
    settings.request_timeout = Duration::from_millis(300);
    let client = ProviderClient::new(&settings).unwrap();
    let observation = client.send(&refund()).await;
    assert!(
        matches!(
            observation,
            Observation::SendFailed {
                timed_out: true,
                ..
            }
        ),
        "{observation:?}"
    );
    assert_eq!(class_of(&client, &observation), AttemptClass::Ambiguous);
    assert!(
        server.requests.recv().await.is_some(),
        "the request did reach the server"
    );

    let mut server = start(Reply::Close).await;
    let client = ProviderClient::new(&settings_for(&server, "/")).unwrap();
    let observation = client.send(&refund()).await;
    assert!(
        matches!(
            observation,
            Observation::SendFailed {
                timed_out: false,
                ..
            }
        ),
        "{observation:?}"
    );
    assert_eq!(class_of(&client, &observation), AttemptClass::Ambiguous);
    assert!(server.requests.recv().await.is_some());
}

#[tokio::test]
async fn private_addresses_are_refused_without_reaching_the_listener() {
    let mut server = start(response("200 OK", &[], r#"{"id":"x"}"#)).await;

    let mut literal = settings_for(&server, "/");
    literal.allow_private_addresses = false;
    let error = ProviderClient::new(&literal).unwrap_err();
    assert!(
        matches!(error, ProviderError::NonPublicBaseUrl(_)),
        "{error:?}"
    );

    let by_name = url::Url::parse(&format!("http://localhost:{}/", server.addr.port())).unwrap();
    let client = ProviderClient::new(&ProviderSettings::new("by-name", by_name)).unwrap();
    let observation = client.send(&refund()).await;
    let Observation::Refused { reason } = &observation else {
        panic!("{observation:?}")
    };
    assert!(reason.contains("Loopback"), "{reason}");
    assert_eq!(class_of(&client, &observation), AttemptClass::NotSent);

    // The allowed client's connection is the first and only one the listener ever saw.
    let allowed = ProviderClient::new(&settings_for(&server, "/")).unwrap();
    let observation = allowed.send(&refund()).await;
    assert_eq!(
        class_of(&allowed, &observation),
        AttemptClass::Delivered,
        "{observation:?}"
    );
    server.requests.recv().await.unwrap();
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn an_invalid_key_is_refused_before_sending() {
    let server = start(response("200 OK", &[], "")).await;
    let client = ProviderClient::new(&settings_for(&server, "/")).unwrap();
    let request = DeliveryRequest::json(Method::POST, "/", "bad\nkey", &json!({}));
    let observation = client.send(&request).await;
    assert!(
        matches!(observation, Observation::Refused { .. }),
        "{observation:?}"
    );
}
