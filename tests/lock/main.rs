//! Integration tests: path locks: the CLI, liveness, the reference model, processes, the lock
//! file semantics.
//!
//! One test binary per area, each former test file a module: the crate is linked once per
//! area instead of once per file (most of a cold build's time).

#[path = "../support/mod.rs"]
mod support;

mod lock_cli;
mod lock_liveness;
mod lock_model;
mod lock_multiproc;
mod lock_semantics;
