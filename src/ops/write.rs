//! Writes of one file (what the mount calls on close, `vikingfs write` and the API's
//! `content/write` with its `append` mode), the API's `mkdir`, and the notifications the mount
//! sends for changes it made itself.
//!
//! Under the file's EXACT lock its old record is dropped (a search misses it rather than
//! naming it for text it no longer holds) and the embedding and the parent's summary are
//! enqueued *before* the bytes are written: a crash after the write can then not leave a file without its job,
//! and a job that runs early and reads the old bytes finds, under the same lock, that the
//! version changed and retries (or a newer job of its key supersedes it).

use std::io::Read;

use super::rm::check_user_path;
use super::{Locked, OpsError, Result};
use crate::uri::VPath;

impl Locked {
    /// Write `bytes` as the whole content of file `p` (created when missing; its directory
    /// must exist), atomically, then have it re-indexed.
    pub fn write_file(&self, p: &VPath, bytes: &[u8]) -> Result<()> {
        self.write_with(p, false, |_| Ok(bytes.to_vec())).map(drop)
    }

    /// Append `bytes` to file `p` (created when missing; its directory must exist): the old
    /// content is read under the same EXACT lock the write takes and the whole file replaced
    /// atomically, as [`Locked::write_file`] does, so two appends never lose one another and a
    /// crash leaves the old content or the new, never half of it (OpenViking appends the same
    /// way). Returns the file's new length.
    pub fn append_file(&self, p: &VPath, bytes: &[u8]) -> Result<usize> {
        self.write_with(p, true, |old| {
            let mut out = old.unwrap_or_default();
            out.extend_from_slice(bytes);
            Ok(out)
        })
    }

    /// The one write of a whole file: `compose` makes the new content from the old (read
    /// under the file's EXACT lock when `read_old`; `None` for a new file). Returns the new
    /// content's length.
    fn write_with(
        &self,
        p: &VPath,
        read_old: bool,
        compose: impl FnOnce(Option<Vec<u8>>) -> Result<Vec<u8>>,
    ) -> Result<usize> {
        check_user_path(p)?;
        let parent = p.parent().expect("depth checked");
        match self.lstat(&parent)? {
            None => return Err(OpsError::NotFound(parent.uri())),
            Some(m) if !m.is_dir() => return Err(OpsError::NotADirectory(parent.uri())),
            Some(_) => {}
        }
        let fs = self.backing(p);
        let _guard = self.lock(&[(p.clone(), crate::lock::LockKind::Exact)])?;
        let old = match self.lstat(p)? {
            Some(m) if m.is_dir() => return Err(OpsError::IsADirectory(p.uri())),
            Some(_) if read_old => Some(self.read_whole(p)?),
            Some(_) => None,
            None => None,
        };
        let bytes = compose(old)?;
        crate::crash_point!("write.locked");
        // The old record would name this file for words it is about to lose: better no
        // result until the job has indexed the new content than a wrong one.
        self.index.delete(p)?;
        self.queue.enqueue_many(&self.derive.jobs_for_change(p))?;
        crate::crash_point!("write.enqueued");
        // The version replaced stays in the history (its inode outlives the atomic rename).
        self.keep_version(p, "write", super::history::Keep::Link);
        self.root
            .write_atomic(p, &bytes, crate::fsx::new_file_mode())
            .map_err(|e| OpsError::io(&fs, e))?;
        crate::crash_point!("write.written");
        Ok(bytes.len())
    }

    /// The content of file `p` (a final symlink is not followed: ELOOP).
    fn read_whole(&self, p: &VPath) -> Result<Vec<u8>> {
        let fs = self.backing(p);
        let mut out = Vec::new();
        self.root
            .open_read(p)
            .and_then(|mut f| f.read_to_end(&mut out))
            .map_err(|e| OpsError::io(&fs, e))?;
        Ok(out)
    }

    /// `mkdir [-p]` (the API's `fs/mkdir`): directory `p` under its EXACT lock, as the
    /// mount's mkdir(2) takes it ([`super::LockedMutations`]), then its parent's summary
    /// queued. With `parents`, each missing ancestor is made first in the same way (what
    /// OpenViking's mkdir does); without, a missing parent is `NotFound`. An existing `p` is
    /// `Exists`.
    pub fn mkdir(&self, p: &VPath, parents: bool) -> Result<()> {
        check_user_path(p)?;
        let mut chain = vec![p.clone()];
        let mut up = p.parent().expect("depth checked");
        // The scopes exist (`Workspace::open` makes them); below them, what is missing.
        while up.depth() > 1 && self.lstat(&up)?.is_none() {
            if !parents {
                return Err(OpsError::NotFound(up.uri()));
            }
            chain.push(up.clone());
            up = up.parent().expect("depth > 1");
        }
        match self.lstat(&up)? {
            Some(m) if m.is_dir() => {}
            Some(_) => return Err(OpsError::NotADirectory(up.uri())),
            None => return Err(OpsError::NotFound(up.uri())),
        }
        for d in chain.iter().rev() {
            let made = self.under_exact(d, Release::Now, Frees::Nothing, || {
                self.root.mkdir(d, 0o755)
            })?;
            match made {
                Ok(()) => {}
                // An ancestor someone made meanwhile serves as well.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d != p => continue,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Err(OpsError::Exists(d.uri()))
                }
                Err(e) => return Err(OpsError::io(self.backing(d), e)),
            }
            // The directory stands; a summary that failed to queue is rebuilt by fsck.
            if let Err(e) = self.dir_created(d) {
                tracing::warn!(path = %d, error = %crate::error::Chain(&e), "derived update failed; fsck --repair rebuilds it");
            }
        }
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
    /// With [`Frees::Space`], on a full disk the lock file gets the reserve's room.
    ///
    /// The outer error is the lock's; the inner one is `change`'s own, handed back as it
    /// came (the mount answers with its errno).
    pub fn under_exact<T, E>(
        &self,
        p: &VPath,
        release: Release,
        frees: Frees,
        change: impl FnOnce() -> std::result::Result<T, E>,
    ) -> Result<std::result::Result<T, E>> {
        self.foreground.touch();
        let req = [(p.clone(), crate::lock::LockKind::Exact)];
        // Held until just after the reply: the request that follows waits it out.
        let acquire = || {
            Ok(self
                .locks
                .acquire_brief_existing(&req, self.waits.foreground)?)
        };
        let guard = match frees {
            Frees::Space => self.freeing(acquire)?,
            Frees::Nothing => acquire()?,
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
}

/// Whether a change frees space or changes nothing yet (a truncate, an open for writing), so
/// that on a full disk its lock file and its job get the reserve's room
/// (`Stores::freeing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frees {
    Space,
    Nothing,
}
