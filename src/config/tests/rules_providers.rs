//! One test per validation rule of `[providers.*]` (errors and warnings).

use super::{assert_rejected, load_ok, toml_with, warnings_of, Case};

#[test]
fn provider_rules() {
    let key = |k: &str| format!("providers.payments.{k}");
    let cases: [Case; 11] = [
        (
            &[("base_url", "\"htp:/x\"")],
            "base_url",
            "\"htp:/x\" is not a valid http:// or https:// URL",
        ),
        (
            &[("base_url", "\"ftp://x\"")],
            "base_url",
            "is not a valid http",
        ),
        (&[("base_url", "\"\"")], "base_url", "is required"),
        (
            &[("base_url", "\"https://x/api?v=2\"")],
            "base_url",
            "must not have a query",
        ),
        (
            &[("base_url", "\"https://u:p@x\"")],
            "base_url",
            "must not carry credentials",
        ),
        (
            &[("idempotency_header", "\"Idempotency Key\"")],
            "idempotency_header",
            "not a valid HTTP header name",
        ),
        (
            &[("connect_timeout", "\"0s\"")],
            "connect_timeout",
            "longer than zero",
        ),
        (
            &[("key_retention", "\"0s\"")],
            "key_retention",
            "longer than zero",
        ),
        (
            &[("max_response_bytes", "0")],
            "max_response_bytes",
            "at least 1",
        ),
        (
            &[("max_response_bytes", "67108865")],
            "max_response_bytes",
            "at most 67108864 (64 MiB)",
        ),
        (
            &[("max_response_bytes", "18446744073709551615")],
            "max_response_bytes",
            "at most 67108864 (64 MiB)",
        ),
    ];
    for (provider, k, fragment) in cases {
        assert_rejected(&toml_with(provider, &[], ""), &key(k), fragment);
    }
}

#[test]
fn status_overrides_rules() {
    for status in ["99", "600", "abc"] {
        let toml = toml_with(
            &[(
                "status_overrides",
                &format!("{{ \"{status}\" = \"rejected\" }}"),
            )],
            &[],
            "",
        );
        assert_rejected(
            &toml,
            &format!("providers.payments.status_overrides.{status}"),
            "between 100 and 599",
        );
    }
    let toml = toml_with(&[("status_overrides", "{ \"409\" = \"nope\" }")], &[], "");
    assert_rejected(
        &toml,
        "providers.payments.status_overrides.409",
        "is not one of",
    );
    let toml = toml_with(
        &[(
            "status_overrides",
            "{ \"409\" = \"rejected\", \"500\" = \"retryable\" }",
        )],
        &[],
        "",
    );
    let config = load_ok(&toml, &[]).config;
    let payments = &config.providers["payments"];
    assert_eq!(
        payments.status_override(409),
        Some(crate::action::AttemptClass::Rejected)
    );
    assert_eq!(payments.status_override(404), None);
}

#[test]
fn header_rules() {
    let cases = [
        (
            "\"Bad Header\" = { value = \"x\" }",
            "providers.payments.headers.Bad Header",
            "not a valid HTTP header name",
        ),
        (
            "Idempotency-Key = { value = \"x\" }",
            "providers.payments.headers.Idempotency-Key",
            "idempotency header",
        ),
        (
            "Host = { value = \"x\" }",
            "providers.payments.headers.Host",
            "cannot be configured",
        ),
        (
            "X-Note = { value = \"a\\nb\" }",
            "providers.payments.headers.X-Note",
            "not a valid HTTP header value",
        ),
        (
            "X-Note = {}",
            "providers.payments.headers.X-Note",
            "needs one of value",
        ),
        (
            "X-Note = { value = \"a\" }\nx-note = { value = \"b\" }",
            "providers.payments.headers.x-note",
            "repeats header \"X-Note\" (names are case-insensitive",
        ),
    ];
    for (line, key, fragment) in cases {
        assert_rejected(
            &toml_with(&[], &[], &format!("[providers.payments.headers]\n{line}\n")),
            key,
            fragment,
        );
    }
}

#[test]
fn provider_warnings() {
    let warnings = warnings_of(&toml_with(
        &[("base_url", "\"http://payments.internal\"")],
        &[],
        "",
    ));
    assert!(
        warnings.iter().any(|w| w.contains("plain http")),
        "{warnings:?}"
    );
    assert!(warnings_of(&toml_with(
        &[("base_url", "\"http://localhost:9000\"")],
        &[],
        ""
    ))
    .is_empty());
    let unused = "[providers.spare]\nbase_url = \"https://spare.example.com\"\n";
    let warnings = warnings_of(&toml_with(&[], &[], unused));
    assert_eq!(
        warnings,
        ["providers.spare: no action uses this provider (from inline TOML)"]
    );
}

/// A request is sent only while its lease covers the request timeout plus the send margin,
/// so a lease shorter than both is refused (the default lease is 30 s, the margin 1 s).
#[test]
fn lease_must_cover_request_timeout_plus_margin() {
    assert_rejected(
        &toml_with(&[("request_timeout", "\"29500ms\"")], &[], ""),
        "providers.payments.request_timeout",
        "29500ms plus the 1s send margin (30500ms) is longer than dispatcher.lease (30s)",
    );
    // Exactly enough is accepted, with a warning: any late start hands the claim back.
    let fits = toml_with(&[("request_timeout", "\"29s\"")], &[], "");
    let warnings = warnings_of(&fits);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "dispatcher.lease: 30s is barely above providers.payments.request_timeout (29s)"
        ),
        "{warnings:?}"
    );
    let roomy = toml_with(&[("request_timeout", "\"20s\"")], &[], "");
    assert!(warnings_of(&roomy).is_empty(), "{:?}", warnings_of(&roomy));
}

#[test]
fn max_in_flight_defaults_to_an_equal_share_of_concurrency() {
    let one = load_ok(super::BASE, &[]).config;
    assert_eq!(
        one.max_in_flight("payments"),
        256,
        "one provider: every slot"
    );
    let two = format!(
        "[dispatcher]\nconcurrency = 40\n{}\n[providers.mail]\nbase_url = \"https://mail.example.com\"\nmax_in_flight = 7\n",
        super::BASE
    );
    let two = load_ok(&two, &[]).config;
    assert_eq!(two.max_in_flight("payments"), 20, "40 slots, two providers");
    assert_eq!(two.max_in_flight("mail"), 7, "as configured");
}
