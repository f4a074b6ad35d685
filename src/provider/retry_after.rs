//! The `Retry-After` response header (RFC 9110 §10.2.3): either a number of seconds or an
//! HTTP-date. Parsed once here; the dispatcher clamps it to the action's policy.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A parsed `Retry-After` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// `Retry-After: <delay-seconds>`.
    Delay(Duration),
    /// `Retry-After: <HTTP-date>`.
    At(DateTime<Utc>),
}

impl RetryAfter {
    /// How long to wait from `now`; a date in the past means no wait.
    pub fn delay_from(&self, now: DateTime<Utc>) -> Duration {
        match self {
            RetryAfter::Delay(delay) => *delay,
            RetryAfter::At(at) => (*at - now).to_std().unwrap_or(Duration::ZERO),
        }
    }
}

impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryAfter::Delay(delay) => write!(f, "{}", humantime::format_duration(*delay)),
            RetryAfter::At(at) => write!(f, "{}", at.format("%Y-%m-%dT%H:%M:%SZ")),
        }
    }
}

/// Parses a `Retry-After` header value; `None` if it is neither form.
///
/// Delay-seconds must be ASCII digits only (no sign, no fraction); values too large for a
/// `u64` saturate (the dispatcher clamps them anyway). Dates accept the three HTTP-date
/// formats (IMF-fixdate, RFC 850, asctime).
pub fn parse_retry_after(value: &str) -> Option<RetryAfter> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(RetryAfter::Delay(Duration::from_secs(seconds)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(RetryAfter::At(DateTime::<Utc>::from(when)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    #[test]
    fn parses_both_forms_and_rejects_the_rest() {
        let cases: &[(&str, Option<RetryAfter>)] = &[
            ("0", Some(RetryAfter::Delay(Duration::ZERO))),
            ("30", Some(RetryAfter::Delay(Duration::from_secs(30)))),
            (" 120 ", Some(RetryAfter::Delay(Duration::from_secs(120)))),
            (
                "99999999999999999999999",
                Some(RetryAfter::Delay(Duration::from_secs(u64::MAX))),
            ),
            (
                "Wed, 21 Oct 2015 07:28:00 GMT",
                Some(RetryAfter::At(at(2015, 10, 21, 7, 28, 0))),
            ),
            (
                "Wednesday, 21-Oct-15 07:28:00 GMT",
                Some(RetryAfter::At(at(2015, 10, 21, 7, 28, 0))),
            ),
            (
                "Wed Oct 21 07:28:00 2015",
                Some(RetryAfter::At(at(2015, 10, 21, 7, 28, 0))),
            ),
            ("", None),
            ("-5", None),
            ("1.5", None),
            ("+5", None),
            ("soon", None),
            ("2015-10-21T07:28:00Z", None),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_retry_after(input), *expected, "input {input:?}");
        }
    }

    #[test]
    fn delay_from_counts_from_now_and_never_goes_negative() {
        let now = at(2030, 1, 1, 12, 0, 0);
        let delay = RetryAfter::Delay(Duration::from_secs(5));
        assert_eq!(delay.delay_from(now), Duration::from_secs(5));
        let future = RetryAfter::At(at(2030, 1, 1, 12, 0, 45));
        assert_eq!(future.delay_from(now), Duration::from_secs(45));
        let past = RetryAfter::At(at(2029, 12, 31, 0, 0, 0));
        assert_eq!(past.delay_from(now), Duration::ZERO);
    }

    #[test]
    fn displays_for_error_messages() {
        assert_eq!(RetryAfter::Delay(Duration::from_secs(2)).to_string(), "2s");
        let date = RetryAfter::At(at(2030, 1, 1, 12, 0, 0));
        assert_eq!(date.to_string(), "2030-01-01T12:00:00Z");
    }
}
