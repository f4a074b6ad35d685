//! The operator console under `/review`: the dashboard, the intents browser with filters,
//! search and keyset pages, one intent with why it waits, bulk redispatch and cancel with a
//! dry run first, and the filtered audit log. In headless Chromium (`console/browser.rs`):
//! the operator's path from the dashboard to a bulk redispatch of three failed intents that
//! then deliver. Over plain HTTP (`console/http.rs`): filters and search, the not_idempotent
//! confirmation, viewers, and tenant isolation of every page, search and bulk change.

use crate::support;

#[path = "console/browser.rs"]
mod browser;
#[path = "console/http.rs"]
mod http;
// The review page's browser helpers (one module in this binary, see review_page.rs).
use crate::review_page::page;
#[path = "console/plan.rs"]
mod plan;
#[path = "console/resend.rs"]
mod resend;

use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::NewIntent;
use serde_json::json;
use support::harness::Harness;

/// Enqueues `action` for `tenant` and lets the provider refuse it once with a 400, so it
/// ends `failed`. Returns the intent id.
pub async fn failed_intent(h: &Harness, tenant: &str, op: &str, action: &str) -> IntentId {
    let r = h
        .enqueue(NewIntent::new(
            tenant,
            op,
            action,
            json!({"op": op, "amount": 100}),
        ))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::StatusWithoutApply {
            status: 400,
            retry_after: None,
        },
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Failed);
    r.intent_id
}
