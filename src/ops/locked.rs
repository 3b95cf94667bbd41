//! The mutation seam of the filesystem core ([`crate::fs::Mutations`]) implemented by the
//! locked operations: what the mount does in production. The core decides what to change;
//! this decides how, so the core never sees a lock or a store.
//!
//! Each change goes through [`Ops`](super::Ops), which takes the design's lock first and keeps the
//! index and the queue in step: unlink and rmdir remove the path, then settle its index records
//! after the reply (`find` drops a hit whose file is gone meanwhile), rename moves them, a closed
//! written file is queued for embedding and its directory's summary. Single-path changes
//! (create, write, truncate, mkdir, link, symlink, setattr) run under the path's EXACT lock
//! through [`Locked::under_exact`](super::Locked::under_exact), applied by [`DirectMutations`]. An
//! operation's error reaches the mount whole ([`MutationError::backend`]): a lock that stays busy
//! answers EBUSY and logs its holder.

use std::ffi::OsStr;
use std::fs::File;
use std::sync::{Arc, Weak};

use super::history::Keep;
use super::{Frees, OpsError, Release, Stores};
use crate::errno::ToErrno;
use crate::error::Chain;
use crate::fs::mutations::{
    AttrChange, DirectMutations, MResult, MutationError, Mutations, Owner, RenameMode,
};
use crate::uri::VPath;

/// The locked operations — rm, mv, add-resource, single-file writes and the recovery of what a
/// dead process left half-done — over the store kernel, which they reach through `Deref`
/// (`self.index`, `self.lock(..)`). They need no model and no summariser: what they change
/// they hand to the derivers as queued jobs. Implemented in `rm`, `mv`, `add`, `write` and
/// `recover`; the kernel below never calls up into them.
pub struct Locked {
    stores: Arc<Stores>,
    /// This layer itself, for work finished after a reply ([`crate::tail`]), which
    /// outlives `&self`.
    me: Weak<Locked>,
    /// Removals done in the files, settled in batches after their replies.
    pub(super) settling: super::settle::Settling,
    /// Told of each path an operation that did not come through the mount changed (an
    /// undo), so that a mount of this process drops what its kernel cached of it.
    changed_behind: std::sync::OnceLock<ChangedBehind>,
}

/// See [`Locked::on_changed_behind`].
pub type ChangedBehind = Box<dyn Fn(&VPath) + Send + Sync>;

impl Locked {
    /// The locked operations over `stores`.
    pub fn new(stores: Arc<Stores>) -> Arc<Locked> {
        Arc::new_cyclic(|me| Locked {
            stores,
            me: me.clone(),
            settling: Default::default(),
            changed_behind: std::sync::OnceLock::new(),
        })
    }

    /// Call `f` with each path an operation that did not come through the mount changes
    /// (the daemon sets it: its mount invalidates the kernel's entries). Never called while
    /// the operation holds its locks.
    pub fn on_changed_behind(&self, f: ChangedBehind) {
        let _ = self.changed_behind.set(f);
    }

    pub(super) fn changed_behind(&self, p: &VPath) {
        if let Some(f) = self.changed_behind.get() {
            f(p);
        }
    }

    /// The `Arc` this layer lives in (every `Locked` is made by [`Locked::new`]).
    pub(super) fn arc(&self) -> Arc<Locked> {
        self.me
            .upgrade()
            .expect("a Locked is only reached through its Arc")
    }

    /// A handle on this layer that does not keep it alive (the settler thread's).
    pub(super) fn me(&self) -> Weak<Locked> {
        self.me.clone()
    }

    /// The store kernel below.
    pub fn stores(&self) -> &Arc<Stores> {
        &self.stores
    }
}

impl std::ops::Deref for Locked {
    type Target = Stores;

    fn deref(&self) -> &Stores {
        &self.stores
    }
}

/// The filesystem core's mutation seam over the locked operations: what the mount does in
/// production.
pub struct LockedMutations {
    ops: Arc<Locked>,
    direct: DirectMutations,
}

impl LockedMutations {
    /// The seam over the locked operations `ops` (no model, no summariser), whose data root descriptor its system calls share.
    pub fn new(ops: Arc<Locked>) -> Self {
        let direct = DirectMutations::at(ops.root.data_root().clone());
        LockedMutations { ops, direct }
    }

    /// `change` (a [`DirectMutations`] call) under the EXACT lock of `p`, released after the
    /// reply.
    fn exact<T>(
        &self,
        op: &'static str,
        p: &VPath,
        change: impl FnOnce() -> MResult<T>,
    ) -> MResult<T> {
        self.exact_with(op, p, Release::AfterReply, Frees::Nothing, change)
    }

    fn exact_with<T>(
        &self,
        op: &'static str,
        p: &VPath,
        release: Release,
        frees: Frees,
        change: impl FnOnce() -> MResult<T>,
    ) -> MResult<T> {
        self.ops
            .under_exact(p, release, frees, change)
            .map_err(|e| MutationError::backend(op, p, e))?
    }
}

/// Follow-up work (enqueue a summary, move records) failed after the change itself was made:
/// the change stands, and `vikingfs fsck --repair` rebuilds what is derived. Log, don't fail.
fn follow_up(what: &'static str, p: &VPath, r: Result<(), OpsError>) {
    if let Err(e) = r {
        tracing::warn!(what, path = %p, error = %Chain(&e), "derived update failed; fsck --repair rebuilds it");
    }
}

impl LockedMutations {
    /// Queue `p`'s embedding and its directory's summary *before* its content changes, under
    /// its EXACT lock, as `Locked::write_file` does: a daemon killed while the file is open (or
    /// between a truncate and its release) leaves the file with its job, and the next daemon
    /// indexes what is there. A job that runs meanwhile concludes nothing without this lock
    /// and re-reads a file that changed; the release queues the file again (coalesced).
    ///
    /// On a full disk the job may not fit (its spool line needs a block): then a create or a
    /// link fails with ENOSPC before it changes anything, rather than leave a file no job
    /// will index; a truncate or an open for writing queues its job in the reserve's room
    /// ([`Stores::freeing`](super::Stores::freeing)). Any other failure to queue is logged
    /// and the change goes ahead, as a follow-up's would.
    fn queue_first(&self, op: &'static str, p: &VPath, frees: Frees) -> MResult<()> {
        let r = match frees {
            Frees::Space => self.ops.freeing(|| self.ops.file_written(p)),
            Frees::Nothing => self.ops.file_written(p),
        };
        match r {
            Err(e) if e.is_disk_full() => Err(MutationError::backend(op, p, e)),
            r => {
                follow_up("file_written", p, r);
                Ok(())
            }
        }
    }
}

impl Mutations for LockedMutations {
    fn create(&self, path: &VPath, mode: u32, flags: i32, owner: Owner) -> MResult<File> {
        self.exact("create", path, || {
            self.queue_first("create", path, Frees::Nothing)?;
            if flags & libc::O_TRUNC != 0 {
                // An existing file opened with O_CREAT|O_TRUNC: the version it cuts is kept.
                self.ops.keep_version(path, "overwrite", Keep::Copy);
            }
            self.direct.create(path, mode, flags, owner)
        })
    }

    /// An open for writing changes nothing by itself, and on a full disk it is how space is
    /// freed (`: > file`; truncate(1) opens without O_TRUNC, then cuts): a native filesystem
    /// lets it through, so its lock file and its job get the reserve's room. A write that
    /// follows finds the disk as full as it is.
    fn open_write(&self, path: &VPath, flags: i32) -> MResult<File> {
        self.exact_with("open", path, Release::AfterReply, Frees::Space, || {
            self.queue_first("open", path, Frees::Space)?;
            if flags & libc::O_TRUNC != 0 {
                // `> file`: the version it cuts is kept — the file itself when no one else
                // has it open (the mount's core follows it to the empty one).
                self.ops.keep_version(path, "overwrite", Keep::Swap);
            } else if flags & libc::O_APPEND == 0 {
                // Written in place (`dd conv=notrunc`, an editor or a database writing into
                // the file): the writes may bypass the daemon (passthrough), so the version
                // they may change is kept now, at the open (once while the file stays as it
                // is). An append changes nothing that was there.
                self.ops.keep_version(path, "edit", Keep::Copy);
            }
            self.direct.open_write(path, flags)
        })
    }

    fn write(&self, path: &VPath, file: &File, offset: u64, data: &[u8]) -> MResult<()> {
        self.exact("write", path, || {
            self.direct.write(path, file, offset, data)
        })
    }

    /// Session logs: `user/{uid}/sessions/{sid}/...`. A commit cuts `messages.jsonl` in place
    /// under the session's TREE lock, so an append must hold the file's EXACT lock while it
    /// writes; under passthrough the kernel would write without asking us.
    fn locks_each_write(&self, path: &VPath) -> bool {
        path.is_under_sessions()
    }

    fn file_written(&self, path: &VPath) {
        follow_up("file_written", path, self.ops.file_written(path));
    }

    /// `queue_first` runs in create, open for writing and truncate.
    fn reports_at_open(&self) -> bool {
        true
    }

    fn mkdir(&self, path: &VPath, mode: u32, owner: Owner) -> MResult<()> {
        self.exact("mkdir", path, || self.direct.mkdir(path, mode, owner))?;
        follow_up("dir_created", path, self.ops.dir_created(path));
        Ok(())
    }

    fn mknod(&self, path: &VPath, mode: u32, rdev: u64, owner: Owner) -> MResult<()> {
        self.exact("mknod", path, || self.direct.mknod(path, mode, rdev, owner))
    }

    fn symlink(&self, target: &OsStr, link: &VPath, owner: Owner) -> MResult<()> {
        self.exact("symlink", link, || self.direct.symlink(target, link, owner))
    }

    fn link(&self, existing: &VPath, new: &VPath) -> MResult<()> {
        self.exact("link", new, || {
            self.queue_first("link", new, Frees::Nothing)?;
            self.direct.link(existing, new)
        })
    }

    fn unlink(&self, path: &VPath) -> MResult<()> {
        // The core lets a summary go only once its directory holds no user entry (so that
        // `rm -rf` works): it is derived, not a source, so it goes under its EXACT lock (the
        // lock a semantic job writes it under), and the directory's summary is queued again
        // (a directory that stays gets it back; one that goes with rmdir drops it).
        if crate::uri::is_sidecar_name(path.name()) {
            self.exact("unlink", path, || self.direct.unlink(path))?;
            follow_up("sidecar removed", path, self.ops.removed(path));
            return Ok(());
        }
        self.ops
            .unlink(path)
            .map_err(|e| MutationError::backend("unlink", path, e))
    }

    /// The EXACT lock a single-path change takes (a sidecar's unlink above among them).
    fn wait_unlocked(&self, path: &VPath) -> MResult<()> {
        self.exact_with("wait_unlocked", path, Release::Now, Frees::Nothing, || {
            Ok(())
        })
    }

    fn rmdir(&self, path: &VPath) -> MResult<()> {
        self.ops
            .rmdir(path)
            .map_err(|e| MutationError::backend("rmdir", path, e))
    }

    fn rename(&self, src: &VPath, dst: &VPath, mode: RenameMode) -> MResult<()> {
        self.ops
            .rename(src, dst, mode)
            .map_err(|e| MutationError::backend("rename", src, e))
    }

    fn setattr(&self, path: &VPath, change: &AttrChange) -> MResult<()> {
        // Released before the times are set again below; a truncate frees space, so on a
        // full disk its lock gets the reserve's room.
        let frees = if change.size.is_some() {
            Frees::Space
        } else {
            Frees::Nothing
        };
        self.exact_with("setattr", path, Release::Now, frees, || {
            if let Some(size) = change.size {
                self.queue_first("setattr", path, Frees::Space)?;
                // A cut loses what lies past `size`: the whole version is kept.
                if self
                    .ops
                    .lstat(path)
                    .ok()
                    .flatten()
                    .is_some_and(|m| m.st_size as u64 > size)
                {
                    self.ops.keep_version(path, "truncate", Keep::Copy);
                }
            }
            self.direct.setattr(path, change)
        })?;
        // A directory's EXACT lock is a file inside it (`.path.ovlock`): removing it on release
        // moved the directory's mtime past the times just set. Set them again, now the lock
        // file is gone, so utimensat(2) on a directory leaves exactly what was asked for.
        if (change.atime.is_some() || change.mtime.is_some()) && self.direct.is_dir(path) {
            let times = AttrChange {
                atime: change.atime,
                mtime: change.mtime,
                ..AttrChange::default()
            };
            self.direct.setattr(path, &times)?;
        }
        Ok(())
    }
}
