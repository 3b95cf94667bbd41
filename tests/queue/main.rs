//! Integration tests: the job queue: coalescing, leases, retries, the spool, the worker pool,
//! with real processes.
//!
//! One test binary per area, each former test file a module: the crate is linked once per
//! area instead of once per file (most of a cold build's time).

#[path = "../support/mod.rs"]
mod support;

mod queue_cli;
mod queue_coalesce;
mod queue_concurrent;
mod queue_lease;
mod queue_pool;
mod queue_postgres;
mod queue_retry;
mod queue_spool;
