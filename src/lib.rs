//! vikingfs: OpenViking's context namespace as a Linux filesystem.
//!
//! Layers, each looking only down:
//! faces (`cli`, `fuse`, `session`) → `ops` → `lock`, `store`, `index`, `queue` → `uri`, `workspace`
//! → `sys` (every system call std lacks; it imports nothing of the crate).

pub mod cli;
pub mod config;
pub mod content;
pub mod daemon;
pub mod db;
pub mod dirtimes;
pub mod embed;
pub mod error;
pub mod failpoint;
pub mod fs;
pub mod fsx;
pub mod fuse;
pub mod index;
pub mod lock;
pub mod metrics;
pub mod ops;
pub mod pg;
pub mod process;
pub mod queue;
pub mod semantic;
pub mod session;
pub(crate) mod sql;
pub mod sys;
pub mod uri;
pub mod workspace;
