//! Throttling failed sign-ins to the review page: after [`MAX_FAILURES`] failed attempts
//! from one client within [`WINDOW`], every sign-in from that client (right token or not)
//! answers `429` until the window ends, so tokens cannot be guessed at speed.
//!
//! A client is its IP address (IPv6: its /64, which one host can change at will); requests
//! whose address is unknown share one key. The table is bounded: when it is full, expired
//! windows are dropped, and clients that still find no room share one overflow key.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed sign-ins allowed per client and window.
pub(crate) const MAX_FAILURES: u32 = 10;
/// How long failures are remembered, counted from the first one.
pub(crate) const WINDOW: Duration = Duration::from_secs(10 * 60);
/// Most clients tracked at once.
const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ClientKey {
    Address(IpAddr),
    Unknown,
    Overflow,
}

impl ClientKey {
    fn of(client: Option<IpAddr>) -> Self {
        match client.map(|ip| ip.to_canonical()) {
            None => ClientKey::Unknown,
            Some(IpAddr::V6(v6)) => {
                let prefix = u128::from(v6) & !u128::from(u64::MAX);
                ClientKey::Address(IpAddr::V6(prefix.into()))
            }
            Some(v4) => ClientKey::Address(v4),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

/// Failed sign-ins per client (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SignInThrottle {
    windows: Mutex<HashMap<ClientKey, Window>>,
}

impl SignInThrottle {
    /// `Err(wait)` when `client` has used up its failures: try again after `wait`.
    pub(crate) fn check(&self, client: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let key = ClientKey::of(client);
        let over = |key| {
            windows
                .get(&key)
                .filter(|w| now.duration_since(w.started) < WINDOW && w.failures >= MAX_FAILURES)
                .map(|w| WINDOW.saturating_sub(now.duration_since(w.started)))
        };
        match over(key).or_else(|| over(ClientKey::Overflow)) {
            Some(wait) => Err(wait),
            None => Ok(()),
        }
    }

    /// Counts one failed sign-in from `client`.
    pub(crate) fn record_failure(&self, client: Option<IpAddr>, now: Instant) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut key = ClientKey::of(client);
        if !windows.contains_key(&key) && windows.len() >= MAX_TRACKED {
            windows.retain(|_, w| now.duration_since(w.started) < WINDOW);
            if windows.len() >= MAX_TRACKED {
                key = ClientKey::Overflow;
            }
        }
        let window = windows.entry(key).or_insert(Window {
            started: now,
            failures: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_held_back_after_its_failures_until_the_window_ends() {
        let throttle = SignInThrottle::default();
        let start = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            assert!(throttle.check(Some(a), start).is_ok());
            throttle.record_failure(Some(a), start);
        }
        let wait = throttle.check(Some(a), start).unwrap_err();
        assert_eq!(wait, WINDOW);
        assert!(
            throttle.check(Some(b), start).is_ok(),
            "another client is not held back"
        );
        assert!(throttle.check(None, start).is_ok());
        assert!(
            throttle.check(Some(a), start + WINDOW).is_ok(),
            "the window ended"
        );
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let throttle = SignInThrottle::default();
        let now = Instant::now();
        for i in 0..MAX_FAILURES {
            let ip: IpAddr = format!("2001:db8:1:2::{i:x}").parse().unwrap();
            throttle.record_failure(Some(ip), now);
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(throttle.check(Some(same_64), now).is_err());
        assert!(throttle.check(Some(other_64), now).is_ok());
    }
}
