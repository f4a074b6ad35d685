//! One test per validation rule of `[actions.*]`, retries and probes (errors and warnings).

use super::{assert_rejected, load_ok, toml_with, warnings_of, Case};

#[test]
fn action_rules() {
    let key = |k: &str| format!("actions.issue_refund.{k}");
    let cases: [Case; 7] = [
        (
            &[("provider", "\"nope\"")],
            "provider",
            "\"nope\" is not defined under [providers]",
        ),
        (&[("provider", "\"\"")], "provider", "is required"),
        (&[("method", "\"post\"")], "method", "not an HTTP method"),
        (&[("method", "\"FETCH\"")], "method", "not an HTTP method"),
        (
            &[("path", "\"v1/refunds\"")],
            "path",
            "must start with \"/\"",
        ),
        (
            &[("path", "\"/v1/{id}\"")],
            "path",
            "only supported in probe paths",
        ),
        (
            &[("reference_pointer", "\"id\"")],
            "reference_pointer",
            "not a JSON pointer",
        ),
    ];
    for (action, k, fragment) in cases {
        assert_rejected(&toml_with(&[], action, ""), &key(k), fragment);
    }
    let bad_name = "[actions.\"issue refund\"]\nprovider = \"payments\"\npath = \"/x\"\nretry_safety = \"safe_always\"\n";
    assert_rejected(
        &toml_with(&[], &[], bad_name),
        "actions.issue refund",
        "only ASCII letters",
    );
    let toml = toml_with(&[], &[("retry_safety", "\"maybe\"")], "");
    assert_rejected(&toml, "actions.issue_refund.retry_safety", "is not one of");
    load_ok(
        &toml_with(
            &[],
            &[("reference_pointer", "\"\""), ("method", "\"PUT\"")],
            "",
        ),
        &[],
    );
}

#[test]
fn retry_rules() {
    let retry = |lines: &str| {
        toml_with(
            &[],
            &[],
            &format!("[actions.issue_refund.retry]\n{lines}\n"),
        )
    };
    let key = |k: &str| format!("actions.issue_refund.retry.{k}");
    assert_rejected(
        &retry("max_attempts = 0"),
        &key("max_attempts"),
        "at least 1",
    );
    assert_rejected(
        &retry("initial_backoff = \"10m\"\nmax_backoff = \"5m\""),
        &key("initial_backoff"),
        "10m is longer than max_backoff (5m)",
    );
    for field in [
        "initial_backoff",
        "max_backoff",
        "deadline",
        "max_retry_after",
    ] {
        assert_rejected(
            &retry(&format!("{field} = \"0s\"")),
            &key(field),
            "longer than zero",
        );
    }
    load_ok(
        &retry("max_attempts = 1\ninitial_backoff = \"5m\"\nmax_backoff = \"5m\""),
        &[],
    );
}

#[test]
fn keyed_deadline_beyond_key_retention_is_a_warning() {
    let toml = toml_with(
        &[("key_retention", "\"24h\"")],
        &[],
        "[actions.issue_refund.retry]\ndeadline = \"48h\"\n",
    );
    let warnings = warnings_of(&toml);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert!(w.starts_with("actions.issue_refund.retry.deadline: 2d exceeds providers.payments.key_retention (24h)"), "{w}");
    assert!(
        w.contains("after 24h the provider may have forgotten the key"),
        "{w}"
    );
    assert!(
        w.contains("could apply twice") && w.contains("reconciliation instead of retrying"),
        "{w}"
    );

    let equal = toml_with(
        &[],
        &[],
        "[actions.issue_refund.retry]\ndeadline = \"24h\"\n",
    );
    assert!(warnings_of(&equal).is_empty());
    let unkeyed = toml_with(
        &[],
        &[("retry_safety", "\"not_idempotent\"")],
        "[actions.issue_refund.retry]\ndeadline = \"48h\"\n",
    );
    assert!(warnings_of(&unkeyed).is_empty());
}

#[test]
fn probe_rules() {
    let probe = |lines: &str| {
        toml_with(
            &[],
            &[],
            &format!("[actions.issue_refund.probe]\n{lines}\n"),
        )
    };
    let key = |k: &str| format!("actions.issue_refund.probe.{k}");
    assert_rejected(
        &probe("path = \"/v1/refunds?order={order_id}\""),
        &key("path"),
        "unknown placeholder {order_id}",
    );
    assert_rejected(
        &probe("path = \"/v1/refunds/{tenant\""),
        &key("path"),
        "without a matching",
    );
    assert_rejected(
        &probe("path = \"/v1/refunds/tenant}\""),
        &key("path"),
        "without a matching",
    );
    assert_rejected(
        &probe("path = \"v1/{tenant}\""),
        &key("path"),
        "must start with",
    );
    assert_rejected(
        &probe("path = \"/{tenant}\"\nmethod = \"get\""),
        &key("method"),
        "not an HTTP method",
    );
    assert_rejected(
        &probe("path = \"/{tenant}\"\nreference_pointer = \"id\""),
        &key("reference_pointer"),
        "not a JSON pointer",
    );
    assert_rejected(
        &probe("path = \"/{tenant}\"\nnot_found_status = [404, 700]"),
        &key("not_found_status"),
        "700 is not an HTTP status",
    );
    assert_rejected(
        &probe("path = \"/{tenant}\"\nnot_found_means = \"gone\""),
        &key("not_found_means"),
        "is not one of",
    );

    let ok = probe(
        "path = \"/v1/refunds?k={idempotency_key}&o={operation_id}&t={tenant}&i={intent_id}\"",
    );
    let config = load_ok(&ok, &[]).config;
    let p = config.actions["issue_refund"].probe.clone().unwrap();
    assert_eq!(p.method, "GET");
    assert!(p.is_not_found(404));
    assert_eq!(p.not_found_means, crate::config::NotFoundMeaning::Unknown);
    let warnings = warnings_of(&probe("path = \"/v1/refunds\""));
    assert!(warnings[0].contains("has no placeholder"), "{warnings:?}");
}
