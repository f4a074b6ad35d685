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

/// With several providers and a `max_in_flight` or `concurrency` set: warns when the
/// providers' `max_in_flight` add up to more than `concurrency`, because then a slow or
/// silent provider can hold request slots the others need (the defaults never do).
fn warn_shares_above_concurrency(config: &Config, report: &mut Report<'_>) {
    let concurrency = config.dispatcher.concurrency as usize;
    let tuned = report.is_set("dispatcher.concurrency")
        || config
            .providers
            .keys()
            .any(|name| report.is_set(&format!("providers.{name}.max_in_flight")));
    let total: usize = config
        .providers
        .keys()
        .map(|n| config.max_in_flight(n))
        .sum();
    if config.providers.len() < 2 || !tuned || total <= concurrency {
        return;
    }
    report.warn(
        "dispatcher.concurrency",
        format!(
            "{concurrency} is below the providers' max_in_flight added up ({total}): a slow or \
             silent provider can then hold request slots the other providers need, and their \
             deliveries wait for it; raise concurrency to at least {total} or lower a \
             provider's max_in_flight"
        ),
    );
}

/// Runs every rule.
pub(crate) fn warn_settings_that_cannot_help(config: &Config, report: &mut Report<'_>) {
    let d = &config.dispatcher;
    // Only when batch_size was set: an operator who lowered concurrency alone did not ask
    // for the default batch_size, and a claim is bounded by the free slots anyway.
    if report.is_set("dispatcher.batch_size") && d.concurrency < d.batch_size {
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
    warn_shares_above_concurrency(config, report);
    for (name, provider) in &config.providers {
        let key = format!("providers.{name}.max_in_flight");
        let max_in_flight = config.max_in_flight(name);
        if report.is_set(&key) && max_in_flight > d.concurrency as usize {
            report.warn(
                key,
                format!(
                    "{} is above dispatcher.concurrency ({}): this daemon never has more than \
                     concurrency requests in flight in all, so the provider cannot get more \
                     than that",
                    max_in_flight, d.concurrency
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
