//! Integration tests: through a real vikingfs mount (plain tools, locks, crashes, full disk,
//! POSIX), the systemd unit and `status`.
//!
//! One test binary per area, each former test file a module: the crate is linked once per
//! area instead of once per file (most of a cold build's time).

#[path = "../support/mod.rs"]
mod support;

mod mount_concurrency;
mod mount_content;
mod mount_crash;
mod mount_differential;
mod mount_discovery;
mod mount_fds;
mod mount_first_hour;
mod mount_full_disk;
mod mount_gluster;
mod mount_history;
mod mount_hosts;
mod mount_links;
mod mount_locks;
mod mount_logs;
mod mount_modes;
mod mount_pjdfstest;
mod mount_postgres;
mod mount_race;
mod mount_tools;
mod status_cli;
mod systemd_unit;
