//! The `outboxd` command line: parse, load configuration, set up telemetry, run.
fn main() {}
