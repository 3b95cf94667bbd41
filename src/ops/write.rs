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
        let _guard = self.lock(&[(p.clone(), crate::lock::LockKind::Exact)])?;
        let old = match self.lstat(p)? {
            Some(m) if m.is_dir() => return Err(OpsError::IsADirectory(p.uri())),
            Some(_) if read_old => Some(self.read_whole(p)?),
            Some(_) => None,
            None => None,
        };
        let bytes = compose(old)?;
        crate::crash_point!("write.locked");
        self.replace_locked(p, &bytes)?;
        Ok(bytes.len())
    }

    /// Replace file `p` with `bytes`, its EXACT lock held by the caller: the record dropped
    /// and the jobs queued first, the version replaced kept, then the atomic write.
    fn replace_locked(&self, p: &VPath, bytes: &[u8]) -> Result<()> {
        // The old record would name this file for words it is about to lose: better no
        // result until the job has indexed the new content than a wrong one.
        self.index.delete(p)?;
        self.queue.enqueue_many(&self.derive.jobs_for_change(p))?;
        crate::crash_point!("write.enqueued");
        // The version replaced stays in the history (its inode outlives the atomic rename).
        self.keep_version(p, "write", super::history::Keep::Link);
        self.root
            .write_atomic(p, bytes, crate::fsx::new_file_mode())
            .map_err(|e| OpsError::io(self.backing(p), e))?;
        crate::crash_point!("write.written");
        Ok(())
    }

    /// OpenViking's `content/batch-write`: every write of `writes` under one batch of EXACT
    /// locks (all taken, or none: busy), each checked first (a directory in the way, an
    /// `expected_sha256` the file no longer has), then written one by one as
    /// [`Locked::write_file`] writes (an append reads the old content under the lock). A
    /// conflict fails the batch before anything is written, or with `skip_conflicts` leaves
    /// that file as it is and is reported. Missing directories are made first, each a locked
    /// mkdir. A failure midway keeps the writes done before it (as OpenViking's does).
    pub fn write_batch(&self, writes: &[BatchWrite], skip_conflicts: bool) -> Result<BatchReport> {
        for w in writes {
            check_user_path(&w.path)?;
            let parent = w.path.parent().expect("depth checked");
            if self.lstat(&parent)?.is_none() {
                match self.mkdir(&parent, true) {
                    Ok(()) | Err(OpsError::Exists(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let reqs: Vec<_> = writes
            .iter()
            .map(|w| (w.path.clone(), crate::lock::LockKind::Exact))
            .collect();
        let _guard = self.lock_existing(&reqs)?;
        let mut rep = BatchReport::default();
        let mut todo = Vec::new();
        for w in writes {
            let st = self.lstat(&w.path)?;
            let conflict = match (&st, &w.expected_sha256) {
                (Some(m), _) if m.is_dir() => {
                    Some(format!("Target is a directory: {}", w.path.uri()))
                }
                (None, Some(_)) => Some(format!(
                    "Expected content no longer exists: {}",
                    w.path.uri()
                )),
                (Some(_), Some(want)) => {
                    use sha2::Digest;
                    let have = hex::encode(sha2::Sha256::digest(self.read_whole(&w.path)?));
                    (have != *want).then(|| format!("Content revision changed: {}", w.path.uri()))
                }
                _ => None,
            };
            match conflict {
                Some(msg) if skip_conflicts => rep.conflicts.push((w.path.clone(), msg)),
                Some(msg) => return Err(OpsError::Conflict(msg)),
                None => todo.push((w, st.is_some())),
            }
        }
        for (w, existed) in todo {
            let bytes = if w.append && existed {
                let mut old = self.read_whole(&w.path)?;
                old.extend_from_slice(&w.bytes);
                old
            } else {
                w.bytes.clone()
            };
            // As OpenViking: with skip_conflicts, a checked replace by the bytes already
            // there is not written.
            if skip_conflicts
                && existed
                && !w.append
                && w.expected_sha256.is_some()
                && self.read_whole(&w.path)? == bytes
            {
                rep.unchanged.push(w.path.clone());
                continue;
            }
            self.replace_locked(&w.path, &bytes)?;
            if existed {
                rep.updated.push(w.path.clone());
            } else {
                rep.created.push(w.path.clone());
            }
        }
        Ok(rep)
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

/// One write of [`Locked::write_batch`].
#[derive(Debug, Clone)]
pub struct BatchWrite {
    pub path: VPath,
    pub bytes: Vec<u8>,
    /// Appended to the old content (a missing file is created with `bytes`).
    pub append: bool,
    /// The SHA-256 (lower-case hex) the file must hold now, checked under the lock.
    pub expected_sha256: Option<String>,
}

/// What [`Locked::write_batch`] did, by path.
#[derive(Debug, Clone, Default)]
pub struct BatchReport {
    pub created: Vec<VPath>,
    pub updated: Vec<VPath>,
    /// Replaced by the bytes they held already, checked by `expected_sha256` with
    /// `skip_conflicts`: not written.
    pub unchanged: Vec<VPath>,
    /// Left as they were (`skip_conflicts`), with why.
    pub conflicts: Vec<(VPath, String)>,
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
