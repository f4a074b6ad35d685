//! Values read back from the outbox tables are taken as stored: a row whose identity
//! fields the Rust rules would refuse (here a tenant with trailing whitespace and an
//! operation id with a tab, which pass every check the database itself makes on an
//! `UPDATE`) is listed, claimed and delivered like any other, and neither a listing nor a
//! claim batch fails for the rows around it.

use crate::support;

use outboxd::intent::{IntentState, OperationId, TenantId};
use outboxd::store::{IntentFilter, IntentSearch, TenantScope};
use support::harness::{exec, Harness, REFUND};
use support::TestDb;

const ODD_TENANT: &str = "acme ";
const ODD_OPERATION: &str = "op\tb";

async fn an_odd_stored_row_does_not_fail_its_neighbours(t: &TestDb) {
    assert!(TenantId::parse(ODD_TENANT).is_err() && OperationId::parse(ODD_OPERATION).is_err());
    let h = Harness::new(t).await;
    let a = h.enqueue_simple("op-a", REFUND).await;
    let b = h.enqueue_simple("op-b", REFUND).await;
    let c = h.enqueue_simple("op-c", REFUND).await;
    let odd = format!(
        "UPDATE outbox_intents SET tenant = '{ODD_TENANT}', operation_id = 'op' || char(9) || 'b' \
         WHERE id = {}",
        b.intent_id
    );
    exec(&h.db, &odd, &odd.replace("char(9)", "chr(9)")).await;

    let listed = h
        .store
        .list_intents(&IntentFilter {
            limit: 10,
            ..IntentFilter::default()
        })
        .await
        .expect("a listing with an odd row");
    let ids: Vec<_> = listed.iter().map(|i| i.id).collect();
    assert_eq!(ids, [a.intent_id, b.intent_id, c.intent_id]);
    assert_eq!(listed[1].tenant.as_str(), ODD_TENANT);
    assert_eq!(listed[1].operation_id.as_str(), ODD_OPERATION);

    let searched = h
        .store
        .search_intents(&IntentSearch {
            scope: TenantScope::All,
            action: None,
            state: None,
            created_from: None,
            created_to: None,
            q: None,
            before_id: None,
            limit: 10,
        })
        .await
        .expect("a console search with an odd row");
    assert_eq!(searched.len(), 3);

    let step = h
        .dispatcher
        .run_once()
        .await
        .expect("a claim batch with an odd row");
    assert_eq!((step.claimed, step.delivered), (3, 3), "{step:?}");
    for id in [a.intent_id, b.intent_id, c.intent_id] {
        assert_eq!(h.intent(id).await.state, IntentState::Delivered);
    }
    let found = h
        .store
        .find_intent(
            &TenantId::from_store(ODD_TENANT.to_owned()),
            &OperationId::from_store(ODD_OPERATION.to_owned()),
        )
        .await
        .unwrap()
        .expect("found by its stored identity");
    assert_eq!(found.id, b.intent_id);
}

both_backends!(an_odd_stored_row_does_not_fail_its_neighbours);
