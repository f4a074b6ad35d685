//! A provider-side request rate limit, as a real API enforces it: a token bucket refilled
//! at `per_second`, holding at most `burst` tokens. A request that finds the bucket empty
//! is answered `429 Too Many Requests` with `Retry-After: 1` and not applied.

use std::time::Instant;

/// The bucket and how many requests it refused.
#[derive(Debug)]
pub(crate) struct RateWindow {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    refused: u64,
}

impl RateWindow {
    /// A full bucket (`per_second` and `burst` at least 1).
    pub(crate) fn new(per_second: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        RateWindow {
            per_second: f64::from(per_second.max(1)),
            burst,
            tokens: burst,
            last: now,
            refused: 0,
        }
    }

    /// Takes a token for a request arriving at `now`; `false` (and counted) if none is left.
    pub(crate) fn admit(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.refused += 1;
            false
        }
    }

    /// Requests refused so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(50, 5, t0);
        assert!((0..5).all(|_| w.admit(t0)));
        assert!(!w.admit(t0));
        // 20 ms later one token has come back, not two.
        let t1 = t0 + Duration::from_millis(20);
        assert!(w.admit(t1));
        assert!(!w.admit(t1));
        assert_eq!(w.refused(), 2);
    }

    #[test]
    fn requests_spaced_at_the_rate_are_never_refused() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(50, 1, t0);
        for i in 0..500u64 {
            assert!(w.admit(t0 + Duration::from_millis(20 * i)), "request {i}");
        }
        assert_eq!(w.refused(), 0);
    }
}
