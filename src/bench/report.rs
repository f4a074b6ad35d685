//! The benchmark's table: each figure with its unit, then the ratios the targets are about,
//! all from the same run.

use std::fmt::Write as _;
use std::time::Duration;

use super::BenchOptions;

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Row {
    /// Stable key (used for ratios).
    pub key: String,
    /// What was measured.
    pub label: String,
    /// The figure.
    pub value: f64,
    /// Its unit.
    pub unit: String,
}

/// Every figure of a run.
#[derive(Debug, Clone)]
pub struct Report {
    header: String,
    /// The figures, in measurement order.
    pub rows: Vec<Row>,
}

impl Report {
    /// An empty report for `options`.
    pub fn new(options: &BenchOptions) -> Self {
        let backend = if super::setup::is_postgres(&options.database) {
            "postgres"
        } else {
            "sqlite"
        };
        let header = format!(
            "outboxd bench — backend {backend}, {} intents, {} ({} cores), {}",
            options.intents,
            std::env::consts::ARCH,
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            chrono::Utc::now().format("%Y-%m-%d %H:%M UTC")
        );
        println!("{header}");
        Self {
            header,
            rows: Vec::new(),
        }
    }

    /// Prints a section heading.
    pub fn section(&mut self, name: &str) {
        println!("-- {name}");
    }

    /// Records `count` items in `elapsed` as a rate.
    pub fn rate(&mut self, key: &str, label: &str, count: usize, elapsed: Duration) {
        let rate = count as f64 / elapsed.as_secs_f64().max(1e-9);
        self.value(key, label, rate, "per s");
    }

    /// Records a figure.
    pub fn value(&mut self, key: &str, label: &str, value: f64, unit: &str) {
        println!("   {label:<68} {value:>12.1} {unit}");
        self.rows.push(Row {
            key: key.into(),
            label: label.into(),
            value,
            unit: unit.into(),
        });
    }

    /// The figure recorded under `key`.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.rows.iter().find(|r| r.key == key).map(|r| r.value)
    }

    /// The ratios the targets are stated in.
    pub fn ratios(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        let mut ratio = |label: &str, a: Option<f64>, b: Option<f64>| {
            if let (Some(a), Some(b)) = (a, b) {
                out.push((label.to_owned(), a / b));
            }
        };
        let e2e = self.get("e2e");
        ratio("end-to-end / raw DB ceiling (2a)", e2e, self.get("raw_db"));
        ratio(
            "end-to-end / own SQL ceiling (2b)",
            e2e,
            self.get("own_sql"),
        );
        ratio("end-to-end / HTTP ceiling (3)", e2e, self.get("http"));
        let min = match (self.get("raw_db"), self.get("http")) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
        ratio(
            "end-to-end / min(raw DB, HTTP)      [target >= 0.5]",
            e2e,
            min,
        );
        // On one machine the database, the dispatcher and the provider share the CPU: if
        // a delivery costs the CPU of one (2b) intent plus one (3) request, end-to-end can
        // reach at most 1 / (1/(2b) + 1/(3)). The ratio says how much of that the pipeline
        // gets; what is left between it and the target is cost per intent, not waiting.
        let shared = match (self.get("own_sql"), self.get("http")) {
            (Some(a), Some(b)) if a > 0.0 && b > 0.0 => Some(1.0 / (1.0 / a + 1.0 / b)),
            _ => None,
        };
        ratio(
            "end-to-end / shared-CPU bound 1/(1/(2b)+1/(3))",
            e2e,
            shared,
        );
        ratio(
            "end-to-end / naive floor             [target >= 5]",
            e2e,
            self.get("naive"),
        );
        ratio(
            "with finished history / empty        [target >= 0.85]",
            self.get("history"),
            e2e,
        );
        ratio(
            "with backlog / empty                 [target >= 0.85]",
            self.get("backlog"),
            e2e,
        );
        ratio(
            "during long REPEATABLE READ / empty  [target >= 0.5]",
            self.get("longtx_during"),
            e2e,
        );
        ratio(
            "after long REPEATABLE READ / empty",
            self.get("longtx_after"),
            e2e,
        );
        ratio(
            "producer: enqueue / plain insert     [target >= 0.8]",
            self.get("producer_enqueue"),
            self.get("producer_plain"),
        );
        out
    }

    /// Prints the ratios and returns the whole table as text.
    pub fn finish(&self) -> String {
        let mut text = format!("{}\n", self.header);
        for r in &self.rows {
            let _ = writeln!(text, "| {} | {:.1} {} |", r.label, r.value, r.unit);
        }
        println!("-- ratios (same run)");
        for (label, value) in self.ratios() {
            println!("   {label:<68} {value:>12.2}");
            let _ = writeln!(text, "| {label} | {value:.2} |");
        }
        text
    }
}
