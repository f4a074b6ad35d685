//! A throwaway PostgreSQL cluster for tests that restart the server: created with the
//! installed `initdb`, run with `pg_ctl` on a free port as the `postgres` user (initdb
//! refuses root), stopped and deleted on drop. Other tests keep using the main server.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A private PostgreSQL server.
pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

fn pg_bin() -> Option<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|v| v.join("bin"))
        .filter(|b| b.join("initdb").exists())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn as_postgres(bin: &Path, tool: &str, args: &[&str]) -> bool {
    let running_as_root = std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.starts_with(b"0"))
            .unwrap_or(false);
    let mut cmd = if running_as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
        c
    } else {
        Command::new(bin.join(tool))
    };
    cmd.args(args).status().is_ok_and(|s| s.success())
}

impl PgCluster {
    /// Creates and starts a cluster; `None` when the PostgreSQL binaries are not installed.
    pub fn start() -> Option<PgCluster> {
        let bin = pg_bin()?;
        let dir = std::env::temp_dir().join(format!(
            "outboxd-pg-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).ok()?;
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status();
        let data = dir.join("data");
        let data_s = data.to_string_lossy().into_owned();
        assert!(
            as_postgres(
                &bin,
                "initdb",
                &[
                    "-D",
                    &data_s,
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync"
                ]
            ),
            "initdb failed"
        );
        let mut cluster = PgCluster { dir, bin, port: 0 };
        // The free port is only free until someone else binds it: try a few.
        for _ in 0..5 {
            cluster.port = free_port();
            if cluster.try_pg_ctl_start() {
                return Some(cluster);
            }
        }
        panic!("pg_ctl start failed on five free ports");
    }

    fn pg_ctl_start(&self) {
        assert!(self.try_pg_ctl_start(), "pg_ctl start failed");
    }

    fn try_pg_ctl_start(&self) -> bool {
        let data = self.dir.join("data").to_string_lossy().into_owned();
        let log = self.dir.join("server.log").to_string_lossy().into_owned();
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.display()
        );
        as_postgres(
            &self.bin,
            "pg_ctl",
            &["-D", &data, "-l", &log, "-o", &opts, "-w", "start"],
        )
    }

    /// Stops the server (fast: disconnects every client); whether `pg_ctl stop` succeeded.
    pub fn stop(&self) -> bool {
        let data = self.dir.join("data").to_string_lossy().into_owned();
        as_postgres(
            &self.bin,
            "pg_ctl",
            &["-D", &data, "-m", "fast", "-w", "stop"],
        )
    }

    /// Starts it again on the same port.
    pub fn start_again(&self) {
        self.pg_ctl_start();
    }

    /// A URL for the `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
