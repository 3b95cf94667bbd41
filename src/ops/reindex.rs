//! `reindex`: rebuild the records under a path from the files, now — the terms of every
//! file written before it returns (with progress), records whose source is gone removed,
//! every directory's summary and every missing vector queued. Also what an index of an
//! older format (or a lost one) is rebuilt with when the workspace is opened.
//!
//! Each file is read outside any lock and written back under the lock a job's write-back
//! takes (EXACT, or nothing more under a lifecycle covering it) after checking it still has
//! the version read, as the `embedding` job does; a file whose lock stays busy (a user's
//! operation) gets that job queued instead.

use std::collections::HashSet;

use super::jobs::{embed_job, new_record, semantic_job, JobLock, NewJob};
use super::{stat_version, Ops, Result};
use crate::index::Level;
use crate::uri::VPath;

/// What a reindex did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReindexReport {
    /// Files whose record was written (or found current).
    pub files: u64,
    /// Records removed because their source is gone.
    pub removed: u64,
    /// Jobs queued: summaries, vectors, files left to the queue.
    pub queued: u64,
}

/// Files read, then written in one index commit under their locks ([`Ops::index_batch`]).
const BATCH: usize = 256;

impl Ops {
    /// Rebuild the records at or below `under` from the files (see the module doc);
    /// `progress` hears (done, total) files.
    pub fn reindex(
        &self,
        under: &VPath,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<ReindexReport> {
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        if under.is_root() {
            for scope in crate::uri::SCOPES {
                let s = VPath::root().join(scope)?;
                dirs.push(s.clone());
                self.walk(&s, &mut files, &mut dirs)?;
            }
        } else if !self.derive.may_derive(under) {
            // Ignored: nothing is derived (what was is removed below).
        } else if self.lstat(under)?.is_some_and(|m| m.is_dir()) {
            dirs.push(under.clone());
            self.walk(under, &mut files, &mut dirs)?;
        } else if self.lstat(under)?.is_some_and(|m| m.is_file()) {
            files.push(under.clone());
        }
        let mut rep = ReindexReport::default();
        let total = files.len() as u64;
        let mut later: Vec<NewJob> = Vec::new();
        for chunk in files.chunks(BATCH) {
            later.extend(self.index_batch(chunk)?.iter().map(|f| embed_job(f, None)));
            for _ in chunk {
                rep.files += 1;
                progress(rep.files, total);
            }
        }
        // Records whose source is gone (by version, so one rebuilt meanwhile survives).
        let live: HashSet<(&VPath, Level)> = files
            .iter()
            .map(|f| (f, Level::Content))
            .chain(
                dirs.iter()
                    .flat_map(|d| [(d, Level::Abstract), (d, Level::Overview)]),
            )
            .collect();
        for (uri, level) in self.index.all_uris()? {
            if !uri.starts_with(under) || live.contains(&(&uri, level)) {
                continue;
            }
            if let Some(v) = self.index.version_of(&uri, level)? {
                rep.removed += self.index.delete_if_version(&uri, level, &v)? as u64;
            }
        }
        later.extend(
            dirs.iter()
                .filter(|d| self.derive.summarised(d))
                .map(|d| semantic_job(d, None)),
        );
        for chunk in later.chunks(1000) {
            self.queue.enqueue_many(chunk)?;
        }
        rep.queued = later.len() as u64 + self.backfill_vectors()? as u64;
        Ok(rep)
    }

    /// Write the records of `files` from what they hold now, [`BATCH`] at a time: each read
    /// outside any lock, then all written in one commit under their job locks (EXACT each,
    /// or a lifecycle covering them) if each still has the version read; a file that changed
    /// meanwhile, or whose lock is busy, or that is not a text file, goes one by one
    /// ([`Self::index_now`]). Returns the files left to the queue.
    pub(crate) fn index_batch(&self, files: &[VPath]) -> Result<Vec<VPath>> {
        let mut read = Vec::new();
        let mut one_by_one = Vec::new();
        for p in files {
            match self.read_text(p, self.derive.max_file_bytes)? {
                Some((text, v, partial)) => {
                    if self.index.version_of(p, Level::Content)?.as_deref() != Some(v.as_str()) {
                        read.push((p.clone(), text, v, partial));
                    }
                }
                None => one_by_one.push(p.clone()),
            }
        }
        if !read.is_empty() {
            let paths: Vec<VPath> = read.iter().map(|r| r.0.clone()).collect();
            match self.job_lock(&paths, None) {
                Ok(JobLock::Held(_g)) => {
                    let mut current = Vec::new();
                    for (p, text, v, partial) in read {
                        match self.lstat(&p)? {
                            Some(m) if stat_version(&m) == v => {
                                current.push(new_record(p, Level::Content, text, v, partial))
                            }
                            None => {}
                            Some(_) => one_by_one.push(p),
                        }
                    }
                    self.put_records(current)?;
                }
                // Gone (a directory removed meanwhile) or busy: each on its own.
                _ => one_by_one.extend(paths),
            }
        }
        let mut later = Vec::new();
        for p in one_by_one {
            if !self.index_now(&p)? {
                later.push(p);
            }
        }
        Ok(later)
    }

    /// The restored files of an undo (`restored`: what its report names, with the entries
    /// they came from), indexed now in batches, so that `find` answers for them when the
    /// undo returns; their queued jobs then find the records current. What cannot be indexed
    /// now stays with the queue.
    pub(crate) fn index_restored(&self, restored: &[(String, i64)]) -> Result<()> {
        let mut files = Vec::new();
        for (u, _) in restored {
            let Ok(p) = VPath::parse_uri(u, "default") else {
                continue;
            };
            if self.derive.may_derive(&p) && self.lstat(&p)?.is_some_and(|m| m.is_file()) {
                files.push(p);
            }
        }
        for chunk in files.chunks(BATCH) {
            let later: Vec<_> = self
                .index_batch(chunk)?
                .iter()
                .map(|f| embed_job(f, None))
                .collect();
            self.queue.submit(&later)?;
        }
        Ok(())
    }

    /// Write the record of file `p` from what it holds now, under its lock. Returns false
    /// when the lock stayed busy or the file kept changing (a queued job does it later).
    fn index_now(&self, p: &VPath) -> Result<bool> {
        for _round in 0..3 {
            let Some((text, v, partial)) = self.read_text(p, self.derive.max_file_bytes)? else {
                // Not a regular text file (or gone): nothing to index, and a record left
                // from before (by version: one rebuilt meanwhile survives) goes.
                if let Some(v) = self.index.version_of(p, Level::Content)? {
                    if !self.lstat(p)?.is_some_and(|m| m.is_dir()) {
                        self.index.delete_if_version(p, Level::Content, &v)?;
                    }
                }
                return Ok(true);
            };
            if self.index.version_of(p, Level::Content)?.as_deref() == Some(v.as_str()) {
                return Ok(true);
            }
            // As a job's write-back: EXACT, or nothing more under a lifecycle covering it.
            let _g = match self.job_lock(std::slice::from_ref(p), None) {
                Ok(JobLock::Held(g)) => g,
                Ok(JobLock::Gone) => return Ok(true),
                Err(_) => return Ok(false),
            };
            match self.lstat(p)? {
                Some(m) if stat_version(&m) == v => {
                    self.put_record(p, Level::Content, &text, v, partial)?;
                    return Ok(true);
                }
                None => return Ok(true),
                Some(_) => continue,
            }
        }
        Ok(false)
    }
}

impl Ops {
    /// [`Locked::undo`](super::Locked::undo), with the restored files indexed before it returns
    /// ([`Ops::index_restored`]): `find` answers for them at once, and the jobs the
    /// undo queued find their records current (summaries and vectors follow from them).
    pub fn undo(
        &self,
        p: &VPath,
        at_ms: Option<i64>,
        dry_run: bool,
        force: bool,
    ) -> Result<super::UndoReport> {
        let r = self.locked().undo(p, at_ms, dry_run, force)?;
        self.index_undone(&r, dry_run);
        Ok(r)
    }

    /// [`Locked::rewind`](super::Locked::rewind), with the restored files indexed before it returns.
    pub fn rewind(&self, p: &VPath, since_ms: i64, dry_run: bool) -> Result<super::UndoReport> {
        let r = self.locked().rewind(p, since_ms, dry_run)?;
        self.index_undone(&r, dry_run);
        Ok(r)
    }

    fn index_undone(&self, r: &super::UndoReport, dry_run: bool) {
        if dry_run || r.restored.is_empty() {
            return;
        }
        if let Err(e) = self.index_restored(&r.restored) {
            // The undo is done; its queued jobs index what this did not.
            tracing::warn!(error = %crate::error::Chain(&e), "indexing restored files");
        }
    }
}
