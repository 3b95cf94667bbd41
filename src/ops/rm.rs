//! rm: the intent, then the file or tree, then its index records (seed doc, "rm(uri)").
//!
//! A directory is TREE-locked, a file EXACT-locked. With the intent durable the path leaves
//! the namespace in one rename(2) — into the history as its blob (the default), or a tree into
//! the workspace's scratch directory, or a file unlinked when nothing is kept — so a crash
//! never leaves half a tree behind under its name; from then on no search names it (a hit
//! whose file is gone is dropped). Its records are deleted and the intent closed after the
//! reply, in batches ([`super::settle`]), under the same lock, which is released only then;
//! the scratch copy is deleted after that. A crash anywhere leaves an open intent, which
//! recovery finishes.
//!
//! The intent of a removal that keeps its content is one append(2) to the process's intent
//! spool, closed by the history entry of its blob ([`crate::journal::spool`]): no commit
//! before the reply. Without history (or on a full disk) it is a journal row, and a file
//! without records takes none.

use std::path::PathBuf;

use super::settle::Removed;
use super::{Locked, OpsError, Result};
use crate::journal::{Intent, IntentId};
use crate::lock::{LockGuard, LockKind};
use crate::uri::VPath;

/// What an rm did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RmReport {
    /// Index records deleted.
    pub records: usize,
}

/// What may be removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `rm`: a file only.
    File,
    /// `rmdir`: an empty directory only.
    EmptyDir,
    /// `rm -r`: a file or a whole tree.
    Any,
}

/// Refuse paths no user operation may remove or replace: the namespace root and the scopes,
/// and the derived summary files.
pub(crate) fn check_user_path(p: &VPath) -> Result<()> {
    if p.depth() <= 1 {
        return Err(OpsError::ScopeRoot(p.uri()));
    }
    if crate::uri::is_sidecar_name(p.name()) {
        return Err(OpsError::Derived(p.uri()));
    }
    Ok(())
}

impl Locked {
    /// Whether directory `p` holds an entry `counts` (the one emptiness check).
    pub(crate) fn has_entry(&self, p: &VPath, counts: impl Fn(&str) -> bool) -> Result<bool> {
        let names = self
            .root
            .names(p)
            .map_err(|e| OpsError::io(self.backing(p), e))?;
        Ok(names.iter().any(|n| counts(&n.to_string_lossy())))
    }

    /// Whether directory `p` holds a source entry (anything but summaries and internal
    /// files): what makes a directory non-empty to rmdir.
    pub(crate) fn has_sources(&self, p: &VPath) -> Result<bool> {
        self.has_entry(p, super::is_source_name)
    }
}

impl Locked {
    /// `vikingfs rm [-r] URI`: remove a file, or with `recursive` a file or a directory tree.
    pub fn rm(&self, p: &VPath, recursive: bool) -> Result<RmReport> {
        self.freeing(|| self.remove(p, if recursive { Mode::Any } else { Mode::File }))
    }

    /// unlink(2) through the mount: a file.
    pub fn unlink(&self, p: &VPath) -> Result<()> {
        self.freeing(|| self.remove(p, Mode::File)).map(drop)
    }

    /// rmdir(2) through the mount: an empty directory (its summaries and lock files go too).
    pub fn rmdir(&self, p: &VPath) -> Result<()> {
        self.freeing(|| self.remove(p, Mode::EmptyDir)).map(drop)
    }

    fn remove(&self, p: &VPath, mode: Mode) -> Result<RmReport> {
        check_user_path(p)?;
        let fs = self.backing(p);
        // unlink and rmdir know the lock they need; `rm -r` looks first. Either way what
        // counts is the look under the lock: the path may have changed before it.
        let dir = match mode {
            Mode::File => false,
            Mode::EmptyDir => true,
            Mode::Any => self
                .lstat(p)?
                .ok_or_else(|| OpsError::NotFound(p.uri()))?
                .is_dir(),
        };
        let kind = if dir { LockKind::Tree } else { LockKind::Exact };
        // A missing directory above is not made for the lock file: the path is not there.
        let guard = match self.lock_existing(&[(p.clone(), kind)]) {
            Err(OpsError::Lock(crate::lock::LockError::Gone { .. })) => {
                return Err(OpsError::NotFound(p.uri()))
            }
            g => g?,
        };
        let meta = self.lstat(p)?.ok_or_else(|| OpsError::NotFound(p.uri()))?;
        match mode {
            Mode::File if meta.is_dir() => return Err(OpsError::IsADirectory(p.uri())),
            Mode::EmptyDir if !meta.is_dir() => return Err(OpsError::NotADirectory(p.uri())),
            Mode::Any if meta.is_dir() != dir => return Err(OpsError::NotFound(p.uri())),
            _ => {}
        }
        // Summaries and lock files do not make a directory non-empty.
        if mode == Mode::EmptyDir && self.has_sources(p)? {
            return Err(OpsError::NotEmpty(p.uri()));
        }
        crate::crash_point!("rm.locked");
        let blob = self.new_blob();
        let intent = Intent::Rm {
            path: p.as_str().to_string(),
            dir,
            blob: blob.clone(),
        };
        let id = if blob.is_some() {
            // Kept: the intent is one line of the spool (no commit), closed by the blob's
            // history entry, committed with the batch's (`journal::spool`). Records or not:
            // whatever the path had is deleted with the batch.
            self.journal.begin_kept(&intent, guard.owner())?
        } else if !dir && !self.index.has_under(p)? {
            // Nothing kept and a file without records: nothing to keep in step with the
            // file, so no intent — a crash leaves the file there or gone, each consistent.
            // No record can appear meanwhile: a job writes one only under this EXACT lock
            // (or under a lifecycle TREE covering the file, which this lock conflicts with).
            self.root.remove_file(p).map_err(|e| OpsError::io(&fs, e))?;
            crate::crash_point!("rm.removed");
            let removed = Removed {
                path: p.clone(),
                intent: None,
                guard,
                trash: None,
                pid: None,
                blob: None,
            };
            self.settle(removed)?;
            return Ok(RmReport::default());
        } else {
            IntentId::Row(self.journal.begin(&intent, guard.owner())?)
        };
        crate::crash_point!("rm.intent");
        // Still there: re-checked under the lock above.
        let report = self.remove_locked(p, dir, true, guard, id, blob)?;
        Ok(report)
    }

    /// The locked part of rm, shared with recovery: the path (when `there`), then (after the
    /// reply, in a batch) the records and the intent.
    pub(crate) fn remove_locked(
        &self,
        p: &VPath,
        dir: bool,
        there: bool,
        guard: LockGuard,
        intent: IntentId,
        blob: Option<String>,
    ) -> Result<RmReport> {
        let fs = self.backing(p);
        let mut trash: Option<PathBuf> = None;
        if there {
            if let Some(b) = &blob {
                // Kept: the file or the whole tree moves into the history in one rename(2).
                if dir {
                    // The tree's own lock file leaves with it: not a lock lost.
                    guard.moving_out(&fs);
                }
                let to = self.blob_path(b);
                self.put_blob(|| self.root.rename_out(p, &to))
                    .map_err(|e| OpsError::io(&fs, e))?;
            } else if dir {
                let t = self
                    .ws
                    .tmp_dir()
                    .join(format!("rm-{}", uuid::Uuid::new_v4().simple()));
                // The tree's own lock file leaves with it: not a lock lost.
                guard.moving_out(&fs);
                self.root
                    .rename_out(p, &t)
                    .map_err(|e| OpsError::io(&fs, e))?;
                trash = Some(t);
            } else {
                self.root.remove_file(p).map_err(|e| OpsError::io(&fs, e))?;
            }
        }
        crate::crash_point!("rm.removed");
        // The path is gone: the rest is done after the reply (by the settler). Without a
        // reply scope it runs here, with whatever waits, and the records it deleted are
        // reported.
        let removed = Removed {
            path: p.clone(),
            intent: Some(intent),
            guard,
            trash,
            blob,
            pid: Some((
                crate::process::requester_pid(),
                self.command_of(crate::process::requester()),
            )),
        };
        let records = self.settle(removed)?;
        Ok(RmReport { records })
    }

    /// The parent directory's summary must be regenerated after a child changed (a child
    /// that gets derived state; a rule file's change re-derives the whole directory).
    pub(crate) fn enqueue_parent_summary(&self, p: &VPath) -> Result<()> {
        let mut jobs = Vec::new();
        self.derive.parent_jobs(p, None, &mut jobs);
        if !jobs.is_empty() {
            self.queue.submit(&jobs)?;
        }
        Ok(())
    }

    /// The mount removed `p` itself (without [`Locked::rm`]): drop its records and refresh the
    /// parent's summary.
    pub fn removed(&self, p: &VPath) -> Result<()> {
        self.index.delete_prefix(p)?;
        self.enqueue_parent_summary(p)
    }
}
