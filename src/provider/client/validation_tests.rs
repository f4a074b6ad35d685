//! Client tests that need no network: building URLs from the base URL and a path, and
//! validating settings (with secrets kept out of `Debug`).

use super::*;

#[test]
fn paths_are_appended_without_changing_the_host() {
    let cases = [
        (
            "https://api.example.com",
            "/v1/refunds",
            "https://api.example.com/v1/refunds",
        ),
        (
            "https://api.example.com/v1",
            "refunds",
            "https://api.example.com/v1/refunds",
        ),
        (
            "https://api.example.com/v1/",
            "/refunds",
            "https://api.example.com/v1/refunds",
        ),
        (
            "https://api.example.com/v1/",
            "",
            "https://api.example.com/v1/",
        ),
        (
            "https://api.example.com/v1",
            "//evil.example/x",
            "https://api.example.com/v1/evil.example/x",
        ),
        (
            "https://api.example.com/v1",
            "/x?a=1",
            "https://api.example.com/v1/x?a=1",
        ),
        (
            "https://api.example.com/v1?k=2",
            "/x?a=1",
            "https://api.example.com/v1/x?k=2&a=1",
        ),
    ];
    for (base, path, expected) in cases {
        let url = url_for(&Url::parse(base).unwrap(), path);
        assert_eq!(url.as_str(), expected, "{base} + {path}");
    }
}

#[test]
fn settings_are_validated_and_secrets_redacted() {
    let base = Url::parse("https://api.example.com/").unwrap();
    let mut settings = ProviderSettings::new("p", base);
    settings.headers = vec![("Authorization".into(), "Bearer s3cret".into())];
    settings.signing_secret = Some(b"k3y-bytes".to_vec());
    let debug = format!("{settings:?}");
    assert!(
        !debug.contains("s3cret") && !debug.contains("k3y"),
        "{debug}"
    );
    assert!(ProviderClient::new(&settings).is_ok());

    let invalid = |change: fn(&mut ProviderSettings)| {
        let mut copy = settings.clone();
        change(&mut copy);
        ProviderClient::new(&copy).unwrap_err()
    };
    let error = invalid(|s| s.connect_timeout = s.request_timeout);
    assert!(matches!(
        error,
        ProviderError::ConnectTimeoutNotShorter { .. }
    ));
    let error = invalid(|s| s.headers.push(("idempotency-key".into(), "x".into())));
    assert!(matches!(error, ProviderError::ReservedHeader { .. }));
    let error = invalid(|s| s.headers.push(("Content-Type".into(), "text/plain".into())));
    assert!(matches!(error, ProviderError::ReservedHeader { .. }));
    let error = invalid(|s| s.headers.push(("bad header".into(), "x".into())));
    assert!(matches!(error, ProviderError::InvalidHeaderName { .. }));
    let error = invalid(|s| s.headers.push(("X-Ok".into(), "bad\nvalue".into())));
    assert!(matches!(error, ProviderError::InvalidHeaderValue { .. }));
    assert!(!error.to_string().contains("bad\nvalue"));
    let error = invalid(|s| s.base_url = Url::parse("ftp://files.example.com/").unwrap());
    assert!(matches!(error, ProviderError::InvalidBaseUrl { .. }));
    let error = invalid(|s| s.idempotency_header = "Idem Key".into());
    assert!(matches!(error, ProviderError::InvalidHeaderName { .. }));
}
