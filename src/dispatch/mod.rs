//! The dispatcher: claim due intents with a lease (committed before any network call),
//! deliver each with its idempotency key, classify, decide, and record the outcome fenced
//! by the claim's token. [`retry`] holds the pure retry rules, [`attempt`] one delivery,
//! [`lease`] whether a lease still covers a request, [`claim`] a claim given up on after
//! the lease (its late answer handed back), [`dispatcher`] the testable step,
//! [`pipeline`] the daemon's engine (slots refilled as requests finish, outcomes
//! group-committed) and its per-provider `lanes`, [`capacity`] the per-provider bulkheads,
//! [`window`] a provider's adaptive send window, [`fairness`] the tenants' turns, [`wakeup`]
//! how an idle loop waits.

pub mod actions;
pub mod attempt;
pub mod capacity;
pub mod claim;
pub mod dispatcher;
pub mod fairness;
mod lanes;
pub mod lease;
pub mod pipeline;
pub mod publish;
pub mod retry;
pub mod run_loop;
pub mod wakeup;
pub mod window;

pub use actions::{ActionRuntime, ActionTable};
pub use capacity::{Breaker, ProviderGate, ProviderLimits, ProviderSignal, RateLimit};
pub use dispatcher::{Dispatcher, DispatcherSettings, StepReport};
