//! A resolution POSTed for an item outside the caller's tenants gets the same 404 page as a
//! GET of it ("No such item (or not one your token may see)."), not a bare "not found".

use reqwest::StatusCode;

use super::page::Page;
use crate::support::admin::{unknown_intent, AdminServer, ACME_OPS};
use crate::support::harness::Harness;
use crate::support::TestDb;

async fn a_resolution_of_another_tenants_item_says_no_such_item(t: &TestDb) {
    let h = Harness::new(t).await;
    let (_, mine) = unknown_intent(&h, "acme", "op-mine").await;
    let (_, theirs) = unknown_intent(&h, "globex", "op-theirs").await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let csrf = page.get(&format!("/review/items/{mine}")).await.csrf();

    let shown = page.get(&format!("/review/items/{theirs}")).await;
    assert_eq!(shown.status, StatusCode::NOT_FOUND);
    assert!(shown.text.contains("No such item"), "GET: {}", shown.text);

    let form = [
        ("csrf", csrf.as_str()),
        ("resolution", "abandoned"),
        ("note", "gone"),
    ];
    let posted = page
        .post(&format!("/review/items/{theirs}/resolve"), &form)
        .await;
    assert_eq!(posted.status, StatusCode::NOT_FOUND);
    assert!(
        posted.text.contains("No such item"),
        "POST: {}",
        posted.text
    );
}

crate::both_backends!(a_resolution_of_another_tenants_item_says_no_such_item);
