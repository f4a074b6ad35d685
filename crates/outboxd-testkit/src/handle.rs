//! [`FakeProvider`], the cheaply cloneable handle to a running fake provider: start and
//! stop it, refuse connections on its port, configure latency and faults, read its records,
//! and wait (without polling) until it has seen enough requests or effects.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::fault::{FaultRule, RandomFaults};
use super::ledger::{Effect, RequestRecord};
use super::rate::RateWindow;
use super::server::{accept_loop, bind_listener};
use super::shared::{Shared, State};
use super::FakeProviderOptions;

/// How long [`FakeProvider::set_refusing`]`(false)` keeps retrying to bind the port.
const REBIND_FOR: Duration = Duration::from_secs(5);

/// A running fake provider. Clones share it; it stops when the last clone is dropped or on
/// [`FakeProvider::shutdown`].
#[derive(Debug, Clone)]
pub struct FakeProvider {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    addr: SocketAddr,
    refusing: AtomicBool,
    control: tokio::sync::Mutex<Control>,
}

/// The accept loop and why it is (not) running.
#[derive(Debug)]
struct Control {
    accept: Option<JoinHandle<()>>,
    shut_down: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.control.get_mut().accept.take() {
            task.abort();
        }
    }
}

impl FakeProvider {
    /// Binds `127.0.0.1:<options.port>` and starts serving. Must be called inside a tokio
    /// runtime; fails if there is none, the header name is not a valid token, or the port
    /// cannot be bound.
    pub fn start(options: FakeProviderOptions) -> io::Result<FakeProvider> {
        let header = &options.idempotency_header;
        let valid = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if header.is_empty() || !header.bytes().all(valid) {
            let msg = format!("invalid idempotency header name {header:?}");
            return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        }
        let runtime = Handle::try_current()
            .map_err(|_| io::Error::other("FakeProvider::start needs a tokio runtime"))?;
        let listener = bind_listener(options.port)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(
            options.idempotency_header,
            options.record_requests,
            options.max_header_bytes,
            options.max_body_bytes,
        ));
        let accept = runtime.spawn(accept_loop(listener, Arc::clone(&shared)));
        let control = Control {
            accept: Some(accept),
            shut_down: false,
        };
        Ok(FakeProvider {
            inner: Arc::new(Inner {
                shared,
                addr,
                refusing: AtomicBool::new(false),
                control: tokio::sync::Mutex::new(control),
            }),
        })
    }

    /// The bound address (127.0.0.1 and the port).
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The bound port; it stays the same across [`FakeProvider::set_refusing`].
    pub fn port(&self) -> u16 {
        self.inner.addr.port()
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// `base_url()` followed by `path` (which should start with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.inner.addr)
    }

    /// Stops serving for good: closes the listener and every open connection. Idempotent.
    pub async fn shutdown(&self) {
        let mut control = self.inner.control.lock().await;
        control.shut_down = true;
        stop(&mut control).await;
    }

    /// `true`: close the listening socket (connects get ECONNREFUSED) and every open
    /// connection. `false`: bind the same port again, retrying for a few seconds if it is
    /// briefly unavailable. Fails after [`FakeProvider::shutdown`] or if the port stays taken.
    pub async fn set_refusing(&self, refusing: bool) -> io::Result<()> {
        let mut control = self.inner.control.lock().await;
        if control.shut_down {
            return Err(io::Error::other("fake provider is shut down"));
        }
        if refusing {
            stop(&mut control).await;
        } else if control.accept.is_none() {
            let listener = rebind(self.port()).await?;
            let shared = Arc::clone(&self.inner.shared);
            control.accept = Some(tokio::spawn(accept_loop(listener, shared)));
        }
        self.inner.refusing.store(refusing, Ordering::SeqCst);
        Ok(())
    }

    /// Whether [`FakeProvider::set_refusing`]`(true)` is in force.
    pub fn is_refusing(&self) -> bool {
        self.inner.refusing.load(Ordering::SeqCst)
    }

    /// The most requests this provider ever handled at once (a bulkhead test reads it).
    pub fn max_concurrent_requests(&self) -> usize {
        self.inner.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Delays every request by `latency` after it is read and before it is processed
    /// (`Duration::ZERO` turns it off).
    pub fn set_latency(&self, latency: Duration) {
        self.inner.shared.set_latency(latency);
    }

    /// Forgets a keyed effect's idempotency key once it is `expiry` old, as a real provider
    /// does at the end of its key retention: a later request with that key applies a
    /// second effect (`None`, the default: keys are remembered for ever).
    pub fn set_key_expiry(&self, expiry: Option<Duration>) {
        let expiry = expiry.map(|d| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX));
        self.state().ledger.set_key_expiry(expiry);
    }

    /// Answers `429` with `Retry-After: 1` (not applied) to requests above `per_second`,
    /// allowing `burst` at once after a quiet period (a token bucket, checked before any
    /// scripted or random fault); `None` removes the limit.
    pub fn set_rate_limit(&self, limit: Option<(u32, u32)>) {
        let now = std::time::Instant::now();
        self.state().rate =
            limit.map(|(per_second, burst)| RateWindow::new(per_second, burst, now));
    }

    /// How many requests the rate limit answered with `429` so far.
    pub fn rate_limited_count(&self) -> u64 {
        self.state().rate.as_ref().map_or(0, RateWindow::refused)
    }

    /// Appends a scripted fault rule. For each request the first rule that matches (in push
    /// order) applies and is decremented; it is removed when its count reaches zero.
    pub fn push_fault(&self, rule: FaultRule) {
        self.state().faults.push(rule);
    }

    /// Removes all scripted fault rules.
    pub fn clear_faults(&self) {
        self.state().faults.clear_rules();
    }

    /// The scripted rules not yet used up, in order, with their remaining counts.
    pub fn pending_faults(&self) -> Vec<FaultRule> {
        self.state().faults.rules()
    }

    /// Turns on seeded random faults for requests no scripted rule matches (replacing any
    /// earlier random configuration and restarting its RNG).
    pub fn set_random_faults(&self, random: RandomFaults) {
        self.state().faults.set_random(Some(random));
    }

    /// Turns random faults off.
    pub fn clear_random_faults(&self) {
        self.state().faults.set_random(None);
    }

    /// The seed of the active random mode, to report when a soak test fails.
    pub fn random_seed(&self) -> Option<u64> {
        self.state().faults.random_seed()
    }

    /// Every recorded request, in arrival order (empty if `record_requests` is off).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.state().ledger.requests().to_vec()
    }

    /// How many requests were processed (recorded or not).
    pub fn request_count(&self) -> usize {
        self.state().ledger.request_total()
    }

    /// Every effect, in the order applied.
    pub fn effects(&self) -> Vec<Effect> {
        self.state().ledger.effects().to_vec()
    }

    /// The effects applied after the first `first` of them, in the order applied (what
    /// happened since [`Self::effect_count`] returned `first`).
    pub fn effects_since(&self, first: usize) -> Vec<Effect> {
        let state = self.state();
        state
            .ledger
            .effects()
            .get(first..)
            .unwrap_or_default()
            .to_vec()
    }

    /// Effects whose request carried this idempotency key (keyed and unkeyed endpoints).
    pub fn effects_for_key(&self, key: &str) -> Vec<Effect> {
        let state = self.state();
        let effects = state.ledger.effects().iter();
        effects
            .filter(|e| e.key.as_deref() == Some(key))
            .cloned()
            .collect()
    }

    /// How many requests carried this idempotency key (any endpoint, faulted or not).
    pub fn request_count_for_key(&self, key: &str) -> usize {
        self.state().ledger.request_count_for_key(key)
    }

    /// How many effects were applied.
    pub fn effect_count(&self) -> usize {
        self.state().ledger.effects().len()
    }

    /// The reference of the keyed effect for this key, as `GET /lookup/<key>` would answer.
    pub fn reference_for_key(&self, key: &str) -> Option<String> {
        self.state().ledger.reference_for_key(key)
    }

    /// Waits until at least `n` requests were processed; `false` if `timeout` passed first.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |s| s.ledger.request_total() >= n)
            .await
    }

    /// Responses written out in full so far (a fault that sends nothing does not count).
    pub fn responses_written(&self) -> usize {
        self.inner
            .shared
            .responses_written
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until at least `n` responses were written out in full (the hook a test uses to
    /// act right after a client may have read an answer); `false` if `timeout` passed
    /// first.
    pub async fn wait_for_responses_written(&self, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |_| self.responses_written() >= n)
            .await
    }

    /// Waits until at least `n` effects were applied; `false` if `timeout` passed first.
    pub async fn wait_for_effects(&self, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |s| s.ledger.effects().len() >= n)
            .await
    }

    async fn wait_until(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.inner.shared.notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a request processed in between still wakes us.
            notified.as_mut().enable();
            if done(&self.state()) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&self.state());
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.shared.lock()
    }
}

/// Aborts the accept loop and waits until it (and so the listener) is gone.
async fn stop(control: &mut Control) {
    if let Some(task) = control.accept.take() {
        task.abort();
        let _ = task.await;
    }
}

/// Binds `port` again, retrying while it is briefly unavailable.
async fn rebind(port: u16) -> io::Result<tokio::net::TcpListener> {
    let deadline = tokio::time::Instant::now() + REBIND_FOR;
    loop {
        match bind_listener(port) {
            Ok(listener) => return Ok(listener),
            Err(err) if tokio::time::Instant::now() >= deadline => return Err(err),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
