//! Small operator commands that are more than argument parsing but not part of the
//! daemon: [`enqueue`] (`outboxd enqueue`, one intent in its own transaction) and
//! [`fake_provider`] (`outboxd fake-provider`, the built-in fake provider standalone).
//! `main.rs` parses the command line and calls these; the demo lives in [`crate::demo`].

pub mod enqueue;
pub mod fake_provider;
