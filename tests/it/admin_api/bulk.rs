//! `POST /v1/reconciliation/redispatch`: the dry run lists exactly what the real run then
//! changes (and changes nothing itself); explicit `item_ids` report items resolved in
//! between (409-like), unknown or foreign ids, and ids outside the filter, per item.

use std::collections::BTreeSet;

use outboxd::intent::IntentState;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::admin::{unknown_intent, AdminServer, Api, ACME_OPS, ACME_OPS_2, ROOT};
use crate::support::harness::{exec, Harness};
use crate::support::TestDb;
use outboxd::store::ReconciliationItemId;

fn lines(report: &Value) -> Vec<(ReconciliationItemId, String)> {
    report["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"))
        .iter()
        .map(|l| {
            (
                ReconciliationItemId::new(l["item_id"].as_i64().unwrap()),
                l["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn ids(report: &Value) -> BTreeSet<ReconciliationItemId> {
    lines(report).into_iter().map(|(id, _)| id).collect()
}

async fn dry_run_reports_exactly_what_the_real_run_changes(t: &TestDb) {
    let h = Harness::new(t).await;
    let (a1, old_item) = unknown_intent(&h, "acme", "op-b-1").await;
    let (a2, new_item) = unknown_intent(&h, "acme", "op-b-2").await;
    let (g1, _) = unknown_intent(&h, "globex", "op-b-3").await;
    let (a3, _) = unknown_intent(&h, "acme", "op-b-4").await;
    exec(&h.db,
        &format!("UPDATE outbox_reconciliation_items SET opened_at = opened_at - 7200000 WHERE id IN ({old_item}, {new_item})"),
        &format!("UPDATE outbox_reconciliation_items SET opened_at = opened_at - interval '2 hours' WHERE id IN ({old_item}, {new_item})"),
    ).await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ROOT));
    let filter = json!({"tenant": "acme", "older_than": "1h", "action": "send_notification"});

    let mut dry = filter.clone();
    dry["dry_run"] = json!(true);
    let (status, preview) = api.post("/v1/reconciliation/redispatch", dry).await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(
        lines(&preview),
        vec![
            (old_item, "would_redispatch".into()),
            (new_item, "would_redispatch".into())
        ]
    );
    assert_eq!(preview["items"][0]["operation_id"], "op-b-1");
    assert_eq!(preview["items"][0]["tenant"], "acme");
    assert_eq!(preview["items"][0]["intent_id"], a1.get());
    for id in [a1, a2, a3, g1] {
        assert_eq!(
            h.intent(id).await.state,
            IntentState::Unknown,
            "a dry run changes nothing"
        );
    }
    assert_eq!(
        api.get("/v1/audit").await.1["entries"],
        json!([]),
        "a dry run is not audited"
    );

    let mut real = filter.clone();
    real["dry_run"] = json!(false);
    real["note"] = json!("provider confirmed the outage; none of these applied");
    real["confirm_may_act_twice"] = json!(true);
    let (status, report) = api.post("/v1/reconciliation/redispatch", real).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(
        ids(&report),
        ids(&preview),
        "the real run acted on exactly the previewed items"
    );
    assert!(
        lines(&report).iter().all(|(_, r)| r == "redispatched"),
        "{report}"
    );
    assert_eq!(report["summary"], json!({"redispatched": 2}));
    assert_eq!(
        (h.intent(a1).await.state, h.intent(a2).await.state),
        (IntentState::Pending, IntentState::Pending)
    );
    assert_eq!(
        (h.intent(a3).await.state, h.intent(g1).await.state),
        (IntentState::Unknown, IntentState::Unknown)
    );

    assert_run_is_audited(&api).await;
}

/// The run left one summary entry for its tenant, after one resolve entry per item.
async fn assert_run_is_audited(api: &Api) {
    let (_, audit) = api.get("/v1/audit").await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        vec![
            "reconciliation.bulk_redispatch",
            "reconciliation.resolve",
            "reconciliation.resolve"
        ]
    );
    assert_eq!(audit["entries"][0]["tenant"], "acme");
    assert_eq!(
        audit["entries"][0]["details"]["summary"],
        json!({"redispatched": 2})
    );
}

async fn runs_are_validated(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let api = server.api(Some(ROOT));
    let real = json!({"dry_run": false});
    let (status, body) = api.post("/v1/reconciliation/redispatch", real).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("note"))
    );
    let (status, missing) = api
        .post("/v1/reconciliation/redispatch", json!({"note": "n"}))
        .await;
    assert_eq!(
        (status, missing["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("body")),
        "dry_run is required"
    );
    let too_many = json!({"dry_run": true, "limit": 1, "item_ids": [1, 2]});
    let (status, body) = api.post("/v1/reconciliation/redispatch", too_many).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("item_ids"))
    );
    let (status, body) = api
        .post(
            "/v1/reconciliation/redispatch",
            json!({"dry_run": true, "older_than": "later"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("older_than"))
    );
}

async fn explicit_ids_report_each_item(t: &TestDb) {
    let h = Harness::new(t).await;
    let (a1, i1) = unknown_intent(&h, "acme", "op-e-1").await;
    let (a2, i2) = unknown_intent(&h, "acme", "op-e-2").await;
    let (g1, foreign) = unknown_intent(&h, "globex", "op-e-3").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));
    let (_, preview) = api
        .post("/v1/reconciliation/redispatch", json!({"dry_run": true}))
        .await;
    assert_eq!(
        ids(&preview),
        BTreeSet::from([i1, i2]),
        "only the token's tenant"
    );

    // Between the preview and the run, another operator resolves one of the items.
    let (status, _) = server
        .api(Some(ACME_OPS_2))
        .resolve(i2, "abandoned", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let run = json!({"dry_run": false, "note": "approved", "item_ids": [i1, i2, foreign, 999_999],
        "confirm_may_act_twice": true});
    let (status, report) = api.post("/v1/reconciliation/redispatch", run).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let mut expected = vec![
        (i1, "redispatched".to_owned()),
        (i2, "already_resolved".to_owned()),
        (foreign, "not_found".to_owned()),
        (ReconciliationItemId::new(999_999), "not_found".to_owned()),
    ];
    expected.sort();
    assert_eq!(lines(&report), expected);
    let second = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["item_id"] == i2.get())
        .unwrap();
    assert_eq!(second["detail"]["resolved_by"], "acme-ops-2");
    let foreign_line = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["item_id"] == foreign.get())
        .unwrap();
    assert_eq!(
        foreign_line.as_object().unwrap().len(),
        2,
        "nothing about a foreign item: {foreign_line}"
    );
    assert_eq!(
        (h.intent(a1).await.state, h.intent(a2).await.state),
        (IntentState::Pending, IntentState::Abandoned)
    );
    assert_eq!(h.intent(g1).await.state, IntentState::Unknown);

    let (_, a3_item) = unknown_intent(&h, "acme", "op-e-4").await;
    let run =
        json!({"dry_run": false, "note": "n", "action": "issue_refund", "item_ids": [a3_item]});
    let (_, report) = api.post("/v1/reconciliation/redispatch", run).await;
    assert_eq!(lines(&report), vec![(a3_item, "not_matching".to_owned())]);
}

crate::both_backends!(
    dry_run_reports_exactly_what_the_real_run_changes,
    explicit_ids_report_each_item,
    runs_are_validated
);
