//! How busy the whole machine was during a measurement, from `/proc/stat`, and how much
//! CPU time one process or PostgreSQL's server processes used, from `/proc/<pid>/stat`
//! (Linux; `None` elsewhere). The ceilings only bound end-to-end as a sum (see
//! [`super::report`]) when they keep every core busy; the busy share shows whether they
//! did, and the per-process figures show where an end-to-end intent's CPU goes.

/// Clock ticks per second of the `/proc` counters (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

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

/// The cores this machine offers (1 when it cannot be told).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// CPU seconds (user + system) a process has used so far; `None` if it cannot be read.
pub fn process_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_process_ticks(&stat).map(|t| t as f64 / TICKS_PER_SECOND)
}

/// CPU seconds a single-threaded process (a PostgreSQL backend) has spent running so far,
/// to the nanosecond: the first field of `/proc/<pid>/schedstat`, the scheduler's run time
/// of the process's main thread. `/proc/<pid>/stat` counts in 10 ms ticks, too coarse for
/// statements that take tens of microseconds; falls back to it where schedstat is not
/// available.
pub fn process_seconds_precise(pid: u32) -> Option<f64> {
    run_seconds(&format!("/proc/{pid}/schedstat")).or_else(|| process_seconds(pid))
}

/// The run time, in seconds, in a schedstat file.
fn run_seconds(path: &str) -> Option<f64> {
    let schedstat = std::fs::read_to_string(path).ok()?;
    parse_schedstat_ns(&schedstat).map(|ns| ns as f64 / 1e9)
}

/// The run time in nanoseconds of a `/proc/<pid>/schedstat` line (`run wait slices`); a
/// kernel without scheduler statistics prints zeros there, which reads as unavailable.
fn parse_schedstat_ns(schedstat: &str) -> Option<u64> {
    schedstat
        .split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|ns| *ns > 0)
}

/// CPU seconds used so far by the processes named `postgres` on this machine (a local
/// server's backends and background workers; backends that exit in between are not
/// counted); `None` when there are none.
pub fn postgres_seconds() -> Option<f64> {
    let mut ticks = 0;
    let mut found = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if stat.contains("(postgres)") {
            if let Some(t) = parse_process_ticks(&stat) {
                ticks += t;
                found = true;
            }
        }
    }
    found.then(|| ticks as f64 / TICKS_PER_SECOND)
}

/// utime + stime of a `/proc/<pid>/stat` line (fields 14 and 15; the name in parentheses
/// may hold spaces, so fields are counted after its closing parenthesis).
fn parse_process_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
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
    fn process_ticks_are_user_plus_system_after_the_name() {
        let line = "42 (tokio runtime) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(parse_process_ticks(line), Some(325));
        assert_eq!(parse_process_ticks("42 (x) S 1"), None);
    }

    #[test]
    fn schedstat_run_time_is_its_first_field() {
        assert_eq!(parse_schedstat_ns("485794 120 7\n"), Some(485_794));
        assert_eq!(parse_schedstat_ns(""), None);
        assert_eq!(parse_schedstat_ns("x 1 2"), None);
        assert_eq!(
            parse_schedstat_ns("0 0 0"),
            None,
            "scheduler statistics off"
        );
    }

    #[test]
    fn a_thread_that_runs_gains_run_time() {
        // The test's own thread: /proc/<pid>/schedstat is the main thread's, which sleeps.
        // A running thread's counter moves at scheduler ticks (up to 10 ms apart), and a
        // context switch brings it up to date: spin for 30 ms, then sleep briefly. A thread
        // this young may still read 0 (unavailable) before its first update.
        assert!(std::fs::metadata("/proc/thread-self/schedstat").is_ok());
        std::thread::sleep(std::time::Duration::from_millis(2));
        let before = run_seconds("/proc/thread-self/schedstat").unwrap_or(0.0);
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        let after = run_seconds("/proc/thread-self/schedstat").unwrap();
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn a_per_core_line_or_garbage_is_not_read() {
        assert!(parse_cpu_line("cpu0 1 2 3 4 5").is_none());
        assert!(parse_cpu_line("cpu  1 2 x 4 5").is_none());
        assert!(parse_cpu_line("cpu  1 2 3").is_none());
    }
}
