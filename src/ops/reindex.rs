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

use super::jobs::{embed_job, semantic_job, JobLock, NewJob};
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
        for (i, f) in files.iter().enumerate() {
            if !self.index_now(f)? {
                later.push(embed_job(f, None));
            }
            rep.files += 1;
            progress(i as u64 + 1, total);
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
