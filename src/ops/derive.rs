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

use serde_json::{json, Value};

use super::jobs::{embed_job, semantic_job, JobLock, NewJob, ABSTRACT_FILE, OVERVIEW_FILE};
use super::{is_source_name, source_version, stat, Ops, OpsError, Result, Stores};
use crate::config::IndexConfig;
use crate::content::{IgnoreRules, IGNORE_FILE};
use crate::index::Level;
use crate::queue::{self, Job, JobError};
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

/// `rederive:{uri}`.
pub fn rederive_key(dir: &VPath) -> String {
    format!("rederive:{}", dir.uri())
}

pub fn rederive_job(dir: &VPath) -> NewJob {
    NewJob::new(
        queue::REDERIVE,
        Some(rederive_key(dir)),
        json!({ "dir": dir.uri() }),
    )
}

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
        super::jobs::has_summary(dir) && self.derives(dir, true)
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

impl Stores {
    /// Under a lock that covers `p` (a move's, after the rename): remove what is derived
    /// from ignored paths at or below it — records, and the sidecars of ignored directories.
    pub(crate) fn prune_ignored(&self, p: &VPath, is_dir: bool) -> Result<()> {
        let mut dirs = Vec::new();
        for (uri, level) in self.index.uris_under(p)? {
            if !self.derive.derives(&uri, level.names_directory()) {
                self.index.delete(&uri)?;
                if level == Level::Abstract {
                    dirs.push(uri);
                }
            }
        }
        if is_dir && !self.derive.derives(p, true) {
            // The whole tree is ignored: every directory's sidecars go, indexed or not.
            let mut stack = vec![p.clone()];
            while let Some(d) = stack.pop() {
                let below = self.children(&d)?;
                stack.extend(below.into_iter().filter(|(_, dir)| *dir).map(|(c, _)| c));
                dirs.push(d);
            }
        }
        for d in dirs {
            for name in [ABSTRACT_FILE, OVERVIEW_FILE] {
                let f = self.backing(&d.join(name)?);
                match std::fs::remove_file(&f) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(OpsError::io(f, e))
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The `rederive` job: after the rule file of `dir` changed, remove what is derived from
    /// paths it now ignores and queue the jobs of what it now includes (see the module doc).
    pub fn run_rederive(&self, job: &Job) -> std::result::Result<(), JobError> {
        let uri = job
            .payload
            .get("dir")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                JobError::Permanent(format!("payload has no \"dir\": {}", job.payload).into())
            })?;
        let dir = self.parse(uri).map_err(super::jobs::bad_payload)?;
        crate::crash_point!("job.rederive.start");
        self.derive.rules.invalidate(&dir);
        if !self.derive.derives(&dir, true)
            || !stat(&self.backing(&dir))?.is_some_and(|m| m.is_dir())
        {
            return Ok(());
        }
        let mut jobs = vec![semantic_job(&dir, None)];
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for (p, is_dir) in self.children(&d)? {
                if !self.derive.derives(&p, is_dir) {
                    self.underive(&p, is_dir)?;
                    crate::crash_point!("job.rederive.underived");
                } else if is_dir {
                    jobs.push(semantic_job(&p, None));
                    stack.push(p);
                } else {
                    let now = stat(&self.backing(&p))?.map(|m| source_version(&m));
                    if now.is_some() && self.index.version_of(&p, Level::Content)? != now {
                        jobs.push(embed_job(&p, None));
                    }
                }
            }
        }
        for chunk in jobs.chunks(1000) {
            self.queue.submit(chunk)?;
        }
        Ok(())
    }

    /// The entries of `dir` that are sources (files and directories; not sidecars, internal
    /// names, symlinks or special files), with whether each is a directory.
    fn children(&self, dir: &VPath) -> Result<Vec<(VPath, bool)>> {
        let fs = self.backing(dir);
        let rd = match std::fs::read_dir(&fs) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(OpsError::io(&fs, e)),
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !is_source_name(&name) {
                continue;
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() || ft.is_file() {
                if let Ok(p) = dir.join(&name) {
                    out.push((p, ft.is_dir()));
                }
            }
        }
        Ok(out)
    }

    /// Remove what is derived from the ignored `p`: its records and those below it, and the
    /// sidecars of every directory at or below it, each under the lock a job writes it under.
    fn underive(&self, p: &VPath, is_dir: bool) -> std::result::Result<(), JobError> {
        self.drop_records_under(p)?;
        if !is_dir {
            return Ok(());
        }
        let mut stack = vec![p.clone()];
        while let Some(d) = stack.pop() {
            self.drop_sidecars_of(&d)?;
            stack.extend(
                self.children(&d)?
                    .into_iter()
                    .filter(|(_, dir)| *dir)
                    .map(|(c, _)| c),
            );
        }
        Ok(())
    }

    /// Drop the records at or below `p`, each under its write-back lock.
    pub(crate) fn drop_records_under(&self, p: &VPath) -> std::result::Result<(), JobError> {
        for (uri, _) in self.index.uris_under(p).map_err(OpsError::from)? {
            let JobLock::Held(_g) = self.job_lock(std::slice::from_ref(&uri), None)? else {
                continue;
            };
            self.index.delete(&uri).map_err(OpsError::from)?;
        }
        Ok(())
    }

    /// Remove the sidecars of directory `d`, under the lock the semantic job writes them
    /// under.
    pub(crate) fn drop_sidecars_of(&self, d: &VPath) -> std::result::Result<(), JobError> {
        let sidecars = [
            d.join(ABSTRACT_FILE).map_err(OpsError::from)?,
            d.join(OVERVIEW_FILE).map_err(OpsError::from)?,
        ];
        if !sidecars
            .iter()
            .any(|s| std::fs::symlink_metadata(self.backing(s)).is_ok())
        {
            return Ok(());
        }
        if let JobLock::Held(_g) = self.job_lock(&sidecars, None)? {
            for s in &sidecars {
                match std::fs::remove_file(self.backing(s)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(OpsError::io(self.backing(s), e).into())
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// The worker pool's handler for the `rederive` queue.
pub struct RederiveHandler(pub std::sync::Arc<Ops>);

impl queue::JobHandler for RederiveHandler {
    fn handle(&self, job: &Job) -> std::result::Result<(), JobError> {
        self.0.run_rederive(job)
    }
}
