//! `outboxd demo` as a newcomer runs it: the real binary, no configuration, exit 0, the
//! story's key lines for the buyer's four cases (a response lost after commit, concurrent
//! retries, a changed payload, the same key from another tenant) and the unknown outcome,
//! the printed records, one effect per key in the summary, and its temporary database gone.

use std::path::Path;
use std::process::Command;

/// The summary row of `operation`: `[key, operation, action, requests, effects, refs...]`.
fn summary_row<'a>(stdout: &'a str, operation: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.len() >= 5 && cols[0].starts_with("obx2_") && cols[1] == operation)
        .unwrap_or_else(|| panic!("no summary row for {operation}:\n{stdout}"))
}

#[test]
fn demo_tells_the_story_and_exits_zero() {
    let output = Command::new(env!("CARGO_BIN_EXE_outboxd"))
        .arg("demo")
        .env_remove("OUTBOXD_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run outboxd demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "exit {:?}; stderr:\n{stderr}",
        output.status
    );
    for line in [
        "attempt 1 → ambiguous",
        "retry with the SAME key",
        "attempt 2 → delivered (HTTP 200)",
        "two requests, one refund",
        "error: conflict: operation \"refund-order-1001\"",
        "\"replayed\":true",
        "is now unknown",
        "claims 0 intent(s): it is never resent automatically",
        "reconciliation backlog: 1 open item(s)",
        "resolved by ops-alice at",
        "why: provider's message log shows notification",
        "reconciliation backlog: 0 open",
        "lost=0 unexpected=0 duplicated=0 unaccounted_ambiguous=0",
        "checker: clean",
        "5 concurrent enqueues of refund-order-2002: 1 created, 4 replayed, one intent",
        "1 claim in total",
        "outbox rows:",
        "provider effects:",
        "tenant=globex",
        "no provider effect is shared between tenants",
    ] {
        assert!(stdout.contains(line), "missing {line:?}");
    }
    let refund = summary_row(&stdout, "refund-order-1001");
    assert_eq!(
        refund[3..6],
        ["2", "1", "ref_1"],
        "two requests, one effect"
    );
    let concurrent = summary_row(&stdout, "refund-order-2002");
    assert_eq!(concurrent[3..5], ["1", "1"], "one request, one effect");
    assert!(!stdout.contains("VIOLATION"), "{stdout}");
    // Tenant B's intent with tenant A's key has an effect of its own at the provider.
    let globex_ref = stdout
        .lines()
        .find(|l| l.contains("tenant=globex"))
        .and_then(|l| l.split("provider_ref=").nth(1))
        .map(str::trim)
        .expect("globex's outbox row");
    assert!(globex_ref.starts_with("ref_"), "{globex_ref}");
    assert_ne!(globex_ref, "ref_1", "globex got acme's effect");
    let effects_with_ref = |reference: &str| {
        stdout
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("{reference} ")))
            .count()
    };
    assert!(effects_with_ref(globex_ref) >= 1, "no effect {globex_ref}");
    assert!(effects_with_ref("ref_1") >= 1, "no effect ref_1");
    let notify = summary_row(&stdout, "notify-order-1001");
    assert_eq!(notify[3..5], ["1", "1"], "one request, never resent");
    let by_state = |state: &str| {
        stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cols| cols.len() == 2 && cols[0] == state)
            .map(|cols| cols[1].to_owned())
    };
    assert_eq!(by_state("delivered").as_deref(), Some("5"));
    assert_eq!(by_state("unknown").as_deref(), Some("0"));
    let db = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("database: "))
        .and_then(|l| l.split(" (temporary").next())
        .expect("the demo names its database");
    let dir = Path::new(db).parent().expect("database directory");
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

/// Plain-HTTP providers need no trust store: the demo (whose fake provider is plain HTTP on
/// loopback) runs on a host with no CA certificates at all.
#[test]
fn demo_runs_without_a_ca_bundle() {
    let output = Command::new(env!("CARGO_BIN_EXE_outboxd"))
        .arg("demo")
        .env_remove("OUTBOXD_CONFIG")
        .env_remove("RUST_LOG")
        .env("SSL_CERT_FILE", "/nonexistent/ca-certificates.crt")
        .env("SSL_CERT_DIR", "/nonexistent/certs")
        .output()
        .expect("run outboxd demo");
    assert!(
        output.status.success(),
        "exit {:?}; stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}
