//! A minimal check of 6-field cron expressions (`sec min hour day-of-month month
//! day-of-week`, the syntax tokio-cron-scheduler parses with seconds required): field
//! count, allowed characters and numeric ranges. The scheduler parses them for real when
//! jobs are registered; this catches typos at load time.

const FIELDS: [Field; 6] = [
    Field::new("second", 0, 59, &[]),
    Field::new("minute", 0, 59, &[]),
    Field::new("hour", 0, 23, &[]),
    Field::new("day of month", 1, 31, &[]),
    Field::new("month", 1, 12, &MONTHS),
    Field::new("day of week", 0, 7, &DAYS),
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

impl Field {
    const fn new(name: &'static str, min: u32, max: u32, names: &'static [&'static str]) -> Self {
        Self {
            name,
            min,
            max,
            names,
        }
    }

    /// Day fields also accept `?` and the `L`, `W`, `#` forms (`L`, `15W`, `5L`, `MON#2`).
    fn is_day(&self) -> bool {
        self.name.starts_with("day")
    }
}

/// Checks `expr`; the error says which field is wrong and why.
pub(crate) fn check_cron(expr: &str) -> Result<(), String> {
    let parts: Vec<&str> = expr.split_whitespace().collect();
    if parts.len() != FIELDS.len() {
        return Err(format!(
            "{expr:?} has {} fields; expected 6 (second minute hour day-of-month month \
             day-of-week), e.g. \"0 */10 * * * *\"",
            parts.len()
        ));
    }
    for (part, field) in parts.iter().zip(FIELDS.iter()) {
        check_field(part, field)
            .map_err(|why| format!("{expr:?}: {} field {part:?} {why}", field.name))?;
    }
    Ok(())
}

fn check_field(text: &str, field: &Field) -> Result<(), String> {
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '*' | '/' | ',' | '-' | '?' | '#')))
    {
        return Err(format!("contains {bad:?}"));
    }
    for item in text.split(',') {
        check_item(item, field)?;
    }
    Ok(())
}

fn check_item(item: &str, field: &Field) -> Result<(), String> {
    if item.is_empty() {
        return Err("has an empty list entry".to_owned());
    }
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(step)),
        None => (item, None),
    };
    if let Some(step) = step {
        match step.parse::<u32>() {
            Ok(n) if n >= 1 => {}
            _ => return Err(format!("has step {step:?}; expected a positive number")),
        }
    }
    if range == "*" || (range == "?" && field.is_day()) {
        return Ok(());
    }
    if field.is_day() && range.contains(['L', 'W', '#']) {
        return Ok(());
    }
    let (low, high) = match range.split_once('-') {
        Some((low, high)) => (low, Some(high)),
        None => (range, None),
    };
    let low = check_value(low, field)?;
    if let Some(high) = high {
        if check_value(high, field)? < low {
            return Err(format!("has range {range:?} running backwards"));
        }
    }
    Ok(())
}

fn check_value(value: &str, field: &Field) -> Result<u32, String> {
    if let Ok(n) = value.parse::<u32>() {
        return if (field.min..=field.max).contains(&n) {
            Ok(n)
        } else {
            Err(format!("has {n}; allowed {}..={}", field.min, field.max))
        };
    }
    let upper = value.to_ascii_uppercase();
    match field.names.iter().position(|n| *n == upper) {
        Some(i) => Ok(i as u32 + field.min),
        None => Err(format!("has {value:?}; expected a number or *")),
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
        ] {
            assert_eq!(check_cron(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_bad_schedules() {
        for (bad, why) in [
            ("*/5 * * * *", "5 fields"),
            ("0 0 0 * * * 2030", "7 fields"),
            ("61 * * * * *", "second field"),
            ("0 0 24 * * *", "hour field"),
            ("0 0 0 0 * *", "day of month field"),
            ("0 0 0 * 13 *", "month field"),
            ("0 */0 * * * *", "step"),
            ("0 0 0 * * FOO", "\"FOO\""),
            ("0 0 5-1 * * *", "backwards"),
            ("0 0 $ * * *", "'$'"),
            ("0 ,5 * * * *", "empty list entry"),
            ("", "0 fields"),
        ] {
            let err = check_cron(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
