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
            super::cpu::cores(),
            chrono::Utc::now().format("%Y-%m-%d %H:%M UTC")
        );
        println!("{header}");
        Self {
            header,
            rows: Vec::new(),
        }
    }

    /// An empty report that printed no header (unit tests).
    #[cfg(test)]
    pub(crate) fn quiet() -> Self {
        Self {
            header: String::new(),
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

    /// Records a ratio of two figures, printed with two decimals (a target such as 0.8 must
    /// not be judged from a rounded 0.8).
    pub fn ratio(&mut self, key: &str, label: &str, value: f64) {
        println!("   {label:<68} {value:>12.2} x");
        self.rows.push(Row {
            key: key.into(),
            label: label.into(),
            value,
            unit: "x".into(),
        });
    }

    /// Records how busy the machine's cores were (a share, see [`super::cpu`]) during the
    /// figure just recorded, under `busy_{key}`; nothing where that could not be read.
    pub fn busy(&mut self, key: &str, share: Option<f64>) {
        if let Some(busy) = share {
            self.value(
                &format!("busy_{key}"),
                "    machine CPU busy (all cores) during the figure above",
                busy * 100.0,
                "%",
            );
        }
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
        // On one machine the database, the dispatcher and the provider share the CPU. A
        // ceiling's CPU per item is its busy share of the machine (measured; 1 if unknown)
        // over its rate; a delivery costs at least one SQL item and one request, so
        // end-to-end can reach at most 1 / (cost(SQL) + cost(3)).
        let cost = |rate: &str| {
            let r = self.get(rate).filter(|r| *r > 0.0)?;
            let busy = self.get(&format!("busy_{rate}")).filter(|b| *b > 0.0);
            Some(busy.map_or(1.0, |b| b / 100.0) / r)
        };
        let bound = |sql: &str| match (cost(sql), cost("http")) {
            (Some(a), Some(b)) => Some(1.0 / (a + b)),
            _ => None,
        };
        // With our SQL (2b): how much of that the pipeline gets; what is left between it
        // and 1 is cost per intent outside the two ceilings, or waiting.
        ratio(
            "end-to-end / CPU-cost bound of (2b)+(3)",
            e2e,
            bound("own_sql"),
        );
        // With the raw queue's SQL (2a): the highest end-to-end / min(raw DB, HTTP) this
        // machine allows any dispatcher.
        ratio(
            "CPU alone allows at most: bound of (2a)+(3) / min(raw DB, HTTP)",
            bound("raw_db"),
            min,
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

    /// CPU microseconds (all cores) per item of each ceiling and of end-to-end: the busy
    /// share times the cores over the rate. With the split of an end-to-end intent (see
    /// `e2e`), these say which part would have to get cheaper, and by how much.
    pub fn cpu_per_item(&self) -> Vec<(String, f64)> {
        let cores = super::cpu::cores() as f64;
        [
            ("raw_db", "(2a) raw DB, per row"),
            ("own_sql", "(2b) own SQL, per intent"),
            ("http", "(3) HTTP, per request"),
            ("e2e", "(1) end-to-end, per intent"),
        ]
        .into_iter()
        .filter_map(|(key, label)| {
            let rate = self.get(key).filter(|r| *r > 0.0)?;
            let busy = self.get(&format!("busy_{key}"))? / 100.0;
            Some((label.to_owned(), busy * cores * 1e6 / rate))
        })
        .collect()
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
        println!("-- CPU per item (all cores, busy share × cores / rate)");
        for (label, value) in self.cpu_per_item() {
            println!("   {label:<68} {value:>12.1} µs");
            let _ = writeln!(text, "| CPU: {label} | {value:.1} µs |");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(values: &[(&str, f64)]) -> Report {
        Report {
            header: String::new(),
            rows: values
                .iter()
                .map(|(key, value)| Row {
                    key: (*key).into(),
                    label: String::new(),
                    value: *value,
                    unit: String::new(),
                })
                .collect(),
        }
    }

    fn ratio(report: &Report, starts: &str) -> f64 {
        report
            .ratios()
            .into_iter()
            .find(|(label, _)| label.starts_with(starts))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no ratio {starts}"))
    }

    #[test]
    fn ceilings_that_fill_the_machine_allow_half_of_the_smaller() {
        let r = report(&[
            ("raw_db", 60_000.0),
            ("busy_raw_db", 100.0),
            ("http", 60_000.0),
            ("busy_http", 100.0),
        ]);
        assert!((ratio(&r, "CPU alone allows") - 0.5).abs() < 1e-9);
    }

    #[test]
    fn ceilings_that_left_cores_idle_allow_more() {
        let r = report(&[
            ("raw_db", 60_000.0),
            ("busy_raw_db", 50.0),
            ("http", 30_000.0),
            ("busy_http", 50.0),
            ("own_sql", 20_000.0),
            ("busy_own_sql", 100.0),
            ("e2e", 10_000.0),
        ]);
        // 1 / (0.5/60k + 0.5/30k) = 40k against min 30k.
        assert!((ratio(&r, "CPU alone allows") - 40.0 / 30.0).abs() < 1e-9);
        // 1 / (1/20k + 0.5/30k) = 15k; end-to-end is two thirds of it.
        assert!((ratio(&r, "end-to-end / CPU-cost bound") - 10.0 / 15.0).abs() < 1e-9);
    }

    #[test]
    fn cpu_per_item_is_busy_cores_over_rate_and_skips_unknown_busy() {
        let r = report(&[
            ("raw_db", 40_000.0),
            ("busy_raw_db", 50.0),
            ("http", 20_000.0),
        ]);
        let costs = r.cpu_per_item();
        let cores = crate::cpu::cores() as f64;
        assert_eq!(costs.len(), 1, "{costs:?}");
        assert!((costs[0].1 - 0.5 * cores * 1e6 / 40_000.0).abs() < 1e-9);
    }

    #[test]
    fn without_busy_figures_the_ceilings_count_as_full() {
        let r = report(&[("raw_db", 40_000.0), ("http", 40_000.0)]);
        assert!((ratio(&r, "CPU alone allows") - 0.5).abs() < 1e-9);
    }
}
