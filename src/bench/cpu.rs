//! How busy the whole machine was during a measurement, from `/proc/stat` (Linux; `None`
//! elsewhere). The ceilings only bound end-to-end as a sum (see [`super::report`]) when
//! they keep every core busy; this is the figure that shows whether they did.

/// A reading of the machine's CPU time counters.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    busy: u64,
    total: u64,
}

impl CpuSample {
    /// Reads the counters now; `None` where `/proc/stat` is not available.
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        parse_cpu_line(stat.lines().next()?)
    }

    /// The share of all cores' time (0.0–1.0) spent busy between `self` and now.
    pub fn busy_since(&self) -> Option<f64> {
        let later = Self::now()?;
        // The kernel may move iowait backwards a little: never report outside 0–1.
        let total = later.total.saturating_sub(self.total);
        let busy = later.busy.saturating_sub(self.busy);
        (total > 0).then(|| (busy as f64 / total as f64).clamp(0.0, 1.0))
    }
}

/// How busy the machine was since `start` (see [`CpuSample::busy_since`]); `None` when
/// either reading failed.
pub fn busy_since(start: Option<CpuSample>) -> Option<f64> {
    start.and_then(|s| s.busy_since())
}

/// Parses the aggregate `cpu  user nice system idle iowait irq softirq steal ...` line;
/// idle and iowait count as not busy.
fn parse_cpu_line(line: &str) -> Option<CpuSample> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let values: Vec<u64> = fields
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if values.len() < 5 {
        return None;
    }
    let total: u64 = values.iter().sum();
    let idle = values[3] + values[4];
    Some(CpuSample {
        busy: total - idle,
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_iowait_are_not_busy() {
        let s = parse_cpu_line("cpu  100 5 50 800 40 3 2 0 0 0").unwrap();
        assert_eq!(s.total, 1000);
        assert_eq!(s.busy, 160);
    }

    #[test]
    fn a_per_core_line_or_garbage_is_not_read() {
        assert!(parse_cpu_line("cpu0 1 2 3 4 5").is_none());
        assert!(parse_cpu_line("cpu  1 2 x 4 5").is_none());
        assert!(parse_cpu_line("cpu  1 2 3").is_none());
    }
}
