//! Integration tests: sessions: the CLI, crashes, memory extraction, through the mount, races.
//!
//! One test binary per area, each former test file a module: the crate is linked once per
//! area instead of once per file (most of a cold build's time).

#[path = "../support/mod.rs"]
mod support;

mod session_cli;
mod session_crash;
mod session_extract;
mod session_mount;
mod session_race;
