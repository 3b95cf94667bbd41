//! add-resource: first-time add and incremental update (seed doc, "add_resource").
//!
//! 1. The local content is copied into a private staging directory under `ws.tmp_dir()` (no
//!    lock: nobody else sees it). Names that the namespace refuses stop the add there.
//! 2. The target is chosen (`--to`, else `viking://resources/NAME`, then `NAME_1`, `NAME_2`, …
//!    when taken or busy) and its lifecycle lock taken at once, without waiting: TREE for a
//!    directory, EXACT for a single file ([`super::lifecycle`]). The intent and the lifecycle
//!    are journalled together.
//! 3. The staged tree is synced into the target: hard links (no byte copies) renamed over the
//!    target's names, entries the new version no longer has removed records-first. Staging
//!    stays complete until the end, so a sync that died is simply run again by recovery.
//! 4. Embedding and summary jobs of what changed are enqueued as part of the lifecycle, the
//!    staging directory is removed and the intent closed. The lifecycle lock stays until the
//!    last of those jobs is done, so an `rm` of the resource meanwhile fails busy.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use super::keys::{embed_job, semantic_job, NewJob};
use super::lifecycle::new_handle;
use super::rm::check_user_path;
use super::{stat, Locked, OpsError, Result};
use crate::journal::Intent;
use crate::lock::LockKind;
use crate::uri::VPath;

/// Options of [`Locked::add_resource`].
#[derive(Debug, Clone, Default)]
pub struct AddOptions {
    /// Where to put it; default `PARENT/NAME` (or `NAME_1`, … when taken).
    pub to: Option<VPath>,
    /// The directory the default target is made in (it must exist); default
    /// `viking://resources`. Ignored with `to`. Either must be a resource target
    /// ([`VPath::is_resource_target`]): anything else is refused.
    pub parent: Option<VPath>,
}

/// What an add did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddReport {
    pub target: VPath,
    /// The target existed: this was an incremental update.
    pub update: bool,
    /// Files in the added content.
    pub files: usize,
    /// Files new or changed in the target.
    pub changed: usize,
    /// Entries of the old version that the new one no longer has.
    pub removed: usize,
    /// Jobs enqueued (embeddings and summaries).
    pub jobs: usize,
    /// The lifecycle handle owning the target's lock until its jobs are done.
    pub lifecycle: String,
    /// With no `--to`: the name asked for, when it was taken and the target got a `_N`
    /// suffix instead (OpenViking warns of it the same way).
    pub taken: Option<VPath>,
}

impl AddReport {
    /// OpenViking's warning for a target that got a new `_N` name, word for word.
    pub fn warning(&self) -> Option<String> {
        let t = self.taken.as_ref()?;
        Some(format!(
            "'{}' already exists. Creating '{}'. Tip: Use --to <path> to specify exact target.",
            t.uri(),
            self.target.uri()
        ))
    }
}

/// Name of the staged content inside a staging directory.
const STAGED: &str = "data";

/// What a sync changed.
#[derive(Default)]
struct Synced {
    changed: Vec<VPath>,
    dirty: BTreeSet<VPath>,
    removed: usize,
}

fn bad(path: &Path, msg: impl Into<String>) -> OpsError {
    OpsError::BadSource {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// `a.md` -> `a_1.md`, `dir` -> `dir_1`.
fn suffixed(name: &str, n: usize, is_file: bool) -> String {
    match name.rfind('.').filter(|&i| is_file && i > 0) {
        Some(i) => format!("{}_{n}{}", &name[..i], &name[i..]),
        None => format!("{name}_{n}"),
    }
}

/// The lock-owner name of this process, for journal intents (handle 0: never a lock's).
pub(crate) fn process_owner() -> String {
    format!("{}0", crate::lock::codec::process_owner_prefix())
}

impl Locked {
    /// `vikingfs add-resource LOCAL_PATH [--to URI]` (and the API's `POST /api/v1/resources`,
    /// which may name the parent instead). `progress(done, total)` follows the
    /// staging copy. Returns once the content is in place and its jobs are queued; the
    /// lifecycle lock is released by the last job.
    pub fn add_resource(
        &self,
        local: &Path,
        opts: &AddOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<AddReport> {
        // OpenViking's rule for every face (the API, MCP, the CLI, the socket): a resource
        // goes under resources/, never into an agent's tree, memories or sessions.
        if let Some(t) = opts.to.as_ref().or(opts.parent.as_ref()) {
            if !t.is_resource_target() {
                return Err(crate::uri::UriError::NotForResources(t.uri()).into());
            }
        }
        self.add_local(local, opts, false, progress)
    }

    /// Install the skill in directory `local` (its `SKILL.md` at the top) at exactly `to`, a
    /// skill's directory ([`VPath::is_skill_dir`]): the add above, with its staging, intent,
    /// lifecycle lock (TREE on `to`) and jobs, except that a skill installed again keeps the
    /// files its new version does not have, as OpenViking's `add_skill` does (it writes the
    /// new files over the package and removes nothing).
    pub fn add_skill(&self, local: &Path, to: &VPath) -> Result<AddReport> {
        if !to.is_skill_dir() {
            return Err(crate::uri::UriError::NotASkill(to.uri()).into());
        }
        if !local.join("SKILL.md").is_file() {
            return Err(bad(local, "holds no SKILL.md"));
        }
        let opts = AddOptions {
            to: Some(to.clone()),
            parent: None,
        };
        self.add_local(local, &opts, true, &mut |_, _| {})
    }

    /// `cp SRC DST` as OpenViking's `fs/cp` does it: a file copied to exactly `dst` (replaced
    /// when it is a file), a directory (`recursive` required) merged into `dst` (made when
    /// missing; what `dst` holds beyond the copy is kept). The source is read under its own
    /// lock (EXACT for a file, TREE for a directory: OpenViking's lock modes for cp) into a
    /// private staging copy; the copy is then the add above at `dst`, under `dst`'s lock of
    /// the same kind, journalled, indexed and summarised like any add. Summaries are derived
    /// again at `dst`, not copied. Never through the mount: there cp is the kernel's.
    pub fn copy(&self, src: &VPath, dst: &VPath, recursive: bool) -> Result<AddReport> {
        check_user_path(src)?;
        check_user_path(dst)?;
        if src == dst || dst.starts_with(src) || src.starts_with(dst) {
            return Err(OpsError::IntoItself {
                src: src.uri(),
                dst: dst.uri(),
            });
        }
        let is_dir = self
            .lstat(src)?
            .ok_or_else(|| OpsError::NotFound(src.uri()))?
            .is_dir();
        if is_dir && !recursive {
            return Err(OpsError::IsADirectory(src.uri()));
        }
        let parent = dst.parent().expect("depth checked");
        match self.lstat(&parent)? {
            None => return Err(OpsError::NotFound(parent.uri())),
            Some(m) if !m.is_dir() => return Err(OpsError::NotADirectory(parent.uri())),
            Some(_) => {}
        }
        let temp = self.staging_dir()?;
        let staged = temp.join(STAGED);
        let kind = if is_dir {
            LockKind::Tree
        } else {
            LockKind::Exact
        };
        let read = (|| {
            let _guard = self.lock_existing(&[(src.clone(), kind)])?;
            // Look again under the lock: it may have gone or changed kind meanwhile.
            if self.lstat(src)?.map(|m| m.is_dir()) != Some(is_dir) {
                return Err(OpsError::NotFound(src.uri()));
            }
            stage_from(&self.backing(src), &staged, true, &mut |_, _| {})
        })();
        let files = match read {
            Ok(n) => n,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&temp);
                return Err(e);
            }
        };
        // A crash here leaves only the private staging copy, as `add.staged` does (fsck
        // removes it); from here the copy is an add, with the add's crash points.
        let opts = AddOptions {
            to: Some(dst.clone()),
            parent: None,
        };
        self.add_staged(temp, dst.name(), !is_dir, files, &opts, true)
    }

    /// A fresh private staging directory in the workspace's tmp dir.
    fn staging_dir(&self) -> Result<PathBuf> {
        let temp = self.ws.tmp_dir().join(format!(
            "add-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&temp).map_err(|e| OpsError::io(&temp, e))?;
        Ok(temp)
    }

    /// The add of local content `local` (staged first), its target already checked by the
    /// caller; `overlay` keeps what the target holds beyond the new content.
    fn add_local(
        &self,
        local: &Path,
        opts: &AddOptions,
        overlay: bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<AddReport> {
        let meta = std::fs::metadata(local).map_err(|e| OpsError::io(local, e))?;
        let is_file = meta.is_file();
        if !is_file && !meta.is_dir() {
            return Err(bad(local, "not a regular file or directory"));
        }
        let abs = std::fs::canonicalize(local).map_err(|e| OpsError::io(local, e))?;
        if abs.starts_with(self.ws.root()) {
            return Err(bad(local, "lies inside the workspace"));
        }
        let name = abs
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| bad(local, "has no usable name"))?
            .to_string();
        crate::uri::check_component(&name, &name).map_err(|source| OpsError::SourceName {
            path: local.to_path_buf(),
            source,
        })?;

        // 1. Stage a private copy.
        let temp = self.staging_dir()?;
        let staged = temp.join(STAGED);
        let files = match stage_from(&abs, &staged, false, progress) {
            Ok(n) => n,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&temp);
                return Err(e);
            }
        };
        crate::crash_point!("add.staged");
        self.add_staged(temp, &name, is_file, files, opts, overlay)
    }

    /// Steps 2-4 of an add whose content (`files` files, named `name`) is staged in `temp`.
    fn add_staged(
        &self,
        temp: PathBuf,
        name: &str,
        is_file: bool,
        files: usize,
        opts: &AddOptions,
        overlay: bool,
    ) -> Result<AddReport> {
        let staged = temp.join(STAGED);
        // 2. Target and lifecycle lock.
        let handle = new_handle();
        let kind = if is_file {
            LockKind::Exact
        } else {
            LockKind::Tree
        };
        let (target, update) = match self.claim_target(name, is_file, opts, &handle, kind) {
            Ok(t) => t,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&temp);
                return Err(e);
            }
        };
        let intent = Intent::Add {
            temp: temp.clone(),
            target: target.as_str().to_string(),
            handle: handle.clone(),
            file: is_file,
            overlay,
        };
        let id = match self
            .journal
            .begin_add(&intent, &process_owner(), &target, kind)
        {
            Ok(id) => id,
            Err(e) => {
                let _ = self.locks.release_owned(&target, &handle);
                let _ = std::fs::remove_dir_all(&temp);
                return Err(e.into());
            }
        };
        crate::crash_point!("add.locked");

        // 3. Sync, 4. jobs.
        let synced = self.sync_into(&staged, &target, is_file, overlay)?;
        crate::crash_point!("add.synced");
        let jobs = self.enqueue_add_jobs(
            &target,
            &handle,
            kind,
            &synced.changed,
            &synced.dirty,
            is_file,
        )?;
        crate::crash_point!("add.enqueued");
        self.finish_add(&temp, &handle, &target, id)?;
        let taken = match (&opts.to, target.parent()) {
            (None, Some(parent)) if target.name() != name => parent.join(name).ok(),
            _ => None,
        };
        Ok(AddReport {
            taken,
            target,
            update,
            files,
            changed: synced.changed.len(),
            removed: synced.removed,
            jobs,
            lifecycle: handle,
        })
    }

    /// Pick the target and take its lifecycle lock. Returns it and whether it existed.
    fn claim_target(
        &self,
        name: &str,
        is_file: bool,
        opts: &AddOptions,
        handle: &str,
        kind: LockKind,
    ) -> Result<(VPath, bool)> {
        if let Some(to) = &opts.to {
            check_user_path(to)?;
            let parent = to.parent().expect("depth checked");
            let pfs = self.backing(&parent);
            if stat(&pfs)?.is_some_and(|m| !m.is_dir()) {
                return Err(OpsError::NotADirectory(parent.uri()));
            }
            std::fs::create_dir_all(&pfs).map_err(|e| OpsError::io(&pfs, e))?;
            let exists = match stat(&self.backing(to))? {
                None => false,
                Some(m) if m.is_dir() == is_file => {
                    return Err(if is_file {
                        OpsError::IsADirectory(to.uri())
                    } else {
                        OpsError::NotADirectory(to.uri())
                    })
                }
                Some(_) => true,
            };
            self.lifecycle_acquire(handle, to, kind)?;
            return Ok((to.clone(), exists));
        }
        let base = match &opts.parent {
            Some(dir) => {
                match stat(&self.backing(dir))? {
                    None => return Err(OpsError::NotFound(dir.uri())),
                    Some(m) if !m.is_dir() => return Err(OpsError::NotADirectory(dir.uri())),
                    Some(_) => {}
                }
                dir.clone()
            }
            None => VPath::root().join("resources")?,
        };
        for n in 0..10_000usize {
            let cand = base.join(&if n == 0 {
                name.to_string()
            } else {
                suffixed(name, n, is_file)
            })?;
            let fs = self.backing(&cand);
            if stat(&fs)?.is_some() {
                continue;
            }
            match self.lifecycle_acquire(handle, &cand, kind) {
                Ok(()) => {}
                Err(e) if e.is_busy() => continue,
                Err(e) => return Err(e),
            }
            // Someone may have created it between the look and the lock.
            let taken = match stat(&fs)? {
                // Anything but internal files (summaries too) makes it someone else's.
                Some(m) if m.is_dir() && !is_file => {
                    self.has_entry(&cand, |n| !crate::uri::is_internal_name(n))?
                }
                Some(_) => true,
                None => false,
            };
            if taken {
                self.locks.release_owned(&cand, handle)?;
                continue;
            }
            return Ok((cand, false));
        }
        Err(OpsError::Exists(base.join(name)?.uri()))
    }

    /// Make `target` hold exactly the staged content. Idempotent: staging is left complete.
    fn sync_into(
        &self,
        staged: &Path,
        target: &VPath,
        is_file: bool,
        overlay: bool,
    ) -> Result<Synced> {
        let mut out = Synced::default();
        if is_file {
            let fs = self.backing(target);
            if !same_content(staged, &fs).map_err(|e| OpsError::io(&fs, e))? {
                self.index.delete(target)?;
                self.keep_version(target, "add", super::history::Keep::Link);
                link_replace(staged, &fs)?;
                out.changed.push(target.clone());
            }
        } else {
            self.sync_dir(staged, target, overlay, &mut out)?;
        }
        Ok(out)
    }

    fn sync_dir(&self, src: &Path, dst: &VPath, overlay: bool, out: &mut Synced) -> Result<()> {
        let dst_fs = self.backing(dst);
        // 0755 whatever the umask: the daemon (which adds for the API) runs without one.
        let made = {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o755).create(&dst_fs)
        };
        match made {
            Ok(()) => {
                out.dirty.insert(dst.clone());
                if let Some(p) = dst.parent() {
                    out.dirty.insert(p);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(OpsError::io(&dst_fs, e)),
        }
        let mut want = std::collections::BTreeMap::new();
        for e in std::fs::read_dir(src).map_err(|e| OpsError::io(src, e))? {
            let e = e.map_err(|e| OpsError::io(src, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e
                .file_type()
                .map_err(|x| OpsError::io(e.path(), x))?
                .is_dir();
            want.insert(name, is_dir);
        }
        // Entries the new version no longer has (or has as the other kind): records first.
        for e in std::fs::read_dir(&dst_fs).map_err(|e| OpsError::io(&dst_fs, e))? {
            let e = e.map_err(|e| OpsError::io(&dst_fs, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !super::is_source_name(&name) {
                continue;
            }
            let is_dir = e
                .file_type()
                .map_err(|x| OpsError::io(e.path(), x))?
                .is_dir();
            // An overlay keeps what the new version does not name; an entry of the other
            // kind is still replaced (a file where the new version has a directory).
            match want.get(&name) {
                Some(&d) if d == is_dir => continue,
                None if overlay => continue,
                _ => {}
            }
            let child = dst.join(&name)?;
            self.index.delete_prefix(&child)?;
            // What the new version drops is kept in the history (`undo` gives it back).
            if !self.keep_removed(&child, "add")? {
                let r = if is_dir {
                    std::fs::remove_dir_all(e.path())
                } else {
                    std::fs::remove_file(e.path())
                };
                r.map_err(|x| OpsError::io(e.path(), x))?;
            }
            out.removed += 1;
            out.dirty.insert(dst.clone());
        }
        for (name, is_dir) in want {
            let child = dst.join(&name)?;
            let s = src.join(&name);
            if is_dir {
                self.sync_dir(&s, &child, overlay, out)?;
            } else {
                let fs = self.backing(&child);
                if same_content(&s, &fs).map_err(|e| OpsError::io(&fs, e))? {
                    continue;
                }
                // A changed file loses its old record first: missed until re-indexed,
                // never found for words it no longer holds. The version it replaces is kept.
                self.index.delete(&child)?;
                self.keep_version(&child, "add", super::history::Keep::Link);
                link_replace(&s, &fs)?;
                out.changed.push(child);
                out.dirty.insert(dst.clone());
            }
        }
        Ok(())
    }

    /// Register the jobs as the lifecycle's keys, then enqueue them (keys first: a job that
    /// finishes at once must find its key to clear it).
    fn enqueue_add_jobs(
        &self,
        target: &VPath,
        handle: &str,
        kind: LockKind,
        changed: &[VPath],
        dirty: &BTreeSet<VPath>,
        is_file: bool,
    ) -> Result<usize> {
        let h = Some(handle);
        let mut jobs: Vec<NewJob> = changed
            .iter()
            .filter(|f| self.derive.derives(f, false))
            .map(|f| embed_job(f, h))
            .collect();
        for d in dirty
            .iter()
            .filter(|d| d.starts_with(target) && self.derive.summarised(d))
        {
            jobs.push(semantic_job(d, h));
        }
        let keys: Vec<String> = jobs.iter().filter_map(|j| j.key.clone()).collect();
        self.journal.lifecycle_start(handle, target, kind, &keys)?;
        // A rule file that came with the resource: what it ignores may have been walked
        // before its directory's rules were looked at again.
        for f in changed {
            if f.name() == crate::content::IGNORE_FILE {
                if let Some(d) = f.parent() {
                    self.derive.rules.invalidate(&d);
                    jobs.push(super::keys::rederive_job(&d));
                }
            }
        }
        // Outside the resource: its parent's summary, not part of the lifecycle (the target's
        // own summary propagates there too once written).
        if is_file || dirty.iter().any(|d| !d.starts_with(target)) {
            if let Some(parent) = target.parent().filter(|d| self.derive.summarised(d)) {
                jobs.push(semantic_job(&parent, None));
            }
        }
        self.queue.enqueue_many(&jobs)?;
        Ok(jobs.len())
    }

    fn finish_add(&self, temp: &Path, handle: &str, target: &VPath, intent: i64) -> Result<()> {
        if let Err(e) = std::fs::remove_dir_all(temp) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %temp.display(), "removing staging: {e}");
            }
        }
        crate::crash_point!("add.unstaged");
        self.journal.finish(intent)?;
        // Jobs that finished while the intent was open left the release to us.
        if self
            .journal
            .lifecycle(handle)?
            .is_some_and(|l| l.pending == 0)
        {
            self.locks.release_owned(target, handle)?;
            self.journal.lifecycle_end(handle)?;
        }
        Ok(())
    }

    /// Finish an add whose process died: re-take its lifecycle lock, sync again from the
    /// staging when it is still there, queue every file and directory of the target (jobs
    /// skip what is already current), and close it.
    pub(crate) fn recover_add(
        &self,
        id: i64,
        temp: &Path,
        target: &VPath,
        handle: &str,
        is_file: bool,
        overlay: bool,
    ) -> Result<()> {
        let kind = if is_file {
            LockKind::Exact
        } else {
            LockKind::Tree
        };
        self.journal.lifecycle_start(handle, target, kind, &[])?;
        if !self.lifecycle_keep(handle)? {
            self.journal.lifecycle_start(handle, target, kind, &[])?;
            self.lifecycle_acquire(handle, target, kind)?;
        }
        let staged = temp.join(STAGED);
        if stat(&staged)?.is_some() {
            self.sync_into(&staged, target, is_file, overlay)?;
        }
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        if is_file {
            files.push(target.clone());
        } else {
            dirs.push(target.clone());
            self.walk(target, &mut files, &mut dirs)?;
        }
        let dirty: BTreeSet<VPath> = dirs.into_iter().collect();
        self.enqueue_add_jobs(target, handle, kind, &files, &dirty, is_file)?;
        if !is_file {
            self.enqueue_parent_summary(target)?;
        }
        self.finish_add(temp, handle, target, id)
    }
}

/// Copy `src` (file or tree) to `dst`. Symlinks and special files are skipped (logged);
/// a name the namespace refuses is an error naming it, except, for a source in the workspace
/// (`in_workspace`: a copy), its internal names (lock files, temporaries), which are not
/// content and are skipped. Returns the number of files.
fn stage_from(
    src: &Path,
    dst: &Path,
    in_workspace: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<usize> {
    let mut plan: Vec<(PathBuf, bool)> = Vec::new();
    plan_tree(src, Path::new(""), in_workspace, &mut plan)?;
    let total = plan.iter().filter(|(_, d)| !d).count() as u64;
    let mut done = 0u64;
    progress(0, total);
    for (rel, is_dir) in &plan {
        let (s, d) = if rel.as_os_str().is_empty() {
            (src.to_path_buf(), dst.to_path_buf())
        } else {
            (src.join(rel), dst.join(rel))
        };
        if *is_dir {
            std::fs::create_dir_all(&d).map_err(|e| OpsError::io(&d, e))?;
        } else {
            crate::sys::copy_file(&s, &d).map_err(|e| OpsError::io(&s, e))?;
            done += 1;
            progress(done, total);
        }
        // A copy takes the tags along, as OpenViking's cp copies a path's records with them.
        if in_workspace {
            if let Some(tags) = crate::sys::path_xattr(&s, super::TAGS_XATTR) {
                crate::sys::set_path_xattr(&d, super::TAGS_XATTR, &tags)
                    .map_err(|e| OpsError::io(&d, e))?;
            }
        }
    }
    Ok(total as usize)
}

fn plan_tree(
    root: &Path,
    rel: &Path,
    in_workspace: bool,
    plan: &mut Vec<(PathBuf, bool)>,
) -> Result<()> {
    let here = if rel.as_os_str().is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let meta = std::fs::symlink_metadata(&here).map_err(|e| OpsError::io(&here, e))?;
    if meta.is_file() {
        plan.push((rel.to_path_buf(), false));
        return Ok(());
    }
    if !meta.is_dir() {
        tracing::warn!(path = %here.display(), "skipped: not a regular file or directory");
        return Ok(());
    }
    plan.push((rel.to_path_buf(), true));
    let mut names = Vec::new();
    for e in std::fs::read_dir(&here).map_err(|e| OpsError::io(&here, e))? {
        let e = e.map_err(|e| OpsError::io(&here, e))?;
        let name = e
            .file_name()
            .into_string()
            .map_err(|n| bad(&here.join(&n), "name is not UTF-8"))?;
        if in_workspace && crate::uri::is_internal_name(&name) {
            continue;
        }
        crate::uri::check_component(&name, &here.join(&name).to_string_lossy()).map_err(
            |source| OpsError::SourceName {
                path: here.join(&name),
                source,
            },
        )?;
        if crate::uri::is_sidecar_name(&name) {
            // Summaries are derived here; the source's own copies are not taken over.
            continue;
        }
        names.push(name);
    }
    names.sort();
    for n in names {
        plan_tree(root, &rel.join(n), in_workspace, plan)?;
    }
    Ok(())
}

/// Put `src`'s content at `dst` atomically: a hard link to a temp name, renamed over.
fn link_replace(src: &Path, dst: &Path) -> Result<()> {
    let dir = dst.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".vikingfs.tmp.{}", uuid::Uuid::new_v4().simple()));
    if let Err(e) = std::fs::hard_link(src, &tmp) {
        tracing::debug!("hard link failed ({e}); copying");
        crate::sys::copy_file(src, &tmp).map_err(|e| OpsError::io(&tmp, e))?;
    }
    if let Err(e) = std::fs::rename(&tmp, dst) {
        let _ = std::fs::remove_file(&tmp);
        return Err(OpsError::io(dst, e));
    }
    Ok(())
}

fn same_content(a: &Path, b: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (ma, mb) = match (std::fs::metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) => return Err(e),
        (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        (_, Err(e)) => return Err(e),
    };
    if !mb.is_file() || ma.len() != mb.len() {
        return Ok(false);
    }
    if ma.ino() == mb.ino() && ma.dev() == mb.dev() {
        return Ok(true);
    }
    Ok(crate::sys::read_file(a)? == crate::sys::read_file(b)?)
}
