//! Plain-text output for people: aligned tables, aligned `key  value` blocks, times and
//! truncation. No colours, no terminal detection; the same text in a pipe.

use chrono::{DateTime, Utc};

/// A table with a header row; columns are as wide as their widest cell.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column headers.
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank, extra cells ignored).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, two spaces between columns, the last column unpadded.
    pub fn render(&self) -> String {
        let cell = |row: &[String], i: usize| row.get(i).cloned().unwrap_or_default();
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| cell(r, i).chars().count())
                    .chain([self.headers[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let header: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        let mut out = String::new();
        for row in std::iter::once(&header).chain(self.rows.iter()) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let text = cell(row, i);
                if i + 1 == widths.len() {
                    line.push_str(&text);
                } else {
                    let pad = width - text.chars().count();
                    line.push_str(&text);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key  value` lines with the values aligned, indented by two spaces.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(key, value)| format!("  {key:<width$}  {value}\n"))
        .collect()
}

/// An instant as `2024-05-01 12:00:00Z`.
pub fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// An instant with its age: `2024-05-01 12:00:00Z (5m 3s ago)`.
pub fn time_ago(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{} ({} ago)", time(at), age(at, now))
}

/// How long ago, to the second (`1h 2m 3s`).
pub fn age(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = u64::try_from((now - at).num_seconds()).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// An optional value, or `-`.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// At most `max` characters on one line, with `…` when cut.
pub fn short(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_the_last_is_not_padded() {
        let mut t = Table::new(&["ID", "NAME", "NOTE"]);
        t.row(vec!["1".into(), "a".into(), "x".into()]);
        t.row(vec!["100".into(), "bbbb".into(), String::new()]);
        assert_eq!(t.render(), "ID   NAME  NOTE\n1    a     x\n100  bbbb\n");
    }

    #[test]
    fn short_cuts_with_an_ellipsis() {
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(short("ab\ncd", 10), "ab cd");
        assert_eq!(short("é", 1), "é");
    }
}
