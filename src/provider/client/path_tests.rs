//! A path placeholder can never change the shape of the request URL: every value filled
//! into `{tenant}`, `{operation_id}` or `{idempotency_key}` by
//! [`crate::provider::path::render_path`] reaches the provider as exactly one path
//! segment (or one query value) that decodes back to the value, after the client joins it
//! to the base URL. Values a URL parser would collapse (`.`, `..`) are refused unsent.

use std::time::Duration;

use reqwest::Method;

use super::test_server::{response, start};
use super::*;
use crate::provider::path::{render_path, PathFields};

/// Values that would change a path's shape if they were not encoded strictly.
const HOSTILE: &[&str] = &[
    "a/b",
    "a?b=c",
    "a#frag",
    "100%",
    "%2e%2e",
    "a b",
    "a+b",
    "a\\b",
    "ünï€ode",
    "a..b",
    "...",
    "{tenant}",
    ";x=1",
    "a&b=c",
];

fn fields(value: &str) -> PathFields<'_> {
    PathFields {
        tenant: "acme",
        operation_id: value,
        idempotency_key: value,
        intent_id: 7,
    }
}

/// `%XX` → byte; everything else as is (`+` stays `+`: this is a path, not a form).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("UTF-8")
}

#[tokio::test]
async fn placeholders_stay_inside_one_segment_after_the_base_url_join() {
    let mut server = start(response("200 OK", &[], "{}")).await;
    let mut settings = ProviderSettings::new("p", server.url("/v1/"));
    settings.allow_private_addresses = true;
    settings.request_timeout = Duration::from_secs(10);
    let client = ProviderClient::new(&settings).unwrap();
    let template = "/lookup/{operation_id}/status?key={idempotency_key}&t={tenant}";
    for value in HOSTILE {
        let request = DeliveryRequest {
            method: Method::GET,
            path: render_path(template, fields(value)),
            idempotency_key: "k".into(),
            body: Default::default(),
        };
        let observation = client.send(&request).await;
        assert!(
            matches!(observation, Observation::Response { .. }),
            "{value:?}: {observation:?}"
        );
        let captured = server.requests.recv().await.unwrap();
        let target = captured.request_line.split(' ').nth(1).unwrap().to_owned();
        let (path, query) = target.split_once('?').expect("a query");
        let segments: Vec<&str> = path.split('/').collect();
        assert_eq!(segments.len(), 5, "{value:?} changed the path: {target}");
        assert_eq!(
            (segments[0], segments[1], segments[2], segments[4]),
            ("", "v1", "lookup", "status"),
            "{value:?}: {target}"
        );
        assert_eq!(percent_decode(segments[3]), *value, "{target}");
        let params: Vec<&str> = query.split('&').collect();
        assert_eq!(params.len(), 2, "{value:?} changed the query: {target}");
        assert_eq!(
            params[0]
                .strip_prefix("key=")
                .map(percent_decode)
                .as_deref(),
            Some(*value),
            "{target}"
        );
        assert_eq!(params[1], "t=acme", "{target}");
    }
}

#[tokio::test]
async fn dot_segments_are_refused_unsent() {
    let server = start(response("200 OK", &[], "{}")).await;
    let mut settings = ProviderSettings::new("p", server.url("/v1/"));
    settings.allow_private_addresses = true;
    let client = ProviderClient::new(&settings).unwrap();
    for value in [".", ".."] {
        let request = DeliveryRequest {
            method: Method::GET,
            path: render_path("/lookup/{operation_id}/status", fields(value)),
            idempotency_key: "k".into(),
            body: Default::default(),
        };
        let observation = client.send(&request).await;
        assert!(
            matches!(&observation, Observation::Refused { reason } if reason.contains("segment")),
            "{value:?}: {observation:?}"
        );
    }
    assert_eq!(server.connections(), 0, "nothing was sent");
}
