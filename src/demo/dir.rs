//! A private temporary directory for the demo database, removed on drop (also when the
//! demo fails half-way).

use std::io;
use std::path::{Path, PathBuf};

/// A fresh directory under [`std::env::temp_dir`], deleted with its contents on drop.
#[derive(Debug)]
pub struct DemoDir {
    path: PathBuf,
}

impl DemoDir {
    /// Creates `outboxd-demo-<pid>-<random>`; fails rather than reuse an existing one.
    pub fn create() -> io::Result<DemoDir> {
        let name = format!(
            "outboxd-demo-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)?;
        Ok(DemoDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: could not remove {}: {e}", self.path.display());
        }
    }
}
