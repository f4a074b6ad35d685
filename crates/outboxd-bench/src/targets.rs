//! The targets of issue 15 in one table: each figure the scenarios recorded (or a ratio of
//! two figures of the same run) against its target, printed with PASS or MISS. A smoke
//! run prints the figures without judging them.

use std::fmt::Write as _;

use super::report::Report;

/// How a figure is judged.
#[derive(Debug, Clone, Copy)]
enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

/// Where a figure comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Key(&'static str),
    /// `a / min(b, c)`.
    OverMin(&'static str, &'static str, &'static str),
    /// CPU per item of `a` over CPU per item of `b` (busy share × cores / rate).
    CpuRatio(&'static str, &'static str),
}

const TARGETS: &[(&str, Source, Goal)] = &[
    (
        "isolation: fast rate with a 1 s provider / alone",
        Source::Key("iso_slow_ratio"),
        Goal::AtLeast(0.8),
    ),
    (
        "isolation: fast rate with a silent provider / alone",
        Source::Key("iso_hang_ratio"),
        Goal::AtLeast(0.8),
    ),
    (
        "rate limit: 429s received at rate_limit = 50/s",
        Source::Key("rl_429"),
        Goal::AtMost(0.0),
    ),
    (
        "rate limit: delivered per second",
        Source::Key("rl_rate"),
        Goal::AtLeast(45.0),
    ),
    (
        "breaker (refused): requests during the outage",
        Source::Key("brk_refused_sent"),
        Goal::AtMost(10.0),
    ),
    (
        "breaker (refused): most failed attempts of one intent",
        Source::Key("brk_refused_most"),
        Goal::AtMost(1.0),
    ),
    (
        "breaker (refused): not delivered after recovery",
        Source::Key("brk_refused_left"),
        Goal::AtMost(0.0),
    ),
    (
        "breaker (503): requests during the outage",
        Source::Key("brk_503_sent"),
        Goal::AtMost(10.0),
    ),
    (
        "breaker (503): most failed attempts of one intent",
        Source::Key("brk_503_most"),
        Goal::AtMost(1.0),
    ),
    (
        "breaker (503): not delivered after recovery",
        Source::Key("brk_503_left"),
        Goal::AtMost(0.0),
    ),
    (
        "fairness: tenant B commit → attempt start p99, ms",
        Source::Key("fair_b_p99"),
        Goal::AtMost(1000.0),
    ),
    (
        "defaults: end-to-end / min(raw DB, HTTP)",
        Source::OverMin("e2e", "raw_db", "http"),
        Goal::AtLeast(0.5),
    ),
    (
        "SQL CPU: own SQL per intent / raw queue per row",
        Source::CpuRatio("own_sql", "raw_db"),
        Goal::AtMost(2.0),
    ),
    (
        "latency: commit → attempt start p50, ms",
        Source::Key("lat_start_p50"),
        Goal::AtMost(2.0),
    ),
    (
        "latency: commit → attempt start p99, ms",
        Source::Key("lat_start_p99"),
        Goal::AtMost(15.0),
    ),
    (
        "latency: response → outcome durable p99, ms",
        Source::Key("lat_durable_p99"),
        Goal::AtMost(10.0),
    ),
    (
        "defaults: sweep, defaults / best confirmed setting",
        Source::Key("sweep_default_ratio"),
        Goal::AtLeast(0.95),
    ),
];

fn cpu_per_item(report: &Report, key: &str) -> Option<f64> {
    let rate = report.get(key).filter(|r| *r > 0.0)?;
    let busy = report
        .get(&format!("busy_{key}"))
        .map_or(1.0, |b| b / 100.0);
    Some(busy / rate)
}

fn value(report: &Report, source: Source) -> Option<f64> {
    match source {
        Source::Key(k) => report.get(k),
        Source::OverMin(a, b, c) => Some(report.get(a)? / report.get(b)?.min(report.get(c)?)),
        Source::CpuRatio(a, b) => Some(cpu_per_item(report, a)? / cpu_per_item(report, b)?),
    }
}

/// Prints every target with its figure (`-` when this run did not measure it) and returns
/// the lines; `smoke` prints no verdicts.
pub fn print(report: &Report, smoke: bool) -> String {
    let mut text = String::from("| target | figure | goal | verdict |\n|---|---|---|---|\n");
    println!(
        "-- targets (issue 15){}",
        if smoke {
            " — smoke run, not judged"
        } else {
            ""
        }
    );
    for (label, source, goal) in TARGETS {
        let (goal_text, met) = match (*goal, value(report, *source)) {
            (Goal::AtLeast(t), v) => (format!(">= {t}"), v.map(|v| v >= t)),
            (Goal::AtMost(t), v) => (format!("<= {t}"), v.map(|v| v <= t)),
        };
        let figure = value(report, *source).map_or("-".to_owned(), |v| format!("{v:.2}"));
        let verdict = match (smoke, met) {
            (_, None) => "not measured",
            (true, Some(_)) => "smoke",
            (false, Some(true)) => "PASS",
            (false, Some(false)) => "MISS",
        };
        println!("   {label:<56} {figure:>10}  {goal_text:<9} {verdict}");
        let _ = writeln!(text, "| {label} | {figure} | {goal_text} | {verdict} |");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throughput_target_divides_by_the_smaller_ceiling() {
        let mut r = Report::quiet();
        r.value("e2e", "", 30.0, "");
        r.value("raw_db", "", 100.0, "");
        r.value("http", "", 50.0, "");
        let v = value(&r, Source::OverMin("e2e", "raw_db", "http"));
        assert_eq!(v, Some(0.6));
        assert_eq!(value(&r, Source::Key("missing")), None);
    }
}
