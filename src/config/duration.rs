//! Durations in configuration: parsed with humantime (`"500ms"`, `"30s"`, `"7d"`), printed
//! in the largest exact unit (`"400d"` rather than humantime's `"1year 1month 4days ..."`).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Formats `d` compactly: `"400d"`, `"24h"` (one day reads as hours), `"90s"`, `"500ms"`.
pub fn format_duration(d: Duration) -> String {
    const UNITS: [(u64, &str); 3] = [(86_400, "d"), (3_600, "h"), (60, "m")];
    if d.subsec_nanos() == 0 {
        let secs = d.as_secs();
        if secs == 0 {
            return "0s".to_owned();
        }
        for (size, unit) in UNITS {
            // "24h" reads better than "1d" (it is how providers document key retention).
            if secs.is_multiple_of(size) && !(unit == "d" && secs == size) {
                return format!("{}{unit}", secs / size);
            }
        }
        return format!("{secs}s");
    }
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}ms", d.as_millis());
    }
    humantime::format_duration(d).to_string()
}

/// `#[serde(with = "duration")]`: serialize compactly.
pub(crate) fn serialize<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_duration(*d))
}

/// `#[serde(with = "duration")]`: deserialize with humantime.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    humantime_serde::Serde::<Duration>::deserialize(deserializer).map(|d| d.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_in_the_largest_exact_unit() {
        let cases = [
            (Duration::from_secs(400 * 86_400), "400d"),
            (Duration::from_secs(86_400), "24h"),
            (Duration::from_secs(2 * 86_400), "2d"),
            (Duration::from_secs(6 * 3600), "6h"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::ZERO, "0s"),
        ];
        for (d, text) in cases {
            assert_eq!(format_duration(d), text);
            assert_eq!(humantime::parse_duration(text).unwrap(), d);
        }
    }
}
