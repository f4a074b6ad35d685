//! Scene 2: concurrent retries of one operation. A client that times out and retries in
//! parallel enqueues the same operation several times at once, and two dispatchers step
//! at the same moment: one intent, one claim, one request, one effect.

use futures_util::future::join_all;
use serde_json::json;

use super::{Demo, DemoError, TENANT};
use crate::dispatch::Dispatcher;
use crate::intent::IntentState;
use crate::NewIntent;

/// How many copies of the request arrive at once.
const COPIES: usize = 5;
const OPERATION: &str = "refund-order-2002";

/// Concurrent enqueues of one operation, then two dispatchers racing for it.
pub(super) async fn concurrent_retries(d: &mut Demo<'_>) -> Result<(), DemoError> {
    d.n.chapter("2. Concurrent retries of one operation")?;
    d.n.say(format!(
        "a client retries in parallel: {COPIES} enqueues of {OPERATION} arrive at the same time"
    ))?;
    let intent = || {
        NewIntent::new(
            TENANT,
            OPERATION,
            "issue_refund",
            json!({"order_id": 2002, "amount": 400, "currency": "EUR"}),
        )
    };
    let receipts = join_all((0..COPIES).map(|_| d.enqueue(intent()))).await;
    let receipts = receipts.into_iter().collect::<Result<Vec<_>, _>>()?;
    let created = receipts.iter().filter(|r| !r.replayed).count();
    let mut ids: Vec<_> = receipts.iter().map(|r| r.intent_id).collect();
    ids.dedup();
    if created != 1 || ids.len() != 1 {
        return Err(DemoError::OffScript(format!(
            "{COPIES} concurrent enqueues gave {created} new intent(s) and ids {ids:?}"
        )));
    }
    let id = ids[0];
    d.n.say(format!(
        "{COPIES} concurrent enqueues of {OPERATION}: {created} created, {} replayed, one intent (#{id})",
        COPIES - created
    ))?;
    let mut settings = d.dispatcher.settings().clone();
    settings.owner = format!("{}-2", settings.owner);
    let second = Dispatcher::new(d.db.claim_store(), d.actions.clone(), settings);
    let (first, other) = tokio::join!(d.dispatcher.run_once(), second.run_once());
    let (first, other) = (first?, other?);
    d.n.say(format!(
        "two dispatchers stepped at once: they claimed {} and {} — {} claim in total",
        first.claimed,
        other.claimed,
        first.claimed + other.claimed
    ))?;
    let row = d.intent(id).await?;
    Demo::expect_state(&row, IntentState::Delivered)?;
    let key = row.idempotency_key.as_str();
    d.n.say(format!(
        "the provider saw {} request(s) and applied {} effect(s) with its key",
        d.provider.request_count_for_key(key),
        d.provider.effects_for_key(key).len()
    ))?;
    d.print_records(&[id]).await
}
