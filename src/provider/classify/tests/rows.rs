//! The rows of the classification table: one per rule of the default table, the
//! reference-pointer cases, and per-provider overrides.

use super::*;

pub(super) fn transport_rows() -> Vec<Row> {
    let connect = Observation::ConnectFailed {
        error: "connection refused".into(),
    };
    let refused = Observation::Refused {
        reason: "127.0.0.1 is a private address".into(),
    };
    let timed_out = Observation::SendFailed {
        error: "operation timed out".into(),
        timed_out: true,
    };
    let reset = Observation::SendFailed {
        error: "connection reset".into(),
        timed_out: false,
    };
    vec![
        row("connect failure", connect, NotSent).error("could not connect: connection refused"),
        row("local rate limit", Observation::LocallyRateLimited, NotSent).error("rate limit"),
        row("refused", refused, NotSent).error("refused to send: 127.0.0.1"),
        row("timeout after send", timed_out, Ambiguous)
            .error("request timed out after it was sent"),
        row("reset after send", reset, Ambiguous).error("connection reset"),
    ]
}

pub(super) fn success_rows() -> Vec<Row> {
    let too_large = ResponseBody::TooLarge { limit: 1024 };
    let read_failed = ResponseBody::ReadFailed("connection reset".into());
    vec![
        row(
            "2xx, no pointer, body ignored",
            response(200, "<html>"),
            Delivered,
        ),
        row("204, no pointer", response(204, ""), Delivered),
        row(
            "2xx too large, no pointer",
            response_body(200, too_large.clone()),
            Delivered,
        ),
        row(
            "2xx string ref",
            response(201, r#"{"id":"re_123"}"#),
            Delivered,
        )
        .pointer("/id")
        .reference("re_123"),
        row(
            "2xx number ref",
            response(200, r#"{"data":{"id":12345}}"#),
            Delivered,
        )
        .pointer("/data/id")
        .reference("12345"),
        row("2xx not JSON", response(200, "<html>"), Ambiguous)
            .pointer("/id")
            .error("not JSON"),
        row(
            "2xx missing ref",
            response(200, r#"{"ok":true}"#),
            Ambiguous,
        )
        .pointer("/id")
        .error("no provider reference at /id"),
        row(
            "2xx ref is object",
            response(200, r#"{"id":{}}"#),
            Ambiguous,
        )
        .pointer("/id")
        .error("an object, not a string or number"),
        row(
            "2xx ref empty string",
            response(200, r#"{"id":""}"#),
            Ambiguous,
        )
        .pointer("/id")
        .error("an empty string"),
        row("2xx ref null", response(200, r#"{"id":null}"#), Ambiguous)
            .pointer("/id")
            .error("null"),
        row("2xx too large", response_body(200, too_large), Ambiguous)
            .pointer("/id")
            .error("exceeds 1024 bytes"),
        row(
            "2xx read failed",
            response_body(200, read_failed),
            Ambiguous,
        )
        .pointer("/id")
        .error("reading the body failed"),
    ]
}

pub(super) fn status_rows() -> Vec<Row> {
    let mut rows = vec![
        row("408", response(408, ""), Retryable).error("HTTP 408 Request Timeout"),
        row(
            "429 with Retry-After",
            response_with_retry_after(429, 30),
            Retryable,
        )
        .error("HTTP 429 with Retry-After 30s"),
        row("429 without Retry-After", response(429, ""), Retryable),
        row(
            "503 with Retry-After",
            response_with_retry_after(503, 2),
            Retryable,
        )
        .error("HTTP 503 with Retry-After 2s"),
        row("503 without Retry-After", response(503, ""), Ambiguous)
            .error("HTTP 503 without Retry-After"),
        row("409 keyed: in progress", response(409, ""), Retryable)
            .safety(IdempotentWithKey)
            .error("still in progress"),
        row("409 not idempotent", response(409, ""), Rejected).error("HTTP 409 Conflict"),
        row("409 safe always", response(409, ""), Rejected).safety(SafeAlways),
        row(
            "422 quotes the body",
            response(422, "{\"error\":\n \"amount must be > 0\"}"),
            Rejected,
        )
        .error("HTTP 422 Unprocessable Entity: {\"error\": \"amount must be > 0\"}"),
        row("303 after POST", response(303, ""), Ambiguous).error("redirects are not followed"),
        row("101", response(101, ""), Ambiguous),
        row("status 0", response(0, ""), Ambiguous).error("not a valid status code"),
        row("status 600", response(600, ""), Ambiguous).error("not a valid status code"),
    ];
    for status in [400, 401, 403, 404, 410, 418, 451, 499] {
        rows.push(row("other 4xx", response(status, ""), Rejected));
    }
    for status in [500, 501, 502, 504, 507, 599] {
        rows.push(row("other 5xx", response(status, ""), Ambiguous));
    }
    for status in [300, 301, 302, 304, 307, 308] {
        rows.push(row("3xx", response(status, ""), Ambiguous));
    }
    rows
}

pub(super) fn override_rows() -> Vec<Row> {
    vec![
        row("override 500 → retryable", response(500, ""), Retryable)
            .overriding(500, Retryable)
            .error("classified retryable by provider override"),
        row(
            "override 200 → rejected",
            response(200, r#"{"id":"x"}"#),
            Rejected,
        )
        .pointer("/id")
        .overriding(200, Rejected),
        row(
            "override 409 → delivered, ref read",
            response(409, r#"{"id":"ch_1"}"#),
            Delivered,
        )
        .pointer("/id")
        .overriding(409, Delivered)
        .reference("ch_1"),
        row(
            "override 409 → delivered, no ref",
            response(409, "{}"),
            Ambiguous,
        )
        .pointer("/id")
        .overriding(409, Delivered)
        .error("no provider reference"),
        row(
            "override other status leaves 404",
            response(404, ""),
            Rejected,
        )
        .overriding(500, Retryable),
    ]
}
