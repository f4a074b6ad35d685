//! Fair share between tenants, on both backends, stepping the dispatcher (no timing): a
//! tenant's new intent is claimed within two claims while another tenant drains a large
//! backlog (FIFO would reach it only after the whole backlog); two busy tenants share each
//! claim; ordering keys still hold within each tenant.

use crate::support;

use std::collections::BTreeMap;

use outboxd::intent::IntentState;
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{scalar, Harness, REFUND};
use support::TestDb;

/// Intents claimed per step by the harness dispatcher: min(batch_size 50, concurrency 16).
const PER_STEP: i64 = 16;

async fn enqueue(h: &Harness, tenant: &str, op: &str) -> i64 {
    h.enqueue(NewIntent::new(
        tenant,
        op,
        REFUND,
        json!({"tenant": tenant, "op": op}),
    ))
    .await
    .intent_id
}

async fn pending_of(h: &Harness, tenant: &str) -> i64 {
    scalar(
        &h.db,
        &format!(
            "SELECT count(*) FROM outbox_intents WHERE tenant = '{tenant}' AND state = 'pending'"
        ),
    )
    .await
}

/// Steps until `id` is delivered; returns how many steps that took (at most `max`).
async fn steps_until_delivered(h: &Harness, id: i64, max: usize) -> usize {
    for step in 1..=max {
        h.dispatcher.run_once().await.unwrap();
        if h.intent(id).await.state == IntentState::Delivered {
            return step;
        }
    }
    panic!("intent {id} not delivered within {max} steps");
}

async fn a_new_tenant_is_served_while_another_drains_a_backlog(t: &TestDb) {
    let h = Harness::new(t).await;
    let backlog = 200;
    for i in 0..backlog {
        enqueue(&h, "m-backlog", &format!("bulk-{i}")).await;
    }
    // Enqueued after the whole backlog: FIFO would claim it after 200 intents (13 steps).
    let late = enqueue(&h, "z-late", "late-1").await;
    let steps = steps_until_delivered(&h, late, 20).await;
    assert!(steps <= 2, "tenant z-late waited {steps} claims");
    let left = pending_of(&h, "m-backlog").await;
    assert!(
        left >= backlog - 2 * PER_STEP,
        "the backlog is still draining ({left} left)"
    );
    // Mid-drain, a tenant whose name sorts first and one that sorts last both arrive.
    let early = enqueue(&h, "a-early", "early-1").await;
    let again = enqueue(&h, "z-late", "late-2").await;
    let steps_early = steps_until_delivered(&h, early, 20).await;
    let steps_again = steps_until_delivered(&h, again, 20).await;
    assert!(steps_early <= 2, "a-early waited {steps_early} claims");
    assert!(steps_again <= 2, "z-late waited {steps_again} more claims");
    assert!(
        pending_of(&h, "m-backlog").await > 0,
        "backlog not yet done"
    );
    h.dispatcher.drain().await.unwrap();
    assert_eq!(pending_of(&h, "m-backlog").await, 0);
    assert_eq!(h.provider.effect_count(), backlog as usize + 3);
}

async fn two_busy_tenants_share_each_claim(t: &TestDb) {
    let h = Harness::new(t).await;
    for i in 0..60 {
        enqueue(&h, "tenant-a", &format!("a-{i}")).await;
    }
    for i in 0..60 {
        enqueue(&h, "tenant-b", &format!("b-{i}")).await;
    }
    // The first claim learns that both are crowded; from then on each gets half.
    h.dispatcher.run_once().await.unwrap();
    h.dispatcher.run_once().await.unwrap();
    let before = (
        pending_of(&h, "tenant-a").await,
        pending_of(&h, "tenant-b").await,
    );
    h.dispatcher.run_once().await.unwrap();
    let after = (
        pending_of(&h, "tenant-a").await,
        pending_of(&h, "tenant-b").await,
    );
    assert_eq!(
        (before.0 - after.0, before.1 - after.1),
        (PER_STEP / 2, PER_STEP / 2),
        "one claim's share per tenant (pending before {before:?}, after {after:?})"
    );
}

async fn ordering_keys_hold_within_each_tenant(t: &TestDb) {
    let h = Harness::new(t).await;
    // Both tenants use the same ordering key name; each chain is its own tenant's.
    for i in 0..8 {
        for tenant in ["tenant-a", "tenant-b"] {
            h.enqueue(
                NewIntent::new(
                    tenant,
                    format!("{tenant}-{i}"),
                    REFUND,
                    json!({"tenant": tenant, "seq": i}),
                )
                .with_ordering_key("customer-7"),
            )
            .await;
        }
        enqueue(&h, "tenant-c", &format!("free-{i}")).await;
    }
    let mut steps = 0;
    loop {
        let report = h.dispatcher.run_once().await.unwrap();
        steps += 1;
        if !report.did_work() {
            break;
        }
        assert!(steps < 100, "did not finish");
    }
    let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for request in h.provider.requests() {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        if let Some(seq) = body["seq"].as_i64() {
            seen.entry(body["tenant"].as_str().unwrap().to_owned())
                .or_default()
                .push(seq);
        }
    }
    for tenant in ["tenant-a", "tenant-b"] {
        assert_eq!(
            seen[tenant],
            (0..8).collect::<Vec<_>>(),
            "{tenant}'s chain in enqueue order"
        );
    }
    assert_eq!(h.provider.effect_count(), 24);
}

both_backends!(
    a_new_tenant_is_served_while_another_drains_a_backlog,
    two_busy_tenants_share_each_claim,
    ordering_keys_hold_within_each_tenant,
);
