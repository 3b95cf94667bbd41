//! Writes of one file (what the mount calls on close) and the notifications the mount sends
//! for changes it made itself.
//!
//! Under the file's EXACT lock its old record is dropped (a search misses it rather than
//! naming it for text it no longer holds) and the embedding and the parent's summary are
//! enqueued *before* the bytes are written: a crash after the write can then not leave a file without its job,
//! and a job that runs early and reads the old bytes finds, under the same lock, that the
//! version changed and retries (or a newer job of its key supersedes it).

use super::rm::check_user_path;
use super::{Locked, OpsError, Result};
use crate::uri::VPath;

impl Locked {
    /// Write `bytes` as the whole content of file `p` (created when missing; its directory
    /// must exist), atomically, then have it re-indexed.
    pub fn write_file(&self, p: &VPath, bytes: &[u8]) -> Result<()> {
        check_user_path(p)?;
        let parent = p.parent().expect("depth checked");
        match self.lstat(&parent)? {
            None => return Err(OpsError::NotFound(parent.uri())),
            Some(m) if !m.is_dir() => return Err(OpsError::NotADirectory(parent.uri())),
            Some(_) => {}
        }
        let fs = self.backing(p);
        let _guard = self.lock(&[(p.clone(), crate::lock::LockKind::Exact)])?;
        if self.lstat(p)?.is_some_and(|m| m.is_dir()) {
            return Err(OpsError::IsADirectory(p.uri()));
        }
        crate::crash_point!("write.locked");
        // The old record would name this file for words it is about to lose: better no
        // result until the job has indexed the new content than a wrong one.
        self.index.delete(p)?;
        self.queue.enqueue_many(&self.derive.jobs_for_change(p))?;
        crate::crash_point!("write.enqueued");
        self.root
            .write_atomic(p, bytes, crate::fsx::new_file_mode())
            .map_err(|e| OpsError::io(&fs, e))?;
        crate::crash_point!("write.written");
        Ok(())
    }

    /// The mount finished writing `p` (closed after a write): re-index it and its directory.
    /// Idempotent and cheap (one queue transaction; repeated calls coalesce).
    pub fn file_written(&self, p: &VPath) -> Result<()> {
        if !super::is_source_name(p.name()) {
            return Ok(());
        }
        let jobs = self.derive.jobs_for_change(p);
        if !jobs.is_empty() {
            self.queue.submit(&jobs)?;
        }
        Ok(())
    }

    /// The mount created directory `p`: its parent's summary changes.
    pub fn dir_created(&self, p: &VPath) -> Result<()> {
        self.enqueue_parent_summary(p)
    }
}

impl Locked {
    /// One change the mount makes to a single path (create, open for writing, a write, a
    /// truncate, mkdir, link, symlink, setattr), done by `change` under the path's EXACT lock
    /// with the foreground wait. The mount decides what to change; the lock is taken here, so
    /// the FUSE side never touches a lock file. The lock never creates a directory: when the
    /// path's directory was removed meanwhile, the change fails with ENOENT, as it would have.
    ///
    /// With [`Release::AfterReply`] the lock is released after the mount's reply
    /// ([`crate::tail::AfterReply`]); a change that must see its own lock file gone before it
    /// returns (a directory's times: the file lives inside it) asks for [`Release::Now`].
    ///
    /// The outer error is the lock's; the inner one is `change`'s own, handed back as it
    /// came (the mount answers with its errno).
    pub fn under_exact<T, E>(
        &self,
        p: &VPath,
        release: Release,
        change: impl FnOnce() -> std::result::Result<T, E>,
    ) -> Result<std::result::Result<T, E>> {
        self.foreground.touch();
        let req = [(p.clone(), crate::lock::LockKind::Exact)];
        let acquire = || Ok(self.locks.acquire_existing(&req, self.waits.foreground)?);
        // A truncate frees space: on a full disk its lock file gets the reserve's room.
        let guard = if release == Release::Freeing {
            self.freeing(acquire)?
        } else {
            acquire()?
        };
        let out = change();
        if release == Release::AfterReply {
            let _ = crate::tail::after_reply("release", move || {
                drop(guard);
                Ok::<(), OpsError>(())
            });
        }
        Ok(out)
    }
}

/// When [`Locked::under_exact`](super::Locked::under_exact) releases its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Before it returns.
    Now,
    /// After the mount's reply (at once where no reply scope is open).
    AfterReply,
    /// Before it returns, for a change that frees space (a truncate): on a full disk, the
    /// lock is placed with the reserve's room ([`Stores::freeing`](super::Stores::freeing)).
    Freeing,
}
