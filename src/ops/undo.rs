//! undo: put back what the history kept, as an ordinary locked operation.
//!
//! `undo PATH` restores PATH (a file or a tree) as it was before the last command that
//! changed it (removed it, cut it, overwrote it or renamed another file over it): the newest run of history entries under PATH made by one process (an
//! `rm -rf` through the mount is one entry per file and directory, all of one pid); `--at T`
//! restores it as it was at T instead. For each path the earliest entry after that point
//! holds its content then. A removed path that exists again is a conflict, left alone
//! (reported) unless `force`; whatever is replaced goes into the history first.
//!
//! Order: a TREE lock on PATH's nearest existing ancestor (so nothing under it changes
//! meanwhile) → each kept version copied back (directories first, the blob kept, so the undo
//! can be undone and the entry still shows it) → an `undo` entry per path → the jobs a write
//! of each restored file queues (its record, its directory's summary). Only source names are
//! restored: a kept tree's summaries and lock files are derived or transient.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::history::walkdir;
use super::{Locked, OpsError, Result};
use crate::journal::{Entry, Recorded};
use crate::lock::LockKind;
use crate::uri::VPath;

/// How far back a run of one process's entries reaches between two of them.
const RUN_GAP_MS: i64 = 10 * 60 * 1000;

/// What an undo did (or, dry, would do).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct UndoReport {
    /// Paths put back, with the entry each came from.
    pub restored: Vec<(String, i64)>,
    /// Paths left alone: they exist now (without `force`), or their content was not kept.
    pub conflicts: Vec<(String, String)>,
    /// Paths a rewind took out (made since the point), kept in the history.
    #[serde(default)]
    pub removed: Vec<String>,
    /// Renames undone: (where it was, where it is back).
    #[serde(default)]
    pub moved: Vec<(String, String)>,
    /// The point restored to (ms since the epoch): just before the run undone, or `--at`.
    pub at_ms: i64,
}

/// What an undo is asked to do.
#[derive(Debug, Clone, Copy)]
struct How {
    /// The point to restore to; `None`: before the last command that changed the path.
    at_ms: Option<i64>,
    dry_run: bool,
    /// Replace a removed path that exists again.
    force: bool,
    /// A rewind: also take out what was made since, and move renames back first.
    rewind: bool,
}

impl Locked {
    /// Restore `p` as it was at `at_ms`, or before the last command that changed it.
    pub fn undo(
        &self,
        p: &VPath,
        at_ms: Option<i64>,
        dry_run: bool,
        force: bool,
    ) -> Result<UndoReport> {
        let how = How {
            at_ms,
            dry_run,
            force,
            rewind: false,
        };
        self.undo_as(p, how)
    }

    /// Rewind everything under `p` (a scope, or any directory) to `since`: what was removed,
    /// cut or overwritten since comes back, and what was created since (its birth time is
    /// later) goes into the history; what it replaces is kept, so the rewind is undoable.
    pub fn rewind(&self, p: &VPath, since_ms: i64, dry_run: bool) -> Result<UndoReport> {
        let how = How {
            at_ms: Some(since_ms),
            dry_run,
            force: true,
            rewind: true,
        };
        self.undo_as(p, how)
    }

    fn undo_as(&self, p: &VPath, how: How) -> Result<UndoReport> {
        let (report, changed) = self.undo_locked(p, how)?;
        // Once the lock is released (a request through the mount may be waiting for it
        // while the kernel holds its directory): what a mount of this process cached of
        // the restored paths goes, so that it shows them at once.
        for t in &changed {
            self.changed_behind(t);
        }
        Ok(report)
    }

    fn undo_locked(&self, p: &VPath, how: How) -> Result<(UndoReport, Vec<VPath>)> {
        let How {
            at_ms,
            dry_run,
            force,
            rewind,
        } = how;
        if !(rewind && p.depth() == 1) {
            super::rm::check_user_path(p)?;
        }
        let anchor = self.existing_ancestor(p)?;
        let _guard = self.lock(&[(anchor, LockKind::Tree)])?;
        let all = self.history(Some(p), at_ms.unwrap_or(0))?;
        let point = match at_ms {
            Some(t) => t,
            None => last_run_start(&all).ok_or_else(|| OpsError::NotFound(p.uri()))? - 1,
        };
        // The earliest entry after the point, per path: the content the path had then.
        let mut first: BTreeMap<String, &Recorded> = BTreeMap::new();
        for r in all
            .iter()
            .rev()
            .filter(|r| r.at_ms > point && r.entry.op != "undo" && r.entry.op != "mv")
        {
            first.entry(r.entry.path.clone()).or_insert(r);
        }
        if rewind {
            // A path whose first version kept since the point was born after it did not
            // exist then: none of its versions comes back (and what is there now was made
            // since too: `created_since` takes it out).
            first.retain(|_, r| r.entry.born_ms.is_none_or(|b| b <= point));
        }
        // Renames since the point, newest first: each is moved back before anything is
        // restored (what `mv a b` replaced at b comes back once b is a again).
        let moves: Vec<(VPath, VPath)> = all
            .iter()
            .filter(|r| r.at_ms > point && r.entry.op == "mv")
            .filter_map(|r| {
                let to = VPath::from_rel(r.entry.new_path.as_deref()?).ok()?;
                Some((VPath::from_rel(&r.entry.path).ok()?, to))
            })
            .collect();
        let mut report = UndoReport {
            at_ms: point,
            ..UndoReport::default()
        };
        // The plan: (target, blob, merge into an existing directory, replace what is there).
        let mut plan = Vec::new();
        // Parents before children: BTreeMap order puts "a" before "a/b".
        for (path, r) in &first {
            let target = VPath::from_rel(path)?;
            let Some(blob) = r.entry.blob.clone() else {
                let why = r.entry.reason.clone().unwrap_or_else(|| "not kept".into());
                report.conflicts.push((target.uri(), why));
                continue;
            };
            let here = self.lstat(&target)?;
            let merge = r.entry.kind == "dir" && here.as_ref().is_some_and(|m| m.is_dir());
            let replace = here.is_some() && !merge;
            // A removed path that exists again was made anew by someone: left alone unless
            // forced. An overwritten one is expected there: its current version is kept.
            if replace && !force && r.entry.op == "rm" {
                report.conflicts.push((target.uri(), "exists now".into()));
                continue;
            }
            report.restored.push((target.uri(), r.id));
            plan.push((target, blob, merge, replace));
        }
        // A rewind also takes out what was made since the point (no entry: it did not
        // exist then), deepest first, into the history.
        let created = if rewind {
            self.created_since(p, point, &first)?
        } else {
            Vec::new()
        };
        report.removed = created.iter().map(|c| c.uri()).collect();
        report
            .moved
            .extend(moves.iter().map(|(from, to)| (to.uri(), from.uri())));
        if dry_run || (plan.is_empty() && created.is_empty() && moves.is_empty()) {
            return Ok((report, Vec::new()));
        }
        // The jobs first, under the lock: a crash while copying leaves every restored file
        // with its job queued (a job for a path not restored finds nothing and is dropped),
        // and no job runs before the lock is released.
        let mut jobs = Vec::new();
        for (t, blob, _, _) in &plan {
            jobs.extend(self.derive.jobs_for_change(t));
            for (f, md) in walkdir(&self.blob_path(blob)) {
                let rel = f
                    .strip_prefix(self.blob_path(blob))
                    .unwrap_or(&f)
                    .to_string_lossy()
                    .into_owned();
                if md.is_dir() || !rel.split('/').all(super::is_source_name) {
                    continue;
                }
                if let Ok(c) = t.join_rel(&rel) {
                    jobs.extend(self.derive.jobs_for_change(&c));
                }
            }
        }
        for (from, to) in &moves {
            jobs.extend(self.derive.jobs_for_change(from));
            jobs.extend(self.derive.jobs_for_change(to));
        }
        self.queue.submit(&jobs)?;
        crate::crash_point!("undo.queued");
        // What was made since goes first (a name it took may be a rename's old name), then
        // the renames go back, then the versions are restored.
        let jobs: Vec<_> = created
            .iter()
            .flat_map(|c| self.derive.jobs_for_change(c))
            .collect();
        self.queue.submit(&jobs)?;
        for c in &created {
            match self.lstat(c)? {
                None => continue,
                Some(m) if m.is_dir() && self.has_sources(c)? => continue, // older things in it
                Some(_) => self.set_aside_for_undo(c)?,
            }
        }
        let mut back = Vec::new();
        for (from, to) in &moves {
            if created.contains(to) {
                continue; // made since: gone with the rest of what was made
            }
            // A rewind first takes out what was made since at the old name (it did not
            // exist at the point), keeping it in the history.
            let born_since =
                |q: &VPath| crate::sys::birth_ms(&self.backing(q)).is_some_and(|b| b > point);
            if rewind && self.lstat(from)?.is_some() && born_since(from) {
                self.set_aside_for_undo(from)?;
                report.removed.push(from.uri());
            }
            // Only where it is still the rename's result and its old name is free.
            if self.lstat(to)?.is_none() || self.lstat(from)?.is_some() {
                report
                    .conflicts
                    .push((to.uri(), format!("not moved back to {}", from.uri())));
                continue;
            }
            self.root
                .rename(to, from)
                .map_err(|e| OpsError::io(self.backing(to), e))?;
            self.index.rename_prefix(to, from)?;
            back.push(from.clone());
            back.push(to.clone());
        }
        for (target, blob, merge, replace) in &plan {
            if *replace && self.lstat(target)?.is_some() {
                // What is there now goes into the history first (a rename undone above may
                // have taken it away already).
                self.set_aside_for_undo(target)?;
            }
            self.make_parents(target, point)?;
            let dest = self.backing(target);
            copy_back(&self.blob_path(blob), &dest, *merge)?;
        }
        // A directory's times as kept, once everything restored into it is in (children
        // restored after it moved them on).
        for (target, blob, _, _) in plan.iter().rev() {
            if let Ok(md) = std::fs::symlink_metadata(self.blob_path(blob)) {
                if md.is_dir() {
                    let dest = self.backing(target);
                    keep_meta(&dest, &md).map_err(|e| OpsError::io(&dest, e))?;
                }
            }
        }
        crate::crash_point!("undo.restored");
        let entries: Vec<Entry> = plan
            .iter()
            .map(|(t, _, _, _)| Entry {
                op: "undo".into(),
                path: t.as_str().to_string(),
                new_path: None,
                born_ms: None,
                kind: "restored".into(),
                size: 0,
                blob: None,
                reason: Some(format!("restored as at {}", rfc3339(point))),
                mode: 0,
                uid: 0,
                gid: 0,
                pid: Some(crate::process::requester()),
                cmd: self.command_of(crate::process::requester()),
            })
            .collect();
        self.journal.record(&entries)?;
        let mut changed: Vec<VPath> = plan.into_iter().map(|(t, ..)| t).collect();
        changed.extend(created);
        changed.extend(back);
        Ok((report, changed))
    }

    /// What under `p` was made after `point` (its birth time is later) and has no entry in
    /// `kept` (an entry means it existed and is restored instead): files first, then the
    /// directories, deepest first. Internal and derived names are not the user's.
    fn created_since(
        &self,
        p: &VPath,
        point: i64,
        kept: &BTreeMap<String, &Recorded>,
    ) -> Result<Vec<VPath>> {
        let root = self.backing(p);
        let born_after = |f: &Path| crate::sys::birth_ms(f).is_some_and(|b| b > point);
        let (mut files, mut dirs) = (Vec::new(), Vec::new());
        for (f, md) in walkdir(&root) {
            let rel = f
                .strip_prefix(&root)
                .unwrap_or(&f)
                .to_string_lossy()
                .into_owned();
            if !rel.split('/').all(super::is_source_name) || !born_after(&f) {
                continue;
            }
            let c = p.join_rel(&rel)?;
            if kept.contains_key(c.as_str()) {
                continue;
            }
            if md.is_dir() {
                dirs.push(c);
            } else {
                files.push(c);
            }
        }
        // Deepest directories first: each goes once what was made in it went (one holding
        // something older, moved in since, stays).
        dirs.sort_by_key(|d| std::cmp::Reverse(d.depth()));
        files.extend(dirs);
        Ok(files)
    }

    /// Make the directories above `target` that are gone, top down, each with the mode and
    /// owner its own entry kept (a removal through the mount records every directory it
    /// takes, `rm -r` included): undoing one file brings its parents back as they were, not
    /// as a umask would make them. One with no entry after `point` gets the default mode.
    fn make_parents(&self, target: &VPath, point: i64) -> Result<()> {
        let mut missing = Vec::new();
        let mut at = target.parent();
        while let Some(d) = at {
            if d.depth() <= 1 || self.lstat(&d)?.is_some() {
                break;
            }
            at = d.parent();
            missing.push(d);
        }
        for d in missing.into_iter().rev() {
            let dest = self.backing(&d);
            match std::fs::create_dir(&dest) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(OpsError::io(&dest, e))
                }
                _ => {}
            }
            // Newest first: the last is the earliest after the point, the directory then.
            let kept = self.history(Some(&d), point)?.into_iter().rfind(|r| {
                r.at_ms > point
                    && r.entry.path == d.as_str()
                    && r.entry.kind == "dir"
                    && r.entry.op != "undo"
            });
            if let Some(r) = kept {
                let mode = std::fs::Permissions::from_mode(r.entry.mode & 0o7777);
                std::fs::set_permissions(&dest, mode).map_err(|e| OpsError::io(&dest, e))?;
                std::os::unix::fs::lchown(&dest, Some(r.entry.uid), Some(r.entry.gid))
                    .map_err(|e| OpsError::io(&dest, e))?;
            }
        }
        Ok(())
    }

    /// The nearest ancestor of `p` (itself included) that exists: what the undo locks (a
    /// TREE lock on a missing path would create it).
    fn existing_ancestor(&self, p: &VPath) -> Result<VPath> {
        let mut at = p.clone();
        loop {
            if at.depth() <= 1 || self.lstat(&at)?.is_some() {
                return Ok(at);
            }
            at = at.parent().unwrap_or_else(VPath::root);
        }
    }

    /// Move what is at `p` now into the history (an entry of its own), under the undo's lock.
    fn set_aside_for_undo(&self, p: &VPath) -> Result<()> {
        if !self.keep_removed(p, "rm")? {
            // The disk is full (or history off): what is there could not be kept.
            let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
            return Err(OpsError::io(self.backing(p), full));
        }
        // Under the undo's lock; a search meanwhile drops a hit whose file is gone.
        self.index.delete_prefix(p)?;
        Ok(())
    }
}

/// When the newest run of one process's entries began (ms): entries newest first.
fn last_run_start(all: &[Recorded]) -> Option<i64> {
    let newest = all.first()?;
    let mut start = newest.at_ms;
    for r in all {
        if r.entry.pid != newest.entry.pid || start - r.at_ms > RUN_GAP_MS {
            break;
        }
        start = r.at_ms;
    }
    Some(start)
}

/// Copy the kept `blob` (a file, symlink or tree) to `dest`, keeping modes, owners and
/// times; into an existing directory when `merge`. Only source names of a tree are copied.
fn copy_back(blob: &Path, dest: &Path, merge: bool) -> Result<()> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| OpsError::io(&p, e)
    };
    let md = std::fs::symlink_metadata(blob).map_err(io(blob))?;
    if md.is_dir() {
        if !merge {
            std::fs::create_dir(dest).map_err(io(dest))?;
        }
        for (from, m) in walkdir(blob) {
            let rel = from.strip_prefix(blob).unwrap_or(&from);
            if !rel
                .iter()
                .all(|c| super::is_source_name(&c.to_string_lossy()))
            {
                continue;
            }
            let to = dest.join(rel);
            if m.is_dir() {
                match std::fs::create_dir(&to) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(OpsError::io(&to, e))
                    }
                    _ => {}
                }
            } else {
                copy_one(&from, &to, &m)?;
            }
        }
        keep_meta(dest, &md).map_err(io(dest))?;
        return Ok(());
    }
    copy_one(blob, dest, &md)
}

fn copy_one(from: &Path, to: &Path, md: &std::fs::Metadata) -> Result<()> {
    let err = |e| OpsError::io(to, e);
    if md.file_type().is_symlink() {
        let target = std::fs::read_link(from).map_err(err)?;
        std::os::unix::fs::symlink(target, to).map_err(err)?;
        return Ok(());
    }
    // copy_file_range: a reflink where the filesystem has them.
    std::fs::copy(from, to).map_err(err)?;
    keep_meta(to, md).map_err(err)
}

/// Mode, owner and times as they were.
fn keep_meta(p: &Path, md: &std::fs::Metadata) -> std::io::Result<()> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(md.mode() & 0o7777))?;
    std::os::unix::fs::lchown(p, Some(md.uid()), Some(md.gid()))?;
    let f = std::fs::File::open(p)?;
    f.set_times(
        std::fs::FileTimes::new()
            .set_accessed(md.accessed()?)
            .set_modified(md.modified()?),
    )
}

/// A point in time as `--at` and `--since` take it: an RFC 3339 time, or a span ago
/// (`10m`, `2h`, `3d`, `1h 30m`); milliseconds since the epoch.
pub fn undo_time(t: &str) -> Result<i64, String> {
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Ok(ts.as_millisecond());
    }
    let span: jiff::Span = t.parse().map_err(|_| {
        format!("{t:?} is neither an RFC 3339 time (2026-12-04T10:00:00Z) nor a span (10m, 2h)")
    })?;
    let ago = jiff::Timestamp::now()
        .checked_sub(
            span.to_duration(jiff::SpanRelativeTo::days_are_24_hours())
                .map_err(|e| format!("{t:?}: {e}"))?,
        )
        .map_err(|e| format!("{t:?}: {e}"))?;
    Ok(ago.as_millisecond())
}

/// `ms` since the epoch as RFC 3339.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ms.to_string())
}
