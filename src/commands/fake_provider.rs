//! `outboxd fake-provider`: the built-in [`FakeProvider`] on its own, on 127.0.0.1, until
//! a shutdown signal — for the quick start and local trials. It prints each request it
//! receives (method, path, idempotency key; never headers or bodies) and each effect it
//! applies, so a trial shows what reached the "provider" and how often.

use std::future::Future;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::fake_provider::{FakeProvider, FakeProviderOptions};

/// Why the fake provider could not run.
#[derive(Debug, thiserror::Error)]
pub enum FakeProviderCommandError {
    /// Only 127.0.0.1 is supported: the fake provider is a local test tool.
    #[error("--listen {0}: the fake provider listens on 127.0.0.1 only")]
    NotLoopback(SocketAddr),
    /// The port could not be bound or the header name is invalid.
    #[error("cannot start the fake provider on {addr}: {error}")]
    Start {
        /// The requested address.
        addr: SocketAddr,
        /// The cause.
        error: std::io::Error,
    },
    /// Writing the request log failed (stdout closed).
    #[error("cannot write output")]
    Output(#[from] std::io::Error),
}

/// Runs the fake provider on `listen` (127.0.0.1, port 0 picks one) with the given
/// idempotency header, printing to `out`, until `shutdown` completes.
pub async fn run(
    listen: SocketAddr,
    idempotency_header: &str,
    out: &mut (dyn Write + Send),
    shutdown: impl Future<Output = ()>,
) -> Result<(), FakeProviderCommandError> {
    if listen.ip() != Ipv4Addr::LOCALHOST {
        return Err(FakeProviderCommandError::NotLoopback(listen));
    }
    let options = FakeProviderOptions {
        port: listen.port(),
        idempotency_header: idempotency_header.to_owned(),
        ..FakeProviderOptions::default()
    };
    let provider =
        FakeProvider::start(options).map_err(|error| FakeProviderCommandError::Start {
            addr: listen,
            error,
        })?;
    writeln!(out, "fake provider listening on {}", provider.base_url())?;
    writeln!(
        out,
        "  POST /keyed/<any>     at most one effect per {idempotency_header} (a repeat replays it)"
    )?;
    writeln!(
        out,
        "  POST /unkeyed/<any>   an effect for every request (no deduplication)"
    )?;
    writeln!(
        out,
        "  GET  /lookup/<key>    the reference of the keyed effect for <key>, or 404"
    )?;
    writeln!(out, "stop with Ctrl-C")?;
    out.flush()?;
    tokio::pin!(shutdown);
    let (mut requests_seen, mut effects_seen) = (0, 0);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = provider.wait_for_requests(requests_seen + 1, Duration::from_secs(3600)) => {}
        }
        (requests_seen, effects_seen) = print_new(&provider, out, requests_seen, effects_seen)?;
    }
    let (requests, effects) = (provider.request_count(), provider.effect_count());
    writeln!(
        out,
        "fake provider stopped after {requests} request(s) and {effects} effect(s)"
    )?;
    provider.shutdown().await;
    Ok(())
}

/// Prints the requests and effects after the first `requests_seen` / `effects_seen`;
/// returns the new counts.
fn print_new(
    provider: &FakeProvider,
    out: &mut (dyn Write + Send),
    requests_seen: usize,
    effects_seen: usize,
) -> std::io::Result<(usize, usize)> {
    let requests = provider.requests();
    for r in requests.iter().skip(requests_seen) {
        let key = r.idempotency_key.as_deref().unwrap_or("-");
        let fault = r.fault.map(|f| format!(" fault={f:?}")).unwrap_or_default();
        writeln!(
            out,
            "request #{} {} {} key={key}{fault}",
            r.seq, r.method, r.path
        )?;
    }
    let effects = provider.effects();
    for e in effects.iter().skip(effects_seen) {
        let key = e.key.as_deref().unwrap_or("-");
        writeln!(out, "effect {} on {} key={key}", e.reference, e.path)?;
    }
    out.flush()?;
    Ok((requests.len().max(requests_seen), effects.len()))
}
