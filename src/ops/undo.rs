//! undo: put back what the history kept, as an ordinary locked operation.
//!
//! `undo PATH` restores PATH (a file or a tree) as it was before the last command that
//! changed it (removed it, cut it, overwrote it or renamed another file over it): the newest run of history entries under PATH made by one command (an
//! `rm -rf` through the mount is one entry per file and directory, all of one pid; each API
//! request and each MCP tool call is a command of its own, named by its caller); `--at T`
//! restores it as it was at T instead. For each path the earliest entry after that point
//! holds its content then. A removed path that exists again is a conflict, left alone
//! (reported) unless `force`; whatever is replaced goes into the history first.
//!
//! Order: a TREE lock on PATH's nearest existing ancestor (so nothing under it changes
//! meanwhile) → the plan journalled (`Intent::Undo`) → each kept version copied back
//! (directories first, the blob kept, so the undo can be undone and the entry still shows
//! it) → the jobs a write of each restored file queues (its record, its directory's summary)
//! → an `undo` entry per path, committed with the intent's close. Only source names are
//! restored: a kept tree's summaries and lock files are derived or transient.
//!
//! Invariants (crash safety): a version is copied whole, and onto the disk, into a temporary
//! of an internal name beside its target (`.vikingfs.tmp.undo.TOKEN.N`: never listed, never
//! indexed), then renamed into place with `RENAME_NOREPLACE` — a restored path is absent or
//! whole, never partly written, and nothing there is replaced (what an undo replaces went
//! into the history first). While the intent is open, the next process to open the workspace
//! finishes the plan (`finish_undo`): it removes the temporaries, leaves what was put back
//! (the kept version is there: [`same_version`]) and puts back the rest; `fsck` names an undo
//! it could not finish and its temporaries.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::history::walkdir;
use super::{Locked, OpsError, Result};
use crate::journal::{Entry, Intent, Recorded, UndoItem};
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
        // The plan is journalled before anything changes: a crash from here on leaves the
        // intent, and the next start (any process's recovery) finishes the undo as planned.
        let token = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let intent = Intent::Undo {
            path: p.as_str().to_string(),
            point_ms: point,
            token: token.clone(),
            rewind,
            restore: plan
                .iter()
                .map(|(t, blob, merge, replace)| UndoItem {
                    path: t.as_str().to_string(),
                    blob: blob.clone(),
                    merge: *merge,
                    replace: *replace,
                })
                .collect(),
            created: created.iter().map(|c| c.as_str().to_string()).collect(),
            moves: moves
                .iter()
                .map(|(f, t)| (f.as_str().to_string(), t.as_str().to_string()))
                .collect(),
        };
        let id = self.journal.begin(&intent, &super::add::process_owner())?;
        crate::crash_point!("undo.planned");
        let work = Work {
            plan: &plan,
            created: &created,
            moves: &moves,
            point,
            rewind,
            token: &token,
            resume: false,
        };
        let (changed, entries) = self.put_back(&work, &mut report)?;
        // The jobs once what they derive from is in place, still under the lock: a job that
        // ran before (a directory's summary looks for the directory without a lock) would
        // find nothing and be dropped. A crash before this leaves the intent, whose recovery
        // queues them.
        self.queue.submit(&self.undo_jobs(&plan, &moves, &[]))?;
        crate::crash_point!("undo.restored");
        self.journal.finish_recording(&[id], &entries)?;
        Ok((report, changed))
    }

    /// The jobs of what an undo changes: each restored path and what a kept tree holds, both
    /// names of each rename moved back, and what a rewind takes out.
    fn undo_jobs(
        &self,
        plan: &[Planned],
        moves: &[(VPath, VPath)],
        created: &[VPath],
    ) -> Vec<crate::queue::NewJob> {
        let mut jobs = Vec::new();
        for (t, blob, _, _) in plan {
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
        for (from, to) in moves {
            jobs.extend(self.derive.jobs_for_change(from));
            jobs.extend(self.derive.jobs_for_change(to));
        }
        for c in created {
            jobs.extend(self.derive.jobs_for_change(c));
        }
        jobs
    }

    /// Carry out an undo's plan under its lock: take out what a rewind removes, move renames
    /// back, put each version back (each whole or not at all: [`Temps::place`]), directory
    /// times as kept. `resume`: a crashed undo's plan, finished by recovery — what it put back
    /// already (the kept version is there, [`same_version`]) is left as it is, and what a
    /// rewind takes out is never what it put back. Returns the paths changed and the `undo`
    /// entries to record with the intent's close.
    fn put_back(&self, w: &Work<'_>, report: &mut UndoReport) -> Result<(Vec<VPath>, Vec<Entry>)> {
        let Work {
            plan,
            created,
            moves,
            point,
            rewind,
            token,
            resume,
        } = *w;
        // Put back by this undo, before a crash: never taken out again as "made since".
        let ours = |c: &VPath| {
            plan.iter().any(|(t, ..)| c.starts_with(t))
                || moves.iter().any(|(from, _)| c.starts_with(from))
        };
        // What was made since goes first (a name it took may be a rename's old name), then
        // the renames go back, then the versions are restored.
        self.queue.submit(
            &created
                .iter()
                .flat_map(|c| self.derive.jobs_for_change(c))
                .collect::<Vec<_>>(),
        )?;
        for c in created {
            if resume && ours(c) {
                continue;
            }
            match self.lstat(c)? {
                None => continue,
                Some(m) if m.is_dir() && self.has_sources(c)? => continue, // older things in it
                Some(_) => self.set_aside_for_undo(c)?,
            }
        }
        let mut back = Vec::new();
        for (from, to) in moves {
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
        let mut temps = Temps {
            token,
            made: 0,
            unsynced: None,
            dirs: Default::default(),
        };
        let mut done = Vec::new();
        // In rounds: each round puts back every version with no planned version above it
        // still waiting (missing parents no planned version makes are made), all copied into
        // their temporaries, then on disk with one syncfs (an fsync per file would cost a disk flush
        // each: 2,000 files removed by `rm -rf` through the mount are 2,000 versions), then
        // renamed into place in order; a version inside a directory this round puts back waits
        // for the next.
        let mut rest: Vec<&Planned> = plan.iter().collect();
        while !rest.is_empty() {
            let waiting: Vec<&VPath> = rest.iter().map(|(t, ..)| t).collect();
            let mut ready = Vec::new();
            let mut later = Vec::new();
            for item in rest {
                let (target, blob, merge, replace) = item;
                let kept = self.blob_path(blob);
                let dest = self.backing(target);
                // Inside a directory this round puts back (or sets aside first): next round.
                if waiting
                    .iter()
                    .any(|w| *w != target && target.starts_with(w))
                {
                    later.push(item);
                    continue;
                }
                if resume && same_version(&kept, &dest) {
                    done.push(target.clone()); // put back before the crash
                    continue;
                }
                if resume && std::fs::symlink_metadata(&kept).is_err() {
                    // Given back since the crash (retention, a full disk): nothing to put back.
                    report
                        .conflicts
                        .push((target.uri(), "not kept any more".into()));
                    continue;
                }
                // Missing parents no planned version makes, with their kept modes.
                self.make_parents(target, point)?;
                let here = self.lstat(target)?;
                if *merge && here.as_ref().is_some_and(|m| m.is_dir()) {
                    self.merge_back(&kept, target, &mut temps)?;
                    done.push(target.clone());
                    continue;
                }
                // What is there now goes into the history first (a rename undone above may
                // have taken it away already); anything else there was not planned for (made
                // since the plan) and is left alone.
                if here.is_some() && !*replace {
                    report.restored.retain(|(u, _)| *u != target.uri());
                    report.conflicts.push((target.uri(), "exists now".into()));
                    continue;
                }
                let tmp = temps.make(&kept, &dest)?;
                ready.push((target, dest, tmp, here.is_some()));
            }
            temps.sync()?;
            for (target, dest, tmp, there) in ready {
                if there {
                    self.set_aside_for_undo(target)?;
                }
                if temps.place(&tmp, &dest)? {
                    done.push(target.clone());
                } else {
                    report.restored.retain(|(u, _)| *u != target.uri());
                    report.conflicts.push((target.uri(), "exists now".into()));
                }
            }
            rest = later;
        }
        let done_set: std::collections::BTreeSet<&str> = done.iter().map(|t| t.as_str()).collect();
        // A directory's times as kept, once everything restored into it is in (children
        // restored after it moved them on).
        for (target, blob, _, _) in plan.iter().rev() {
            if let Ok(md) = std::fs::symlink_metadata(self.blob_path(blob)) {
                if md.is_dir() && done_set.contains(target.as_str()) {
                    let dest = self.backing(target);
                    keep_meta(&dest, &md).map_err(|e| OpsError::io(&dest, e))?;
                }
            }
        }
        // The renames into place survive a power loss before the intent is closed.
        temps.sync_dirs();
        drop(done_set);
        let entries: Vec<Entry> = done
            .iter()
            .map(|t| Entry {
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
                pid: crate::process::requester_pid(),
                cmd: self.command_of(crate::process::requester()),
            })
            .collect();
        let mut changed = done;
        changed.extend(created.iter().cloned());
        changed.extend(back);
        Ok((changed, entries))
    }

    /// Put the kept tree `kept` back into the existing directory at `target`: what is
    /// missing there is made whole beside it and renamed in, a directory on both sides is
    /// merged in turn, and a file that differs from its kept version goes into the history
    /// first (nothing is overwritten in place).
    fn merge_back(&self, kept: &Path, target: &VPath, temps: &mut Temps<'_>) -> Result<()> {
        let dest = self.backing(target);
        let rd = std::fs::read_dir(kept).map_err(|e| OpsError::io(kept, e))?;
        let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            let n = name.to_string_lossy();
            if !super::is_source_name(&n) {
                continue;
            }
            let (from, child) = (kept.join(&name), target.join_rel(&n)?);
            let to = self.backing(&child);
            let from_dir = std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_dir());
            match std::fs::symlink_metadata(&to) {
                Ok(m) if m.is_dir() && from_dir => self.merge_back(&from, &child, temps)?,
                Ok(_) if same_version(&from, &to) => {}
                there => {
                    let tmp = temps.make(&from, &to)?;
                    if there.is_ok() {
                        self.set_aside_for_undo(&child)?;
                    }
                    temps.place(&tmp, &to)?;
                }
            }
        }
        let md = std::fs::symlink_metadata(kept).map_err(|e| OpsError::io(kept, e))?;
        keep_meta(&dest, &md).map_err(|e| OpsError::io(&dest, e))
    }

    /// Finish the undo a dead process left half-done (its intent `id`): the temporaries it
    /// left go, then its plan is carried out again from the start (see [`Locked::put_back`]'s
    /// `resume`), and its entries are recorded with the intent's close.
    pub(super) fn finish_undo(&self, id: i64, intent: &Intent) -> Result<()> {
        let Intent::Undo {
            path,
            point_ms,
            token,
            rewind,
            restore,
            created,
            moves,
        } = intent
        else {
            return Ok(());
        };
        let p = VPath::from_rel(path)?;
        let anchor = self.existing_ancestor(&p)?;
        let guard = self
            .locks
            .acquire(&[(anchor, LockKind::Tree)], std::time::Duration::ZERO)?;
        let plan = restore
            .iter()
            .map(|u| {
                Ok((
                    VPath::from_rel(&u.path)?,
                    u.blob.clone(),
                    u.merge,
                    u.replace,
                ))
            })
            .collect::<Result<Vec<Planned>>>()?;
        let created = created
            .iter()
            .map(|c| VPath::from_rel(c))
            .collect::<Result<Vec<_>, _>>()?;
        let moves = moves
            .iter()
            .map(|(f, t)| Ok((VPath::from_rel(f)?, VPath::from_rel(t)?)))
            .collect::<Result<Vec<_>>>()?;
        self.clear_temps(&plan, token);
        let work = Work {
            plan: &plan,
            created: &created,
            moves: &moves,
            point: *point_ms,
            rewind: *rewind,
            token,
            resume: true,
        };
        let (changed, entries) = self.put_back(&work, &mut UndoReport::default())?;
        // Again: the dead process may have died before it queued them.
        self.queue.submit(&self.undo_jobs(&plan, &moves, &[]))?;
        self.journal.finish_recording(&[id], &entries)?;
        drop(guard);
        for t in &changed {
            self.changed_behind(t);
        }
        Ok(())
    }

    /// Remove the temporaries undo `token` made (beside each target, and inside a directory
    /// merged into).
    fn clear_temps(&self, plan: &[Planned], token: &str) {
        let prefix = temp_prefix(token);
        let mut dirs = std::collections::BTreeSet::new();
        for (t, _, merge, _) in plan {
            let dest = self.backing(t);
            if let Some(parent) = dest.parent() {
                dirs.insert(parent.to_path_buf());
            }
            if *merge {
                dirs.extend(walkdir(&dest).filter(|(_, m)| m.is_dir()).map(|(d, _)| d));
                dirs.insert(dest);
            }
        }
        for d in dirs {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    if let Err(err) = super::history::remove_any(&e.path()) {
                        tracing::warn!(path = %e.path().display(), "removing an undo's temporary: {err}");
                    }
                }
            }
        }
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

/// When the newest run of one command's entries began (ms): entries newest first.
fn last_run_start(all: &[Recorded]) -> Option<i64> {
    let newest = all.first()?;
    let mut start = newest.at_ms;
    for r in all {
        if !same_command(&r.entry, &newest.entry) || start - r.at_ms > RUN_GAP_MS {
            break;
        }
        start = r.at_ms;
    }
    Some(start)
}

/// Whether two entries are of one command: one process (its command line may be unknown
/// for some of its entries, read after it exited), or, without a pid — an API request, an
/// MCP tool call (`process::requester_pid`) — one caller's name, which names the request.
fn same_command(a: &Entry, b: &Entry) -> bool {
    a.pid == b.pid && (a.pid.is_some() || a.cmd == b.cmd)
}

/// A planned version: (target, blob, merge into an existing directory, replace what is there).
type Planned = (VPath, String, bool, bool);

/// What [`Locked::put_back`] carries out.
#[derive(Clone, Copy)]
struct Work<'a> {
    plan: &'a [Planned],
    created: &'a [VPath],
    moves: &'a [(VPath, VPath)],
    point: i64,
    rewind: bool,
    token: &'a str,
    resume: bool,
}

/// The start of the names of undo `token`'s temporaries: internal names
/// (`.vikingfs.tmp.*`: never listed through the mount, never indexed), which `fsck` names as a
/// half-done restore when no live undo is making them.
pub(crate) fn temp_prefix(token: &str) -> String {
    format!("{TEMP_PREFIX}{token}.")
}

/// See [`temp_prefix`].
pub(crate) const TEMP_PREFIX: &str = ".vikingfs.tmp.undo.";

/// The temporaries of one undo: each version is made whole in one beside its target, put on
/// disk ([`Temps::sync`]: one syncfs for all made since the last), then renamed into place
/// without replacing anything.
struct Temps<'a> {
    token: &'a str,
    made: u64,
    /// A temporary made since the last [`Temps::sync`]: its directory.
    unsynced: Option<std::path::PathBuf>,
    /// The directories renamed into, synced once at the end.
    dirs: std::collections::BTreeSet<std::path::PathBuf>,
}

impl Temps<'_> {
    /// A copy of the kept `kept` (file, symlink or tree; only a tree's source names), with
    /// its modes, owners and times, in a new temporary beside `dest`.
    fn make(&mut self, kept: &Path, dest: &Path) -> Result<std::path::PathBuf> {
        let dir = dest.parent().unwrap_or(Path::new("/"));
        let tmp = dir.join(format!("{}{}", temp_prefix(self.token), self.made));
        self.made += 1;
        // A leftover of the same name (a crash of this very undo) goes first.
        let _ = super::history::remove_any(&tmp);
        let made = copy_whole(kept, &tmp);
        if made.is_err() {
            let _ = super::history::remove_any(&tmp);
        }
        made?;
        self.unsynced = Some(dir.to_path_buf());
        crate::crash_point!("undo.made");
        Ok(tmp)
    }

    /// Put every temporary made since the last call on disk: one syncfs (they are all on
    /// the data root's filesystem), before any of them is renamed into place.
    fn sync(&mut self) -> Result<()> {
        let Some(dir) = self.unsynced.take() else {
            return Ok(());
        };
        let f = std::fs::File::open(&dir).map_err(|e| OpsError::io(&dir, e))?;
        crate::sys::syncfs(&f).map_err(|e| OpsError::io(&dir, e))
    }

    /// Rename `tmp` to `dest` unless something is there; `Ok(false)` (and `tmp` gone) if it
    /// is.
    fn place(&mut self, tmp: &Path, dest: &Path) -> Result<bool> {
        use crate::sys::{renameat, RenameFlags, CWD};
        self.sync()?;
        let placed = match renameat(CWD, tmp, CWD, dest, RenameFlags::NOREPLACE) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
            // A filesystem without RENAME_NOREPLACE: under the undo's lock, nothing else
            // makes the name between the look and the rename.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                match std::fs::symlink_metadata(dest) {
                    Err(_) => {
                        std::fs::rename(tmp, dest).map_err(|e| OpsError::io(dest, e))?;
                        true
                    }
                    Ok(_) => false,
                }
            }
            Err(e) => {
                let _ = super::history::remove_any(tmp);
                return Err(OpsError::io(dest, e));
            }
        };
        if !placed {
            let _ = super::history::remove_any(tmp);
            return Ok(false);
        }
        if let Some(d) = dest.parent() {
            self.dirs.insert(d.to_path_buf());
        }
        crate::crash_point!("undo.placed");
        Ok(true)
    }

    /// fsync each directory renamed into (logged, not returned: what is in place is whole).
    fn sync_dirs(&self) {
        for d in &self.dirs {
            if let Err(e) = std::fs::File::open(d).and_then(|f| f.sync_all()) {
                tracing::warn!(dir = %d.display(), "syncing a directory an undo restored into: {e}");
            }
        }
    }
}

/// Copy the kept `kept` (a file, symlink or tree) to the new name `to`, keeping modes,
/// owners and times (on disk once [`Temps::sync`] ran). Only source names of a tree are
/// copied.
fn copy_whole(kept: &Path, to: &Path) -> Result<()> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| OpsError::io(&p, e)
    };
    let md = std::fs::symlink_metadata(kept).map_err(io(kept))?;
    if !md.is_dir() {
        return copy_one(kept, to, &md);
    }
    std::fs::create_dir(to).map_err(io(to))?;
    let mut dirs = vec![(to.to_path_buf(), md)];
    for (from, m) in walkdir(kept) {
        let rel = from.strip_prefix(kept).unwrap_or(&from);
        if !rel
            .iter()
            .all(|c| super::is_source_name(&c.to_string_lossy()))
        {
            continue;
        }
        let t = to.join(rel);
        if m.is_dir() {
            std::fs::create_dir(&t).map_err(io(&t))?;
            dirs.push((t, m));
        } else {
            copy_one(&from, &t, &m)?;
        }
    }
    // Deepest first: a directory's times once everything in it is made.
    for (d, m) in dirs.iter().rev() {
        keep_meta(d, m).map_err(io(d))?;
    }
    Ok(())
}

fn copy_one(from: &Path, to: &Path, md: &std::fs::Metadata) -> Result<()> {
    let err = |e| OpsError::io(to, e);
    if md.file_type().is_symlink() {
        let target = std::fs::read_link(from).map_err(err)?;
        std::os::unix::fs::symlink(target, to).map_err(err)?;
        return std::os::unix::fs::lchown(to, Some(md.uid()), Some(md.gid())).map_err(err);
    }
    // A FIFO, socket or device node kept from a removal: made again as what it was (type,
    // mode, device number), never opened (a FIFO's open waits for a writer, a device's is
    // real).
    if !md.is_file() {
        crate::sys::mknodat(crate::sys::CWD, to, md.mode(), md.rdev()).map_err(err)?;
        return keep_meta(to, md).map_err(err);
    }
    // copy_file_range: a reflink where the filesystem has them.
    crate::sys::copy_file(from, to).map_err(err)?;
    keep_meta(to, md).map_err(err)
}

/// Whether `dest` is the kept version at `kept` put back (its kind, mode, owner and, for a
/// file, size and mtime to the nanosecond — set from the kept one; a directory's mtime; a
/// symlink's target): what recovery leaves as it is.
fn same_version(kept: &Path, dest: &Path) -> bool {
    let (Ok(a), Ok(b)) = (
        std::fs::symlink_metadata(kept),
        std::fs::symlink_metadata(dest),
    ) else {
        return false;
    };
    if a.file_type() != b.file_type()
        || a.mode() != b.mode()
        || (a.uid(), a.gid()) != (b.uid(), b.gid())
    {
        return false;
    }
    if a.file_type().is_symlink() {
        return std::fs::read_link(kept).ok() == std::fs::read_link(dest).ok();
    }
    (a.is_dir() || a.len() == b.len()) && (a.mtime(), a.mtime_nsec()) == (b.mtime(), b.mtime_nsec())
}

/// Mode, owner and times as they were.
fn keep_meta(p: &Path, md: &std::fs::Metadata) -> std::io::Result<()> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(md.mode() & 0o7777))?;
    std::os::unix::fs::lchown(p, Some(md.uid()), Some(md.gid()))?;
    // By name, not through an open: `p` may be a FIFO or a device node.
    use crate::sys::TimeSpec;
    crate::sys::utimensat(
        crate::sys::CWD,
        p,
        Some(TimeSpec::At(md.atime(), md.atime_nsec() as u32)),
        Some(TimeSpec::At(md.mtime(), md.mtime_nsec() as u32)),
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
