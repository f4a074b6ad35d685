//! Tests of the fake provider's endpoints (keyed dedup, unkeyed, lookup, 404), plus the
//! helpers the other test files share: a reqwest client and a small raw-socket client.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// Upper bound for anything a test waits on.
pub(super) const LIMIT: Duration = Duration::from_secs(10);

pub(super) fn start() -> FakeProvider {
    FakeProvider::start(FakeProviderOptions::default()).expect("start fake provider")
}

/// reqwest panics building a client before a rustls provider is installed.
pub(super) fn install_crypto_provider() {
    // Err: already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub(super) fn client() -> reqwest::Client {
    install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(LIMIT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

pub(super) async fn post(
    c: &reqwest::Client,
    p: &FakeProvider,
    path: &str,
    key: Option<&str>,
) -> (u16, Value) {
    let mut req = c.post(p.url(path)).json(&serde_json::json!({"amount": 5}));
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("json body"))
}

/// A parsed response from the raw client.
#[derive(Debug)]
pub(super) struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A plain TCP client that keeps leftover bytes between responses.
pub(super) struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub async fn connect(p: &FakeProvider) -> Raw {
        let stream = TcpStream::connect(p.addr()).await.expect("connect");
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write request");
    }

    /// Reads more bytes; `Ok(0)` at EOF.
    async fn fill(&mut self) -> std::io::Result<usize> {
        let mut chunk = [0u8; 8192];
        let n = tokio::time::timeout(LIMIT, self.stream.read(&mut chunk))
            .await
            .expect("read timed out")?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next response (Content-Length framed), or `Ok(None)` if the server closed first.
    pub async fn response(&mut self) -> std::io::Result<Option<RawResponse>> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.fill().await? == 0 {
                assert!(self.buf.is_empty(), "partial response: {:?}", self.buf);
                return Ok(None);
            }
        };
        let head = String::from_utf8(self.buf[..head_end].to_vec()).expect("ascii head");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(0, |(_, v)| v.parse().expect("length"));
        while self.buf.len() < head_end + len {
            assert!(self.fill().await? > 0, "body cut short");
        }
        let body = self.buf[head_end..head_end + len].to_vec();
        self.buf.drain(..head_end + len);
        Ok(Some(RawResponse {
            status,
            headers,
            body,
        }))
    }
}

pub(super) fn keyed_request(key: &str, extra: &str) -> Vec<u8> {
    let body = r#"{"amount":5}"#;
    format!(
        "POST /keyed/refunds HTTP/1.1\r\nHost: x\r\nIdempotency-Key: {key}\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn keyed_same_key_twice_gives_one_effect_and_the_same_reference() {
    let p = start();
    let c = client();
    let (s1, b1) = post(&c, &p, "/keyed/refunds", Some("k-1")).await;
    let (s2, b2) = post(&c, &p, "/keyed/refunds", Some("k-1")).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(b1["id"], "ref_1");
    assert_eq!(b1["idempotency_key"], "k-1");
    assert_eq!(b1["replayed"], false);
    assert_eq!(b2["id"], "ref_1");
    assert_eq!(b2["replayed"], true);
    assert_eq!(p.effect_count(), 1);
    assert_eq!(p.effects_for_key("k-1").len(), 1);
    assert_eq!(p.request_count_for_key("k-1"), 2);
    assert_eq!(p.reference_for_key("k-1").as_deref(), Some("ref_1"));
    let (_, b3) = post(&c, &p, "/keyed/other", Some("k-2")).await;
    assert_eq!(b3["id"], "ref_2");
    assert_eq!(
        p.effects()[0].json(),
        Some(serde_json::json!({"amount": 5}))
    );
}

#[tokio::test]
async fn keyed_without_key_is_400_and_applies_nothing() {
    let p = start();
    let (status, body) = post(&client(), &p, "/keyed/refunds", None).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "missing_idempotency_key");
    assert_eq!(p.effect_count(), 0);
    assert_eq!(p.request_count(), 1);
}

#[tokio::test]
async fn unkeyed_applies_every_request() {
    let p = start();
    let c = client();
    let (_, b1) = post(&c, &p, "/unkeyed/notify", Some("k")).await;
    let (_, b2) = post(&c, &p, "/unkeyed/notify", Some("k")).await;
    assert_eq!(
        (b1["id"].as_str(), b2["id"].as_str()),
        (Some("ref_1"), Some("ref_2"))
    );
    assert_eq!(b2["replayed"], false);
    assert_eq!(p.effect_count(), 2);
    assert_eq!(
        p.effects_for_key("k").len(),
        2,
        "unkeyed effects still carry the key"
    );
    assert_eq!(p.reference_for_key("k"), None, "no keyed effect");
}

#[tokio::test]
async fn lookup_finds_keyed_effects_only() {
    let p = start();
    let c = client();
    post(&c, &p, "/keyed/x", Some("a b/c")).await;
    let found = c
        .get(p.url("/lookup/a%20b%2Fc"))
        .send()
        .await
        .expect("lookup");
    assert_eq!(found.status().as_u16(), 200);
    let found: Value = found.json().await.expect("json");
    assert_eq!(found, serde_json::json!({"id": "ref_1"}));
    let missing = c.get(p.url("/lookup/nope")).send().await.expect("lookup");
    assert_eq!(missing.status().as_u16(), 404);
    let missing: Value = missing.json().await.expect("json");
    assert_eq!(missing["error"], "not_found");
}

#[tokio::test]
async fn other_routes_are_404() {
    let p = start();
    let c = client();
    for (method, path) in [
        ("GET", "/keyed/x"),
        ("POST", "/nope"),
        ("POST", "/keyed"),
        ("GET", "/lookup/"),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let resp = c
            .request(method, p.url(path))
            .body("{}")
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 404, "{path}");
    }
    assert_eq!(p.effect_count(), 0);
}

#[tokio::test]
async fn a_key_past_its_expiry_is_forgotten_and_applies_again() {
    let p = start();
    let c = client();
    p.set_key_expiry(Some(Duration::from_secs(3600)));
    let (_, first) = post(&c, &p, "/keyed/refunds", Some("k-remembered")).await;
    let (_, again) = post(&c, &p, "/keyed/refunds", Some("k-remembered")).await;
    assert_eq!(
        (again["id"].clone(), again["replayed"].clone()),
        (first["id"].clone(), Value::Bool(true))
    );
    assert_eq!(p.effect_count(), 1);
    // An expiry of zero: every key is already forgotten when the next request arrives.
    p.set_key_expiry(Some(Duration::ZERO));
    let (status, second) = post(&c, &p, "/keyed/refunds", Some("k-remembered")).await;
    assert_eq!(status, 200);
    assert_eq!(second["replayed"], Value::Bool(false));
    assert_ne!(
        second["id"], first["id"],
        "a forgotten key applies a second effect"
    );
    assert_eq!(p.effects_for_key("k-remembered").len(), 2);
    p.set_key_expiry(None);
    let (_, third) = post(&c, &p, "/keyed/refunds", Some("k-remembered")).await;
    assert_eq!(third["id"], second["id"], "remembered for ever again");
}
