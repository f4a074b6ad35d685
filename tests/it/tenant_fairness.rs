//! Fair share between tenants, on both backends, stepping the dispatcher (no timing): a
//! tenant's new intent is claimed within two claims while another tenant drains a large
//! backlog (FIFO would reach it only after the whole backlog); two busy tenants share each
//! claim; six equally busy tenants get equal shares over many claims, also when a claim's
//! limit cuts a tenant off short of its share; the walk is bytewise (as `TenantTurns`
//! compares) also on a PostgreSQL column with an English collation; ordering keys still
//! hold within each tenant.

use crate::support;
use sqlx::AssertSqlSafe;

use std::collections::BTreeMap;

use outboxd::dispatch::fairness::TenantTurns;
use outboxd::intent::{IntentId, IntentState};
use outboxd::store::{ClaimRequest, Database, FairShare, TurnStart};
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{scalar, Harness, REFUND};
use support::TestDb;

/// Intents claimed per step by the harness dispatcher: min(batch_size 50, concurrency 16).
const PER_STEP: i64 = 16;

async fn enqueue(h: &Harness, tenant: &str, op: &str) -> IntentId {
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
async fn steps_until_delivered(h: &Harness, id: IntentId, max: usize) -> usize {
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

/// Claims `claims` times straight from the store with the rotation `turns`, as a lane
/// does, and counts what each tenant got (claimed intents stay in flight: nothing is
/// delivered).
async fn claim_counts(
    h: &Harness,
    turns: &mut TenantTurns,
    limit: u32,
    claims: usize,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..claims {
        let request = ClaimRequest {
            owner: "fair-claimer".to_owned(),
            lease: std::time::Duration::from_secs(300),
            limit,
            actions: vec![REFUND.to_owned()],
            now: chrono::Utc::now(),
        };
        let share = turns.share(limit);
        let claimed = h.store.claim_due_shared(&request, &share).await.unwrap();
        assert_eq!(claimed.len(), limit as usize, "every tenant has a backlog");
        turns.advance(&share, limit, &claimed);
        for intent in &claimed {
            *counts.entry(intent.tenant.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

async fn six_busy_tenants_get_equal_shares(t: &TestDb) {
    let h = Harness::new(t).await;
    let tenants = ["t1", "t2", "t3", "t4", "t5", "t6"];
    for i in 0..120 {
        for tenant in tenants {
            enqueue(&h, tenant, &format!("{tenant}-{i}")).await;
        }
    }
    // 16 intents a claim among six crowded tenants: a share of 3, so the last tenant a
    // claim reaches is cut off after 1 (3 * 5 + 1). It must not stay the one cut off.
    let (limit, per_tenant, claims) = (16, 3, 24);
    let mut turns = TenantTurns::new();
    // The first claims learn how many tenants are crowded (one share of 16, then 8, ...).
    let mut warm_up = 0;
    while turns.share(limit).per_tenant > per_tenant {
        claim_counts(&h, &mut turns, limit, 1).await;
        warm_up += 1;
        assert!(warm_up < 10, "the share never settled at {per_tenant}");
    }
    let counts = claim_counts(&h, &mut turns, limit, claims).await;
    let (least, most) = (
        counts.values().min().copied().unwrap_or(0),
        counts.values().max().copied().unwrap_or(0),
    );
    assert_eq!(
        counts.len(),
        tenants.len(),
        "every tenant was served: {counts:?}"
    );
    assert!(
        most - least <= per_tenant as usize,
        "shares over {claims} claims differ by more than one share: {counts:?}"
    );
}

/// Gives PostgreSQL's `tenant` column a collation that orders names unlike bytes (an
/// `en_US`-style database); says so when the server has no such collation.
async fn collate_tenants_like_english(db: &Database) {
    let Database::Postgres(pool) = db else {
        return; // SQLite's default collation, BINARY, is the bytewise order itself.
    };
    let icu: Option<String> = sqlx::query_scalar(
        "SELECT collname FROM pg_collation WHERE collname IN ('en-x-icu', 'en_US.utf8', 'en_US') \
         ORDER BY collname = 'en-x-icu' DESC LIMIT 1",
    )
    .fetch_optional(pool)
    .await
    .unwrap();
    let Some(collation) = icu else {
        support::announce_skip(
            "no English collation on this PostgreSQL server: the collation walk test ran with the default collation",
        );
        return;
    };
    // PostgreSQL refuses to change the type of a column a trigger's column list names
    // (migration 0009's field checks): drop the trigger, alter, re-create it as it was.
    let trigger: String = sqlx::query_scalar(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger \
         WHERE tgname = 'outbox_intents_verify_fields' AND tgrelid = 'outbox_intents'::regclass",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let mut tx = pool.begin().await.unwrap();
    for sql in [
        "DROP TRIGGER outbox_intents_verify_fields ON outbox_intents".to_owned(),
        format!("ALTER TABLE outbox_intents ALTER COLUMN tenant TYPE text COLLATE \"{collation}\""),
        trigger,
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let unlike_bytes: bool = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT 'a' COLLATE \"{collation}\" < 'B' COLLATE \"{collation}\""
    )))
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(unlike_bytes, "{collation} puts 'a' before 'B'");
}

/// The tenants a claim starting at `start`, `per_tenant` 1 and `limit` would visit in
/// bytewise order (what `TenantTurns` assumes), among `tenants`.
fn bytewise_walk(share: &FairShare, limit: usize, tenants: &[&str]) -> Vec<String> {
    let mut sorted: Vec<&str> = tenants.to_vec();
    sorted.sort_unstable();
    let (wrapped, first): (Vec<&str>, Vec<&str>) =
        sorted.into_iter().partition(|t| share.is_wrapped(t));
    let mut walk: Vec<String> = first
        .into_iter()
        .chain(wrapped)
        .map(str::to_owned)
        .collect();
    walk.truncate(limit);
    walk.sort_unstable();
    walk
}

async fn the_tenant_walk_is_bytewise_whatever_the_collation(t: &TestDb) {
    let h = Harness::new(t).await;
    collate_tenants_like_english(&t.db).await;
    // Bytewise: "A" < "B" < "Z" < "a" < "a-b" < "ab" < "b"; an English collation puts
    // "a" before "A" and "B" after "b", and may order "a-b" and "ab" either way.
    let tenants = ["A", "B", "Z", "a", "a-b", "ab", "b"];
    let mut starts = vec![TurnStart::First];
    for tenant in tenants {
        starts.push(TurnStart::After(tenant.to_owned()));
        starts.push(TurnStart::At(tenant.to_owned()));
    }
    for i in 0..starts.len() {
        for tenant in tenants {
            enqueue(&h, tenant, &format!("{tenant}-{i}")).await;
        }
    }
    let limit = 3;
    for start in starts {
        let share = FairShare {
            start,
            per_tenant: 1,
        };
        let request = ClaimRequest {
            owner: "walker".to_owned(),
            lease: std::time::Duration::from_secs(300),
            limit,
            actions: vec![REFUND.to_owned()],
            now: chrono::Utc::now(),
        };
        let claimed = h.store.claim_due_shared(&request, &share).await.unwrap();
        let mut got: Vec<String> = claimed.into_iter().map(|i| i.tenant.to_string()).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            bytewise_walk(&share, limit as usize, &tenants),
            "tenants claimed from {:?}",
            share.start
        );
    }
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
    six_busy_tenants_get_equal_shares,
    the_tenant_walk_is_bytewise_whatever_the_collation,
    ordering_keys_hold_within_each_tenant,
);
