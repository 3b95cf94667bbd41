//! vikingfs: OpenViking's context namespace as a Linux filesystem.
//!
//! Layers, each looking only down (`scripts/import-graph.py --check` holds the code to it;
//! docs/architecture.md is the map):
//! - faces: `cli` (the composition root: it wires `fuse`, `ops`, `server` and `session`), `fuse`
//!   (the thin fuser adapter over `fs`), `server` (OpenViking's HTTP API and MCP), `session`;
//! - `ops`: the store kernel, the locked operations over it, the derivers and repair;
//! - the stores and the filesystem core: `lock`, `index`, `queue`, `journal`,
//!   `fs` (which calls down only through its `Mutations` trait);
//! - beside them, pure work and configuration: `semantic`, `embed`, `content`, `config`,
//!   `workspace`, `daemon`, `dirtimes`, `fsx`, `sharedfs` (whether a filesystem is safe for
//!   several hosts);
//! - leaves: `sys` (every system call std lacks), `uri`, `errno` (`ToErrno`), `tail` (work
//!   after a reply), `error`, `db`, `pg`, `process`, `metrics`, `failpoint`.

// The documentation is the developers' map of the internals (CI builds it with
// `--document-private-items`, where every link must resolve): module docs link private items.
#![allow(rustdoc::private_intra_doc_links)]

pub mod cli;
pub mod config;
pub mod content;
pub mod daemon;
pub mod db;
pub mod dirtimes;
pub mod embed;
pub mod errno;
pub mod error;
pub mod failpoint;
pub mod fs;
pub mod fsx;
pub mod fuse;
pub mod index;
pub mod journal;
pub mod lock;
pub mod metrics;
pub mod ops;
pub mod pg;
pub mod process;
pub mod queue;
pub mod semantic;
pub mod server;
pub mod session;
pub mod sharedfs;
pub mod spoolfile;
pub(crate) mod sql;
pub mod sys;
pub mod tail;
pub mod uri;
pub mod workspace;
