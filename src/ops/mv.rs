//! mv: move the files, then their records, as one step that a crash cannot split for good
//! (seed doc, "mv(old_uri, new_uri)").
//!
//! The design copies, updates the index, then deletes the source. Within one filesystem the
//! copy and the delete are one rename(2), so a move costs one syscall however many bytes the
//! tree holds. Locks: a directory takes TREE on the source and EXACT on the destination, a
//! file EXACT on both. An intent is journalled before the rename; if the process dies after the
//! rename, [`Locked::recover`](super::Locked::recover) moves the records forward. Records keep their source versions, as
//! rename(2) keeps inode, size and mtime: nothing is re-embedded.
//!
//! Through the mount the kernel's reply goes right after the rename(2): the records move after
//! it (a transaction of the index that a rename would otherwise wait for), before the locks are
//! released, so no operation on either path sees them unmoved; a failure there leaves the
//! intent open for recovery. Without a reply scope (the CLI, the API) they move before the
//! call returns, and if that fails the rename is undone (source and its records as they were).

use super::rm::check_user_path;
use super::{Locked, OpsError, Result};
use crate::fs::RenameMode;
use crate::index::Level;
use crate::journal::Intent;
use crate::lock::LockGuard;
use crate::tail;
use crate::uri::{VPath, ABSTRACT_FILE, OVERVIEW_FILE};

impl Locked {
    /// mv(1)'s reading of a destination: an existing directory receives `src` under its own
    /// name (what `vikingfs mv` moves to, here or through a daemon).
    pub fn mv_target(&self, src: &VPath, dst: &VPath) -> Result<VPath> {
        if self.ws.fs_path(dst).is_dir() && !src.is_root() {
            return Ok(dst.join(src.name())?);
        }
        Ok(dst.clone())
    }

    /// `vikingfs mv SRC DST`: move a file or tree to a name that does not exist yet.
    pub fn mv(&self, src: &VPath, dst: &VPath) -> Result<()> {
        self.move_path(src, dst, false)
    }

    /// rename(2) through the mount: like [`Locked::mv`], but an existing destination file or
    /// empty directory is replaced unless `mode` is `NoReplace`. `Exchange` (swapping two
    /// trees) has no crash-safe order for their records: EINVAL.
    pub fn rename(&self, src: &VPath, dst: &VPath, mode: RenameMode) -> Result<()> {
        match mode {
            RenameMode::Exchange => Err(OpsError::Exchange(src.uri())),
            RenameMode::NoReplace => self.move_path(src, dst, false),
            RenameMode::Replace => self.move_path(src, dst, true),
        }
    }

    fn move_path(&self, src: &VPath, dst: &VPath, replace: bool) -> Result<()> {
        check_user_path(src)?;
        check_user_path(dst)?;
        if src == dst {
            return Ok(());
        }
        if dst.starts_with(src) {
            return Err(OpsError::IntoItself {
                src: src.uri(),
                dst: dst.uri(),
            });
        }
        let src_fs = self.backing(src);
        let src_dir = self
            .lstat(src)?
            .ok_or_else(|| OpsError::NotFound(src.uri()))?
            .is_dir();
        let parent = dst.parent().expect("depth checked");
        match self.lstat(&parent)? {
            None => return Err(OpsError::NotFound(parent.uri())),
            Some(m) if !m.is_dir() => return Err(OpsError::NotADirectory(parent.uri())),
            Some(_) => {}
        }
        let guard = self.lock(&crate::lock::mv_batch(src, dst, src_dir))?;
        // Look again under the locks.
        if self.lstat(src)?.map(|m| m.is_dir()) != Some(src_dir) {
            return Err(OpsError::NotFound(src.uri()));
        }
        let replaced = match self.lstat(dst)? {
            None => false,
            Some(_) if !replace => return Err(OpsError::Exists(dst.uri())),
            Some(m) if m.is_dir() && !src_dir => return Err(OpsError::IsADirectory(dst.uri())),
            Some(m) if !m.is_dir() && src_dir => return Err(OpsError::NotADirectory(dst.uri())),
            // A directory holding only summaries and lock files looks empty to its user.
            Some(m) if m.is_dir() && self.has_sources(dst)? => {
                return Err(OpsError::NotEmpty(dst.uri()))
            }
            Some(_) => true,
        };
        crate::crash_point!("mv.locked");
        if replaced && !src_dir {
            // The file replaced stays in the history (a link: rename(2) stays atomic).
            self.keep_version(dst, "mv-over", super::history::Keep::Link);
        }
        if !src_dir && !self.index.has_under(src)? {
            return self.move_unindexed_file(src, dst, replaced, guard);
        }
        let id = self.journal.begin(
            &Intent::Mv {
                src: src.as_str().to_string(),
                dst: dst.as_str().to_string(),
                dir: src_dir,
            },
            guard.owner(),
        )?;
        crate::crash_point!("mv.intent");
        if replaced {
            // The replaced file's records go first: from the rename on they would name
            // content that is gone.
            self.index.delete_prefix(dst)?;
            if src_dir {
                // An empty directory being replaced holds only its summaries (whose records
                // just went) and lock files (ours).
                let names = self.root.names(dst);
                for name in names.map_err(|e| OpsError::io(self.backing(dst), e))? {
                    let _ = self.root.remove_in(dst, &name);
                }
            }
        }
        if let Err(e) = self.root.rename(src, dst) {
            self.journal.finish(id)?;
            return Err(OpsError::io(&src_fs, e));
        }
        crate::crash_point!("mv.renamed");
        if !tail::in_scope() {
            // No reply waits (the CLI, the API): the records move now, and if that fails
            // the rename is undone — the source and its records stay as they were.
            if let Err(e) = self.move_records(src, dst) {
                match self.root.rename(dst, src) {
                    Ok(()) => self.journal.finish(id)?,
                    Err(u) => {
                        tracing::error!("undoing mv {src} -> {dst}: {u}; recovery will finish it")
                    }
                }
                return Err(e);
            }
            crate::crash_point!("mv.indexed");
            return self.finish_move(src, dst, src_dir, guard, id);
        }
        // Through the mount the reply goes once the files have moved: the records follow
        // after it, still under both locks (so nothing reaches either path before they
        // have moved) and with the intent open since before the rename. A crash from here
        // leaves that intent to recovery, which moves the records forward; a failure leaves
        // it open for the next recovery too (meanwhile no search names the source: a hit
        // whose file is gone is dropped).
        let ops = self.arc();
        let (src, dst) = (src.clone(), dst.clone());
        tail::after_reply("mv", move || {
            ops.move_records(&src, &dst)?;
            crate::crash_point!("mv.indexed");
            ops.finish_move(&src, &dst, src_dir, guard, id)
        })
    }

    /// A file without records (usually: its job has not run yet) has no records to move, so
    /// it needs no intent: its embedding is queued under the new name *before* the rename,
    /// so a crash at any point leaves the file at its old name (as it was) or at its new one
    /// with its job. No record can appear at either name meanwhile: a job writes one only
    /// under the EXACT locks held here.
    fn move_unindexed_file(
        &self,
        src: &VPath,
        dst: &VPath,
        replaced: bool,
        guard: LockGuard,
    ) -> Result<()> {
        self.queue.submit(&[super::keys::embed_job(dst, None)])?;
        if replaced {
            // From the rename on they would name content that is gone.
            self.index.delete_prefix(dst)?;
        }
        self.root
            .rename(src, dst)
            .map_err(|e| OpsError::io(self.backing(src), e))?;
        crate::crash_point!("mv.renamed");
        let ops = self.arc();
        let (src, dst) = (src.clone(), dst.clone());
        tail::after_reply("mv", move || {
            ops.record_soon(ops.move_entry(&src, &dst));
            drop(guard);
            ops.enqueue_parent_summaries(&src, &dst)
        })
    }

    /// The history's entry of a rename (no content: `undo` moves it back), when history is on.
    fn move_entry(&self, src: &VPath, dst: &VPath) -> Vec<crate::journal::Entry> {
        if !self.history.enabled {
            return Vec::new();
        }
        use std::os::unix::fs::MetadataExt;
        let Ok(md) = std::fs::symlink_metadata(self.backing(dst)) else {
            return Vec::new();
        };
        let pid = crate::process::requester();
        vec![crate::journal::Entry {
            op: "mv".into(),
            path: src.as_str().to_string(),
            new_path: Some(dst.as_str().to_string()),
            born_ms: crate::sys::birth_ms(&self.backing(dst)),
            kind: if md.is_dir() { "dir" } else { "file" }.into(),
            size: 0,
            blob: None,
            reason: None,
            mode: md.mode(),
            uid: md.uid(),
            gid: md.gid(),
            pid: crate::process::requester_pid(),
            cmd: self.command_of(pid),
        }]
    }

    fn enqueue_parent_summaries(&self, src: &VPath, dst: &VPath) -> Result<()> {
        self.enqueue_parent_summary(src)?;
        if src.parent() != dst.parent() {
            self.enqueue_parent_summary(dst)?;
        }
        Ok(())
    }

    fn move_records(&self, src: &VPath, dst: &VPath) -> Result<()> {
        self.index.rename_prefix(src, dst)?;
        Ok(())
    }

    /// After the rename and the records: drop the source's TREE lock file that rename(2)
    /// carried into the destination, close the intent, release, refresh both parents.
    pub(crate) fn finish_move(
        &self,
        src: &VPath,
        dst: &VPath,
        src_dir: bool,
        guard: LockGuard,
        intent: i64,
    ) -> Result<()> {
        // Moved into an ignored place: nothing stays derived from it. Still under the
        // source's TREE lock, which rename(2) carried into the destination.
        // A file moved to a path that gets derived state has nothing ignored below it.
        if src_dir || !self.derive.derives(dst, false) {
            self.prune_ignored(dst, src_dir)?;
        }
        if src_dir {
            self.locks.release_owned(dst, guard.owner())?;
        }
        // A version of `dst` this rename replaced waits to be recorded: recorded first, it
        // is before the rename in the history's order too (what the past view reads).
        self.flush_entries();
        self.journal
            .finish_recording(&[intent], &self.move_entry(src, dst))?;
        // The source's lock file moved away with the tree: the release reports it, harmlessly.
        let _ = guard.release();
        self.enqueue_parent_summaries(src, dst)?;
        // Jobs queued for the old names find nothing there: queue them again for what has
        // no current record under the new name (usually nothing).
        self.refresh_under(dst)?;
        Ok(())
    }
}

impl Locked {
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
}
