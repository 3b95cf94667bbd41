//! Finishing operations that a dead process left half-done.
//!
//! Each journalled intent names the process that runs it. When that process no longer runs,
//! any vikingfs process may claim the intent (compare-and-swap in the journal, so only one
//! does), take the operation's locks — free at once, as their owner is dead — and finish it
//! forward: an rm removes what is left, an mv moves the records after the files, an add syncs
//! the staging again and queues its jobs, an undo puts back what its plan has not yet put
//! back (`undo::finish_undo`).

use std::time::Duration;

use super::add::process_owner;
use super::{Locked, Result};
use crate::error::Chain;
use crate::journal::Intent;
use crate::lock::codec::{liveness, Liveness};
use crate::lock::LockKind;
use crate::uri::VPath;

impl Locked {
    /// Finish every intent whose process died. Returns how many were finished; an intent
    /// whose locks are busy is left for later.
    pub fn recover(&self) -> Result<usize> {
        let me = process_owner();
        let mut done = 0;
        // The intents a dead process spooled become rows first (`journal::spool`).
        self.journal
            .replay_spools(&self.ws.internal_dir().join(crate::journal::spool::DIR))?;
        for row in self.journal.intents_owned()? {
            // Intents of live processes (this one included) are theirs to finish.
            if !matches!(liveness(&row.owner), Liveness::Dead(_)) {
                continue;
            }
            if !self.journal.claim(row.id, &row.owner, &me)? {
                continue;
            }
            tracing::info!(
                intent = row.intent.describe(),
                "finishing an interrupted operation"
            );
            match self.recover_one(row.id, &row.intent) {
                Ok(()) => done += 1,
                Err(e) if e.is_busy() => {
                    // Hand it back so that a later recovery (any process) tries again.
                    self.journal.claim(row.id, &me, &row.owner)?;
                    tracing::info!(
                        intent = row.intent.describe(),
                        "busy; left for later: {}",
                        Chain(&e)
                    )
                }
                Err(e) => {
                    tracing::warn!(
                        intent = row.intent.describe(),
                        "cannot finish: {}",
                        Chain(&e)
                    )
                }
            }
        }
        Ok(done)
    }

    fn recover_one(&self, id: i64, intent: &Intent) -> Result<()> {
        match intent {
            Intent::Rm { path, dir, blob } => {
                let p = VPath::from_rel(path)?;
                let exists_dir = self.lstat(&p)?.map(|m| m.is_dir());
                let kind = if exists_dir == Some(true) {
                    LockKind::Tree
                } else {
                    LockKind::Exact
                };
                let guard = self.locks.acquire(&[(p.clone(), kind)], Duration::ZERO)?;
                // A blob named but not made (the crash came before the rename) keeps
                // nothing: the path is still there and is moved into it now.
                // Looked at again under the lock.
                let there = self.lstat(&p)?.is_some();
                self.remove_locked(
                    &p,
                    exists_dir.unwrap_or(*dir),
                    there,
                    guard,
                    crate::journal::IntentId::Row(id),
                    blob.clone(),
                )?;
            }
            Intent::Mv { src, dst, dir } => {
                let (src, dst) = (VPath::from_rel(src)?, VPath::from_rel(dst)?);
                // A TREE on a missing path would create it: EXACT on the source, and TREE on
                // the destination only when the renamed tree is there.
                let dst_kind = if *dir && self.lstat(&dst)?.is_some_and(|m| m.is_dir()) {
                    LockKind::Tree
                } else {
                    LockKind::Exact
                };
                let guard = self.locks.acquire(
                    &[(src.clone(), LockKind::Exact), (dst.clone(), dst_kind)],
                    Duration::ZERO,
                )?;
                let src_there = self.lstat(&src)?.is_some();
                let dst_there = self.lstat(&dst)?.is_some();
                if !src_there && dst_there {
                    // Renamed, records maybe not yet: move them now (idempotent).
                    self.index.rename_prefix(&src, &dst)?;
                    self.refresh_under(&dst)?;
                }
                // Otherwise the rename never happened: nothing changed but, when the
                // destination was being replaced, its records may be gone — rebuild them.
                if src_there && dst_there {
                    self.reindex_under(&dst)?;
                }
                self.journal.finish(id)?;
                drop(guard);
                self.enqueue_parent_summary(&src)?;
                self.enqueue_parent_summary(&dst)?;
            }
            Intent::Add {
                temp,
                target,
                handle,
                file,
                overlay,
            } => {
                let t = VPath::from_rel(target)?;
                self.recover_add(id, temp, &t, handle, *file, *overlay)?;
            }
            // Finished forward as planned: what it put back stays, the rest is put back.
            Intent::Undo { .. } => self.finish_undo(id, intent)?,
        }
        Ok(())
    }

    /// The files and directories at or below `p` (`p` itself included); `None` when `p` is gone.
    fn tree_of(&self, p: &VPath) -> Result<Option<(Vec<VPath>, Vec<VPath>)>> {
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        match self.lstat(p)? {
            None => return Ok(None),
            // Nothing is derived from an ignored path.
            Some(m) if !self.derive.derives(p, m.is_dir()) => {}
            Some(m) if m.is_dir() => {
                dirs.push(p.clone());
                self.walk(p, &mut files, &mut dirs)?;
            }
            Some(_) => files.push(p.clone()),
        }
        Ok(Some((files, dirs)))
    }

    /// Queue the jobs of what at or below `p` has no current record: files whose content
    /// record is missing or older than the file, directories whose summary records do not
    /// match their `.abstract.md`. A moved tree whose jobs had not run yet (they looked for
    /// the old names) gets them again; one already indexed costs a lookup per entry.
    pub(crate) fn refresh_under(&self, p: &VPath) -> Result<usize> {
        use crate::index::Level;
        let Some((files, dirs)) = self.tree_of(p)? else {
            return Ok(0);
        };
        let mut jobs = Vec::new();
        for f in &files {
            let current = self.lstat(f)?.map(|m| super::stat_version(&m));
            if current.is_some() && self.index.version_of(f, Level::Content)? != current {
                jobs.push(super::keys::embed_job(f, None));
            }
        }
        for d in &dirs {
            let abs = d.join(crate::uri::ABSTRACT_FILE)?;
            let current = self.lstat(&abs)?.map(|m| super::stat_version(&m));
            if current.is_none() || self.index.version_of(d, Level::Abstract)? != current {
                jobs.push(super::keys::semantic_job(d, None));
            }
        }
        if !jobs.is_empty() {
            self.queue.submit(&jobs)?;
        }
        Ok(jobs.len())
    }

    /// Queue the embedding of every file and the summary of every directory at or below `p`.
    pub(crate) fn reindex_under(&self, p: &VPath) -> Result<usize> {
        let Some((files, dirs)) = self.tree_of(p)? else {
            return Ok(0);
        };
        let mut jobs: Vec<super::keys::NewJob> = files
            .iter()
            .map(|f| super::keys::embed_job(f, None))
            .collect();
        jobs.extend(dirs.iter().map(|d| super::keys::semantic_job(d, None)));
        self.queue.enqueue_many(&jobs)?;
        Ok(jobs.len())
    }
}
