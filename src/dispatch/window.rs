//! A provider's send window: how many requests may be in flight to it right now, adapted
//! to how it answers (additive increase, multiplicative decrease, as TCP does):
//!
//! * it **starts at one** request when the daemon starts and again when the circuit
//!   breaker opens, so the breaker's trial and the first requests after an outage go one
//!   at a time, never a whole window at a provider that may have just failed;
//! * it **grows by one per answered request** (so it doubles per round trip, like TCP's
//!   slow start), up to the provider's `max_in_flight`: a healthy provider reaches its
//!   maximum within log2(`max_in_flight`) round trips;
//! * it **halves on a failure** (not sent, timeout, reset, 5xx) or a `Retry-After` pause,
//!   never below one: requests already in flight finish, but no new one starts until the
//!   provider is below the smaller window.
//!
//! Pure state, no clock; [`super::capacity::ProviderGate`] owns one per provider and
//! decides which signal counts as what.

/// The window of one provider (`1 ..= max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWindow {
    size: usize,
    max: usize,
}

impl SendWindow {
    /// Where a window starts, and restarts after an outage.
    pub const INITIAL: usize = 1;

    /// A window of [`SendWindow::INITIAL`] that may grow to `max` (at least 1).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            size: Self::INITIAL.min(max),
            max,
        }
    }

    /// Requests that may be in flight now.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A request was answered: one more may be in flight.
    pub fn grow(&mut self) {
        self.size = (self.size + 1).min(self.max);
    }

    /// A request failed, or the provider asked to wait: half as many.
    pub fn shrink(&mut self) {
        self.size = (self.size / 2).max(1);
    }

    /// The provider was found down: start again from [`SendWindow::INITIAL`].
    pub fn restart(&mut self) {
        self.size = Self::INITIAL.min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_one_and_grows_by_one_per_answer_up_to_max() {
        let mut w = SendWindow::new(4);
        assert_eq!(w.size(), 1);
        w.grow();
        assert_eq!(w.size(), 2);
        (0..10).for_each(|_| w.grow());
        assert_eq!(w.size(), 4);
    }

    #[test]
    fn halves_on_failure_never_below_one() {
        let mut w = SendWindow::new(64);
        (0..63).for_each(|_| w.grow());
        assert_eq!(w.size(), 64);
        w.shrink();
        assert_eq!(w.size(), 32);
        (0..10).for_each(|_| w.shrink());
        assert_eq!(w.size(), 1);
    }

    #[test]
    fn restarts_at_one() {
        let mut w = SendWindow::new(8);
        (0..7).for_each(|_| w.grow());
        w.restart();
        assert_eq!(w.size(), 1);
    }

    #[test]
    fn a_max_of_zero_is_read_as_one() {
        let mut w = SendWindow::new(0);
        w.grow();
        assert_eq!(w.size(), 1);
    }
}
