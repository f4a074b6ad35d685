//! Checks cron schedules at load time with the parser the scheduler itself uses: `croner`,
//! set up as tokio-cron-scheduler sets it up (6 fields, seconds required, day-of-month and
//! day-of-week both applied). A schedule accepted here is one the scheduler accepts when the
//! jobs are registered, and a typo is reported before the daemon starts.

use croner::parser::{CronParser, Seconds};

/// Checks `expr`; the error names the expression and what the parser found wrong.
pub(crate) fn check_cron(expr: &str) -> Result<(), String> {
    match CronParser::builder()
        .seconds(Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(expr)
    {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "{expr:?} is not a valid schedule ({e}); expected 6 fields (second minute hour \
             day-of-month month day-of-week), e.g. \"0 */10 * * * *\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::check_cron;

    #[test]
    fn accepts_common_schedules() {
        for ok in [
            "0 */10 * * * *",
            "*/30 * * * * *",
            "0 0 3 * * SUN",
            "0 15 10 ? * MON-FRI",
            "0 0 12 1,15 JAN-JUN *",
            "0 0 0 L * *",
            "0 0 0 ? * 5#2",
            "0 0-30/5 * * * *",
            "@daily",
        ] {
            assert_eq!(check_cron(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_bad_schedules() {
        for bad in [
            "*/5 * * * *",
            "61 * * * * *",
            "0 0 24 * * *",
            "0 0 0 0 * *",
            "0 0 0 * 13 *",
            "0 */0 * * * *",
            "0 0 0 * * FOO",
            "0 0 $ * * *",
            "",
        ] {
            let err = check_cron(bad).expect_err(bad);
            assert!(
                err.starts_with(&format!("{bad:?} is not a valid schedule (")),
                "{err}"
            );
            assert!(err.contains("expected 6 fields"), "{bad}: {err}");
        }
    }

    #[test]
    fn accepts_what_the_scheduler_accepts() {
        for expr in [
            "0 */10 * * * *",
            "0 0 3 * * *",
            "@daily",
            "61 * * * * *",
            "*/5 * * * *",
            "0 0 0 * * * 2030",
            "0 ,5 * * * *",
        ] {
            let scheduler = tokio_cron_scheduler::Job::new(expr, |_, _| {}).is_ok();
            assert_eq!(check_cron(expr).is_ok(), scheduler, "{expr}");
        }
    }
}
