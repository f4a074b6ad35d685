//! How the demo talks: chapter headings and indented lines on the output, flushed as they
//! are written so the story appears while it happens.

use std::io::{self, Write};

/// Writes the story.
pub struct Narrator<'a> {
    out: &'a mut (dyn Write + Send),
}

impl<'a> Narrator<'a> {
    /// A narrator writing to `out`.
    pub fn new(out: &'a mut (dyn Write + Send)) -> Self {
        Self { out }
    }

    /// A heading, preceded by a blank line.
    pub fn chapter(&mut self, title: &str) -> io::Result<()> {
        writeln!(self.out, "\n== {title}")?;
        self.out.flush()
    }

    /// One indented line.
    pub fn say(&mut self, text: impl AsRef<str>) -> io::Result<()> {
        for line in text.as_ref().lines() {
            writeln!(self.out, "   {line}")?;
        }
        self.out.flush()
    }

    /// A line without indentation (tables, the verdict).
    pub fn raw(&mut self, text: impl AsRef<str>) -> io::Result<()> {
        writeln!(self.out, "{}", text.as_ref())?;
        self.out.flush()
    }
}

/// An idempotency key shortened for display: `obx1_3f2a9c41…`.
pub fn short_key(key: &str) -> String {
    match key.char_indices().nth(14) {
        Some((at, _)) => format!("{}…", &key[..at]),
        None => key.to_owned(),
    }
}
