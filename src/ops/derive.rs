//! Which paths get derived state, as the operations ask it: the content rules of
//! [`crate::content`] (ignore rules, the indexing limit) applied to the namespace, and the
//! `rederive` job that brings the derived state in line after a `.vikingignore` changed.
//!
//! The rules are checked where work is queued (so ignored trees such as `.git/` cost no job)
//! and again by every job under its write-back lock (so a job queued before a rule changed
//! never writes a record or a sidecar for a path ignored since). The `rederive` job removes
//! what a rule file's change left behind (records of newly ignored paths, sidecars of newly
//! ignored directories, each under the lock a job writes it under) and queues the jobs of
//! newly included paths and of every directory whose summary may change.

use std::path::Path;

use super::keys::{embed_job, has_summary, semantic_job, NewJob};
use super::{is_source_name, OpsError, Result};
use crate::config::IndexConfig;
use crate::content::{IgnoreRules, IGNORE_FILE};
use crate::uri::VPath;

/// The content rules of one engine.
pub(crate) struct Derivation {
    pub(crate) rules: IgnoreRules,
    /// How much of a text file is indexed.
    pub(crate) max_file_bytes: u64,
}

impl Derivation {
    pub(crate) fn new(data_root: &Path, cfg: &IndexConfig) -> Result<Self> {
        let rules =
            IgnoreRules::new(data_root, &cfg.ignore).map_err(|msg| OpsError::BadSource {
                path: data_root.to_path_buf(),
                msg: format!("vikingfs.index.ignore: {msg}"),
            })?;
        Ok(Derivation {
            rules,
            max_file_bytes: cfg.max_file_bytes,
        })
    }
}

pub use super::keys::{rederive_job, rederive_key};

impl Derivation {
    // The one rule "a file changed → which jobs", for every face: the mount, the CLI, the
    // sessions and the server.

    /// Does `p` (a directory when `is_dir`) get records, sidecars and jobs? Not the root, not
    /// an internal or sidecar name, not ignored.
    pub(crate) fn derives(&self, p: &VPath, is_dir: bool) -> bool {
        !p.is_root() && is_source_name(p.name()) && !self.rules.is_ignored(p, is_dir)
    }

    /// Does `p` get derived state as a file or as a directory (for a path that may be gone,
    /// whose kind is not known)?
    pub(crate) fn may_derive(&self, p: &VPath) -> bool {
        self.derives(p, false) || self.derives(p, true)
    }

    /// Does directory `dir` get summaries? Every derived directory (the scopes included).
    pub(crate) fn summarised(&self, dir: &VPath) -> bool {
        has_summary(dir) && self.derives(dir, true)
    }

    /// The jobs that follow a change of `p` (a file, or a name that may have been one): its
    /// record, its directory's summary, and when it is a rule file, the rederive of its
    /// directory.
    pub(crate) fn jobs_for_change(&self, p: &VPath) -> Vec<NewJob> {
        let mut jobs = Vec::new();
        // One look at the rules per path: this runs on every close of a written file.
        let derived = self.derives(p, false);
        if derived {
            jobs.push(embed_job(p, None));
        }
        self.parent_jobs(p, Some(derived), &mut jobs);
        jobs
    }

    /// What a change of `p` gives its directory: its summary, when `p` gets derived state
    /// (`derived`, when the caller knows; else as a file or a directory), and the rederive
    /// of the directory when `p` is its rule file.
    pub(crate) fn parent_jobs(&self, p: &VPath, derived: Option<bool>, jobs: &mut Vec<NewJob>) {
        let Some(parent) = p.parent().filter(|d| self.summarised(d)) else {
            return;
        };
        if p.name() == IGNORE_FILE {
            jobs.push(rederive_job(&parent));
        }
        if derived.unwrap_or_else(|| self.may_derive(p)) {
            jobs.push(semantic_job(&parent, None));
        }
    }
}
