//! Warnings about settings that are valid but cannot help: values the engine will never
//! use in full, or a lease so close to a request timeout that ordinary delays hand claims
//! back unsent. Warnings only (the daemon runs), and only about keys the operator set:
//! the built-in defaults never warn.

use std::time::Duration;

use super::lease::{shortest_lease, SEND_MARGIN};
use super::report::{human, Report};
use super::Config;

/// The headroom a lease should leave beyond [`shortest_lease`]: a claim whose request
/// starts later than this after the claim is handed back unsent.
pub fn lease_headroom(request_timeout: Duration) -> Duration {
    SEND_MARGIN.max(request_timeout / 4)
}

/// Runs every rule.
pub(crate) fn warn_settings_that_cannot_help(config: &Config, report: &mut Report<'_>) {
    let d = &config.dispatcher;
    let tuned = report.is_set("dispatcher.batch_size") || report.is_set("dispatcher.concurrency");
    if tuned && d.concurrency < d.batch_size {
        report.warn(
            "dispatcher.batch_size",
            format!(
                "{} is above dispatcher.concurrency ({}): a claim never takes more intents \
                 than there are free request slots, so a batch_size above concurrency \
                 cannot help; lower batch_size or raise concurrency",
                d.batch_size, d.concurrency
            ),
        );
    }
    for (name, provider) in &config.providers {
        let key = format!("providers.{name}.max_in_flight");
        if report.is_set(&key) && provider.max_in_flight > d.concurrency as usize {
            report.warn(
                key,
                format!(
                    "{} is above dispatcher.concurrency ({}): this daemon never has more than \
                     concurrency requests in flight in all, so the provider cannot get more \
                     than that",
                    provider.max_in_flight, d.concurrency
                ),
            );
        }
        let timeout_key = format!("providers.{name}.request_timeout");
        let tuned = report.is_set("dispatcher.lease") || report.is_set(&timeout_key);
        let needed = shortest_lease(provider.request_timeout);
        let headroom = lease_headroom(provider.request_timeout);
        if tuned && d.lease >= needed && d.lease < needed + headroom {
            report.warn(
                "dispatcher.lease",
                format!(
                    "{} is barely above providers.{name}.request_timeout ({}) plus the {} send \
                     margin: a request may start only while its lease covers both, so any \
                     claim whose request starts more than {} late is handed back unsent; use \
                     a lease of at least {}",
                    human(d.lease),
                    human(provider.request_timeout),
                    human(SEND_MARGIN),
                    human(d.lease - needed),
                    human(needed + headroom)
                ),
            );
        }
    }
}
