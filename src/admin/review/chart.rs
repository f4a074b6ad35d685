//! The dashboard's chart: attempts that ended over the last hour, per five-minute bucket
//! and outcome class, as a stacked-bar SVG rendered on the server (no script, no image
//! request). [`bucket`] is pure; [`svg`] only draws what it computed.

use chrono::{DateTime, Utc};
use maud::{html, Markup};

use crate::action::AttemptClass;
use crate::store::AttemptEnd;

/// Buckets in the chart.
pub(super) const BUCKETS: usize = 12;
/// Seconds per bucket (five minutes; twelve of them make the hour).
const BUCKET_SECONDS: i64 = 300;
/// The classes in drawing order, with their colours.
const CLASSES: [(AttemptClass, &str); 5] = [
    (AttemptClass::Delivered, "#1e8e3e"),
    (AttemptClass::NotSent, "#9aa0a6"),
    (AttemptClass::Retryable, "#f9ab00"),
    (AttemptClass::Rejected, "#d93025"),
    (AttemptClass::Ambiguous, "#8430ce"),
];

/// Counts per bucket (oldest first) and class (in [`CLASSES`] order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Chart {
    /// `counts[bucket][class]`.
    pub counts: Vec<[u32; 5]>,
    /// The end of the last bucket.
    pub until: Option<DateTime<Utc>>,
}

impl Chart {
    /// Totals per class over the hour.
    pub(super) fn totals(&self) -> [u32; 5] {
        let mut totals = [0; 5];
        for bucket in &self.counts {
            for (t, n) in totals.iter_mut().zip(bucket) {
                *t += n;
            }
        }
        totals
    }
}

/// The start of the chart's hour before `now`.
pub(super) fn since(now: DateTime<Utc>) -> DateTime<Utc> {
    now - chrono::Duration::seconds(BUCKET_SECONDS * BUCKETS as i64)
}

/// Sorts `ends` into the hour before `now`; anything outside it is ignored.
pub(super) fn bucket(ends: &[AttemptEnd], now: DateTime<Utc>) -> Chart {
    let start = since(now);
    let mut counts = vec![[0u32; 5]; BUCKETS];
    for end in ends {
        let offset = (end.ended_at - start).num_seconds();
        if offset < 0 || end.ended_at > now {
            continue;
        }
        let index = usize::try_from(offset / BUCKET_SECONDS)
            .unwrap_or(0)
            .min(BUCKETS - 1);
        let class = CLASSES
            .iter()
            .position(|(c, _)| *c == end.class)
            .unwrap_or(0);
        counts[index][class] += 1;
    }
    Chart {
        counts,
        until: Some(now),
    }
}

/// One drawn rectangle.
struct Bar {
    x: u32,
    y: u32,
    h: u32,
    class: usize,
    n: u32,
}

/// The chart as SVG with a legend of totals.
pub(super) fn svg(chart: &Chart) -> Markup {
    let (width, height, bar) = (600u32, 140u32, 40u32);
    let peak = chart
        .counts
        .iter()
        .map(|b| b.iter().sum::<u32>())
        .max()
        .unwrap_or(0)
        .max(1);
    let totals = chart.totals();
    let slot = width / BUCKETS as u32;
    let mut rects = Vec::new();
    for (i, b) in chart.counts.iter().enumerate() {
        let x = u32::try_from(i).unwrap_or(0) * slot + 5;
        let mut top = height;
        for (class, &n) in b.iter().enumerate().filter(|(_, n)| **n > 0) {
            let h = (n * (height - 10) / peak).max(1);
            top = top.saturating_sub(h);
            rects.push(Bar {
                x,
                y: top,
                h,
                class,
                n,
            });
        }
    }
    html! {
        svg id="chart" xmlns="http://www.w3.org/2000/svg" width=(width) height=(height + 20)
            viewBox={"0 0 " (width) " " (height + 20)} role="img"
            aria-label="Attempts per five minutes over the last hour, by outcome class" {
            line x1="0" y1=(height) x2=(width) y2=(height) stroke="#b9bfca" {}
            @for r in &rects {
                rect x=(r.x) y=(r.y) width=(bar) height=(r.h) fill=(CLASSES[r.class].1) {
                    title { (r.n) " " (CLASSES[r.class].0.as_str()) }
                }
            }
            text x="0" y=(height + 15) font-size="11" fill="#6b7385" { "−60 min" }
            text x=(width - 40) y=(height + 15) font-size="11" fill="#6b7385" { "now" }
        }
        p id="chart-legend" class="muted" {
            @for (k, (class, colour)) in CLASSES.iter().enumerate() {
                span class="legend" {
                    svg width="10" height="10" { rect width="10" height="10" fill=(colour) {} }
                    " " (class.as_str()) " " strong { (totals[k]) }
                }
                " "
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_land_in_their_five_minutes() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let at = |secs_ago: i64, class| AttemptEnd {
            ended_at: now - chrono::Duration::seconds(secs_ago),
            class,
        };
        let chart = bucket(
            &[
                at(0, AttemptClass::Delivered),
                at(10, AttemptClass::Delivered),
                at(299, AttemptClass::Rejected),
                at(3599, AttemptClass::Ambiguous),
                at(3600, AttemptClass::NotSent),
                at(3601, AttemptClass::Delivered),
                at(-5, AttemptClass::Delivered),
            ],
            now,
        );
        assert_eq!(chart.counts.len(), BUCKETS);
        assert_eq!(chart.counts[11], [2, 0, 0, 1, 0]);
        assert_eq!(
            chart.counts[0],
            [0, 1, 0, 0, 1],
            "the hour's first second counts"
        );
        assert_eq!(chart.totals(), [2, 1, 0, 1, 1]);
        let drawn = svg(&chart).into_string();
        assert_eq!(drawn.matches("<rect x=").count(), 4, "{drawn}");
    }
}
