//! The invariant check every dispatcher scenario ends with (see `outboxd::checker`).

use outboxd::checker::{check, CheckReport};

use super::harness::Harness;

/// Runs the checker, prints its counts, and fails the test on any violation.
pub async fn assert_invariants(h: &Harness) -> CheckReport {
    let report = check(h.store.as_ref(), &h.provider, &h.actions, false)
        .await
        .expect("checker");
    println!("invariants ({}): {report}", h.store.backend());
    assert!(report.is_clean(), "invariant violations: {report}");
    report
}
