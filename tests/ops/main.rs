//! Integration tests: the operations engine and the index: the CLI, races, the mutation seam,
//! the crash matrix, search.
//!
//! One test binary per area, each former test file a module: the crate is linked once per
//! area instead of once per file (most of a cold build's time).

#[path = "../support/mod.rs"]
mod support;

mod crash_matrix;
mod index_crash;
mod index_docfreq;
mod index_engines;
mod index_find;
mod index_procs;
mod index_search;
mod index_store;
mod journal_engines;
mod migrate;
mod ops_cli;
mod ops_race;
mod ops_seam;
mod ops_vlm;
mod ops_write;
