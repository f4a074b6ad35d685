//! Per-provider bulkhead gauges, set by the delivery pipeline after each claim round:
//! requests in flight, the adaptive send window, whether the circuit breaker is open (or
//! half open), whether a `Retry-After` pause is in force, and how many requests waited for
//! the rate limiter.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::provider::state::ProviderState;

/// Labels of the provider gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

/// Labels of `outboxd_provider_breaker`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabels {
    provider: String,
    state: String,
}

/// The provider gauges.
#[derive(Debug, Clone, Default)]
pub struct ProviderGauges {
    in_flight: Family<ProviderLabels, Gauge>,
    send_window: Family<ProviderLabels, Gauge>,
    breaker: Family<BreakerLabels, Gauge>,
    paused: Family<ProviderLabels, Gauge>,
    rate_limited: Family<ProviderLabels, Gauge>,
}

impl ProviderGauges {
    /// Creates the gauges and registers them in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let gauges = Self::default();
        registry.register(
            "provider_in_flight",
            "Requests in flight to each provider from this process",
            gauges.in_flight.clone(),
        );
        registry.register(
            "provider_send_window",
            "Requests each provider may be sent at once now: 1 after start or an outage, one more per answer up to max_in_flight",
            gauges.send_window.clone(),
        );
        registry.register(
            "provider_breaker",
            "Circuit breaker state per provider: 1 for the current state (closed, open, half_open)",
            gauges.breaker.clone(),
        );
        registry.register(
            "provider_paused",
            "1 while a 429/503 Retry-After pauses every request to the provider",
            gauges.paused.clone(),
        );
        registry.register(
            "provider_rate_limited",
            "Requests that waited for the provider's rate limiter (since start)",
            gauges.rate_limited.clone(),
        );
        gauges
    }

    /// Sets every gauge from the pipeline's view of its providers.
    pub fn set(&self, states: &[ProviderState]) {
        for s in states {
            let provider = ProviderLabels {
                provider: s.provider.clone(),
            };
            self.in_flight
                .get_or_create(&provider)
                .set(i64::try_from(s.in_flight).unwrap_or(i64::MAX));
            self.send_window
                .get_or_create(&provider)
                .set(i64::try_from(s.send_window).unwrap_or(i64::MAX));
            self.paused
                .get_or_create(&provider)
                .set(i64::from(s.paused));
            self.rate_limited
                .get_or_create(&provider)
                .set(i64::try_from(s.rate_limited).unwrap_or(i64::MAX));
            for state in crate::store::schema::BREAKER_STATES {
                let labels = BreakerLabels {
                    provider: s.provider.clone(),
                    state: state.to_owned(),
                };
                self.breaker
                    .get_or_create(&labels)
                    .set(i64::from(state == s.breaker));
            }
        }
    }
}
