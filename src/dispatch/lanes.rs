//! The pipeline's lanes: one per provider, holding the provider's actions, its live gate
//! (capacity, breaker, send window) and where its claims are in the tenants' turn. The
//! dispatcher keeps a handle on them while it runs, for status and metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::capacity::ProviderGate;
use super::fairness::TenantTurns;

/// One provider's actions and live gate.
pub(super) struct ProviderLane {
    pub(super) actions: Vec<String>,
    pub(super) gate: ProviderGate,
    /// Where this provider's claims are in the tenants' turn.
    pub(super) turns: TenantTurns,
}

/// Every provider's lane, by provider name.
pub(super) type Lanes = Arc<Mutex<BTreeMap<String, ProviderLane>>>;
